"""Two models of one's own built from the package's pieces, with data simulated for them.

* :func:`several_series`: S series observed at the same inputs share the kernel hyperparameters and the
  noise; a ``numpyro.plate`` over the series makes the :class:`~bayes_rbfn.models.distributions.SparseGP`
  site a batch of S independent marginals (batch shape (S,), event shape (N,)), one row of Y each::

      with numpyro.plate("series", S):
          numpyro.sample("y", SparseGP(kernel, X, Z, noise), obs=Y)   # Y: (S, N)

  The log density is the sum over the series of log N(y_s | m, Q_ff + σ²I); the kernel blocks of the
  shared inputs are computed once for all of them.
* :func:`heteroscedastic`: the noise standard deviation varies with the input, and its logarithm is
  itself an RBF network (:func:`~bayes_rbfn.models.layers.rbfn`, the SoR prior on its weights)::

      log_sigma = rbfn("log_sigma", noise_kernel, X, Z, mean=c)       # (N,)
      numpyro.sample("y", SparseGP(kernel, X, Z, jnp.exp(log_sigma)), obs=y)

  y ~ N(m, Q_ff + diag(σ²)) with one σ_i per point: the Woodbury pass takes the diagonal D = diag(σ²)
  as it takes FITC's (:func:`bayes_rbfn.gp.sparse.training_factor`), so the cost stays O(NM²). This is
  the latent-noise GP of Goldberg, Williams & Bishop [1] with a sparse GP on y and an RBF network on
  log σ, whose weights NUTS samples jointly with the hyperparameters.

The data: :func:`simulate_series` draws S series from the model's own prior at given hyperparameters;
:func:`motorcycle_like` simulates data shaped like the motorcycle-crash accelerations of Silverman [2]
(nothing is downloaded): a flat, nearly noiseless start, a sharp dip and a damped oscillation, with
noise that grows after the impact.

Both models expect inputs of about unit range and targets of about unit spread (their priors are set
for that): scale the inputs and the targets first, and undo the scale on the results.

References
----------
[1] Goldberg, P. W., Williams, C. K. I. & Bishop, C. M. (1998). Regression with input-dependent noise: a
    Gaussian process treatment. NIPS 10.
[2] Silverman, B. W. (1985). Some aspects of the spline smoothing approach to non-parametric regression
    curve fitting. JRSS B 47, 1–52.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from bayes_rbfn.gp.kernels import SquaredExponential
from bayes_rbfn.models.distributions import SparseGP
from bayes_rbfn.models.layers import rbfn

__all__ = ["heteroscedastic", "motorcycle_like", "several_series", "simulate_series"]


def several_series(
    X: Any, Z: Any, Y: Any = None, *, num_series: int | None = None, approx: str = "sor"
) -> None:
    """S series at the same inputs with shared hyperparameters: y_s ~ SparseGP(kernel, X, Z, σ, mean=c).

    Sites: ``lengthscale`` ~ LogNormal(log 0.3, 0.5), ``variance`` ~ LogNormal(0, 0.5), ``noise`` (σ) ~
    LogNormal(log 0.2, 0.5), ``mean`` (c) ~ N(0, 1), and the observed ``y`` (S, N) under the plate
    ``series``.

    Args:
        X: (N, D) or (N,) inputs (about unit range).
        Z: (M, D) or (M,) inducing inputs.
        Y: (S, N) observations, or None to simulate them (then ``num_series`` gives S).
        num_series: S, the number of series when ``Y`` is None.
        approx: the :class:`~bayes_rbfn.models.distributions.SparseGP` approximation.
    """
    if Y is None and num_series is None:
        raise ValueError("num_series: needed when Y is None (how many series to simulate)")
    S = int(num_series) if Y is None else int(jnp.shape(Y)[0])
    ell = numpyro.sample("lengthscale", dist.LogNormal(np.log(0.3), 0.5))
    s2 = numpyro.sample("variance", dist.LogNormal(0.0, 0.5))
    noise = numpyro.sample("noise", dist.LogNormal(np.log(0.2), 0.5))
    c = numpyro.sample("mean", dist.Normal(0.0, 1.0))
    kernel = SquaredExponential(lengthscale=ell, variance=s2)
    with numpyro.plate("series", S):
        numpyro.sample("y", SparseGP(kernel, X, Z, noise, approx=approx, mean=c), obs=Y)


def heteroscedastic(X: Any, Z: Any, y: Any = None, *, approx: str = "sor") -> None:
    """y ~ SparseGP(kernel, X, Z, σ(X)) with log σ(x) = c + k_σ(x, Z) α_σ, an RBF network on the log noise.

    Sites: ``lengthscale`` ~ LogNormal(log 0.1, 0.5) and ``variance`` ~ LogNormal(0, 1) of f's kernel;
    ``noise_lengthscale`` ~ LogNormal(log 0.2, 0.5), ``noise_variance`` ~ LogNormal(log 0.5, 0.5) and
    ``noise_mean`` (c) ~ N(log 0.3, 1) of the log noise; the layer's ``log_sigma_v`` (whitened weights,
    (M,)), ``log_sigma_alpha`` and ``log_sigma`` (log σ at X, (N,)); the observed ``y`` (N,).

    Args:
        X: (N, D) or (N,) inputs (about unit range).
        Z: (M, D) or (M,) inducing inputs, shared by f and the noise network.
        y: (N,) observations (about unit spread), or None to simulate them.
        approx: the :class:`~bayes_rbfn.models.distributions.SparseGP` approximation of f.
    """
    ell = numpyro.sample("lengthscale", dist.LogNormal(np.log(0.1), 0.5))
    s2 = numpyro.sample("variance", dist.LogNormal(0.0, 1.0))
    ell_noise = numpyro.sample("noise_lengthscale", dist.LogNormal(np.log(0.2), 0.5))
    s2_noise = numpyro.sample("noise_variance", dist.LogNormal(np.log(0.5), 0.5))
    c = numpyro.sample("noise_mean", dist.Normal(np.log(0.3), 1.0))
    noise_kernel = SquaredExponential(lengthscale=ell_noise, variance=s2_noise)
    log_sigma = rbfn("log_sigma", noise_kernel, X, Z, mean=c)
    kernel = SquaredExponential(lengthscale=ell, variance=s2)
    numpyro.sample("y", SparseGP(kernel, X, Z, jnp.exp(log_sigma), approx=approx), obs=y)


def simulate_series(
    key: jax.Array,
    X: Any,
    Z: Any,
    num_series: int,
    *,
    lengthscale: float = 0.3,
    variance: float = 1.0,
    noise: float = 0.2,
    mean: float = 0.0,
    approx: str = "sor",
) -> jax.Array:
    """``num_series`` independent draws from :func:`several_series`'s marginal, shape (num_series, N).

    At the given hyperparameters.
    """
    kernel = SquaredExponential(lengthscale=lengthscale, variance=variance)
    marginal = SparseGP(kernel, X, Z, noise, approx=approx, mean=mean)
    return marginal.expand((num_series,)).sample(key)


def motorcycle_like(n: int = 133, seed: int = 0) -> dict[str, np.ndarray]:
    """Simulated data shaped like the motorcycle-crash accelerations [2] (times in ms, acceleration in g).

    Times uniform on [2.4, 57.6] ms, sorted. The mean is 0 before the impact at t₀ = 14 ms, then a damped
    oscillation −120 sin(π (t − t₀)/10) exp(−(t − t₀)/12): a sharp dip to about −80 g near 19 ms, a rebound
    near 29 ms, dying out. The noise standard deviation rises from 2 g before the impact to about 27 g
    after it, 2 + 25 / (1 + exp(−(t − 16)/1.5)).

    Returns:
        {"t": (n,) times, "y": (n,) accelerations, "mean": (n,) the noiseless curve, "noise": (n,) the
        noise standard deviation at each time}.
    """
    gen = np.random.default_rng(seed)
    t = np.sort(gen.uniform(2.4, 57.6, n))
    after = np.maximum(t - 14.0, 0.0)
    mean = -120.0 * np.sin(np.pi * after / 10.0) * np.exp(-after / 12.0)
    noise = 2.0 + 25.0 / (1.0 + np.exp(-(t - 16.0) / 1.5))
    return {"t": t, "y": mean + noise * gen.standard_normal(n), "mean": mean, "noise": noise}
