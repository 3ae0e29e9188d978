"""``bayes-rbfn fit`` over two local processes, each reading its own part of the data (``{process}`` in the
file name): both exit 0, process 0 alone writes the folder, which holds every process's rows; bad options,
data and output folders exit 2 with one line before any process joins the others (or, for what depends on
every process's rows, before sampling); a process whose peer never starts says that it waits, then gives
up with status 75.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from refusal import listing, refuse

from bayes_rbfn import runtime
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


#: Options of a process of two whose coordinator's port none of these tests opens.
TWO = ["--coordinator", "localhost:23405", "--num-processes", "2"]

#: The variables of the clusters JAX detects (SLURM, Open MPI, Kubernetes), removed for a run "outside".
CLUSTER_VARIABLES = [
    "SLURM_JOB_ID",
    "SLURM_STEP_NODELIST",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "OMPI_MCA_orte_hnp_uri",
    "OMPI_MCA_ess_base_jobid",
    "PMIX_NAMESPACE",
    "KUBERNETES_SERVICE_HOST",
    "JAX_COORDINATOR_ADDRESS",
]


@pytest.fixture
def no_join(monkeypatch):
    """Fail the test if the command gets as far as joining the other processes; no cluster around."""

    def join(*args, **kwargs):
        raise AssertionError("the command joined the other processes before refusing")

    monkeypatch.setattr(runtime, "initialize_distributed", join)
    for name in CLUSTER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _refuse_first(argv, capsys, tmp_path, start: str) -> None:
    """``refuse``, and the message starts with ``start``."""
    line = refuse(argv, capsys, tmp_path, start)
    assert line.startswith("bayes-rbfn: error: " + start), line


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
        pytest.param(
            ["--coordinator", "localhost", "--num-processes", "2", "--process-id", "0"],
            "--coordinator: expected HOST:PORT",
            id="coordinator-without-port",
        ),
        pytest.param(
            ["--coordinator", ":23405", "--num-processes", "2", "--process-id", "1"],
            "--coordinator: expected HOST:PORT",
            id="coordinator-without-host",
        ),
        pytest.param(
            ["--coordinator", "localhost:99999", "--num-processes", "2", "--process-id", "1"],
            "--coordinator localhost:99999: the port must be a number in 1 … 65535",
            id="port-out-of-range",
        ),
        pytest.param(
            ["--coordinator", "localhost:23405", "--num-processes", str(2**63), "--process-id", "0"],
            "--num-processes: expected 1 … 65,536",
            id="num-processes-2**63",
        ),
        pytest.param(
            [*TWO, "--process-id", "1", "--join-timeout", "0"],
            "--join-timeout: expected 1 … 86400 seconds",
            id="join-timeout-0",
        ),
        pytest.param(
            [*TWO, "--process-id", "1", "--join-timeout", str(2**63)],
            "--join-timeout: expected 1 … 86400 seconds",
            id="join-timeout-2**63",
        ),
        pytest.param(
            ["--join-timeout", "5"],
            "--coordinator, --num-processes, --process-id: a run over several processes needs",
            id="join-timeout-alone",
        ),
        pytest.param(["--cluster"], "--cluster: no cluster found", id="cluster-outside-a-cluster"),
    ],
)
def test_bad_options_exit_2_in_one_line(capsys, tmp_path, monkeypatch, no_join, extra, match):
    frame = pd.DataFrame({"x": [0.0, 1.0, 2.0, 3.0], "y": [0.0, 1.0, 0.0, 1.0]})
    frame.to_csv(tmp_path / "d.csv", index=False)
    monkeypatch.chdir(tmp_path)
    _refuse_first(["fit", "d.csv", "--x", "x", "--y", "y", "--out", "o", *extra], capsys, tmp_path, match)


def _parts(folder, rows: int = 100, processes: int = 2) -> None:
    """part-0.csv, part-1.csv, …: ``rows`` rows of one input in all, split between the processes."""
    gen = np.random.default_rng(1)
    x = np.sort(gen.uniform(0.0, 10.0, rows))
    y = np.sin(x) + 0.3 * gen.standard_normal(rows)
    for k in range(processes):
        pd.DataFrame({"x": x[k::processes], "y": y[k::processes]}).to_csv(
            folder / f"part-{k}.csv", index=False
        )


@pytest.mark.parametrize(
    ("rank", "overwrite", "match"),
    [
        pytest.param(0, [], "output folder o: exists and is not empty", id="process-0"),
        pytest.param(1, [], "output folder o: exists and is not empty", id="process-1"),
        pytest.param(
            0,
            ["--overwrite"],
            "output folder o: holds notes.txt, which this program did not write",
            id="overwrite",
        ),
    ],
)
def test_foreign_output_folder_is_refused_before_joining(
    capsys, tmp_path, monkeypatch, no_join, rank, overwrite, match
):
    _parts(tmp_path)
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "notes.txt").write_text("mine\n")
    monkeypatch.chdir(tmp_path)
    argv = ["fit", "part-{process}.csv", "--x", "x", "--y", "y", "--out", "o", *overwrite]
    argv += ["--coordinator", f"localhost:{_free_port()}", "--num-processes", "2", "--process-id", str(rank)]
    _refuse_first(argv, capsys, tmp_path, match)


def test_cluster_rank_comes_from_the_environment_before_joining(capsys, tmp_path, monkeypatch, no_join):
    # A SLURM task of rank 1 reads part-1.csv (there is no part-0.csv) and refuses the foreign folder.
    _parts(tmp_path)
    (tmp_path / "part-0.csv").unlink()
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "notes.txt").write_text("mine\n")
    slurm = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "localhost", "SLURM_NTASKS": "2"}
    for name, value in {**slurm, "SLURM_PROCID": "1", "SLURM_LOCALID": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    argv = ["fit", "part-{process}.csv", "--x", "x", "--y", "y", "--out", "o", "--cluster"]
    _refuse_first(argv, capsys, tmp_path, "output folder o: exists and is not empty")


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"still running after {timeout} s: {err[-3000:]}")
    return proc.returncode, err


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("bayes-rbfn: error: ")]
    assert len(errors) == 1, err[-3000:]
    return errors[0]


def test_more_inducing_inputs_than_rows_exit_2_before_sampling(tmp_path):
    # Known only once every process's rows are in: checked right after joining, the same in every process.
    _parts(tmp_path, processes=1)
    before = listing(tmp_path)
    argv = ["part-{process}.csv", "--x", "x", "--y", "y", "--out", "o", "--num-inducing", "1000"]
    argv += ["--chains", "1", "--coordinator", f"localhost:{_free_port()}", "--num-processes", "1"]
    code, err = _finish(_fit([*argv, "--process-id", "0"], tmp_path), TIMEOUT)
    line = _one_error_line(err)
    assert code == 2, err[-3000:]
    assert line.startswith("bayes-rbfn: error: --num-inducing 1000 is more than the 100 distinct"), line
    assert listing(tmp_path) == before, "something was written"


@pytest.mark.parametrize(
    ("rank", "absent"),
    [
        pytest.param(0, "process 1 never joined", id="process-0"),
        pytest.param(1, "process 0, the coordinator, never answered", id="process-1"),
    ],
)
def test_a_process_whose_peer_never_starts_says_so_and_gives_up(tmp_path, rank, absent):
    _parts(tmp_path)
    before = listing(tmp_path)
    address = f"localhost:{_free_port()}"
    argv = ["part-{process}.csv", "--x", "x", "--y", "y", "--out", "o", "--chains", "1", "--quiet"]
    argv += [
        "--coordinator",
        address,
        "--num-processes",
        "2",
        "--process-id",
        str(rank),
        "--join-timeout",
        "3",
    ]
    code, err = _finish(_fit(argv, tmp_path), 90)
    line = _one_error_line(err)
    assert code == 75, err[-3000:]
    waiting = f"process {rank} of 2: waiting for the other process at {address} (gives up after 3 s; "
    waiting += "--join-timeout)"
    assert waiting in err.splitlines(), err[-3000:]
    assert line.startswith(
        f"bayes-rbfn: error: process {rank} of 2: gave up after 3 s (--join-timeout): {absent} at {address}"
    ), line
    assert listing(tmp_path) == before, "something was written"
