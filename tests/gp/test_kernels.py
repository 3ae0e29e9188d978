"""Kernels (docs/mathematics.md#notation, §3.7; STYLE "a kernel is a small value").

Every Gram matrix is compared with the NumPy formula of :mod:`reference` (float64, RTOL 1e-8). The pytree
tests show that ``jit``, ``vmap`` and ``grad`` pass through kernels, and that hyperparameter gradients stay
finite (and correct, against a central finite difference of the NumPy formula) at coincident points, where
the exponential and Matérn kernels need a distance r = 0.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference as ref
from conftest import assert_close

from bayes_rbfn.gp import kernels as K

# (id, library kernel, reference spec, input dimension). Hyperparameters are chosen so that no entry
# underflows: the comparison is then relative for every element.
CASES = [
    ("se-1d-scalar", K.SquaredExponential(0.7, 1.3), {"kind": "se", "lengthscale": 0.7, "variance": 1.3}, 1),
    (
        "se-3d-ard",
        K.SquaredExponential([0.5, 1.0, 2.0], 0.8),
        {"kind": "se", "lengthscale": [0.5, 1.0, 2.0], "variance": 0.8},
        3,
    ),
    (
        "exponential-2d-ard",
        K.Exponential([0.6, 1.4], 2.0),
        {"kind": "exponential", "lengthscale": [0.6, 1.4], "variance": 2.0},
        2,
    ),
    (
        "matern32-2d-scalar",
        K.Matern32(0.9, 1.1),
        {"kind": "matern32", "lengthscale": 0.9, "variance": 1.1},
        2,
    ),
    (
        "matern52-3d-ard",
        K.Matern52([0.8, 1.2, 0.5], 0.7),
        {"kind": "matern52", "lengthscale": [0.8, 1.2, 0.5], "variance": 0.7},
        3,
    ),
    (
        "imq-2d-ard",
        K.InverseMultiquadric([0.4, 1.3], 1.6),
        {"kind": "imq", "lengthscale": [0.4, 1.3], "variance": 1.6},
        2,
    ),
    (
        "periodic-1d",
        K.Periodic(1.2, 1.5, 0.8),
        {"kind": "periodic", "lengthscale": 1.2, "variance": 1.5, "period": 0.8},
        1,
    ),
    (
        "periodic-2d-ard",
        K.Periodic([1.0, 2.0], 0.9, [0.7, 1.6]),
        {"kind": "periodic", "lengthscale": [1.0, 2.0], "variance": 0.9, "period": [0.7, 1.6]},
        2,
    ),
    (
        "sum-se-periodic",
        K.SquaredExponential(0.6, 1.0) + K.Periodic(1.0, 0.5, 0.9),
        {
            "kind": "sum",
            "parts": [
                {"kind": "se", "lengthscale": 0.6, "variance": 1.0},
                {"kind": "periodic", "lengthscale": 1.0, "variance": 0.5, "period": 0.9},
            ],
        },
        1,
    ),
    (
        "product-matern52-exponential",
        K.Matern52([0.7, 1.1], 1.2) * K.Exponential(1.5, 0.6),
        {
            "kind": "product",
            "parts": [
                {"kind": "matern52", "lengthscale": [0.7, 1.1], "variance": 1.2},
                {"kind": "exponential", "lengthscale": 1.5, "variance": 0.6},
            ],
        },
        2,
    ),
]
IDS = [c[0] for c in CASES]
CASES = [c[1:] for c in CASES]


def _inputs(rng, dim):
    """X1 (8, D) and X2 (6, D); 1-D problems pass X1 as (N,) to exercise that form. One pair of shapes for
    every test keeps JAX's per-shape compilation (the bulk of the runtime) small."""
    X1 = rng.uniform(-1.0, 1.0, size=(8, dim))
    X2 = rng.uniform(-1.0, 1.0, size=(6, dim))
    return (X1[:, 0] if dim == 1 else X1), X2


def test_every_kernel_family_class_has_a_reference_case():
    """Each kernel class that names a family (a kernel of the collection) is compared with its formula."""
    families = {c for c in vars(K).values() if isinstance(c, type) and c.__dict__.get("family")}
    compared = {type(kernel) for kernel, _, _ in CASES} | {type(kernel) for kernel, _, _ in ALGEBRA_CASES}
    assert families <= compared, families - compared


