"""SoR's log marginal likelihood, its gradient and its LOO conditionals at small noise (σ/s = 1e-6, 1e-8).

The Woodbury form of the quadratic form, yᵀC⁻¹y = yᵀD⁻¹y − ‖c‖², subtracts two numbers of size ‖y‖²/σ²
and lost every digit by σ/s ≈ 1e-8. The library now takes it from the residuals of the weight
mean, yᵀC⁻¹y = rᵀD⁻¹r + ‖L_uuᵀ m‖² (:meth:`bayes_rbfn.gp.linalg.Woodbury.with_residuals`). Here the
value, its gradient in the log hyperparameters and the LOO conditionals are checked against a reference
carried to 60 significant digits with the standard library's :mod:`decimal` (kernel, Nyström covariance,
dense Cholesky of C = Q_ff + σ²I, finite differences), written from the formulas and independent of the
library; float64 inputs are converted exactly.

Problems: the two regimes in which the old form cancels —

* ``near-span``: M < N and y = K_fu w + σε, so the residuals are O(σ) (what a posterior with small noise
  looks like): yᵀy/σ² ≈ ‖c‖² ≈ 1e16 ‖y‖² at σ = 1e-8;
* ``z-equals-x``: N = M, every point interpolated (yᵀC⁻¹y ≈ yᵀQ_ff⁻¹y while yᵀy/σ² is 1e16 larger);
  ``z-equals-x-24`` the same with 24 points (LOO only: several leaf blocks, see below);
* ``mixed`` (LOO only): ``near-span-1d`` plus one point alone at each of three more inducing inputs;

with well-separated inducing inputs (cond(K_uu) ≤ 100), so that the problem itself is well conditioned.
Relative error of the value before the change: 6e-8…6e-5 at σ = 1e-6 and 8e-4…1.7 at σ = 1e-8; after it,
≤ 3e-10. The gradient in log(ℓ, s², σ) was off by up to 2.4 per point at σ = 1e-8; it is now within
1.1e-6 relative (or 1e-8 per point where the true value is ~σ², the noise gradient at interpolated points).

The LOO conditionals: where the leverages stay away from 1 (``near-span``) the Woodbury values
(diag(C⁻¹) = 1/σ² − ‖V_:i‖² from M×M sums, C⁻¹y from the residuals) are within 4e-9 at σ = 1e-8. At a
point the model interpolates 1 − h_i = σ²[C⁻¹]_ii ~ σ²/s², which those sums hold only to ~ε absolutely:
the Woodbury values were off by 2e-4…2.5e-3 at σ = 1e-6 and NaN at 1e-8 (Z = X), and by 9e-4 at a point
alone at its inducing input among ordinary ones (``mixed``). :func:`bayes_rbfn.gp.block_loo.sor_loo`
now takes those points (1 − h_i below block_loo.LOO_LEVERAGE_FLOOR) from a leave-block-out pass that
subtracts nothing, checked here for four kernels, one leaf block and several, chunk lengths 8 and the
default, padding, float32 and (nested) vmap: ≤ 2e-14 relative with Z = X, ≤ 3e-9 in ``mixed`` (there the
problem's own sensitivity to ε-changes of y). The sharded pass is checked in tests/gp/test_streaming.py.
"""

from __future__ import annotations

import decimal
from decimal import Decimal

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayes_rbfn.gp import block_loo, kernels, woodbury_sums

#: The library's documented relative jitter for float64 (bayes_rbfn.gp.linalg.JITTER), written out.
JITTER = 1e-8
#: Working precision of the reference (significant digits).
DIGITS = 60
#: Relative tolerance of the value: the problems' own condition under ε-perturbations of K is ~1e-9.
RTOL_VALUE = 1e-8
#: Gradients in log(ℓ), log(s²), log(σ): relative, with an absolute floor of 1e-9 · N (the gradient of an
#: N-point log density has entries of order N; the noise gradient at an interpolated point is ~σ²).
RTOL_GRAD, ATOL_GRAD_PER_POINT = 1e-5, 1e-9
RTOL_LOO = 1e-7
#: The conditionals of interpolated points (1 − h_i below block_loo.LOO_LEVERAGE_FLOOR), from sor_loo's
#: leave-block-out pass, where every point is interpolated (z-equals-x*): measured ≤ 2e-14 relative.
RTOL_LOO_INTERPOLATED = 1e-12
#: The same for the points alone at their inducing input in ``mixed``: measured ≤ 3e-9. That is the
#: problem's own floor, not the pass's: their conditional mean Σ_j c_j y_j extrapolates the other points'
#: fit with Σ_j |c_j y_j| ≈ 7e5 (σ = 1e-8) against residuals y_i − E[y_i | y_−i] of 5e-3 and 9e-5, so
#: ε-perturbations of y alone move it by up to 1.6e-10 (absolute) — the pass is off by 7e-12.
RTOL_LOO_MIXED = 1e-8
#: The library's float64 floor of 1 − h_i (block_loo.LOO_LEVERAGE_FLOOR), written out.
FLOOR = 1e-4
#: The library's relative jitter for float32, written out.
JITTER32 = 1e-4

