"""``bayes-rbfn fit`` over two local processes, each reading its own part of the data (``{process}`` in the
file name): both exit 0, process 0 alone writes the folder, which holds every process's rows; bad options
exit 2 with one line before any process starts its runtime.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from refusal import refuse

from bayes_rbfn.io import arviz_compat

TIMEOUT = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _fit(args: list[str], cwd) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bayes_rbfn", "fit", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli_distributed")
    gen = np.random.default_rng(0)
    x = np.sort(gen.uniform(0.0, 10.0, 200))
    y = np.sin(x) + 0.3 * gen.standard_normal(200)
    parts = [pd.DataFrame({"x": x[k::2], "y": y[k::2]}) for k in range(2)]
    for k, part in enumerate(parts):
        part.to_csv(folder / f"part-{k}.csv", index=False)
    x_test = gen.uniform(0.0, 10.0, 30)
    pd.DataFrame({"x": x_test, "y": np.sin(x_test)}).to_csv(folder / "test.csv", index=False)
    port = _free_port()
    common = ["part-{process}.csv", "--x", "x", "--y", "y", "--model", "sor", "--out", "run", "--test"]
    common += ["test.csv", "--chains", "1", "--warmup", "40", "--draws", "40", "--quiet"]
    common += ["--coordinator", f"localhost:{port}", "--num-processes", "2"]
    procs = [_fit([*common, "--process-id", str(k)], folder) for k in range(2)]
    outcome = [(p.wait(timeout=TIMEOUT), p.stderr.read()) for p in procs]
    return folder, parts, outcome


def test_both_processes_finish_and_process_0_writes_the_folder(run):
    folder, parts, outcome = run
    for k, (code, err) in enumerate(outcome):
        assert code == 0, f"process {k}: {err[-3000:]}"
    assert sorted(p.name for p in (folder / "run").iterdir() if not p.name.startswith(".")) == [
        "inference.nc",
        "report.txt",
        "summary.csv",
        "test_scores.csv",
    ]
    assert not (folder / "run.checkpoint").exists()
    idata = arviz_compat.read_netcdf(folder / "run" / "inference.nc")
    # every process's rows, in process order
    np.testing.assert_array_equal(
        idata.observed_data["y"].values, np.concatenate([p["y"].to_numpy() for p in parts])
    )
    assert idata.predictions["f_mean"].shape[-1] == 30
    scores = pd.read_csv(folder / "run" / "test_scores.csv")
    assert scores["n"].iloc[0] == 30 and np.isfinite(scores["rmse"].iloc[0])


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        pytest.param(["--num-processes", "2"], "--coordinator, --process-id", id="missing-options"),
        pytest.param(
            ["--coordinator", "localhost:1", "--num-processes", "2", "--process-id", "2"],
            "--process-id: expected 0",
            id="rank-out-of-range",
        ),
        pytest.param(
            ["--cluster", "--model", "exact"],
            "--model: a run over several processes fits the sor",
            id="model",
        ),
        pytest.param(["--cluster", "--coordinator", "h:1"], "--cluster", id="cluster-and-coordinator"),
    ],
)
def test_bad_options_exit_2_in_one_line(capsys, tmp_path, monkeypatch, extra, match):
    frame = pd.DataFrame({"x": [0.0, 1.0, 2.0, 3.0], "y": [0.0, 1.0, 0.0, 1.0]})
    frame.to_csv(tmp_path / "d.csv", index=False)
    monkeypatch.chdir(tmp_path)
    refuse(["fit", "d.csv", "--x", "x", "--y", "y", "--out", "o", *extra], capsys, tmp_path, match)
