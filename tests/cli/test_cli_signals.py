"""SIGINT and SIGTERM end the ``bayes-rbfn`` program at any moment: exit status 130 or 143 within 5 s of the
signal, one line on stderr, no traceback, and no output folder (a checkpoint folder stays only when it holds
sampled iterations, and the line then says so).

Every test runs the real program in a fresh process and signals it once. The moments: during the imports
(before ``main`` runs), while reading the CSV and choosing the inducing inputs, compiling, in warm-up, in
sampling, summarising and writing; and the two moments where a Python handler that raises cannot end the
run by itself: when the interrupt is raised inside a gc callback (Python discards it), and while the main
thread is inside a long XLA computation (no Python handler runs until it returns). The moments are chosen
by what the process prints, by the file it holds open (``/proc``), by a file that a small harness around
the CLI creates, or by a delay.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="moments are read from /proc")

#: The longest a signalled process may take to exit, in seconds.
TIMELY = 5.0

SIGNALS = [signal.SIGINT, signal.SIGTERM]


def signal_id(signum: int) -> str:
    return signal.Signals(signum).name


def env(**extra: str) -> dict:
    """The CLI's environment: this process's (conftest's XLA switches and compilation cache) and ``extra``."""
    return {**os.environ, "MPLBACKEND": "Agg", **extra}


def write_data(path: Path, n: int) -> Path:
    rng = np.random.default_rng(5)
    x = np.sort(rng.uniform(0.0, 6.0, n))
    y = np.sin(x) + 0.2 * rng.normal(size=n)
    path.write_text("t,v\n" + "".join(f"{a:.9g},{b:.9g}\n" for a, b in zip(x, y, strict=True)))
    return path


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory) -> Path:
    return write_data(tmp_path_factory.mktemp("data") / "small.csv", 60)


@pytest.fixture(scope="module")
def large_csv(tmp_path_factory) -> Path:
    """300,000 rows: reading them and choosing the inducing inputs take a moment to signal in."""
    return write_data(tmp_path_factory.mktemp("data") / "large.csv", 300_000)


def fit_argv(csv: Path, out: Path, *extra: str) -> list[str]:
    small = ["--num-inducing", "5", "--chains", "1", "--warmup", "40", "--draws", "40"]
    return ["fit", str(csv), "--x", "t", "--y", "v", *small, *extra, "--out", str(out)]


def as_module(argv: list[str]) -> list[str]:
    """The program as ``python -m bayes_rbfn``."""
    return [sys.executable, "-m", "bayes_rbfn", *argv]


class Program:
    """A ``bayes-rbfn`` process whose stderr is collected as it comes, signalled once."""

    def __init__(self, command: list[str], environment: dict | None = None) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environment or env()
        )
        self.delay: float | None = None
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        fd = self.proc.stderr.fileno()
        while chunk := os.read(fd, 1 << 16):
            with self._lock:
                self._chunks.append(chunk)

    def stderr(self) -> str:
        with self._lock:
            return b"".join(self._chunks).decode("utf-8", "replace")

    def printed(self, text: str) -> bool:
        with self._lock:
            return text.encode() in b"".join(self._chunks)

    def wait_until(self, moment: Callable[[], bool], timeout: float = 300.0, strict: bool = True) -> bool:
        """Poll ``moment`` until it holds (True); False after ``timeout`` s, a failure if ``strict``."""
        deadline = time.monotonic() + timeout
        while not moment():
            assert self.proc.poll() is None, f"the run ended before its moment: {self.stderr()[-3000:]}"
            if time.monotonic() > deadline:
                assert not strict, f"no moment within {timeout} s: {self.stderr()[-3000:]}"
                return False
            time.sleep(0.002)
        return True

    def wait_for(self, text: str, timeout: float = 300.0) -> None:
        """Until the process has printed ``text`` on stderr."""
        self.wait_until(lambda: self.printed(text), timeout)

    def handles_sigterm(self) -> bool:
        """Whether the process catches SIGTERM (Python itself catches only SIGINT): the program's handlers."""
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return False
        caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
        return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)

    def holds_open(self, path: Path) -> bool:
        folder = Path(f"/proc/{self.proc.pid}/fd")
        try:
            names = os.listdir(folder)
        except OSError:
            return False
        for name in names:
            try:
                if os.readlink(folder / name) == str(path):
                    return True
            except OSError:
                continue
        return False

    def stop(self, signum: int) -> None:
        """Send ``signum`` and wait for the process to end (killed after 60 s); :attr:`delay` is how long."""
        assert self.proc.poll() is None, f"the run ended before the signal: {self.stderr()[-3000:]}"
        sent = time.monotonic()
        self.proc.send_signal(signum)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.delay = time.monotonic() - sent
        self._reader.join(timeout=30)


