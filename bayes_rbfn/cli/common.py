"""What every subcommand shares: errors, the console, the subcommand table, the parser, process settings.

The parser is built from the subcommand table; the process settings are those of a command that computes.

This layer is the only one in the package that prints. Progress and notes go to stderr, the final report to
stdout. Raise :class:`UserError` (or :class:`~bayes_rbfn.io.reader.InputError`) for anything the user can
fix: :func:`bayes_rbfn.cli.main.main` prints it in one line, with no traceback, and exits with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import shlex
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from bayes_rbfn import runtime

__all__ = [
    "COMMANDS",
    "EXIT_INTERRUPTED",
    "EXIT_STORAGE",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "PROG",
    "Command",
    "Console",
    "HelpFormatter",
    "Interrupted",
    "Parser",
    "StorageError",
    "UsageError",
    "UserError",
    "build_parser",
    "check_finite_scores",
    "command",
    "command_line",
    "configure_jax",
    "duration",
    "jax_backend_started",
    "package_version",
    "quiet_libraries",
    "summary_table",
]


PROG = "bayes-rbfn"


EXIT_USAGE = 2


EXIT_INTERRUPTED = 130


#: SIGTERM (a plain ``kill``), handled as Ctrl-C: 128 + the signal's number, as a shell reports it.
EXIT_TERMINATED = 143


#: The system refused to store something (disk full, quota, read-only or I/O error): sysexits' EX_IOERR.
EXIT_STORAGE = 74


class UserError(Exception):
    """Something the user can fix (an option, a file, a column, a value); printed without a traceback."""


class UsageError(UserError):
    """A command-line syntax error reported by argparse."""


class StorageError(Exception):
    """A file could not be written (disk full, …); ``str()`` says what was kept and how to go on."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during sampling; ``str()`` says what was kept and how to go on."""


@dataclass
class Console:
    """Where the CLI writes: progress and notes to ``err`` (silenced by ``quiet``), results to ``out``."""

    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    quiet: bool = False

    def say(self, message: str) -> None:
        """A progress message or note (stderr; not shown with ``--quiet``)."""
        if not self.quiet:
            print(message, file=self.err, flush=True)

    def result(self, text: str) -> None:
        """The command's result (stdout)."""
        print(text, file=self.out, flush=True)

    def error(self, message: str) -> None:
        """A one-line error message, always shown.

        Line breaks in ``message`` (a library's or the system's text, such as HDF5's) become spaces.
        """
        one_line = " ".join(part.strip() for part in message.strip().splitlines() if part.strip())
        print(f"{PROG}: error: {one_line}", file=self.err, flush=True)


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, one-line help, options and the function that runs it (→ exit status)."""

    name: str
    help: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Console], int]


#: The subcommands, in the order ``--help`` lists them.
COMMANDS: dict[str, Command] = {}


def command(
    name: str,
    *,
    help: str,
    arguments: Callable[[argparse.ArgumentParser], None],
    description: str = "",
) -> Callable[[Callable[[argparse.Namespace, Console], int]], Callable[[argparse.Namespace, Console], int]]:
    """Register the decorated function as the subcommand ``name`` in :data:`COMMANDS`."""

    def register(run: Callable[[argparse.Namespace, Console], int]) -> Callable[..., int]:
        COMMANDS[name] = Command(name, help, description or help, arguments, run)
        return run

    return register


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises :class:`UsageError` instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        """Raise :class:`UsageError` with ``message`` and a pointer to ``--help``, instead of exiting.

        Args:
            message: argparse's description of the problem.
        """
        raise UsageError(f"{message} (see '{self.prog} --help')")

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        """argparse's parse, refusing an option whose value is ``--`` (``--option=--``) as a missing value.

        Args:
            args: the command-line arguments (None: ``sys.argv[1:]``).
            namespace: the object that receives the parsed values (None: a new ``argparse.Namespace``).

        Returns:
            (namespace, the arguments it did not parse).

        Raises:
            UsageError: the arguments are not valid (through :meth:`error`).
        """
        # argparse (3.11) turns "--option=--" into [] without calling the option's type or checking its
        # choices; refuse it as the missing value it is.
        parsed, extra = super().parse_known_args(args, namespace)
        for action in self._actions:
            if action.dest != "help" and getattr(parsed, action.dest, None) == []:
                self.error(
                    f"argument {'/'.join(action.option_strings) or action.dest}: expected a value, got '--'"
                )
        return parsed, extra


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's formatter for this program: descriptions and epilogs as written, 100 columns."""

    def __init__(self, prog: str) -> None:
        """A formatter of 100-column lines, option help starting at column 30 at most.

        Args:
            prog: the program's name, as the usage line shows it.
        """
        super().__init__(prog, max_help_position=30, width=100)


