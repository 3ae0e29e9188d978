"""Bayesian linear regression (Bishop §3.3, §3.5;
docs/mathematics.md#bayesian-linear-regression-and-the-equivalent-kernel) against dense NumPy/SciPy
references.

Every reference is the textbook formula evaluated with ``numpy.linalg`` on small matrices: S_N as an
explicit inverse, m_N = β S_N Φᵀ t, the equivalent kernel β Φ S_N Φ'ᵀ, and the evidence as the density
of t ~ N(0, ΦΦᵀ/α + I/β) from ``scipy.stats``. Agreement is to the float64 tolerances of conftest.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import RTOL, assert_close
from scipy import stats

from bayes_rbfn.gp import blr

# (id, input dim, N, number of centres per dim, bias, weight_precision, noise_precision)
CASES = [
    pytest.param(1, 20, 9, True, 2.0, 25.0, id="1d-bias"),
    pytest.param(2, 30, 4, False, 0.5, 100.0, id="2d-no-bias"),
    pytest.param(1, 6, 15, False, 1.0, 4.0, id="1d-more-basis-than-data"),
]


def _problem(rng, dim, n, per_dim, bias):
    """Inputs, Gaussian-basis design matrices (train and test) and targets."""
    X = rng.uniform(-1.0, 1.0, size=(n, dim))
    X_test = rng.uniform(-1.2, 1.2, size=(7, dim))
    axes = [np.linspace(-1.0, 1.0, per_dim)] * dim
    centres = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, dim)
    width = 0.6
    Phi = np.asarray(blr.gaussian_basis(X, centres, width, bias=bias))
    Phi_test = np.asarray(blr.gaussian_basis(X_test, centres, width, bias=bias))
    t = np.sin(3.0 * X[:, 0]) + 0.1 * rng.standard_normal(n)
    return Phi, Phi_test, t


def _reference_posterior(Phi, t, weight_precision, noise_precision):
    """Bishop (3.53)–(3.54) with an explicit inverse (fine for a small test reference)."""
    S_N = np.linalg.inv(weight_precision * np.eye(Phi.shape[1]) + noise_precision * Phi.T @ Phi)
    return noise_precision * S_N @ Phi.T @ t, S_N


# --------------------------------------------------------------------------------------------------
# Basis functions


@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("dim", [1, 3], ids=["1d", "3d"])
def test_gaussian_basis_matches_formula(rng, dim, bias):
    """Φ_nj = exp(−‖x_n − μ_j‖²/(2s²)) (Bishop (3.4)), with a leading column of ones for the bias."""
    X = rng.normal(size=(8, dim))
    centres = rng.normal(size=(5, dim))
    width = 0.7
    Phi = blr.gaussian_basis(
        X if dim > 1 else X[:, 0], centres if dim > 1 else centres[:, 0], width, bias=bias
    )
    sq = np.sum((X[:, None, :] - centres[None, :, :]) ** 2, axis=-1)
    expected = np.exp(-sq / (2 * width**2))
    if bias:
        expected = np.hstack([np.ones((8, 1)), expected])
    assert Phi.shape == expected.shape
    assert_close(Phi, expected)


# --------------------------------------------------------------------------------------------------
# Posterior and predictive


@pytest.mark.parametrize("dim, n, per_dim, bias, weight_precision, noise_precision", CASES)
def test_posterior_matches_dense_reference(rng, dim, n, per_dim, bias, weight_precision, noise_precision):
    """m_N and S_N of Bishop (3.53)–(3.54); the Cholesky factor really factorises S_N⁻¹."""
    Phi, _, t = _problem(rng, dim, n, per_dim, bias)
    m_ref, S_ref = _reference_posterior(Phi, t, weight_precision, noise_precision)
    post = blr.posterior(Phi, t, weight_precision, noise_precision)
    assert_close(post.mean, m_ref)
    assert_close(post.cov, S_ref)
    L = np.asarray(post.chol_precision)
    assert_close(L @ L.T, weight_precision * np.eye(Phi.shape[1]) + noise_precision * Phi.T @ Phi)
    assert np.allclose(L, np.tril(L))


@pytest.mark.parametrize("dim, n, per_dim, bias, weight_precision, noise_precision", CASES)
def test_predictive_matches_dense_reference(rng, dim, n, per_dim, bias, weight_precision, noise_precision):
    """Mean m_Nᵀφ(x) and σ_N²(x) = 1/β + φ(x)ᵀ S_N φ(x), Bishop (3.58)–(3.59); full covariance too."""
    Phi, Phi_test, t = _problem(rng, dim, n, per_dim, bias)
    m_ref, S_ref = _reference_posterior(Phi, t, weight_precision, noise_precision)
    latent_cov = Phi_test @ S_ref @ Phi_test.T
    post = blr.posterior(Phi, t, weight_precision, noise_precision)

    pred = blr.predictive(Phi_test, post, noise_precision, full_cov=True)
    assert_close(pred.mean, Phi_test @ m_ref)
    assert_close(pred.var, 1.0 / noise_precision + np.diag(latent_cov))
    assert_close(pred.cov, latent_cov + np.eye(len(Phi_test)) / noise_precision)

    latent = blr.predictive(Phi_test, post, noise_precision, include_noise=False)
    assert latent.cov is None
    assert_close(latent.var, np.diag(latent_cov))


# --------------------------------------------------------------------------------------------------
# Equivalent kernel


@pytest.mark.parametrize("dim, n, per_dim, bias, weight_precision, noise_precision", CASES)
def test_equivalent_kernel_identities(rng, dim, n, per_dim, bias, weight_precision, noise_precision):
    """Bishop (3.61)–(3.63): k(x, x') = βφ(x)ᵀS_Nφ(x'); the predictive mean is Σ_n k(x, x_n) t_n; and
    cov[y(x1), y(x2)] = φ(x1)ᵀ S_N φ(x2) = k(x1, x2)/β, the latent predictive covariance."""
    Phi, Phi_test, t = _problem(rng, dim, n, per_dim, bias)
    _, S_ref = _reference_posterior(Phi, t, weight_precision, noise_precision)
    post = blr.posterior(Phi, t, weight_precision, noise_precision)

    k_test_train = blr.equivalent_kernel(Phi_test, Phi, post, noise_precision)
    assert k_test_train.shape == (len(Phi_test), len(Phi))
    assert_close(k_test_train, noise_precision * Phi_test @ S_ref @ Phi.T)
    mean = blr.predictive(Phi_test, post, noise_precision).mean
    assert_close(k_test_train @ t, mean, scale=np.max(np.abs(t)))

    k_test_test = blr.equivalent_kernel(Phi_test, Phi_test, post, noise_precision)
    latent_cov = blr.predictive(Phi_test, post, noise_precision, full_cov=True, include_noise=False).cov
    assert_close(k_test_test / noise_precision, Phi_test @ S_ref @ Phi_test.T)
    assert_close(k_test_test / noise_precision, latent_cov)
    assert_close(k_test_test, np.asarray(k_test_test).T)


# --------------------------------------------------------------------------------------------------
# Evidence


@pytest.mark.parametrize("dim, n, per_dim, bias, weight_precision, noise_precision", CASES)
def test_log_evidence_matches_marginal_gaussian(
    rng, dim, n, per_dim, bias, weight_precision, noise_precision
):
    """Bishop (3.86) equals log N(t | 0, ΦΦᵀ/α + I/β), the weights integrated out."""
    Phi, _, t = _problem(rng, dim, n, per_dim, bias)
    C = Phi @ Phi.T / weight_precision + np.eye(n) / noise_precision
    expected = stats.multivariate_normal(mean=np.zeros(n), cov=C).logpdf(t)
    assert_close(blr.log_evidence(Phi, t, weight_precision, noise_precision), expected, scale=abs(expected))


def test_log_evidence_is_traceable_in_the_hyperparameters(rng):
    """Under jit/vmap the checks step aside: a vmapped evidence over α equals the eager loop."""
    Phi, _, t = _problem(rng, 1, 20, 9, True)
    alphas = jnp.array([0.1, 1.0, 10.0])
    noise_precision = jnp.array(25.0)
    batched = jax.jit(jax.vmap(blr.log_evidence, in_axes=(None, None, 0, None)))(
        Phi, t, alphas, noise_precision
    )
    assert_close(batched, [blr.log_evidence(Phi, t, float(a), 25.0) for a in alphas])
    grad = jax.grad(blr.log_evidence, argnums=(2, 3))(Phi, t, 1.0, noise_precision)
    assert np.all(np.isfinite(grad))


@pytest.mark.parametrize("dim, n, per_dim, bias, weight_precision, noise_precision", CASES)
def test_log_evidence_gradient_gives_bishop_reestimation_equations(
    rng, dim, n, per_dim, bias, weight_precision, noise_precision
):
    """Differentiating (3.86): ∂/∂α = ½(M/α − m_Nᵀm_N − tr S_N) and ∂/∂β = ½(N/β − ‖t − Φm_N‖² −
    tr(S_N ΦᵀΦ)), whose zeros are Bishop's (3.92) and (3.95). Checks jax.grad through the Cholesky path."""
    Phi, _, t = _problem(rng, dim, n, per_dim, bias)
    m_ref, S_ref = _reference_posterior(Phi, t, weight_precision, noise_precision)
    M = Phi.shape[1]
    d_alpha = 0.5 * (M / weight_precision - m_ref @ m_ref - np.trace(S_ref))
    d_beta = 0.5 * (n / noise_precision - np.sum((t - Phi @ m_ref) ** 2) - np.trace(S_ref @ Phi.T @ Phi))
    grad = jax.grad(blr.log_evidence, argnums=(2, 3))(
        Phi, t, jnp.array(weight_precision), jnp.array(noise_precision)
    )
    assert_close(grad[0], d_alpha, scale=abs(d_alpha), rtol=1e-7)
    assert_close(grad[1], d_beta, scale=abs(d_beta), rtol=1e-7)


