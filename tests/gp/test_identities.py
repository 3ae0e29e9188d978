"""The facts of docs/mathematics.md and the numerical rules of §5, each against a dense NumPy/SciPy reference.

Every expected value comes from :mod:`reference` (dense matrices, ``numpy.linalg.solve``,
``scipy.stats.multivariate_normal``), never from the code under test. Tolerances are conftest's, keyed by
dtype: float64 RTOL 1e-8 with an absolute floor of 1e-10 × the largest compared magnitude.

Jitter: unless a test says otherwise the library runs with its default policy (K_uu + 1e-8 · mean(diag K_uu) I
in float64) and the reference applies the *same* jitter explicitly through :func:`reference.jittered`. The
Z = X tests pass ``jitter=0.0`` (their K_XX is well conditioned) because they compare with the exact GP.

Problems are random but reasonably conditioned: inducing inputs are a farthest-point (well spread) subset
of the data or of an independent candidate set, lengthscales are comparable to the spacing of Z, and the
noise is 0.1–0.3 of the signal, so cond(K_uu) ≲ 1e3 and 1e-8 relative agreement is a fair demand.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference as ref
from conftest import assert_close

from bayes_rbfn.gp import conditional, linalg, sparse, woodbury_sums
from bayes_rbfn.gp import kernels as K

# The float64 jitter of the documented policy, restated so the reference does not read it from the library
# (test_jitter_policy checks that the library still uses it).
DEFAULT_JITTER = 1e-8


def farthest_point_subset(X, m):
    """Indices of m well-spread rows of X (greedy farthest-point traversal): a well-conditioned K_uu."""
    idx = [0]
    dist = np.full(len(X), np.inf)
    for _ in range(m - 1):
        dist = np.minimum(dist, np.sum((X - X[idx[-1]]) ** 2, axis=1))
        idx.append(int(np.argmax(dist)))
    return np.array(idx)


#: The library's kernel class for each kind of reference spec (tests/reference.py's names).
LIBRARY_KERNELS = {
    "se": K.SquaredExponential,
    "exponential": K.Exponential,
    "matern32": K.Matern32,
    "matern52": K.Matern52,
    "rq": K.RationalQuadratic,
    "periodic": K.Periodic,
}


def library_kernel(spec):
    """The bayes_rbfn kernel for a reference spec."""
    if spec["kind"] in ("sum", "product"):
        k1, k2 = (library_kernel(part) for part in spec["parts"])
        return k1 + k2 if spec["kind"] == "sum" else k1 * k2
    return LIBRARY_KERNELS[spec["kind"]](**{name: v for name, v in spec.items() if name != "kind"})


class Problem:
    """A random regression problem: X (N, D), y (N,), Z (M, D), X_test (S, D), kernel spec and noise σ."""

    def __init__(self, seed, n, m, dim, spec, noise, z_in_x=True, n_test=9):
        rng = np.random.default_rng(seed)
        self.X = rng.uniform(0.0, 1.0, size=(n, dim))
        if z_in_x:
            self.Z = self.X[farthest_point_subset(self.X, m)]
        else:
            candidates = rng.uniform(0.0, 1.0, size=(20 * m, dim))
            self.Z = candidates[farthest_point_subset(candidates, m)]
        signal = np.sin(2 * np.pi * self.X @ np.linspace(1.0, 0.5, dim)) + 0.5 * np.cos(5 * self.X[:, 0])
        self.y = signal + noise * rng.standard_normal(n)
        # test inputs also outside the data's box, where SoR's variance collapses
        self.X_test = rng.uniform(-0.2, 1.2, size=(n_test, dim))
        self.spec, self.noise = spec, noise
        self.kernel = library_kernel(spec)

    def dense(self, jitter=DEFAULT_JITTER):
        """Reference Gram matrices (K_fu, K_uu + jitter, K_*u) in NumPy."""
        Kuu = ref.jittered(ref.gram(self.spec, self.Z), jitter)
        return ref.gram(self.spec, self.X, self.Z), Kuu, ref.gram(self.spec, self.X_test, self.Z)

    @property
    def args(self):
        return self.kernel, self.X, self.y, self.Z, self.noise


SE = "se"
# Several N, M, D, ARD and kernels (a sum with a periodic part here; products in test_kernels.py). The
# problems come in two sizes, (N, M) = (40, 10) and (70, 18), on purpose: JAX compiles each eager
# operation once per shape, and shared shapes keep the file fast without losing variety.
PROBLEMS = {
    "1d-scalar-se": dict(
        seed=1, n=40, m=10, dim=1, spec={"kind": SE, "lengthscale": 0.12, "variance": 1.3}, noise=0.3
    ),
    "1d-sum-se-periodic": dict(
        seed=2,
        n=40,
        m=10,
        dim=1,
        spec={
            "kind": "sum",
            "parts": [
                {"kind": SE, "lengthscale": 0.12, "variance": 1.0},
                {"kind": "periodic", "lengthscale": 1.0, "variance": 0.5, "period": 0.5},
            ],
        },
        noise=0.2,
    ),
    "2d-ard-exponential": dict(
        seed=3,
        n=40,
        m=10,
        dim=2,
        spec={"kind": "exponential", "lengthscale": [0.3, 0.5], "variance": 1.0},
        noise=0.3,
    ),
    "3d-ard-matern52": dict(
        seed=4,
        n=40,
        m=10,
        dim=3,
        spec={"kind": "matern52", "lengthscale": [0.3, 0.4, 0.5], "variance": 1.0},
        noise=0.3,
    ),
    "2d-ard-se-z-off-data": dict(
        seed=5,
        n=70,
        m=18,
        dim=2,
        spec={"kind": SE, "lengthscale": [0.2, 0.3], "variance": 0.9},
        noise=0.25,
        z_in_x=False,
    ),
}


@pytest.fixture(params=list(PROBLEMS), scope="module")
def problem(request):
    return Problem(**PROBLEMS[request.param])


# --------------------------------------------------------------------------------------------------
# §3.1 five formulations, one mean


def test_jitter_policy():
    """linalg.cholesky(K) is the Cholesky factor of K + 1e-8 · mean(diag K) · I in float64 (1e-4 in float32),
    and of K itself with jitter=0.0: the policy the references of this file apply explicitly."""
    p = Problem(**PROBLEMS["2d-ard-exponential"])
    Kuu = ref.gram(p.spec, p.Z)
    assert linalg.default_jitter(np.float64) == DEFAULT_JITTER
    assert linalg.default_jitter(np.float32) == 1e-4
    assert_close(linalg.cholesky(jnp.asarray(Kuu)), np.linalg.cholesky(ref.jittered(Kuu, DEFAULT_JITTER)))
    assert_close(linalg.cholesky(jnp.asarray(Kuu), jitter=0.0), np.linalg.cholesky(Kuu))
    assert_close(linalg.cholesky(jnp.asarray(Kuu), jitter=1e-3), np.linalg.cholesky(ref.jittered(Kuu, 1e-3)))


def test_reference_is_reasonably_conditioned(problem):
    """Guard on the test design itself: the 1e-8 demand below is fair only for moderate cond(K_uu)."""
    _, Kuu, _ = problem.dense()
    assert np.linalg.cond(Kuu) < 1e4


def test_five_formulations_agree(problem):
    """Nyström KRR = RBF ridge = SoR mean = RBFN MAP = fully Bayesian RBFN mean, each vs the dense SoR mean.

    The reference is the function-space SoR predictive mean Q_*f (Q_ff + σ²I)⁻¹ y; its own dense
    Nyström-KRR and RBF-ridge forms are checked against it first, so the identity holds in the reference.
    """
    kernel, X, y, Z, noise = problem.args
    Kfu, Kuu, Ksu = problem.dense()
    expected, _ = ref.sor_function_space(Kfu, Kuu, Ksu, y, noise)
    assert_close(ref.nystrom_krr_mean(Kfu, Kuu, Ksu, y, noise), expected)
    assert_close(ref.rbf_ridge_mean(Kfu, Kuu, Ksu, y, noise), expected)

    X_test = problem.X_test
    assert_close(conditional.nystrom_krr(kernel, X, y, Z, noise, X_test), expected)
    assert_close(conditional.rbf_ridge(kernel, X, y, Z, noise, X_test), expected)
    assert_close(conditional.sor(kernel, X, y, Z, noise, X_test).mean, expected)
    weights = conditional.rbfn_weights(kernel, X, y, Z, noise)
    # MAP: the mode of the Gaussian weight posterior, mapped through K_*u.
    assert_close(Ksu @ np.asarray(weights.mean), expected)
    # Fully Bayesian: E[K_*u α | y] = K_*u Σ K_uf y / σ², built from the posterior covariance Σ, not the mode.
    assert_close(Ksu @ (np.asarray(weights.cov) @ Kfu.T @ y) / noise**2, expected)


def test_map_maximises_the_weight_posterior(problem):
    """The RBFN MAP is a stationary point of log p(α | y) = −‖y − K_fu α‖²/(2σ²) − αᵀK_uuα/2 + const."""
    kernel, X, y, Z, noise = problem.args
    Kfu, Kuu, _ = problem.dense()
    alpha = np.asarray(conditional.rbfn_weights(kernel, X, y, Z, noise).mean)
    gradient = Kfu.T @ (y - Kfu @ alpha) / noise**2 - Kuu @ alpha
    scale = np.max(np.abs(Kfu.T @ y)) / noise**2
    assert np.max(np.abs(gradient)) <= 1e-8 * scale


# --------------------------------------------------------------------------------------------------
# §3.2 function space = weight space


def test_sor_function_space_equals_weight_space(problem):
    """conditional.sor (weight space) vs the joint-Gaussian conditional of
    docs/mathematics.md#function-space-and-weight-space-agree: mean, full cov."""
    kernel, X, y, Z, noise = problem.args
    Kfu, Kuu, Ksu = problem.dense()
    mean, cov = ref.sor_function_space(Kfu, Kuu, Ksu, y, noise)
    result = conditional.sor(kernel, X, y, Z, noise, problem.X_test)
    assert_close(result.mean, mean)
    assert_close(result.cov, cov)
    assert_close(result.var, np.diag(cov), scale=np.max(np.abs(cov)))
    diag_only = conditional.sor(kernel, X, y, Z, noise, problem.X_test, full_cov=False)
    assert diag_only.cov is None
    assert_close(diag_only.var, np.diag(cov), scale=np.max(np.abs(cov)))


