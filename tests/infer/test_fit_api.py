"""The fitting API without long MCMC: inducing-point selection, bad input, predictive mixtures."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import numpyro.distributions as dist
import pytest
import stochastic

import bayes_rbfn as br
from bayes_rbfn.gp.inducing import select_inducing
from bayes_rbfn.gp.kernels import SquaredExponential
from bayes_rbfn.infer import fitting, predictive
from bayes_rbfn.infer.fitting import backtest_scores
from bayes_rbfn.io import arviz_compat
from bayes_rbfn.models import available_models

# --------------------------------------------------------------------------------------------------
# Inducing inputs


@pytest.mark.parametrize("method", ["kmeans", "pivoted_cholesky"])
def test_inducing_selection_is_deterministic_and_distinct(method):
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(200, 2))
    kernel = SquaredExponential(lengthscale=0.3)
    Z1 = select_inducing(X, 15, method=method, seed=3, kernel=kernel)
    Z2 = select_inducing(X, 15, method=method, seed=3, kernel=kernel)
    np.testing.assert_array_equal(Z1, Z2)
    assert Z1.shape == (15, 2)
    assert np.unique(Z1, axis=0).shape[0] == 15


def test_inducing_selection_deduplicates_repeated_inputs():
    X = np.repeat(np.arange(5.0), 20)  # 100 points, 5 distinct
    Z = select_inducing(X, 5)
    np.testing.assert_array_equal(np.sort(Z[:, 0]), np.arange(5.0))
    with pytest.raises(ValueError, match=r"num_inducing: 6 inducing points is more than the 5 distinct"):
        select_inducing(X, 6)


def test_pivoted_cholesky_picks_the_largest_residual_variance():
    """Greedy selection: each new point has the largest conditional variance k(x,x) − Q(x,x) left."""
    X = np.linspace(0, 10, 101)
    kernel = SquaredExponential(lengthscale=1.0)
    Z = select_inducing(X, 3, method="pivoted_cholesky", kernel=kernel)
    for m in range(1, 3):
        Kzz = np.asarray(kernel(Z[:m], Z[:m]))
        Kxz = np.asarray(kernel(X, Z[:m]))
        residual = 1.0 - np.sum(Kxz * np.linalg.solve(Kzz, Kxz.T).T, axis=1)
        chosen = np.flatnonzero(X == Z[m, 0])[0]
        assert residual[chosen] == pytest.approx(residual.max(), abs=1e-12)


def test_kmeans_centres_cover_clusters():
    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal(0, 0.1, 100), rng.normal(5, 0.1, 100), rng.normal(10, 0.1, 100)])
    Z = np.sort(select_inducing(X, 3, seed=0)[:, 0])
    np.testing.assert_allclose(Z, [0, 5, 10], atol=0.1)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True], ids=["zero", "negative", "float", "bool"])
def test_inducing_count_must_be_positive_integer(bad):
    with pytest.raises(ValueError, match="num_inducing"):
        select_inducing(np.arange(10.0), bad)


# --------------------------------------------------------------------------------------------------
# fit(): bad input is refused before any sampling


X = np.linspace(0, 1, 20)
Y = np.sin(6 * X)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(model="nope"), r"model: unknown model 'nope'; choose one of .*sor"),
        (dict(kernel="nope"), r"kernel: unknown kernel 'nope'; choose one of se"),
        (dict(chains=0), r"chains: must be a positive integer"),
        (dict(draws=-1), r"draws: must be a positive integer"),
        (dict(warmup=1.5), r"warmup: must be a positive integer"),
        (dict(num_inducing=21), r"num_inducing: 21 inducing points is more than the 20 distinct"),
        (dict(Z=np.array([0.1, 0.1, 0.5])), r"Z: has 1 duplicate inducing point"),
        (dict(noise=-1.0), r"noise: must be a finite positive number"),
        (dict(priors={"wiggliness": dist.Normal(0, 1)}), r"priors: unknown hyperparameter 'wiggliness'"),
        (dict(priors={"noise": 3.0}), r"priors: the prior for 'noise' must be a numpyro distribution"),
        (dict(fixed={"period": 1.0}), r"fixed: unknown hyperparameter 'period'"),
        (dict(mean="median"), r"mean: expected one of constant, zero, linear, a number or a callable"),
        (dict(mean=float("nan")), r"mean: must be finite"),
        (dict(model="blr", mean="linear"), r"mean: the 'blr' model takes a constant mean only"),
        (dict(likelihood="gamma"), r"likelihood: unknown likelihood 'gamma'; choose one of gaussian"),
        (
            dict(likelihood="poisson"),
            r"likelihood: 'poisson' needs the weight-space model rbfn; the 'sor' model marginalises its "
            r"weights, which only the 'gaussian' likelihood allows",
        ),
        (
            dict(model="exact", likelihood="student_t"),
            r"likelihood: 'student_t' needs the weight-space model rbfn; the 'exact' model",
        ),
        (dict(posterior_predictive=-1), r"posterior_predictive: must be a whole number ≥ 0"),
        (dict(prior_draws=-1), r"prior_draws: must be a whole number ≥ 0"),
        (dict(prior_draws=2.5), r"prior_draws: must be a whole number ≥ 0"),
        (dict(coords={"input_dim": ["a", "b"]}), r"coords: 'input_dim' has 1 entries, got 2 names"),
        (dict(group=np.zeros(20, dtype=int)), r"group: the 'sor' model is not grouped"),
        (dict(X_pred=np.ones((3, 2))), r"X_pred: has 2 input dimension\(s\) but X has 1"),
        (dict(seed=2**63), r"seed: expected a whole number in 0 … 2⁶³ − 1"),
        (dict(seed=-1), r"seed: expected a whole number in 0 … 2⁶³ − 1"),
        (dict(target_accept=1.0), r"target_accept: expected a number in \(0, 1\)"),
        (dict(max_tree_depth=0), r"max_tree_depth: "),
        (dict(max_tree_depth=31), r"max_tree_depth: must be at most 30 "),
        (dict(max_tree_depth=2**40), r"max_tree_depth: must be at most 30 "),
        (dict(chains=2, sampler=br.SamplerSettings()), r"sampler: give the NUTS settings either"),
        (dict(wiggliness=3), r"wiggliness: not an option of fit"),
        (dict(jitter=0.0), r"jitter: expected a finite number > 0"),
        (dict(jitter=-1e-6), r"jitter: expected a finite number > 0"),
        (dict(jitter=float("inf")), r"jitter: expected a finite number > 0"),
        (dict(draws=10**12), r"draws: the draws and their per-draw outputs would need about .* of memory"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_fit_rejects_bad_arguments(kwargs, match):
    kwargs = {"model": "sor", **kwargs}
    model = kwargs.pop("model")
    with pytest.raises(ValueError, match=match):
        br.fit(model, X, Y, progress=False, **kwargs)


@pytest.mark.parametrize(
    ("X_bad", "y_bad", "match"),
    [
        (np.array([0.0, np.nan, 1.0]), np.zeros(3), r"X: contains 1 NaN or infinite"),
        (np.arange(3.0), np.array([0.0, np.inf, 1.0]), r"y: contains 1 NaN or infinite"),
        (np.arange(3.0), np.zeros(4), r"y: has 4 values but X has 3 rows"),
        (np.zeros((2, 2, 2)), np.zeros(2), r"X: expected shape \(N,\) or \(N, D\)"),
        (X * 1e-160, Y, r"X\[:, 0\]: its values run from 0 to 1e-160, a scale float64 arithmetic cannot"),
        (X * 1e150, Y, r"X\[:, 0\]: its values run from 0 to 1e\+150"),
        (X, Y * 1e80, r"y: its values run from .* rescale it"),
        (X, Y * 1e-80, r"y: its values run from"),
    ],
    ids=["nan-X", "inf-y", "length-mismatch", "3d-X", "X-1e-160", "X-1e150", "y-1e80", "y-1e-80"],
)
def test_fit_rejects_bad_data(X_bad, y_bad, match):
    with pytest.raises(ValueError, match=match):
        br.fit("sor", X_bad, y_bad, progress=False)


FIT_WITHOUT_X64 = """
import warnings