def test_float32_runs_with_float32_tolerance(rng):
    """docs/mathematics.md#numerics: float32 inputs stay float32 and agree with float64 to the float32
    tolerance."""
    Phi, Phi_test, t = _problem(rng, 1, 20, 9, True)
    ref = blr.predictive(Phi_test, blr.posterior(Phi, t, 2.0, 25.0), 25.0)
    f32 = np.float32
    post = blr.posterior(Phi.astype(f32), t.astype(f32), 2.0, 25.0)
    pred = blr.predictive(Phi_test.astype(f32), post, 25.0)
    assert pred.mean.dtype == jnp.float32
    dtype = np.dtype(np.float32)
    assert_close(pred.mean, ref.mean, dtype=dtype, rtol=RTOL[dtype])
    assert_close(pred.var, ref.var, dtype=dtype, rtol=RTOL[dtype])


# --------------------------------------------------------------------------------------------------
# Validation


def test_bad_inputs_raise_naming_the_argument(rng):
    Phi, Phi_test, t = _problem(rng, 1, 20, 9, True)
    post = blr.posterior(Phi, t, 1.0, 1.0)
    bad = [
        (lambda: blr.posterior(Phi, t, -1.0, 1.0), "weight_precision"),
        (lambda: blr.posterior(Phi, t, 1.0, 0.0), "noise_precision"),
        (lambda: blr.posterior(Phi, t[:-1], 1.0, 1.0), "t"),
        (lambda: blr.posterior(Phi[:, 0], t, 1.0, 1.0), "Phi"),
        (lambda: blr.posterior(np.where(Phi > 0.5, np.nan, Phi), t, 1.0, 1.0), "Phi"),
        (lambda: blr.predictive(Phi_test[:, :-1], post, 1.0), "Phi_test"),
        (lambda: blr.predictive(Phi_test, (post.mean, post.chol_precision), 1.0), "posterior"),
        (lambda: blr.equivalent_kernel(Phi_test, Phi[:, 1:], post, 1.0), "Phi2"),
        (lambda: blr.log_evidence(Phi, t, 1.0, np.inf), "noise_precision"),
        (lambda: blr.gaussian_basis(np.zeros((3, 2)), np.zeros((4, 1)), 1.0), "centres"),
        (lambda: blr.gaussian_basis(np.zeros(3), np.zeros(4), -0.5), "width"),
    ]
    for call, name in bad:
        with pytest.raises(ValueError, match=rf"^{name}:"):
            call()