@pytest.mark.parametrize(("kernel", "spec", "dim"), CASES, ids=IDS)
def test_gram_and_diag_match_numpy_formula(rng, kernel, spec, dim):
    """k(X1, X2), k(X1) and k.diag(X1) against the NumPy formula; the Gram matrix is symmetric PSD."""
    X1, X2 = _inputs(rng, dim)
    assert_close(kernel(X1, X2), ref.gram(spec, X1, X2))
    G = np.asarray(kernel(X1))
    assert_close(G, ref.gram(spec, X1, X1))
    np.testing.assert_array_equal(G, G.T)
    assert np.linalg.eigvalsh(G).min() > -1e-12 * np.abs(G).max()
    diag = kernel.diag(X1)
    assert diag.shape == (8,)
    assert_close(diag, np.diag(G))
    assert_close(diag, np.diag(ref.gram(spec, X1)))


JIT_IDS = [
    "se-3d-ard",
    "exponential-2d-ard",
    "periodic-2d-ard",
    "sum-se-periodic",
    "product-matern52-exponential",
]


@pytest.mark.parametrize(("kernel", "spec", "dim"), [CASES[IDS.index(i)] for i in JIT_IDS], ids=JIT_IDS)
def test_jit_and_vmap_pass_through(rng, kernel, spec, dim):
    X, _ = _inputs(rng, dim)
    assert_close(jax.jit(lambda k, x: k(x, x))(kernel, X), ref.gram(spec, X))
    assert_close(jax.jit(lambda k, x: k.diag(x))(kernel, X), np.diag(ref.gram(spec, X)))
    # vmap over a batch of kernels (stacked pytrees): slice i has every leaf scaled by factors[i].
    factors = jnp.array([0.5, 1.0, 2.0])
    batch = jax.tree_util.tree_map(lambda leaf: leaf[None] * factors.reshape((3,) + (1,) * leaf.ndim), kernel)
    grams = jax.vmap(lambda k: k(X, X))(batch)
    assert grams.shape == (3, 8, 8)
    for i in (0, 2):
        ki = jax.tree_util.tree_map(lambda leaf, i=i: leaf[i], batch)
        assert_close(grams[i], np.asarray(ki(X, X)))
    assert_close(grams[1], ref.gram(spec, X))
    # vmap over the points: the Gram matrix one row at a time.
    X2d = np.asarray(X).reshape(8, dim)
    rows = jax.vmap(lambda x: kernel(x[None, :], X2d)[0])(X2d)
    assert_close(rows, ref.gram(spec, X))


@pytest.mark.parametrize(("kernel", "spec", "dim"), CASES, ids=IDS)
def test_float32_inputs_stay_float32(rng, kernel, spec, dim):
    """float32 inputs with float32 (or Python-float) hyperparameters give float32 Gram matrices under x64:
    no strongly typed float64 constant may promote them."""
    X = rng.uniform(-1.0, 1.0, size=(8, dim)).astype(np.float32)
    kernel32 = jax.tree_util.tree_map(lambda leaf: jnp.asarray(leaf, dtype=jnp.float32), kernel)
    assert kernel32(X).dtype == jnp.float32
    assert kernel32.diag(X).dtype == jnp.float32
    assert_close(kernel32(X), ref.gram(spec, X), dtype=np.float32)


def test_pytree_round_trip():
    k = K.SquaredExponential([0.5, 2.0], 1.5) * K.Periodic(1.0, 2.0, 3.0)
    leaves, treedef = jax.tree_util.tree_flatten(k)
    assert len(leaves) == 5
    rebuilt = jax.tree_util.tree_unflatten(treedef, leaves)
    assert type(rebuilt) is K.Product and type(rebuilt.k2) is K.Periodic
    np.testing.assert_array_equal(rebuilt.k1.lengthscale, [0.5, 2.0])
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(k)[0]]
    assert paths == [".k1.lengthscale", ".k1.variance", ".k2.lengthscale", ".k2.variance", ".k2.period"]


def _fd_grad(f, x, h=1e-6):
    """Central finite difference of a scalar NumPy function of a vector (relative step)."""
    x = np.asarray(x, dtype=np.float64)
    g = np.empty_like(x)
    for i in range(x.size):
        step = np.zeros_like(x)
        step[i] = h * max(abs(x[i]), 1.0)
        g[i] = (f(x + step) - f(x - step)) / (2 * step[i])
    return g