KERNELS = {
    "se": kernels.SquaredExponential,
    "matern32": kernels.Matern32,
    "matern52": kernels.Matern52,
    "exponential": kernels.Exponential,
}


# --------------------------------------------------------------------------------------------------
# The reference, in decimal arithmetic


def _profile(kind: str, r2: Decimal) -> Decimal:
    """k(r)/s² from r² = Σ_d (x_d − x'_d)²/ℓ² (Rasmussen & Williams eqs. (4.9), (4.17))."""
    if kind == "se":
        return (-r2 / 2).exp()
    r = r2.sqrt()
    if kind == "exponential":
        return (-r).exp()
    if kind == "matern32":
        a = Decimal(3).sqrt() * r
        return (1 + a) * (-a).exp()
    if kind == "matern52":
        a = Decimal(5).sqrt() * r
        return (1 + a + a * a / 3) * (-a).exp()
    raise ValueError(kind)


def _gram(kind, ls, var, A, B):
    def r2(a, b):
        return sum(((Decimal(float(p)) - Decimal(float(q))) / ls) ** 2 for p, q in zip(a, b, strict=True))

    return [[var * _profile(kind, r2(a, b)) for b in B] for a in A]


def _cholesky(C):
    n = len(C)
    L = [[Decimal(0)] * n for _ in range(n)]
    for j in range(n):
        s = C[j][j] - sum(L[j][k] * L[j][k] for k in range(j))
        L[j][j] = s.sqrt()
        for i in range(j + 1, n):
            L[i][j] = (C[i][j] - sum(L[i][k] * L[j][k] for k in range(j))) / L[j][j]
    return L


def _solve_lower(L, b):
    x = []
    for i in range(len(b)):
        x.append((b[i] - sum(L[i][k] * x[k] for k in range(i))) / L[i][i])
    return x


def _solve_upper(L, b):
    """Lᵀ x = b for lower-triangular L."""
    n = len(b)
    x = [Decimal(0)] * n
    for i in reversed(range(n)):
        x[i] = (b[i] - sum(L[k][i] * x[k] for k in range(i + 1, n))) / L[i][i]
    return x


def _sor_cov(kind, ls, var, noise, X, Z, jitter=JITTER):
    """C = K_fu (K_uu + jitter · mean(diag K_uu) · I)⁻¹ K_uf + σ²I, dense."""
    Kuu = _gram(kind, ls, var, Z, Z)
    M = len(Kuu)
    shift = Decimal(jitter) * sum(Kuu[i][i] for i in range(M)) / M
    for i in range(M):
        Kuu[i][i] += shift
    Luu = _cholesky(Kuu)
    Kfu = _gram(kind, ls, var, X, Z)
    A = [_solve_lower(Luu, row) for row in Kfu]  # rows of (L_uu⁻¹ K_uf)ᵀ: Q_ff = A Aᵀ
    N = len(A)
    C = [[sum(p * q for p, q in zip(A[i], A[j], strict=True)) for j in range(N)] for i in range(N)]
    for i in range(N):
        C[i][i] += noise * noise
    return C


def _log_marginal(kind, theta, X, y, Z):
    ls, var, noise = theta
    L = _cholesky(_sor_cov(kind, ls, var, noise, X, Z))
    w = _solve_lower(L, [Decimal(float(v)) for v in y])
    logdet = 2 * sum(L[i][i].ln() for i in range(len(L)))
    return -(sum(v * v for v in w) + logdet + len(L) * (2 * Decimal(np.pi)).ln()) / 2


