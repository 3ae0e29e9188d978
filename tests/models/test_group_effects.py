"""Group effects integrated out of ``SparseGP`` (``groups=``, ``group_scale=``; ``gp.effects``).

y = f + H β + ε with β_g ~ N(0, τ²): every check is against the dense covariance
C = K_fu K_uu⁻¹ K_uf + D + τ² H Hᵀ written in NumPy with the one-hot H spelled out, by SciPy and dense
solves (``reference``):

* the log density, for a scalar and a per-point noise, SoR and DTC, a prior mean, and an additive kernel;
* the same marginal with the effects as one-hot Woodbury columns of an ``Additive`` kernel (the other
  route the package offers);
* its gradient against central differences of the dense log density;
* the LOO conditionals against refits on N − 1 points, and the LOO-PIT and residuals;
* f*'s predictive and the effects' posterior β | y against dense Gaussian conditioning;
* prior draws' covariance against C, and posterior replicates' mean and covariance against the dense
  conditional, within 4 Monte-Carlo standard errors;
* bad arguments name themselves.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
import reference as ref
import scipy.stats
from conftest import assert_close

import bayes_rbfn as br
from bayes_rbfn.gp import kernels as K

SE = {"kind": "se", "lengthscale": 0.9, "variance": 1.3}
NOISE = 0.4
TAU = 0.7
N, M, G = 40, 7, 5


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0.0, 5.0, N))
    codes = rng.integers(0, G, N)
    codes[:G] = np.arange(G)  # every group has a point
    y = np.sin(X) + 0.8 * rng.normal(size=G)[codes] + NOISE * rng.normal(size=N)
    return X, codes, y, np.linspace(0.0, 5.0, M)


def _kernel():
    return K.SquaredExponential(SE["lengthscale"], SE["variance"])


def _dense(X, codes, Z, d, tau=TAU):
    """(C, Q_ff, H): the marginal covariance, its Nyström part and the one-hot matrix."""
    Kuu = ref.gram(SE, Z)
    Kuu = Kuu + 1e-8 * np.mean(np.diag(Kuu)) * np.eye(len(Z))  # the package's jitter policy
    Q = ref.nystrom(ref.gram(SE, X, Z), Kuu, ref.gram(SE, X, Z))
    H = (codes[:, None] == np.arange(G)[None, :]).astype(float)
    return Q + np.diag(np.broadcast_to(d, (len(X),))) + tau**2 * H @ H.T, Q, H


NOISES = {
    "scalar": lambda rng: NOISE,
    "per-point": lambda rng: rng.uniform(0.2, 0.6, N),
}


@pytest.mark.parametrize("approx", ["sor", "dtc"])
@pytest.mark.parametrize("noise", list(NOISES), ids=list(NOISES))
def test_log_density_matches_dense_gaussian(approx, noise):
    X, codes, y, Z = _data()
    sigma = NOISES[noise](np.random.default_rng(1))
    d = br.SparseGP(_kernel(), X, Z, sigma, approx=approx, mean=0.3, groups=codes, group_scale=TAU)
    C, _, _ = _dense(X, codes, Z, np.square(sigma))
    assert d.num_groups == G
    assert_close(d.log_prob(jnp.asarray(y)), ref.logpdf(y - 0.3, C), rtol=1e-9)


def test_traced_codes_with_num_groups_give_the_dense_log_density():
    """Codes traced under ``jit`` (given ``num_groups``) and extra groups without points (which keep their
    prior and leave the marginal unchanged) give the dense log density."""
    X, codes, y, Z = _data()
    C, _, _ = _dense(X, codes, Z, NOISE**2)
    expected = scipy.stats.multivariate_normal(np.zeros(N), C).logpdf(y)

    def log_prob(c, num_groups):
        return br.SparseGP(_kernel(), X, Z, NOISE, groups=c, group_scale=TAU, num_groups=num_groups).log_prob(
            y
        )

    assert_close(jax.jit(log_prob, static_argnums=1)(codes, G), expected)
    assert_close(log_prob(codes, G + 3), expected)


def test_effects_equal_one_hot_woodbury_columns_of_an_additive_kernel():
    """The Schur-complement route and the (M + G)-column Woodbury pass give one density."""
    X, codes, y, Z = _data()
    inputs = np.c_[X, codes.astype(float)]
    kernel, Z_all = K.additive(
        {
            "f": (_kernel().on_dims(0), Z),
            "group": (K.Categorical(TAU**2).on_dims(1), np.arange(float(G))),
        },
        2,
    )
    columns = br.SparseGP(kernel, inputs, Z_all, NOISE, jitter=0.0).log_prob(jnp.asarray(y))
    f_only, Z_f = K.additive({"f": (_kernel().on_dims(0), Z)}, 2)
    effects = br.SparseGP(f_only, inputs, Z_f, NOISE, jitter=0.0, groups=codes, group_scale=TAU)
    assert_close(effects.log_prob(jnp.asarray(y)), columns, rtol=1e-9)


@pytest.mark.parametrize("wrt", ["group_scale", "noise", "lengthscale"])
def test_gradient_matches_dense_central_differences(wrt):
    X, codes, y, Z = _data()
    theta = {"group_scale": TAU, "noise": NOISE, "lengthscale": SE["lengthscale"]}

    def logp(value):
        p = {**theta, wrt: value}
        kernel = K.SquaredExponential(p["lengthscale"], SE["variance"])
        d = br.SparseGP(kernel, X, Z, p["noise"], groups=codes, group_scale=p["group_scale"])
        return d.log_prob(jnp.asarray(y))

    def dense(value):
        p = {**theta, wrt: value}
        spec = {**SE, "lengthscale": p["lengthscale"]}
        Kuu = ref.gram(spec, Z)
        Kuu = Kuu + 1e-8 * np.mean(np.diag(Kuu)) * np.eye(M)
        Q = ref.nystrom(ref.gram(spec, X, Z), Kuu, ref.gram(spec, X, Z))
        H = (codes[:, None] == np.arange(G)[None, :]).astype(float)
        return ref.logpdf(y, Q + p["noise"] ** 2 * np.eye(N) + p["group_scale"] ** 2 * H @ H.T)

    h = 1e-5
    want = (dense(theta[wrt] + h) - dense(theta[wrt] - h)) / (2 * h)
    assert_close(jax.grad(logp)(theta[wrt]), want, rtol=1e-6)


@pytest.mark.parametrize("noise", list(NOISES), ids=list(NOISES))
def test_loo_matches_refits_on_the_other_points(noise):
    X, codes, y, Z = _data()
    sigma = NOISES[noise](np.random.default_rng(1))
    d = br.SparseGP(_kernel(), X, Z, sigma, groups=codes, group_scale=TAU)
    C, _, _ = _dense(X, codes, Z, np.square(sigma))
    assert_close(d.loo_log_prob(jnp.asarray(y)), ref.loo_refit(C, y), rtol=1e-8)
    # The conditionals' means and variances, through their PIT and residuals.
    precision = np.linalg.inv(C)
    var = 1.0 / np.diag(precision)
    residual = var * (precision @ y)
    assert_close(d.loo_residual(jnp.asarray(y)), residual, rtol=1e-8)
    assert_close(d.loo_pit(jnp.asarray(y)), scipy.stats.norm.cdf(residual / np.sqrt(var)), rtol=1e-8)


def test_predictive_and_effects_posterior_match_dense_conditioning():
    X, codes, y, Z = _data()
    d = br.SparseGP(_kernel(), X, Z, NOISE, groups=codes, group_scale=TAU)
    C, _, H = _dense(X, codes, Z, NOISE**2)
    # β | y: Cov(β, y) = τ² Hᵀ.
    mean, cov = ref.condition(C, TAU**2 * H, TAU**2 * np.eye(G), y)
    beta = d.group_moments(jnp.asarray(y))
    assert_close(beta.mean, mean, rtol=1e-8)
    assert_close(beta.var, np.diag(cov), rtol=1e-8)
    # f* | y (SoR's GP part alone): Cov(f*, y) = Q_*f.
    X_test = np.linspace(-1.0, 6.0, 9)
    Kuu = ref.gram(SE, Z) + 1e-8 * np.mean(np.diag(ref.gram(SE, Z))) * np.eye(M)
    Q_fs = ref.nystrom(ref.gram(SE, X, Z), Kuu, ref.gram(SE, X_test, Z))
    Q_ss = ref.nystrom(ref.gram(SE, X_test, Z), Kuu, ref.gram(SE, X_test, Z))
    mean, cov = ref.condition(C, Q_fs, Q_ss, y)
    f = d.moments(jnp.asarray(y), X_test)
    assert_close(f.mean, mean, rtol=1e-8)
    assert_close(f.var, np.diag(cov), rtol=1e-7)


def test_prior_draws_have_the_dense_covariance_within_4_mcse():
    X, codes, _, Z = _data()
    n = 20_000
    draws = br.SparseGP(_kernel(), X, Z, NOISE, groups=codes, group_scale=TAU).sample(
        jax.random.PRNGKey(0), (n,)
    )
    C, _, _ = _dense(X, codes, Z, NOISE**2)
    empirical = np.cov(np.asarray(draws), rowvar=False)
    # Var of a sample covariance of Gaussians: (C_ii C_jj + C_ij²)/n.
    mcse = np.sqrt((np.outer(np.diag(C), np.diag(C)) + C**2) / n)
    pairs = np.triu_indices(8)  # the first 8 points: 36 entries
    assert np.all(np.abs(empirical - C)[pairs] < 4 * mcse[pairs])


def test_replicates_have_the_dense_posterior_predictive_within_4_mcse():
    """y_rep = f + Hβ + ε' given y: mean S C⁻¹ y and covariance S − S C⁻¹ S + D, S = C − D."""
    X, codes, y, Z = _data()
    sigma = NOISES["per-point"](np.random.default_rng(1))
    n = 20_000
    d = br.SparseGP(_kernel(), X, Z, sigma, mean=0.3, groups=codes, group_scale=TAU)
    draws = np.asarray(d.sample_replicates(jax.random.PRNGKey(0), jnp.asarray(y), (n,)))
    C, _, _ = _dense(X, codes, Z, np.square(sigma))
    S = C - np.diag(np.square(sigma))
    mean = 0.3 + S @ np.linalg.solve(C, y - 0.3)
    cov = S - S @ np.linalg.solve(C, S) + np.diag(np.square(sigma))
    first = slice(0, 8)
    assert np.all(np.abs(draws.mean(0) - mean)[first] < 4 * np.sqrt(np.diag(cov) / n)[first])
    empirical = np.cov(draws, rowvar=False)
    mcse = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / n)
    pairs = np.triu_indices(8)
    assert np.all(np.abs(empirical - cov)[pairs] < 4 * mcse[pairs])