GRAD_CASES = [
    ("se", K.SquaredExponential, {"lengthscale": [0.6, 1.3], "variance": 1.4}),
    ("exponential", K.Exponential, {"lengthscale": [0.6, 1.3], "variance": 1.4}),
    ("matern32", K.Matern32, {"lengthscale": [0.6, 1.3], "variance": 1.4}),
    ("matern52", K.Matern52, {"lengthscale": [0.6, 1.3], "variance": 1.4}),
    ("imq", K.InverseMultiquadric, {"lengthscale": [0.6, 1.3], "variance": 1.4}),
    ("periodic", K.Periodic, {"lengthscale": [0.6, 1.3], "variance": 1.4, "period": [1.1, 0.9]}),
]


@pytest.mark.parametrize(("name", "cls", "params"), GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_hyperparameter_gradient_finite_at_coincident_points(rng, name, cls, params):
    """grad of Σ k(X, X) w.r.t. every hyperparameter: finite although diag has r = 0, and equal to FD.

    X also contains an exact duplicate row, so there are off-diagonal coincident pairs too.
    """
    X = rng.uniform(-1.0, 1.0, size=(8, 2))
    X[3] = X[5]
    names = list(params)
    sizes = [np.size(params[n]) for n in names]

    def unpack(theta):
        parts = np.split(theta, np.cumsum(sizes)[:-1])
        return {n: (p if np.ndim(params[n]) else p[0]) for n, p in zip(names, parts, strict=True)}

    theta0 = np.concatenate([np.atleast_1d(params[n]) for n in names]).astype(np.float64)
    fd = _fd_grad(lambda t: np.sum(ref.gram({"kind": name, **unpack(t)}, X)), theta0)
    grad_fn = jax.grad(lambda t: jnp.sum(cls(**unpack(t))(X, X)))
    # Under jit as well: XLA may reorder arithmetic, which must not make coincident points "almost"
    # coincident (r² ~ 1e-33), where √r² has an enormous derivative.
    for grad in (grad_fn(jnp.asarray(theta0)), jax.jit(grad_fn)(jnp.asarray(theta0))):
        assert np.all(np.isfinite(grad)), grad
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)
    # grad with respect to the kernel pytree itself gives a kernel-shaped cotangent.
    kgrad = jax.grad(lambda k: jnp.sum(k(X, X)))(cls(**params))
    assert type(kgrad) is cls
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(kgrad))


SQDIST_CASES = [("ard", [0.6, 1.3, 2.2]), ("scalar", 0.8)]


@pytest.mark.parametrize(("kind", "lengthscale"), SQDIST_CASES, ids=[c[0] for c in SQDIST_CASES])
def test_scaled_sqdist_derivatives_match_closed_forms(rng, kind, lengthscale):
    """The matrix-product derivatives of r² (first and second order, forward and reverse mode, under
    vmap) against r²'s closed-form derivatives in NumPy, with a duplicate row for r² = 0 exactly."""
    X1 = rng.normal(size=(5, 3)) + 4.0  # away from the origin, where the expansion cancels most
    X2 = rng.normal(size=(4, 3)) + 4.0
    X2[1] = X1[2]
    ls = np.asarray(lengthscale, dtype=np.float64)
    ell = np.broadcast_to(ls, (3,))
    diff = X1[:, None, :] - X2[None, :, :]  # (5, 4, 3)
    r2 = np.sum(diff**2 / ell**2, axis=-1)
    assert float(K.scaled_sqdist(X1, X2, ls)[2, 1]) == 0.0
    assert_close(K.scaled_sqdist(X1, X2, ls), r2, rtol=1e-13)

    # ∂r²_ij/∂ℓ_d = −2 (x_id − x'_jd)² / ℓ_d³ (summed over d for a scalar ℓ)
    d_ell = -2.0 * diff**2 / ell**3
    want_ell = d_ell if ls.ndim else d_ell.sum(-1)
    for jac in (jax.jacfwd, jax.jacrev):
        assert_close(jac(lambda l: K.scaled_sqdist(X1, X2, l))(jnp.asarray(ls)), want_ell, rtol=1e-12)
    # ∂r²_ij/∂x_kd = 2 δ_ik (x_id − x'_jd) / ℓ_d²
    want_x1 = np.zeros((5, 4, 5, 3))
    for i in range(5):
        want_x1[i, :, i, :] = 2.0 * diff[i] / ell**2
    got_x1 = jax.jacrev(lambda a: K.scaled_sqdist(a, X2, ls))(jnp.asarray(X1))
    assert_close(got_x1, want_x1, rtol=1e-12, atol=1e-12)
    # ∂²r²_ij/∂ℓ_d∂ℓ_e = 6 δ_de (x_id − x'_jd)² / ℓ_d⁴ (the Laplace start's Hessians)
    if ls.ndim:
        hess = jax.hessian(lambda l: K.scaled_sqdist(X1, X2, l))(jnp.asarray(ls))
        want_h = np.zeros((5, 4, 3, 3))
        for d in range(3):
            want_h[..., d, d] = 6.0 * diff[..., d] ** 2 / ell[d] ** 4
        assert_close(hess, want_h, rtol=1e-12, atol=1e-12)
    # vmapped over lengthscales (draws), the gradient of a reduction
    many = jnp.stack([jnp.asarray(ls) * s for s in (0.5, 1.0, 2.0)])
    grads = jax.vmap(jax.grad(lambda l: jnp.sum(K.scaled_sqdist(X1, X2, l))))(many)
    for g, s in zip(np.asarray(grads), (0.5, 1.0, 2.0), strict=True):
        e = ell * s
        want = (-2.0 * diff**2 / e**3).sum((0, 1))
        assert_close(g, want if ls.ndim else want.sum(), rtol=1e-12)


