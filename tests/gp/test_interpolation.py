"""Kernel interpolation, polyharmonic splines and the power function (Bindel;
docs/mathematics.md#kernels-and-interpolation).

References are dense NumPy: ``numpy.linalg.solve`` on K c = f and on the saddle-point system (built here
with monomials in raw coordinates, independently of the library's scaled tail), and the noise-free GP
posterior variance K_yy − K_yX K_XX⁻¹ K_Xy for the squared power function; the polyharmonic splines are
also checked against SciPy (``CubicSpline`` natural in 1-D, ``RBFInterpolator`` in 2-D).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import assert_close
from scipy.interpolate import CubicSpline, RBFInterpolator

from bayes_rbfn.gp import conditional, interpolation, kernels, linalg

VARIANCE = 1.3
#: Absolute tolerance on P_X(y)² in units of s²: the subtraction k(y,y) − k_yX K⁻¹ k_Xy cancels near the
#: nodes, losing about ε · cond(K_XX) (cond ≤ 1e7 for the node sets below).
POWER2_ATOL = 1e-8
#: Slack on Bindel's bound for rounding in ‖f‖² − ‖f̂‖² and in f − f̂ (relative, and absolute in units of
#: max |f|).
BOUND_RTOL, BOUND_ATOL = 1e-6, 1e-9

PD_KERNELS = [
    pytest.param(kernels.SquaredExponential, id="se"),
    pytest.param(kernels.Exponential, id="exponential"),
    pytest.param(kernels.Matern32, id="matern32"),
    pytest.param(kernels.Matern52, id="matern52"),
]
#: (dimension, number of nodes, lengthscale): node sets in the unit cube of moderate conditioning.
DIMS = [pytest.param(1, 10, 0.12, id="1d"), pytest.param(2, 30, 0.3, id="2d")]
POLYHARMONIC = [
    pytest.param(interpolation.Cubic(), id="cubic"),
    pytest.param(interpolation.ThinPlate(), id="thin-plate"),
]


def _nodes(dim, n, seed=0):
    rng = np.random.default_rng(seed)
    if dim == 1:
        # Jittered grid: random but never nearly coincident, so K_XX stays well conditioned.
        return ((np.arange(n) + rng.uniform(0.2, 0.8, n)) / n)[:, None]
    return rng.uniform(0.0, 1.0, size=(n, dim))


def _gram(kernel, A, B):
    """The kernel matrix in plain NumPy from the distance r (an independent reference)."""
    A, B = np.atleast_2d(A.T).T, np.atleast_2d(B.T).T
    d = (A[:, None, :] - B[None, :, :]) / getattr(kernel, "lengthscale", 1.0)
    r = np.sqrt(np.sum(d * d, axis=-1))
    if isinstance(kernel, interpolation.Cubic):
        return r**3
    if isinstance(kernel, interpolation.ThinPlate):
        return np.where(r > 0, r**2 * np.log(np.where(r > 0, r, 1.0)), 0.0)
    s2 = float(kernel.variance)
    if isinstance(kernel, kernels.SquaredExponential):
        return s2 * np.exp(-0.5 * r**2)
    if isinstance(kernel, kernels.Exponential):
        return s2 * np.exp(-r)
    if isinstance(kernel, kernels.Matern32):
        return s2 * (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r)
    if isinstance(kernel, kernels.Matern52):
        return s2 * (1 + np.sqrt(5) * r + 5 * r**2 / 3) * np.exp(-np.sqrt(5) * r)
    raise NotImplementedError(type(kernel).__name__)


# --------------------------------------------------------------------------------------------------
# Positive-definite kernels


def _pd_problem(kernel_cls, dim, n, lengthscale):
    """Kernel, nodes X (n, dim) and evaluation points Y (200 random points, then the n nodes).

    Every positive-definite test uses these same shapes, so the jitted cores compile once per kernel
    and dimension.
    """
    X = _nodes(dim, n)
    Y = np.vstack([np.random.default_rng(2).uniform(-0.1, 1.1, size=(200, dim)), X])
    return kernel_cls(lengthscale, VARIANCE), X, Y


@pytest.mark.parametrize("dim, n, lengthscale", DIMS)
@pytest.mark.parametrize("kernel_cls", PD_KERNELS)
def test_interpolant_matches_dense_solve(kernel_cls, dim, n, lengthscale):
    """K c = f by Cholesky: f̂ reproduces the data and agrees with numpy.linalg.solve at new points."""
    k, X, Y = _pd_problem(kernel_cls, dim, n, lengthscale)
    f = np.sin(4.0 * X).sum(axis=1)
    interp = interpolation.interpolate(k, X, f)
    assert interp.degree is None
    values = np.asarray(interp(Y))
    assert_close(values[-n:], f)
    expected = _gram(k, Y, X) @ np.linalg.solve(_gram(k, X, X), f)
    assert_close(values, expected, rtol=1e-7)


@pytest.mark.parametrize("dim, n, lengthscale", DIMS)
@pytest.mark.parametrize("kernel_cls", PD_KERNELS)
def test_power_function_is_noise_free_gp_sd(kernel_cls, dim, n, lengthscale):
    """P_X(y)² = k(y,y) − k_yX K⁻¹ k_Xy, the noise-free GP posterior variance (dense reference and
    conditional.condition_gaussian); zero at the nodes, at most k(y, y) everywhere."""
    k, X, Y = _pd_problem(kernel_cls, dim, n, lengthscale)
    P = np.asarray(interpolation.power_function(k, X, Y))
    K_YX = _gram(k, Y, X)
    expected = VARIANCE - np.sum(K_YX * np.linalg.solve(_gram(k, X, X), K_YX.T).T, axis=1)
    assert_close(P**2, np.maximum(expected, 0.0), rtol=1e-6, atol=POWER2_ATOL, scale=VARIANCE)
    if dim == 2:  # second check through the library's conditioning step
        prior_var = np.full(len(Y), VARIANCE)
        condition = jax.jit(conditional.condition_gaussian, static_argnames="full_cov")
        gp = condition(_gram(k, X, X), K_YX.T, prior_var, np.zeros(n), full_cov=False)
        assert_close(P**2, np.maximum(gp.var, 0.0), rtol=1e-6, atol=POWER2_ATOL, scale=VARIANCE)
    assert np.all(P[-n:] ** 2 <= POWER2_ATOL * VARIANCE)
    assert np.all(P <= np.sqrt(VARIANCE) * (1 + 1e-12))


@pytest.mark.parametrize("dim, n, lengthscale", DIMS)
@pytest.mark.parametrize("kernel_cls", PD_KERNELS)
def test_error_bound_holds_for_rkhs_functions(kernel_cls, dim, n, lengthscale):
    """Bindel's bound |f(y) − f̂(y)| ≤ P_X(y) sqrt(‖f‖²_H − ‖f̂‖²_H) at 200 random points (and the nodes),
    for f = Σ_j c_j k(·, z_j) with random centres z_j and weights c_j, so ‖f‖²_H = cᵀ K_zz c."""
    k, X, Y = _pd_problem(kernel_cls, dim, n, lengthscale)
    rng = np.random.default_rng(3)
    Z = rng.uniform(-0.2, 1.2, size=(25, dim))
    c = rng.standard_normal(25)
    norm2_f = c @ _gram(k, Z, Z) @ c
    interp = interpolation.interpolate(k, X, _gram(k, X, Z) @ c)
    norm2_fhat = float(interpolation.native_norm(interp)) ** 2
    assert norm2_fhat <= norm2_f * (1 + 1e-10)  # f̂ is the H-orthogonal projection of f

    f_Y = _gram(k, Y, Z) @ c
    error = np.abs(f_Y - np.asarray(interp(Y)))
    bound = np.asarray(interpolation.power_function(k, X, Y)) * np.sqrt(max(norm2_f - norm2_fhat, 0.0))
    slack = BOUND_RTOL * bound + BOUND_ATOL * np.max(np.abs(f_Y))
    assert np.all(error <= bound + slack), np.max(error - bound)
    ratio = np.max(error[:-n] / bound[:-n])
    print(f"{kernel_cls.__name__} {dim}-d: max error/bound = {ratio:.3g}")
    assert ratio > 0.1  # not vacuous: observed 0.38–0.84


@pytest.mark.parametrize("kernel_cls", PD_KERNELS)
def test_error_bound_is_attained_by_the_kernel_section(kernel_cls):
    """For f = k(·, y₀) the bound is an equality at y₀: f(y₀) − f̂(y₀) = P_X(y₀)² and
    ‖f‖²_H − ‖f̂‖²_H = P_X(y₀)², so the power function is the sharp constant. Checked at the point of
    largest P_X and at a typical (median) one."""
    k, X, Y = _pd_problem(kernel_cls, *DIMS[1].values)
    P2 = np.asarray(interpolation.power_function(k, X, Y)) ** 2
    order = np.argsort(P2[: -len(X)])
    for i in (order[-1], order[len(order) // 2]):
        interp = interpolation.interpolate(k, X, _gram(k, X, Y[i : i + 1])[:, 0])
        error = VARIANCE - float(interp(Y)[i])
        gap = VARIANCE - float(interpolation.native_norm(interp)) ** 2
        assert_close(error, P2[i], rtol=1e-6, atol=POWER2_ATOL, scale=VARIANCE)
        assert_close(gap, P2[i], rtol=1e-6, atol=POWER2_ATOL, scale=VARIANCE)


def test_native_norm_matches_quadratic_form():
    """‖f̂‖_H = sqrt(cᵀ K c) = sqrt(fᵀ K⁻¹ f)."""
    k, X, _ = _pd_problem(kernels.Matern52, *DIMS[1].values)
    f = np.cos(3.0 * X[:, 0]) * X[:, 1]
    interp = interpolation.interpolate(k, X, f)
    c = np.asarray(interp.coef)
    assert_close(interpolation.native_norm(interp), np.sqrt(c @ _gram(k, X, X) @ c))
    assert_close(interpolation.native_norm(interp), np.sqrt(f @ np.linalg.solve(_gram(k, X, X), f)))


def test_interpolate_is_traceable():
    """Under vmap over data vectors (the checks step aside for tracers) f̂ equals the eager result."""
    k, X, Y = _pd_problem(kernels.Matern32, *DIMS[1].values)
    F = np.stack([np.sin(X[:, 0] + s) for s in (0.0, 1.0, 2.0)])
    batched = jax.vmap(lambda f: interpolation.interpolate(k, X, f)(Y))(jnp.asarray(F))
    assert_close(batched, [interpolation.interpolate(k, X, f)(Y) for f in F])


# --------------------------------------------------------------------------------------------------
# Polyharmonic splines with a polynomial tail


def _monomials(X, degree):
    """Raw-coordinate monomials of total degree ≤ degree (independent of the library's scaled basis)."""
    cols = [np.ones(len(X))]
    if X.shape[1] == 1:
        cols += [X[:, 0] ** p for p in range(1, degree + 1)]
    else:
        cols += [X[:, 0] ** i * X[:, 1] ** (p - i) for p in range(1, degree + 1) for i in range(p + 1)]
    return np.stack(cols, axis=1)


def _saddle_numpy(kernel, X, f, degree):
    K, P = _gram(kernel, X, X), _monomials(X, degree)
    q = P.shape[1]
    A = np.block([[K, P], [P.T, np.zeros((q, q))]])
    sol = np.linalg.solve(A, np.concatenate([f, np.zeros(q)]))
    return sol[: len(X)], sol[len(X) :]


@pytest.mark.parametrize("degree", [1, 2], ids=["linear-tail", "quadratic-tail"])
@pytest.mark.parametrize("dim", [1, 2], ids=["1d", "2d"])
@pytest.mark.parametrize("kernel", POLYHARMONIC)
def test_polyharmonic_reproduces_polynomials(kernel, dim, degree):
    """A tail of degree q reproduces every polynomial of degree ≤ q exactly (c = 0, f̂ = p)."""
    rng = np.random.default_rng(dim * 10 + degree)
    X = _nodes(dim, 12 if dim == 1 else 25, seed=degree)
    Y = rng.uniform(-0.5, 1.5, size=(30, dim))
    a = rng.standard_normal(_monomials(X, degree).shape[1])
    interp = interpolation.interpolate(kernel, X, _monomials(X, degree) @ a, degree=degree)
    expected = _monomials(Y, degree) @ a
    assert_close(interp(Y), expected, atol=1e-8)
    assert np.max(np.abs(interp.coef)) <= 1e-8 * np.max(np.abs(a))


@pytest.mark.parametrize("dim", [1, 2], ids=["1d", "2d"])
@pytest.mark.parametrize("kernel", POLYHARMONIC)
def test_polyharmonic_interpolates_and_matches_saddle_point_reference(kernel, dim):
    """Generic data: f̂ interpolates, Pᵀc = 0 (moment conditions), f̂ equals the dense NumPy saddle-point
    solution at new points (the tail's coordinates do not change the interpolant), and the native
    semi-norm sqrt(cᵀΦc) is real (Φ is positive definite on {Pᵀc = 0})."""
    X = _nodes(dim, 12 if dim == 1 else 25, seed=7)
    f = np.sin(4.0 * X).sum(axis=1) + X[:, 0] ** 2
    interp = interpolation.interpolate(kernel, X, f)
    assert interp.degree == 1
    assert_close(interp(X), f)
    assert_close(
        _monomials(X, 1).T @ np.asarray(interp.coef), 0.0, atol=1e-10, scale=np.max(np.abs(interp.coef))
    )
    c_ref, d_ref = _saddle_numpy(kernel, X, f, 1)
    Y = np.random.default_rng(8).uniform(0.0, 1.0, size=(30, dim))
    assert_close(interp(Y), _gram(kernel, Y, X) @ c_ref + _monomials(Y, 1) @ d_ref)
    assert_close(interp.coef, c_ref, rtol=1e-7, scale=np.max(np.abs(c_ref)))
    c = np.asarray(interp.coef)
    quad = c @ _gram(kernel, X, X) @ c
    assert quad > 0
    assert_close(interpolation.native_norm(interp), np.sqrt(quad))


def test_cubic_in_1d_is_the_natural_cubic_spline():
    """In 1-D, Σ c_i |x − x_i|³ + d_0 + d_1 x with Σ c_i = Σ c_i x_i = 0 is the natural cubic spline
    (scipy.interpolate.CubicSpline with bc_type="natural"), an independent classical reference."""
    X = _nodes(1, 12, seed=7)[:, 0]
    f = np.sin(4.0 * X) + X**2
    interp = interpolation.interpolate(interpolation.Cubic(), X, f)
    Y = np.random.default_rng(8).uniform(X.min(), X.max(), size=(30, 1))
    spline = CubicSpline(X, f, bc_type="natural")
    assert_close(interp(Y), spline(Y[:, 0]))


@pytest.mark.parametrize(
    "kernel, name",
    [(interpolation.Cubic(), "cubic"), (interpolation.ThinPlate(), "thin_plate_spline")],
    ids=["cubic", "thin-plate"],
)
def test_polyharmonic_2d_matches_scipy_rbf_interpolator(kernel, name):
    """Same interpolant as scipy.interpolate.RBFInterpolator (linear tail, no smoothing) in 2-D."""
    X = _nodes(2, 25, seed=7)
    f = np.sin(4.0 * X).sum(axis=1) + X[:, 0] ** 2
    Y = np.random.default_rng(8).uniform(-0.2, 1.2, size=(30, 2))
    reference = RBFInterpolator(X, f, kernel=name, degree=1)(Y)
    assert_close(interpolation.interpolate(kernel, X, f)(Y), reference, rtol=1e-7)


def test_se_kernel_with_linear_tail_reproduces_linear_functions():
    """The saddle-point path also serves positive-definite kernels given a tail."""
    k = kernels.SquaredExponential(0.3, VARIANCE)
    X = _nodes(2, 25)
    interp = interpolation.interpolate(k, X, 1.0 + 2.0 * X[:, 0] - X[:, 1], degree=1)
    Y = np.random.default_rng(9).uniform(-1.0, 2.0, size=(20, 2))
    assert_close(interp(Y), 1.0 + 2.0 * Y[:, 0] - Y[:, 1], atol=1e-8)


@pytest.mark.parametrize("kernel", POLYHARMONIC)
def test_polyharmonic_kernels_are_finite_at_zero(kernel):
    """φ(0) = 0 (thin plate: the limit of r² log r), with a finite gradient at coincident points."""
    x = jnp.array([[0.3, -0.2]])
    r = 0.7
    gram = jax.jit(lambda a, b: kernel(a, b))
    assert float(gram(x, x)[0, 0]) == 0.0
    assert_close(kernel.diag(x), [0.0])
    grad = jax.jit(jax.grad(lambda z: kernel(z, x)[0, 0]))(x)
    assert np.all(np.isfinite(grad)) and np.all(grad == 0.0)
    expected = r**3 if isinstance(kernel, interpolation.Cubic) else r**2 * np.log(r)
    assert_close(gram(x, x + jnp.array([[r, 0.0]])), [[expected]])


# --------------------------------------------------------------------------------------------------
# Errors


def test_non_unisolvent_nodes_raise():
    """Collinear points in 2-D cannot determine a linear tail; two points cannot determine a quadratic."""
    t = np.linspace(0.0, 1.0, 6)
    collinear = np.stack([t, 1.0 - 2.0 * t], axis=1)
    for kernel in (interpolation.Cubic(), interpolation.ThinPlate()):
        with pytest.raises(ValueError, match=r"^X: .* not unisolvent .* degree 1 in 2 dimension"):
            interpolation.interpolate(kernel, collinear, np.ones(6))
    with pytest.raises(ValueError, match=r"^X: .* not unisolvent .* rank 2 < 3"):
        interpolation.interpolate(interpolation.Cubic(), np.array([0.0, 1.0]), np.ones(2), degree=2)


def test_bad_arguments_raise_clear_errors():
    X = _nodes(2, 10)
    f = np.ones(10)
    se = kernels.SquaredExponential(0.3, 1.0)
    bad = [
        (lambda: interpolation.interpolate(interpolation.Cubic(), X, f, degree=0), "degree"),
        (lambda: interpolation.interpolate(se, X, f, degree=-1), "degree"),
        (lambda: interpolation.interpolate(se, np.vstack([X, X[:1]]), np.ones(11)), "X"),
        (lambda: interpolation.interpolate(se, X, f[:-1]), "f"),
        (lambda: interpolation.interpolate(lambda a, b: a @ b.T, X, f), "kernel"),
        (lambda: interpolation.power_function(interpolation.ThinPlate(), X, X), "kernel"),
        (lambda: interpolation.power_function(se, X, np.zeros((3, 3))), "Y"),
        (lambda: interpolation.interpolate(se, X, f)(np.zeros((3, 1))), "Y"),
        (lambda: interpolation.native_norm(np.ones(3)), "interpolant"),
    ]
    for call, name in bad:
        with pytest.raises(ValueError, match=rf"^{name}:"):
            call()


def test_singular_gram_raises_factorisation_error_and_jitter_rescues():
    """Nodes 1e-9 apart make the SE Gram matrix singular in float64: a clear error, not NaN."""
    se = kernels.SquaredExponential(1.0, 1.0)
    X = np.array([0.0, 1e-9, 0.5, 1.0])
    f = np.array([0.0, 0.0, 1.0, 0.0])
    with pytest.raises(linalg.FactorisationError, match=r"^interpolate:"):
        interpolation.interpolate(se, X, f)
    interp = interpolation.interpolate(se, X, f, jitter=None)
    assert np.all(np.isfinite(interp(X)))
