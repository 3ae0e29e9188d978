"""Adversarial, property-based tests of the public entry points.

Property (every test below): a public entry point either returns finite values of the input dtype — equal
to the dense NumPy reference (:mod:`tests.reference`) when the problem is well conditioned — or raises
``ValueError`` whose message starts with what it is about, as ``"name: …"``: one of the arguments that entry
point takes, or, for ``linalg.FactorisationError`` (a subclass), the function; a NaN/inf never comes back
silently.

Conditioning criterion for the reference comparison (float64 only): every matrix the computation factorises
has a 2-norm condition number ≤ ``KAPPA_MAX`` = 1e7 — the exact GP's C = K_ff + σ²I; for SoR the jittered
K_uu, the weight precision K_uu + K_uf K_fu/σ² and the marginal covariance Q_ff + σ²I; for ``nystrom_krr``
and SoR's LOO (whose Woodbury values apply (Q_ff + σ²I)⁻¹ as y/σ² − …) also 1 + λ_max(Q_ff)/σ² (SoR's log
density no longer: it is taken from residuals; and SoR's LOO at points of leverage near 1 comes from the
leave-block-out pass, checked against 60-digit references in test_small_noise.py). Backward-stable
Cholesky solves then lose at most ~κ·ε ≈ 2e-9 relative accuracy, so the comparison uses rtol = 1e-5 with an
absolute floor of 1e-5 × the natural scale (max|y| for means, s² for variances, N for log densities).
Outside that region only finiteness-or-documented-error is checked.

Hypothesis runs from fixed seeds (shifted by ``BAYES_RBFN_TEST_SEED``, tests/stochastic.py) with bounded
example counts (:data:`MAX_EXAMPLES`), its problems in a fixed set of shapes (:data:`SHAPES`).
"""

from __future__ import annotations

import re
import warnings

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference as ref
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stochastic import record, seed

from bayes_rbfn.gp import conditional, linalg, sparse
from bayes_rbfn.gp.kernels import SquaredExponential

KAPPA_MAX = 1e7
RTOL = 1e-5
JIT64 = 1e-8  # the library's relative jitter policy for float64 (linalg.JITTER)

#: Examples per property; a seed offset (BAYES_RBFN_TEST_SEED) draws 10 others.
MAX_EXAMPLES = 10

#: The shapes the problems take: (N, D, repeated inputs, M). The entry points run eagerly, so every new
#: shape compiles all nine anew (3–5 s an example on 2 cores, 26 Nov 2026; 1.2 s for a shape seen before),
#: and 10 examples of free shapes cost ~2 minutes of the suite. The scales, lengthscale, noise and data vary
#: freely within these shapes, which keep the edge cases: one point with one inducing input, Z = X, repeated
#: inputs (half the points equal the first) in 2-D, and fewer inducing inputs than points.
SHAPES = ((1, 1, False, 1), (8, 1, False, 8), (8, 2, True, 4), (5, 2, False, 2))

#: Examples come from a fixed Hypothesis seed (shifted by BAYES_RBFN_TEST_SEED), never from its database.
SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


#: What :func:`_call_all` calls: result key → (entry point, the arguments it passes by keyword, of the
#: problem's kernel, X, y, Z, noise, X_test). Calling by keyword keeps the names those of the signatures.
CALLS = {
    "exact_gp": (conditional.exact_gp, ("kernel", "X", "y", "noise", "X_test")),
    "sor": (conditional.sor, ("kernel", "X", "y", "Z", "noise", "X_test")),
    "rbfn_weights": (conditional.rbfn_weights, ("kernel", "X", "y", "Z", "noise")),
    "nystrom_krr": (conditional.nystrom_krr, ("kernel", "X", "y", "Z", "noise", "X_test")),
    "rbf_ridge": (conditional.rbf_ridge, ("kernel", "X", "y", "Z", "noise", "X_test")),
    "lml_exact": (conditional.log_marginal_likelihood, ("kernel", "X", "y", "noise")),
    "lml_sor": (sparse.log_marginal_likelihood, ("kernel", "X", "y", "Z", "noise")),
    "loo_exact": (conditional.loo_log_density, ("kernel", "X", "y", "noise")),
    "loo_sor": (sparse.loo_log_density, ("kernel", "X", "y", "Z", "noise")),
}