def test_rbfn_weights_posterior_and_its_image(problem):
    """α | y ~ N(Σ K_uf y/σ², Σ) against a dense inverse; K_*u α reproduces the function-space SoR moments."""
    kernel, X, y, Z, noise = problem.args
    Kfu, Kuu, Ksu = problem.dense()
    w_mean, w_cov = ref.weight_posterior(Kfu, Kuu, y, noise)
    weights = conditional.rbfn_weights(kernel, X, y, Z, noise)
    assert_close(weights.mean, w_mean)
    assert_close(weights.cov, w_cov)
    assert_close(weights.var, np.diag(w_cov), scale=np.max(np.abs(w_cov)))
    mean, cov = ref.sor_function_space(Kfu, Kuu, Ksu, y, noise)
    assert_close(Ksu @ np.asarray(weights.mean), mean)
    assert_close(Ksu @ np.asarray(weights.cov) @ Ksu.T, cov)


@pytest.mark.parametrize("name", [n for n in PROBLEMS if "periodic" not in n])  # periodic never decays
def test_sor_variance_collapses_far_from_Z(name):
    """§3.4: far from Z, Q_** → 0, so SoR's latent variance → 0 (the model, not a bug)."""
    problem = Problem(**PROBLEMS[name])
    kernel, X, y, Z, noise = problem.args
    far = np.full((1, X.shape[1]), 50.0)
    result = conditional.sor(kernel, X, y, Z, noise, far)
    Kfu, Kuu, _ = problem.dense()
    _, cov = ref.sor_function_space(Kfu, Kuu, ref.gram(problem.spec, far, Z), y, noise)
    assert float(result.var[0]) < 1e-12 and cov[0, 0] < 1e-12


