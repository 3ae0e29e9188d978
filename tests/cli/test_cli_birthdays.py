"""``bayes-rbfn fit --dataset birthdays``: the Birthdays model's output folder, and its refusals.

One short fit (the last year, two chains of 5 + 5 from the prior median) serves the folder's checks: the
files of the contract; ``inference.nc``'s groups with one LOO conditional per day and draw and the
components at the stored draws; ``predictions.csv`` whose fit is the sum of its components and whose
births are the packaged file's; a report naming R-hat, divergences, PSIS-LOO and LOO-R². Options that
choose another model, columns of a CSV file (``--x``, ``--y``, ``--group``), and ``--years`` out of range or
without the data set, exit 2 and write nothing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from refusal import refuse

from bayes_rbfn import cli
from bayes_rbfn.io import arviz_compat
from bayes_rbfn.models import birthdays as B

pytestmark = pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")

SHORT = ["--years", "1", "--chains", "2", "--warmup", "5", "--draws", "5", "--init", "median"]
SHORT += ["--max-tree-depth", "3", "--quiet"]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    folder = tmp_path_factory.mktemp("birthdays") / "results"
    assert cli.main(["fit", "--dataset", "birthdays", *SHORT, "--out", str(folder)]) == 0
    return folder


def test_folder_holds_the_contract_files(out):
    expected = {"inference.nc", "summary.csv", "predictions.csv", "report.txt"}
    expected |= {"trace.png", "rank.png", "birthdays.png"}
    assert {p.name for p in out.iterdir() if not p.name.startswith(".")} == expected
    report = (out / "report.txt").read_text()
    for needle in ("r_hat", "Divergent transitions", "PSIS-LOO", "LOO-R²", "366 days"):
        assert needle in report, needle
    summary = pd.read_csv(out / "summary.csv", index_col="parameter")
    assert list(summary.index) == list(B.HYPERPARAMETERS)


def test_inference_data_groups_and_shapes(out):
    idata = arviz_compat.read_netcdf(out / "inference.nc")
    for group in ("posterior", "sample_stats", "log_likelihood", "observed_data", "constant_data"):
        assert group in arviz_compat.groups(idata), group
    assert idata.log_likelihood["y"].shape == (2, 5, 366)
    assert np.all(np.isfinite(idata.log_likelihood["y"].values))
    assert 0.0 < idata.log_likelihood.attrs["loo_r2"] < 1.0
    assert idata.posterior["week_rbfn_u"].shape == (2, 5, 6)
    pred = idata.predictions
    assert pred["trend"].shape[-1] == 366 and pred["day_of_year_effect"].shape[-1] == 366
    assert list(pred["weekday"].values) == ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


def test_predictions_csv_holds_the_data_and_a_fit_that_explains_them(out):
    """The births and relative births are the packaged file's; the fit (the sum of the components'
    posterior means) explains most of the days' variation: its R² against the data is above 0.8 (a fit of
    one year by a model whose day-of-year effects alone can absorb it; a wrong sign or scale of any
    component, or a misaligned day, fails this)."""
    table = pd.read_csv(out / "predictions.csv")
    frame = pd.read_csv(B.DATA)
    last = frame[frame["year"] == 1988]
    assert len(table) == len(last) == 366
    assert np.array_equal(table["births"].to_numpy(), last["births"].to_numpy())
    relative = last["births"].to_numpy() / last["births"].mean()
    np.testing.assert_allclose(table["relative"], relative, rtol=1e-12)
    residual = relative - table["fit"].to_numpy()
    assert 1.0 - residual.var() / relative.var() > 0.8


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--kernel", "se"], ["--kernel", "its own model"]),
        (["--model", "sor", "--num-inducing", "20"], ["--model, --num-inducing"]),
        (["--years", "21"], ["--years: expected 1 … 20"]),
        (["--x", "day"], ["--x: the birthdays data set has its own inputs"]),
        (
            ["--x", "day", "--y", "births", "--group", "weekday"],
            ["--x, --y, --group: the birthdays data set"],
        ),
    ],
    ids=["kernel", "model-and-inducing", "years-out-of-range", "x-column", "x-y-and-group-columns"],
)
def test_options_that_do_not_apply_are_refused(extra, needles, capsys, tmp_path, monkeypatch):
    import bayes_rbfn.workflows.birthdays

    def fit_birthdays(*args, **kwargs):
        raise AssertionError("fit_birthdays() was called: bad input must be refused before sampling")

    monkeypatch.setattr(bayes_rbfn.workflows.birthdays, "fit_birthdays", fit_birthdays)
    argv = ["fit", "--dataset", "birthdays", *extra, "--out", tmp_path / "out"]
    refuse(argv, capsys, tmp_path, *needles)


def test_years_needs_the_birthdays_data(capsys, tmp_path):
    refuse(["fit", "--dataset", "coal", "--years", "2", "--out", tmp_path / "o"], capsys, tmp_path, "--years")
    argv = ["compare", "--dataset", "birthdays", "--out", tmp_path / "o"]
    refuse(argv, capsys, tmp_path, "--dataset birthdays")


@pytest.mark.parametrize(
    "given, expected",
    [([], 0.95), (["--target-accept", "0.8"], 0.8)],
    ids=["default-0.95", "given-0.8"],
)
def test_target_acceptance_defaults_to_the_case_studys(tmp_path, given, expected):
    from bayes_rbfn.cli import birthdays as birthdays_cli

    argv = ["fit", "--dataset", "birthdays", "--years", "1", *given, "--out", str(tmp_path / "out")]
    plan = birthdays_cli.plan(cli.build_parser().parse_args(argv))
    assert plan.sampler.target_accept == expected
