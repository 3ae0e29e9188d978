"""The entry point, ``bayes-rbfn`` (also ``python -m bayes_rbfn``): parse, dispatch, map errors to exit codes.

Exit status: 0 on success, 2 for a user error (bad option, file, column or value; the message says what and
where, with no traceback, and nothing is written), 74 when the system refuses to store a file (disk full,
quota, read-only or I/O error; the message says what was kept, e.g. the sampling for ``--resume``), 130 after
Ctrl-C (SIGINT) and 143 after SIGTERM, which is handled as Ctrl-C. An interrupted run writes nothing: results
are assembled in a hidden temporary folder that becomes the output folder only when complete; a fit's
checkpoint that holds sampled iterations is kept, and the message says so. Any other exception is a bug and
shows its traceback.

Signals, in the program (``bayes-rbfn``, ``python -m bayes_rbfn``, or :func:`main` called without ``argv``):
from its start to its exit, the first SIGINT or SIGTERM ends it within seconds, with its status and one line
on stderr, no traceback.

* Before :func:`main` runs (the imports take seconds), ``bayes_rbfn/__init__.py``'s handler prints the line
  and exits at once: nothing is written yet. Only the interpreter's own start, before any code of the
  package runs (tens of milliseconds), is left to Python's defaults.
* While :func:`main` runs, the first signal raises KeyboardInterrupt in the main thread; the run removes
  what it had started and prints the line, and the process ends (``os._exit``, after flushing its output:
  the interpreter's own exit takes seconds with XLA loaded). Signals after the first do not interrupt that.
* Python discards an exception raised in a gc callback, a ``__del__`` or a weakref callback, where the
  handler may happen to run: the interrupt is then raised again (and the discarded one is not reported).
* A watchdog thread is woken by the signal itself (``signal.set_wakeup_fd``), also while the main thread is
  inside a long XLA call, where no Python handler can run. If the process is still running
  :data:`_GRACE` seconds after the first signal, it ends it with ``os._exit``: it removes a fit's
  checkpoint folder that holds no iteration (one that holds iterations is kept, and the line says so) and
  the lock of the output folder, and prints the line. The hidden temporaries of an output folder
  (``.OUT.tmp-*``) may stay; the next run on that folder removes them, as after ``kill -9``. The output
  folder itself is complete or absent.
* After :func:`main` has returned, both signals are ignored while the interpreter exits.

Called with ``argv`` (from Python), :func:`main` also raises KeyboardInterrupt on the first signal (again if
it was discarded) but never ends the caller's process, and restores the handlers it found when it returns.
"""

from __future__ import annotations

import _thread
import argparse
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from bayes_rbfn import runtime

# The subcommands register themselves in COMMANDS when imported, in the order --help lists them.
from bayes_rbfn.cli import datasets, fit, compare, sbc  # noqa: F401  isort: skip
from bayes_rbfn.cli.common import (
    COMMANDS,
    EXIT_INTERRUPTED,
    EXIT_STORAGE,
    EXIT_TERMINATED,
    EXIT_USAGE,
    PROG,
    Console,
    Interrupted,
    StorageError,
    UsageError,
    UserError,
    build_parser,
    jax_backend_started,
)
from bayes_rbfn.cli.options import DEFAULT_CHAINS
from bayes_rbfn.cli.resume import RUN_RECORD, interrupted, partial_dir
from bayes_rbfn.io.reader import InputError

__all__ = ["main"]


def _scan_chains(argv: Sequence[str]) -> int:
    """The value of ``--chains`` in ``argv`` (default if absent or malformed: argparse reports that).

    With ``--resume DIR``, the value in the interrupted run's saved options, so that it gets the same
    devices.
    """
    for i, arg in enumerate(argv):
        folder = None
        if arg == "--resume" and i + 1 < len(argv):
            folder = Path(argv[i + 1])
        elif arg.startswith("--resume="):
            folder = Path(arg.split("=", 1)[1])
        if folder is not None:
            for candidate in (folder, partial_dir(folder)):
                try:
                    saved = json.loads((candidate / RUN_RECORD).read_text(encoding="utf-8"))["argv"]
                    return _scan_chains([str(a) for a in saved if not str(a).startswith("--resume")])
                except (OSError, ValueError, KeyError, TypeError):
                    continue
    for i, arg in enumerate(argv):
        text = None
        if arg == "--chains" and i + 1 < len(argv):
            text = argv[i + 1]
        elif arg.startswith("--chains="):
            text = arg.split("=", 1)[1]
        if text is not None:
            try:
                return max(1, int(text))
            except ValueError:
                return DEFAULT_CHAINS
    return DEFAULT_CHAINS