def reference(kind, lengthscale, variance, noise, X, y, Z, loo=False):
    """(log N(y | 0, C), its gradient in (log ℓ, log s², log σ), and the LOO conditionals when ``loo``)."""
    with decimal.localcontext() as ctx:
        ctx.prec = DIGITS
        theta = [Decimal(float(v)) for v in (lengthscale, variance, noise)]
        value = _log_marginal(kind, theta, X, y, Z)
        h = Decimal(10) ** -20
        grad = []
        for i in range(3):
            up, down = list(theta), list(theta)
            up[i] *= 1 + h
            down[i] *= 1 - h
            # d/dlog θ = θ d/dθ, by central differences: O(h²) = 1e-40 truncation at 60 digits.
            diff = _log_marginal(kind, up, X, y, Z) - _log_marginal(kind, down, X, y, Z)
            grad.append(float(diff / (2 * h)))
        out = [float(value), np.array(grad)]
        if loo:
            out.append(loo_reference(kind, lengthscale, variance, noise, X, y, Z)[0])
        return out


def loo_reference(kind, lengthscale, variance, noise, X, y, Z, jitter=JITTER):
    """(the LOO conditionals log p(y_i | y_−i), and 1 − h_i = σ² [C⁻¹]_ii), both (N,), from a 60-digit
    Cholesky of the dense C = Q_ff + σ²I (``jitter``: the relative jitter of K_uu)."""
    with decimal.localcontext() as ctx:
        ctx.prec = DIGITS
        theta = [Decimal(float(v)) for v in (lengthscale, variance, noise)]
        C = _sor_cov(kind, *theta, X, Z, jitter)
        L = _cholesky(C)
        N = len(C)
        yd = [Decimal(float(v)) for v in y]
        alpha = _solve_upper(L, _solve_lower(L, yd))  # C⁻¹y
        cond, free = [], []
        for i in range(N):
            e = [Decimal(int(i == j)) for j in range(N)]
            p_ii = sum(v * v for v in _solve_lower(L, e))  # [C⁻¹]_ii = ‖L⁻¹ e_i‖²
            cond.append(float(((p_ii / (2 * Decimal(np.pi))).ln() - alpha[i] ** 2 / p_ii) / 2))
            free.append(float(theta[2] ** 2 * p_ii))
        return np.array(cond), np.array(free)


# --------------------------------------------------------------------------------------------------
# Problems


def problem(name: str, kind: str, lengthscale: float, variance: float, noise: float):
    """(X, y, Z) in float64; see the module docstring."""
    rng = np.random.default_rng(0)
    if name == "near-span-1d":
        X = np.sort(rng.uniform(0.0, 3.0, (30, 1)), axis=0)
        Z = np.linspace(0.0, 3.0, 6)[:, None]
    elif name == "near-span-2d":
        X = rng.uniform(0.0, 3.0, (40, 2))
        Z = np.stack(np.meshgrid([0.5, 1.5, 2.5], [0.75, 2.25]), -1).reshape(-1, 2)
    elif name == "z-equals-x":
        X = np.linspace(0.0, 3.0, 6)[:, None]
        return X, np.sin(2.0 * X[:, 0]), X
    elif name == "z-equals-x-24":
        X = np.linspace(0.0, 0.6 * 23, 24)[:, None]  # the spacing of z-equals-x, over several leaf blocks
        return X, np.sin(2.0 * X[:, 0]), X
    elif name == "mixed":
        # near-span-1d's points and inducing inputs, and one point alone at each of three more inducing
        # inputs, shuffled into the chunks: points the model interpolates among ordinary ones.
        alone = np.array([[5.0], [7.0], [9.0]])
        X = np.concatenate([np.sort(rng.uniform(0.0, 3.0, (30, 1)), axis=0), alone])
        X = X[np.random.default_rng(3).permutation(len(X))]
        Z = np.concatenate([np.linspace(0.0, 3.0, 6)[:, None], alone])
    else:
        raise ValueError(name)
    k = KERNELS[kind](lengthscale=lengthscale, variance=variance)
    w = np.random.default_rng(1).standard_normal(Z.shape[0])
    y = 0.3 * np.asarray(k(X, Z)) @ w + noise * np.random.default_rng(2).standard_normal(X.shape[0])
    return X, y, Z


