"""Two runs on one output folder: the first holds a lock on ``OUT`` and ``OUT.partial``
for its whole run; a second run — a new fit, the same fit with ``--overwrite``, or ``--resume`` — is refused
at once with exit status 2 and a message saying the folder is in use by a live run, and the first run
finishes unharmed. A lock left by a killed run is stale (the operating system released it with the process)
and is taken over.

The same small run, alone, checks that ``--quiet`` keeps stderr empty even when ArviZ gives its daily notice.

The first run is a real ``bayes-rbfn fit`` process whose call of ``fit`` waits for a go-ahead file, so the
test decides how long it stays live; the second runs are real processes too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from bayes_rbfn import cli
from bayes_rbfn.io import arviz_compat, output


def env() -> dict:
    """The CLI's environment: this process's as it is now (conftest may have set XLA switches)."""
    return {**os.environ, "MPLBACKEND": "Agg"}


#: A real CLI run whose sampling waits until the file named by argv[1] exists.
BLOCKED_RUN = textwrap.dedent(
    """
    import sys, time, warnings
    from pathlib import Path
    with warnings.catch_warnings():  # as main() does: this import would otherwise come before its filter
        warnings.filterwarnings("ignore", category=FutureWarning, module="arviz")
        import bayes_rbfn.infer.fitting as fitting
    from bayes_rbfn.cli import main

    go, real_fit = Path(sys.argv[1]), fitting.fit
    def waiting_fit(*args, **kwargs):
        Path(sys.argv[2]).touch()  # sampling reached: the lock is held
        while not go.exists():
            time.sleep(0.05)
        return real_fit(*args, **kwargs)
    fitting.fit = waiting_fit
    sys.exit(main(sys.argv[3:]))
    """
)


def write_data(path: Path) -> Path:
    rng = np.random.default_rng(3)
    x = np.sort(rng.uniform(0.0, 6.0, 30))
    y = np.sin(x) + 0.2 * rng.normal(size=30)
    path.write_text("t,v\n" + "".join(f"{a:.17g},{b:.17g}\n" for a, b in zip(x, y, strict=True)))
    return path


def fit_argv(csv: Path, out: Path, *extra: str) -> list[str]:
    small = ["--num-inducing", "5", "--chains", "1", "--warmup", "30", "--draws", "30", "--no-plots"]
    return ["fit", str(csv), "--x", "t", "--y", "v", *small, "--quiet", "--out", str(out), *extra]


def test_quiet_fit_prints_nothing_when_arviz_gives_its_daily_notice(tmp_path):
    """--quiet writes nothing to stderr, even on the day's first import of ArviZ, which (0.23.4) warns then
    that 1.x will change its API: the CLI imports it lazily, mid-run. A fresh cache folder makes ArviZ give
    the notice; a plain import in another fresh folder shows that it does, so the test cannot pass for want
    of it (the lock test below failed so on 26 Nov 2026, its run having started after midnight). ArviZ 1.x
    gives no notice; there the run must be as silent."""
    csv, out = write_data(tmp_path / "data.csv"), tmp_path / "res"

    def fresh_cache(name: str) -> dict:
        return {**env(), "XDG_CACHE_HOME": str(tmp_path / name)}

    control = subprocess.run(
        [sys.executable, "-c", "import arviz"], capture_output=True, text=True, env=fresh_cache("control")
    )
    if not arviz_compat.ARVIZ_1:
        assert "ArviZ is undergoing a major refactor" in control.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "bayes_rbfn", *fit_argv(csv, out)],
        capture_output=True,
        text=True,
        env=fresh_cache("cli"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == "", proc.stderr  # progress is off and the report goes to stdout
    assert (out / "inference.nc").is_file()


def start_blocked(tmp_path: Path, argv: list[str]) -> tuple[subprocess.Popen, Path]:
    go, reached = tmp_path / "go", tmp_path / "reached"
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_RUN, str(go), str(reached), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 120
    while not reached.exists():
        assert proc.poll() is None, f"the first run ended early: {proc.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, "the first run did not reach sampling within 120 s"
        time.sleep(0.05)
    return proc, go


def second_run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bayes_rbfn", *argv],
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
        cwd=cwd,
    )


def test_a_second_run_on_a_live_output_folder_is_refused_and_the_first_finishes(tmp_path):
    """Also when the second run names the folder through a symbolic link (the lock is the real path's)."""
    csv = write_data(tmp_path / "data.csv")
    out = tmp_path / "res"
    out.mkdir()  # an empty folder, and a link to it
    (tmp_path / "olink").symlink_to("res")
    first, go = start_blocked(tmp_path, fit_argv(csv, out))
    try:
        record = (tmp_path / "res.partial" / "run.json").read_bytes()
        link = tmp_path / "olink"
        for argv in (
            fit_argv(csv, out),
            fit_argv(csv, out, "--overwrite"),
            ["fit", "--resume", str(out)],
            fit_argv(csv, link),
        ):
            started = time.monotonic()
            proc = second_run(argv, tmp_path)
            assert proc.returncode == 2, (argv, proc.stderr[-2000:])
            errors = [line for line in proc.stderr.splitlines() if line.startswith("bayes-rbfn: error: ")]
            assert len(errors) == 1 and "in use by a live run" in errors[0], proc.stderr
            assert f"pid {first.pid}" in errors[0]
            assert "Traceback" not in proc.stderr
            assert time.monotonic() - started < 60, "refused only after sampling"
            assert first.poll() is None, "the second run harmed the first"
            assert (tmp_path / "res.partial" / "run.json").read_bytes() == record
        go.touch()
        _, stderr = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, stderr[-3000:]
    assert stderr == "", "--quiet (one chain): not even ArviZ's shape warning"
    assert (out / "inference.nc").is_file() and (out / output.MARKER).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "go", "olink", "reached", "res"]
    assert (tmp_path / "olink").is_symlink()


def test_the_lock_of_a_killed_run_is_stale_and_taken_over(tmp_path, capsys):
    csv = write_data(tmp_path / "data.csv")
    out = tmp_path / "res"
    first, _ = start_blocked(tmp_path, fit_argv(csv, out))
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    lock = tmp_path / ".res.lock"
    assert lock.is_file() and str(first.pid) in lock.read_text()  # left behind, its flock released
    # A killed temporary of the output (as SIGKILL while writing leaves) is cleaned up by the next run.
    (tmp_path / ".res.tmp-0badc0de").mkdir()
    (tmp_path / ".res.tmp-0badc0de" / "inference.nc").write_bytes(b"half")

    assert cli.main(fit_argv(csv, out)) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert (out / "inference.nc").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "reached", "res"]


def test_the_lock_in_one_process(tmp_path):
    """Two holders are refused even within one process (flock is per open file); the file goes at the end."""
    out = tmp_path / "res"
    with output.output_lock(out) as lock:
        assert lock == tmp_path / ".res.lock"
        with pytest.raises(output.OutputInUse, match=rf"in use by a live run \(pid {os.getpid()} "):
            with output.output_lock(out):
                pass
    assert not lock.exists()
    with output.output_lock(out):  # free again
        pass