#: Seconds the program has after the first SIGINT or SIGTERM to end by itself, before the watchdog ends it.
_GRACE = 2.5

#: Seconds the watchdog gives to finding what the run keeps (a fit's checkpoint) before a plainer message.
_FINDING = 1.2

#: Seconds after the first signal at which the process ends even though its line was printed (a slow exit).
_LAST = 4.5

#: The line of a run interrupted before it kept anything.
_NOTHING = "interrupted; nothing was written"

#: What the watchdog's socket carries besides the signal numbers that ``set_wakeup_fd`` writes.
_WAKE, _STOP = b"\x00", b"\xff"


class _Signals:
    """SIGINT and SIGTERM as one Ctrl-C, while :func:`main` runs (see the module's docstring).

    Args:
        program: whether :func:`main` is the program (called without ``argv``): the process may then be
            ended after a signal, and both signals stay ignored after :func:`main` returns.
    """

    def __init__(self, program: bool) -> None:
        self.program = program
        #: The first signal received (None: none yet).
        self.received: int | None = None
        self.previous: dict = {}
        #: Called by the watchdog (in a thread of its own) for the run's line: what the run keeps.
        self.finder: Callable[[], str] | None = None
        #: The watchdog's line when :attr:`finder` gives none in time.
        self.fallback = _NOTHING
        self._lock = threading.RLock()  # re-entrant: the handler runs in the main thread, at any bytecode
        self._first_at: float | None = None
        self._raised: BaseException | None = None  # the interrupt raised, not yet reported
        self._again = False  # that interrupt was discarded: raise another
        self._asked = False  # the watchdog has asked the main thread to (interrupt_main)
        self._reported = False  # the end of the run is being reported (by main or the watchdog)
        self._forced = False  # by the watchdog
        self._done: int | None = None  # the status main returned (program)
        self._hooks: tuple = ()
        self._socket: tuple[socket.socket, socket.socket] | None = None
        self._watcher: threading.Thread | None = None
        if threading.current_thread() is not threading.main_thread():
            return  # handlers are the main thread's
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)
        self._hooks = (sys.unraisablehook, sys.excepthook)
        sys.unraisablehook = self._unraisable
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        self._socket = (reader, writer)
        if program:
            sys.excepthook = self._uncaught
            signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._watcher = threading.Thread(target=self._watch, name="bayes-rbfn signals", daemon=True)
        self._watcher.start()

    def status(self) -> int:
        """The exit status of an interrupted run: 143 after SIGTERM, else 130."""
        return EXIT_TERMINATED if self.received == signal.SIGTERM else EXIT_INTERRUPTED

    def word(self, message: str) -> str:
        """``message`` (which starts "interrupted"), naming SIGTERM when that ended the run."""
        if self.received != signal.SIGTERM:
            return message
        return "terminated (SIGTERM)" + message.removeprefix("interrupted")

    def report(self, console: Console, message: str, status: int) -> int:
        """Print the one-line ``message`` and return ``status``, unless the watchdog is ending the run.

        When it is, wait for it: it prints the line and ends the process.
        """
        with self._lock:
            mine = not self._forced
            self._reported = True
        if not mine:
            while True:
                time.sleep(1)
        console.error(message)
        return status

    def release(self, status: int | None) -> None:
        """Stop handling the signals as :func:`main` returns ``status`` (None: with an exception).

        In the program, both are ignored from now on (the interpreter would reset its handlers to the
        default, killing the process, while it shuts down), and after a signal the process ends here, with
        ``status``: the run has removed what it started and printed its line, and the interpreter's own
        exit (seconds with XLA loaded) is skipped. From Python, the handlers and hooks found are restored.
        """
        with self._lock:
            forced = self._forced
            self._done = self.status() if status is None else status
            self._reported = True
        if forced:  # the watchdog prints the line and ends the process
            while True:
                time.sleep(1)
        for sig, handler in self.previous.items():
            if self.program:
                signal.signal(sig, signal.SIG_IGN)
            else:
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if self.program and self.received is not None:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(self._done)
        if self._hooks and sys.unraisablehook == self._unraisable:
            sys.unraisablehook = self._hooks[0]
        if self._socket is not None:
            # No thread of ours outlives main: the program's interpreter exits without it.
            if self.program:
                signal.set_wakeup_fd(-1)
            self._send(_STOP)
            if self._watcher is not None:
                self._watcher.join(timeout=5)
            for end in self._socket:
                end.close()
            self._socket = None

    def _note(self, signum: int) -> None:
        with self._lock:
            if self.received is None:
                self.received, self._first_at = signum, time.monotonic()
                self._send(_WAKE)  # the watchdog's clock starts

    def _handle(self, signum: int, frame: object) -> None:
        del frame
        with self._lock:
            self._note(signum)
            if self._reported or (self._raised is not None and not self._again):
                return  # the run is ending already
            self._again = self._asked = False
            self._raised = KeyboardInterrupt()
            raised = self._raised
        raise raised

    def _unraisable(self, unraisable: object) -> None:
        """sys.unraisablehook: raise a discarded interrupt again; after a signal, the program says no more."""
        if getattr(unraisable, "exc_value", None) is not None and unraisable.exc_value is self._raised:
            with self._lock:
                if not self._reported:
                    self._again = True
                    self._send(_WAKE)  # the watchdog raises it again, from outside this hook
            return
        if self.program and self.received is not None:
            return
        (self._hooks[0] if self._hooks else sys.__unraisablehook__)(unraisable)

    def _uncaught(self, kind: type, value: BaseException, tb: object) -> None:
        """sys.excepthook of the program: after a signal, the run's line instead of a traceback."""
        if self.received is None:
            self._hooks[1](kind, value, tb)
            return
        with self._lock:
            mine = not self._reported
            self._reported = True
        if mine:
            self._say(self._forced_line())
        os._exit(self.status())

    def _send(self, byte: bytes) -> None:
        if self._socket is not None:
            try:
                self._socket[1].send(byte)
            except OSError:  # full (it is woken already) or closed
                pass

    def _watch(self) -> None:
        """The watchdog thread: raises a discarded interrupt again; in the program, ends a late exit."""
        assert self._socket is not None
        reader = self._socket[0]
        while True:
            timeout = None
            if self.program and self._first_at is not None:
                limit = _LAST if self._reported else _GRACE
                timeout = max(0.0, self._first_at + limit - time.monotonic())
            ready, _, _ = select.select([reader], [], [], timeout)
            if ready:
                try:
                    data = reader.recv(512)
                except OSError:
                    return
                if not data or _STOP in data:
                    return
                for byte in data:
                    if byte in (signal.SIGINT, signal.SIGTERM) and self.program:
                        self._note(byte)
            with self._lock:
                again = self._again and not self._asked and not self._reported and self.received is not None
                self._asked = self._asked or again
            if again:  # once: it writes to the wakeup socket too
                _thread.interrupt_main(self.received)
            if self.program and self._first_at is not None:
                self._expire()

    def _expire(self) -> None:
        assert self._first_at is not None
        late = time.monotonic() - self._first_at
        with self._lock:
            if late < _GRACE or (self._reported and late < _LAST):
                return
            mine = not self._reported
            self._reported = self._forced = True
            status = self._done if self._done is not None and not mine else self.status()
        if mine:
            self._say(self._forced_line())
        os._exit(status)

    def _forced_line(self) -> str:
        """The run's line, from :attr:`finder` given :data:`_FINDING` seconds, else :attr:`fallback`."""
        found: list[str] = []
        finder = self.finder

        def find() -> None:
            try:
                if finder is not None:
                    found.append(finder())
            except BaseException:  # the fallback says less, but the process must end
                pass

        thread = threading.Thread(target=find, name="bayes-rbfn kept", daemon=True)
        thread.start()
        thread.join(_FINDING)
        return found[0] if found else self.fallback

    def _say(self, message: str) -> None:
        """Write the line straight to stderr's descriptor (the main thread may hold sys.stderr's lock)."""
        one_line = " ".join(part.strip() for part in self.word(message).splitlines() if part.strip())
        # A progress bar still open has left its line unfinished (tqdm starts each update with "\r").
        try:
            bars = len(sys.modules["tqdm"].tqdm._instances)
        except (KeyError, AttributeError, TypeError):
            bars = 0
        start = "\n" if bars else ""
        try:
            os.write(2, f"{start}{PROG}: error: {one_line}\n".encode(errors="replace"))
        except OSError:
            pass


