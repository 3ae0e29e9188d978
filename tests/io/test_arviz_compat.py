"""bayes_rbfn.io.arviz_compat: one layout of a fit and of ArviZ's statistics on both ArviZ lines.

Proves, on whichever line is installed (CI runs the suite under both: arviz 0.23 on Python 3.11, arviz 1.x
on Python 3.13):

* the object built is that line's (InferenceData on 0.x, DataTree on 1.x) with the groups, dims and
  coordinates given, in ArviZ's group order, and groups added later keep that order;
* the summary has the same columns on both lines, its 94 % HDI equal to the shortest interval holding
  94 % of the sorted draws (NumPy);
* PSIS log weights are normalised and, for light-tailed ratios, the plain importance weights; PSIS-LOO's
  elpd is the sum of its pointwise values and, for light tails, the importance-sampling LOO of NumPy;
* compare's table has the same columns on both lines, elpd_diff ≥ 0 the gap to the best model;
* a file written under either line (tests/data/fit_arviz0.nc, fit_arviz1.nc, made by
  tests/data/make_cross_line_fits.py) reads back under this one with the same schema, and ``predict``,
  ``loo_pit`` and ``score`` work on it: the predictive equals the dense SoR formula (NumPy) at the stored
  draws;
* importing arviz before the package and then ``numpyro.distributions`` runs a NUTS fit (the lazy-loader
  trap of arviz-base, guarded by importing numpyro first).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import reference as ref
from conftest import assert_close
from scipy.special import logsumexp

import bayes_rbfn as br
from bayes_rbfn.io import arviz_compat as azc

DATA = Path(__file__).resolve().parent.parent / "data"
_gen = np.random.default_rng(20261207)  # fixed inputs, not a stochastic check


def _fit_like():
    return azc.from_groups(
        {
            "posterior": {"a": _gen.normal(size=(2, 300)), "b": _gen.normal(size=(2, 300, 2))},
            "sample_stats": {"diverging": np.zeros((2, 300), dtype=bool)},
            "log_likelihood": {"y": -1.0 - 0.05 * _gen.standard_normal((2, 300, 5))},
            "observed_data": {"y": _gen.normal(size=5)},
            "constant_data": {"X": _gen.normal(size=(5, 2)), "y_offset": np.array(0.5)},
            "predictions_constant_data": {"X_pred": _gen.normal(size=(3, 2))},
        },
        dims={"b": ["input_dim"], "y": ["obs"], "X": ["obs", "input_dim"], "X_pred": ["point", "input_dim"]},
        coords={"input_dim": ["u", "v"]},
    )


def test_the_object_is_the_lines_own_with_the_given_groups_dims_and_coords():
    idata = _fit_like()
    assert type(idata).__name__ == ("DataTree" if azc.ARVIZ_1 else "InferenceData")
    assert azc.groups(idata) == (
        "posterior",
        "log_likelihood",
        "sample_stats",
        "observed_data",
        "constant_data",
        "predictions_constant_data",
    )
    assert idata.posterior["b"].dims == ("chain", "draw", "input_dim")
    assert idata.log_likelihood["y"].dims == ("chain", "draw", "obs")
    assert idata.observed_data["y"].dims == ("obs",)
    assert idata.predictions_constant_data["X_pred"].dims == ("point", "input_dim")
    assert list(idata.constant_data["X"].coords["input_dim"].values) == ["u", "v"]
    assert list(idata.posterior["a"].coords["draw"].values) == list(range(300))


def test_added_groups_take_their_place_and_replace_in_place():
    idata = _fit_like()
    azc.add_groups(idata, {"posterior_predictive": {"y": np.zeros((2, 10, 5))}}, dims={"y": ["obs"]})
    azc.put_variable(idata, "log_likelihood", "z", idata.log_likelihood["y"] * 2)
    assert azc.groups(idata)[:3] == ("posterior", "posterior_predictive", "log_likelihood")
    assert idata.posterior_predictive["y"].dims == ("chain", "draw", "obs")
    assert_close(idata.log_likelihood["z"].values, 2 * idata.log_likelihood["y"].values)
    assert azc.assign_coords(idata, "obs", list("abcde")) == [
        "posterior_predictive",
        "log_likelihood",
        "observed_data",
        "constant_data",
    ]
    assert list(idata.observed_data["y"].coords["obs"].values) == list("abcde")


def _shortest_interval(draws, prob):
    x = np.sort(np.ravel(draws))
    n = int(np.floor(prob * x.size))
    widths = x[n:] - x[: x.size - n]
    i = int(np.argmin(widths))
    return x[i], x[i + n]


def test_summary_columns_and_hdi_are_the_same_on_both_lines():
    idata = _fit_like()
    post = azc.group_dataset(idata, "posterior")
    stats = azc.summary(post, kind="stats")
    assert list(stats.columns) == ["mean", "sd", *azc.HDI_COLUMNS]
    assert list(azc.summary(post, kind="diagnostics").columns) == [
        "mcse_mean",
        "mcse_sd",
        "ess_bulk",
        "ess_tail",
        "r_hat",
    ]
    assert list(stats.index) == ["a", "b[u]", "b[v]"]
    draws = post["a"].values
    lo, hi = _shortest_interval(draws, azc.HDI_PROB)
    # Both lines take the shortest of the windows of ⌊0.94 S⌋ + 1 sorted draws: equal to the draw.
    assert stats.loc["a", azc.HDI_COLUMNS[0]] == pytest.approx(lo, abs=1e-12)
    assert stats.loc["a", azc.HDI_COLUMNS[1]] == pytest.approx(hi, abs=1e-12)
    assert stats.loc["a", "mean"] == pytest.approx(np.mean(draws), rel=1e-12)
    assert stats.loc["a", "sd"] == pytest.approx(np.std(draws, ddof=1), rel=1e-12)


def test_psis_weights_are_normalised_and_light_tails_keep_plain_importance_weights():
    log_ratios = 0.05 * _gen.standard_normal((4000, 3))
    log_weights = azc.psis_log_weights(log_ratios, reff=1.0)
    assert log_weights.shape == (4000, 3)
    assert_close(np.exp(log_weights).sum(axis=0), np.ones(3))
    plain = log_ratios - logsumexp(log_ratios, axis=0)
    # Smoothing replaces only the largest ~3√S ratios by Pareto quantiles, which for a light tail lie
    # within a fraction of the ratios' own spread (0.05) of them.
    np.testing.assert_allclose(log_weights, plain, atol=0.02)


def test_too_few_draws_for_a_tail_leave_the_ratios_unsmoothed():
    """Fewer draws than a Pareto tail of 5 needs: both lines return the plain normalised ratios."""
    log_ratios = _gen.standard_normal((12, 2))
    expected = log_ratios - logsumexp(log_ratios, axis=0)
    assert_close(azc.psis_log_weights(log_ratios, reff=1.0), expected)


def test_loo_with_too_few_draws_is_unsmoothed_importance_sampling():
    """Twelve draws: no Pareto tail on either line; elpd_i is plain IS-LOO and the estimate is flagged."""
    log_lik = -1.0 - 0.3 * _gen.standard_normal((2, 6, 4))
    idata = azc.from_groups(
        {
            "posterior": {"a": np.zeros((2, 6))},
            "log_likelihood": {"y": log_lik},
            "observed_data": {"y": np.zeros(4)},
        },
        dims={"y": ["obs"]},
    )
    result = azc.loo(idata)
    flat = log_lik.reshape(12, 4)
    assert_close(result.elpd_i, -(logsumexp(-flat, axis=0) - np.log(12)))
    assert result.warning


def test_loo_is_the_sum_of_its_pointwise_values_and_importance_sampling_loo():
    idata = _fit_like()
    result = azc.loo(idata)
    log_lik = idata.log_likelihood["y"].values.reshape(-1, 5)
    # IS-LOO: log p(y_i | y_−i) ≈ −log mean_s 1 / p(y_i | θ_s); the log-likelihoods vary by ~0.05 only.
    is_loo = -(logsumexp(-log_lik, axis=0) - np.log(log_lik.shape[0]))
    assert result.elpd_i.shape == (5,) and result.pareto_k.shape == (5,)
    assert result.elpd == pytest.approx(np.sum(result.elpd_i), rel=1e-12)
    np.testing.assert_allclose(result.elpd_i, is_loo, atol=1e-3)
    lppd = logsumexp(log_lik, axis=0) - np.log(log_lik.shape[0])  # log mean_s p(y_i | θ_s)
    assert result.p == pytest.approx(np.sum(lppd - is_loo), abs=1e-4)
    # The standard error is ArviZ's own: √N times the sd of the pointwise values, whose ddof is 0 on 0.x and
    # 1 on 1.x (as R's loo package).
    ddof = 1 if azc.ARVIZ_1 else 0
    assert result.se == pytest.approx(np.sqrt(5 * np.var(result.elpd_i, ddof=ddof)), rel=1e-9)


def test_compare_has_one_layout_and_a_positive_gap_to_the_best():
    good, worse = _fit_like(), _fit_like()
    shifted = azc.group_dataset(worse, "log_likelihood") - 1.0
    azc.add_groups(worse, {"log_likelihood": shifted})
    table = azc.compare({"worse": worse, "good": good})
    assert list(table.columns) == ["rank", "elpd_loo", "p_loo", "elpd_diff", "weight", "se", "dse", "warning"]
    assert list(table.index) == ["good", "worse"]
    gap = table.loc["good", "elpd_loo"] - table.loc["worse", "elpd_loo"]
    assert table.loc["worse", "elpd_diff"] == pytest.approx(gap, rel=1e-9)
    assert table.loc["good", "elpd_diff"] == 0.0


@pytest.mark.skipif(azc.WAIC_AVAILABLE, reason="ArviZ 0.x has WAIC")
def test_waic_is_refused_on_arviz_1():
    with pytest.raises(ValueError, match=r"^ic: 'waic' is not available with arviz 1\."):
        azc.compare({"a": _fit_like(), "b": _fit_like()}, ic="waic")


@pytest.mark.skipif(not azc.WAIC_AVAILABLE, reason="ArviZ 1.x has no WAIC")
def test_waic_works_on_arviz_0():
    table = azc.compare({"a": _fit_like(), "b": _fit_like()}, ic="waic")
    assert list(table.columns)[:3] == ["rank", "elpd_waic", "p_waic"]


# --------------------------------------------------------------------------------------------------
# A file written under either line


def _dense_sor_moments(idata, X_new):
    """Per stored draw, the SoR predictive mean and variance of f* at X_new, densely (tests/reference.py)."""
    sizes = idata.posterior.sizes
    pairs = [(c, d) for c in range(sizes["chain"]) for d in range(sizes["draw"])]
    moments = [ref.stored_sor_predictive(idata, c, d, X_new, jitter=1e-8) for c, d in pairs]
    return np.array([m for m, _ in moments]), np.array([v for _, v in moments])


@pytest.mark.parametrize("written_by", ["arviz0", "arviz1"])
def test_a_file_from_either_line_reads_back_and_predicts_by_the_dense_formula(written_by):
    idata = azc.read_netcdf(DATA / f"fit_{written_by}.nc")
    assert type(idata).__name__ == ("DataTree" if azc.ARVIZ_1 else "InferenceData")
    assert set(azc.groups(idata)) == {
        "posterior",
        "posterior_predictive",
        "predictions",
        "log_likelihood",
        "sample_stats",
        "observed_data",
        "constant_data",
        "predictions_constant_data",
    }
    assert idata.posterior.attrs["bayes_rbfn_model"] == "sor"
    assert idata.constant_data["X"].dims == ("obs", "input_dim")
    X_new = np.linspace(-0.5, 6.5, 7)[:, None]
    pred = br.predict(idata, X_new)
    means, variances = _dense_sor_moments(idata, X_new)
    assert_close(np.reshape(pred.f_mean, means.shape), means, scale=np.max(np.abs(means)))
    assert_close(np.reshape(pred.f_var, variances.shape), variances, scale=np.max(variances))
    pit = np.asarray(br.loo_pit(idata))
    assert pit.shape == idata.observed_data["y"].shape and np.all((pit > 0) & (pit < 1))
    scores = br.score(idata, X_new[:4], np.sin(X_new[:4, 0]))
    assert all(np.isfinite(float(v)) for v in scores.values())


def test_importing_arviz_first_then_numpyro_distributions_still_samples(tmp_path):
    """arviz-base (1.x) puts a lazily loaded numpyro in sys.modules; ``import numpyro.distributions``
    before ``import numpyro`` then finds the package half initialised unless the package loaded it first."""
    script = textwrap.dedent(
        """
        import arviz
        import bayes_rbfn.models.distributions
        import numpyro.distributions as dist
        import numpyro
        import jax, jax.numpy as jnp
        from numpyro.infer import MCMC, NUTS

        def model():
            s = numpyro.sample("s", dist.HalfNormal(1.0))
            numpyro.sample("y", dist.Normal(0.0, s), obs=jnp.ones(3))

        mcmc = MCMC(NUTS(model), num_warmup=10, num_samples=10, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0))
        print("sampled", mcmc.get_samples()["s"].shape)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "sampled (10,)" in done.stdout


