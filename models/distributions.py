"""The sparse and the exact GP marginal as NumPyro distributions, for use in a model of one's own.

``SparseGP(kernel, X, Z, noise, approx=...)`` is the distribution of y ∈ ℝᴺ under a sparse GP prior plus
Gaussian noise; ``ExactGP(kernel, X, noise)`` the exact one::

    def model(X, Z, y=None):
        ell = numpyro.sample("lengthscale", dist.LogNormal(0.0, 1.0))
        s2 = numpyro.sample("variance", dist.LogNormal(0.0, 1.0))
        noise = numpyro.sample("noise", dist.LogNormal(-2.0, 1.0))
        kernel = SquaredExponential(lengthscale=ell, variance=s2)
        numpyro.sample("y", bayes_rbfn.SparseGP(kernel, X, Z, noise), obs=y)

================  =====================================================  ==========================
``approx``        ``log_prob(y)``                                         ``sample``
================  =====================================================  ==========================
``"sor"``         log N(y | m, Q_ff + σ²I) ([1] §4)                       N(m, Q_ff + σ²I)
``"dtc"``         the same marginal ([1] §5; DTC differs at prediction)   the same
``"fitc"``        log N(y | m, Q_ff + Λ), Λ = diag(K_ff − Q_ff) + σ²I     N(m, Q_ff + Λ)
``"vfe"``         Titsias's bound: DTC's log density − tr(K_ff − Q_ff)/(2σ²)  DTC's marginal
================  =====================================================  ==========================

with Q_ff = K_fu K_uu⁻¹ K_uf and m the mean (a number, an (N,) array, or a callable of X).

* ``log_prob`` costs O(NM²) and goes through the package's one streamed, whitened pass
  (:func:`bayes_rbfn.gp.sparse.training_factor`, :func:`bayes_rbfn.gp.sparse.log_marginal`; FITC's diagonal
  from :func:`bayes_rbfn.gp.parallel.nystrom_residual`): no N×N matrix. It is -inf, never NaN, when a
  factorisation fails (so NUTS rejects the step).
* **VFE is a bound, not a density**: exp(log_prob) integrates over y to exp(−tr(K_ff − Q_ff)/(2σ²)) ≤ 1
  ([2] eq. (9)); NUTS on it samples a pseudo-posterior (see :mod:`bayes_rbfn.models.sparse_models`).
  ``sample`` therefore draws from DTC's marginal, the density the bound is proportional to in y.
* ``sample`` costs O(NM) per draw through the low-rank structure: f = K_fu L_uu⁻ᵀ v with v ~ N(0, I_M),
  plus FITC's independent diag(K_ff − Q_ff), plus σε.
* :meth:`SparseGP.sample_replicates` (and :meth:`ExactGP.sample_replicates`) draws posterior predictive
  replicates y_rep ~ p(y_rep | y) at X, what posterior predictive checks need: ``sample`` draws from the
  marginal and ignores y. :func:`bayes_rbfn.infer.replicates.posterior_replicates` calls it at every
  posterior draw of a model of one's own.
* :meth:`SparseGP.condition` returns the analytic predictive of the latent f* at new inputs
  (:func:`bayes_rbfn.gp.conditional.sor_predict`, also behind :func:`bayes_rbfn.gp.conditional.sor` and
  :func:`bayes_rbfn.gp.sparse.dtc`/``fitc``/``vfe``); :meth:`SparseGP.loo_log_prob` the N leave-one-out
  conditionals log p(y_i | y_−i) in O(NM²) (:func:`bayes_rbfn.gp.parallel.sor_loo`), for PSIS-LOO
  (:func:`bayes_rbfn.models.distributions.loo_log_likelihood` puts them into an InferenceData).

References
----------
[1] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
    process regression. JMLR 6, 1939–1959.
[2] Titsias, M. (2009). Variational learning of inducing variables in sparse Gaussian processes. AISTATS.
[3] Bürkner, P.-C., Gabry, J. & Vehtari, A. (2020). Efficient leave-one-out cross-validation for Bayesian
    non-factorized normal and Student-t models. Computational Statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints

from bayes_rbfn.gp import conditional, linalg, parallel, sparse
from bayes_rbfn.gp.kernels import Kernel
from bayes_rbfn.gp.validation import check_X
from bayes_rbfn.models.common import SortedPytreeFields
from bayes_rbfn.models.means import mean_vector

__all__ = ["APPROXIMATIONS", "ExactGP", "SparseGP", "deferred_loo", "loo_log_likelihood"]

#: The sparse approximations :class:`SparseGP` takes.
APPROXIMATIONS = sparse.APPROXIMATIONS


def _predictive(mean: jax.Array, moments: conditional.Gaussian, full_cov: bool) -> dist.Distribution:
    """Normal(...).to_event(1), or MultivariateNormal with the package's jitter policy on its Cholesky."""
    if full_cov:
        return dist.MultivariateNormal(mean + moments.mean, scale_tril=linalg.cholesky(moments.cov))
    return dist.Normal(mean + moments.mean, jnp.sqrt(jnp.maximum(moments.var, 0.0))).to_event(1)


