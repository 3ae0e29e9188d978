"""The sparse and the exact GP marginal as NumPyro distributions, for use in a model of one's own.

``SparseGP(kernel, X, Z, noise, approx=...)`` is the distribution of y ∈ ℝᴺ under a sparse GP prior plus
Gaussian noise; ``ExactGP(kernel, X, noise)`` the exact one::

    def model(X, Z, y=None):
        ell = numpyro.sample("lengthscale", dist.LogNormal(0.0, 1.0))
        s2 = numpyro.sample("variance", dist.LogNormal(0.0, 1.0))
        noise = numpyro.sample("noise", dist.LogNormal(-2.0, 1.0))
        kernel = SquaredExponential(lengthscale=ell, variance=s2)
        numpyro.sample("y", bayes_rbfn.SparseGP(kernel, X, Z, noise), obs=y)

================  ==========================================================  ======================
``approx``        ``log_prob(y)``                                              ``sample``
================  ==========================================================  ======================
``"sor"``         log N(y | m, Q_ff + D) ([1] §4)                              N(m, Q_ff + D)
``"dtc"``         the same marginal ([1] §5; DTC differs at prediction)        the same
``"fitc"``        log N(y | m, Q_ff + Λ), Λ = diag(K_ff − Q_ff) + D            N(m, Q_ff + Λ)
``"vfe"``         Titsias's bound: DTC's log density − ½ tr(D⁻¹(K_ff − Q_ff))  DTC's marginal
``ExactGP``       log N(y | m, K_ff + D) ([4] eq. (2.30))                      N(m, K_ff + D)
================  ==========================================================  ======================

with Q_ff = K_fu K_uu⁻¹ K_uf, m the mean (a number, an (N,) array, or a callable of X), and D = σ²I for
a scalar noise σ or D = diag(σ²) for one σ_i per point (heteroscedastic noise; VFE's trace term is then
Σ_i (K_ii − Q_ii)/σ_i², Titsias's bound with the likelihood N(y | f, D)).

* ``log_prob`` costs O(NM²) and goes through the package's one streamed, whitened pass
  (:func:`bayes_rbfn.gp.sparse.training_factor`, :func:`bayes_rbfn.gp.sparse.log_marginal`; FITC's diagonal
  from :func:`bayes_rbfn.gp.moments.nystrom_residual`): no N×N matrix; per-point noise takes the pass's
  weighted form, 1/σ_i² per point, as FITC's Λ does. It is -inf, never NaN, when a factorisation fails
  (so NUTS rejects the step).
* **VFE is a bound, not a density**: exp(log_prob) integrates over y to exp(−½ tr(D⁻¹(K_ff − Q_ff))) ≤ 1
  ([2] eq. (9)); NUTS on it samples a pseudo-posterior (see :mod:`bayes_rbfn.models.sparse_models`).
  ``sample`` therefore draws from DTC's marginal, the density the bound is proportional to in y.
* ``sample`` costs O(NM) per draw through the low-rank structure: f = K_fu L_uu⁻ᵀ v with v ~ N(0, I_M),
  plus FITC's independent diag(K_ff − Q_ff), plus σε.
* ``sample_replicates`` draws posterior predictive replicates y_rep ~ p(y_rep | y) at X, what posterior
  predictive checks need: ``sample`` draws from the marginal and ignores y.
  :func:`bayes_rbfn.infer.replicates.posterior_replicates` calls it at every posterior draw of a model of
  one's own.
* ``condition`` (and ``moments``) return the analytic predictive of the latent f* at new inputs
  (:func:`bayes_rbfn.gp.conditional.sor_predict`, also behind :func:`bayes_rbfn.gp.conditional.sor` and
  :func:`bayes_rbfn.gp.sparse.dtc`/``fitc``/``vfe``; :func:`bayes_rbfn.gp.conditional.exact_predict`);
  ``loo_log_prob`` the N leave-one-out conditionals log p(y_i | y_−i), in O(NM²) for SparseGP
  (:func:`bayes_rbfn.gp.block_loo.sor_loo`), for PSIS-LOO (:func:`bayes_rbfn.infer.loo.loo_log_likelihood`
  puts them into an InferenceData), and ``loo_pit`` their CDFs at the data.

Batches
-------
Both distributions follow NumPyro's shapes: event shape (N,), and a batch shape that broadcasts, right
to left as NumPy does, the leading axes of

* ``noise`` beyond its per-member part: σ of shape (..., N) (one per point) or (..., 1) (one per member);
  a scalar or an (N,) σ has no batch axes;
* ``X`` (..., N, D) and ``Z`` (..., M, D) beyond a member's (N, D) and (M, D): members with inputs of their
  own (a 2-D X is always one member's (N, D), so a batch of one-dimensional inputs is (..., N, 1));
* an array ``mean`` (..., N) beyond (N,) (a callable mean is evaluated on each member's inputs);
* the kernel's hyperparameters, along the axes the caller declares: ``kernel_batch_shape=(B,)`` says
  that every hyperparameter that is not a scalar leads with B (a scalar is shared by the members); the
  rest of its shape is the member's (an ARD lengthscale of a batched kernel is (B, D), a shared one must
  then be broadcast to it). A kernel cannot declare its batch axes itself, since an ARD lengthscale (D,)
  and a batch of B scalar lengthscales look alike; a lengthscale or a Gram matrix that does not fit one
  member's inputs is refused with a ``ValueError`` that names ``kernel_batch_shape``.

``log_prob(value)`` takes value (..., N) and returns broadcast(batch_shape, value.shape[:-1]) (a batch of
values needs no batch in the distribution: several series under one kernel); ``sample(key, sample_shape)``
returns sample_shape + batch_shape + (N,), the members independent; ``sample_replicates``, ``moments``,
``condition``, ``loo_log_prob`` and ``loo_pit`` take y (..., N) and batch likewise (X_test is shared).
``expand`` returns the same class with the larger batch, so under ``numpyro.plate`` the site keeps these
methods, and NumPyro's ``ExpandedDistribution`` of a member samples and scores the same::

    with numpyro.plate("series", S):                              # Y: (S, N)
        numpyro.sample("y", SparseGP(kernel, X, Z, noise), obs=Y)

A batch is computed member by member: one ``jax.vmap`` per batch axis over the single-member code (the
only path an unbatched distribution takes, unchanged), mapping only the fields that vary along that axis,
so the kernel blocks of inputs the members share are formed once. :mod:`bayes_rbfn.models.examples` has a
plate over series and a heteroscedastic model whose log σ is an RBF network.

References
----------
[1] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
    process regression. JMLR 6, 1939–1959.
[2] Titsias, M. (2009). Variational learning of inducing variables in sparse Gaussian processes. AISTATS.
[3] Bürkner, P.-C., Gabry, J. & Vehtari, A. (2020). Efficient leave-one-out cross-validation for Bayesian
    non-factorized normal and Student-t models. Computational Statistics.
[4] Rasmussen, C. E. & Williams, C. K. I. (2006). *Gaussian Processes for Machine Learning*. MIT Press.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints

from bayes_rbfn.gp import block_loo, conditional, effects, linalg, sparse, streaming
from bayes_rbfn.gp.kernels import ActiveDims, Additive, Kernel
from bayes_rbfn.gp.moments import nystrom_residual
from bayes_rbfn.gp.validation import as_float_array, check_X, is_concrete
from bayes_rbfn.models.common import SortedPytreeFields
from bayes_rbfn.models.means import mean_vector

__all__ = ["APPROXIMATIONS", "ExactGP", "SparseGP", "deferred_loo"]

#: The sparse approximations :class:`SparseGP` takes.
APPROXIMATIONS = sparse.APPROXIMATIONS


def _predictive(mean: jax.Array, moments: conditional.Gaussian, full_cov: bool) -> dist.Distribution:
    """Normal(...).to_event(1), or MultivariateNormal with the package's jitter policy on its Cholesky.

    The jitter is applied member by member for a batch of covariances.
    """
    if full_cov:
        cov = moments.cov
        cholesky = (
            linalg.cholesky if cov.ndim == 2 else jnp.vectorize(linalg.cholesky, signature="(s,s)->(s,s)")
        )
        return dist.MultivariateNormal(mean + moments.mean, scale_tril=cholesky(cov))
    return dist.Normal(mean + moments.mean, jnp.sqrt(jnp.maximum(moments.var, 0.0))).to_event(1)


# --------------------------------------------------------------------------------------------------
# Batches: shapes, checks, and the map over members


def _check_inputs(X: Any, name: str, dim: int | None = None) -> jax.Array:
    """(N, D) inputs as :func:`~bayes_rbfn.gp.validation.check_X` takes them, or a batch (..., N, D) of them.

    (N,) is one column. Finite, N ≥ 1, D matching ``dim``.
    """
    if jnp.ndim(X) <= 2:
        return check_X(X, name, dim=dim)
    X = as_float_array(X, name)
    if X.shape[-2] < 1:
        raise ValueError(f"{name}: needs at least one row, got shape {tuple(X.shape)}")
    if dim is not None and X.shape[-1] != dim:
        raise ValueError(f"{name}: has {X.shape[-1]} input dimension(s) but X has {dim}")
    if is_concrete(X) and not np.all(np.isfinite(np.asarray(X))):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return X


def _check_noise(noise: Any, N: int, dtype: Any) -> tuple[jax.Array, int]:
    """σ as stored, and its axes per member: 0 (one σ per member) or 1 (one σ per point, (..., N)).

    With one σ per member a trailing axis of length 1 is dropped. Concrete values must be finite numbers
    > 0.
    """
    if is_concrete(noise):
        try:
            arr = np.asarray(noise)
        except Exception as err:  # pragma: no cover - exotic objects
            raise ValueError(f"noise: expected standard deviations σ > 0, got {noise!r}") from err
        if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
            raise ValueError(f"noise: expected standard deviations σ > 0 (numbers), got {noise!r}")
        bad = ~(np.isfinite(arr) & (arr > 0))
        if bad.any():
            values = arr[bad].ravel()[:3].tolist() if arr.ndim else arr.item()
            raise ValueError(
                f"noise: expected finite standard deviations σ > 0 (not variances), got {values!r}"
                + (f" ({int(bad.sum())} bad value(s) of {arr.size})" if arr.ndim else "")
            )
    noise = jnp.asarray(noise, dtype=dtype)
    if noise.ndim == 0:
        return noise, 0
    if noise.shape[-1] == 1:
        return noise[..., 0], 0
    if noise.shape[-1] == N:
        return noise, 1
    raise ValueError(
        f"noise: expected a scalar σ, one σ per point of shape ({N},), or a batch of either, (..., {N}) or "
        f"(..., 1); got shape {tuple(noise.shape)}"
    )


def _loc(mean: Any, X: jax.Array) -> jax.Array:
    """The prior mean at X, (N,) or a batch (..., N).

    Given as a number, an (N,) or (..., N) array, or a callable of one member's (N, D) inputs (mapped over
    a batch of inputs).
    """
    N = X.shape[-2]
    if callable(mean):
        if X.ndim == 2:
            return mean_vector(mean, X)
        flat = X.reshape(-1, *X.shape[-2:])
        return jax.vmap(lambda x: mean_vector(mean, x))(flat).reshape(X.shape[:-1])
    if jnp.ndim(mean) <= 1:
        return mean_vector(mean, X if X.ndim == 2 else X[(0,) * (X.ndim - 2)])
    value = jnp.asarray(mean, dtype=X.dtype)
    if value.shape[-1] != N:
        raise ValueError(
            f"mean: expected a number, an array of shape ({N},) or (..., {N}), or a callable of X, got shape "
            f"{tuple(value.shape)}"
        )
    return value


def _lead(value: Any, k: int) -> int:
    """The batch axes of a hyperparameter of a kernel with k batch axes: k, or 0 for a shared scalar."""
    return k if k and jnp.ndim(value) else 0


def _check_kernel_shapes(kernel: Kernel, k: int, dim: int, N: int, dtype: Any) -> None:
    """One member's hyperparameters must fit one member's (N, D) inputs.

    Lengthscales and periods a scalar or one per input dimension, and the Gram matrix (N, N). Shapes only
    (tracers pass through).
    """

    def walk(kern: Kernel, d: int) -> None:
        if isinstance(kern, ActiveDims):
            walk(kern.kernel, len(kern.dims))
            return
        for name in kern.params:
            value = getattr(kern, name)
            if isinstance(value, Kernel):
                walk(value, d)
            else:
                shape = tuple(jnp.shape(value))[_lead(value, k) :]
                hint = " per member; hyperparameters with batch axes (one per series) take kernel_batch_shape"
                conditional.check_parameter_shape(kern, name, shape, d, hint)

    walk(kernel, dim)
    member = jax.tree_util.tree_map(
        lambda v: jax.ShapeDtypeStruct(tuple(jnp.shape(v))[_lead(v, k) :], jnp.result_type(v)), kernel
    )
    x = jax.ShapeDtypeStruct((N, dim), dtype)
    try:
        gram, diag = jax.eval_shape(lambda kern, a: (kern(a, a), kern.diag(a)), member, x)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"kernel: its hyperparameters do not fit one member's inputs of shape ({N}, {dim}) ({err}); "
            "hyperparameters with batch axes are declared with kernel_batch_shape"
        ) from err
    if gram.shape != (N, N) or diag.shape != (N,):
        raise ValueError(
            f"kernel: gives a Gram matrix of shape {gram.shape} for one member's {N} inputs, not ({N}, {N}); "
            "hyperparameters with batch axes are declared with kernel_batch_shape"
        )


def _broadcast(shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    try:
        return tuple(jnp.broadcast_shapes(*shapes.values()))
    except ValueError as err:
        described = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"batch shapes do not broadcast: {described}") from err


def _keys(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """One PRNG key per member of the batch ``shape``: shape + the key's own shape."""
    keys = jax.random.split(key, math.prod(shape))
    return keys.reshape(*shape, *keys.shape[1:])


