"""Covariance kernels as small immutable JAX pytrees.

Every kernel is a frozen value holding its hyperparameters as array leaves, so ``jit``, ``vmap`` and
``grad`` pass straight through it. ``k(X1, X2)`` returns the Gram matrix, ``k.diag(X)`` its diagonal
without forming the matrix, and ``k1 + k2`` / ``k1 * k2`` build composite kernels that are pytrees too.

The algebra users expect:

* ``c * k`` and ``k * c`` with a positive scalar c (a Python number, an array or a traced value such as a
  NumPyro sample) give :class:`Scaled`, which holds c as an array leaf;
* ``k.on_dims([0, 2])`` (or ``ActiveDims(k, [0, 2])``) makes k act on those input columns only, so
  ``SquaredExponential(1.0).on_dims([0]) + Linear(0.5).on_dims([1])`` is one kernel of 2-D inputs. The
  columns are static (pytree aux data), not leaves.

Besides the stationary kernels (squared exponential, exponential, Matérn, rational quadratic, inverse
multiquadric) and the
periodic one there are :class:`Linear` (dot product), :class:`Constant` and :class:`WhiteNoise`. The first
two are not functions of x − x' alone; code that shifts the inputs to gain precision
(:mod:`~bayes_rbfn.gp.streaming`) does so only for kernels it knows to be translation-invariant.

Inputs may be ``(N,)`` (one input dimension) or ``(N, D)``. Hyperparameters follow
docs/mathematics.md#notation: ``variance``
is the amplitude s², ``lengthscale`` is a scalar or one value per input dimension (ARD).

The stationary kernels work on the scaled squared distance r² = Σ_d (x_d − x'_d)² / ℓ_d² (no ``sqrt``
where the kernel does not need one). Where a distance r is needed (exponential, Matérn) it is taken
through :func:`safe_sqrt`, whose gradient at r² = 0 is zero instead of ``inf``/NaN, so gradients with
respect to the hyperparameters stay finite at coincident points (e.g. when Z ⊂ X).

References
----------
[1] Rasmussen, C. E. & Williams, C. K. I. (2006). *Gaussian Processes for Machine Learning*, ch. 4.
[2] Bindel, D. (2019). Notes on kernels, interpolation and the power function (CS 6241).
[3] Micchelli, C. A. (1986). Interpolation of scattered data: distance matrices and conditionally
    positive definite functions. Constructive Approximation 2, 11–22.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np

from bayes_rbfn.gp.validation import is_concrete

__all__ = [
    "ActiveDims",
    "Additive",
    "Categorical",
    "Constant",
    "Exponential",
    "InverseMultiquadric",
    "Kernel",
    "Linear",
    "Matern32",
    "Matern52",
    "Periodic",
    "Product",
    "RationalQuadratic",
    "Scaled",
    "SquaredExponential",
    "Sum",
    "WhiteNoise",
    "additive",
    "as_2d",
    "check_nonnegative_parameter",
    "check_positive_parameter",
    "common_origin",
    "safe_sqrt",
    "scaled_sqdist",
]


# Python floats, not np.float64: a NumPy scalar is strongly typed and would promote float32 inputs to
# float64 whenever x64 is enabled.
_SQRT3 = math.sqrt(3.0)
_SQRT5 = math.sqrt(5.0)


def as_2d(X: Any) -> jax.Array:
    """Return ``X`` as a JAX array of shape (N, D); a 1-D ``(N,)`` input becomes ``(N, 1)``."""
    X = jnp.asarray(X)
    if X.ndim == 0:
        return X.reshape(1, 1)
    if X.ndim == 1:
        return X[:, None]
    return X


def safe_sqrt(r2: jax.Array) -> jax.Array:
    """√r² with a finite (zero) gradient at r² = 0.

    The double ``where`` keeps the untaken branch from producing ``inf`` in the backward pass.
    """
    positive = r2 > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, r2, 1.0)), 0.0)


def scaled_sqdist(X1: jax.Array, X2: jax.Array, lengthscale: jax.Array) -> jax.Array:
    """Squared distance Σ_d (x_d − x'_d)² / ℓ_d², shape (N1, N2).

    The value is computed from differences rather than ‖x‖² + ‖x'‖² − 2x·x', which loses digits to
    cancellation. The difference is taken *before* scaling, so coincident points give exactly r² = 0 (and
    a zero derivative with respect to ℓ): scaling first (x/ℓ − x'/ℓ) lets XLA round the two quotients
    differently under ``jit``, leaving r² ~ 1e-33 on the diagonal, where √r² has a huge derivative. The
    differences are laid out (D, N1, N2), so the sum over d runs along whole rows of the result, and
    multiplied by 1/ℓ (D divisions, not N1·N2·D).

    Derivatives go through :func:`_sqdist_jvp`, which writes them with matrix products.
    """
    X1, X2 = as_2d(X1), as_2d(X2)
    inv_lengthscale = jnp.broadcast_to(1.0 / jnp.asarray(lengthscale), X1.shape[-1:])
    return _sqdist(X1, X2, inv_lengthscale)


@jax.custom_jvp
def _sqdist(X1: jax.Array, X2: jax.Array, inv_lengthscale: jax.Array) -> jax.Array:
    diff = (X1.T[:, :, None] - X2.T[:, None, :]) * inv_lengthscale[:, None, None]
    return jnp.sum(diff * diff, axis=0)


def _sqdist_jvp(primals: tuple, tangents: tuple) -> tuple[jax.Array, jax.Array]:
    """Tangent of r²_ij = Σ_d c_d² (x_id − x'_jd)² (c = 1/ℓ).

    dr²_ij = 2 Σ_d c_d² (x_id − x'_jd)(dx_id − dx'_jd) + 2 Σ_d c_d dc_d (x_id − x'_jd)².

    With one input and the inputs fixed (symbolic zero tangents: a sampler moves only the hyperparameters)
    the tangent is r² · 2 dc / c, exact and with no product. Otherwise it is expanded into row and column
    sums and three (N1, D)·(D, N2) products (with several inputs these are cheaper than a second pass over
    the (D, N1, N2) differences, even with the inputs fixed). Reverse mode transposes these products, so a
    gradient costs a few products instead of passes over an (N1, N2, D) array; the value itself keeps its
    differences (:func:`scaled_sqdist`). The expansion's rounding is relative to the derivative's terms,
    not to r², so it leaves the zero derivative at coincident points to the kernels' :func:`safe_sqrt`.
    The terms are those of the inputs taken about a common point (:func:`common_origin`), which leaves
    every difference x − x' as it is: taken about 0, inputs far from the origin relative to their spread
    (times in seconds since 1970 over a second, say) would cancel away every digit of the derivative.
    """
    X1_raw, X2_raw, c = primals
    dX1, dX2, dc = tangents
    r2 = _sqdist(X1_raw, X2_raw, c)
    inputs_fixed = _is_zero(dX1) and _is_zero(dX2)
    if inputs_fixed and _is_zero(dc):
        return r2, jnp.zeros_like(r2)
    if inputs_fixed and c.shape[0] == 1:
        return r2, r2 * (2.0 * dc[0] / c[0])
    dX1, dX2, dc = (_instantiated(t) for t in tangents)
    origin = common_origin(X2_raw)
    X1, X2 = X1_raw - origin, X2_raw - origin
    # Full precision, the package's policy for every product (a GPU would round float32 inputs to TF32).
    dot = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)
    c2 = c * c
    cdc = c * dc
    A1, A2 = X1 * c2, X2 * c2
    rows = jnp.sum(A1 * dX1, axis=1) + dot(X1 * X1, cdc)
    cols = jnp.sum(A2 * dX2, axis=1) + dot(X2 * X2, cdc)
    cross = dot(A1, dX2.T) + dot(dX1, A2.T) + 2.0 * dot(X1 * cdc, X2.T)
    return r2, 2.0 * (rows[:, None] + cols[None, :] - cross)


_sqdist.defjvp(_sqdist_jvp, symbolic_zeros=True)


def _is_zero(tangent: Any) -> bool:
    """Whether a custom JVP rule's tangent is a symbolic zero (that argument is not differentiated)."""
    return isinstance(tangent, jax.custom_derivatives.SymbolicZero)


def _instantiated(tangent: Any) -> jax.Array:
    """A custom JVP rule's tangent as an array: zeros for a symbolic zero."""
    return jnp.zeros(tangent.shape, tangent.dtype) if _is_zero(tangent) else tangent


def common_origin(X: jax.Array) -> jax.Array:
    """The point (D,) a translation-invariant kernel takes its inputs about: the first row of X (N, D).

    Any common point leaves the differences x − x' unchanged; one of the inputs keeps the shifted inputs
    within the data's spread, so expansions of the differences and sines of the inputs keep their digits
    wherever the origin of an input lies. The first row, not a mean: the streamed passes pad the data's
    last block with zero rows (:func:`bayes_rbfn.gp.streaming.zero_padded`), which would pull a mean
    towards 0. No derivative flows through it (the kernels do not depend on it).
    """
    return jax.lax.stop_gradient(X[0])


def _real_parameter(cls_name: str, name: str, value: Any) -> np.ndarray:
    """A concrete hyperparameter as a float array; ``ValueError`` naming it when not made of real numbers.

    Not real numbers: a string, a complex number, a bool, an object.
    """
    try:
        arr = np.asarray(value)
    except Exception as err:  # pragma: no cover - exotic objects
        raise ValueError(f"{cls_name}: {name} must be a real number, got {value!r}") from err
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{cls_name}: {name} must be a real number (or an array of them), got {value!r}")
    return arr.astype(float)


def _variance_diag(variance: Any, X: Any) -> jax.Array:
    """k(x_i, x_i) = s² at every row of X, shape (N,), in the result type of X and s²."""
    X = as_2d(X)
    return jnp.broadcast_to(variance, X.shape[:1]).astype(jnp.result_type(X, variance))


def check_positive_parameter(cls_name: str, name: str, value: Any) -> None:
    """Raise ``ValueError`` when a concrete hyperparameter is not finite and positive."""
    if not is_concrete(value):
        return
    arr = _real_parameter(cls_name, name, value)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{cls_name}: {name} must be finite, got {value!r}")
    if not np.all(arr > 0):
        raise ValueError(f"{cls_name}: {name} must be positive, got {value!r}")


def check_nonnegative_parameter(cls_name: str, name: str, value: Any) -> None:
    """Raise ``ValueError`` when a concrete hyperparameter is not finite and ≥ 0."""
    if not is_concrete(value):
        return
    arr = _real_parameter(cls_name, name, value)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{cls_name}: {name} must be finite, got {value!r}")
    if not np.all(arr >= 0):
        raise ValueError(f"{cls_name}: {name} must be non-negative, got {value!r}")


def _is_scalar(value: Any) -> bool:
    """A real number, 0-d array or 0-d traced value (``bool`` excluded): what may scale a kernel."""
    if isinstance(value, bool | np.bool_):
        return False
    if isinstance(value, int | float | np.integer | np.floating):
        return True
    return isinstance(value, np.ndarray | jax.Array) and np.ndim(value) == 0


class Kernel:
    """Base class: a covariance function k(x, x') over inputs of shape (N, D).

    Subclasses list their hyperparameters in ``params`` (array leaves of the pytree, or nested kernels),
    any hashable non-array settings in ``static`` (the pytree's aux data), and implement ``__call__`` and
    ``diag``. Instances are immutable.

    A kernel carries no priors and no help text: the kernel families of the collection, which name a class
    and the priors its ``params`` are sampled under, are :data:`bayes_rbfn.models.families.FAMILIES`.
    """

    params: ClassVar[tuple[str, ...]] = ()
    static: ClassVar[tuple[str, ...]] = ()
    positive: ClassVar[tuple[str, ...]] = ()
    nonnegative: ClassVar[tuple[str, ...]] = ()

    # NumPy scalars and arrays defer to Kernel.__rmul__ instead of broadcasting over the kernel.
    __array_ufunc__ = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register the subclass as a JAX pytree: ``params`` its children, ``static`` its aux data.

        Args:
            **kwargs: passed on to ``object.__init_subclass__``.
        """
        super().__init_subclass__(**kwargs)
        jax.tree_util.register_pytree_with_keys(
            cls,
            lambda k: (
                tuple((jax.tree_util.GetAttrKey(p), getattr(k, p)) for p in k.params),
                k._aux(),
            ),
            cls._unflatten,
            flatten_func=lambda k: (tuple(getattr(k, p) for p in k.params), k._aux()),
        )

    def _aux(self) -> tuple | None:
        # None for a kernel without static settings (most of them): no aux data, like a plain node.
        return tuple(getattr(self, s) for s in self.static) if self.static else None

    @classmethod
    def _unflatten(cls, aux: tuple | None, children: tuple) -> Kernel:
        # Bypass __init__: JAX rebuilds pytrees with tracers or placeholder leaves.
        obj = object.__new__(cls)
        for name, value in zip(cls.params, children, strict=True):
            object.__setattr__(obj, name, value)
        for name, value in zip(cls.static, aux or (), strict=True):
            object.__setattr__(obj, name, value)
        return obj

    def _set(self, **values: Any) -> None:
        for name, value in values.items():
            if name in self.positive:
                check_positive_parameter(type(self).__name__, name, value)
            if name in self.nonnegative:
                check_nonnegative_parameter(type(self).__name__, name, value)
            object.__setattr__(self, name, jnp.asarray(value) if is_concrete(value) else value)

    def __setattr__(self, name: str, value: Any) -> None:
        """Always raise ``AttributeError``: kernels are immutable (:meth:`replace` makes a changed copy).

        Args:
            name: the attribute's name.
            value: the value that would have been set.
        """
        raise AttributeError(f"{type(self).__name__} is immutable; use .replace({name}=...)")

    def __delattr__(self, name: str) -> None:
        """Always raise ``AttributeError``: kernels are immutable.

        Args:
            name: the attribute's name.
        """
        raise AttributeError(f"{type(self).__name__} is immutable; cannot delete {name}")

    def replace(self, **values: Any) -> Kernel:
        """A copy with some hyperparameters (or static settings) replaced."""
        current = {p: getattr(self, p) for p in (*self.params, *self.static)}
        current.update(values)
        return type(self)(**current)

    def __call__(self, X1: Any, X2: Any | None = None) -> jax.Array:
        """The Gram matrix k(X1, X2), shape (N1, N2).

        Args:
            X1: (N1, D) or (N1,) inputs.
            X2: (N2, D) or (N2,) inputs; None: X1.
        """
        raise NotImplementedError

    def diag(self, X: Any) -> jax.Array:
        """The diagonal k(x_i, x_i), shape (N,), without forming the Gram matrix."""
        raise NotImplementedError

    def inducing_gram(self, Z: Any) -> jax.Array:
        """K_uu, the prior covariance of the inducing values at Z, shape (M, M): k(Z, Z).

        Block-diagonal for an :class:`Additive` kernel, whose components have their own inducing inputs.
        """
        return self(Z, Z)

    def inducing_cross(self, Z: Any, X: Any) -> jax.Array:
        """K_uf, the covariance of the inducing values at Z with f at X, shape (M, N): k(Z, X).

        One block of rows per component for an :class:`Additive` kernel.
        """
        return self(Z, X)

    def __add__(self, other: Kernel) -> Sum:
        """``k1 + k2``, their :class:`Sum`.

        Args:
            other: the kernel to add.
        """
        return Sum(self, other)

    def __mul__(self, other: Kernel | Any) -> Product | Scaled:
        """``k1 * k2`` is their :class:`Product`; ``k * c`` with a scalar c is ``Scaled(k, c)``."""
        if isinstance(other, Kernel):
            return Product(self, other)
        return self.__rmul__(other)

    def __rmul__(self, other: Any) -> Scaled:
        """``c * k`` with a scalar c (a number, 0-d array or traced value) is ``Scaled(k, c)``."""
        if _is_scalar(other):
            return Scaled(self, other)
        if isinstance(other, np.ndarray | jax.Array):
            raise TypeError(
                f"{type(self).__name__}: a kernel can be scaled by a scalar only, got an array of shape "
                f"{np.shape(other)}"
            )
        return NotImplemented

    def on_dims(self, dims: int | Sequence[int]) -> ActiveDims:
        """This kernel acting on the input columns ``dims`` only: ``ActiveDims(self, dims)``."""
        return ActiveDims(self, dims)

    def __repr__(self) -> str:
        """``Name(param=value, …)``, with the hyperparameters' values as (nested) lists."""
        fields = ", ".join(f"{p}={np.asarray(getattr(self, p)).tolist()!r}" for p in self.params)
        return f"{type(self).__name__}({fields})"


class Stationary(Kernel):
    """k(x, x') = s² g(r²) with r² the ARD-scaled squared distance; subclasses give g."""

    params = ("lengthscale", "variance")
    positive = ("lengthscale", "variance")

    def __init__(self, lengthscale: Any = 1.0, variance: Any = 1.0) -> None:
        self._set(lengthscale=lengthscale, variance=variance)

    def profile(self, r2: jax.Array) -> jax.Array:
        """g(r²), the kernel's correlation at scaled squared distance r²."""
        raise NotImplementedError

    def __call__(self, X1: Any, X2: Any | None = None) -> jax.Array:
        X2 = X1 if X2 is None else X2
        return self.variance * self.profile(scaled_sqdist(X1, X2, self.lengthscale))

    def diag(self, X: Any) -> jax.Array:
        return _variance_diag(self.variance, X)


class SquaredExponential(Stationary):
    """Squared exponential k = s² exp(−r²/2) (RBF kernel). See eq. (4.9) in [1] of the module."""

    def profile(self, r2: jax.Array) -> jax.Array:
        """g(r²) = exp(−r²/2).

        Args:
            r2: scaled squared distances r², any shape (the result has the same).
        """
        return jnp.exp(-0.5 * r2)


class Exponential(Stationary):
    """Exponential (Matérn 1/2) k = s² exp(−r). Positive definite but not differentiable at r = 0."""

    def profile(self, r2: jax.Array) -> jax.Array:
        """g(r²) = exp(−r), with r = √r² taken through :func:`safe_sqrt`.

        Args:
            r2: scaled squared distances r², any shape (the result has the same).
        """
        return jnp.exp(-safe_sqrt(r2))


class Matern32(Stationary):
    """Matérn 3/2 k = s² (1 + √3 r) exp(−√3 r). See eq. (4.17) in [1] of the module."""

    def profile(self, r2: jax.Array) -> jax.Array:
        """g(r²) = (1 + √3 r) exp(−√3 r).

        Args:
            r2: scaled squared distances r², any shape (the result has the same).
        """
        r = _SQRT3 * safe_sqrt(r2)
        return (1.0 + r) * jnp.exp(-r)


class Matern52(Stationary):
    """Matérn 5/2 k = s² (1 + √5 r + 5r²/3) exp(−√5 r). See eq. (4.17) in [1] of the module."""

    def profile(self, r2: jax.Array) -> jax.Array:
        """g(r²) = (1 + √5 r + 5r²/3) exp(−√5 r).

        Args:
            r2: scaled squared distances r², any shape (the result has the same).
        """
        r = _SQRT5 * safe_sqrt(r2)
        return (1.0 + r + (5.0 / 3.0) * r2) * jnp.exp(-r)


class RationalQuadratic(Stationary):
    """Rational quadratic k = s² (1 + r²/(2α))^(−α), with r² the ARD-scaled squared distance.

    Eq. (4.19) in [1] of the module: a scale mixture of squared exponentials whose inverse squared
    lengthscales are Gamma-distributed with shape α (``mixture_shape``); α → ∞ gives the squared
    exponential. ``mixture_shape`` > 0 is a scalar. Evaluated as exp(−α log1p(r²/(2α))), accurate for
    small r² and large α.
    """

    params = ("lengthscale", "variance", "mixture_shape")
    positive = ("lengthscale", "variance", "mixture_shape")

    def __init__(self, lengthscale: Any = 1.0, variance: Any = 1.0, mixture_shape: Any = 1.0) -> None:
        """A rational quadratic kernel; concrete hyperparameters must be finite and > 0.

        Args:
            lengthscale: ℓ, a scalar or one value per input dimension.
            variance: s², the amplitude.
            mixture_shape: α, the shape, a scalar.
        """
        self._set(lengthscale=lengthscale, variance=variance, mixture_shape=mixture_shape)

    def profile(self, r2: jax.Array) -> jax.Array:
        """g(r²) = (1 + r²/(2α))^(−α), computed as exp(−α log1p(r²/(2α))).

        Args:
            r2: scaled squared distances r², any shape (the result has the same).
        """
        return jnp.exp(-self.mixture_shape * jnp.log1p(r2 * (0.5 / self.mixture_shape)))


class InverseMultiquadric(Stationary):
    """Inverse multiquadric k = s² (1 + r²)^(−1/2), with r² the ARD-scaled squared distance.

    A classic radial basis of RBF networks (Hardy's multiquadric inverted): positive definite for every
    lengthscale (a completely monotone function of r², [3] of the module), and the rational quadratic at
    α = 1/2 with its lengthscale halved. Its correlations decay like 1/r, far more slowly than the squared
    exponential's.
    """

    def profile(self, r2: jax.Array) -> jax.Array:
        """g(r²) = (1 + r²)^(−1/2).

        Args:
            r2: scaled squared distances r², any shape (the result has the same).
        """
        return jax.lax.rsqrt(1.0 + r2)


class Periodic(Kernel):
    """MacKay's periodic kernel k = s² exp(−2 Σ_d sin²(π (x_d − x'_d) / p) / ℓ_d²).

    See eq. (4.31) in [1] of the module. ``period`` p and ``lengthscale`` ℓ may be scalars or per-dimension.
    sin² of the signed difference equals sin² of the distance, so no square root is needed. The sine of
    the difference is taken as sin a cos b − cos a sin b with a = π(x − o)/p, b = π(x' − o)/p about a common
    point o (:func:`common_origin`): sines and cosines of the N1 + N2 inputs instead of N1·N2 sines, and
    exactly 0 at coincident inputs (the two products are then the same numbers); elsewhere it is within a
    few ulps of 1 absolutely.
    """

    params = ("lengthscale", "variance", "period")
    positive = ("lengthscale", "variance", "period")

    def __init__(self, lengthscale: Any = 1.0, variance: Any = 1.0, period: Any = 1.0) -> None:
        """A periodic kernel; concrete hyperparameters must be finite and > 0.

        Args:
            lengthscale: ℓ, relative to the period: a scalar or one value per input dimension.
            variance: s², the amplitude.
            period: p, a scalar or one value per input dimension.
        """
        self._set(lengthscale=lengthscale, variance=variance, period=period)

    def __call__(self, X1: Any, X2: Any | None = None) -> jax.Array:
        """The Gram matrix s² exp(−2 Σ_d sin²(π (x_d − x'_d) / p_d) / ℓ_d²), shape (N1, N2).

        Args:
            X1: (N1, D) or (N1,) inputs.
            X2: (N2, D) or (N2,) inputs; None: X1.
        """
        X1 = as_2d(X1)
        X2 = X1 if X2 is None else as_2d(X2)
        D = X1.shape[-1]
        # Reciprocals of the (D,) hyperparameters, not a division per entry (see scaled_sqdist).
        frequency = jnp.broadcast_to(jnp.pi / jnp.asarray(self.period), (D,))
        inv_lengthscale = jnp.broadcast_to(1.0 / jnp.asarray(self.lengthscale), (D,))
        # The sines of inputs about a common point (the difference is unchanged), not about 0, where a
        # large input (a time in seconds since 1970) would leave the sine of its phase no digits.
        origin = common_origin(X2)
        a, b = ((X1 - origin) * frequency).T, ((X2 - origin) * frequency).T  # (D, N1), (D, N2)
        sin_diff = (
            jnp.sin(a)[:, :, None] * jnp.cos(b)[:, None, :] - jnp.cos(a)[:, :, None] * jnp.sin(b)[:, None, :]
        )
        scaled = sin_diff * inv_lengthscale[:, None, None]
        return self.variance * jnp.exp(-2.0 * jnp.sum(scaled * scaled, axis=0))

    def diag(self, X: Any) -> jax.Array:
        """k(x, x) = s² at every row of X, shape (N,).

        Args:
            X: (N, D) or (N,) inputs.
        """
        return _variance_diag(self.variance, X)


class Linear(Kernel):
    """Dot-product (linear) kernel k = Σ_d s_d² x_d x'_d + c.

    The covariance of f(x) = wᵀx + b with w ~ N(0, diag(s²)) and b ~ N(0, c): Bayesian linear regression
    through the origin plus an intercept (§4.2.2 of [1] of the module, with Σ_p = diag(s²) and σ_0² = c).

    Args:
        variance: s², the prior variance of the slopes: a scalar or one value per input dimension, > 0.
        offset: c, the prior variance of the intercept, ≥ 0.

    Not stationary: k changes when both inputs are shifted, so inputs far from the origin (years, say) give
    an ill-conditioned Gram matrix; centre them first. Its Gram matrix has rank ≤ D + 1, so on its own it
    cannot be the kernel of a sparse GP with more than D + 1 inducing inputs; add it to another kernel.
    """

    params = ("variance", "offset")
    positive = ("variance",)
    nonnegative = ("offset",)

    def __init__(self, variance: Any = 1.0, offset: Any = 0.0) -> None:
        """A linear kernel; ``variance`` must be finite and > 0, ``offset`` finite and ≥ 0 (when concrete).

        Args:
            variance: s², the prior variance of the slopes: a scalar or one value per input dimension.
            offset: c, the prior variance of the intercept.
        """
        self._set(variance=variance, offset=offset)

    def __call__(self, X1: Any, X2: Any | None = None) -> jax.Array:
        """The Gram matrix X1 diag(s²) X2ᵀ + c, shape (N1, N2).

        Args:
            X1: (N1, D) or (N1,) inputs.
            X2: (N2, D) or (N2,) inputs; None: X1.
        """
        X1 = as_2d(X1)
        X2 = X1 if X2 is None else as_2d(X2)
        return (X1 * self.variance) @ X2.T + self.offset

    def diag(self, X: Any) -> jax.Array:
        """k(x, x) = Σ_d s_d² x_d² + c at every row of X, shape (N,).

        Args:
            X: (N, D) or (N,) inputs.
        """
        X = as_2d(X)
        return jnp.sum(X * self.variance * X, axis=-1) + self.offset


class _VarianceOnly(Kernel):
    """A kernel whose one hyperparameter is its value s² at coincident inputs (``diag``)."""

    params = ("variance",)
    positive = ("variance",)

    def __init__(self, variance: Any = 1.0) -> None:
        self._set(variance=variance)

    def diag(self, X: Any) -> jax.Array:
        return _variance_diag(self.variance, X)


class Constant(_VarianceOnly):
    """Constant kernel k(x, x') = c: a random offset b ~ N(0, c) shared by all inputs (§4.2.2 of [1])."""

    def __call__(self, X1: Any, X2: Any | None = None) -> jax.Array:
        """c at every pair of rows, shape (N1, N2), in the result type of the inputs and c.

        Args:
            X1: (N1, D) or (N1,) inputs.
            X2: (N2, D) or (N2,) inputs; None: X1.
        """
        X1 = as_2d(X1)
        X2 = X1 if X2 is None else as_2d(X2)
        dtype = jnp.result_type(X1, X2, self.variance)
        return jnp.broadcast_to(self.variance, (X1.shape[0], X2.shape[0])).astype(dtype)


class WhiteNoise(_VarianceOnly):
    """White-noise kernel k(x, x') = s² [x = x'], the indicator of equal inputs (all coordinates equal).

    A function of the two input *values*, not of which arrays were passed: k(X) = k(X, X) = s² I for
    distinct rows, cross-covariances are zero except between coincident points, and rows repeated in X
    share one white value (the Gram matrix is then s² times a block of ones, still positive semi-definite).
    Being a function of the points, it gives the same matrix inside and outside ``jit``, where a test of
    ``X2 is X1`` would not (``jit`` gives each argument its own tracer). Added to a kernel it regularises
    K_uu like a jitter of s², and adds s² to k(x, x) (``diag``), so DTC/FITC/VFE count it in the prior
    variance; but SoR's K_fu has no white part unless inducing inputs coincide with data points (e.g.
    chosen by pivoted Cholesky). For observation noise use the models' ``noise`` σ, not this kernel.
    """

    def __call__(self, X1: Any, X2: Any | None = None) -> jax.Array:
        """s² where a row of X1 equals a row of X2 in every coordinate, else 0; shape (N1, N2).

        Args:
            X1: (N1, D) or (N1,) inputs.
            X2: (N2, D) or (N2,) inputs; None: X1.
        """
        X1 = as_2d(X1)
        X2 = X1 if X2 is None else as_2d(X2)
        equal = jnp.all(X1[:, None, :] == X2[None, :, :], axis=-1)
        dtype = jnp.result_type(X1, X2, self.variance)
        return jnp.where(equal, self.variance, 0.0).astype(dtype)


class _Composite(Kernel):
    params = ("k1", "k2")

    def __init__(self, k1: Kernel, k2: Kernel) -> None:
        for name, k in (("k1", k1), ("k2", k2)):
            if not isinstance(k, Kernel):
                raise TypeError(f"{type(self).__name__}: {name} must be a Kernel, got {type(k).__name__}")
            if isinstance(k, Additive):
                raise TypeError(
                    f"{type(self).__name__}: {name} is an Additive kernel, whose components have inducing "
                    "inputs of their own; make the other kernel a component of it (or of one of its "
                    "components) instead"
                )
        object.__setattr__(self, "k1", k1)
        object.__setattr__(self, "k2", k2)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.k1!r}, {self.k2!r})"


class Sum(_Composite):
    """k(x, x') = k1(x, x') + k2(x, x')."""

    def __call__(self, X1: Any, X2: Any | None = None) -> jax.Array:
        """k1(X1, X2) + k2(X1, X2), shape (N1, N2).

        Args:
            X1: (N1, D) or (N1,) inputs.
            X2: (N2, D) or (N2,) inputs; None: X1.
        """
        return self.k1(X1, X2) + self.k2(X1, X2)

    def diag(self, X: Any) -> jax.Array:
        """k1.diag(X) + k2.diag(X), shape (N,).

        Args:
            X: (N, D) or (N,) inputs.
        """
        return self.k1.diag(X) + self.k2.diag(X)


class Product(_Composite):
    """k(x, x') = k1(x, x') · k2(x, x')."""

    def __call__(self, X1: Any, X2: Any | None = None) -> jax.Array:
        """k1(X1, X2) · k2(X1, X2) elementwise, shape (N1, N2).

        Args:
            X1: (N1, D) or (N1,) inputs.
            X2: (N2, D) or (N2,) inputs; None: X1.
        """
        return self.k1(X1, X2) * self.k2(X1, X2)

    def diag(self, X: Any) -> jax.Array:
        """k1.diag(X) · k2.diag(X), shape (N,).

        Args:
            X: (N, D) or (N,) inputs.
        """
        return self.k1.diag(X) * self.k2.diag(X)


class Scaled(Kernel):
    """k(x, x') = c · k0(x, x') with a scalar c > 0: what ``c * k0`` and ``k0 * c`` return.

    Args:
        kernel: k0.
        scale: c, a positive scalar (a number, a 0-d array or a traced value such as a NumPyro sample);
            held as an array leaf, so ``grad`` reaches it.
    """

    params = ("scale", "kernel")
    positive = ("scale",)

    def __init__(self, kernel: Kernel, scale: Any) -> None:
        """c · k0; ``TypeError`` unless ``kernel`` is a Kernel, ``ValueError`` unless ``scale`` is a scalar.

        Args:
            kernel: k0.
            scale: c, a positive scalar (a number, a 0-d array or a traced value).
        """
        if not isinstance(kernel, Kernel):
            raise TypeError(f"Scaled: kernel must be a Kernel, got {type(kernel).__name__}")
        if np.ndim(scale) != 0:
            raise ValueError(f"Scaled: scale must be a scalar, got shape {np.shape(scale)}")
        object.__setattr__(self, "kernel", kernel)
        self._set(scale=scale)

    def __call__(self, X1: Any, X2: Any | None = None) -> jax.Array:
        """c · k0(X1, X2), shape (N1, N2).

        Args:
            X1: (N1, D) or (N1,) inputs.
            X2: (N2, D) or (N2,) inputs; None: X1.
        """
        return self.scale * self.kernel(X1, X2)

    def diag(self, X: Any) -> jax.Array:
        """c · k0.diag(X), shape (N,).

        Args:
            X: (N, D) or (N,) inputs.
        """
        return self.scale * self.kernel.diag(X)

    def inducing_gram(self, Z: Any) -> jax.Array:
        """c times k0's K_uu at Z, shape (M, M).

        Args:
            Z: (M, D) or (M,) inducing inputs.
        """
        return self.scale * self.kernel.inducing_gram(Z)

    def inducing_cross(self, Z: Any, X: Any) -> jax.Array:
        """c times k0's K_uf between Z and X, shape (M, N).

        Args:
            Z: (M, D) or (M,) inducing inputs.
            X: (N, D) or (N,) inputs.
        """
        return self.scale * self.kernel.inducing_cross(Z, X)

    def __repr__(self) -> str:
        """``Scaled(k0, scale=c)``."""
        return f"Scaled({self.kernel!r}, scale={np.asarray(self.scale).tolist()!r})"


class ActiveDims(Kernel):
    """A kernel acting on some input columns only: k(x, x') = k0(x[dims], x'[dims]).

    Args:
        kernel: k0, whose ARD hyperparameters (if any) have one value per selected column.
        dims: column index or sequence of distinct column indices (negative ones count from the end);
            static (the pytree's aux data), so ``jit`` retraces for other columns, never for new
            hyperparameters.

    Inputs must have a column for every index; ``(N,)`` inputs are one column (index 0). A kernel that
    is stationary in its columns stays translation-invariant in all of them (shifting the other columns
    does not change it).
    """

    params = ("kernel",)
    static = ("dims",)

    def __init__(self, kernel: Kernel, dims: int | Sequence[int]) -> None:
        """k0 on the columns ``dims``; ``TypeError`` for a non-kernel, ``ValueError`` for invalid ``dims``.

        Args:
            kernel: k0.
            dims: a column index or a non-empty sequence of distinct ones (negative ones count from the end).
        """
        if not isinstance(kernel, Kernel):
            raise TypeError(f"ActiveDims: kernel must be a Kernel, got {type(kernel).__name__}")
        seq = (dims,) if isinstance(dims, int | np.integer) else tuple(dims)
        if not seq or not all(isinstance(d, int | np.integer) and not isinstance(d, bool) for d in seq):
            raise ValueError(
                f"ActiveDims: dims must be a column index or a non-empty sequence of them, got {dims!r}"
            )
        seq = tuple(int(d) for d in seq)
        if len(set(seq)) != len(seq):
            raise ValueError(f"ActiveDims: dims must be distinct, got {seq}")
        object.__setattr__(self, "kernel", kernel)
        object.__setattr__(self, "dims", seq)

    def check_input_dim(self, dim: int) -> None:
        """Raise ``ValueError`` unless inputs with ``dim`` columns have every column in ``dims``."""
        if not all(-dim <= d < dim for d in self.dims):
            raise ValueError(f"ActiveDims: dims {self.dims} out of range for inputs with {dim} column(s)")

    def _select(self, X: Any) -> jax.Array:
        X = as_2d(X)
        self.check_input_dim(X.shape[1])
        return X[:, np.asarray(self.dims)]

    def __call__(self, X1: Any, X2: Any | None = None) -> jax.Array:
        """k0 on the selected columns of X1 and X2, shape (N1, N2); ``ValueError`` when a column is missing.

        Args:
            X1: (N1, D) or (N1,) inputs.
            X2: (N2, D) or (N2,) inputs; None: X1.
        """
        return self.kernel(self._select(X1), None if X2 is None else self._select(X2))

    def diag(self, X: Any) -> jax.Array:
        """k0's diagonal on the selected columns of X, shape (N,).

        Args:
            X: (N, D) or (N,) inputs.
        """
        return self.kernel.diag(self._select(X))

    def inducing_gram(self, Z: Any) -> jax.Array:
        """k0's K_uu on the selected columns of Z, shape (M, M).

        Args:
            Z: (M, D) or (M,) inducing inputs.
        """
        return self.kernel.inducing_gram(self._select(Z))

    def inducing_cross(self, Z: Any, X: Any) -> jax.Array:
        """k0's K_uf on the selected columns of Z and X, shape (M, N).

        Args:
            Z: (M, D) or (M,) inducing inputs.
            X: (N, D) or (N,) inputs.
        """
        return self.kernel.inducing_cross(self._select(Z), self._select(X))

    def __repr__(self) -> str:
        """``ActiveDims(k0, dims=[...])``."""
        return f"ActiveDims({self.kernel!r}, dims={list(self.dims)!r})"


class Categorical(WhiteNoise):
    """k(x, x') = s² [x = x'] on a column of category codes: independent effects β_k ~ N(0, s²).

    One effect per category, shared by every row of that category (day-of-week or day-of-year effects, say).

    The white-noise kernel read as a design: as a component of an :class:`Additive` kernel on a code
    column (``Categorical(s2).on_dims(j)``) with one inducing input at each code, K_uu = s² I and K_uf is
    s² times the one-hot design matrix, so the RBF network f = K_fu α with α ~ N(0, K_uu⁻¹) is exactly the
    one-hot regression f = H β with β ~ N(0, s² I) (§2.7 of [1] of the module), and the sparse models
    integrate β out with the other weights.
    """


class Additive(Kernel):
    """k = Σ_c k_c, where every component c has inducing inputs Z_c of its own: an additive RBF network.

    f = Σ_c K_{f,u_c} α_c with independent α_c ~ N(0, K_{u_c u_c}⁻¹) is the SoR GP ([3] §4) of the
    additive GP ([4]) whose components are independent, with a block-diagonal K_uu, one block per
    component: Cov f = Σ_c K_{f,u_c} K_{u_c u_c}⁻¹ K_{u_c,f}. The inducing inputs of all components are
    stacked, in component order, into one (M, D) array Z, M = Σ_c M_c (:func:`additive` builds it), so
    every model and pass of the package that takes ``(kernel, Z)`` takes an additive network unchanged:

    * ``k(X1, X2)`` and ``diag`` are those of the sum Σ_c k_c (the prior of f, e.g. for DTC's K_**);
    * ``inducing_gram(Z)`` = blockdiag(K_{u_c u_c}), ``inducing_cross(Z, X)`` = the stacked K_{u_c f}.

    Each component picks its input columns with ``on_dims``; a one-hot design with Gaussian effects is a
    :class:`Categorical` component, a dense design column h with β ~ N(0, s²) a ``Linear(s²).on_dims(j)``
    component with its inducing input at x_j = 1; a periodic component needs inducing inputs over one
    period only (:func:`bayes_rbfn.gp.inducing.periodic_centres`).

    Args:
        components: {name: kernel}, in the order of their blocks in Z. The names are static (the pytree's
            aux data) and name the components' sites in :func:`bayes_rbfn.rbfn`.
        sizes: {name: M_c} or a sequence of M_c in component order: how many rows of Z each component has.

    References
    ----------
    [1] Rasmussen & Williams (2006), as in the module.
    [2] Gelman, A. et al. (2013). *Bayesian Data Analysis*, 3rd ed., ch. 15 (batches of effects).
    [3] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
        process regression. JMLR 6, 1939–1959.
    [4] Duvenaud, D., Nickisch, H. & Rasmussen, C. E. (2011). Additive Gaussian processes. NeurIPS.
    """

    params = ("components",)
    static = ("names", "sizes")

    def __init__(self, components: Any, sizes: Any) -> None:
        """An additive network's kernel; ``ValueError`` (``TypeError`` for a component) when malformed.

        Args:
            components: {name: kernel}, non-empty, in block order; names are identifiers, kernels are not
                :class:`Additive` themselves.
            sizes: {name: M_c} for the same names, or a sequence of M_c ≥ 1 in component order.
        """
        if not isinstance(components, dict) or not components:
            raise ValueError(
                "Additive: components must be a non-empty dict {name: kernel}, got "
                f"{type(components).__name__}"
            )
        names = tuple(components)
        for name, k in components.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"Additive: component names must be identifiers, got {name!r}")
            if not isinstance(k, Kernel) or isinstance(k, Additive):
                raise TypeError(f"Additive: component {name!r} must be a (non-additive) Kernel, got {k!r}")
        if isinstance(sizes, dict):
            if set(sizes) != set(names):
                raise ValueError(f"Additive: sizes must name the components {list(names)}, got {list(sizes)}")
            sizes = [sizes[n] for n in names]
        sizes = tuple(sizes)
        if len(sizes) != len(names) or not all(
            isinstance(m, int | np.integer) and not isinstance(m, bool) and m >= 1 for m in sizes
        ):
            raise ValueError(
                f"Additive: sizes must give a positive number of inducing inputs for each of the "
                f"{len(names)} components, got {sizes!r}"
            )
        object.__setattr__(self, "components", tuple(components[n] for n in names))
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "sizes", tuple(int(m) for m in sizes))

    @classmethod
    def _unflatten(cls, aux: tuple | None, children: tuple) -> Kernel:
        obj = super()._unflatten(aux, children)
        object.__setattr__(obj, "components", tuple(obj.components))
        return obj

    def replace(self, **values: Any) -> Kernel:
        """A copy with some components replaced (``replace(trend=kernel)``) or new ``sizes``."""
        components = dict(zip(self.names, self.components, strict=True))
        sizes = values.pop("sizes", self.sizes)
        unknown = sorted(set(values) - set(self.names))
        if unknown:
            raise ValueError(f"Additive: no component {unknown[0]!r} (components: {list(self.names)})")
        components.update(values)
        return Additive(components, sizes)

    def component(self, name: str) -> Kernel:
        """The kernel of component ``name``."""
        return self.components[self._index(name)]

    def block(self, name: str) -> slice:
        """The rows of Z (and the weights α) that belong to component ``name``."""
        i = self._index(name)
        start = sum(self.sizes[:i])
        return slice(start, start + self.sizes[i])

    def _index(self, name: str) -> int:
        if name not in self.names:
            raise ValueError(f"Additive: no component {name!r} (components: {list(self.names)})")
        return self.names.index(name)

    def _blocks(self, Z: Any) -> list[jax.Array]:
        Z = as_2d(Z)
        if Z.shape[0] != sum(self.sizes):
            raise ValueError(
                f"Z: has {Z.shape[0]} rows, but the Additive kernel's components have "
                f"{' + '.join(map(str, self.sizes))} = {sum(self.sizes)} inducing inputs"
            )
        return [Z[self.block(n)] for n in self.names]

    def __call__(self, X1: Any, X2: Any | None = None) -> jax.Array:
        """Σ_c k_c(X1, X2), the Gram matrix of the components' sum, shape (N1, N2).

        Args:
            X1: (N1, D) or (N1,) inputs.
            X2: (N2, D) or (N2,) inputs; None: X1.
        """
        total = self.components[0](X1, X2)
        for k in self.components[1:]:
            total = total + k(X1, X2)
        return total

    def diag(self, X: Any) -> jax.Array:
        """Σ_c k_c.diag(X), shape (N,).

        Args:
            X: (N, D) or (N,) inputs.
        """
        total = self.components[0].diag(X)
        for k in self.components[1:]:
            total = total + k.diag(X)
        return total

    def inducing_gram(self, Z: Any) -> jax.Array:
        """blockdiag(k_c(Z_c, Z_c)), shape (M, M): the components' inducing values are independent.

        Args:
            Z: (M, D) stacked inducing inputs, M = Σ_c M_c, component c's rows at :meth:`block`;
                ``ValueError`` when M differs.
        """
        blocks = [k(Zc, Zc) for k, Zc in zip(self.components, self._blocks(Z), strict=True)]
        return jax.scipy.linalg.block_diag(*blocks)

    def inducing_cross(self, Z: Any, X: Any) -> jax.Array:
        """The stacked k_c(Z_c, X), shape (M, N): one block of rows per component.

        Args:
            Z: (M, D) stacked inducing inputs, M = Σ_c M_c, component c's rows at :meth:`block`;
                ``ValueError`` when M differs.
            X: (N, D) or (N,) inputs.
        """
        blocks = [k(Zc, X) for k, Zc in zip(self.components, self._blocks(Z), strict=True)]
        return jnp.concatenate(blocks, axis=0)

    def __repr__(self) -> str:
        """``Additive(name=kernel [M_c], …)``, the components in block order with their sizes."""
        parts = ", ".join(
            f"{n}={k!r} [{m}]" for n, k, m in zip(self.names, self.components, self.sizes, strict=True)
        )
        return f"Additive({parts})"