_LOSE_THE_STAMP_RACE = """
import pathlib

_replace = pathlib.Path.replace
lost = []


def replace(self, target):
    # Another process renames the shared temporary file first: its stamp is there, ours is gone.
    target = pathlib.Path(target)
    if target.name == "daily_warning" and not lost:
        lost.append(True)
        _replace(self, target)
        raise FileNotFoundError(2, "No such file or directory", str(self), None, str(target))
    return _replace(self, target)


pathlib.Path.replace = replace
"""


@pytest.mark.parametrize(
    "importer",
    [
        pytest.param("import bayes_rbfn.io.arviz_compat", id="the-package"),
        pytest.param("import arviz", id="arviz-alone-fails-on-0.x"),
    ],
)
def test_two_processes_importing_arviz_at_once_on_a_new_day_both_import(tmp_path, importer):
    """ArviZ 0.23's daily notice renames one shared temporary file; the process that renames second fails.

    The race is replayed in one process: the rename is made to lose once, as it does when another process
    renamed the file first. The package's import survives it; a plain ``import arviz`` of 0.x does not,
    which shows that the replay meets the race.
    """
    script = _LOSE_THE_STAMP_RACE + f"\n{importer}\nprint('imported', bool(lost))\n"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    if importer == "import arviz":
        if azc.ARVIZ_1:
            pytest.skip("ArviZ 1.x writes no daily stamp")
        assert done.returncode != 0 and "daily_warning" in done.stderr
    else:
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split() == ["imported", str(not azc.ARVIZ_1)]