import jax
import numpy as np

import bayes_rbfn as br

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(2):
        try:  # stops at the argument check, after the precision check, so nothing compiles
            br.fit("sor", np.linspace(0.0, 1.0, 20), np.sin(np.arange(20.0)), wiggliness=3)
        except ValueError as err:
            assert "wiggliness" in str(err), err
found = [w for w in caught if issubclass(w.category, br.Float32Warning)]
assert len(found) == 1, [str(w.message) for w in caught]
assert issubclass(br.Float32Warning, UserWarning)
assert "call numpyro.enable_x64() before fitting" in str(found[0].message), found[0].message
assert found[0].filename == "<string>", found[0].filename  # points at the caller's line
assert not jax.config.jax_enable_x64, "the library turned float64 on"
"""


def test_fit_warns_once_when_jax_runs_in_float32():
    """Without ``numpyro.enable_x64()`` a fit runs in float32: it says so once per process, and leaves JAX's
    global flag as it found it. A fresh interpreter, since this one runs with float64 on (conftest.py)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    done = subprocess.run(
        [sys.executable, "-c", FIT_WITHOUT_X64], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr


def test_fit_does_not_warn_about_float32_under_x64():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="wiggliness"):
            br.fit("sor", X, Y, wiggliness=3)
    assert not [w for w in caught if issubclass(w.category, br.Float32Warning)]