def _held_locks(args: argparse.Namespace) -> list[tuple[Path, Path]]:
    """The output-folder locks this process holds: (lock file, output folder) pairs.

    Looked for next to ``--out`` and ``--resume`` and in the working folder (where a default output folder
    goes), by the pid that :func:`bayes_rbfn.io.output.output_lock` writes into its file.
    """
    folders = {Path(os.path.realpath(os.getcwd()))}
    for name in ("out", "resume"):
        value = getattr(args, name, None)
        if value:
            folders.add(Path(os.path.realpath(os.path.abspath(value))).parent)
    held, host = [], socket.gethostname()
    for folder in folders:
        try:
            locks = list(folder.glob(".*.lock"))
        except OSError:
            continue
        for lock in locks:
            try:
                owner = json.loads(lock.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(owner, dict) and (owner.get("pid"), owner.get("host")) == (os.getpid(), host):
                held.append((lock, folder / lock.name[1 : -len(".lock")]))
    return held


def _kept(args: argparse.Namespace, signals: _Signals) -> str:
    """The line of a run the watchdog ends, after removing what the run need not keep.

    A fit's checkpoint folder stays only when it holds sampled iterations (:func:`resume.interrupted`),
    and then the line says where and how to continue; the locks this process holds are removed.
    """
    line = _NOTHING
    for lock, out in _held_locks(args):
        if args.command == "fit":
            partial = partial_dir(out)
            signals.fallback = f"interrupted; no results were written; any saved sampling is in {partial}"
            kept = interrupted(partial, out, args.resume is not None)
            if isinstance(kept, Interrupted):
                line = str(kept)
        lock.unlink(missing_ok=True)
    return line


def _dispatch(argv: list[str], console: Console, signals: _Signals) -> int:
    """Parse ``argv`` and run its command; returns the exit status (errors printed as one line)."""
    try:
        if not jax_backend_started():
            # One CPU device per chain (up to the cores), before anything starts JAX's backend.
            runtime.use_host_devices(min(_scan_chains(argv), os.cpu_count() or 1))
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError(f"choose a command: {', '.join(COMMANDS)} (see '{PROG} --help')")
        console.quiet = bool(getattr(args, "quiet", False))
        args.argv = argv
        signals.finder = lambda: _kept(args, signals)
        with warnings.catch_warnings():
            # ArviZ 0.23.4 warns, once a day, at its first import that 1.x will break its API; this package
            # pins arviz < 0.24, so the notice concerns nobody running this command, and printed in the
            # middle of a run it breaks --quiet's promise of no output (it is imported lazily, mid-run).
            warnings.filterwarnings("ignore", category=FutureWarning, module="arviz")
            return COMMANDS[args.command].run(args, console)
    except SystemExit as done:  # --help, --version
        return done.code if isinstance(done.code, int) else 0
    except (UserError, InputError) as err:
        return signals.report(console, str(err), EXIT_USAGE)
    except StorageError as err:
        return signals.report(console, str(err), EXIT_STORAGE)
    except OSError as err:
        where = f"{err.filename}: " if err.filename else ""
        message = f"cannot write or read a file: {where}{err.strerror or err}; no results were written"
        return signals.report(console, message, EXIT_STORAGE)
    except Interrupted as err:
        return signals.report(console, signals.word(str(err)), signals.status())
    except KeyboardInterrupt:
        return signals.report(console, signals.word(_NOTHING), signals.status())
    except ValueError as err:
        from bayes_rbfn.infer.checkpoint import CheckpointError

        if not isinstance(err, CheckpointError):
            raise
        return signals.report(console, f"cannot resume: {err}; nothing was changed", EXIT_USAGE)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bayes-rbfn`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Called without ``argv``, it is the program: SIGINT and SIGTERM end the process within seconds (see the
    module's docstring) and stay ignored after it returns, while the process exits. Called with ``argv``
    (from Python), the first of them raises KeyboardInterrupt and ends the run with status 130 or 143,
    the process is never ended, and the handlers found are restored.

    Args:
        argv: the command-line arguments, without the program's name; None: ``sys.argv[1:]``.

    Returns:
        The exit status (see the module's docstring).
    """
    signals = _Signals(program=argv is None)
    argv = list(sys.argv[1:] if argv is None else argv)
    console = Console()
    saved_flags = os.environ.get("XLA_FLAGS")
    status = None
    try:
        status = _dispatch(argv, console, signals)
    except BaseException:
        if signals.received is None:
            raise
        # After a signal, whatever the interrupt broke on its way out is part of the interruption.
        status = signals.report(console, signals.word(_NOTHING), signals.status())
    finally:
        signals.release(status)
        # Leave the environment as found: the flag has done its work once the backend is up.
        if saved_flags is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = saved_flags
    return status