class _GaussianProcessMarginal(SortedPytreeFields, dist.Distribution):
    """What both marginals share: the event shape (N,), the mean, support on ℝᴺ."""

    arg_constraints: ClassVar[dict] = {}
    support = constraints.real_vector
    pytree_data_fields = ("kernel", "X", "noise", "loc", "_mean_value")
    pytree_aux_fields = ("_mean_fn",)

    def _init_common(self, kernel: Kernel, X: Any, noise: Any, mean: Any, validate_args: Any) -> None:
        if not isinstance(kernel, Kernel):
            raise ValueError(f"kernel: expected a bayes_rbfn.gp.kernels.Kernel, got {type(kernel).__name__}")
        self.kernel = kernel
        self.X = check_X(X, "X")
        self.noise = jnp.asarray(noise, dtype=self.X.dtype)
        if self.noise.ndim != 0:
            raise ValueError(f"noise: expected a scalar standard deviation σ, got shape {self.noise.shape}")
        # What condition() needs to evaluate the mean at new inputs: the callable, or the number.
        self._mean_fn = mean if callable(mean) else None
        scalar = not callable(mean) and jnp.ndim(mean) == 0
        self._mean_value = jnp.asarray(mean, dtype=self.X.dtype) if scalar else None
        self.loc = mean_vector(mean, self.X)
        super().__init__(batch_shape=(), event_shape=(self.X.shape[0],), validate_args=validate_args)

    @property
    def mean(self) -> jax.Array:
        return self.loc

    def _mean_for_condition(self, X_test: jax.Array, mean_test: Any) -> jax.Array:
        """The prior mean at X_test: ``mean_test`` if given, else the callable or the number of ``mean``."""
        if mean_test is not None:
            return mean_vector(mean_test, X_test, "mean_test")
        if self._mean_fn is not None:
            return mean_vector(self._mean_fn, X_test)
        if self._mean_value is not None:
            return mean_vector(self._mean_value, X_test)
        raise ValueError(
            "mean_test: the mean was given as an array at X, so its values at X_test are needed; pass "
            "mean_test=(S,) or give the mean as a number or a callable of X"
        )