def additive(parts: Any, n_inputs: int) -> tuple[Additive, jax.Array]:
    """An additive RBF network's kernel and its stacked inducing inputs, from each component's own.

    Args:
        parts: {name: (kernel, Z_c)}, in block order. A component acting on some columns
            (``k.on_dims(dims)``) takes Z_c in those columns only, (M_c, len(dims)) or (M_c,); any other
            kernel takes (M_c, n_inputs). Traced hyperparameters are fine (a model may call this at every
            step; the stacking is static).
        n_inputs: D, the number of input columns of the data.

    Returns:
        (:class:`Additive` kernel, Z of shape (M, D), M = Σ_c M_c): each component's rows hold Z_c in its
        columns and 0 elsewhere (columns the component does not read).
    """
    if not isinstance(parts, dict) or not parts:
        raise ValueError("parts: expected a non-empty dict {name: (kernel, Z)}")
    rows, components, sizes = [], {}, {}
    for name, part in parts.items():
        if not (isinstance(part, tuple) and len(part) == 2):
            raise ValueError(f"parts[{name!r}]: expected a pair (kernel, Z), got {type(part).__name__}")
        kernel, Zc = part
        dims = tuple(range(n_inputs)) if not isinstance(kernel, ActiveDims) else kernel.dims
        Zc = jnp.asarray(Zc)
        Zc = Zc[:, None] if Zc.ndim == 1 else Zc
        if Zc.ndim != 2 or Zc.shape[1] != len(dims) or Zc.shape[0] < 1:
            raise ValueError(
                f"parts[{name!r}]: Z must have shape (M, {len(dims)}) for a component on "
                f"{len(dims)} column(s), got {tuple(Zc.shape)}"
            )
        if isinstance(kernel, ActiveDims):
            kernel.check_input_dim(n_inputs)
        full = jnp.zeros((Zc.shape[0], n_inputs), Zc.dtype).at[:, np.asarray(dims)].set(Zc)
        rows.append(full)
        components[name] = kernel
        sizes[name] = Zc.shape[0]
    return Additive(components, sizes), jnp.concatenate(rows, axis=0)