def _sample_axes_first(draws: jax.Array, batch_ndim: int, sample_ndim: int) -> jax.Array:
    """batch + sample_shape + (N,) → sample_shape + batch + (N,), NumPyro's order."""
    return jnp.moveaxis(draws, tuple(range(batch_ndim)), tuple(range(sample_ndim, sample_ndim + batch_ndim)))


def _over_batch(fn: Callable, shape: tuple[int, ...], leaves: list, batch_ndims: list[int]) -> Any:
    """fn(*member_leaves) for every index of the batch ``shape``, stacked: shape + fn's output shapes.

    ``leaves[i]`` carries ``batch_ndims[i]`` leading batch axes, right-aligned with ``shape`` as NumPy
    broadcasts; one ``jax.vmap`` per batch axis maps the leaves that have that axis and passes the others
    (and those of length 1 there) whole, so whatever depends only on shared leaves (the kernel blocks of
    shared inputs, say) is computed once for the batch.
    """
    if not shape:
        return fn(*leaves)
    n = len(shape)
    axes, inner, inner_ndims = [], [], []
    for leaf, k in zip(leaves, batch_ndims, strict=True):
        if k == n and leaf.shape[0] != 1:
            axes.append(0)
            inner.append(leaf)
        else:
            axes.append(None)
            inner.append(leaf[0] if k == n else leaf)
        inner_ndims.append(k - 1 if k == n else k)

    def rest(*members: Any) -> Any:
        return _over_batch(fn, shape[1:], list(members), inner_ndims)

    if all(a is None for a in axes):  # nothing varies along this axis (an expanded batch)
        out = rest(*inner)
        return jax.tree_util.tree_map(lambda o: jnp.broadcast_to(o, (shape[0], *o.shape)), out)
    return jax.vmap(rest, in_axes=axes)(*inner)


