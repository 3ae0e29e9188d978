"""`bayes-rbfn compare`: an end-to-end comparison on Snelson's data, its output folder, the held-out
density recomputed independently from the stored draws, and the bad inputs it refuses.

The held-out check does not trust the library's mixture code: it rebuilds the split from the training inputs
stored in each ``inference_<model>.nc``, takes the stored per-draw moments at the held-out inputs, adds the
stored noise draws and evaluates log (1/S) Σ_s N(y_i | m_s, v_s + σ_s²) with SciPy.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import assert_close
from scipy.special import logsumexp
from scipy.stats import norm

from bayes_rbfn import cli
from bayes_rbfn.cli.compare import convergence_lines
from bayes_rbfn.io import arviz_compat
from bayes_rbfn.io.datasets import load_dataset
from bayes_rbfn.io.output import MARKER

pytestmark = pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")

MODELS = ["exact", "sor", "fitc"]
SMALL = ["--chains", "2", "--draws", "60", "--warmup", "60", "--num-inducing", "8", "--quiet"]


def run_cli(argv, capsys):
    status = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def comparison_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare") / "snelson"
    status = cli.main(["compare", "--models", *MODELS, *SMALL, "--out", str(out)])
    assert status == 0
    return out


def test_compare_writes_table_plot_and_fits(comparison_run):
    out = comparison_run
    names = {p.name for p in out.iterdir()}
    expected = {
        "comparison.csv",
        "comparison.png",
        "report.txt",
        MARKER,
        *(f"inference_{m}.nc" for m in MODELS),
    }
    assert names == expected
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")], "temporary folders left behind"
    table = pd.read_csv(out / "comparison.csv", index_col="model")
    assert set(table.index) == set(MODELS)
    for column in ("rank", "elpd_loo", "p_loo", "elpd_test", "r_hat", "divergences", "collapsed_points"):
        assert column in table.columns
    assert sorted(table["rank"]) == list(range(len(MODELS)))
    # ranked by elpd_loo, best first
    assert np.all(np.diff(table.sort_values("rank")["elpd_loo"].to_numpy()) <= 0)
    # only SoR can lose its prior variance (Snelson's test grid reaches far past the data)
    assert table.loc["sor", "collapsed_points"] > 0.1
    assert table.loc["exact", "collapsed_points"] == 0.0 and table.loc["fitc", "collapsed_points"] == 0.0
    report = (out / "report.txt").read_text()
    assert "PSIS-LOO" in report and "held out" in report


def test_compare_elpd_test_matches_an_independent_recomputation(comparison_run):
    out = comparison_run
    data = load_dataset("snelson")
    table = pd.read_csv(out / "comparison.csv", index_col="model")
    for model in MODELS:
        idata = arviz_compat.read_netcdf(out / f"inference_{model}.nc")
        X_train = idata.constant_data["X"].values
        X_pred = idata.predictions_constant_data["X_pred"].values[:, 0]
        train = {float(x) for x in X_train[:, 0]}
        held_out = np.array([x not in train for x in data.X[:, 0]])
        assert held_out.sum() == round(0.25 * data.X.shape[0])
        index = np.array([np.flatnonzero(X_pred == x)[0] for x in data.X[held_out, 0]])
        f_mean = idata.predictions["f_mean"].values.reshape(-1, X_pred.size)[:, index]
        f_var = idata.predictions["f_var"].values.reshape(-1, X_pred.size)[:, index]
        noise = idata.posterior["noise"].values.reshape(-1, 1)
        logpdf = norm.logpdf(data.y[held_out], loc=f_mean, scale=np.sqrt(f_var + noise**2))
        elpd = float(np.sum(logsumexp(logpdf, axis=0) - np.log(logpdf.shape[0])))
        assert_close(table.loc[model, "elpd_test"], elpd, rtol=1e-9, atol=1e-9)
        # the LOO column is ArviZ's PSIS-LOO over the stored conditionals
        assert_close(table.loc[model, "elpd_loo"], arviz_compat.loo(idata).elpd, rtol=1e-9, atol=1e-9)


@pytest.mark.skipif(not arviz_compat.ARVIZ_1, reason="ArviZ 0.x has WAIC")
def test_compare_ic_waic_is_refused_on_arviz_1(tmp_path, capsys, monkeypatch):
    """ArviZ 1.x has no WAIC: ``--ic waic`` exits 2 with one line saying so, before any fit, no traceback,
    nothing written (neither --out nor the default folder in the working directory)."""
    import bayes_rbfn.workflows.compare

    def no_fit(*args, **kwargs):
        raise AssertionError("a model was fitted")

    monkeypatch.setattr(bayes_rbfn.workflows.compare, "fit", no_fit)
    monkeypatch.chdir(tmp_path)
    for out in (["--out", tmp_path / "res"], []):
        status, stdout, stderr = run_cli(["compare", "--ic", "waic", *SMALL, *out], capsys)
        assert status == 2, stderr
        assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
        assert stderr.startswith("bayes-rbfn: error: --ic: WAIC is gone from ArviZ 1.x"), stderr
        assert "--ic loo" in stderr and stdout == ""
        assert list(tmp_path.iterdir()) == []


def waic_reference(log_lik: np.ndarray) -> tuple[float, float]:
    """(elpd_waic, p_waic) of (chain, draw, N) pointwise log-likelihoods by NumPy (Watanabe 2010; Vehtari
    et al. 2017, eq. 11–12): Σ_i log mean_s p(y_i | θ_s) − Σ_i var_s log p(y_i | θ_s), the variance with
    ArviZ's divisor S."""
    draws = log_lik.reshape(-1, log_lik.shape[-1])
    lppd = logsumexp(draws, axis=0) - np.log(draws.shape[0])
    p_i = np.var(draws, axis=0)
    return float(np.sum(lppd - p_i)), float(np.sum(p_i))