def test_fit_stores_prior_draws_on_request():
    """``prior_draws=n`` adds the groups ``prior`` (the parameters, drawn from their priors: log ℓ within
    4 standard errors of its prior's mean and sd) and ``prior_predictive`` (y simulated, one per draw);
    without it neither group is written."""
    n, sd = 400, 0.5
    settings = dict(Z=X[::4], chains=1, draws=20, warmup=20, progress=False, check_diagnostics=False)
    idata = br.fit("sor", X, Y, priors={"lengthscale": dist.LogNormal(0.0, sd)}, prior_draws=n, **settings)
    present = set(arviz_compat.groups(idata))
    assert {"prior", "prior_predictive", "posterior", "posterior_predictive"} <= present
    assert {"lengthscale", "variance", "noise"} <= set(idata.prior.data_vars)
    assert idata.prior["lengthscale"].dims == ("chain", "draw")
    y_sim = idata.prior_predictive["y"]
    assert y_sim.dims == ("chain", "draw", "obs") and y_sim.shape == (1, n, len(Y))
    assert np.all(np.isfinite(y_sim.values)) and np.unique(y_sim.values[0, :, 0]).size == n
    log_ell = np.log(idata.prior["lengthscale"].values.ravel())
    assert abs(log_ell.mean()) < 4 * sd / np.sqrt(n)
    assert abs(log_ell.std() - sd) < 4 * sd / np.sqrt(2 * n)
    assert not {"prior", "prior_predictive"} & set(arviz_compat.groups(br.fit("sor", X, Y, **settings)))