class _GaussianProcessMarginal(SortedPytreeFields, dist.Distribution):
    """What both marginals share: the event shape (N,), the mean, support on ℝᴺ, and the batch.

    A batch is computed member by member (:func:`_over_batch`): each member is a distribution of the same
    class whose fields have their batch axes removed, and it runs the single-member code unchanged.
    """

    arg_constraints: ClassVar[dict] = {}
    support = constraints.real_vector
    pytree_data_fields = ("kernel", "X", "noise", "loc", "_mean_value")
    pytree_aux_fields = ("_mean_fn", "kernel_batch_shape", "_noise_ndim")
    #: The fields a batch axis may run along.
    _batched_fields: ClassVar[tuple[str, ...]] = ("kernel", "X", "noise", "loc")

    def _init_common(
        self,
        kernel: Kernel,
        X: Any,
        noise: Any,
        mean: Any,
        kernel_batch_shape: Any,
        validate_args: Any,
        Z: Any = None,
    ) -> None:
        if not isinstance(kernel, Kernel):
            raise ValueError(f"kernel: expected a bayes_rbfn.gp.kernels.Kernel, got {type(kernel).__name__}")
        self.kernel = kernel
        self.X = _check_inputs(X, "X")
        # One dtype for every array of the computation, JAX's promotion of X's and the kernel's: float32
        # inputs with float64 hyperparameters compute in float64, as conditional.sor and ExactGP's own
        # arithmetic do (a streamed pass's carry must keep its dtype from chunk to chunk).
        dtype = jnp.result_type(self.X, *jax.tree_util.tree_leaves(kernel))
        if dtype != self.X.dtype and jnp.issubdtype(dtype, jnp.floating):
            self.X = self.X.astype(dtype)
        N, D = self.X.shape[-2:]
        if Z is not None:
            self.Z = _check_inputs(Z, "Z", dim=D).astype(self.X.dtype)
        self.noise, self._noise_ndim = _check_noise(noise, N, self.X.dtype)
        try:
            self.kernel_batch_shape = tuple(int(s) for s in kernel_batch_shape)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"kernel_batch_shape: expected a tuple of ints, got {kernel_batch_shape!r}"
            ) from err
        k = len(self.kernel_batch_shape)
        if any(s < 1 for s in self.kernel_batch_shape):
            raise ValueError(f"kernel_batch_shape: expected positive sizes, got {self.kernel_batch_shape}")
        for leaf in jax.tree_util.tree_leaves(kernel):
            lead = tuple(jnp.shape(leaf))[: _lead(leaf, k)]
            if _lead(leaf, k) and (
                len(lead) < k
                or any(a not in (1, b) for a, b in zip(lead, self.kernel_batch_shape, strict=True))
            ):
                raise ValueError(
                    "kernel_batch_shape: every hyperparameter of the kernel that is not a scalar must lead "
                    f"with {self.kernel_batch_shape} (broadcast a shared one with jnp.broadcast_to); got one "
                    f"of shape {tuple(jnp.shape(leaf))}"
                )
        if any(jnp.ndim(leaf) for leaf in jax.tree_util.tree_leaves(kernel)):
            _check_kernel_shapes(kernel, k, D, N, self.X.dtype)
        # What condition() needs to evaluate the mean at new inputs: the callable, or the number.
        self._mean_fn = mean if callable(mean) else None
        scalar = not callable(mean) and jnp.ndim(mean) == 0
        self._mean_value = jnp.asarray(mean, dtype=self.X.dtype) if scalar else None
        self.loc = _loc(mean, self.X)
        batch_shape = _broadcast(
            {"kernel_batch_shape": self.kernel_batch_shape, **self._field_batch_shapes()}
        )
        super().__init__(batch_shape=batch_shape, event_shape=(N,), validate_args=validate_args)

    # -- batches -------------------------------------------------------------------------------------

    def _field_batch_ndims(self) -> dict[str, Any]:
        """The leading batch axes of each batched field; for the kernel a tree of them, one per leaf."""
        k = len(self.kernel_batch_shape)
        member_ndims = {"X": 2, "Z": 2, "noise": self._noise_ndim, "loc": 1}
        return {
            name: (
                jax.tree_util.tree_map(lambda v: _lead(v, k), self.kernel)
                if name == "kernel"
                else jnp.ndim(getattr(self, name)) - member_ndims[name]
            )
            for name in self._batched_fields
        }

    def _field_batch_shapes(self) -> dict[str, tuple[int, ...]]:
        ndims = self._field_batch_ndims()
        return {
            name: tuple(jnp.shape(getattr(self, name)))[: ndims[name]]
            for name in self._batched_fields
            if name != "kernel"
        }

    def _member(self, fields: dict[str, Any]) -> Any:
        """A single-member distribution of this class with the given fields (their batch axes removed)."""
        member = copy.copy(self)
        member.__dict__.update(fields)
        member._batch_shape = ()
        return member

    def _per_member(self, fn: Callable, shape: tuple[int, ...], *extra: tuple[jax.Array, int]) -> Any:
        """fn(member, *extra_member) for every member of the batch ``shape``.

        ``shape`` is this distribution's batch shape broadcast with that of ``extra``: (array, its number of
        leading batch axes) pairs.
        """
        fields = {name: getattr(self, name) for name in self._batched_fields}
        leaves, tree = jax.tree_util.tree_flatten(fields)
        ndims = jax.tree_util.tree_leaves(self._field_batch_ndims())
        n = len(leaves)

        def one(*args: Any) -> Any:
            return fn(self._member(jax.tree_util.tree_unflatten(tree, args[:n])), *args[n:])

        return _over_batch(
            one, tuple(shape), [*leaves, *(a for a, _ in extra)], [*ndims, *(k for _, k in extra)]
        )

    def _check_length(self, value: Any, name: str) -> None:
        """``ValueError`` naming ``name`` unless ``value`` is (..., N): one value per row of X."""
        N = self.event_shape[0]
        if tuple(jnp.shape(value))[-1:] != (N,):
            raise ValueError(
                f"{name}: expected shape ({N},) or (..., {N}), one value per row of X, got "
                f"{tuple(jnp.shape(value))}"
            )

    def _data_batch(self, value: Any, name: str) -> tuple[jax.Array, tuple[int, ...]]:
        """``value`` (..., N) as an array, and the batch shape it and this distribution broadcast to."""
        value = jnp.asarray(value, dtype=self.X.dtype)
        N = self.event_shape[0]
        if value.ndim < 1 or value.shape[-1] != N:
            raise ValueError(f"{name}: expected shape (..., {N}), got {tuple(value.shape)}")
        return value, _broadcast({"batch_shape": self.batch_shape, name: tuple(value.shape[:-1])})

    def expand(self, batch_shape: Any) -> Any:
        """The same distribution with its batch broadcast to ``batch_shape``.

        A :class:`SparseGP` or :class:`ExactGP` again, not NumPyro's ``ExpandedDistribution``, so that what
        ``numpyro.plate`` makes of it keeps :meth:`sample_replicates` and the LOO methods. Nothing is copied:
        members along the new axes share the fields, and their draws are independent.
        """
        batch_shape = tuple(int(s) for s in batch_shape)
        if batch_shape == self.batch_shape:
            return self
        if getattr(self, "groups", None) is not None:
            raise ValueError(f"groups: group effects take one member, not a batch of shape {batch_shape}")
        if len(batch_shape) < len(self.batch_shape) or (
            _broadcast({"batch_shape": self.batch_shape, "expand to": batch_shape}) != batch_shape
        ):
            raise ValueError(
                f"Cannot broadcast distribution of shape {self.batch_shape} to shape {batch_shape}"
            )
        expanded = copy.copy(self)
        expanded._batch_shape = batch_shape
        return expanded

    # -- the distribution ----------------------------------------------------------------------------

    @property
    def mean(self) -> jax.Array:
        return jnp.broadcast_to(self.loc, self.batch_shape + self.event_shape)

    def log_prob(self, value: jax.Array) -> jax.Array:
        """The log density of ``value`` (..., N), shape broadcast(batch_shape, value.shape[:-1]).

        -inf where a factorisation fails (so NUTS rejects the step).
        """
        self._check_length(value, "value")
        value = jnp.asarray(value, dtype=self.X.dtype)
        if not self.batch_shape and value.ndim == 1:
            return self._log_prob_member(value)
        return _batched_log_prob(self, value)

    def sample(self, key: jax.Array, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        """Draws of y, shape sample_shape + batch_shape + (N,); members of a batch draw independently."""
        if not self.batch_shape:
            return self._sample_member(key, sample_shape)
        shape = self.batch_shape
        draws = self._per_member(
            lambda member, k: member._sample_member(k, sample_shape), shape, (_keys(key, shape), len(shape))
        )
        return _sample_axes_first(draws, len(shape), len(sample_shape))

    def sample_replicates(self, key: jax.Array, y: Any, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        """Posterior predictive replicates y_rep ~ p(y_rep | y) at X, shape sample_shape + batch + (N,).

        batch = broadcast(batch_shape, y.shape[:-1]): f from its conditional given y, plus the noise.

        What ``az.plot_ppc`` compares the data with: unlike :meth:`sample` (the marginal, which ignores
        y). Each member conditions on its own y; their draws are independent.
        """
        y = jnp.asarray(y, dtype=self.X.dtype)
        self._check_length(y, "y")
        if not self.batch_shape and y.ndim == 1:
            return self._replicates_member(key, y, sample_shape)
        y, shape = self._data_batch(y, "y")
        draws = self._per_member(
            lambda member, k, v: member._replicates_member(k, v, sample_shape),
            shape,
            (_keys(key, shape), len(shape)),
            (y, y.ndim - 1),
        )
        return _sample_axes_first(draws, len(shape), len(sample_shape))

    def moments(self, y: Any, X_test: Any, *, full_cov: bool = False) -> conditional.Gaussian:
        """Moments of the latent f* − m(X_test) at X_test given y.

        A :class:`~bayes_rbfn.gp.conditional.Gaussian`: ``mean`` (..., S) without the prior mean, ``var``
        (..., S), ``cov`` (..., S, S) when ``full_cov``; the leading axes are broadcast(batch_shape,
        y.shape[:-1]), each member conditioned on its own y at the same X_test (S, D) or (S,).
        """
        X_test = check_X(X_test, "X_test", dim=self.X.shape[-1]).astype(self.X.dtype)
        y = jnp.asarray(y, dtype=self.X.dtype)
        self._check_length(y, "y")
        if not self.batch_shape and y.ndim == 1:
            return self._moments_member(y, X_test, full_cov)
        y, shape = self._data_batch(y, "y")
        return self._per_member(
            lambda member, v: member._moments_member(v, X_test, full_cov), shape, (y, y.ndim - 1)
        )

    def condition(
        self, y: Any, X_test: Any, *, full_cov: bool = False, mean_test: Any = None
    ) -> dist.Distribution:
        """The analytic predictive of the latent f* at X_test given y, as a NumPyro distribution.

        The moments of :meth:`moments` plus the prior mean at X_test; for a batch, a distribution with that
        batch shape.

        Args:
            y: (N,) observations (or (..., N), one row per member).
            X_test: (S, D) or (S,) inputs.
            full_cov: a ``MultivariateNormal`` over the S points (jittered by the package's policy: SoR's
                covariance has rank ≤ M) instead of independent ``Normal(...).to_event(1)``.
            mean_test: the prior mean at X_test ((S,), or (..., S) for a batch), needed when ``mean`` was
                an array at X.
        """
        X_test = check_X(X_test, "X_test", dim=self.X.shape[-1]).astype(self.X.dtype)
        moments = self.moments(y, X_test, full_cov=full_cov)
        return _predictive(self._mean_for_condition(X_test, mean_test), moments, full_cov)

    def loo_log_prob(self, y: Any, *, exact: bool | str | None = None) -> jax.Array:
        """The N leave-one-out conditionals log p(y_i | y_−i), shape (..., N).

        See [3]; the leading axes as :meth:`moments`'. SparseGP: in O(NM²), under its marginal
        N(m, Q_ff + D) (VFE: DTC's, the density its bound is proportional to in y); ``exact``: how points the
        model interpolates (leverage near 1) are evaluated, as :func:`bayes_rbfn.gp.block_loo.sor_loo`'s
        argument. ExactGP: O(N³) from the dense Cholesky at every point, so ``exact`` changes nothing.
        """
        return self._loo(y, exact, "log_density")

    def loo_pit(self, y: Any, *, exact: bool | str | None = None) -> jax.Array:
        """The N leave-one-out conditionals' CDFs at the data, P(y_i' ≤ y_i | y_−i), shape (..., N).

        Φ((y_i − μ_−i)/σ_−i) from the same passes as :meth:`loo_log_prob` (``exact`` likewise). Averaged
        over posterior draws with PSIS weights they are LOO-PIT (:func:`bayes_rbfn.loo_pit`).
        """
        return self._loo(y, exact, "pit")

    def loo_residual(self, y: Any, *, exact: bool | str | None = None) -> jax.Array:
        """The N leave-one-out residuals y_i − E[y_i | y_−i], shape (..., N).

        From the same passes as :meth:`loo_log_prob` (``exact`` likewise). Averaged over posterior draws
        with PSIS weights they give the LOO predictive mean, and LOO-R² (:func:`bayes_rbfn.loo_r2`).
        """
        return self._loo(y, exact, "residual")

    def _loo(self, y: Any, exact: bool | str | None, statistic: str) -> jax.Array:
        y = jnp.asarray(y, dtype=self.X.dtype)
        self._check_length(y, "y")
        if not self.batch_shape and y.ndim == 1:
            return self._loo_member(y, exact, statistic)
        y, shape = self._data_batch(y, "y")
        return self._per_member(
            lambda member, v: member._loo_member(v, exact, statistic), shape, (y, y.ndim - 1)
        )

    def _mean_for_condition(self, X_test: jax.Array, mean_test: Any) -> jax.Array:
        """The prior mean at X_test: ``mean_test`` if given, else the callable or the number of ``mean``."""
        if mean_test is not None:
            if jnp.ndim(mean_test) >= 2:
                value = jnp.asarray(mean_test, dtype=X_test.dtype)
                if value.shape[-1] != X_test.shape[0]:
                    raise ValueError(
                        f"mean_test: expected shape ({X_test.shape[0]},) or (..., {X_test.shape[0]}), got "
                        f"{tuple(value.shape)}"
                    )
                return value
            return mean_vector(mean_test, X_test, "mean_test")
        if self._mean_fn is not None:
            return mean_vector(self._mean_fn, X_test)
        if self._mean_value is not None:
            return mean_vector(self._mean_value, X_test)
        raise ValueError(
            "mean_test: the mean was given as an array at X, so its values at X_test are needed; pass "
            "mean_test=(S,) or give the mean as a number or a callable of X"
        )


@jax.jit
def _batched_log_prob(d: _GaussianProcessMarginal, value: jax.Array) -> jax.Array:
    """log_prob of a batch, member by member (one compiled program per shape)."""
    value, shape = d._data_batch(value, "value")
    return d._per_member(lambda member, v: member._log_prob_member(v), shape, (value, value.ndim - 1))


class SparseGP(_GaussianProcessMarginal):
    """y ~ the marginal of a sparse GP with inducing inputs Z, plus N(0, σ²) noise; event shape (N,).

    Args:
        kernel: a :class:`~bayes_rbfn.gp.kernels.Kernel` (its hyperparameters may be NumPyro sample values).
        X: (N, D) or (N,) inputs, or (..., N, D): one set of inputs per member of a batch.
        Z: (M, D) or (M,) inducing inputs (the RBF centres), or (..., M, D) per member.
        noise: σ, the noise standard deviation (never the variance): a scalar, (N,) one per point
            (heteroscedastic noise, D = diag(σ²)), or a batch of either, (..., N) or (..., 1). Concrete
            values must be finite and > 0.
        approx: ``"sor"`` (default), ``"dtc"``, ``"fitc"`` or ``"vfe"`` (see the module docstring; VFE's
            ``log_prob`` is Titsias's bound, not a normalised density).
        mean: the prior mean: a number, an (N,) or (..., N) array, or a callable of one member's X
            returning (N,).
        kernel_batch_shape: the batch axes of the kernel's hyperparameters (default ``()``: none); each
            hyperparameter that is not a scalar then leads with them (see the module docstring).
        jitter: relative jitter on K_uu (default: the package's policy,
            :func:`bayes_rbfn.gp.linalg.cholesky`).
        fast: a performance setting of the streamed pass
            (:func:`bayes_rbfn.gp.woodbury_sums.woodbury_stats`): sum before whitening.
        chunk_size: data points per chunk of the streamed pass.
        mesh: a :class:`jax.sharding.Mesh` with a ``"data"`` axis to shard the streamed pass over its
            devices.
        precision: ``"float64"`` (default) or ``"mixed"`` (kernel blocks and their products in float32, sums
            and factorisations in float64: ~1e-9 relative in the log density for a well-conditioned K_uu,
            but ~4e-5 and wrong gradients for the cond(K_uu) ~ 1e9 of dense inducing inputs; see
            :mod:`bayes_rbfn.gp.woodbury_sums`).
        groups: (N,) integer codes 0 … G−1 of group effects integrated out with the weights, so that
            y = f + β_{g(i)} + ε with β_g ~ N(0, τ²) i.i.d. (a varying intercept per group; one-hot design
            columns under a shared Gaussian prior), at O(NM² + GM²) (:mod:`bayes_rbfn.gp.effects`).
            ``"sor"`` and ``"dtc"``, one member; :meth:`moments` is then the GP part's f* alone,
            :meth:`group_moments` the effects' posterior, and :meth:`sample_replicates` draws
            f + β_{g(i)} + ε' given y.
        group_scale: τ, the prior standard deviation of the group effects (with ``groups``).
        num_groups: G; needed where ``groups`` is traced (under ``jit``), else at least the codes' largest
            value plus one (groups without points then keep their prior).
    """

    pytree_data_fields = ("Z", "groups", "group_scale")
    pytree_aux_fields = ("approx", "jitter", "fast", "chunk_size", "mesh", "precision", "num_groups")
    _batched_fields = ("kernel", "X", "Z", "noise", "loc")

    def __init__(
        self,
        kernel: Kernel,
        X: Any,
        Z: Any,
        noise: Any,
        *,
        approx: str = "sor",
        mean: Any = 0.0,
        kernel_batch_shape: tuple[int, ...] = (),
        jitter: float | None = None,
        fast: bool = False,
        chunk_size: int | None = None,
        mesh: Any = None,
        precision: str = "float64",
        groups: Any = None,
        group_scale: Any = None,
        num_groups: int | None = None,
        validate_args: bool | None = None,
    ) -> None:
        """A sparse GP marginal; ``ValueError`` for an unknown ``approx``, a bad ``jitter`` or bad inputs.

        The class docstring gives the details of each argument.

        Args:
            kernel: a :class:`~bayes_rbfn.gp.kernels.Kernel` (its hyperparameters may be NumPyro samples).
            X: (N, D) or (N,) inputs, or (..., N, D): one set of inputs per member of a batch.
            Z: (M, D) or (M,) inducing inputs, or (..., M, D) per member.
            noise: σ, the noise standard deviation: a scalar, (N,) one per point, or a batch of either.
            approx: ``"sor"``, ``"dtc"``, ``"fitc"`` or ``"vfe"``.
            mean: the prior mean: a number, an (N,) or (..., N) array, or a callable of one member's X.
            kernel_batch_shape: the batch axes of the kernel's hyperparameters.
            jitter: relative jitter on K_uu, ≥ 0; None: the package's policy.
            fast: sums before whitening in the streamed pass.
            chunk_size: data points per chunk of the streamed pass.
            mesh: a :class:`jax.sharding.Mesh` with a ``"data"`` axis to shard the pass over, or None.
            precision: ``"float64"`` or ``"mixed"``.
            groups: (N,) integer group codes 0 … G−1 of the group effects, or None.
            group_scale: τ, the group effects' prior standard deviation, or None.
            num_groups: G, or None to take it from the codes.
            validate_args: NumPyro's ``validate_args``.
        """
        if approx not in APPROXIMATIONS:
            expected = ", ".join(map(repr, APPROXIMATIONS))
            raise ValueError(f"approx: expected one of {expected}, got {approx!r}")
        # 0 factorises K_uu as it is (identity checks at Z = X); fit() and the CLI take only jitter > 0.
        if jitter is not None and not (np.isfinite(jitter) and jitter >= 0):
            raise ValueError(f"jitter: expected a finite number ≥ 0 (or None for the policy), got {jitter!r}")
        self.approx = approx
        self.jitter = jitter
        self.fast, self.chunk_size, self.mesh = bool(fast), chunk_size, mesh
        self.precision = streaming.check_precision(precision)
        self._init_common(kernel, X, noise, mean, kernel_batch_shape, validate_args, Z=Z)
        self._init_groups(groups, group_scale, num_groups)

    def _init_groups(self, groups: Any, group_scale: Any, num_groups: int | None) -> None:
        """Check and keep the group effects' codes, their number G and τ (all None without effects)."""
        self.groups, self.group_scale, self.num_groups = None, None, None
        if groups is None and group_scale is None:
            if num_groups is not None:
                raise ValueError("num_groups: given without groups= and group_scale=")
            return
        if groups is None or group_scale is None:
            raise ValueError("groups, group_scale: group effects need both the codes and their scale τ")
        if self.approx not in ("sor", "dtc"):
            raise ValueError(
                f"groups: group effects are integrated out under 'sor' and 'dtc', not {self.approx!r}"
            )
        if self.batch_shape:
            raise ValueError(
                f"groups: group effects take one member, not a batch of shape {self.batch_shape}"
            )
        self.groups, self.num_groups = effects.check_groups(
            groups, self.event_shape[0], num_groups=num_groups
        )
        if jnp.ndim(group_scale) != 0:
            raise ValueError(f"group_scale: expected a scalar τ, got shape {tuple(jnp.shape(group_scale))}")
        if is_concrete(group_scale) and not (np.isfinite(group_scale) and float(group_scale) >= 0):
            raise ValueError(f"group_scale: expected a finite τ ≥ 0, got {group_scale!r}")
        self.group_scale = jnp.asarray(group_scale, dtype=self.X.dtype)

    # -- one member: the O(NM²) factorisation and what is computed from it ---------------------------

    def _settings(self) -> dict[str, Any]:
        """The streamed pass's settings (:func:`bayes_rbfn.gp.woodbury_sums.woodbury_stats`)."""
        return {"chunk_size": self.chunk_size, "mesh": self.mesh}

    def _factor(self, r: jax.Array) -> tuple[linalg.Woodbury, Any]:
        """Woodbury factor of C = Q_ff + diag(d) for the centred r, and d (:func:`sparse.training_factor`).

        With group effects, that of C = Q_ff + diag(d) + τ² H Hᵀ (:func:`bayes_rbfn.gp.effects.factor`).
        """
        if self.groups is not None:
            return self._group_factor(r)[0], self.noise**2
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

    def _group_factor(self, r: jax.Array) -> tuple[linalg.Woodbury, effects.GroupTerms]:
        """:func:`bayes_rbfn.gp.effects.factor` for the centred r: the factor and the terms it shares."""
        Luu = linalg.cholesky(self.kernel.inducing_gram(self.Z), self.jitter)
        settings = {"fast": self.fast, "precision": self.precision, **self._settings()}
        args = (self.groups, self.num_groups, self.group_scale)
        return effects.factor(self.kernel, self.Z, self.X, r, self.noise**2, Luu, *args, **settings)

    def _log_prob_member(self, value: jax.Array) -> jax.Array:
        """log N(y | m, Q_ff + D) (VFE: − ½ tr(D⁻¹(K_ff − Q_ff))), O(NM²); -inf if a factorisation fails."""
        # One compiled program (also when NumPyro runs the model eagerly while initialising).
        return _sparse_log_prob(self, value)

    @linalg.full_precision
    def _sample_member(self, key: jax.Array, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        """Draws of y, shape sample_shape + (N,): f = K_fu L_uu⁻ᵀ v (+ FITC's diagonal) + σε, O(NM) each.

        For ``approx="vfe"`` these are draws from DTC's marginal (the module docstring says why).
        """
        Luu = linalg.cholesky(self.kernel.inducing_gram(self.Z), self.jitter)
        # Rows of K_fu L_uu⁻ᵀ = (L_uu⁻¹ K_uf)ᵀ: Q_ff = (that)(that)ᵀ.
        factor_f = linalg.solve_lower(Luu, self.kernel.inducing_cross(self.Z, self.X)).T
        k_low, k_fitc, k_noise = jax.random.split(key, 3)
        M, N = self.Z.shape[0], self.X.shape[0]
        v = jax.random.normal(k_low, (*sample_shape, M), dtype=self.X.dtype)
        y = self.loc + v @ factor_f.T
        if self.approx == "fitc":
            residual = nystrom_residual(self.kernel, self.Z, Luu, self.X, **self._settings())
            y = y + jnp.sqrt(residual) * jax.random.normal(k_fitc, (*sample_shape, N), dtype=self.X.dtype)
        if self.groups is not None:
            k_noise, k_groups = jax.random.split(k_noise)
            beta = jax.random.normal(k_groups, (*sample_shape, self.num_groups), dtype=self.X.dtype)
            y = y + self.group_scale * beta[..., self.groups]
        return y + self.noise * jax.random.normal(k_noise, (*sample_shape, N), dtype=self.X.dtype)

    def _replicates_member(self, key: jax.Array, y: jax.Array, sample_shape: tuple[int, ...]) -> jax.Array:
        """y_rep ~ p(y_rep | y), O(NM²) for the factor and O(NM) per draw, in weight space.

        Each approximation with its own training conditional (:func:`bayes_rbfn.gp.sparse.replicates`: SoR
        and DTC deterministic given the weights, FITC's and VFE's independent diag(K_ff − Q_ff)).
        """
        r = y - self.loc
        if self.groups is not None:
            factor, terms = self._group_factor(r)
            args = (r, self.groups, self.num_groups, self.group_scale, key, sample_shape)
            return self.loc + effects.replicates(factor, terms, *args)
        factor, d = self._factor(r)
        # FITC's factor already holds λ = diag(K_ff − Q_ff) in d = σ² + λ.
        residual = jnp.maximum(d - self.noise**2, 0.0) if self.approx == "fitc" else None
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
            residual=residual,
            **self._settings(),
        )
        return self.loc + draws

    def _moments_member(self, y: jax.Array, X_test: jax.Array, full_cov: bool) -> conditional.Gaussian:
        """:func:`bayes_rbfn.gp.conditional.sor_predict`.

        SoR: f* = K_*u α with α | y Gaussian; DTC, FITC and VFE add the prior variance K_** − Q_** that the
        Nyström prior drops ([1] eqs. (21), (25)).
        """
        factor, _ = self._factor(y - self.loc)
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

    def component_moments(
        self, y: Any, X_test: dict[str, Any], *, full_cov: bool = False
    ) -> dict[str, conditional.Gaussian]:
        """Components' contributions f*_c = K_{*,u_c} α_c given y, for an Additive kernel.

        For an :class:`~bayes_rbfn.gp.kernels.Additive` kernel: their weights integrated out analytically
        with all the others (:func:`bayes_rbfn.gp.conditional.component_predict`; the weight-space form,
        whatever ``approx``), from one factorisation for all the components asked for.

        Args:
            y: (N,) observations (unbatched distributions only).
            X_test: {component name: its (S_c, D) or (S_c,) test inputs}.
            full_cov: also the (S_c, S_c) covariances.

        Returns:
            {component name: :class:`~bayes_rbfn.gp.conditional.Gaussian`}.
        """
        if not isinstance(self.kernel, Additive):
            raise ValueError("kernel: component_moments needs an Additive kernel (a sum of components)")
        if self.batch_shape or jnp.ndim(y) != 1:
            raise ValueError("y: component_moments takes one member's (N,) observations (no batch)")
        if not isinstance(X_test, dict) or not X_test:
            raise ValueError("X_test: expected a non-empty dict {component name: test inputs}")
        inputs = {
            name: check_X(x, f"X_test[{name!r}]", dim=self.X.shape[-1]).astype(self.X.dtype)
            for name, x in X_test.items()
        }
        y = jnp.asarray(y, dtype=self.X.dtype)
        self._check_length(y, "y")
        factor, _ = self._factor(y - self.loc)
        return {
            name: conditional.component_predict(factor, self.kernel, self.Z, x, name, full_cov)
            for name, x in inputs.items()
        }

    def group_moments(self, y: Any) -> conditional.Gaussian:
        """The posterior of the group effects β | y, a :class:`~bayes_rbfn.gp.conditional.Gaussian`.

        With ``mean`` and ``var`` of shape (G,) (:func:`bayes_rbfn.gp.effects.effect_moments`), from the
        factorisation of the marginal with every other Gaussian part integrated out.

        Args:
            y: (N,) observations (the distribution takes one member with group effects).
        """
        if self.groups is None:
            raise ValueError(
                "groups: group_moments needs a SparseGP with group effects (groups=, group_scale=)"
            )
        y = jnp.asarray(y, dtype=self.X.dtype)
        if y.shape != self.event_shape:
            raise ValueError(f"y: expected shape {self.event_shape}, got {tuple(y.shape)}")
        r = y - self.loc
        factor, terms = self._group_factor(r)
        return effects.effect_moments(factor, terms, r, self.groups, self.num_groups, self.group_scale)

    def _loo_member(self, y: jax.Array, exact: bool | str | None, statistic: str) -> jax.Array:
        """:func:`bayes_rbfn.gp.block_loo.sor_loo` under N(m, Q_ff + diag(d)), d from the factor.

        With group effects :func:`bayes_rbfn.gp.effects.loo` (``exact`` does not apply).
        """
        r = y - self.loc
        if self.groups is not None:
            factor, terms = self._group_factor(r)
            return effects.loo(factor, terms, r, self.groups, self.num_groups, statistic=statistic)
        factor, d = self._factor(r)
        return block_loo.sor_loo(
            factor, self.kernel, self.Z, self.X, r, d, exact=exact, statistic=statistic, **self._settings()
        )


@jax.jit
def _sparse_log_prob(d: SparseGP, value: jax.Array) -> jax.Array:
    factor, _ = d._factor(value - d.loc)
    return linalg.finite_or_neg_inf(sparse.log_marginal(d.approx, factor, d.kernel, d.X, d.noise))


class ExactGP(_GaussianProcessMarginal):
    """y ~ N(m, K_ff + σ²I), the exact GP marginal; event shape (N,).

    K_ff + diag(σ²) with one σ_i per point. O(N³): the reference model.

    Args as :class:`SparseGP` without ``Z``, ``approx`` and ``jitter`` (σ² > 0 regularises K_ff).
    """

    def __init__(
        self,
        kernel: Kernel,
        X: Any,
        noise: Any,
        *,
        mean: Any = 0.0,
        kernel_batch_shape: tuple[int, ...] = (),
        validate_args: bool | None = None,
    ) -> None:
        """The exact GP marginal; ``ValueError`` for malformed inputs.

        Args:
            kernel: a :class:`~bayes_rbfn.gp.kernels.Kernel` (its hyperparameters may be NumPyro samples).
            X: (N, D) or (N,) inputs, or (..., N, D): one set of inputs per member of a batch.
            noise: σ, the noise standard deviation: a scalar, (N,) one per point, or a batch of either.
            mean: the prior mean: a number, an (N,) or (..., N) array, or a callable of one member's X.
            kernel_batch_shape: the batch axes of the kernel's hyperparameters.
            validate_args: NumPyro's ``validate_args``.
        """
        self._init_common(kernel, X, noise, mean, kernel_batch_shape, validate_args)

    def _log_prob_member(self, value: jax.Array) -> jax.Array:
        """log N(y | m, K_ff + σ²I) (R&W eq. (2.30)); -inf if the factorisation fails."""
        logp = conditional.exact_log_marginal(self.kernel, self.X, value - self.loc, self.noise)
        return linalg.finite_or_neg_inf(logp)

    @linalg.full_precision
    def _sample_member(self, key: jax.Array, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        L = conditional.exact_factor(self.kernel, self.X, self.noise)
        eps = jax.random.normal(key, (*sample_shape, self.X.shape[0]), dtype=self.X.dtype)
        return self.loc + eps @ L.T

    def _replicates_member(self, key: jax.Array, y: jax.Array, sample_shape: tuple[int, ...]) -> jax.Array:
        """f from its exact conditional given y, plus noise.

        Matheron's rule, :func:`conditional.exact_replicates`.
        """
        r = y - self.loc
        return self.loc + conditional.exact_replicates(self.kernel, self.X, r, self.noise, key, sample_shape)

    def _moments_member(self, y: jax.Array, X_test: jax.Array, full_cov: bool) -> conditional.Gaussian:
        """The exact predictive (:func:`conditional.exact_predict`)."""
        return conditional.exact_predict(
            self.kernel, self.X, y - self.loc, self.noise, X_test, full_cov=full_cov
        )

    def _loo_member(self, y: jax.Array, exact: bool | str | None, statistic: str) -> jax.Array:
        """:func:`conditional.exact_loo` (O(N³)); ``exact`` changes nothing."""
        return conditional.exact_loo(self.kernel, self.X, y - self.loc, self.noise, statistic)


def deferred_loo(evaluate: Callable[[dict, Any], np.ndarray], draws: dict) -> np.ndarray:
    """LOO values of many draws with the leave-block-out pass compiled only for the draws that need it.

    ``evaluate(draws, exact)`` → (S, ...) values of the draws ({name: (S, ...)}), ``exact`` passed on to
    :func:`bayes_rbfn.gp.block_loo.sor_loo`. All draws are evaluated with ``exact="defer"`` (points the model
    interpolates come back NaN), then only the draws with a NaN again with ``exact=True``. A NaN that
    remains is a real failure.
    """
    values = np.array(evaluate(draws, "defer"))
    again = np.isnan(values).reshape(values.shape[0], -1).any(axis=-1)
    if again.any():
        values[again] = evaluate({n: np.asarray(v)[again] for n, v in draws.items()}, True)
    return values