def check_ended(run: Program, signum: int, out: Path, *, silent: bool = False) -> str:
    """Assert that ``run`` ended as a signal must end it; returns its one line.

    Exit status 128 + ``signum`` within :data:`TIMELY` s; stderr's last non-empty line is the only error
    line and names the signal; no traceback, no discarded exception (with ``silent``, no other line at all);
    no ``out``; its checkpoint folder only when the line says that it holds iterations; nothing else next
    to it but the hidden temporaries of ``out`` that the next run removes.
    """
    text = run.stderr()
    where = (
        f"{signal_id(signum)}: status {run.proc.returncode} after {run.delay:.2f} s; stderr:\n{text[-3000:]}"
    )
    assert run.proc.returncode == 128 + signum, where
    assert run.delay < TIMELY, where
    for word in ("Traceback", "Exception ignored", "KeyboardInterrupt"):
        assert word not in text, where
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("bayes-rbfn: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], where
    if silent:
        assert lines == errors, where
    word = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    line = errors[0]
    assert line.startswith(f"bayes-rbfn: error: {word}; "), where
    assert not out.exists(), where
    partial = out.with_name(out.name + ".partial")
    kept = "iterations are saved in" in line
    assert partial.exists() == kept, where
    if kept:
        assert os.path.realpath(partial) in line and f"--resume {os.path.realpath(out)}" in line, where
    else:
        assert "nothing was written" in line, where
    others = {p.name for p in out.parent.iterdir()} - {partial.name}
    assert all(name.startswith(f".{out.name}.tmp-") for name in others), (others, where)
    return line


# --------------------------------------------------------------------------------------------------
# Before main runs: the imports


@pytest.mark.parametrize("signum", SIGNALS, ids=signal_id)
def test_a_signal_during_the_imports_ends_the_program_with_one_line(tmp_path, small_csv, signum):
    """While ``python -m bayes_rbfn`` is still importing (seconds, before ``main`` runs): as soon as the
    program's handlers are in place (``bayes_rbfn/__init__.py``, before its own imports), and 0.25, 0.5 and
    1 s after the start. The line alone, exit at once, nothing written."""
    for i, after in enumerate((None, 0.25, 0.5, 1.0)):
        out = tmp_path / f"run{i}" / "res"
        out.parent.mkdir()
        run = Program(as_module(fit_argv(small_csv, out)))
        # The first moment the handlers are in place; the base of the delays otherwise (the interpreter's
        # own start, tens of milliseconds, comes before any code of the package).
        run.wait_until(run.handles_sigterm, timeout=1.5, strict=False)
        if after is not None:
            time.sleep(max(0.0, run.started + after - time.monotonic()))
        assert run.stderr() == "", "the imports are over"
        run.stop(signum)
        check_ended(run, signum, out, silent=True)


# --------------------------------------------------------------------------------------------------
# Where a handler that raises cannot end the run by itself

#: Runs the CLI as the program (``main()`` without arguments) after ``gc.callbacks`` gets a callback that,
#: the first time a collection starts once the CLI handles SIGTERM, creates the file sys.argv[1] and spins
#: for up to 10 s: the test's signal lands there, and Python discards the interrupt the handler raises.
IN_A_GC_CALLBACK = textwrap.dedent(
    """
    import gc, signal, sys, time
    from pathlib import Path

    ready, spun = Path(sys.argv.pop(1)), []

    def spin(phase, info):
        if spun or phase != "start" or not callable(signal.getsignal(signal.SIGTERM)):
            return
        spun.append(True)
        ready.touch()
        start = time.perf_counter()
        while time.perf_counter() - start < 10:
            pass

    gc.callbacks.append(spin)
    from bayes_rbfn.cli import main
    sys.exit(main())
    """
)

#: Runs the CLI as the program, its call of ``fit`` first running one XLA computation of about 20 s (a
#: loop calibrated on this machine), after creating the file sys.argv[1]: no Python handler can run in the
#: main thread until it returns.
INSIDE_XLA = textwrap.dedent(
    """
    import sys, time, warnings
    from pathlib import Path
    with warnings.catch_warnings():  # as main() does: this import would otherwise come before its filter
        warnings.filterwarnings("ignore", category=FutureWarning, module="arviz")
        import bayes_rbfn.infer.fitting as fitting
    from bayes_rbfn.cli import main

    ready, real_fit = Path(sys.argv.pop(1)), fitting.fit

    def busy_fit(*args, **kwargs):
        import jax
        import jax.numpy as jnp

        spin = jax.jit(lambda n: jax.lax.fori_loop(0, n, lambda i, x: jnp.sin(x) + 1.0, 0.0))
        spin(10).block_until_ready()
        start = time.perf_counter()
        spin(10**6).block_until_ready()
        n = min(int(10**6 * 20 / max(time.perf_counter() - start, 1e-4)), 2**31 - 1)
        ready.touch()
        spin(n).block_until_ready()
        return real_fit(*args, **kwargs)

    fitting.fit = busy_fit
    sys.exit(main())
    """
)


@pytest.mark.parametrize("signum", SIGNALS, ids=signal_id)
def test_an_interrupt_discarded_in_a_gc_callback_still_ends_the_run(tmp_path, small_csv, signum):
    """The handler's KeyboardInterrupt raised inside a gc callback is discarded by Python ("Exception
    ignored in ..."): it is raised again, the run ends as usual, and nothing of the discarded one shows."""
    out, ready = tmp_path / "run" / "res", tmp_path / "ready"
    out.parent.mkdir()
    argv = fit_argv(small_csv, out, "--no-plots")
    run = Program([sys.executable, "-c", IN_A_GC_CALLBACK, str(ready), *argv])
    run.wait_until(ready.exists, timeout=120)
    time.sleep(0.1)
    run.stop(signum)
    check_ended(run, signum, out)


@pytest.mark.parametrize("signum", SIGNALS, ids=signal_id)
def test_a_signal_while_the_main_thread_is_inside_xla_ends_the_run(tmp_path, small_csv, signum):
    """The main thread is inside a 20-s XLA computation, where no Python handler runs: the watchdog ends
    the process within seconds, removes the checkpoint folder (it holds no iteration) and the lock, and
    prints the one line."""
    out, ready = tmp_path / "run" / "res", tmp_path / "ready"
    out.parent.mkdir()
    argv = fit_argv(small_csv, out, "--no-plots")
    run = Program([sys.executable, "-c", INSIDE_XLA, str(ready), *argv])
    run.wait_until(ready.exists, timeout=120)
    time.sleep(0.3)
    run.stop(signum)
    assert check_ended(run, signum, out).endswith("; nothing was written")
    assert sorted(p.name for p in out.parent.iterdir()) == []


class _RaisesSigtermWhenDeleted:
    def __del__(self) -> None:
        signal.raise_signal(signal.SIGTERM)  # the handler runs in here: Python discards what it raises


def test_from_python_a_discarded_interrupt_is_raised_again_and_the_handlers_are_restored(monkeypatch, capsys):
    """``main(argv)`` in this process: SIGTERM whose interrupt is discarded (raised in a ``__del__``) still
    ends the command, with 143 and one line; the process goes on, with its own handlers and hooks back."""
    import dataclasses

    from bayes_rbfn import cli
    from bayes_rbfn.cli.common import COMMANDS

    def run(args, console) -> int:
        _RaisesSigtermWhenDeleted()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the interrupt raised again lands here
            pass
        return 0

    monkeypatch.setitem(COMMANDS, "datasets", dataclasses.replace(COMMANDS["datasets"], run=run))
    found = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), sys.unraisablehook)
    started = time.monotonic()
    assert cli.main(["datasets"]) == 143
    assert time.monotonic() - started < TIMELY
    err = capsys.readouterr().err
    assert err == "bayes-rbfn: error: terminated (SIGTERM); nothing was written\n", err
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), sys.unraisablehook) == found


