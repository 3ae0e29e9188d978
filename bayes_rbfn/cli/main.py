"""The entry point, ``bayes-rbfn`` (also ``python -m bayes_rbfn``): parse, dispatch, map errors to exit codes.

Exit status: 0 on success, 2 for a user error (bad option, file, column or value; the message says what and
where, with no traceback, and nothing is written), 74 when the system refuses to store a file (disk full,
quota, read-only or I/O error; the message says what was kept, e.g. the sampling for ``--resume``), 130 after
Ctrl-C (nothing is written: results are assembled in a hidden temporary folder that becomes the output folder
only when complete), 143 after SIGTERM, which is handled as Ctrl-C. Once one of the two has arrived, more
of either are ignored while the program exits. Any other exception is a bug and shows its traceback.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
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
from bayes_rbfn.cli.resume import RUN_RECORD, partial_dir
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


class _Signals:
    """SIGINT and SIGTERM as one Ctrl-C.

    The first of them raises KeyboardInterrupt in the main thread and sets both to be ignored, so that a
    repeated Ctrl-C (or a ``kill`` after it) can neither print a traceback nor end the exit half-way.
    ``SIG_IGN``, not a Python handler: the interpreter resets its own handlers to the default (killing the
    process) while it shuts down, but keeps an ignored signal ignored.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.previous: dict = {}
        if threading.current_thread() is threading.main_thread():  # handlers are the main thread's
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        del frame
        self.received = signum
        for sig in self.previous:
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt

    def status(self) -> int:
        """The exit status of an interrupted run: 143 after SIGTERM, else 130."""
        return EXIT_TERMINATED if self.received == signal.SIGTERM else EXIT_INTERRUPTED

    def word(self, message: str) -> str:
        """``message`` (which starts "interrupted"), naming SIGTERM when that ended the run."""
        if self.received != signal.SIGTERM:
            return message
        return "terminated (SIGTERM)" + message.removeprefix("interrupted")

    def release(self, exiting: bool) -> None:
        """Ignore both signals from now on when the process is ``exiting``, else restore the handlers found.

        Restoring them gives a caller from Python its own Ctrl-C back.
        """
        for sig, handler in self.previous.items():
            signal.signal(sig, signal.SIG_IGN if exiting else (handler or signal.SIG_DFL))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bayes-rbfn`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Called without ``argv`` (as the program), SIGINT and SIGTERM stay ignored after it returns, while the
    process exits; called with ``argv`` (from Python), the handlers found are restored.
    """
    exiting = argv is None
    signals = _Signals()
    argv = list(sys.argv[1:] if argv is None else argv)
    console = Console()
    saved_flags = os.environ.get("XLA_FLAGS")
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
        with warnings.catch_warnings():
            # ArviZ 0.23.4 warns, once a day, at its first import that 1.x will break its API; this package
            # pins arviz < 0.24, so the notice concerns nobody running this command, and printed in the
            # middle of a run it breaks --quiet's promise of no output (it is imported lazily, mid-run).
            warnings.filterwarnings("ignore", category=FutureWarning, module="arviz")
            return COMMANDS[args.command].run(args, console)
    except SystemExit as done:  # --help, --version
        return done.code if isinstance(done.code, int) else 0
    except (UserError, InputError) as err:
        console.error(str(err))
        return EXIT_USAGE
    except StorageError as err:
        console.error(str(err))
        return EXIT_STORAGE
    except OSError as err:
        where = f"{err.filename}: " if err.filename else ""
        console.error(f"cannot write or read a file: {where}{err.strerror or err}; no results were written")
        return EXIT_STORAGE
    except Interrupted as err:
        console.error(signals.word(str(err)))
        return signals.status()
    except KeyboardInterrupt:
        console.error(signals.word("interrupted; nothing was written"))
        return signals.status()
    except ValueError as err:
        from bayes_rbfn.infer.checkpoint import CheckpointError

        if not isinstance(err, CheckpointError):
            raise
        console.error(f"cannot resume: {err}; nothing was changed")
        return EXIT_USAGE
    finally:
        signals.release(exiting)
        # Leave the environment as found: the flag has done its work once the backend is up.
        if saved_flags is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = saved_flags