# --------------------------------------------------------------------------------------------------
# §3.3 Z = X, and log marginal likelihoods against SciPy

Z_EQUALS_X = {  # sizes shared with PROBLEMS (see there)
    "1d-se": dict(seed=11, n=40, dim=1, spec={"kind": SE, "lengthscale": 0.025, "variance": 1.2}, noise=0.2),
    "2d-ard-matern52": dict(
        seed=12,
        n=70,
        dim=2,
        spec={"kind": "matern52", "lengthscale": [0.08, 0.12], "variance": 0.8},
        noise=0.15,
    ),
    "3d-ard-se": dict(
        seed=13, n=40, dim=3, spec={"kind": SE, "lengthscale": [0.2, 0.25, 0.22], "variance": 1.0}, noise=0.3
    ),
}


@pytest.mark.parametrize("case", list(Z_EQUALS_X))
def test_z_equals_x_recovers_exact_gp_except_covariance(case):
    """With Z = X (jitter=0.0, K_XX well conditioned): SoR's log marginal likelihood and predictive mean are
    the exact GP's; its predictive covariance is short of the exact one by exactly K_** − K_*X K_XX⁻¹ K_X*."""
    c = Z_EQUALS_X[case]
    rng = np.random.default_rng(c["seed"])
    candidates = rng.uniform(0.0, 1.0, size=(400, c["dim"]))
    X = candidates[farthest_point_subset(candidates, c["n"])]
    y = np.sin(6 * X.sum(axis=1)) + c["noise"] * rng.standard_normal(c["n"])
    X_test = rng.uniform(-0.1, 1.1, size=(9, c["dim"]))
    spec, noise = c["spec"], c["noise"]
    kernel = library_kernel(spec)
    Kff, Kfs, Kss = ref.gram(spec, X), ref.gram(spec, X, X_test), ref.gram(spec, X_test)
    assert np.linalg.cond(Kff) < 1e4

    exact_lml = ref.logpdf(y, Kff + noise**2 * np.eye(len(y)))
    assert_close(conditional.log_marginal_likelihood(kernel, X, y, noise), exact_lml)
    assert_close(sparse.log_marginal_likelihood(kernel, X, y, X, noise, method="sor", jitter=0.0), exact_lml)

    exact_mean, exact_cov = ref.exact_predict(Kff, Kfs, Kss, y, noise)
    exact = conditional.exact_gp(kernel, X, y, noise, X_test)
    sor = conditional.sor(kernel, X, y, X, noise, X_test, jitter=0.0)
    assert_close(exact.mean, exact_mean)
    assert_close(exact.cov, exact_cov)
    assert_close(sor.mean, exact_mean)
    missing = ref.power_function_sq(Kss, Kfs.T, Kff)
    assert_close(np.asarray(exact.cov) - np.asarray(sor.cov), missing, scale=np.max(np.abs(Kss)))
    assert np.max(np.diag(missing)) > 1e-3 * np.max(np.diag(Kss))  # the gap is real, not a vacuous zero
    exact_diag = conditional.exact_gp(kernel, X, y, noise, X_test, full_cov=False)
    assert_close(exact_diag.var, np.diag(exact_cov), scale=np.max(np.abs(exact_cov)))