def jax_backend_started() -> bool:
    """Whether JAX has initialised a backend already (its settings can then no longer change)."""
    try:
        from jax._src.xla_bridge import backends_are_initialized
    except ImportError:  # pragma: no cover - a future JAX without this helper
        return False
    return bool(backends_are_initialized())


def configure_jax() -> None:
    """Process settings for a command that computes: float64, the compilation cache, one BLAS thread.

    The persistent compilation cache is set unless one is configured already. One BLAS thread
    (:func:`bayes_rbfn.runtime.limit_blas_threads`): the chains already run one per core, and OpenBLAS's
    busy-waiting threads would compete with them.

    The host device count (one device per core, so chains run in parallel) is set earlier, by
    :func:`main`, because it must precede JAX's backend initialisation.
    """
    import jax

    runtime.enable_x64()
    if not jax.config.jax_compilation_cache_dir:
        runtime.enable_compilation_cache()
    jax.default_backend()  # start the backend (main set its flags): the BLAS limit is for the CPU only
    runtime.limit_blas_threads()


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """Silence ArviZ's logger and library warnings the report already covers in plain words."""
    from bayes_rbfn.io.arviz_compat import loggers as arviz_loggers

    loggers = arviz_loggers()
    levels = {logger: logger.level for logger in loggers}
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning)
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("ignore", message=".*There are not enough devices.*")
            yield
    finally:
        for logger, level in levels.items():
            logger.setLevel(level)


def duration(seconds: float) -> str:
    """Seconds as a short phrase: "42.0 s" below a minute, else "3 min 05 s"."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def command_line(args: argparse.Namespace) -> str:
    """The command as typed (for the record in inference.nc)."""
    return shlex.join([PROG, *getattr(args, "argv", ["fit"])])


def package_version() -> str:
    """The installed package's version."""
    from bayes_rbfn import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    """The ``bayes-rbfn`` parser with one subparser per entry of :data:`COMMANDS`."""
    parser = Parser(
        prog=PROG,
        description=(
            "Fully Bayesian RBF networks / sparse (SoR) Gaussian processes: NUTS over the kernel "
            "hyperparameters, analytic posterior predictive per draw, ArviZ diagnostics."
        ),
        epilog=(
            "Start with:\n"
            f"  {PROG} fit                      fit the default model to the packaged CO2 record\n"
            f"  {PROG} fit DATA.csv --x T --y Y  fit your own data\n"
            f"  {PROG} datasets                 list the packaged data sets\n"
            f"Each command has its own --help."
        ),
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for cmd in COMMANDS.values():
        sub = subparsers.add_parser(
            cmd.name,
            help=cmd.help,
            description=cmd.description,
            formatter_class=HelpFormatter,
            allow_abbrev=False,
        )
        cmd.arguments(sub)
    return parser


def check_finite_scores(scores: dict | None, what: str) -> None:
    """Refuse to write scores of which one is infinite or NaN (float64 could not carry the values scored).

    Args:
        scores: the scores by name (:func:`bayes_rbfn.infer.scores.score`), or None (nothing to check).
        what: the message's start, up to the word "scores" (``"--test TEST.csv: the"``).

    Raises:
        UserError: naming the scores that are not finite.
    """
    bad = [name for name, value in (scores or {}).items() if not math.isfinite(float(value))]
    if bad:
        raise UserError(
            f"{what} scores {', '.join(bad)} are not finite (the values scored lie too far from the "
            "predictive for float64); no results were written; rescale the data and the values scored"
        )


def summary_table(summary: Any, limit: int = 20) -> tuple[str, int]:
    """The hyperparameter summary as text, and the number of rows left out.

    At most ``limit`` rows are shown, population-level ones first.
    """
    import numpy as np

    columns = [
        c for c in ("mean", "sd", "hdi_3%", "hdi_97%", "ess_bulk", "ess_tail", "r_hat") if c in summary
    ]
    table = summary[columns]
    hidden = 0
    if len(table) > limit:
        population = [i for i in table.index if "[" not in str(i)]
        shown = population[:limit] if population else list(table.index[:limit])
        hidden = len(table) - len(shown)
        table = table.loc[shown]

    def fmt(column: str) -> Callable[[float], str]:
        if column.startswith("ess"):
            return lambda v: "nan" if not np.isfinite(v) else f"{v:.0f}"
        if column == "r_hat":
            return lambda v: "nan" if not np.isfinite(v) else f"{v:.3f}"
        return lambda v: f"{v:.4g}"

    text = table.to_string(formatters={c: fmt(c) for c in columns})
    return text, hidden