class SparseGP(_GaussianProcessMarginal):
    """y ~ the marginal of a sparse GP with inducing inputs Z, plus N(0, σ²) noise; event shape (N,).

    Args:
        kernel: a :class:`~bayes_rbfn.gp.kernels.Kernel` (its hyperparameters may be NumPyro sample values).
        X: (N, D) or (N,) inputs. Z: (M, D) or (M,) inducing inputs (the RBF centres).
        noise: σ, the noise standard deviation (a scalar).
        approx: ``"sor"`` (default), ``"dtc"``, ``"fitc"`` or ``"vfe"`` (see the module docstring; VFE's
            ``log_prob`` is Titsias's bound, not a normalised density).
        mean: the prior mean: a number, an (N,) array, or a callable of X returning (N,).
        jitter: relative jitter on K_uu (default: the package's policy,
            :func:`bayes_rbfn.gp.linalg.cholesky`).
        fast, chunk_size, mesh, precision: performance settings of the streamed pass
            (:func:`bayes_rbfn.gp.parallel.woodbury_stats`): sums before whitening, data points per chunk,
            a :class:`jax.sharding.Mesh` with a ``"data"`` axis to shard the pass over its devices, and
            ``"float64"`` (default) or ``"mixed"`` (kernel blocks and their products in float32, sums and
            factorisations in float64: ~1e-9 relative in the log density for a well-conditioned K_uu, but
            ~4e-5 and wrong gradients for the cond(K_uu) ~ 1e9 of dense inducing inputs; see
            :mod:`bayes_rbfn.gp.parallel`).
    """

    pytree_data_fields = ("Z",)
    pytree_aux_fields = ("approx", "jitter", "fast", "chunk_size", "mesh", "precision")

    def __init__(
        self,
        kernel: Kernel,
        X: Any,
        Z: Any,
        noise: Any,
        *,
        approx: str = "sor",
        mean: Any = 0.0,
        jitter: float | None = None,
        fast: bool = False,
        chunk_size: int | None = None,
        mesh: Any = None,
        precision: str = "float64",
        validate_args: bool | None = None,
    ) -> None:
        if approx not in APPROXIMATIONS:
            expected = ", ".join(map(repr, APPROXIMATIONS))
            raise ValueError(f"approx: expected one of {expected}, got {approx!r}")
        # 0 factorises K_uu as it is (identity checks at Z = X); fit() and the CLI take only jitter > 0.
        if jitter is not None and not (np.isfinite(jitter) and jitter >= 0):
            raise ValueError(f"jitter: expected a finite number ≥ 0 (or None for the policy), got {jitter!r}")
        self.approx = approx
        self.jitter = jitter
        self.fast, self.chunk_size, self.mesh = bool(fast), chunk_size, mesh
        self.precision = parallel.check_precision(precision)
        self._init_common(kernel, X, noise, mean, validate_args)
        self.Z = check_X(Z, "Z", dim=self.X.shape[1]).astype(self.X.dtype)

    # -- the O(NM²) factorisation ------------------------------------------------------------------

    def _settings(self) -> dict[str, Any]:
        """The streamed pass's settings (:func:`bayes_rbfn.gp.parallel.woodbury_stats`)."""
        return {"chunk_size": self.chunk_size, "mesh": self.mesh}

    def _factor(self, r: jax.Array) -> tuple[linalg.Woodbury, Any]:
        """Woodbury factor of C = Q_ff + diag(d) for the centred r, and d (:func:`sparse.training_factor`)."""
        return sparse.training_factor(
            self.approx,
            self.kernel,
            self.X,
            r,
            self.Z,
            self.noise,
            self.jitter,
            fast=self.fast,
            precision=self.precision,
            **self._settings(),
        )

    def log_prob(self, value: jax.Array) -> jax.Array:
        """log N(y | m, Q_ff + D) (VFE: − tr(K_ff − Q_ff)/(2σ²)), O(NM²); -inf if a factorisation fails."""
        # One compiled program (also when NumPyro runs the model eagerly while initialising).
        return _sparse_log_prob(self, value)

    @linalg.full_precision
    def sample(self, key: jax.Array, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        """Draws of y, shape sample_shape + (N,): f = K_fu L_uu⁻ᵀ v (+ FITC's diagonal) + σε, O(NM) each.

        For ``approx="vfe"`` these are draws from DTC's marginal (the module docstring says why).
        """
        Luu = linalg.cholesky(self.kernel(self.Z, self.Z), self.jitter)
        # Rows of K_fu L_uu⁻ᵀ = (L_uu⁻¹ K_uf)ᵀ: Q_ff = (that)(that)ᵀ.
        factor_f = linalg.solve_lower(Luu, self.kernel(self.Z, self.X)).T
        k_low, k_fitc, k_noise = jax.random.split(key, 3)
        M, N = self.Z.shape[0], self.X.shape[0]
        v = jax.random.normal(k_low, (*sample_shape, M), dtype=self.X.dtype)
        y = self.loc + v @ factor_f.T
        if self.approx == "fitc":
            residual = parallel.nystrom_residual(self.kernel, self.Z, Luu, self.X, **self._settings())
            y = y + jnp.sqrt(residual) * jax.random.normal(k_fitc, (*sample_shape, N), dtype=self.X.dtype)
        return y + self.noise * jax.random.normal(k_noise, (*sample_shape, N), dtype=self.X.dtype)

    def sample_replicates(self, key: jax.Array, y: Any, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        """Posterior predictive replicates y_rep ~ p(y_rep | y) at X, shape sample_shape + (N,).

        What ``az.plot_ppc`` and ``az.loo_pit`` compare the data with: unlike :meth:`sample` (the
        marginal, which ignores y), f is drawn from its conditional given y, then the noise is added.
        O(NM²) for the factor and O(NM) per draw, in weight space, each approximation with its own
        training conditional (:func:`bayes_rbfn.gp.sparse.replicates`: SoR and DTC deterministic given
        the weights, FITC's and VFE's independent diag(K_ff − Q_ff)).
        """
        r = jnp.asarray(y, self.X.dtype) - self.loc
        factor, _ = self._factor(r)
        draws = sparse.replicates(
            self.approx,
            factor,
            self.kernel,
            self.X,
            r,
            self.Z,
            self.noise,
            key,
            sample_shape,
            **self._settings(),
        )
        return self.loc + draws

    def moments(self, y: Any, X_test: Any, *, full_cov: bool = False) -> conditional.Gaussian:
        """Moments of the latent f* − m(X_test) at X_test given y (a
        :class:`~bayes_rbfn.gp.conditional.Gaussian`: ``mean`` (S,) without the prior mean, ``var`` (S,),
        ``cov`` (S, S) when ``full_cov``).

        :func:`bayes_rbfn.gp.conditional.sor_predict`. SoR: f* = K_*u α with α | y Gaussian; DTC, FITC
        and VFE add the prior variance K_** − Q_** that the Nyström prior drops ([1] eqs. (21), (25)).
        """
        X_test = check_X(X_test, "X_test", dim=self.X.shape[1]).astype(self.X.dtype)
        factor, _ = self._factor(jnp.asarray(y, self.X.dtype) - self.loc)
        return conditional.sor_predict(
            factor,
            self.kernel,
            self.Z,
            X_test,
            full_cov,
            exact_test_prior=self.approx != "sor",
            precision=self.precision,
            **self._settings(),
        )

    def condition(
        self, y: Any, X_test: Any, *, full_cov: bool = False, mean_test: Any = None
    ) -> dist.Distribution:
        """The analytic predictive of the latent f* at X_test given y, as a NumPyro distribution.

        The moments of :meth:`moments` plus the prior mean at X_test.

        Args:
            y: (N,) observations. X_test: (S, D) or (S,) inputs.
            full_cov: a ``MultivariateNormal`` over the S points (jittered by the package's policy: SoR's
                covariance has rank ≤ M) instead of independent ``Normal(...).to_event(1)``.
            mean_test: the prior mean at X_test, needed when ``mean`` was an array at X.
        """
        X_test = check_X(X_test, "X_test", dim=self.X.shape[1]).astype(self.X.dtype)
        moments = self.moments(y, X_test, full_cov=full_cov)
        return _predictive(self._mean_for_condition(X_test, mean_test), moments, full_cov)

    def loo_log_prob(self, y: Any, *, exact: bool | str | None = None) -> jax.Array:
        """The N leave-one-out conditionals log p(y_i | y_−i), shape (N,), in O(NM²) ([3]).

        Under the marginal N(m, Q_ff + D) (VFE: DTC's, the density its bound is proportional to in y).
        ``exact``: how points the model interpolates (leverage near 1) are evaluated, as
        :func:`bayes_rbfn.gp.parallel.sor_loo`'s argument.
        """
        r = jnp.asarray(y, self.X.dtype) - self.loc
        factor, d = self._factor(r)
        return parallel.sor_loo(factor, self.kernel, self.Z, self.X, r, d, exact=exact, **self._settings())


@jax.jit
def _sparse_log_prob(d: SparseGP, value: jax.Array) -> jax.Array:
    factor, _ = d._factor(value - d.loc)
    return linalg.finite_or_neg_inf(sparse.log_marginal(d.approx, factor, d.kernel, d.X, d.noise))


class ExactGP(_GaussianProcessMarginal):
    """y ~ N(m, K_ff + σ²I), the exact GP marginal; event shape (N,). O(N³): the reference model.

    Args as :class:`SparseGP` without ``Z``, ``approx`` and ``jitter`` (σ² > 0 regularises K_ff).
    """

    def __init__(
        self, kernel: Kernel, X: Any, noise: Any, *, mean: Any = 0.0, validate_args: bool | None = None
    ) -> None:
        self._init_common(kernel, X, noise, mean, validate_args)

    def log_prob(self, value: jax.Array) -> jax.Array:
        """log N(y | m, K_ff + σ²I) (R&W eq. (2.30)); -inf if the factorisation fails."""
        logp = conditional.exact_log_marginal(self.kernel, self.X, value - self.loc, self.noise)
        return linalg.finite_or_neg_inf(logp)

    @linalg.full_precision
    def sample(self, key: jax.Array, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        L = conditional.exact_factor(self.kernel, self.X, self.noise)
        eps = jax.random.normal(key, (*sample_shape, self.X.shape[0]), dtype=self.X.dtype)
        return self.loc + eps @ L.T

    def sample_replicates(self, key: jax.Array, y: Any, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        """Posterior predictive replicates y_rep ~ p(y_rep | y) at X, shape sample_shape + (N,): f from
        its exact conditional given y (Matheron's rule, :func:`conditional.exact_replicates`), plus noise."""
        r = jnp.asarray(y, self.X.dtype) - self.loc
        return self.loc + conditional.exact_replicates(self.kernel, self.X, r, self.noise, key, sample_shape)

    def condition(
        self, y: Any, X_test: Any, *, full_cov: bool = False, mean_test: Any = None
    ) -> dist.Distribution:
        """The exact predictive of the latent f* at X_test (see :func:`conditional.exact_predict`)."""
        X_test = check_X(X_test, "X_test", dim=self.X.shape[1]).astype(self.X.dtype)
        r = jnp.asarray(y, self.X.dtype) - self.loc
        moments = conditional.exact_predict(self.kernel, self.X, r, self.noise, X_test, full_cov=full_cov)
        return _predictive(self._mean_for_condition(X_test, mean_test), moments, full_cov)

    def loo_log_prob(self, y: Any, *, exact: bool | str | None = None) -> jax.Array:
        """The N leave-one-out conditionals log p(y_i | y_−i), shape (N,) (O(N³)); from the dense Cholesky
        at every point, so ``exact`` (:meth:`SparseGP.loo_log_prob`'s) changes nothing."""
        r = jnp.asarray(y, self.X.dtype) - self.loc
        return conditional.exact_loo(self.kernel, self.X, r, self.noise)


def deferred_loo(evaluate: Callable[[dict, Any], np.ndarray], draws: dict) -> np.ndarray:
    """LOO values of many draws with the leave-block-out pass compiled only for the draws that need it.

    ``evaluate(draws, exact)`` → (S, ...) values of the draws ({name: (S, ...)}), ``exact`` passed on to
    :func:`bayes_rbfn.gp.parallel.sor_loo`. All draws are evaluated with ``exact="defer"`` (points the model
    interpolates come back NaN), then only the draws with a NaN again with ``exact=True``. A NaN that
    remains is a real failure.
    """
    values = np.array(evaluate(draws, "defer"))
    again = np.isnan(values).reshape(values.shape[0], -1).any(axis=-1)
    if again.any():
        values[again] = evaluate({n: np.asarray(v)[again] for n, v in draws.items()}, True)
    return values


def loo_log_likelihood(
    idata: Any,
    model: Callable,
    *args: Any,
    site: str = "y",
    batch_size: int = 64,
    **kwargs: Any,
) -> Any:
    """Put the LOO conditionals of a GP-marginal site into ``idata.log_likelihood`` so ``az.loo`` works.

    ``az.from_numpyro`` stores one log density per draw for a site whose likelihood does not factorise
    (``SparseGP``, ``ExactGP``), and ``az.loo`` would then see a single observation. For PSIS-LOO of such a
    model the pointwise values must be the conditionals log p(y_i | y_−i, θ) ([3]): this replays ``model``
    at every posterior draw (``numpyro.handlers.substitute``), takes the distribution at ``site`` and
    calls its ``loo_log_prob`` on the observed value; draws are evaluated ``batch_size`` at a time.

    Args:
        idata: InferenceData from ``az.from_numpyro`` with a ``posterior`` group.
        model: the NumPyro model function; ``*args, **kwargs`` as passed to ``MCMC.run`` (with the data).
        site: the observed site whose distribution is a :class:`SparseGP` or :class:`ExactGP`.

    Returns:
        ``idata``, with ``log_likelihood[site]`` of shape (chain, draw, N) (replaced if present).
    """
    import xarray as xr
    from numpyro import handlers

    post = idata.posterior
    chains, draws = post.sizes["chain"], post.sizes["draw"]
    names = list(post.data_vars)
    flat = {n: np.asarray(post[n].values).reshape(chains * draws, *post[n].shape[2:]) for n in names}

    def one(values, exact):
        trace = handlers.trace(handlers.substitute(model, data=values)).get_trace(*args, **kwargs)
        if site not in trace:
            raise ValueError(f"site: the model has no site {site!r}")
        node = trace[site]
        if not hasattr(node["fn"], "loo_log_prob"):
            raise ValueError(
                f"site: {site!r} is a {type(node['fn']).__name__}, not a SparseGP or ExactGP (a factorised "
                "likelihood's pointwise log density is already what az.from_numpyro stores)"
            )
        if not node["is_observed"]:
            raise ValueError(f"site: {site!r} is not observed")
        return node["fn"].loo_log_prob(node["value"], exact=exact)

    def evaluate(values, exact):
        batched = jax.jit(jax.vmap(lambda v: one(v, exact)))
        total = len(next(iter(values.values())))
        return np.concatenate(
            [
                np.asarray(batched({n: v[s : s + batch_size] for n, v in values.items()}))
                for s in range(0, total, batch_size)
            ]
        )

    values = deferred_loo(evaluate, flat).reshape(chains, draws, -1)
    dim = f"{site}_dim_0"
    array = xr.DataArray(
        values,
        dims=("chain", "draw", dim),
        coords={"chain": post["chain"].values, "draw": post["draw"].values},
    )
    if "log_likelihood" in idata.groups():
        idata.log_likelihood[site] = array
    else:
        idata.add_groups(log_likelihood=xr.Dataset({site: array}))
    return idata