def test_log_marginal_likelihood_matches_scipy(problem):
    """log p(y) exact (K_ff + σ²I) and SoR (Q_ff + σ²I, same jitter) = scipy multivariate_normal.logpdf."""
    kernel, X, y, Z, noise = problem.args
    Kfu, Kuu, _ = problem.dense()
    Kff = ref.gram(problem.spec, X)
    assert_close(
        conditional.log_marginal_likelihood(kernel, X, y, noise),
        ref.logpdf(y, Kff + noise**2 * np.eye(len(y))),
    )
    assert_close(
        sparse.log_marginal_likelihood(kernel, X, y, Z, noise, method="sor"),
        ref.logpdf(y, ref.sor_covariance(Kfu, Kuu, noise)),
    )


# --------------------------------------------------------------------------------------------------
# LOO conditionals against brute-force refits


def test_loo_log_density_equals_refits(problem):
    """log p(y_i | y_−i, θ) (exact and SoR) = refit on the other N−1 points, predict y_i (dense, same θ)."""
    kernel, X, y, Z, noise = problem.args
    Kfu, Kuu, _ = problem.dense()
    Kff = ref.gram(problem.spec, X)
    exact = conditional.loo_log_density(kernel, X, y, noise)
    assert exact.shape == y.shape
    assert_close(exact, ref.loo_refit(Kff + noise**2 * np.eye(len(y)), y))
    sor = sparse.loo_log_density(kernel, X, y, Z, noise, method="sor")
    assert_close(sor, ref.loo_refit(ref.sor_covariance(Kfu, Kuu, noise), y))