def _call_all(kernel, X, y, Z, noise, Xs):
    """Every public entry point on one problem: {name: result or the ValueError raised}."""
    values = {"kernel": kernel, "X": X, "y": y, "Z": Z, "noise": noise, "X_test": Xs}
    out = {}
    for name, (function, arguments) in CALLS.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out[name] = function(**{a: values[a] for a in arguments})
        except ValueError as err:
            out[name] = err
    return out


def _named_in(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What a ValueError of the entry point behind ``_call_all``'s key ``name`` may name: the arguments it
    is passed that a problem can make invalid (the kernel is built, and its hyperparameters checked, by the
    test before the call), and the function's name (what a FactorisationError names)."""
    function, arguments = CALLS[name]
    return tuple(a for a in arguments if a != "kernel"), (function.__name__,)


def _check_documented_error(name: str, err: ValueError) -> None:
    """The message of ``err`` (raised by ``_call_all``'s entry ``name``) starts with its subject and a
    colon, as the package writes them: one of the entry point's arguments for a plain ValueError, the
    function's name for a FactorisationError."""
    arguments, function = _named_in(name)
    allowed = function if isinstance(err, linalg.FactorisationError) else arguments
    msg = str(err)
    subject = re.match(r"(\w+)\b:", msg)
    assert subject is not None and subject.group(1) in allowed, (
        f"{name} raised {type(err).__name__} naming none of {allowed}: {msg!r}"
    )


def _assert_finite_or_documented(results, dtype):
    for name, res in results.items():
        if isinstance(res, ValueError):
            _check_documented_error(name, res)
            continue
        for leaf in jax.tree_util.tree_leaves(res):
            arr = np.asarray(leaf)
            assert np.all(np.isfinite(arr)), f"{name} returned non-finite values silently: {arr}"
            assert arr.dtype == np.dtype(dtype), f"{name}: dtype {arr.dtype}, input dtype {np.dtype(dtype)}"


def test_the_error_check_wants_the_argument_named():
    """The check of an error message: the old one (any argument or entry point followed by ':' or ' ',
    anywhere) took "only try every value" for a message naming y; this one wants the entry point's own
    argument as the message's subject, or its function for a FactorisationError."""
    names = ("X", "y", "Z", "noise", "X_test", "kernel", "lengthscale", "variance", "jitter")
    names += ("exact_gp", "sor", "rbfn_weights", "nystrom_krr", "rbf_ridge", "log_marginal_likelihood")
    names += ("loo_log_density",)
    loose = lambda msg: any(f"{a}:" in msg or f"{a} " in msg for a in names)  # noqa: E731
    vague = "only try every value"
    assert loose(vague)
    accepted = [
        ("exact_gp", ValueError("y: has 3 values but X has 2 rows")),
        ("exact_gp", ValueError("X_test: has 2 input dimension(s) but X has 1")),
        ("sor", ValueError("Z: has 1 duplicate inducing point(s); inducing inputs must be distinct")),
        ("lml_sor", ValueError("noise: must be a finite positive number, got 0.0")),
        ("loo_exact", linalg.FactorisationError("loo_log_density: a kernel matrix could not be factorised")),
    ]
    rejected = [
        ("exact_gp", ValueError(vague)),
        ("rbf_ridge", ValueError("every value of y is fine, only try again")),  # y named, not the subject
        ("exact_gp", ValueError("Z: has 1 duplicate inducing point(s)")),  # exact_gp takes no Z
        ("rbfn_weights", ValueError("X_test: has 2 input dimension(s) but X has 1")),  # nor X_test here
        ("lml_exact", ValueError("kernel: expected a Kernel")),  # the test builds the kernel
        ("sor", linalg.FactorisationError("exact_gp: a kernel matrix could not be factorised")),
        ("sor", linalg.FactorisationError("Z: a kernel matrix could not be factorised")),
        ("sor", ValueError("sor: not a FactorisationError")),
    ]
    for name, err in accepted:
        _check_documented_error(name, err)
    for name, err in rejected:
        with pytest.raises(AssertionError, match="naming none of"):
            _check_documented_error(name, err)
    assert loose(str(rejected[1][1])) and loose(str(rejected[2][1]))


def _cond(A):
    return np.linalg.cond(A) if np.all(np.isfinite(A)) else np.inf


def _compare_with_reference(results, spec, X, y, Z, noise, Xs):
    """Dense references on the problem, compared only where every factorised matrix has κ ≤ KAPPA_MAX."""
    Kff, Kfs, Kss = ref.gram(spec, X), ref.gram(spec, X, Xs), ref.gram(spec, Xs)
    s2, ymax = spec["variance"], max(float(np.max(np.abs(y))), 1e-300)
    n = len(y)
    C = Kff + noise**2 * np.eye(n)
    checked = 0
    if _cond(C) <= KAPPA_MAX:
        m, cov = ref.exact_predict(Kff, Kfs, Kss, y, noise)
        np.testing.assert_allclose(results["exact_gp"].mean, m, rtol=RTOL, atol=RTOL * ymax)
        np.testing.assert_allclose(results["exact_gp"].var, np.diag(cov), rtol=RTOL, atol=RTOL * s2)
        np.testing.assert_allclose(results["lml_exact"], ref.logpdf(y, C), rtol=RTOL, atol=RTOL * n)
        np.testing.assert_allclose(results["loo_exact"], ref.loo_refit(C, y), rtol=RTOL, atol=RTOL * n)
        checked += 1
    Kuu = ref.jittered(ref.gram(spec, Z), JIT64)
    Kfu, Ksu = ref.gram(spec, X, Z), ref.gram(spec, Xs, Z)
    P = Kuu + Kfu.T @ Kfu / noise**2
    Csor = ref.sor_covariance(Kfu, Kuu, noise)
    if max(_cond(Kuu), _cond(P), _cond(Csor)) <= KAPPA_MAX:
        m, cov = ref.sor_function_space(Kfu, Kuu, Ksu, y, noise)
        np.testing.assert_allclose(results["sor"].mean, m, rtol=RTOL, atol=RTOL * ymax)
        np.testing.assert_allclose(results["sor"].var, np.diag(cov), rtol=RTOL, atol=RTOL * s2)
        wm, wc = ref.weight_posterior(Kfu, Kuu, y, noise)
        wscale = max(float(np.max(np.abs(wm))), float(np.max(np.abs(wc))) ** 0.5, 1e-300)
        np.testing.assert_allclose(results["rbfn_weights"].mean, wm, rtol=RTOL, atol=RTOL * wscale)
        np.testing.assert_allclose(
            results["rbfn_weights"].cov, wc, rtol=RTOL, atol=RTOL * float(np.max(np.abs(wc)))
        )
        # lml_sor takes yᵀ(Q_ff + σ²I)⁻¹y from the residuals of the weight mean (no cancellation;
        # test_woodbury_small_noise_* and tests/gp/test_small_noise.py), so these conditions suffice for it.
        np.testing.assert_allclose(results["lml_sor"], ref.logpdf(y, Csor), rtol=RTOL, atol=RTOL * n)
        # nystrom_krr and loo_sor still apply (Q_ff + σ²I)⁻¹ through Woodbury: diag(C⁻¹) = 1/σ² − ‖V_:i‖² and
        # the LOO residual's 1 − h_i cancel with effective condition number 1 + λ_max(Q_ff)/σ², which exceeds
        # κ(Q_ff + σ²I) when Q_ff has full rank (N ≤ M; block_loo.sor_loo documents the limit).
        if 1.0 + np.linalg.eigvalsh(Csor - noise**2 * np.eye(n)).max() / noise**2 <= KAPPA_MAX:
            np.testing.assert_allclose(
                results["nystrom_krr"],
                ref.nystrom_krr_mean(Kfu, Kuu, Ksu, y, noise),
                rtol=RTOL,
                atol=RTOL * ymax,
            )
            np.testing.assert_allclose(results["loo_sor"], ref.loo_refit(Csor, y), rtol=RTOL, atol=RTOL * n)
        checked += 1
    # rbf_ridge factorises K_uf K_fu + σ² K_uu (a σ²-rescaling of P): same criterion.
    if _cond(Kuu) <= KAPPA_MAX and _cond(Kfu.T @ Kfu + noise**2 * Kuu) <= KAPPA_MAX:
        np.testing.assert_allclose(
            results["rbf_ridge"], ref.rbf_ridge_mean(Kfu, Kuu, Ksu, y, noise), rtol=RTOL, atol=RTOL * ymax
        )
    return checked


@st.composite
def problems(draw, dtypes=(np.float32, np.float64)):
    dtype = draw(st.sampled_from(dtypes))
    n, D, repeats, M = draw(st.sampled_from(SHAPES))
    seed = draw(st.integers(0, 2**16))
    x_scale = 10.0 ** draw(st.floats(-8, 8))
    y_scale = 10.0 ** draw(st.floats(-8, 8))
    ls_frac = 10.0 ** draw(st.floats(-6, 6))
    noise = y_scale * 10.0 ** draw(st.floats(-10, 0))
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, D))
    if repeats:
        X[n // 2 :] = X[0]  # repeated inputs
    X = x_scale * X
    Z = np.unique(X, axis=0)[:M]
    y = y_scale * (np.sin(3.0 * X[:, 0] / x_scale) + 0.1 * rng.standard_normal(n))
    Xs = x_scale * rng.uniform(size=(3, D))
    lengthscale = ls_frac * x_scale  # data range ≤ x_scale
    variance = y_scale**2
    return dtype, X, y, Z, Xs, lengthscale, variance, noise


@pytest.mark.stochastic
@SETTINGS
@hypothesis.seed(seed(0))
@given(problems())
def test_extreme_scales_finite_or_documented_error(problem):
    """Scales of X and y over 1e-8…1e8, ℓ over 1e-6…1e6 of the data range, σ/scale(y) down to 1e-10,
    repeated inputs, N = 1, M = 1, float32 and float64: finite (dtype-preserving) or a documented error."""
    dtype, X, y, Z, Xs, ls, var, noise = problem
    kernel = SquaredExponential(lengthscale=ls, variance=var)
    cast = lambda a: np.asarray(a, dtype=dtype)  # noqa: E731
    results = _call_all(kernel, cast(X), cast(y), cast(Z), noise, cast(Xs))
    _assert_finite_or_documented(results, dtype)


@pytest.mark.stochastic
@settings(
    max_examples=MAX_EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@hypothesis.seed(seed(1))
@given(problems(dtypes=(np.float64,)))
def test_matches_dense_reference_when_well_conditioned(problem):
    """float64: equal to the dense NumPy reference to rtol 1e-5 wherever κ ≤ 1e7 (module docstring)."""
    dtype, X, y, Z, Xs, ls, var, noise = problem
    kernel = SquaredExponential(lengthscale=ls, variance=var)
    results = _call_all(kernel, X, y, Z, noise, Xs)
    _assert_finite_or_documented(results, dtype)
    spec = {"kind": "se", "lengthscale": ls, "variance": var}
    Kff = ref.gram(spec, X)
    if _cond(Kff + noise**2 * np.eye(len(y))) <= KAPPA_MAX:
        for key in ("exact_gp", "lml_exact", "loo_exact"):
            assert not isinstance(results[key], ValueError), (key, results[key])
    _compare_with_reference(results, spec, X, y, Z, noise, Xs)


@pytest.mark.stochastic
@SETTINGS
@hypothesis.seed(seed(2))
@given(
    dtype=st.sampled_from([np.float32, np.float64]),
    n=st.integers(1, 6),
    M=st.integers(1, 6),
    ls=st.floats(0.05, 5.0),
)
def test_shapes_and_dtypes(dtype, n, M, ls):
    """Output shapes (S,), (S, S), (M,), (M, M), (N,), () and dtype = input dtype; M > distinct inputs is a
    ValueError naming Z."""
    rng = np.random.default_rng(n * 10 + M)
    X = rng.uniform(size=(n, 1)).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    Xs = np.linspace(0, 1, 4).astype(dtype)
    Z = X[:M]
    kernel = SquaredExponential(lengthscale=ls, variance=1.0)
    if M > n:
        with pytest.raises(ValueError, match=r"^Z:"):
            conditional.sor(kernel, X, y, Z if M <= n else np.linspace(0, 1, M).astype(dtype), 0.1, Xs)
        return
    r = _call_all(kernel, X, y, Z, 0.1, Xs)
    _assert_finite_or_documented(r, dtype)
    for key in ("exact_gp", "sor"):
        if not isinstance(r[key], ValueError):
            assert r[key].mean.shape == (4,) and r[key].var.shape == (4,) and r[key].cov.shape == (4, 4)
    if not isinstance(r["rbfn_weights"], ValueError):
        assert r["rbfn_weights"].mean.shape == (M,) and r["rbfn_weights"].cov.shape == (M, M)
    for key in ("loo_exact", "loo_sor"):
        if not isinstance(r[key], ValueError):
            assert r[key].shape == (n,)
    for key in ("lml_exact", "lml_sor"):
        if not isinstance(r[key], ValueError):
            assert np.shape(r[key]) == ()


# ------------------------------------------------------------------------------------------------------
# Deterministic edge cases


def test_single_point_single_inducing_matches_closed_form():
    """N = 1, M = 1 (Z = X): SoR = exact GP; closed forms m* = k(x*,x) y/(s²+σ²), log p = log N(y|0,s²+σ²)."""
    X, y, Xs = np.array([[0.3]]), np.array([1.7]), np.array([[0.3], [0.9]])
    k = SquaredExponential(lengthscale=0.5, variance=2.0)
    noise = 0.4
    ks = 2.0 * np.exp(-0.5 * ((Xs[:, 0] - 0.3) / 0.5) ** 2)
    c = 2.0 + noise**2
    lml = -0.5 * (y[0] ** 2 / c + np.log(2 * np.pi * c))
    r = _call_all(k, X, y, X, noise, Xs)
    _assert_finite_or_documented(r, np.float64)
    np.testing.assert_allclose(r["exact_gp"].mean, ks * y[0] / c, rtol=1e-10)
    np.testing.assert_allclose(r["exact_gp"].var, 2.0 - ks**2 / c, rtol=1e-10)
    np.testing.assert_allclose(r["sor"].mean, ks * y[0] / c, rtol=1e-6)
    np.testing.assert_allclose(r["lml_exact"], lml, rtol=1e-10)
    np.testing.assert_allclose(r["lml_sor"], lml, rtol=1e-6)
    np.testing.assert_allclose(r["loo_exact"], [lml], rtol=1e-10)
    np.testing.assert_allclose(r["loo_sor"], [lml], rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(noise=0.0), "noise"),
        (dict(noise=-1.0), "noise"),
        (dict(noise=np.nan), "noise"),
        (dict(X=np.array([[0.0], [np.nan]])), "X"),
        (dict(y=np.array([0.0, np.inf])), "y"),
        (dict(y=np.zeros(3)), "y"),
        (dict(Z=np.array([[0.0], [0.0]])), "Z"),
        (dict(Z=np.array([[0.0], [0.5], [1.0]])), "Z"),
        (dict(X_test=np.zeros((2, 2))), "X_test"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, match):
    """Invalid inputs raise ValueError naming the argument, for every entry point that takes it."""
    args = dict(
        X=np.array([[0.0], [1.0]]),
        y=np.array([0.5, -0.5]),
        Z=np.array([[0.0]]),
        noise=0.1,
        X_test=np.array([[0.5]]),
    )
    args.update(kwargs)
    k = SquaredExponential(lengthscale=1.0, variance=1.0)
    calls = [
        lambda a: conditional.exact_gp(k, a["X"], a["y"], a["noise"], a["X_test"]),
        lambda a: conditional.sor(k, a["X"], a["y"], a["Z"], a["noise"], a["X_test"]),
        lambda a: conditional.nystrom_krr(k, a["X"], a["y"], a["Z"], a["noise"], a["X_test"]),
        lambda a: conditional.rbf_ridge(k, a["X"], a["y"], a["Z"], a["noise"], a["X_test"]),
        lambda a: conditional.rbfn_weights(k, a["X"], a["y"], a["Z"], a["noise"]),
        lambda a: sparse.log_marginal_likelihood(k, a["X"], a["y"], a["Z"], a["noise"], method="sor"),
        lambda a: sparse.loo_log_density(k, a["X"], a["y"], a["Z"], a["noise"], method="sor"),
    ]
    uses = {"Z": range(1, 7), "X_test": range(0, 4)}
    for i, call in enumerate(calls):
        if match in uses and i not in uses[match]:
            continue
        with pytest.raises(ValueError, match=rf"^{match}:"):
            call(args)


def test_nystrom_krr_small_noise_equals_sor_mean():
    """Nyström KRR and SoR have the same mean (docs/mathematics.md#five-formulations-one-mean). With σ =
    1e-7, s² = 1, the mean itself is well
    defined (SoR's weight-space path gets it to ~1e-12); nystrom_krr evaluated right to left as written
    returned 0.546 where SoR gives −0.003, hence its push-through evaluation."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(20, 1))
    y = np.sin(3 * X[:, 0])
    Xs = np.linspace(0, 1, 3)
    k = SquaredExponential(lengthscale=0.3, variance=1.0)
    m_sor = conditional.sor(k, X, y, X[:5], 1e-7, Xs).mean
    m_krr = conditional.nystrom_krr(k, X, y, X[:5], 1e-7, Xs)
    np.testing.assert_allclose(m_krr, m_sor, rtol=1e-5, atol=1e-5)


def test_woodbury_small_noise_sor_log_marginal_single_point():
    """N = M = 1, Z = X, s² = 1, σ = 1e-6 and 1e-8: C = 1/(1+1e-8) + σ² is a well-conditioned 1×1 'matrix'.
    The Woodbury form yᵀy/σ² − ‖c‖² missed log N(y | 0, C) by 8e-5 relative at σ = 1e-6 and 0.7 at 1e-8;
    from the residuals, yᵀC⁻¹y = r²/σ² + ‖L_uuᵀ m‖², it is within 3e-15.
    Neighbours (N > 1, M < N, four kernels, gradients, LOO): tests/gp/test_small_noise.py."""
    X, y = np.array([[0.63696169]]), np.array([0.92951458])
    k = SquaredExponential(lengthscale=1.0, variance=1.0)
    for noise in (1e-6, 1e-8):
        c = 1.0 / (1.0 + JIT64) + noise**2
        expected = -0.5 * (y[0] ** 2 / c + np.log(2 * np.pi * c))
        np.testing.assert_allclose(
            sparse.log_marginal_likelihood(k, X, y, X, noise, method="sor"), expected, rtol=1e-8
        )


def test_failed_factorisation_raises_factorisation_error():
    """Repeated inputs, ℓ = 1e6 × range and σ = 1e-10 make K_ff + σ²I singular in float64: the exact GP
    raises FactorisationError (a ValueError) naming the function, never returns NaN."""
    X = np.array([[0.0], [0.0], [1.0]])
    y = np.array([1.0, -1.0, 0.5])
    k = SquaredExponential(lengthscale=1e6, variance=1.0)
    with pytest.raises(linalg.FactorisationError, match="exact_gp"):
        conditional.exact_gp(k, X, y, 1e-10, X)


# ------------------------------------------------------------------------------------------------------
# NUTS started where the Cholesky fails


#: Failures by construction: two inputs coincide, the signal variance is pinned at 1 (so the pair's 2×2
#: block of K_ff is exactly [[1, 1], [1, 1]]), and below σ ≈ 1.05e-8 σ² vanishes against 1 in float64: the
#: second Cholesky pivot is then 1 − 1·1 = 0 exactly, on any IEEE machine, and the factorisation fails.
PAIRED_X = np.array([0.0, 0.0, 0.3, 0.3, 0.6, 0.6, 0.9, 0.9])
PAIRED_Y = np.sin(3.0 * PAIRED_X)  # equal targets at coincident inputs


def test_log_density_is_minus_inf_exactly_below_the_wall():
    """The construction of the NUTS test below: -inf (not NaN) for σ below the wall, finite above it."""
    from bayes_rbfn.models import ModelConfig
    from bayes_rbfn.models import exact as exact_model
    from bayes_rbfn.models.families import get_family

    config = ModelConfig(family=get_family("se"), priors={})
    data = {"X": jnp.asarray(PAIRED_X[:, None]), "y": jnp.asarray(PAIRED_Y), "y_offset": jnp.asarray(0.0)}
    for noise, finite in ((1e-9, False), (1e-12, False), (1e-6, True), (0.1, True)):
        params = {"lengthscale": jnp.asarray(0.5), "variance": jnp.asarray(1.0), "noise": jnp.asarray(noise)}
        value = float(exact_model.log_density(params, data, config))
        assert np.isfinite(value) == finite and not np.isnan(value), (noise, value)


@pytest.mark.stochastic
def test_nuts_keeps_running_through_failed_factorisations():
    """fit("exact") on a posterior that piles against a wall of failed factorisations, by construction.

    Each coincident pair with equal targets multiplies the likelihood by ∝ 1/σ as σ → 0 (the pair's
    difference has variance 2σ²), so with 4 pairs and log σ ~ N(log 1e-6, 3²) the posterior of log σ would
    peak at log 1e-6 − 4·3² ≈ −50; but below log σ ≈ −18.4 every factorisation fails (``PAIRED_X``). The
    posterior's mass therefore sits against that wall (its density falls off ∝ exp(−3.5 · distance) above
    it), and leapfrog steps cross it on a large share of the transitions. NUTS must keep running: finite
    draws (no NaN), a finite log density at every kept draw, σ above the wall, a chain that moves, and the
    rejected steps reported as divergences."""
    import numpyro.distributions as dist

    from bayes_rbfn.infer.fitting import fit

    priors = {"lengthscale": dist.LogNormal(np.log(0.5), 0.5), "noise": dist.LogNormal(np.log(1e-6), 3.0)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = fit(
            "exact",
            PAIRED_X,
            PAIRED_Y,
            kernel="se",
            priors=priors,
            fixed={"variance": 1.0},
            mean=0.0,
            chains=1,
            draws=100,
            warmup=100,
            seed=seed(1),
            progress=False,
            check_diagnostics=False,
        )
    for name in ("lengthscale", "noise"):
        assert np.all(np.isfinite(idata.posterior[name].values)), name
    noise = idata.posterior["noise"].values.ravel()
    assert np.all(noise > 1e-8), noise.min()
    assert len(np.unique(noise)) > 10, "the chain does not move"
    diverging = idata.sample_stats["diverging"].values
    record("wall_divergences", count=int(diverging.sum()), transitions=diverging.size)
    assert int(diverging.sum()) > 0
    if "lp" in idata.sample_stats:
        assert np.all(np.isfinite(idata.sample_stats["lp"].values))