def test_safe_sqrt_gradient_at_zero():
    assert float(jax.grad(K.safe_sqrt)(0.0)) == 0.0
    assert_close(jax.grad(K.safe_sqrt)(4.0), 0.25)


def test_kernels_are_immutable():
    k = K.SquaredExponential(0.5, 1.0)
    with pytest.raises(AttributeError, match="immutable"):
        k.lengthscale = 2.0
    with pytest.raises(AttributeError, match="immutable"):
        k.new_field = 2.0
    with pytest.raises(AttributeError, match="immutable"):
        del k.variance
    k2 = k.replace(lengthscale=2.0)
    assert float(k.lengthscale) == 0.5 and float(k2.lengthscale) == 2.0
    s = k + K.Periodic()
    with pytest.raises(AttributeError, match="immutable"):
        s.k1 = K.Matern32()


def test_replace_and_composites_keep_values(rng):
    X = rng.uniform(-1, 1, size=(4, 1))
    k = K.Matern32(0.5, 2.0)
    assert_close(k.replace(variance=4.0)(X), 2.0 * np.asarray(k(X)))
    s = (k + k).replace(k2=K.SquaredExponential(0.3, 1.0))
    assert_close(s(X), np.asarray(k(X)) + np.asarray(K.SquaredExponential(0.3, 1.0)(X)))


BAD_HYPER = [
    ("se-lengthscale-zero", lambda: K.SquaredExponential(lengthscale=0.0), "lengthscale"),
    ("se-lengthscale-negative-ard", lambda: K.SquaredExponential(lengthscale=[1.0, -0.5]), "lengthscale"),
    ("se-variance-negative", lambda: K.SquaredExponential(variance=-1.0), "variance"),
    ("exponential-variance-zero", lambda: K.Exponential(variance=0.0), "variance"),
    ("matern32-lengthscale-nan", lambda: K.Matern32(lengthscale=np.nan), "lengthscale"),
    ("matern52-variance-inf", lambda: K.Matern52(variance=np.inf), "variance"),
    ("periodic-period-negative", lambda: K.Periodic(period=-1.0), "period"),
    ("periodic-lengthscale-zero", lambda: K.Periodic(lengthscale=0.0), "lengthscale"),
    ("replace-negative", lambda: K.SquaredExponential().replace(lengthscale=-2.0), "lengthscale"),
]