def test_the_steps_of_fit_called_one_by_one_give_fit_draw_for_draw():
    """fit is its public steps: build_model → sample_posterior → to_inference_data → add_prior_draws,
    add_posterior_predictive, score_holdout → check_fit. Called by hand with the same settings they give
    the same groups, value for value, in the same process."""
    from bayes_rbfn.infer.sampler import SamplerSettings

    settings = SamplerSettings(chains=1, draws=30, warmup=30, progress=False, seed=stochastic.seed(5))
    X40 = np.linspace(0.0, 1.0, 40)
    y40 = np.sin(6 * X40)
    options = dict(Z=X40[::5, None], X_pred=np.linspace(0.0, 1.2, 7))
    X_train, y_train, X_test, y_test = fitting.holdout_split(X40, y40, holdout=0.25)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = br.fit(
            "sor", X40, y40, sampler=settings, holdout=0.25, prior_draws=5, posterior_predictive=10, **options
        )
        problem = fitting.build_model("sor", X_train, y_train, seed=settings.seed, **options)
        samples, stats = fitting.sample_posterior(problem, settings)
        idata = fitting.to_inference_data(problem, samples, stats, inducing="given")
        fitting.add_prior_draws(idata, problem, num_draws=5, seed=settings.seed)
        fitting.add_posterior_predictive(idata, problem, samples, seed=settings.seed, draws_per_chain=10)
        fitting.score_holdout(idata, X_test, y_test)
        fitting.check_fit(idata, problem, samples)
    assert set(arviz_compat.groups(idata)) == set(arviz_compat.groups(whole))
    for group in arviz_compat.groups(whole):
        ours, theirs = (arviz_compat.group_dataset(d, group) for d in (idata, whole))
        assert set(ours.data_vars) == set(theirs.data_vars), group
        for name in theirs.data_vars:
            np.testing.assert_array_equal(ours[name].values, theirs[name].values, err_msg=f"{group}/{name}")
    assert backtest_scores(idata) == backtest_scores(whole)
    assert idata.posterior.attrs == whole.posterior.attrs


def test_grouped_fit_needs_groups():
    with pytest.raises(ValueError, match="group: the grouped model needs a group code"):
        br.fit("grouped", X, Y, progress=False)


def test_model_registry_lists_core_models():
    assert {"sor", "rbfn", "exact", "grouped"} <= set(available_models())


# --------------------------------------------------------------------------------------------------
# Mixture moments (law of total variance) against a direct NumPy computation


@pytest.mark.parametrize("noise_per", ["draw", "draw_and_point"])
@pytest.mark.parametrize("draws", [50, 300], ids=["one-block", "several-blocks"])
def test_mixture_moments_law_of_total_variance(noise_per, draws):
    """Against the mixture's second moment, with σ per draw (ungrouped) or per draw and point (grouped);
    300 draws × 3 chains spans several of the blocks the deviation is summed in."""
    rng = np.random.default_rng(2)
    f_mean = rng.normal(size=(3, draws, 7))
    f_var = rng.uniform(0.1, 1.0, size=(3, draws, 7))
    shape = (3, draws) if noise_per == "draw" else (3, draws, 7)
    noise = rng.uniform(0.1, 0.3, size=shape)
    mean, var_f, var_y = predictive.mixture_moments(f_mean, f_var, noise)
    # direct: moments of the equal-weight Gaussian mixture from its second moment
    m = f_mean.reshape(3 * draws, 7)
    v = f_var.reshape(3 * draws, 7)
    n2 = noise.reshape(3 * draws, -1) ** 2
    np.testing.assert_allclose(mean, m.mean(0))
    np.testing.assert_allclose(var_f, (v + m**2).mean(0) - m.mean(0) ** 2, rtol=1e-10)
    np.testing.assert_allclose(var_y, (v + n2 + m**2).mean(0) - m.mean(0) ** 2, rtol=1e-10)


def test_mixture_moments_rejects_noise_of_another_shape():
    with pytest.raises(ValueError, match="noise: expected one value per draw"):
        predictive.mixture_moments(np.zeros((2, 5, 3)), np.ones((2, 5, 3)), np.ones(4))


def test_per_draw_moments_batching_is_invisible():
    """Batching over test points and draws gives exactly the unbatched result."""

    def predict_fn(p, Xb):
        return p["a"] * Xb[:, 0], p["b"] + 0.0 * Xb[:, 0]

    params = {"a": np.arange(12.0).reshape(3, 4), "b": np.ones((3, 4))}
    Xs = np.linspace(0, 1, 11)[:, None]
    full = predictive.per_draw_moments(predict_fn, params, Xs)
    batched = predictive.per_draw_moments(predict_fn, params, Xs, batch_size=3, draw_batch=5)
    np.testing.assert_array_equal(full[0], batched[0])
    np.testing.assert_array_equal(full[1], batched[1])
    np.testing.assert_allclose(full[0], params["a"][..., None] * Xs[:, 0])