def _library(kind, theta, X, y, Z, chunk_size):
    """SoR's log marginal likelihood and its gradient in (log ℓ, log s², log σ) from the library."""

    def lml(theta):
        kernel = KERNELS[kind](lengthscale=theta[0], variance=theta[1])
        factor = woodbury_sums.sor_factor(kernel, X, y, Z, theta[2], chunk_size=chunk_size)
        return factor.log_marginal_likelihood()

    value, grad = jax.value_and_grad(lml)(jnp.asarray(theta))
    return float(value), np.asarray(grad) * np.asarray(theta)


CASES = [
    pytest.param(name, kind, noise, id=f"{name}-{kind}-sigma={noise:.0e}")
    for name in ("near-span-1d", "near-span-2d", "z-equals-x")
    for kind in KERNELS
    for noise in (1e-6, 1e-8)
]
THETA = (0.7, 1.3)


@pytest.mark.parametrize("name, kind, noise", CASES)
def test_sor_log_marginal_and_gradient_at_small_noise(name, kind, noise):
    """Value to 1e-8 relative and gradient in log(ℓ, s², σ) to 1e-5 (floor 1e-9·N) against 60 digits;
    streamed over several chunks (chunk length 8), so the second sweep is summed chunk by chunk too."""
    X, y, Z = problem(name, kind, *THETA, noise)
    theta = (*THETA, noise)
    value, grad = _library(kind, theta, jnp.asarray(X), jnp.asarray(y), jnp.asarray(Z), chunk_size=8)
    expected_value, expected_grad = reference(kind, *theta, X, y, Z)
    np.testing.assert_allclose(value, expected_value, rtol=RTOL_VALUE)
    np.testing.assert_allclose(grad, expected_grad, rtol=RTOL_GRAD, atol=ATOL_GRAD_PER_POINT * len(y))


@pytest.mark.parametrize(
    "name, kind, noise",
    [c for c in CASES if not c.values[0].startswith("z-equals-x") and c.values[1] in ("se", "matern32")],
)
def test_sor_loo_at_small_noise(name, kind, noise):
    """The LOO conditionals (C⁻¹y from the residuals) against 60 digits, where the leverages stay below 1."""
    X, y, Z = problem(name, kind, *THETA, noise)
    kernel = KERNELS[kind](lengthscale=THETA[0], variance=THETA[1])
    Xj, yj, Zj = jnp.asarray(X), jnp.asarray(y), jnp.asarray(Z)
    factor = woodbury_sums.sor_factor(kernel, Xj, yj, Zj, noise, chunk_size=8)
    loo = block_loo.sor_loo(factor, kernel, Zj, Xj, yj, noise**2, chunk_size=8)
    expected = reference(kind, *THETA, noise, X, y, Z, loo=True)[2]
    np.testing.assert_allclose(loo, expected, rtol=RTOL_LOO, atol=RTOL_LOO)


def _library_loo(kind, noise, X, y, Z, chunk_size=None, mask=None, dtype=np.float64, exact=None):
    """The library's SoR LOO conditionals (its factor, then block_loo.sor_loo), in ``dtype``."""
    kernel = KERNELS[kind](lengthscale=dtype(THETA[0]), variance=dtype(THETA[1]))
    Xj, yj, Zj = (jnp.asarray(a, dtype=dtype) for a in (X, y, Z))
    noise = jnp.asarray(noise, dtype=dtype)
    factor = woodbury_sums.sor_factor(kernel, Xj, yj, Zj, noise, mask=mask, chunk_size=chunk_size)
    return block_loo.sor_loo(
        factor, kernel, Zj, Xj, yj, noise**2, mask=mask, chunk_size=chunk_size, exact=exact
    )


def _assert_loo(loo, expected, free, rtol=RTOL_LOO_INTERPOLATED):
    """Interpolated points (1 − h_i below the library's floor: its leave-block-out pass) to ``rtol``,
    the others (its Woodbury values) to RTOL_LOO."""
    loo = np.asarray(loo)
    tight = free < FLOOR
    np.testing.assert_allclose(loo[tight], expected[tight], rtol=rtol, atol=rtol)
    np.testing.assert_allclose(loo[~tight], expected[~tight], rtol=RTOL_LOO, atol=RTOL_LOO)