# --------------------------------------------------------------------------------------------------
# The general conditioning step


@pytest.mark.parametrize(
    ("full_cov", "diag_prior"),
    [(True, False), (False, False), (False, True)],
    ids=["full-cov", "diag-from-S_bb-matrix", "diag-from-S_bb-diagonal"],
)
def test_condition_gaussian(rng, full_cov, diag_prior):
    """b | a of a random joint Gaussian with non-zero means against the dense conditional."""
    n, s = 12, 5
    A = rng.standard_normal((n + s, n + s))
    joint = A @ A.T / (n + s) + 0.5 * np.eye(n + s)
    mean = rng.standard_normal(n + s)
    a = rng.standard_normal(n)
    S_aa, S_ab, S_bb = joint[:n, :n], joint[:n, n:], joint[n:, n:]
    exp_mean, exp_cov = ref.condition(S_aa, S_ab, S_bb, a, mean[:n], mean[n:])
    got = conditional.condition_gaussian(
        S_aa, S_ab, np.diag(S_bb) if diag_prior else S_bb, a, mean[:n], mean[n:], full_cov=full_cov
    )
    assert_close(got.mean, exp_mean)
    assert_close(got.var, np.diag(exp_cov), scale=np.max(np.abs(exp_cov)))
    if full_cov:
        assert_close(got.cov, exp_cov)
    else:
        assert got.cov is None


# --------------------------------------------------------------------------------------------------
# §5 numerics: float32, gradients, -inf inside jit

#: float32 tolerance (stated once): rounding ≈ cond · 6e-8 plus the float32 jitter 1e-4 · mean diag K_uu.
F32_RTOL, F32_ATOL = 2e-3, 1e-4


@pytest.mark.parametrize("case", ["3d-ard-matern52"])
def test_float32_path_runs_and_stays_close(case):
    """float32 data and hyperparameters, default float32 jitter (1e-4): results stay float32 and within
    rtol 2e-3 / atol 1e-4·scale of (a) the float64 dense reference with the same 1e-4 jitter, and (b) the
    float64 library result with its own 1e-8 jitter."""
    p = Problem(**PROBLEMS[case])
    f32 = np.float32
    kernel32 = jax.tree_util.tree_map(lambda leaf: jnp.asarray(leaf, dtype=jnp.float32), p.kernel)
    X, y, Z, X_test = (np.asarray(v, dtype=f32) for v in (p.X, p.y, p.Z, p.X_test))
    noise = p.noise  # a Python float must not promote the float32 data (it is weakly typed)
    result = conditional.sor(kernel32, X, y, Z, noise, X_test)
    lml = sparse.log_marginal_likelihood(kernel32, X, y, Z, noise, method="sor")
    loo = sparse.loo_log_density(kernel32, X, y, Z, noise, method="sor")
    krr = conditional.nystrom_krr(kernel32, X, y, Z, noise, X_test)
    for value in (result.mean, result.cov, lml, loo, krr):
        assert value.dtype == jnp.float32

    Kfu, Kuu, Ksu = p.dense(jitter=linalg.default_jitter(np.float32))
    ref_mean, ref_cov = ref.sor_function_space(Kfu, Kuu, Ksu, p.y, p.noise)
    tol = dict(rtol=F32_RTOL, atol=F32_ATOL)
    assert_close(result.mean, ref_mean, **tol)
    assert_close(krr, ref_mean, **tol)
    assert_close(result.cov, ref_cov, **tol)
    assert_close(lml, ref.logpdf(p.y, ref.sor_covariance(Kfu, Kuu, p.noise)), **tol)
    assert_close(loo, ref.loo_refit(ref.sor_covariance(Kfu, Kuu, p.noise), p.y), **tol)

    f64 = conditional.sor(p.kernel, p.X, p.y, p.Z, p.noise, p.X_test)
    assert_close(result.mean, f64.mean, **tol)
    assert_close(result.cov, f64.cov, **tol)