@pytest.mark.stochastic
def test_sample_predictive_moments():
    """Draws from the predictive have the mixture's moments (20,000 iid draws, 5 standard errors: 4 checks,
    false alarm 4 · 5.7e-7)."""
    f_mean = stochastic.rng(3).normal(size=(2, 10000, 2))
    f_var = np.full((2, 10000, 2), 0.25)
    mean, var = predictive.mixture_moments(f_mean, f_var)[:2]
    pred = predictive.PredictiveSummary(f_mean, f_var, mean, var, var_y=None)
    draws = predictive.sample_predictive(pred, seed=stochastic.seed(4))
    assert draws.shape == (20000, 2)
    se = np.sqrt(pred.var / 20000)
    assert np.all(np.abs(draws.mean(0) - pred.mean) < 5 * se)
    assert np.all(np.abs(draws.var(0) / pred.var - 1) < 5 * np.sqrt(2 / 20000))


@pytest.mark.parametrize(
    "likelihood, y, match",
    [
        (
            "poisson",
            np.r_[1.0, 2.0, -1.0, np.ones(17)],
            r"likelihood: 'poisson' needs y to be counts .*rows 2 ",
        ),
        ("negative_binomial", np.r_[np.ones(5), 2.5, np.ones(14)], r"first at rows 5 \(0-based\): 2\.5"),
        ("bernoulli", np.r_[0.0, 1.0, 2.0, 1.0, -1.0, np.zeros(15)], r"0 or 1; 2 value\(s\).*rows 2, 4"),
    ],
    ids=["negative-count", "fractional-count", "label-not-0-1"],
)
def test_fit_rejects_data_the_likelihood_cannot_take(likelihood, y, match):
    """Counts must be whole numbers ≥ 0 and labels 0 or 1; the error names the likelihood and the rows."""
    with pytest.raises(ValueError, match=match):
        br.fit("rbfn", X, y, likelihood=likelihood, progress=False)


