"""The RBF network as a layer: ``f = rbfn(name, kernel, X, Z)`` in any NumPyro model, under any likelihood.

The network f(x) = m(x) + k(x, Z) α with the prior α ~ N(0, K_uu⁻¹) is the SoR Gaussian process
(docs/mathematics.md#function-space-and-weight-space-agree): Cov f = K_fu K_uu⁻¹ K_uf = Q_ff. The layer
samples it non-centred, which is the geometry NUTS handles best when the data inform α weakly (counts,
labels): whitened weights v ~ N(0, I_M) and

    α = L_uu⁻ᵀ v   (so Cov α = L_uu⁻ᵀ L_uu⁻¹ = K_uu⁻¹),     f = m + K_fu α.

Sites (with ``name = "f"``): ``f_v`` (sample, (M,)), ``f_alpha`` (deterministic, (M,)), ``f``
(deterministic, (N,)). Where K_uu cannot be factorised (coincident centres without jitter, say) the log
density of ``f_v`` is -inf, so NUTS rejects the point, and α = 0 there so that no likelihood sees a NaN.
The observation model is the user's::

    def model(X, Z, k=None):
        ell = numpyro.sample("lengthscale", dist.LogNormal(0.0, 1.0))
        s2 = numpyro.sample("variance", dist.LogNormal(0.0, 1.0))
        f = bayes_rbfn.rbfn("f", SquaredExponential(lengthscale=ell, variance=s2), X, Z, mean=1.0)
        numpyro.sample("k", dist.Poisson(jnp.exp(f)), obs=k)

:func:`predict_rbfn` maps posterior draws of α and the hyperparameters to f* = m(x*) + K_*u α at new inputs;
:func:`bayes_rbfn.infer.predictive.predict_model` does the same from the model itself, replaying it at each
draw and reading each layer's :class:`LayerRecord` from the model's trace (:func:`layer_records`): the
weights' deterministic site ``{name}_alpha`` carries the layer's kernel, centres and mean in its NumPyro
message, so nothing is kept outside the trace.

Where the data pin f down (thousands of points on a smooth layer), the whitened weights have to move with
every hyperparameter, a funnel for NUTS; ``centred=True`` samples the network's values at its centres
instead, u = K_uu α ~ N(0, K_uu) (site ``f_u``), which the data then fix whatever the hyperparameters [1].

References
----------
[1] Papaspiliopoulos, O., Roberts, G. O. & Sköld, M. (2007). A general framework for the parametrization
    of hierarchical models. Statistical Science 22(1), 59–73.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from bayes_rbfn.gp import linalg
from bayes_rbfn.gp.kernels import Additive, Kernel
from bayes_rbfn.gp.validation import check_X
from bayes_rbfn.models.common import SortedPytreeFields
from bayes_rbfn.models.means import mean_vector

__all__ = ["LAYER_KEY", "LayerRecord", "layer_records", "predict_rbfn", "rbfn"]


@dataclass(frozen=True, eq=False)
class LayerRecord:
    """What one call of :func:`rbfn` needs to predict at new inputs: its kernel, centres, mean and weights.

    Attributes:
        kernel: the kernel of this call (its hyperparameters at the draw the model ran at).
        Z: (M, D) centres. alpha: (M,) weights α = L_uu⁻ᵀ v.
        mean: m as given to :func:`rbfn` (a number, an (N,) array at X, or a callable of X).
    """

    kernel: Kernel
    Z: jax.Array
    alpha: jax.Array
    mean: Any

    @linalg.full_precision
    def predict(self, X_test: jax.Array, mean_test: Any = None) -> jax.Array:
        """f* = m(x*) + K_*u α at (S, D) inputs, shape (S,).

        ``mean_test`` (S,) replaces m(x*), and is needed when the mean was an array at X.
        """
        if mean_test is None and not callable(self.mean) and jnp.ndim(self.mean) != 0:
            raise ValueError(
                "mean_test: the layer's mean was given as an array at X, so its values at X_test are "
                "needed; pass mean_test=(S,) or give the mean as a number or a callable of X"
            )
        X_test = check_X(X_test, "X_test", dim=self.Z.shape[1]).astype(self.Z.dtype)
        if mean_test is None:
            offset = mean_vector(self.mean, X_test)
        else:
            offset = mean_vector(mean_test, X_test, "mean_test")
        return offset + self.kernel.inducing_cross(self.Z, X_test).T @ self.alpha


#: The key of the weights' site message that holds ``(kernel, Z, mean)`` of its layer.
LAYER_KEY = "rbfn_layer"


def _weights_site(name: str, weights: jax.Array, kernel: Kernel, Z: jax.Array, mean: Any) -> jax.Array:
    """``numpyro.deterministic(f"{name}_alpha", weights)``, its message also carrying the layer.

    The message is NumPyro's deterministic one with one more key, :data:`LAYER_KEY`; a trace keeps it,
    every handler treats the site as any deterministic site, and outside a handler it is the value.
    """
    message = {
        "type": "deterministic",
        "name": f"{name}_alpha",
        "value": weights,
        "cond_indep_stack": [],
        LAYER_KEY: (kernel, Z, mean),
    }
    return numpyro.primitives.apply_stack(message)["value"]


def layer_records(trace: Mapping[str, Mapping[str, Any]]) -> dict[str, LayerRecord]:
    """The :class:`LayerRecord` of every :func:`rbfn` call in a model's trace, by the layer's name.

    Args:
        trace: a NumPyro trace (``numpyro.handlers.trace(model).get_trace(...)``).

    Returns:
        ``{name: LayerRecord}``, the weights being the value of the site ``{name}_alpha`` in the trace
        (the draw's, where the trace substituted them). A layer is named as its f site, so under
        ``numpyro.handlers.scope`` it carries the scope's prefix as the sites do.
    """
    records = {}
    for site in trace.values():
        if LAYER_KEY in site:
            kernel, Z, mean = site[LAYER_KEY]
            name = site["name"].removesuffix("_alpha")  # f's name, with any scope's prefix
            records[name] = LayerRecord(kernel=kernel, Z=Z, alpha=site["value"], mean=mean)
    return records


class _WhitenedWeights(SortedPytreeFields, dist.Normal):
    """N(loc, 1) per whitened weight, whose log density is -inf wherever ``factorised`` is False.

    Draws are the plain Normal's; only ``log_prob`` changes, so a failed factorisation of K_uu inside
    the layer makes the model's log density -inf without adding a site to the model.
    """

    pytree_data_fields = ("factorised",)

    def __init__(self, loc: jax.Array, factorised: jax.Array) -> None:
        self.factorised = factorised
        super().__init__(loc, 1.0)

    def log_prob(self, value: jax.Array) -> jax.Array:
        return jnp.where(self.factorised, super().log_prob(value), -jnp.inf)


class _CentredValues(SortedPytreeFields, dist.MultivariateNormal):
    """N(0, L Lᵀ) for the network's values u at its centres, -inf wherever ``factorised`` is False."""

    pytree_data_fields = ("factorised",)

    def __init__(self, Luu: jax.Array, factorised: jax.Array) -> None:
        self.factorised = factorised
        super().__init__(jnp.zeros(Luu.shape[-1], Luu.dtype), scale_tril=Luu)

    def log_prob(self, value: jax.Array) -> jax.Array:
        return jnp.where(self.factorised, super().log_prob(value), -jnp.inf)


@linalg.full_precision
def rbfn(
    name: str,
    kernel: Kernel,
    X: Any,
    Z: Any,
    *,
    mean: Any = 0.0,
    jitter: float | None = None,
    centred: bool = False,
) -> jax.Array:
    """An RBF network with the SoR prior on its weights, as sites of the enclosing NumPyro model.

    Args:
        name: the site of f; the whitened weights are ``{name}_v``, the weights ``{name}_alpha``.
        kernel: a :class:`~bayes_rbfn.gp.kernels.Kernel` (hyperparameters may be sample values).
        X: (N, D) or (N,) inputs.
        Z: (M, D) or (M,) centres (inducing inputs).
        mean: m(x): a number, an (N,) array or a callable of X.
        jitter: relative jitter on K_uu (default: the package's policy,
            :func:`bayes_rbfn.gp.linalg.cholesky`).
        centred: sample the network's values at its centres, u = K_uu α ~ N(0, K_uu) (site
            ``{name}_u``, α = K_uu⁻¹ u) instead of the whitened weights: the better geometry where the data
            pin f down, so that whitened weights would have to move with every hyperparameter [1].

    Returns:
        f = m + K_fu α, shape (N,), also recorded as the deterministic site ``name``; where K_uu cannot be
        factorised, the model's log density is -inf and f = m. With an
        :class:`~bayes_rbfn.gp.kernels.Additive` kernel (Z stacked by component) each component's
        contribution K_{f,u_c} α_c is recorded too, as the site ``{name}_{component}``.
    """
    if not isinstance(kernel, Kernel):
        raise ValueError(f"kernel: expected a bayes_rbfn.gp.kernels.Kernel, got {type(kernel).__name__}")
    X = check_X(X, "X")
    Z = check_X(Z, "Z", dim=X.shape[1]).astype(X.dtype)
    M = Z.shape[0]
    Luu = linalg.cholesky(kernel.inducing_gram(Z), jitter)
    # Where K_uu cannot be factorised the point is impossible: v's prior gives it log density -inf (NUTS
    # rejects it), and α = 0 stands in so that the likelihood is handed a finite f, not NaN.
    factorised = jnp.all(jnp.isfinite(Luu))
    Luu = jnp.where(factorised, Luu, jnp.eye(M, dtype=Luu.dtype))
    if centred:
        u = numpyro.sample(f"{name}_u", _CentredValues(Luu, factorised))
        weights = linalg.cho_solve(Luu, u)
    else:
        v = numpyro.sample(f"{name}_v", _WhitenedWeights(jnp.zeros(M, X.dtype), factorised).to_event(1))
        weights = linalg.solve_upper(Luu, v)
    alpha = _weights_site(name, jnp.where(factorised, weights, 0.0), kernel, Z, mean)
    Kfu = kernel.inducing_cross(Z, X).T
    if isinstance(kernel, Additive):
        parts = [
            numpyro.deterministic(f"{name}_{part}", Kfu[:, kernel.block(part)] @ alpha[kernel.block(part)])
            for part in kernel.names
        ]
        return numpyro.deterministic(name, mean_vector(mean, X) + sum(parts[1:], parts[0]))
    return numpyro.deterministic(name, mean_vector(mean, X) + Kfu @ alpha)


def predict_rbfn(
    samples: Mapping[str, Any],
    make_kernel: Callable[[Mapping[str, Any]], Kernel],
    Z: Any,
    X_test: Any,
    *,
    name: str = "f",
    mean: Any = 0.0,
    batch_size: int = 256,
) -> np.ndarray:
    """f* = m(x*) + K_*u α for every posterior draw: shape (draws..., S).

    Args:
        samples: posterior draws, e.g. ``mcmc.get_samples()`` or ``{k: idata.posterior[k].values}``; must
            hold ``{name}_alpha`` (..., M) and what ``make_kernel`` reads.
        make_kernel: one draw's values → the kernel, e.g.
            ``lambda s: SquaredExponential(lengthscale=s["lengthscale"], variance=s["variance"])``.
        Z: the centres the model used.
        X_test: (S, D) or (S,) test inputs.
        name: the layer's site name, as given to :func:`rbfn` (the weights are ``{name}_alpha``).
        mean: m as in :func:`rbfn`, evaluated at X_test (a number or a callable; a mean that varies per draw
            can be added to the result).
        batch_size: draws per vectorised call.
    """
    key = f"{name}_alpha"
    if key not in samples:
        raise ValueError(f"samples: no {key!r} (the weights of the layer {name!r}); pass name= if it differs")
    alpha = np.asarray(samples[key])
    lead = alpha.shape[:-1]
    flat = {k: np.asarray(v).reshape(-1, *np.shape(v)[len(lead) :]) for k, v in samples.items()}
    X_test = check_X(X_test, "X_test")
    Z = check_X(Z, "Z", dim=X_test.shape[1]).astype(X_test.dtype)
    offset = mean_vector(mean, X_test)

    @jax.jit
    @jax.vmap
    def one(draw):
        return LayerRecord(make_kernel(draw), Z, draw[key], mean).predict(X_test, offset)

    n = flat[key].shape[0]
    out = [
        np.asarray(one({k: v[i : i + batch_size] for k, v in flat.items()})) for i in range(0, n, batch_size)
    ]
    return np.concatenate(out).reshape(*lead, X_test.shape[0])