GRAD_KERNELS = {
    "se-ard": {"kind": SE, "lengthscale": [0.2, 0.3], "variance": 0.9},
    "exponential-ard": {"kind": "exponential", "lengthscale": [0.3, 0.5], "variance": 1.0},
    "matern32": {"kind": "matern32", "lengthscale": 0.25, "variance": 1.1},
}


def _log_params(spec):
    names = [n for n in spec if n != "kind"]
    sizes = [np.size(spec[n]) for n in names]
    theta = np.log(np.concatenate([np.atleast_1d(spec[n]) for n in names]).astype(np.float64))

    def unpack(t, xp):
        parts = np.split(np.arange(len(theta)), np.cumsum(sizes)[:-1])
        return {
            n: (xp.exp(t[i]) if np.ndim(spec[n]) else xp.exp(t[i[0]]))
            for n, i in zip(names, parts, strict=True)
        }

    return theta, unpack


@pytest.mark.parametrize("kind", list(GRAD_KERNELS))
def test_log_marginal_gradients_finite_and_correct_with_z_in_x(kind):
    """jax.grad of the SoR and exact log marginal likelihoods w.r.t. log hyperparameters and log σ, with
    Z ⊂ X (coincident points in K_fu): finite, and equal to a central finite difference of the dense
    reference (rtol 1e-6: the FD error (~1e-9 here), not the library, sets this tolerance)."""
    spec = GRAD_KERNELS[kind]
    p = Problem(seed=21, n=40, m=10, dim=2, spec=spec, noise=0.2)
    X, y, Z = jnp.asarray(p.X), jnp.asarray(p.y), jnp.asarray(p.Z)
    theta_k, unpack = _log_params(spec)
    theta0 = np.append(theta_k, np.log(p.noise))
    cls = LIBRARY_KERNELS[spec["kind"]]

    def lib_sor(t):
        factor = woodbury_sums.sor_factor(cls(**unpack(t, jnp)), X, y, Z, jnp.exp(t[-1]))
        return factor.log_marginal_likelihood()

    def lib_exact(t):
        return conditional.exact_log_marginal(cls(**unpack(t, jnp)), X, y, jnp.exp(t[-1]))

    def ref_sor(t):
        s = {"kind": spec["kind"], **unpack(t, np)}
        Kuu = ref.jittered(ref.gram(s, p.Z), DEFAULT_JITTER)
        return ref.logpdf(p.y, ref.sor_covariance(ref.gram(s, p.X, p.Z), Kuu, np.exp(t[-1])))

    def ref_exact(t):
        s = {"kind": spec["kind"], **unpack(t, np)}
        return ref.logpdf(p.y, ref.gram(s, p.X) + np.exp(2 * t[-1]) * np.eye(len(p.y)))

    grads = jax.jit(lambda t: (jax.grad(lib_sor)(t), jax.grad(lib_exact)(t)))(jnp.asarray(theta0))
    h = 1e-5
    for grad, ref_f in zip(grads, (ref_sor, ref_exact), strict=True):
        grad = np.asarray(grad)
        assert np.all(np.isfinite(grad)), grad
        fd = np.array(
            [(ref_f(theta0 + h * e) - ref_f(theta0 - h * e)) / (2 * h) for e in np.eye(len(theta0))]
        )
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6 * np.max(np.abs(fd)))


@pytest.mark.parametrize("n", [1, 2, 32, 33, 65, 130, 277])
def test_triangular_inverse_against_scipy(n):
    """linalg.triangular_inverse (2×2 blocks down to order 32) against SciPy's triangular solve against I,
    for Cholesky factors of condition up to 10⁸ (L's up to 10⁴), and for a batch of two under vmap and as a
    leading axis: zero above the diagonal, and within 1e-13 · cond(L) of SciPy's inverse relative to its
    largest entry."""
    import scipy.linalg

    rng = np.random.default_rng(n)
    factors = []
    for log_cond in (0, 8):
        Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
        factors.append(np.linalg.cholesky((Q * np.logspace(0, log_cond, n)) @ Q.T))
    got_batched = np.asarray(linalg.triangular_inverse(jnp.asarray(np.stack(factors))))
    got_mapped = np.asarray(jax.vmap(linalg.triangular_inverse)(jnp.asarray(np.stack(factors))))
    for i, L in enumerate(factors):
        expected = scipy.linalg.solve_triangular(L, np.eye(n), lower=True)
        scale = np.linalg.cond(L) * np.max(np.abs(expected))
        for got in (np.asarray(linalg.triangular_inverse(jnp.asarray(L))), got_batched[i], got_mapped[i]):
            assert np.all(np.triu(got, 1) == 0.0)
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-13 * scale)


