"""``bayes-rbfn fit DATA.csv --test TEST.csv``: predictions at the test rows, in file order, and their scores
in ``test_scores.csv`` against an independent NumPy/SciPy computation from the stored per-draw predictive
(the mixture over draws of N(f_mean, f_var + noise²)): RMSE of the mixture mean, the mean log mixture
density (logsumexp), the CRPS of the Gaussian mixture in closed form (Grimit et al. 2006, eq. (5)), and
coverage by the mixture CDF at each observation. Bad test files exit 2 with one line and write nothing.

One small CLI fit (one chain of 100 draws) serves every test that needs a result.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from reference import mixture_scores
from refusal import refuse

import bayes_rbfn.infer.fitting
from bayes_rbfn import cli, plots
from bayes_rbfn.infer.predictive import Band
from bayes_rbfn.io import arviz_compat, output

pytestmark = pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")

TINY = ["--num-inducing", "8", "--chains", "1", "--draws", "100", "--warmup", "100", "--no-plots", "--quiet"]
#: Rows of the test file: the one at MISSING has no target and is dropped (and counted).
TEST_ROWS, MISSING = 26, 7


def _frame(rng: np.random.Generator, n: int) -> pd.DataFrame:
    c1, c2 = rng.uniform(0.0, 2.0, n), rng.uniform(-1.0, 1.0, n)
    y = np.sin(2.0 * c1) + 0.5 * c2**2 + 0.1 * rng.normal(size=n)
    return pd.DataFrame({"c1": c1, "c2": c2, "y": y})


def write_data(folder: Path) -> tuple[Path, Path, pd.DataFrame]:
    """train.csv (60 rows) and test.csv (26 rows in no particular order, an extra text column, one row
    without a target); returns their paths and the test rows that are scored, in file order."""
    rng = np.random.default_rng(3)
    train, test = _frame(rng, 60), _frame(rng, TEST_ROWS)
    train.to_csv(folder / "train.csv", index=False)
    # Other columns, in another order: only the names matter.
    written = test.assign(note=[f"row {i}" for i in range(TEST_ROWS)])[["note", "y", "c2", "c1"]].copy()
    written["y"] = written["y"].astype(object)
    written.loc[MISSING, "y"] = ""
    written.to_csv(folder / "test.csv", index=False)
    return folder / "train.csv", folder / "test.csv", test.drop(index=MISSING).reset_index(drop=True)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("test_file")
    train, test, scored = write_data(folder)
    out = folder / "results"
    argv = ["fit", train, "--x", "c1", "c2", "--y", "y", "--test", test, *TINY, "--out", out]
    assert cli.main([str(a) for a in argv]) == 0
    return out, scored


def test_scores_equal_a_direct_computation_from_the_stored_draws(run):
    out, scored = run
    idata = arviz_compat.read_netcdf(out / "inference.nc")
    f_mean = idata.predictions["f_mean"].values.reshape(-1, len(scored))
    f_var = idata.predictions["f_var"].values.reshape(-1, len(scored))
    noise = idata.posterior["noise"].values.reshape(-1, 1)
    expected = mixture_scores(f_mean, np.sqrt(f_var + noise**2), scored["y"].to_numpy())
    table = pd.read_csv(out / "test_scores.csv")
    assert len(table) == 1 and table["n"][0] == len(scored)
    for key, value in expected.items():
        assert table[key][0] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert {"mae", "interval_score_50", "interval_score_80", "interval_score_95"} <= set(table)


def test_predictions_are_at_the_test_rows_in_file_order(run):
    out, scored = run
    idata = arviz_compat.read_netcdf(out / "inference.nc")
    X_test = scored[["c1", "c2"]].to_numpy()
    np.testing.assert_array_equal(idata.predictions_constant_data["X_pred"].values, X_test)
    np.testing.assert_array_equal(idata.predictions_constant_data["y_test"].values, scored["y"])
    assert idata.predictions["f_mean"].shape == (1, 100, len(scored))
    # 60 training rows of two inputs and no --model: the exact GP (docs/cli.md#several-inputs).
    assert idata.posterior.attrs["bayes_rbfn_model"] == "exact"
    predictions = pd.read_csv(out / "predictions.csv")
    np.testing.assert_array_equal(predictions[["c1", "c2"]].to_numpy(), X_test)
    np.testing.assert_array_equal(predictions["observed"].to_numpy(), scored["y"])


def test_report_and_manifest_list_the_test_scores(run):
    out, _ = run
    report = (out / "report.txt").read_text(encoding="utf-8")
    assert "Test data: file" in report and "25 rows scored (test_scores.csv" in report
    assert "Dropped 1 of 26 rows" in report  # the row without a target, counted as for the data
    scores = pd.read_csv(out / "test_scores.csv")
    assert f"RMSE {scores['rmse'][0]:.4g}" in report
    marker = json.loads((out / output.MARKER).read_text(encoding="utf-8"))
    assert "test_scores.csv" in marker["files"]


def test_predicted_against_observed_plot_of_test_data(tmp_path):
    rng = np.random.default_rng(0)
    y = rng.normal(size=20)
    band = Band(mean=y + 0.1, intervals={0.5: (y - 0.5, y + 0.5), 0.95: (y - 2.0, y + 2.0)})
    path = tmp_path / "predictive.png"
    plots.plot_predicted_vs_observed(
        path,
        X=rng.normal(size=(20, 2)),
        y=y,
        band=band,
        Z=None,
        x_names=["a", "b"],
        y_label="y",
        title="t",
        data_label="test data",
    )
    assert path.stat().st_size > 0


# --------------------------------------------------------------------------------------------------
# Bad input: exit 2, one line, nothing written (and nothing sampled)


@pytest.fixture
def no_sampling(monkeypatch, tmp_path):
    def fit(*args, **kwargs):
        raise AssertionError("fit() was called: bad input must be refused before sampling")

    monkeypatch.setattr(bayes_rbfn.infer.fitting, "fit", fit)
    monkeypatch.chdir(tmp_path)


BAD_TEST_FILES = {
    "missing-file": (None, ["--test", "missing.csv", "file not found"]),
    "missing-column": ("c1,y\n0.1,1.0\n0.2,2.0\n", ["--test", "no column 'c2'"]),
    "non-numeric": ("c1,c2,y\n0.1,0.2,1.0\n0.2,abc,2.0\n", ["--test", "column 'c2'", "non-numeric", "'abc'"]),
    "empty": ("", ["--test", "is empty"]),
    "header-only": ("c1,c2,y\n", ["--test", "no data rows"]),
    "no-usable-row": ("c1,c2,y\n0.1,0.2,\n", ["--test", "only 0 usable row(s)"]),
}


@pytest.mark.parametrize("name", list(BAD_TEST_FILES))
def test_bad_test_file_is_refused(name, no_sampling, tmp_path, capsys):
    text, needles = BAD_TEST_FILES[name]
    train, _, _ = write_data(tmp_path)
    path = tmp_path / ("missing.csv" if text is None else f"{name}.csv")
    if text is not None:
        path.write_text(text, encoding="utf-8")
    argv = ["fit", train, "--x", "c1", "c2", "--y", "y", "--test", path, "--out", "res"]
    refuse(argv, capsys, tmp_path, *needles)


def test_strict_refuses_a_test_row_with_a_missing_value(no_sampling, tmp_path, capsys):
    train, test, _ = write_data(tmp_path)
    argv = ["fit", train, "--x", "c1", "c2", "--y", "y", "--test", test, "--strict", "--out", "res"]
    refuse(argv, capsys, tmp_path, "--test", "test.csv", "strict mode")


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--x", "c1", "--holdout", "0.2"], ["--test and --holdout", "not both"]),
        (["--x", "c1", "--likelihood", "student_t", "--model", "rbfn"], ["--test", "gaussian"]),
    ],
    ids=["with-backtest", "student-t"],
)
def test_test_file_with_an_option_it_cannot_go_with_is_refused(extra, needles, no_sampling, tmp_path, capsys):
    train, test, _ = write_data(tmp_path)
    refuse(["fit", train, "--y", "y", "--test", test, "--out", "res", *extra], capsys, tmp_path, *needles)


def test_test_file_of_grouped_data_is_refused(no_sampling, tmp_path, capsys):
    train, test, _ = write_data(tmp_path)
    frame = pd.read_csv(train).assign(g=["a", "b"] * 30)
    frame.to_csv(train, index=False)
    argv = ["fit", train, "--x", "c1", "--y", "y", "--group", "g", "--test", test, "--out", "res"]
    refuse(argv, capsys, tmp_path, "--test", "grouped")


@pytest.mark.parametrize(
    ("column", "scale"),
    [("y", 1e200), ("y", 1e-100)],
    ids=["target-times-1e200", "target-times-1e-100"],
)
def test_test_file_at_scales_float64_cannot_carry_is_refused(column, scale, no_sampling, tmp_path, capsys):
    """The test file's target gets the data's scale check: refused before sampling, never scored as inf."""
    train, test, _ = write_data(tmp_path)
    frame = pd.read_csv(test)
    frame[column] *= scale
    frame.to_csv(test, index=False)
    argv = ["fit", train, "--x", "c1", "c2", "--y", "y", "--test", test, "--out", "res"]
    refuse(argv, capsys, tmp_path, f"--test {test}: column {column!r}", "rescale")


def test_scores_that_are_not_finite_are_never_written(run, monkeypatch, tmp_path, capsys):
    """Should a score still come out infinite or NaN, the run stops with one line and writes nothing.

    The fit is the module's (read back, not sampled again); the scores are made infinite.
    """
    import bayes_rbfn.infer.scores

    fitted = arviz_compat.read_netcdf(run[0] / "inference.nc")
    monkeypatch.setattr(bayes_rbfn.infer.fitting, "fit", lambda *args, **kwargs: fitted)
    real_score = bayes_rbfn.infer.scores.score

    def overflowing(*args, **kwargs):
        return {**real_score(*args, **kwargs), "rmse": np.inf, "lpd": -np.inf}

    monkeypatch.setattr(bayes_rbfn.infer.scores, "score", overflowing)
    monkeypatch.chdir(tmp_path)
    train, test, _ = write_data(tmp_path)
    argv = ["fit", train, "--x", "c1", "c2", "--y", "y", "--test", test, *TINY, "--out", "res"]
    refuse(argv, capsys, tmp_path, f"--test {test}: the scores rmse, lpd are not finite", "no results")
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan], ids=["inf", "minus-inf", "nan"])
def test_the_guard_names_each_score_that_is_not_finite(value):
    """The check before test_scores.csv and backtest.csv are written: finite scores (or none) pass."""
    from bayes_rbfn.cli.common import UserError, check_finite_scores

    with pytest.raises(UserError, match=r"^--holdout: the backtest's scores crps, lpd are not finite"):
        check_finite_scores({"n": 5.0, "crps": value, "lpd": value, "rmse": 1.0}, "--holdout: the backtest's")
    check_finite_scores({"n": 5.0, "crps": 0.5, "lpd": -1e300}, "--holdout: the backtest's")
    check_finite_scores(None, "--test test.csv: the")


def test_test_file_of_a_packaged_data_set_needs_its_columns(no_sampling, tmp_path, capsys):
    """With --dataset the test file needs the data set's own column names (snelson: x and y)."""
    _, test, _ = write_data(tmp_path)
    refuse(["fit", "--dataset", "snelson", "--test", test, "--out", "res"], capsys, tmp_path, "no column 'x'")