@pytest.mark.parametrize(("make", "name"), [c[1:] for c in BAD_HYPER], ids=[c[0] for c in BAD_HYPER])
def test_non_positive_hyperparameters_raise(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_composite_rejects_non_kernels():
    with pytest.raises(TypeError, match="k2"):
        K.Sum(K.SquaredExponential(), 1.0)


# --------------------------------------------------------------------------------------------------
# Kernel algebra: rational quadratic, linear, constant and white-noise kernels, scalar × kernel, active
# dimensions. Each against its dense NumPy formula, written here with broadcasting.


def _np_sqdist(X1, X2, lengthscale):
    X1 = np.asarray(X1, dtype=np.float64).reshape(len(X1), -1)
    X2 = np.asarray(X2, dtype=np.float64).reshape(len(X2), -1)
    d = (X1[:, None, :] - X2[None, :, :]) / np.asarray(lengthscale, dtype=np.float64)
    return np.sum(d * d, axis=-1)


def _np_rq(X1, X2, lengthscale, variance, mixture_shape):
    """R&W (4.19): s² (1 + r²/(2α ℓ²))^(−α), the ℓ inside r²."""
    return variance * (1.0 + _np_sqdist(X1, X2, lengthscale) / (2.0 * mixture_shape)) ** (-mixture_shape)


def _np_se(X1, X2, lengthscale, variance):
    return variance * np.exp(-0.5 * _np_sqdist(X1, X2, lengthscale))


def _np_linear(X1, X2, variance, offset):
    """R&W §4.2.2: Σ_d s_d² x_d x'_d + c."""
    X1 = np.asarray(X1, dtype=np.float64).reshape(len(X1), -1)
    X2 = np.asarray(X2, dtype=np.float64).reshape(len(X2), -1)
    return np.einsum("id,jd,d->ij", X1, X2, np.broadcast_to(variance, X1.shape[1:])) + offset


def _np_white(X1, X2, variance):
    X1 = np.asarray(X1).reshape(len(X1), -1)
    X2 = np.asarray(X2).reshape(len(X2), -1)
    return variance * np.all(X1[:, None, :] == X2[None, :, :], axis=-1)


def _cols(X, dims):
    return np.asarray(X, dtype=np.float64).reshape(len(X), -1)[:, dims]


# (id, kernel, NumPy formula of (X1, X2), input dimension)
ALGEBRA_CASES = [
    (
        "rq-1d-scalar",
        K.RationalQuadratic(0.7, 1.3, 0.8),
        lambda A, B: _np_rq(A, B, 0.7, 1.3, 0.8),
        1,
    ),
    (
        "rq-3d-ard",
        K.RationalQuadratic([0.5, 1.0, 2.0], 0.8, 2.5),
        lambda A, B: _np_rq(A, B, [0.5, 1.0, 2.0], 0.8, 2.5),
        3,
    ),
    ("linear-1d", K.Linear(1.5, 0.3), lambda A, B: _np_linear(A, B, 1.5, 0.3), 1),
    (
        "linear-2d-ard-no-offset",
        K.Linear([0.5, 2.0]),
        lambda A, B: _np_linear(A, B, [0.5, 2.0], 0.0),
        2,
    ),
    ("constant-2d", K.Constant(0.7), lambda A, B: np.full((len(A), len(B)), 0.7), 2),
    ("white-2d", K.WhiteNoise(0.4), lambda A, B: _np_white(A, B, 0.4), 2),
    (
        "scalar-times-kernel",
        2.5 * K.SquaredExponential(0.6, 1.1),
        lambda A, B: 2.5 * _np_se(A, B, 0.6, 1.1),
        2,
    ),
    (
        "kernel-times-scalar",
        K.Matern52(0.9, 0.5) * np.float64(3.0) + K.Linear(0.2),
        lambda A, B: (
            3.0 * np.asarray(ref.gram({"kind": "matern52", "lengthscale": 0.9, "variance": 0.5}, A, B))
            + _np_linear(A, B, 0.2, 0.0)
        ),
        2,
    ),
    (
        "active-dims-se-plus-linear",
        K.SquaredExponential(0.8, 1.2).on_dims([0]) + K.Linear(0.5, 0.1).on_dims(2),
        lambda A, B: (
            _np_se(_cols(A, [0]), _cols(B, [0]), 0.8, 1.2)
            + _np_linear(_cols(A, [2]), _cols(B, [2]), 0.5, 0.1)
        ),
        3,
    ),
    (
        "active-dims-rq-ard-times-periodic",
        K.ActiveDims(K.RationalQuadratic([0.6, 1.5], 1.0, 1.7), [2, 0])
        * K.Periodic(1.0, 0.9, 0.8).on_dims([1]),
        lambda A, B: (
            _np_rq(_cols(A, [2, 0]), _cols(B, [2, 0]), [0.6, 1.5], 1.0, 1.7)
            * np.asarray(
                ref.gram(
                    {"kind": "periodic", "lengthscale": 1.0, "variance": 0.9, "period": 0.8},
                    _cols(A, [1]),
                    _cols(B, [1]),
                )
            )
        ),
        3,
    ),
    (
        "se-plus-white-plus-constant",
        K.SquaredExponential(0.5, 1.0) + K.WhiteNoise(0.1) + K.Constant(0.3),
        lambda A, B: _np_se(A, B, 0.5, 1.0) + _np_white(A, B, 0.1) + 0.3,
        1,
    ),
]
ALGEBRA_IDS = [c[0] for c in ALGEBRA_CASES]
ALGEBRA_CASES = [c[1:] for c in ALGEBRA_CASES]


def _algebra_inputs(rng, dim):
    """X1 (8, D) with one repeated row (a coincident pair, where WhiteNoise and the distances matter) and
    X2 (6, D) sharing one row with X1; 1-D problems pass X1 as (N,)."""
    X1 = rng.uniform(-1.0, 1.0, size=(8, dim))
    X1[5] = X1[2]
    X2 = rng.uniform(-1.0, 1.0, size=(6, dim))
    X2[4] = X1[1]
    return (X1[:, 0] if dim == 1 else X1), X2


@pytest.mark.parametrize(("kernel", "formula", "dim"), ALGEBRA_CASES, ids=ALGEBRA_IDS)
def test_algebra_gram_and_diag_match_numpy_formula(rng, kernel, formula, dim):
    """k(X1, X2), k(X1), k.diag(X1) against the formula; k(X1) symmetric and positive semi-definite."""
    X1, X2 = _algebra_inputs(rng, dim)
    assert_close(kernel(X1, X2), formula(X1, X2))
    G = np.asarray(kernel(X1))
    assert_close(G, formula(X1, X1))
    assert_close(kernel(X1, X1), G)
    assert_close(G, G.T)
    assert np.linalg.eigvalsh(G).min() >= -1e-12 * np.abs(G).max()
    diag = kernel.diag(X1)
    assert diag.shape == (8,)
    assert_close(diag, np.diag(G))


@pytest.mark.parametrize(("kernel", "formula", "dim"), ALGEBRA_CASES, ids=ALGEBRA_IDS)
def test_algebra_under_jit_and_grad(rng, kernel, formula, dim):
    """jit gives the same matrix; grad of Σ k(X, X) w.r.t. every leaf is finite (coincident rows
    included) and, for each leaf, equal to a central finite difference of the library's own kernel."""
    X1, X2 = _algebra_inputs(rng, dim)
    assert_close(jax.jit(lambda k, a, b: k(a, b))(kernel, X1, X2), formula(X1, X2))
    assert_close(jax.jit(lambda k, a: k.diag(a))(kernel, X1), np.diag(formula(X1, X1)))
    leaves, treedef = jax.tree_util.tree_flatten(kernel)

    def total(leaves):
        return jnp.sum(jax.tree_util.tree_unflatten(treedef, leaves)(X1, X1))

    grads = jax.jit(jax.grad(total))([jnp.asarray(leaf) for leaf in leaves])
    for i, (leaf, g) in enumerate(zip(leaves, grads, strict=True)):
        assert np.all(np.isfinite(g)), (i, g)
        leaf = np.asarray(leaf, dtype=np.float64)

        def along(x, i=i, leaf=leaf):
            new = [np.asarray(v, dtype=np.float64) for v in leaves]
            new[i] = x.reshape(leaf.shape)
            return float(total(new))

        np.testing.assert_allclose(g, _fd_grad(along, leaf.ravel()).reshape(leaf.shape), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(("kernel", "formula", "dim"), ALGEBRA_CASES, ids=ALGEBRA_IDS)
def test_algebra_float32_inputs_stay_float32(rng, kernel, formula, dim):
    X = rng.uniform(-1.0, 1.0, size=(8, dim)).astype(np.float32)
    kernel32 = jax.tree_util.tree_map(lambda leaf: jnp.asarray(leaf, dtype=jnp.float32), kernel)
    assert kernel32(X).dtype == jnp.float32
    assert kernel32.diag(X).dtype == jnp.float32
    assert_close(kernel32(X), formula(X, X), dtype=np.float32)


def test_rational_quadratic_tends_to_squared_exponential(rng):
    """α → ∞ gives the squared exponential (R&W §4.2.1): the relative gap is ~r⁴/(8α), below 1e-7 at
    α = 1e10 for these r² ≲ 30."""
    X = rng.uniform(-1.0, 1.0, size=(8, 2))
    assert_close(
        K.RationalQuadratic([0.5, 0.9], 1.3, 1e10)(X), K.SquaredExponential([0.5, 0.9], 1.3)(X), rtol=1e-7
    )


SCALES = [
    ("python-float", 2.5),
    ("python-int", 3),
    ("numpy-scalar", np.float64(0.4)),
    ("jax-0d", jnp.asarray(1.7)),
]


@pytest.mark.parametrize("scale", [s[1] for s in SCALES], ids=[s[0] for s in SCALES])
def test_scalar_times_kernel_both_orders(rng, scale):
    X = rng.uniform(-1.0, 1.0, size=(8, 2))
    base = K.Matern32([0.7, 1.2], 0.9)
    for scaled in (scale * base, base * scale):
        assert type(scaled) is K.Scaled
        assert_close(scaled(X), float(scale) * np.asarray(base(X)))
        assert_close(scaled.diag(X), float(scale) * np.asarray(base.diag(X)))
        assert len(jax.tree_util.tree_leaves(scaled)) == 3


def test_traced_scalar_scales_a_kernel_under_jit_vmap_and_grad(rng):
    """The scale may be a traced value (e.g. a NumPyro sample inside NUTS): c * k works under jit, vmap
    and grad, and d/dc Σ (c k)(X) = Σ k(X)."""
    X = rng.uniform(-1.0, 1.0, size=(8, 2))
    base = K.SquaredExponential(0.6, 1.2)
    G = np.asarray(base(X))
    assert_close(jax.jit(lambda c: (c * base)(X))(2.0), 2.0 * G)
    assert_close(jax.jit(lambda c: (base * c).diag(X))(2.0), 2.0 * np.diag(G))
    grams = jax.vmap(lambda c: (c * base)(X))(jnp.array([0.5, 3.0]))
    assert_close(grams, np.stack([0.5 * G, 3.0 * G]))
    assert_close(jax.grad(lambda c: jnp.sum((base * c)(X)))(1.5), G.sum())
    # grad w.r.t. the kernel pytree reaches the scale leaf and the wrapped kernel's leaves
    kgrad = jax.grad(lambda k: jnp.sum(k(X)))(2.0 * base)
    assert type(kgrad) is K.Scaled and type(kgrad.kernel) is K.SquaredExponential
    assert_close(kgrad.scale, G.sum())


def test_active_dims_equal_slicing(rng):
    """k.on_dims(d)(X1, X2) = k(X1[:, d], X2[:, d]) for any kernel, composites included; negative indices
    count from the end; (N,) inputs are one column."""
    X1 = rng.uniform(-1.0, 1.0, size=(8, 3))
    X2 = rng.uniform(-1.0, 1.0, size=(6, 3))
    for k in (
        K.SquaredExponential([0.5, 2.0], 1.1),
        K.Linear([0.3, 0.7], 0.2),
        K.RationalQuadratic(0.8, 1.0, 0.5) * K.Constant(2.0) + K.WhiteNoise(0.3),
    ):
        for dims in ([0, 2], [2, 1], [-1, 0]):
            active = k.on_dims(dims)
            assert_close(active(X1, X2), k(X1[:, dims], X2[:, dims]))
            assert_close(active(X1), k(X1[:, dims]))
            assert_close(active.diag(X1), k.diag(X1[:, dims]))
    x = rng.uniform(-1.0, 1.0, size=8)
    assert_close(K.Matern52(0.4).on_dims(0)(x), K.Matern52(0.4)(x))


def test_active_dims_are_static_pytree_data(rng):
    k = K.SquaredExponential(0.5, 1.0).on_dims([1]) + 2.0 * K.Linear(0.4).on_dims([0])
    leaves, treedef = jax.tree_util.tree_flatten(k)
    assert len(leaves) == 5  # SE ℓ, s²; the scale; Linear s², c: no dims among the leaves
    rebuilt = jax.tree_util.tree_unflatten(treedef, leaves)
    assert rebuilt.k1.dims == (1,) and rebuilt.k2.kernel.dims == (0,)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(k)[0]]
    assert paths == [
        ".k1.kernel.lengthscale",
        ".k1.kernel.variance",
        ".k2.scale",
        ".k2.kernel.kernel.variance",
        ".k2.kernel.kernel.offset",
    ]
    # other columns are another tree structure (jit retraces); replace keeps the columns
    assert treedef != jax.tree_util.tree_structure(k.replace(k1=K.SquaredExponential(0.5).on_dims([0])))
    assert k.k1.replace(dims=[0]).dims == (0,)
    X = rng.uniform(-1.0, 1.0, size=(5, 2))
    assert_close(jax.jit(lambda kk: kk(X))(k), np.asarray(k(X)))


def test_white_noise_is_a_function_of_the_input_values(rng):
    """k(X) = s² I for distinct rows; cross-covariances vanish except at coincident points; the same
    inside and outside jit, whether or not the two arguments are one array."""
    X = rng.uniform(-1.0, 1.0, size=(5, 2))
    w = K.WhiteNoise(0.3)
    assert_close(w(X), 0.3 * np.eye(5))
    assert_close(w(X, X.copy()), 0.3 * np.eye(5))
    assert_close(jax.jit(lambda a, b: w(a, b))(X, X.copy()), 0.3 * np.eye(5))
    assert_close(w(X, X + 1e-3), np.zeros((5, 5)))
    assert_close(w.diag(X), np.full(5, 0.3))


BAD_ALGEBRA = [
    ("rq-mixture_shape-zero", lambda: K.RationalQuadratic(mixture_shape=0.0), ValueError, "mixture_shape"),
    (
        "rq-mixture_shape-negative",
        lambda: K.RationalQuadratic(mixture_shape=-1.0),
        ValueError,
        "mixture_shape",
    ),
    ("linear-variance-zero", lambda: K.Linear(variance=0.0), ValueError, "variance"),
    ("linear-offset-negative", lambda: K.Linear(offset=-0.1), ValueError, "offset"),
    ("linear-offset-nan", lambda: K.Linear(offset=np.nan), ValueError, "offset"),
    ("constant-negative", lambda: K.Constant(-1.0), ValueError, "variance"),
    ("white-zero", lambda: K.WhiteNoise(0.0), ValueError, "variance"),
    ("scale-negative", lambda: -2.0 * K.SquaredExponential(), ValueError, "scale"),
    ("scale-zero", lambda: K.SquaredExponential() * 0.0, ValueError, "scale"),
    ("scale-vector", lambda: np.ones(2) * K.SquaredExponential(), TypeError, "scalar"),
    ("scale-vector-right", lambda: K.SquaredExponential() * jnp.ones(2), TypeError, "scalar"),
    ("scale-bool", lambda: True * K.SquaredExponential(), TypeError, "unsupported"),
    ("scale-object", lambda: K.SquaredExponential() * object(), TypeError, "unsupported"),
    ("dims-empty", lambda: K.SquaredExponential().on_dims([]), ValueError, "dims"),
    ("dims-repeated", lambda: K.SquaredExponential().on_dims([0, 0]), ValueError, "distinct"),
    ("dims-float", lambda: K.SquaredExponential().on_dims([0.5]), ValueError, "dims"),
    ("active-dims-not-a-kernel", lambda: K.ActiveDims(1.0, [0]), TypeError, "kernel"),
    (
        "dims-out-of-range",
        lambda: K.SquaredExponential().on_dims([2])(np.zeros((3, 2))),
        ValueError,
        "out of range",
    ),
]


@pytest.mark.parametrize(
    ("make", "error", "match"), [c[1:] for c in BAD_ALGEBRA], ids=[c[0] for c in BAD_ALGEBRA]
)
def test_algebra_rejects_bad_arguments(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_new_kernels_work_in_a_sparse_gp(rng):
    """A composite with active dims, a Linear part, a scale and white noise is a kernel like any other:
    SparseGP's log density under jit equals the dense N(0, Q_ff + σ²I) of its own Gram matrices."""
    from bayes_rbfn.models.distributions import SparseGP

    X = rng.uniform(-1.0, 1.0, size=(12, 2))
    Z = X[::3] + 0.05
    y = rng.normal(size=12)
    noise = 0.3
    kernel = (
        1.5 * K.RationalQuadratic(0.7, 1.0, 2.0).on_dims([0])
        + K.Linear(0.5, 0.2).on_dims([1])
        + K.WhiteNoise(0.01)
    )
    Kfu = np.asarray(kernel(X, Z))
    Kuu = np.asarray(kernel(Z))
    Q = Kfu @ np.linalg.solve(Kuu, Kfu.T) + noise**2 * np.eye(12)
    _, logdet = np.linalg.slogdet(Q)
    expected = -0.5 * (y @ np.linalg.solve(Q, y) + logdet + 12 * np.log(2 * np.pi))
    logp = jax.jit(lambda k: SparseGP(k, X, Z, noise, jitter=1e-12).log_prob(y))(kernel)
    assert_close(logp, expected, rtol=1e-6)