@pytest.mark.skipif(arviz_compat.ARVIZ_1, reason="ArviZ 1.x has no WAIC")
def test_compare_ic_waic_on_arviz_0(comparison_run, tmp_path, capsys, monkeypatch):
    """On ArviZ 0.x ``--ic waic`` still ranks the models by WAIC. The same run as the module's, each fit
    replaced by its stored result (no sampling): the table's elpd_waic and p_waic equal a NumPy WAIC of the
    stored pointwise log-likelihoods, and its held-out column the LOO run's."""
    import bayes_rbfn.workflows.compare

    stored = {m: arviz_compat.read_netcdf(comparison_run / f"inference_{m}.nc") for m in MODELS}
    monkeypatch.setattr(bayes_rbfn.workflows.compare, "fit", lambda spec, *a, **k: stored[spec.name])
    out = tmp_path / "waic"
    argv = ["compare", "--models", *MODELS, *SMALL, "--ic", "waic", "--out", out]
    status, _, stderr = run_cli(argv, capsys)
    assert status == 0, stderr
    table = pd.read_csv(out / "comparison.csv", index_col="model")
    assert "elpd_waic" in table.columns and "elpd_loo" not in table.columns
    assert np.all(np.diff(table.sort_values("rank")["elpd_waic"].to_numpy()) <= 0)
    for model in MODELS:
        elpd, p = waic_reference(stored[model].log_likelihood["y"].values)
        assert_close(table.loc[model, "elpd_waic"], elpd, rtol=1e-9, atol=1e-9)
        assert_close(table.loc[model, "p_waic"], p, rtol=1e-9, atol=1e-9)
    loo_table = pd.read_csv(comparison_run / "comparison.csv", index_col="model")
    assert_close(table.loc[MODELS, "elpd_test"], loo_table.loc[MODELS, "elpd_test"])


def test_compare_refuses_an_existing_folder(comparison_run, tmp_path, capsys):
    before = sorted(p.name for p in comparison_run.iterdir())
    status, _, err = run_cli(["compare", "--models", "sor", "fitc", *SMALL, "--out", comparison_run], capsys)
    assert status == 2 and "not empty" in err and "--overwrite" in err
    assert sorted(p.name for p in comparison_run.iterdir()) == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--models", "sor"], "at least two different models", id="one-model"),
        pytest.param(["--models", "sor", "sor"], "at least two different models", id="same-model-twice"),
        pytest.param(["--models", "sor", "grouped"], "grouped models cannot be compared", id="grouped"),
        pytest.param(["--models", "sor", "gp"], "unknown model 'gp'", id="unknown-model"),
        pytest.param(["--test-fraction", "1"], "below 1", id="test-fraction-one"),
        pytest.param(["--test-fraction", "-0.1"], "must be a finite number", id="test-fraction-negative"),
        pytest.param(["--num-inducing", "500"], "distinct input", id="too-many-inducing"),
        pytest.param(["--draws", "0"], "positive whole number", id="zero-draws"),
        pytest.param(["--dataset", "nope"], "unknown data set 'nope'", id="unknown-dataset"),
    ],
)
def test_compare_bad_input(argv, message, tmp_path, capsys):
    status, out, err = run_cli(["compare", *argv, "--out", tmp_path / "res"], capsys)
    assert status == 2, err
    assert message in err and "Traceback" not in err
    assert out == ""
    assert list(tmp_path.iterdir()) == []


def test_compare_reports_a_nan_r_hat_as_unknown():
    """A one-chain fit has no r_hat (NaN in the table): the report says it is unknown, never that every
    fit has r_hat ≤ 1.01; known values and divergences are still reported."""
    nan = float("nan")
    one_chain = pd.DataFrame({"r_hat": [1.002, nan], "divergences": [0, 0]}, index=["exact", "sor"])
    text = "\n".join(convergence_lines(one_chain))
    assert "every fit has r_hat" not in text
    assert "r_hat unknown for sor" in text and "r_hat ≤ 1.01 for exact" in text
    all_one_chain = pd.DataFrame({"r_hat": [nan, nan], "divergences": [0, 3]}, index=["exact", "sor"])
    text = "\n".join(convergence_lines(all_one_chain))
    assert "every fit" not in text and "r_hat unknown for exact, sor" in text and "check sor" in text
    good = pd.DataFrame({"r_hat": [1.002, 1.004], "divergences": [0, 0]}, index=["exact", "sor"])
    assert convergence_lines(good) == ["Convergence: every fit has r_hat ≤ 1.01 and no divergences."]
    bad = pd.DataFrame({"r_hat": [1.002, 1.2], "divergences": [0, 0]}, index=["exact", "sor"])
    assert convergence_lines(bad)[0].startswith("Convergence: check sor (r_hat > 1.01")