def test_bad_arguments_name_themselves():
    X, codes, y, Z = _data()
    kernel = _kernel()
    cases = [
        ({"groups": codes}, "groups, group_scale"),
        ({"group_scale": TAU}, "groups, group_scale"),
        ({"groups": codes[:-1], "group_scale": TAU}, "groups: expected shape"),
        ({"groups": codes + 0.5, "group_scale": TAU}, "groups: expected integer"),
        ({"groups": codes - 1, "group_scale": TAU}, "groups: expected integer codes ≥ 0"),
        ({"groups": codes, "group_scale": -1.0}, "group_scale: expected a finite"),
        ({"groups": codes, "group_scale": np.ones(2)}, "group_scale: expected a scalar"),
        ({"groups": codes, "group_scale": TAU, "approx": "fitc"}, "groups: group effects are integrated"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            br.SparseGP(kernel, X, Z, NOISE, **kwargs)
    d = br.SparseGP(kernel, X, Z, NOISE, groups=codes, group_scale=TAU)
    with pytest.raises(ValueError, match="groups: group effects take one member"):
        d.expand((3,))
    with pytest.raises(ValueError, match="groups: group_moments needs"):
        br.SparseGP(kernel, X, Z, NOISE).group_moments(jnp.asarray(y))
    with pytest.raises(ValueError, match=r"groups: traced group codes .* need num_groups"):
        jax.jit(lambda c: br.SparseGP(kernel, X, Z, NOISE, groups=c, group_scale=TAU).log_prob(y))(codes)
    for num_groups, message in [(0, "num_groups: must be a positive"), (G - 1, "groups: code 4 is out")]:
        with pytest.raises(ValueError, match=message):
            br.SparseGP(kernel, X, Z, NOISE, groups=codes, group_scale=TAU, num_groups=num_groups)
    with pytest.raises(ValueError, match="num_groups: given without groups"):
        br.SparseGP(kernel, X, Z, NOISE, num_groups=G)

    def plated():
        with numpyro.plate("series", 2):
            numpyro.sample("y", br.SparseGP(kernel, X, Z, NOISE, groups=codes, group_scale=TAU))

    with pytest.raises(ValueError, match="groups: group effects take one member"):
        numpyro.handlers.seed(plated, 0)()
