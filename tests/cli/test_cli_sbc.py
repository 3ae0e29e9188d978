"""`bayes-rbfn sbc`: the output folder, the χ² statistics recomputed independently from the written
ranks with SciPy, and the bad inputs it refuses (exit status 2, nothing written)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from conftest import assert_close
from scipy.stats import chisquare

from bayes_rbfn import cli
from bayes_rbfn.io.output import MARKER

SMALL = ["--reps", "30", "--draws", "40", "--warmup", "40", "--thin", "2", "--quiet"]


def run_cli(argv, capsys):
    status = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_sbc_writes_ranks_statistics_and_plot(tmp_path, capsys):
    out = tmp_path / "sbc"
    status, stdout, err = run_cli(["sbc", "--model", "sor", *SMALL, "--out", out], capsys)
    assert status == 0, err
    assert {p.name for p in out.iterdir()} == {
        MARKER,
        "ranks.csv",
        "statistics.csv",
        "statistics.json",
        "ecdf.png",
        "report.txt",
    }
    ranks = pd.read_csv(out / "ranks.csv")
    assert list(ranks.columns) == ["lengthscale", "variance", "noise", "log_lik"]
    assert ranks.shape == (30, 4)
    L = 40 // 2
    assert ranks.to_numpy().min() >= 0 and ranks.to_numpy().max() <= L
    stats = json.loads((out / "statistics.json").read_text())
    bins = stats["bins"]
    for name in ranks.columns:
        # contiguous bins of the L + 1 possible ranks (integer edges), expected counts ∝ bin width
        edges = np.round(np.linspace(0, L + 1, bins + 1)).astype(int)
        column = ranks[name].to_numpy()
        counts = np.array([np.sum((column >= a) & (column < b)) for a, b in itertools.pairwise(edges)])
        f_exp = len(ranks) * np.diff(edges) / (L + 1)
        expected = chisquare(counts, f_exp).pvalue
        assert_close(stats["quantities"][name]["pvalue"], expected, rtol=1e-9, atol=1e-12)
    assert "Verdict" in stdout and str(out) in stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--model", "vfe"], "unknown model 'vfe'", id="model-without-sbc"),
        pytest.param(
            ["--likelihood", "poisson"],
            "--likelihood: 'poisson' needs the weight-space model rbfn",
            id="likelihood",
        ),
        pytest.param(
            ["--model", "rbfn", "--likelihood", "poisson", "--noise-scale", "2"],
            "--noise-scale needs the gaussian likelihood",
            id="noise-scale-counts",
        ),
        pytest.param(["--reps", "0"], "positive whole number", id="zero-reps"),
        pytest.param(["--thin", "50", "--draws", "40"], "--thin 50 is more than --draws 40", id="thin"),
        pytest.param(["--noise-scale", "0"], "--noise-scale", id="noise-scale"),
        pytest.param(["--num-inducing", "30", "--n", "20"], "--num-inducing 30", id="too-many-inducing"),
    ],
)
def test_sbc_bad_input(argv, message, tmp_path, capsys):
    status, out, err = run_cli(["sbc", *argv, "--out", tmp_path / "res"], capsys)
    assert status == 2
    assert message in err and "Traceback" not in err and out == ""
    assert list(tmp_path.iterdir()) == []


def test_sbc_refuses_an_existing_folder(tmp_path, capsys):
    out = tmp_path / "res"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    status, _, err = run_cli(["sbc", *SMALL, "--out", out], capsys)
    assert status == 2 and "--overwrite" in err
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