def test_sor_loo_interpolated_points_at_small_noise():
    """Z = X, σ = 1e-8: every 1 − h_i ~ 1e-16, so the Woodbury values had no digit left (NaN where the
    precision came out ≤ 0); the leave-block-out pass gets them to ~1e-15."""
    X, y, Z = problem("z-equals-x", "se", *THETA, 1e-8)
    expected, free = loo_reference("se", *THETA, 1e-8, X, y, Z)
    assert np.all(free < 1e-12)
    loo = _library_loo("se", 1e-8, X, y, Z)
    np.testing.assert_allclose(loo, expected, rtol=RTOL_LOO_INTERPOLATED)


INTERPOLATED_CASES = [
    pytest.param(name, kind, noise, id=f"{name}-{kind}-sigma={noise:.0e}")
    for name, kinds in (
        ("z-equals-x", tuple(KERNELS)),
        ("z-equals-x-24", ("se", "matern52")),
        ("mixed", ("se",)),
    )
    for kind in kinds
    for noise in (1e-6, 1e-8)
]


@pytest.mark.parametrize("name, kind, noise", INTERPOLATED_CASES)
def test_sor_loo_interpolated_against_60_digits(name, kind, noise):
    """Every point interpolated (Z = X: one leaf block; 24 points: several, so A_out holds other leaves'
    rows of size 1/σ next to the prior's I), or a mix (``mixed``: points alone at their inducing input among
    ordinary ones, so that both the Woodbury values and the leave-block-out pass are used), in chunks of
    8 and in the default chunks: against the 60-digit reference."""
    X, y, Z = problem(name, kind, *THETA, noise)
    expected, free = loo_reference(kind, *THETA, noise, X, y, Z)
    assert np.any(free < FLOOR / 100)
    if name == "mixed":
        assert np.any(free > FLOOR * 100)
    rtol = RTOL_LOO_MIXED if name == "mixed" else RTOL_LOO_INTERPOLATED
    for chunk_size in (8, None):
        _assert_loo(_library_loo(kind, noise, X, y, Z, chunk_size), expected, free, rtol)


def test_sor_loo_masked_padding_at_interpolated_points():
    """Padded points (mask False) condition nothing in either pass, even where they sit on an interpolated
    point's input with a wild target; they get the value 0."""
    X, y, Z = problem("mixed", "se", *THETA, 1e-8)
    expected, free = loo_reference("se", *THETA, 1e-8, X, y, Z)
    alone = np.flatnonzero(free < FLOOR)
    assert alone.size
    pad = np.concatenate([alone, alone, [0]])
    order = np.random.default_rng(4).permutation(len(X) + len(pad))
    Xp = np.concatenate([X, X[pad]])[order]
    yp = np.concatenate([y, np.full(len(pad), 1e3)])[order]
    mask = np.concatenate([np.ones(len(X), bool), np.zeros(len(pad), bool)])[order]
    loo = np.asarray(_library_loo("se", 1e-8, Xp, yp, Z, chunk_size=8, mask=jnp.asarray(mask)))
    assert np.all(loo[~mask] == 0.0)
    real = order[mask]  # the real points' indices in X
    _assert_loo(loo[mask], expected[real], free[real], RTOL_LOO_MIXED)


@pytest.mark.parametrize("noise", [1e-2, 1e-3])
def test_sor_loo_float32_interpolated(noise):
    """float32 in, float32 out; Z = X at σ = 1e-2, 1e-3 (1 − h_i ~ 1e-4, 1e-6: below float32's floor),
    against the 60-digit reference with the float32 jitter, at 1e-5 relative (the Woodbury values were off
    by 1e-3 and 0.27)."""
    X, y, _ = problem("z-equals-x", "se", *THETA, noise)
    X32, y32 = X.astype(np.float32).astype(np.float64), y.astype(np.float32).astype(np.float64)
    expected, free = loo_reference("se", *THETA, np.float32(noise), X32, y32, X32, jitter=JITTER32)
    assert np.all(free < block_loo.LOO_LEVERAGE_FLOOR[np.dtype("float32")])
    loo = _library_loo("se", noise, X32, y32, X32, dtype=np.float32)
    assert loo.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(loo, np.float64), expected, rtol=1e-5)


