"""Kernels (DESIGN §2, §3.7; STYLE "a kernel is a small value").

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