def test_backtest_scores_are_those_of_the_dense_sor_predictive():
    """fit(holdout=0.25): the stored scores equal score_forecast of the per-draw SoR predictive of y* at the
    held-out inputs, recomputed densely in NumPy (tests/reference.py) from the stored draws."""
    import reference as ref

    from bayes_rbfn.infer.scores import score_forecast

    x = np.linspace(0.0, 6.0, 48)
    y = np.sin(x) + 0.1 * np.cos(5 * x)
    Z = np.linspace(0.2, 4.2, 6)
    idata = br.fit(
        "sor",
        x,
        y,
        Z=Z,
        holdout=0.25,
        chains=1,
        draws=40,
        warmup=60,
        progress=False,
        check_diagnostics=False,
        log_likelihood=False,
        posterior_predictive=0,
    )
    scores = backtest_scores(idata)
    X_fit, y_fit = idata.constant_data["X"].values, idata.observed_data["y"].values
    X_out, y_out = idata.constant_data["X_holdout"].values, idata.constant_data["y_holdout"].values
    assert X_fit.shape == (36, 1) and X_out.shape == (12, 1) and X_out.min() > X_fit.max()
    c = idata.constant_data["y_offset"].values.item()
    post = idata.posterior
    means, sds = [], []
    for d in range(40):
        spec = {
            "kind": "se",
            "lengthscale": post["lengthscale"].values[0, d],
            "variance": post["variance"].values[0, d],
        }
        noise = post["noise"].values[0, d]
        Kfu, Kuu = ref.gram(spec, X_fit, Z[:, None]), ref.jittered(ref.gram(spec, Z[:, None]), 1e-8)
        m, cov = ref.sor_function_space(Kfu, Kuu, ref.gram(spec, X_out, Z[:, None]), y_fit - c, noise)
        means.append(m + c)
        sds.append(np.sqrt(np.diag(cov) + noise**2))
    expected = score_forecast(np.array(means), np.array(sds), y_out)
    for key, value in expected.items():
        assert scores[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key


@pytest.mark.parametrize("not_a_fit", [None, {"posterior": 1}, "inference.nc"], ids=["none", "dict", "path"])
def test_predict_names_idata_when_given_anything_but_a_fit(not_a_fit):
    with pytest.raises(ValueError, match=r"idata: expected the InferenceData of bayes_rbfn.fit"):
        br.predict(not_a_fit, X)


@pytest.mark.parametrize(
    ("model", "options", "dense_mass", "size", "dense"),
    [
        pytest.param("sor", {}, None, 3, True, id="sor-default-dense"),
        pytest.param("sor", {}, False, 3, False, id="sor-diagonal-given"),
        pytest.param("rbfn", {"num_inducing": 20}, None, 23, False, id="rbfn-default-diagonal"),
        pytest.param("rbfn", {"num_inducing": 20}, True, 23, True, id="rbfn-dense-given"),
        pytest.param(
            "dtc", {"kernel": "co2", "mean": "linear"}, None, 12, True, id="co2-hyperparameters-dense"
        ),
        pytest.param("dtc", {"kernel": "co2", "mean": "linear"}, False, 12, False, id="co2-diagonal-given"),
    ],
)
def test_default_mass_matrix_is_dense_for_few_sampled_values(model, options, dense_mass, size, dense):
    """``dense_mass=None`` (the default): dense for ≤ DENSE_MASS_MAX_PARAMS sampled values (sor: ℓ, s², σ)
    and for ≤ DENSE_MASS_MAX_HYPERPARAMETERS that are all hyperparameters (the co2 family's 9, σ and a
    linear mean's 2), diagonal above (rbfn: 20 weights besides); a given value is kept."""
    from bayes_rbfn.defaults import DENSE_MASS_MAX_HYPERPARAMETERS, DENSE_MASS_MAX_PARAMS
    from bayes_rbfn.infer.fitting import build_model
    from bayes_rbfn.infer.sampler import nuts_kernel, sampled_size

    X = np.linspace(0.0, 5.0, 40)[:, None]
    y = np.sin(X[:, 0])
    bound = build_model(
        model,
        X,
        y,
        num_inducing=options.get("num_inducing", 8),
        **{k: v for k, v in options.items() if k != "num_inducing"},
    )
    assert sampled_size(bound.model, bound.args) == size
    assert (size <= DENSE_MASS_MAX_PARAMS) == (model == "sor")
    assert size <= DENSE_MASS_MAX_HYPERPARAMETERS  # rbfn's are few enough, but 20 of them are weights
    kernel = nuts_kernel(bound.model, bound.args, br.SamplerSettings(dense_mass=dense_mass))
    assert kernel._dense_mass is dense
    with pytest.raises(ValueError, match="dense_mass"):
        br.SamplerSettings(dense_mass="yes")


@pytest.mark.parametrize(
    ("max_output", "work"),
    [(1 << 25, 10), (35, 10), (15, 1 << 18), (5, 1 << 21)],
    ids=["one-call-tiny-draws", "four-calls-last-padded", "eight-calls-one-draw-per-step", "a-draw-per-call"],
)
def test_map_draws_evaluates_every_draw_once_in_order(monkeypatch, max_output, work):
    """fit's per-draw map (the LOO log-likelihood's): every draw of every chain, in order, whatever the split
    into calls (the last one padded) and steps; against the same arithmetic in NumPy."""
    monkeypatch.setattr(fitting, "MAX_OUTPUT_PER_CALL", max_output)
    gen = np.random.default_rng(0)
    params = {"a": gen.normal(size=(2, 11)), "b": gen.normal(size=(2, 11, 3))}

    def fn(p, data):
        return p["a"] * data + p["b"].sum()

    out = fitting._map_draws(fn, params, work, np.arange(5.0), values_per_draw=5)
    expected = params["a"][..., None] * np.arange(5.0) + params["b"].sum(-1)[..., None]
    np.testing.assert_allclose(out, expected, rtol=1e-15, atol=0)