def test_sor_loo_vmapped_over_draws():
    """Under jit and vmap (one value per posterior draw, as the models' log_likelihood is evaluated), nested
    too, with ``exact=True``: draws whose points are interpolated get the leave-block-out values, the
    others their Woodbury ones."""
    X, y, Z = problem("z-equals-x", "se", *THETA, 1e-8)
    noises = np.array([[1e-2, 1e-8], [1e-6, 1e-1]])
    loo = jax.jit(jax.vmap(jax.vmap(lambda s: _library_loo("se", s, X, y, Z, exact=True))))(
        jnp.asarray(noises)
    )
    for i, j in np.ndindex(noises.shape):
        expected, free = loo_reference("se", *THETA, noises[i, j], X, y, Z)
        _assert_loo(loo[i, j], expected, free)


def test_sor_loo_deferred_under_jit():
    """``exact="defer"`` under jit: the points below the floor come back NaN (for the caller to evaluate
    again with ``exact=True``), every other point keeps its value."""
    X, y, Z = problem("mixed", "se", *THETA, 1e-8)
    expected, free = loo_reference("se", *THETA, 1e-8, X, y, Z)
    deferred = np.asarray(jax.jit(lambda s: _library_loo("se", s, X, y, Z, exact="defer"))(1e-8))
    flagged = free < FLOOR
    assert flagged.sum() == 3
    assert np.all(np.isnan(deferred[flagged]))
    np.testing.assert_allclose(deferred[~flagged], expected[~flagged], rtol=RTOL_LOO, atol=RTOL_LOO)
    with pytest.raises(ValueError, match="exact"):
        _library_loo("se", 1e-8, X, y, Z, exact="later")


@pytest.fixture(scope="module")
def interpolating_fit():
    """``fit("sor")`` of the ``mixed`` problem with ℓ and σ = 1e-8 pinned: three points alone at their
    inducing inputs in every draw."""
    import bayes_rbfn as br

    X, y, Z = problem("mixed", "se", *THETA, 1e-8)
    idata = br.fit(
        "sor", X, y, Z=Z, fixed={"lengthscale": THETA[0], "noise": 1e-8}, chains=1, warmup=20, draws=3,
        seed=0, progress=False, check_diagnostics=False,
    )  # fmt: skip
    return X, y, Z, idata


def _assert_draws_loo(values, variances, X, y, Z):
    for d, variance in enumerate(variances):
        expected, free = loo_reference("se", THETA[0], variance, 1e-8, X, y, Z)
        assert (free < FLOOR).sum() == 3
        _assert_loo(values[d], expected, free, RTOL_LOO_MIXED)


def test_fit_stores_exact_loo_at_interpolated_points(interpolating_fit):
    """The stored log-likelihood of a fit (jitted, one value per draw) has the interpolated points' values
    from the leave-block-out pass, evaluated again for the draws that need it
    (:func:`bayes_rbfn.infer.fitting.pointwise_loo`): to RTOL_LOO_MIXED of 60 digits (Woodbury's: ~1e-4)."""
    X, y, Z, idata = interpolating_fit
    offset = float(idata.constant_data["y_offset"].values[0])
    values = idata.log_likelihood["y"].values[0]
    _assert_draws_loo(values, idata.posterior["variance"].values[0], X, y - offset, Z)


def test_loo_log_likelihood_of_a_users_model_at_interpolated_points(interpolating_fit):
    """The same for a user's NumPyro model with a SparseGP site (``loo_log_likelihood``, jitted too)."""
    import numpyro
    import numpyro.distributions as dist

    from bayes_rbfn.infer.loo import loo_log_likelihood
    from bayes_rbfn.models.distributions import SparseGP

    X, y, Z, idata = interpolating_fit

    def model(X, y=None):
        variance = numpyro.sample("variance", dist.LogNormal(0.0, 1.0))
        kernel = kernels.SquaredExponential(lengthscale=THETA[0], variance=variance)
        numpyro.sample("y", SparseGP(kernel, X, Z, 1e-8), obs=y)

    users = loo_log_likelihood(idata.copy(), model, X, y, batch_size=2)
    values = users.log_likelihood["y"].values[0]
    _assert_draws_loo(values, idata.posterior["variance"].values[0], X, y, Z)
