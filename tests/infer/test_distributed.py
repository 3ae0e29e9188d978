"""The sharded pass on JAX's multi-process runtime: two local processes, each holding half of the data.

Each test starts ``distributed_worker.py`` as two processes joined by
:func:`bayes_rbfn.runtime.initialize_distributed` (a coordinator on localhost, CPU collectives through
Gloo, one CPU device each) and as one process holding all the data on two CPU devices, the reference: the
same mesh of two devices, so the same fixed block order of the sums. What is proved:

* the SoR log density and its gradient, the LOO pass and the predictive moments at fixed hyperparameters
  equal the single-process values to 1e-12 relative;
* ``fit("sor", X_local, y_local, shard=True)`` gives the single-process sharded fit's draws, LOO values,
  predictions and replicates (the same chain in both processes);
* when one process dies mid-run the other stops within a bounded time with an error that says so, and
  the checkpoint process 0 wrote resumes to the uninterrupted run's draws;
* prediction inputs that differ between the processes are refused, naming X_pred.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

WORKER = Path(__file__).with_name("distributed_worker.py")
#: Seconds any one run of the worker may take (compiling included).
RUN_TIMEOUT = 240
RTOL = 1e-12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _start(task: str, out: Path, rank: int, processes: int, port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, str(WORKER), task, str(out), str(rank), str(processes), str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _run(task: str, out: Path, processes: int) -> list[tuple[int, str]]:
    """Run the worker as ``processes`` processes; (return code, stderr) of each, in rank order."""
    port = _free_port()
    procs = [_start(task, out, rank, processes, port) for rank in range(processes)]
    results = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail(f"{task}: a process did not finish within {RUN_TIMEOUT} s")
        results.append((proc.returncode, err))
    return results


def _check_ran(results: list[tuple[int, str]], task: str) -> None:
    for rank, (code, err) in enumerate(results):
        assert code == 0, f"{task}, process {rank} exited {code}:\n{err[-3000:]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("distributed")
    (folder / "one").mkdir()
    (folder / "two").mkdir()
    _check_ran(_run("all", folder / "one" / "all.npz", 1), "all, one process")
    _check_ran(_run("all", folder / "two" / "all.npz", 2), "all, two processes")
    return {
        "folder": folder,
        "one": dict(np.load(folder / "one" / "all.npz")),
        "two": dict(np.load(folder / "two" / "all.npz")),
    }


@pytest.mark.parametrize("name", ["value", "grad", "loo", "mean", "var"])
def test_passes_across_two_processes_equal_one_process(runs, name):
    two, one = runs["two"][name], runs["one"][name]
    assert two.shape == one.shape
    np.testing.assert_allclose(two, one, rtol=RTOL, atol=0)


def test_fit_across_two_processes_gives_the_single_process_draws(runs):
    two, one = runs["two"], runs["one"]
    names = [k for k in one if k.startswith("posterior_")]
    assert {"posterior_lengthscale", "posterior_variance", "posterior_noise"} <= set(names)
    for name in [*names, "log_likelihood", "f_mean", "y_rep"]:
        np.testing.assert_allclose(two[name], one[name], rtol=1e-10, atol=0, err_msg=name)
    np.testing.assert_array_equal(two["observed"], one["observed"])


def test_a_process_that_dies_stops_the_other_and_the_checkpoint_resumes(runs):
    folder = runs["folder"] / "die"
    folder.mkdir()
    start = time.monotonic()
    results = _run("die", folder / "die.npz", 2)
    seconds = time.monotonic() - start
    (code0, err0), (code1, _) = results
    assert code1 == 3  # the worker's own exit
    assert code0 != 0
    assert "another process of the run stopped" in err0, err0[-3000:]
    assert seconds < RUN_TIMEOUT
    assert (folder / "checkpoint" / "checkpoint.json").exists()
    _check_ran(_run("resume", folder / "resume.npz", 2), "resume")
    resumed = dict(np.load(folder / "resume.npz"))
    for name in [k for k in resumed if k.startswith("posterior_")]:
        np.testing.assert_allclose(resumed[name], runs["one"][name], rtol=1e-10, atol=0, err_msg=name)


def test_prediction_inputs_that_differ_between_processes_are_refused(runs):
    assert "X_pred: differs between the processes" in str(runs["two"]["differ"])
    assert "X_pred: differs" not in str(runs["one"]["differ"])  # one process: nothing to differ from