def test_dense_gaussian_gradient_is_the_closed_form_and_maps_over_a_batch():
    """linalg.dense_gaussian_logpdf's written gradient against NumPy's: ∂/∂C = ½(ααᵀ − C⁻¹) and ∂/∂r = −α
    with α = C⁻¹r from numpy.linalg.inv, for three covariances of condition 10 to 10⁶, one by one and
    under vmap; its value against SciPy's multivariate normal."""
    rng = np.random.default_rng(5)
    n = 25
    Cs, rs = [], []
    for log_cond in (1, 3, 6):
        Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
        Cs.append((Q * np.logspace(0, log_cond, n)) @ Q.T)
        rs.append(rng.normal(size=n))
    grad = jax.jit(jax.grad(linalg.dense_gaussian_logpdf, argnums=(0, 1)))
    batched = jax.jit(jax.vmap(jax.grad(linalg.dense_gaussian_logpdf, argnums=(0, 1))))(
        jnp.asarray(np.stack(Cs)), jnp.asarray(np.stack(rs))
    )
    for i, (C, r) in enumerate(zip(Cs, rs, strict=True)):
        C_inv = np.linalg.inv(C)
        alpha = C_inv @ r
        expected = (0.5 * (np.outer(alpha, alpha) - C_inv), -alpha)
        for got in (grad(jnp.asarray(C), jnp.asarray(r)), (batched[0][i], batched[1][i])):
            for g, e in zip(got, expected, strict=True):
                np.testing.assert_allclose(np.asarray(g), e, rtol=1e-6, atol=1e-9 * np.max(np.abs(e)))
        assert_close(linalg.dense_gaussian_logpdf(jnp.asarray(C), jnp.asarray(r)), ref.logpdf(r, C))


def test_failed_factorisation_in_jit_gives_neg_inf_not_nan():
    """Inside jit, a singular K_uu (lengthscale 1e8 makes every entry 1.0 in float64; jitter=0.0) or a
    non-PD K_ff + σ²I (a negative variance reaching a traced kernel) makes the log density guarded by
    linalg.finite_or_neg_inf exactly -inf, never NaN; a well-posed one is unchanged (checked vs SciPy)."""
    p = Problem(**PROBLEMS["1d-scalar-se"])
    X, y, Z = jnp.asarray(p.X), jnp.asarray(p.y), jnp.asarray(p.Z)

    def sor_lml(lengthscale):
        kernel = K.SquaredExponential(lengthscale, 1.0)
        return woodbury_sums.sor_factor(kernel, X, y, Z, 0.3, jitter=0.0).log_marginal_likelihood()

    sor_logp = jax.jit(lambda ell: linalg.finite_or_neg_inf(sor_lml(ell)))
    exact_logp = jax.jit(
        lambda v: linalg.finite_or_neg_inf(
            conditional.exact_log_marginal(K.SquaredExponential(0.1, v), X, y, 0.3)
        )
    )

    assert not np.isfinite(jax.jit(sor_lml)(1e8))  # the factorisation really failed
    assert float(sor_logp(1e8)) == -np.inf
    assert float(exact_logp(-1.0)) == -np.inf
    spec = {"kind": SE, "lengthscale": 0.12, "variance": 1.0}
    Kfu, Kuu = ref.gram(spec, p.X, p.Z), ref.gram(spec, p.Z)
    assert_close(sor_logp(0.12), ref.logpdf(p.y, ref.sor_covariance(Kfu, Kuu, 0.3)))
    assert_close(
        exact_logp(1.0), ref.logpdf(p.y, ref.gram({**spec, "lengthscale": 0.1}, p.X) + 0.09 * np.eye(40))
    )