# --------------------------------------------------------------------------------------------------
# Every stage of a fit, as ``python -m bayes_rbfn`` (slow: each run goes as far as its moment)


def _reading(run: Program, csv: Path, signum: int) -> None:
    # The CSV held open (or, if that was missed, the plan printed): SIGTERM a moment later.
    run.wait_until(lambda: run.holds_open(csv) or run.printed("Data: "))
    time.sleep(0.0 if signum == signal.SIGINT else 0.05)


def _choosing_inducing_inputs(run: Program, csv: Path, signum: int) -> None:
    run.wait_until(lambda: run.holds_open(csv) or run.printed("Data: "))
    time.sleep(0.4 if signum == signal.SIGINT else 0.8)


def _at(text: str, sigint_after: float, sigterm_after: float) -> Callable[[Program, Path, int], None]:
    def moment(run: Program, csv: Path, signum: int) -> None:
        run.wait_for(text)
        time.sleep(sigint_after if signum == signal.SIGINT else sigterm_after)

    return moment


#: stage → (the data, extra options, its own fresh compilation cache, the moment).
STAGES = {
    "reading": ("large", ["--no-plots"], False, _reading),
    "choosing-inducing-inputs": ("large", ["--no-plots"], False, _choosing_inducing_inputs),
    # A compilation cache of its own: the model's programs are compiled instead of loaded.
    "compiling": ("small", ["--no-plots"], True, _at("Compiling first", 0.5, 1.5)),
    # 300,000 rows and one chunk of 2,050 iterations: the main thread stays inside XLA for minutes.
    "warm-up": (
        "large",
        ["--warmup", "2000", "--draws", "50", "--checkpoint-every", "2050", "--no-plots"],
        False,
        _at("warmup:", 3.0, 5.0),
    ),
    # Chunks of 20 iterations, each saved: the checkpoint stays, and the line says so.
    "sampling": (
        "small",
        ["--warmup", "40", "--draws", "1000", "--checkpoint-every", "20", "--no-plots"],
        False,
        _at("sample:", 0.1, 0.3),
    ),
    # With the plots: the writing that follows takes seconds, so a late signal still lands before the end.
    "summarising": ("small", [], False, _at("Summarising:", 0.05, 0.25)),
    "writing": ("small", [], False, _at("Writing ", 0.05, 0.3)),
}


@pytest.mark.slow
@pytest.mark.parametrize("signum", SIGNALS, ids=signal_id)
@pytest.mark.parametrize("stage", list(STAGES))
def test_a_signal_at_each_stage_of_a_fit_ends_it_with_one_line(tmp_path, small_csv, large_csv, stage, signum):
    """``python -m bayes_rbfn fit`` signalled at ``stage`` (at other offsets for the two signals)."""
    data, options, fresh_cache, moment = STAGES[stage]
    csv = large_csv if data == "large" else small_csv
    out = tmp_path / "run" / "res"
    out.parent.mkdir()
    extra = {"BAYES_RBFN_CACHE_DIR": str(tmp_path / "cache")} if fresh_cache else {}
    run = Program(as_module(fit_argv(csv, out, *options)), env(**extra))
    moment(run, csv, signum)
    run.stop(signum)
    line = check_ended(run, signum, out)
    if stage == "sampling":
        assert "iterations are saved in" in line
