"""The command line, ``bayes-rbfn`` (also ``python -m bayes_rbfn``): the main job of DESIGN §6.

``bayes-rbfn fit`` with no arguments fits the main job's model (the DTC GP with a sampled linear mean and
the trend + drift + medium-term + seasonal ``co2`` kernel, calibrated by backtest) to the packaged Mauna Loa
CO2 record and writes an output folder with
``inference.nc``, ``summary.csv``, trace and rank plots, the posterior predictive plot (reaching past the
end of the data), ``predictions.csv`` and ``report.txt``. ``bayes-rbfn fit DATA.csv --x COL … --y COL``
does the same for the user's CSV file; ``bayes-rbfn datasets`` lists the packaged data sets.

This module is the only place in the package that prints. Progress and notes go to stderr, the final
report to stdout. Exit status: 0 on success, 2 for a user error (bad option, file, column or value; the
message says what and where, with no traceback, and nothing is written), 130 after Ctrl-C (nothing is
written: results are assembled in a hidden temporary folder that becomes the output folder only when
complete). Any other exception is a bug and shows its traceback.

Subcommands live in one table, :data:`COMMANDS`. Adding one (say ``compare``) takes two small functions,
one adding its options to an :class:`argparse.ArgumentParser` and one running it::

    def _compare_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("runs", nargs="+", help="output folders of earlier fits")

    @command("compare", help="compare fits by PSIS-LOO", arguments=_compare_arguments)
    def _run_compare(args: argparse.Namespace, console: Console) -> int:
        configure_jax()  # when it computes with JAX
        ...
        return 0

Raise :class:`UserError` (or :class:`~bayes_rbfn.io.reader.InputError`) for anything the user can fix.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import logging
import os
import shlex
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

# XLA's C++ log lines (one per persistent-cache hit) would bury the progress and the report. The level
# is read when jaxlib loads, so it is set here, before anything of this module imports JAX.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

from bayes_rbfn import runtime
from bayes_rbfn.defaults import DEFAULT_NUM_INDUCING, INITS
from bayes_rbfn.io.datasets import Dataset, list_datasets, load_dataset
from bayes_rbfn.io.reader import InputError, read_xy_csv

__all__ = [
    "COMMANDS",
    "Command",
    "Console",
    "UserError",
    "build_parser",
    "command",
    "configure_jax",
    "main",
    "plan_compare",
]

PROG = "bayes-rbfn"
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: The main job's defaults (``bayes-rbfn fit`` with no arguments). Measured on a 2-core machine: see README.
DEFAULT_DATASET = "co2"
DEFAULT_MODEL = "sor"
DEFAULT_GROUPED_MODEL = "grouped"
DEFAULT_KERNEL = "se"
#: Packaged data sets whose natural kernel family is not the default one.
DATASET_KERNELS = {"co2": "co2"}
#: Packaged data sets with their own default model and prior mean. co2: the main job forecasts, so it takes
#: the model and mean that the backtests on the record itself calibrated (README, "The main job"): DTC keeps
#: the prior variance past the data that SoR loses, and a sampled linear mean carries the rise forward.
DATASET_MODELS = {"co2": "dtc"}
DATASET_MEANS = {"co2": "linear"}
DEFAULT_MAX_TREE_DEPTH = 10
#: Packaged data sets with a smaller default NUTS tree depth. For co2 the first ~100 warm-up iterations,
#: before the mass matrix adapts, ran to the full depth (1023 steps at depth 10) and took 3 of 5 minutes;
#: once adapted a draw takes ~7 steps, well below 2^5 − 1 = 31, so the cap only shortens that start
#: (measured: depth 5 → 3 min in all under load, depth 6 → 4.5 min, depth 7 → 6 min; same r_hat/ESS).
DATASET_TREE_DEPTHS = {"co2": 5}
#: Data sets with their own default M. coal: 111 years and a rate that varies over ~20 years; the weights
#: are sampled (Poisson RBFN), and 20 centres 5.5 years apart fit as well as 64 at a fifth of the time.
DATASET_NUM_INDUCING = {"coal": 20}
DEFAULT_CHAINS = 2
DEFAULT_DRAWS = 500
DEFAULT_WARMUP = 500
DEFAULT_TARGET_ACCEPT = 0.8
DEFAULT_EXTEND = 0.1
#: Iterations between checkpoints of ``bayes-rbfn fit`` (see bayes_rbfn.infer.checkpoint).
DEFAULT_CHECKPOINT_EVERY = 50
#: Suffix of the checkpoint folder next to the output folder, and the record of the run kept in it.
PARTIAL_SUFFIX = ".partial"
RUN_RECORD = "run.json"
RUN_FORMAT = "bayes_rbfn.fit-run"
#: Fewest usable rows of a CSV file.
MIN_ROWS = 3
#: Prediction inputs on the grid of a one-input fit, and per group for grouped data.
GRID_POINTS = 1000
GROUP_GRID_POINTS = (25, 200)
#: Groups drawn in the predictive plot of grouped data.
MAX_GROUP_PANELS = 6
#: Central intervals of y* in the plots and predictions.csv.
INTERVALS = (0.5, 0.95)


# --------------------------------------------------------------------------------------------------
# Errors, output and the subcommand table


class UserError(Exception):
    """Something the user can fix (an option, a file, a column, a value); printed without a traceback."""


class UsageError(UserError):
    """A command-line syntax error reported by argparse."""


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
        """A one-line error message, always shown."""
        print(f"{PROG}: error: {message}", file=self.err, flush=True)


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


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises :class:`UsageError` instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30, width=100)


# --------------------------------------------------------------------------------------------------
# Option types: each turns a bad value into a one-line message naming the valid ones


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {value}")
    return value


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {value:g}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number ≥ 0, got {text!r}") from None
    if not (np.isfinite(value) and value >= 0.0):
        raise argparse.ArgumentTypeError(f"must be a finite number ≥ 0, got {text}")
    return value


def _one_of(kind: str, valid: Callable[[], Sequence[str]]) -> Callable[[str], str]:
    """An option type accepting one of ``valid()`` (read when the option is parsed)."""

    def check(text: str) -> str:
        names = list(valid())
        if text in names:
            return text
        close = difflib.get_close_matches(text, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise argparse.ArgumentTypeError(f"unknown {kind} {text!r}{hint}; choose one of: {', '.join(names)}")

    check.__name__ = kind  # argparse names the type in some messages
    return check


def _likelihood_names() -> list[str]:
    from bayes_rbfn.models.likelihoods import LIKELIHOODS

    return list(LIKELIHOODS)


def _mean_option(text: str) -> str | float:
    """--mean: constant, zero, linear or a finite number."""
    if text in ("constant", "zero", "linear"):
        return text
    try:
        value = float(text)
    except ValueError:
        expected = "expected constant, zero, linear or a number"
        raise argparse.ArgumentTypeError(f"{expected}, got {text!r}") from None
    if not np.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _model_names() -> list[str]:
    from bayes_rbfn.models import available_models

    return list(available_models())


def _kernel_names() -> list[str]:
    from bayes_rbfn.models.families import FAMILIES

    return list(FAMILIES)


def _dataset_names() -> list[str]:
    return list(list_datasets())


# --------------------------------------------------------------------------------------------------
# Process set-up


def _scan_chains(argv: Sequence[str]) -> int:
    """The value of ``--chains`` in ``argv`` (default if absent or malformed: argparse reports that); with
    ``--resume DIR``, the value in the interrupted run's saved options, so that it gets the same devices."""
    for i, arg in enumerate(argv):
        folder = None
        if arg == "--resume" and i + 1 < len(argv):
            folder = Path(argv[i + 1])
        elif arg.startswith("--resume="):
            folder = Path(arg.split("=", 1)[1])
        if folder is not None:
            for candidate in (folder, _partial_dir(folder)):
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


def _jax_backend_started() -> bool:
    try:
        from jax._src.xla_bridge import backends_are_initialized
    except ImportError:  # pragma: no cover - a future JAX without this helper
        return False
    return bool(backends_are_initialized())


def configure_jax() -> None:
    """Process settings for a command that computes: float64, the persistent compilation cache (unless
    one is configured already), and one BLAS thread (:func:`bayes_rbfn.runtime.limit_blas_threads`: the
    chains already run one per core, and OpenBLAS's busy-waiting threads would compete with them).

    The host device count (one device per core, so chains run in parallel) is set earlier, by
    :func:`main`, because it must precede JAX's backend initialisation.
    """
    import jax

    runtime.enable_x64()
    if not jax.config.jax_compilation_cache_dir:
        runtime.enable_compilation_cache()
    runtime.limit_blas_threads()


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    """Silence ArviZ's logger and library warnings the report already covers in plain words."""
    logger = logging.getLogger("arviz")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning)
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("ignore", message=".*There are not enough devices.*")
            yield
    finally:
        logger.setLevel(level)


# --------------------------------------------------------------------------------------------------
# Parser


def build_parser() -> argparse.ArgumentParser:
    """The ``bayes-rbfn`` parser with one subparser per entry of :data:`COMMANDS`."""
    parser = _Parser(
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
        formatter_class=_Formatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for cmd in COMMANDS.values():
        sub = subparsers.add_parser(
            cmd.name,
            help=cmd.help,
            description=cmd.description,
            formatter_class=_Formatter,
            allow_abbrev=False,
        )
        cmd.arguments(sub)
    return parser


def _version() -> str:
    from bayes_rbfn import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bayes-rbfn`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    console = Console()
    saved_flags = os.environ.get("XLA_FLAGS")
    try:
        if not _jax_backend_started():
            # One CPU device per chain (up to the cores), before anything starts JAX's backend.
            runtime.use_host_devices(min(_scan_chains(argv), os.cpu_count() or 1))
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError(f"choose a command: {', '.join(COMMANDS)} (see '{PROG} --help')")
        console.quiet = bool(getattr(args, "quiet", False))
        args.argv = argv
        return COMMANDS[args.command].run(args, console)
    except SystemExit as done:  # --help, --version
        return done.code if isinstance(done.code, int) else 0
    except (UserError, InputError) as err:
        console.error(str(err))
        return EXIT_USAGE
    except Interrupted as err:
        console.error(str(err))
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        console.error("interrupted; nothing was written")
        return EXIT_INTERRUPTED
    except ValueError as err:
        from bayes_rbfn.infer.checkpoint import CheckpointError

        if not isinstance(err, CheckpointError):
            raise
        console.error(f"cannot resume: {err}; nothing was changed")
        return EXIT_USAGE
    finally:
        # Leave the environment as found: the flag has done its work once the backend is up.
        if saved_flags is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = saved_flags


# --------------------------------------------------------------------------------------------------
# bayes-rbfn datasets


def _datasets_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


@command(
    "datasets",
    help="list the packaged data sets",
    arguments=_datasets_arguments,
    description="List the data sets shipped with the package (use one with: bayes-rbfn fit --dataset NAME).",
)
def _run_datasets(args: argparse.Namespace, console: Console) -> int:
    del args
    listed = list_datasets()
    width = max(map(len, listed))
    lines = [f"Packaged data sets (use one with: {PROG} fit --dataset NAME):"]
    for name, description in listed.items():
        default = "  [default]" if name == DEFAULT_DATASET else ""
        lines.append(f"  {name:<{width}}  {description}{default}")
    console.result("\n".join(lines))
    return 0


# --------------------------------------------------------------------------------------------------
# bayes-rbfn fit: options


def _fit_arguments(parser: argparse.ArgumentParser) -> None:
    from bayes_rbfn.models import available_models
    from bayes_rbfn.models.families import FAMILIES
    from bayes_rbfn.models.likelihoods import LIKELIHOODS

    models = available_models()
    width = max(map(len, [*models, *FAMILIES, *LIKELIHOODS]))
    parser.epilog = (
        "models (--model):\n"
        + "\n".join(f"  {name:<{width}}  {text}" for name, text in models.items())
        + "\n\nkernels (--kernel):\n"
        + "\n".join(f"  {name:<{width}}  {fam.description}" for name, fam in FAMILIES.items())
        + "\n\nlikelihoods (--likelihood; all but gaussian take --model rbfn only):\n"
        + "\n".join(f"  {name:<{width}}  {lik.description}" for name, lik in LIKELIHOODS.items())
        + "\n\ndata sets (--dataset):\n"
        + "\n".join(f"  {name:<{width}}  {text}" for name, text in list_datasets().items())
        + "\n\noutput folder (--out):\n"
        "  inference.nc     ArviZ InferenceData (netCDF): posterior, posterior_predictive (replicates of\n"
        "                   y), sample_stats, observed_data, constant_data, log_likelihood (LOO\n"
        "                   conditionals, or pointwise for a factorised likelihood), predictions (f_mean,\n"
        "                   f_var), predictions_constant_data (X_pred)\n"
        "  summary.csv      hyperparameter summary (mean, sd, HDI, ESS, r_hat)\n"
        "  trace.png        trace plots; rank.png  rank plots (chain mixing)\n"
        "  predictive.png   posterior predictive mean, 50% and 95% intervals of y* (of the rate or the\n"
        "                   probability for counts and labels), inducing inputs\n"
        "  predictions.csv  the predictive at the prediction inputs; report.txt  the printed report\n"
        "\nexit status: 0 done, 2 bad input (nothing written), 130 interrupted (nothing written)."
    )

    _data_arguments(parser, DEFAULT_DATASET, grouped=True)

    model = parser.add_argument_group("model")
    model.add_argument(
        "--model",
        metavar="NAME",
        type=_one_of("model", _model_names),
        help=f"model (default {DEFAULT_MODEL}; dtc for the co2 data set; {DEFAULT_GROUPED_MODEL} for grouped "
        "data; rbfn for a non-Gaussian --likelihood); listed below",
    )
    model.add_argument(
        "--likelihood",
        metavar="NAME",
        type=_one_of("likelihood", _likelihood_names),
        help="observation model (default: the data set's own — poisson for coal, bernoulli for "
        "breast_cancer — else gaussian); listed below",
    )
    model.add_argument(
        "--mean",
        metavar="MEAN",
        type=_mean_option,
        default=None,
        help="prior mean of the latent f: constant (the data's mean, not sampled; the default, but linear "
        "for the co2 data set), zero, linear (intercept and slopes sampled), or a number",
    )
    _kernel_arguments(model, "co2 for the co2 data set, else " + DEFAULT_KERNEL, DEFAULT_NUM_INDUCING)
    _sampler_arguments(parser)

    output = _output_arguments(parser)
    output.add_argument(
        "--x-pred-extend",
        type=_fraction,
        default=DEFAULT_EXTEND,
        metavar="FRACTION",
        help="one input: predict this fraction of the input range past the end of the data "
        f"(default {DEFAULT_EXTEND})",
    )
    output.add_argument("--no-plots", action="store_true", help="do not draw the PNG plots")

    backtest = parser.add_argument_group("backtest (one input column)")
    split = backtest.add_mutually_exclusive_group()
    split.add_argument(
        "--holdout-after",
        type=float,
        metavar="X",
        help="fit the data up to input X and score the forecast of the rest (backtest.csv)",
    )
    split.add_argument(
        "--holdout",
        type=_fraction,
        metavar="FRACTION",
        help="fit all but the last FRACTION of the data by input and score the forecast of it",
    )

    resume = parser.add_argument_group("interrupted runs")
    resume.add_argument(
        "--checkpoint-every",
        type=_positive_int,
        default=DEFAULT_CHECKPOINT_EVERY,
        metavar="N",
        help="save the sampler's state and draws every N iterations into DIR.partial next to the output "
        f"folder, removed when the run completes (default {DEFAULT_CHECKPOINT_EVERY})",
    )
    resume.add_argument(
        "--resume",
        metavar="DIR",
        type=Path,
        help="continue an interrupted fit whose output folder was DIR (or give DIR.partial itself); "
        "takes no other option but --quiet: the run's own options are saved with it",
    )


def _data_arguments(parser: argparse.ArgumentParser, default_dataset: str, grouped: bool) -> None:
    """DATA.csv --x --y [--group] | --dataset NAME, and --strict (shared by fit and compare)."""
    data = parser.add_argument_group(f"data (default: the packaged {default_dataset} data set)")
    data.add_argument("data", nargs="?", metavar="DATA.csv", help="a CSV file with a header line")
    data.add_argument("--x", nargs="+", metavar="COL", help="input column(s) of DATA.csv")
    data.add_argument("--y", metavar="COL", help="target column of DATA.csv")
    if grouped:
        data.add_argument(
            "--group",
            metavar="COL",
            help="column of group labels in DATA.csv: fits the hierarchical model (--model grouped)",
        )
    data.add_argument(
        "--dataset",
        metavar="NAME",
        type=_one_of("data set", _dataset_names),
        help=f"a packaged data set instead of a file (see '{PROG} datasets'; default {default_dataset})",
    )
    data.add_argument(
        "--strict",
        action="store_true",
        help="refuse rows with missing or non-finite values instead of dropping them",
    )
    if grouped:
        data.add_argument(
            "--max-groups",
            type=_positive_int,
            metavar="G",
            help="grouped data: keep G groups, evenly spread over the sorted group labels",
        )


def _kernel_arguments(group: Any, default_kernel: str, default_num_inducing: int) -> None:
    """--kernel and --num-inducing (shared by fit and compare)."""
    group.add_argument(
        "--kernel",
        metavar="NAME",
        type=_one_of("kernel", _kernel_names),
        help=f"kernel family (default: {default_kernel}); listed below",
    )
    group.add_argument(
        "--num-inducing",
        type=_positive_int,
        metavar="M",
        help=f"inducing inputs (RBF centres), chosen by k-means (default min({default_num_inducing}, "
        "distinct inputs))",
    )


def _sampler_arguments(parser: argparse.ArgumentParser) -> None:
    """The NUTS options (shared by fit and compare)."""
    sampler = parser.add_argument_group("sampler (NUTS)")
    sampler.add_argument(
        "--chains",
        type=_positive_int,
        default=DEFAULT_CHAINS,
        help=f"Markov chains, run in parallel up to the number of cores (default {DEFAULT_CHAINS})",
    )
    sampler.add_argument(
        "--draws",
        type=_positive_int,
        default=DEFAULT_DRAWS,
        help=f"draws per chain (default {DEFAULT_DRAWS})",
    )
    sampler.add_argument(
        "--warmup",
        type=_positive_int,
        default=DEFAULT_WARMUP,
        help=f"warm-up (adaptation) iterations per chain, discarded (default {DEFAULT_WARMUP})",
    )
    sampler.add_argument(
        "--seed", type=_non_negative_int, default=0, help="random seed (inducing inputs and NUTS; default 0)"
    )
    sampler.add_argument(
        "--target-accept",
        type=_probability,
        default=DEFAULT_TARGET_ACCEPT,
        metavar="P",
        help=f"NUTS target acceptance probability; raise it (e.g. 0.95) after divergences "
        f"(default {DEFAULT_TARGET_ACCEPT})",
    )
    sampler.add_argument(
        "--max-tree-depth",
        type=_positive_int,
        metavar="D",
        help=f"NUTS takes at most 2^D − 1 steps per draw (default {DEFAULT_MAX_TREE_DEPTH}; "
        f"{DATASET_TREE_DEPTHS['co2']} for the co2 data set)",
    )
    sampler.add_argument(
        "--dense-mass",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="adapt a dense mass matrix (default: dense, except for grouped models)",
    )
    sampler.add_argument(
        "--init",
        choices=INITS,
        default="median",
        help="how the chains start: 'median' (prior median, identity mass matrix) or 'map' (the posterior "
        "mode and a Laplace mass matrix: much shorter early warm-up for large data sets; default median)",
    )


def _output_arguments(parser: argparse.ArgumentParser) -> Any:
    """--out, --overwrite, --quiet (shared by every command that writes a folder); returns the group."""
    output = parser.add_argument_group("output")
    output.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        help="output folder (default: a new folder bayes_rbfn_<data>_<date-time> here)",
    )
    output.add_argument("--overwrite", action="store_true", help="replace an existing non-empty --out folder")
    output.add_argument(
        "--quiet", action="store_true", help="no progress or notes; only the final report (and errors)"
    )
    return output


# --------------------------------------------------------------------------------------------------
# bayes-rbfn fit: the plan, validated before any sampling


@dataclass
class FitPlan:
    """Everything a fit needs, checked: the data, model, inducing and prediction inputs, sampler, output."""

    data: Dataset
    source: str
    model: str
    grouped: bool
    kernel: str
    Z: np.ndarray | None
    X_pred: np.ndarray
    group_pred: np.ndarray | None
    chains: int
    draws: int
    warmup: int
    seed: int
    target_accept: float
    dense_mass: bool
    max_tree_depth: int
    out: Path
    init: str = "median"
    notes: list[str] = field(default_factory=list)
    likelihood: str = "gaussian"
    mean: str | float = "constant"
    holdout_after: float | None = None
    holdout: float | None = None
    #: The backtest's held-out (x, y), or None.
    held_out: tuple[np.ndarray, np.ndarray] | None = None


def _load_data(args: argparse.Namespace, default_dataset: str = DEFAULT_DATASET) -> tuple[Dataset, str]:
    """The data set to fit and a phrase saying where it came from."""
    group_col = getattr(args, "group", None)
    max_groups = getattr(args, "max_groups", None)
    if args.data is not None and args.dataset is not None:
        raise UserError("give either a CSV file or --dataset, not both")
    if args.data is not None:
        if not args.x or args.y is None:
            missing = " and ".join(
                opt for opt, val in (("--x COL [COL ...]", args.x), ("--y COL", args.y)) if not val
            )
            raise UserError(f"{args.data}: a CSV file needs {missing} to name its input and target columns")
        data = read_xy_csv(
            args.data, args.x, args.y, group_col=group_col, strict=args.strict, min_rows=MIN_ROWS
        )
        return _keep_groups(data, max_groups), f"file {args.data}"
    given = [opt for opt, val in (("--x", args.x), ("--y", args.y), ("--group", group_col)) if val]
    if given:
        raise UserError(
            f"{'/'.join(given)} name columns of a CSV file; give the file too "
            f"({PROG} fit DATA.csv --x COL --y COL), or drop {'/'.join(given)} to fit a packaged data set"
        )
    name = args.dataset or default_dataset
    options: dict[str, Any] = {}
    if max_groups is not None and name == "fertility":
        options["max_groups"] = max_groups
    try:
        data = load_dataset(name, **options)
    except ValueError as err:
        raise UserError(str(err)) from err
    return _keep_groups(data, max_groups), f"packaged data set {name!r}"


def _keep_groups(data: Dataset, max_groups: int | None) -> Dataset:
    """At most ``max_groups`` groups, evenly spread over the group codes (sorted labels)."""
    if max_groups is None or data.group is None or data.num_groups <= max_groups:
        return data
    picks = np.unique(np.round(np.linspace(0, data.num_groups - 1, max_groups)).astype(int))
    keep = np.isin(data.group, picks)
    recode = np.full(data.num_groups, -1)
    recode[picks] = np.arange(picks.size)
    assert data.group_names is not None
    note = (
        f"Kept {picks.size} of {data.num_groups} groups evenly spread over the sorted labels (--max-groups)."
    )
    return Dataset(
        name=data.name,
        X=data.X[keep],
        y=data.y[keep],
        x_names=data.x_names,
        y_name=data.y_name,
        description=data.description,
        group=recode[data.group[keep]],
        group_names=tuple(data.group_names[i] for i in picks),
        dropped=data.dropped,
        notes=(data.notes + " " + note).strip(),
        likelihood=data.likelihood,
    )


def _prediction_inputs(data: Dataset, extend: float) -> tuple[np.ndarray, np.ndarray | None]:
    """X_pred (and its group codes): with one input a grid over the data reaching ``extend`` × range past
    the end (per group for grouped data); with several inputs the training inputs themselves."""
    X = data.X
    if X.shape[1] > 1:
        return X.copy(), None if data.group is None else data.group.copy()
    if data.group is None:
        lo, hi = float(X.min()), float(X.max())
        return np.linspace(lo, hi + extend * (hi - lo), GRID_POINTS)[:, None], None
    per_group = int(np.clip(5000 // data.num_groups, *GROUP_GRID_POINTS))
    blocks, codes = [], []
    for g in range(data.num_groups):
        xg = X[data.group == g, 0]
        lo, hi = float(xg.min()), float(xg.max())
        blocks.append(np.linspace(lo, hi + extend * (hi - lo), per_group))
        codes.append(np.full(per_group, g, dtype=np.int64))
    return np.concatenate(blocks)[:, None], np.concatenate(codes)


def _plan_fit(args: argparse.Namespace, console: Console) -> FitPlan:
    """Load and check everything, so that no user error can surface after sampling has started."""
    from bayes_rbfn.gp.inducing import select_inducing
    from bayes_rbfn.gp.validation import count_distinct_rows
    from bayes_rbfn.io.output import default_output_dir, prepare_output_dir
    from bayes_rbfn.models import get_model

    data, source = _load_data(args)
    notes = [data.notes] if data.notes else []

    from bayes_rbfn.models.likelihoods import get_likelihood

    likelihood = get_likelihood(args.likelihood or (data.likelihood if args.data is None else "gaussian"))
    packaged = data.name if args.data is None else ""
    if args.model is not None:
        model = args.model
    elif not likelihood.marginalisable:
        model = "rbfn"
    elif data.group is not None:
        model = DEFAULT_GROUPED_MODEL
    else:
        model = DATASET_MODELS.get(packaged, DEFAULT_MODEL)
    spec = get_model(model)
    takes_linear_mean = not spec.grouped and spec.family is None
    mean = args.mean
    if mean is None:
        mean = DATASET_MEANS.get(packaged, "constant")
        if mean == "linear" and not takes_linear_mean:
            mean = "constant"
    if likelihood.name not in spec.likelihoods:
        raise UserError(
            f"--likelihood {likelihood.name} needs the weight-space model (--model rbfn): the {model!r} "
            "model marginalises its weights, which only the gaussian likelihood allows"
        )
    try:
        likelihood.check(data.y)
    except ValueError as err:
        raise UserError("--" + str(err)) from None
    if mean == "linear" and not takes_linear_mean:
        raise UserError(f"--mean linear: the {model!r} model takes a constant mean only")
    if spec.grouped and data.group is None:
        raise UserError(
            f"--model {model} needs grouped data: give --group COL with a CSV file, or a grouped data set "
            "such as --dataset fertility"
        )
    if not spec.grouped and data.group is not None:
        if args.group is not None:
            raise UserError(
                f"--group needs a grouped model (--model {DEFAULT_GROUPED_MODEL}), not --model {model}"
            )
        notes.append(f"The data are grouped, but the {model!r} model pools every group into one fit.")
        data = Dataset(
            name=data.name,
            X=data.X,
            y=data.y,
            x_names=data.x_names,
            y_name=data.y_name,
            description=data.description,
            X_test=data.X_test,
            dropped=data.dropped,
            notes=data.notes,
            likelihood=data.likelihood,
        )
    kernel = args.kernel or DATASET_KERNELS.get(packaged, DEFAULT_KERNEL)

    held_out, X_fit = None, data.X
    if args.holdout_after is not None or args.holdout is not None:
        flag = "--holdout-after" if args.holdout_after is not None else "--holdout"
        if data.group is not None:
            raise UserError(f"{flag}: a backtest of grouped data is not supported; fit one group's CSV")
        if not likelihood.marginalisable:
            raise UserError(f"{flag}: the backtest scores need the gaussian likelihood")
        from bayes_rbfn.infer.fitting import holdout_split

        try:
            X_fit, _, X_test, y_test = holdout_split(
                data.X, data.y, holdout_after=args.holdout_after, holdout=args.holdout
            )
        except ValueError as err:
            raise UserError(f"{flag}: " + str(err).split(": ", 1)[1]) from None
        held_out = (X_test, y_test)
    Z = None
    distinct = count_distinct_rows(data.X)
    if spec.uses_inducing:
        if args.num_inducing is not None and args.num_inducing > distinct:
            raise UserError(
                f"--num-inducing {args.num_inducing} is more than the {distinct} distinct input value(s) in "
                f"the data; choose at most {distinct}"
            )
        default_M = DATASET_NUM_INDUCING.get(packaged, DEFAULT_NUM_INDUCING)
        M = args.num_inducing if args.num_inducing is not None else min(default_M, distinct)
        try:
            Z = select_inducing(X_fit, M, seed=args.seed)  # a backtest chooses Z from the fitted data
        except ValueError as err:
            raise UserError(f"--num-inducing: {err}") from err
    elif args.num_inducing is not None:
        notes.append(f"The {model!r} model has no inducing inputs; --num-inducing is ignored.")
    if not spec.uses_inducing and data.X.shape[0] > 3000:
        notes.append(
            f"The {model!r} model costs O(N³) per NUTS step; with N = {data.X.shape[0]:,} expect a long run."
        )

    X_pred, group_pred = _prediction_inputs(data, args.x_pred_extend)
    out = args.out if args.out is not None else default_output_dir(prefix=f"bayes_rbfn_{_slug(data.name)}")
    prepare_output_dir(out, args.overwrite)
    return FitPlan(
        data=data,
        source=source,
        model=model,
        grouped=spec.grouped,
        kernel=kernel,
        Z=None if Z is None else np.asarray(Z),
        X_pred=X_pred,
        group_pred=group_pred,
        chains=args.chains,
        draws=args.draws,
        warmup=args.warmup,
        seed=args.seed,
        target_accept=args.target_accept,
        dense_mass=(not spec.grouped) if args.dense_mass is None else bool(args.dense_mass),
        max_tree_depth=args.max_tree_depth or DATASET_TREE_DEPTHS.get(packaged, DEFAULT_MAX_TREE_DEPTH),
        out=Path(out),
        init=args.init,
        notes=notes,
        likelihood=likelihood.name,
        mean=mean,
        holdout_after=args.holdout_after,
        holdout=args.holdout,
        held_out=held_out,
    )


def _slug(name: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
    return keep or "data"


# --------------------------------------------------------------------------------------------------
# bayes-rbfn fit: run


@command(
    "fit",
    help="fit a model with NUTS and write the results folder",
    arguments=_fit_arguments,
    description=(
        "Fit a model of the collection with NUTS over its kernel hyperparameters, compute the analytic\n"
        "posterior predictive for every draw, and write the results folder.\n\n"
        "  bayes-rbfn fit                                  the packaged CO2 record (the default)\n"
        "  bayes-rbfn fit --dataset snelson                another packaged data set\n"
        "  bayes-rbfn fit DATA.csv --x t --y co2           your CSV file (one or more --x columns)\n"
        "  bayes-rbfn fit DATA.csv --x year --y rate --group country   hierarchical (grouped) model"
    ),
)
def _run_fit(args: argparse.Namespace, console: Console) -> int:
    start = time.perf_counter()
    resuming = args.resume is not None
    if resuming:
        partial, args = _resume_args(args)
    configure_jax()
    with _quiet_libraries():
        plan = _plan_fit(args, console)
        if not resuming:
            partial = _partial_dir(plan.out)
            _start_partial(partial, args, plan.out)
        try:
            _announce(plan, console)
            if resuming:
                console.say(f"Resuming from {partial} ...")
            t_sample = time.perf_counter()
            idata = _sample(plan, console, checkpoint=partial / "sampler", chunk_size=args.checkpoint_every)
            sampling_seconds = time.perf_counter() - t_sample
            console.say("Summarising: diagnostics, PSIS-LOO, predictive intervals ...")
            results = _summarise(plan, idata)
            idata.posterior.attrs["bayes_rbfn_command"] = _command_line(args)
            idata.posterior.attrs["bayes_rbfn_data"] = plan.source
            _write_outputs(plan, args, idata, results, console, start, sampling_seconds)
        except KeyboardInterrupt:
            raise _interrupted(partial, plan.out, resuming) from None
        shutil.rmtree(partial, ignore_errors=True)
    return 0


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during sampling; ``str()`` says what was kept and how to go on."""


def _partial_dir(out: Path) -> Path:
    """The checkpoint folder of the output folder ``out``: ``out.partial`` next to it."""
    out = Path(out)
    return out.with_name(out.name + PARTIAL_SUFFIX)


def _start_partial(partial: Path, args: argparse.Namespace, out: Path) -> None:
    """Refuse a leftover checkpoint (unless --overwrite) and record the run's options for --resume."""
    from bayes_rbfn.io.output import atomic_write_bytes

    if partial.exists() or partial.is_symlink():
        if not args.overwrite:
            raise UserError(
                f"{partial} holds an interrupted run for this output folder: continue it with "
                f"'{PROG} fit --resume {partial.with_name(partial.name[: -len(PARTIAL_SUFFIX)])}', "
                "or add --overwrite to start afresh"
            )
        if partial.is_dir() and not partial.is_symlink():
            shutil.rmtree(partial)
        else:
            partial.unlink()
    partial.mkdir(parents=True)
    record = {
        "format": RUN_FORMAT,
        "version": 1,
        "argv": list(args.argv),
        "out": str(Path(out).absolute()),
        "package": _version(),
    }
    atomic_write_bytes(partial / RUN_RECORD, json.dumps(record, indent=1).encode("utf-8"))


def _interrupted(partial: Path, out: Path, resuming: bool) -> BaseException:
    """The exception to raise after Ctrl-C during sampling: keep a checkpoint that holds draws."""
    from bayes_rbfn.infer.checkpoint import CheckpointError, read_checkpoint

    try:
        info = read_checkpoint(partial / "sampler")
    except CheckpointError:
        info = None
    if info is None or info.iterations_done == 0:
        if not resuming:
            shutil.rmtree(partial, ignore_errors=True)
        return KeyboardInterrupt()
    return Interrupted(
        f"interrupted; no results were written. {info.iterations_done} of {info.total_iterations} "
        f"iterations are saved in {partial}: continue with '{PROG} fit --resume {out}'"
    )


def _resume_args(args: argparse.Namespace) -> tuple[Path, argparse.Namespace]:
    """The checkpoint folder named by ``--resume`` and the options of the run saved in it."""
    defaults = _fit_defaults()
    given = [
        name
        for name, value in vars(args).items()
        if name not in ("resume", "quiet", "argv", "command") and value != defaults.get(name)
    ]
    if given:
        options = ", ".join("--" + name.replace("_", "-") if name != "data" else "DATA.csv" for name in given)
        raise UserError(
            "--resume takes no other option but --quiet (the run's own options are saved with it); "
            f"got {options}"
        )
    folder = Path(args.resume)
    candidates = [folder, _partial_dir(folder)] if not folder.name.endswith(PARTIAL_SUFFIX) else [folder]
    partial = next((c for c in candidates if (c / RUN_RECORD).is_file()), None)
    if partial is None:
        raise UserError(
            f"--resume {folder}: no interrupted run there (neither {folder} nor {_partial_dir(folder)} holds "
            f"a {RUN_RECORD} of '{PROG} fit')"
        )
    try:
        record = json.loads((partial / RUN_RECORD).read_text(encoding="utf-8"))
        if record.get("format") != RUN_FORMAT:
            raise ValueError("not a record of bayes-rbfn fit")
        argv = [str(a) for a in record["argv"]]
        out = Path(record["out"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(
            f"--resume {folder}: {partial / RUN_RECORD} is corrupt ({err}); nothing was changed"
        ) from None
    from bayes_rbfn.infer.checkpoint import CheckpointError, read_checkpoint

    try:
        read_checkpoint(partial / "sampler")
    except CheckpointError as err:
        raise UserError(f"--resume {folder}: cannot continue: {err}; nothing was changed") from None
    saved = build_parser().parse_args(argv)
    if saved.command != "fit" or saved.resume is not None:
        raise UserError(f"--resume {folder}: {partial / RUN_RECORD} is not a record of '{PROG} fit'")
    saved.quiet = saved.quiet or args.quiet
    saved.argv = argv
    if _partial_dir(out).absolute() != partial.absolute():
        raise UserError(f"--resume {folder}: {partial} does not belong to the output folder {out}")
    if out.exists() and any(out.iterdir()) and not saved.overwrite:
        raise UserError(f"--resume {folder}: the output folder {out} exists and is not empty")
    saved.out = out
    return partial, saved


def _fit_defaults() -> dict:
    """Every ``fit`` option at its default (to detect options given together with --resume)."""
    return vars(build_parser().parse_args(["fit"]))


def _command_line(args: argparse.Namespace) -> str:
    """The command as typed (for the record in inference.nc)."""
    return shlex.join([PROG, *getattr(args, "argv", ["fit"])])


def _announce(plan: FitPlan, console: Console) -> None:
    d = plan.data
    N = d.X.shape[0]
    console.say(
        f"Data: {plan.source} — {N:,} observations of {d.y_name} against {', '.join(d.x_names)}"
        + (f", {d.num_groups} groups" if d.group is not None else "")
    )
    for note in plan.notes:
        console.say(f"  note: {note}")
    m = "" if plan.Z is None else f", M = {plan.Z.shape[0]} inducing inputs (k-means)"
    lik = "" if plan.likelihood == "gaussian" else f", {plan.likelihood} likelihood"
    console.say(f"Model: {plan.model}, kernel {plan.kernel}{m}{lik}")
    import jax

    devices = jax.local_device_count()
    how = (
        "in parallel"
        if plan.chains > 1 and devices >= plan.chains
        else "vectorised"
        if plan.chains > 1
        else ""
    )
    console.say(
        f"Sampling: {plan.chains} chain(s) {how} × ({plan.warmup} warm-up + {plan.draws} draws), NUTS "
        f"target_accept {plan.target_accept:g}, max tree depth {plan.max_tree_depth}, "
        f"{'dense' if plan.dense_mass else 'diagonal'} mass matrix. "
        "Compiling first (faster on later runs: the compilation cache) ..."
    )


def _sample(plan: FitPlan, console: Console, checkpoint: Path | None = None, chunk_size: int = 50) -> Any:
    from bayes_rbfn.infer.fitting import fit

    d = plan.data
    return fit(
        plan.model,
        d.X,
        d.y,
        Z=plan.Z,
        chains=plan.chains,
        draws=plan.draws,
        warmup=plan.warmup,
        seed=plan.seed,
        progress=not console.quiet,
        X_pred=plan.X_pred,
        kernel=plan.kernel,
        group=d.group,
        group_pred=plan.group_pred,
        target_accept=plan.target_accept,
        dense_mass=plan.dense_mass,
        max_tree_depth=plan.max_tree_depth,
        init=plan.init,
        check_diagnostics=False,
        checkpoint=checkpoint,
        chunk_size=chunk_size,
        likelihood=plan.likelihood,
        mean=plan.mean,
        coords={"input_dim": list(d.x_names)},
        holdout_after=plan.holdout_after,
        holdout=plan.holdout,
    )


# --------------------------------------------------------------------------------------------------
# bayes-rbfn fit: summaries


@dataclass
class FitResults:
    """What the report, the CSV files and the plots show."""

    hyperparameters: list[str]
    summary: Any  # pandas DataFrame
    convergence: Any  # diagnostics.ConvergenceReport
    loo: Any | None
    loo_note: str
    band: Any  # plots.Band
    sd_f: np.ndarray
    sd_y: np.ndarray
    saturated: int = 0
    collapsed: int = 0
    #: The backtest's scores (:func:`bayes_rbfn.infer.fitting.backtest_scores`), or None.
    backtest: dict | None = None


def hyperparameter_names(idata: Any) -> list[str]:
    """Posterior variables that are hyperparameters: not RBFN weights nor raw (non-centred) variables."""
    post = idata.posterior
    names = []
    for name in post.data_vars:
        if name.endswith(("_raw", "_z")) or "inducing" in post[name].dims:
            continue
        names.append(str(name))
    return names


def _noise_draws(idata: Any, plan: FitPlan) -> np.ndarray | None:
    """σ per draw at each prediction input, (draws, S) or (draws, 1); None when the model has none."""
    post = idata.posterior
    if "noise" in post:
        noise = np.asarray(post["noise"].values)
    else:
        import json

        fixed = json.loads(str(post.attrs.get("bayes_rbfn_fixed", "{}")))
        if "noise" not in fixed:
            return None
        noise = np.broadcast_to(
            np.asarray(fixed["noise"], dtype=float), (post.sizes["chain"], post.sizes["draw"])
        )
    T = post.sizes["chain"] * post.sizes["draw"]
    if noise.ndim == 3 and plan.group_pred is not None:  # per group: (chain, draw, G)
        return noise.reshape(T, -1)[:, plan.group_pred]
    return noise.reshape(T, 1)


def _summarise(plan: FitPlan, idata: Any) -> FitResults:
    import arviz as az

    from bayes_rbfn.infer.diagnostics import check_convergence

    names = hyperparameter_names(idata)
    summary = az.summary(idata, var_names=names, round_to="none")
    convergence = check_convergence(idata, var_names=names)
    loo, loo_note = None, ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            loo = az.loo(idata, pointwise=True)
        except Exception as err:  # LOO is a bonus in the report, never a reason to fail
            loo_note = f"PSIS-LOO could not be computed ({type(err).__name__}: {err})."
    if loo is not None:
        k = np.asarray(loo.pareto_k)
        bad = int(np.sum(k > 0.7))
        if bad:
            loo_note = (
                f"{bad} observation(s) have Pareto k̂ > 0.7: the PSIS-LOO estimate is unreliable for them."
            )
        elif any("Pareto" in str(w.message) for w in caught):
            loo_note = "ArviZ warns that some Pareto k̂ are high; treat elpd_loo with care."

    band, sd_f, sd_y = (
        _band_of_y(idata, plan) if plan.likelihood == "gaussian" else _band_of_the_mean(idata, plan)
    )
    return FitResults(
        collapsed=_collapsed_points(plan, idata),
        saturated=_saturated(plan, idata),
        hyperparameters=names,
        summary=summary,
        convergence=convergence,
        loo=loo,
        loo_note=loo_note,
        band=band,
        sd_f=sd_f,
        sd_y=sd_y,
        backtest=None if plan.held_out is None else _backtest_scores(idata),
    )


def _backtest_scores(idata: Any) -> dict:
    from bayes_rbfn.infer.fitting import backtest_scores

    return backtest_scores(idata)


def _band_of_y(idata: Any, plan: FitPlan) -> tuple[Any, np.ndarray, np.ndarray]:
    """A Gaussian likelihood: the band of a new observation y*, quantiles of the mixture over draws of
    N(m_s, v_s + σ_s²), and the sds of f* and y* by the law of total variance."""
    from bayes_rbfn.infer.predictive import mixture_moments, mixture_quantiles
    from bayes_rbfn.plots import Band

    f_mean = np.asarray(idata.predictions["f_mean"].values)
    f_var = np.asarray(idata.predictions["f_var"].values)
    S = f_mean.shape[-1]
    noise = _noise_draws(idata, plan)
    var_y = f_var.reshape(-1, S) + (0.0 if noise is None else noise**2)
    mean, var_f, var_y_mix = mixture_moments(f_mean, f_var, noise)
    var_y_mix = var_f if var_y_mix is None else var_y_mix
    probs = sorted({p for c in INTERVALS for p in ((1 - c) / 2, (1 + c) / 2)})
    q = mixture_quantiles(f_mean.reshape(-1, S), var_y, probs)
    intervals = {c: (q[probs.index((1 - c) / 2)], q[probs.index((1 + c) / 2)]) for c in INTERVALS}
    return Band(mean=mean, intervals=intervals), np.sqrt(var_f), np.sqrt(var_y_mix)


def _saturated(plan: FitPlan, idata: Any) -> int:
    """Transitions that hit the maximum tree depth."""
    n_steps = np.asarray(idata.sample_stats["n_steps"].values) if "n_steps" in idata.sample_stats else None
    return 0 if n_steps is None else int(np.sum(n_steps >= 2**plan.max_tree_depth - 1))


def _band_of_the_mean(idata: Any, plan: FitPlan) -> tuple[Any, np.ndarray, np.ndarray]:
    """A non-Gaussian likelihood: the band of the mean of y given f (the rate exp f, the probability
    logistic f, or f itself for Student-t) — quantiles over the draws, each draw's latent being known
    given its weights (f_var = 0) — and the sd of a new observation y* by the law of total variance."""
    import jax.numpy as jnp

    from bayes_rbfn.models.likelihoods import get_likelihood
    from bayes_rbfn.plots import Band

    lik = get_likelihood(plan.likelihood)
    post = idata.posterior
    f = np.asarray(idata.predictions["f_mean"].values)
    T, S = f.shape[0] * f.shape[1], f.shape[-1]
    f = f.reshape(T, S)
    fixed = json.loads(str(post.attrs.get("bayes_rbfn_fixed", "{}")))
    params = {
        name: (np.asarray(post[name].values).reshape(T, 1) if name in post else np.full((T, 1), fixed[name]))
        for name in lik.params
    }
    mu = lik.inverse_link(f)
    with np.errstate(over="ignore", invalid="ignore"):
        given = {k: jnp.asarray(v) for k, v in params.items()}
        var_obs = np.asarray(lik.observe(jnp.asarray(f), given).variance)
    probs = sorted({p for c in INTERVALS for p in ((1 - c) / 2, (1 + c) / 2)})
    q = np.quantile(mu, probs, axis=0)
    intervals = {c: (q[probs.index((1 - c) / 2)], q[probs.index((1 + c) / 2)]) for c in INTERVALS}
    quantity = {"log": "the rate", "logit": "the probability"}.get(lik.link, "the location f")
    band = Band(mean=mu.mean(axis=0), intervals=intervals, quantity=quantity)
    return band, mu.std(axis=0), np.sqrt(var_obs.mean(axis=0) + mu.var(axis=0))


def _collapsed_points(plan: FitPlan, idata: Any) -> int:
    """Prediction inputs where SoR/RBFN keep less than half the prior variance (posterior mean over at
    most 200 draws); 0 for models whose predictive cannot collapse."""
    from bayes_rbfn.infer.collapse import COLLAPSE_THRESHOLD
    from bayes_rbfn.models import get_model
    from bayes_rbfn.workflows.compare import variance_collapse

    if not get_model(plan.model).variance_collapses or plan.Z is None or plan.Z.ndim != 2:
        return 0
    step = max(1, plan.chains * plan.draws // 200)
    lost = variance_collapse(idata.isel(draw=slice(None, None, step)), warn=False)
    return int(np.sum(lost > COLLAPSE_THRESHOLD))


# --------------------------------------------------------------------------------------------------
# bayes-rbfn fit: files and report


def _predictions_frame(plan: FitPlan, results: FitResults) -> Any:
    import pandas as pd

    d = plan.data
    columns: dict[str, Any] = {name: plan.X_pred[:, j] for j, name in enumerate(d.x_names)}
    if plan.group_pred is not None and d.group_names is not None:
        columns["group"] = [d.group_names[g] for g in plan.group_pred]
    columns["mean"] = results.band.mean
    columns["sd_f"] = results.sd_f
    columns["sd_y"] = results.sd_y
    for c in sorted(INTERVALS, reverse=True):
        columns[f"lower{c:.0%}".replace("%", "")] = results.band.intervals[c][0]
    for c in sorted(INTERVALS):
        columns[f"upper{c:.0%}".replace("%", "")] = results.band.intervals[c][1]
    if d.X.shape[1] == 1:
        if d.group is None:
            columns["beyond_data"] = plan.X_pred[:, 0] > d.X[:, 0].max()
        else:
            ends = np.array([d.X[d.group == g, 0].max() for g in range(d.num_groups)])
            assert plan.group_pred is not None
            columns["beyond_data"] = plan.X_pred[:, 0] > ends[plan.group_pred]
    return pd.DataFrame(columns)


def _draw_plots(folder: Path, plan: FitPlan, idata: Any, results: FitResults) -> list[str]:
    from bayes_rbfn import plots

    d = plan.data
    written = []
    names = results.hyperparameters
    plots.plot_trace(idata, names, folder / "trace.png")
    written.append("trace.png")
    scalars = [n for n in names if idata.posterior[n].ndim == 2][:12]
    if scalars and idata.posterior.sizes["chain"] > 1:
        plots.plot_rank(idata, scalars, folder / "rank.png")
        written.append("rank.png")
    title = f"{d.name}: {plan.model} model, {plan.kernel} kernel — posterior predictive of {d.y_name}"
    y_label = d.y_name
    if d.X.shape[1] == 1 and d.group is None:
        fitted = (
            np.ones(d.y.size, bool) if plan.held_out is None else ~np.isin(d.X[:, 0], plan.held_out[0][:, 0])
        )
        plots.plot_predictive_1d(
            folder / "predictive.png",
            X=d.X[fitted],
            y=d.y[fitted],
            X_pred=plan.X_pred,
            band=results.band,
            Z=plan.Z,
            x_label=d.x_names[0],
            y_label=y_label,
            title=title,
            held_out=plan.held_out,
        )
    elif d.X.shape[1] == 1:
        assert d.group is not None and plan.group_pred is not None and d.group_names is not None
        shown = np.unique(np.round(np.linspace(0, d.num_groups - 1, min(MAX_GROUP_PANELS, d.num_groups))))
        panels = []
        for g in shown.astype(int):
            obs, pred = d.group == g, plan.group_pred == g
            band = plots.Band(
                mean=results.band.mean[pred],
                intervals={c: (lo[pred], hi[pred]) for c, (lo, hi) in results.band.intervals.items()},
                quantity=results.band.quantity,
            )
            Zg = None if plan.Z is None else (plan.Z[g] if plan.Z.ndim == 3 else plan.Z)
            panels.append((d.group_names[g], d.X[obs], d.y[obs], plan.X_pred[pred], band, Zg))
        extra = f" ({len(panels)} of {d.num_groups} groups)" if len(panels) < d.num_groups else ""
        plots.plot_predictive_groups(
            folder / "predictive.png",
            panels=panels,
            x_label=d.x_names[0],
            y_label=y_label,
            title=title + extra,
        )
    else:
        plots.plot_predicted_vs_observed(
            folder / "predictive.png",
            X=d.X,
            y=d.y,
            band=results.band,
            Z=plan.Z,
            x_names=d.x_names,
            y_label=y_label,
            title=title,
        )
    written.append("predictive.png")
    return written


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def _summary_table(summary: Any, limit: int = 20) -> tuple[str, int]:
    """The hyperparameter summary as text (at most ``limit`` rows: population-level ones first)."""
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


def _report(
    plan: FitPlan,
    results: FitResults,
    files: list[str],
    total_seconds: float,
    sampling_seconds: float,
) -> str:
    d = plan.data
    N, D = d.X.shape
    lines = [
        f"bayes-rbfn fit: {plan.model} model, {plan.kernel} kernel"
        + ("" if plan.Z is None else f", M = {plan.Z.shape[0]} inducing inputs")
        + ("" if plan.likelihood == "gaussian" else f", {plan.likelihood} likelihood")
        + ("" if plan.mean == "constant" else f", mean {plan.mean}"),
        f"Data: {plan.source} — {d.description}",
        f"      N = {N:,} observations, {D} input(s) ({', '.join(d.x_names)}), target {d.y_name}"
        + (f", {d.num_groups} groups" if d.group is not None else ""),
    ]
    lines += [f"      note: {note}" for note in plan.notes]
    lines += [
        f"NUTS: {plan.chains} chain(s) × {plan.draws} draws after {plan.warmup} warm-up, seed {plan.seed}; "
        f"sampling and per-draw predictive took {_duration(sampling_seconds)}, "
        f"total {_duration(total_seconds)}.",
        "",
        "Hyperparameters (posterior; units of the data):",
    ]
    table, hidden = _summary_table(results.summary)
    lines += ["  " + row for row in table.splitlines()]
    if hidden:
        lines.append(f"  ... and {hidden} per-group rows: see summary.csv")
    lines += ["", "Diagnostics: " + results.convergence.verdict()]
    if results.saturated:
        total = plan.chains * plan.draws
        lines.append(
            f"{results.saturated} of {total} draws stopped at the maximum tree depth "
            f"{plan.max_tree_depth} (2^{plan.max_tree_depth} − 1 steps): the sampler explored less per draw "
            "than it wanted; raise --max-tree-depth if the ESS is low."
        )
    from bayes_rbfn.models import get_model

    one_input = plan.Z is not None and plan.Z.ndim == 2 and plan.Z.shape[1] == 1
    if one_input and get_model(plan.model).variance_collapses:
        last_z, last_x = float(plan.Z[:, 0].max()), float(plan.X_pred[:, 0].max())
        if last_x > last_z:
            lines.append(
                f"Forecast warning: the predictions reach {d.x_names[0]} = {last_x:g}, past the last "
                f"inducing input at {last_z:g}. The {plan.model} model loses prior variance there, so its "
                "band beyond it is too narrow to trust as a forecast (backtest it with --holdout-after)."
            )
    if results.collapsed:
        S = plan.X_pred.shape[0]
        lines.append(
            f"Variance collapse: at {results.collapsed} of {S} prediction inputs the {plan.model} predictive "
            "keeps less than half of the prior variance (they are far from the inducing inputs), so its "
            "bands there are too narrow; "
            + (
                "--model dtc or fitc keeps the prior variance."
                if plan.likelihood == "gaussian"
                else "add inducing inputs there (--num-inducing): only rbfn takes this likelihood."
            )
        )
    if results.loo is not None:
        loo = results.loo
        lines.append(
            f"PSIS-LOO: elpd_loo = {float(loo.elpd_loo):.1f} (se {float(loo.se):.1f}), "
            f"p_loo = {float(loo.p_loo):.1f}."
        )
    if results.loo_note:
        lines.append(results.loo_note)
    if plan.held_out is not None:
        sc = results.backtest
        lines += [
            "",
            f"Backtest: fitted to {d.x_names[0]} ≤ {sc['holdout_after']:g}, scored on the {int(sc['n'])} "
            "held-out points after it (backtest.csv):",
            f"  95% band covers {sc['coverage_95']:.0%}, 80% band {sc['coverage_80']:.0%}, 50% band "
            f"{sc['coverage_50']:.0%} of them (a calibrated forecast: about 95%, 80%, 50%)",
            f"  MAE {sc['mae']:.4g}, CRPS {sc['crps']:.4g}, interval score (95%) "
            f"{sc['interval_score_95']:.4g}, log predictive density {sc['lpd']:.4g} per point",
        ]
    band = results.band.quantity
    if band != "y*":
        lines.append(
            f"The bands in predictive.png and predictions.csv are of {band} of {d.y_name} given the latent "
            "f (lower/upper, mean, sd_f); sd_y is the sd of a new observation. Posterior predictive "
            "replicates of y are in inference.nc (posterior_predictive)."
        )
    lines += ["", f"Results in {plan.out}{os.sep}:"]
    descriptions = {
        "inference.nc": "ArviZ InferenceData (posterior, posterior_predictive, log_likelihood, …)",
        "summary.csv": "hyperparameter summary (mean, sd, HDI, ESS, r_hat)",
        "trace.png": "MCMC trace plots",
        "rank.png": "rank plots (chain mixing)",
        "predictive.png": f"posterior predictive: mean, 50% and 95% intervals of {band}, inducing inputs",
        "predictions.csv": "the predictive at the prediction inputs (mean, sd, interval bounds)",
        "report.txt": "this report",
        "backtest.csv": "the backtest's scores on the held-out points",
    }
    lines += [f"  {name:<16} {descriptions.get(name, '')}" for name in files]
    return "\n".join(lines)


def _write_outputs(
    plan: FitPlan,
    args: argparse.Namespace,
    idata: Any,
    results: FitResults,
    console: Console,
    start: float,
    sampling_seconds: float,
) -> None:
    from bayes_rbfn.io.output import atomic_output_dir

    console.say(f"Writing {plan.out} ...")
    with atomic_output_dir(plan.out, args.overwrite) as tmp:
        idata.to_netcdf(str(tmp / "inference.nc"))
        results.summary.to_csv(tmp / "summary.csv", index_label="parameter")
        _predictions_frame(plan, results).to_csv(tmp / "predictions.csv", index=False)
        files = ["inference.nc", "summary.csv"]
        if plan.held_out is not None:
            import pandas as pd

            pd.DataFrame([results.backtest]).to_csv(tmp / "backtest.csv", index=False)
            files.append("backtest.csv")
        if not args.no_plots:
            files += _draw_plots(tmp, plan, idata, results)
        files += ["predictions.csv", "report.txt"]
        report = _report(plan, results, files, time.perf_counter() - start, sampling_seconds)
        (tmp / "report.txt").write_text(report + "\n", encoding="utf-8")
    console.result(report)


# --------------------------------------------------------------------------------------------------
# bayes-rbfn compare

#: ``bayes-rbfn compare`` defaults: Snelson's benchmark, where SoR's collapsing variance is easy to see.
DEFAULT_COMPARE_DATASET = "snelson"
DEFAULT_COMPARE_MODELS = ("exact", "sor", "dtc", "fitc", "vfe")
DEFAULT_COMPARE_INDUCING = 15
DEFAULT_TEST_FRACTION = 0.25


def _test_fraction(text: str) -> float:
    value = _fraction(text)
    if not value < 1.0:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below 1, got {value:g}")
    return value


def _compare_arguments(parser: argparse.ArgumentParser) -> None:
    from bayes_rbfn.models import available_models

    models = {name: text for name, text in available_models().items() if not get_spec(name).grouped}
    width = max(map(len, models))
    parser.epilog = (
        "models (--models; grouped models cannot be compared here):\n"
        + "\n".join(f"  {name:<{width}}  {text}" for name, text in models.items())
        + "\n\noutput folder (--out):\n"
        "  comparison.csv         ArviZ's compare table (PSIS-LOO) + held-out elpd, r_hat, divergences and\n"
        "                         the share of prediction points where the variance collapsed\n"
        "  comparison.png         the comparison plot, held-out elpd and each model's predictive band\n"
        "  inference_<model>.nc   each model's InferenceData (as written by 'bayes-rbfn fit')\n"
        "  report.txt             the printed report\n"
        "\nexit status: 0 done, 2 bad input (nothing written), 130 interrupted (nothing written)."
    )
    _data_arguments(parser, DEFAULT_COMPARE_DATASET, grouped=False)
    model = parser.add_argument_group("models")
    model.add_argument(
        "--models",
        nargs="+",
        metavar="NAME",
        type=_one_of("model", _model_names),
        default=list(DEFAULT_COMPARE_MODELS),
        help=f"two or more models to fit and compare (default: {' '.join(DEFAULT_COMPARE_MODELS)})",
    )
    _kernel_arguments(model, DEFAULT_KERNEL, DEFAULT_COMPARE_INDUCING)
    model.add_argument(
        "--test-fraction",
        type=_test_fraction,
        default=DEFAULT_TEST_FRACTION,
        metavar="F",
        help="hold out this share of the rows for the held-out log predictive density; 0 for none "
        f"(default {DEFAULT_TEST_FRACTION})",
    )
    model.add_argument(
        "--split",
        choices=("random", "time"),
        default="random",
        help="which rows --test-fraction holds out: random (chosen with --seed; the default) or time (the "
        "last ones by the single input, to rank the models on forecasting)",
    )
    model.add_argument(
        "--ic",
        choices=("loo", "waic"),
        default="loo",
        help="information criterion of the table (default loo: PSIS-LOO)",
    )
    _sampler_arguments(parser)
    _output_arguments(parser)


def get_spec(name: str) -> Any:
    """The model of the collection called ``name``."""
    from bayes_rbfn.models import get_model

    return get_model(name)


@dataclass
class ComparePlan:
    """A checked ``bayes-rbfn compare`` run: data, split, models, shared inducing inputs, output."""

    data: Dataset
    source: str
    models: list[str]
    kernel: str
    Z: np.ndarray | None
    train: np.ndarray
    test: np.ndarray | None
    X_pred: np.ndarray
    out: Path
    notes: list[str] = field(default_factory=list)


def plan_compare(args: argparse.Namespace) -> ComparePlan:
    """Load and check everything before the first fit (no user error after sampling has started)."""
    from bayes_rbfn.gp.inducing import select_inducing
    from bayes_rbfn.gp.validation import count_distinct_rows
    from bayes_rbfn.io.output import default_output_dir, prepare_output_dir

    data, source = _load_data(args, DEFAULT_COMPARE_DATASET)
    notes = [data.notes] if data.notes else []
    models = list(dict.fromkeys(args.models))
    if len(models) < 2:
        raise UserError(f"--models: give at least two different models to compare, got {' '.join(models)}")
    grouped = [m for m in models if get_spec(m).grouped]
    if grouped:
        raise UserError(
            f"--models: grouped models cannot be compared ({', '.join(grouped)}); use '{PROG} fit'"
        )
    if data.group is not None:
        notes.append("The data are grouped; every model pools the groups into one fit.")
    N = data.X.shape[0]
    if args.split == "time":
        if data.X.shape[1] != 1:
            raise UserError(
                f"--split time: orders the rows by one input column; the data have {data.X.shape[1]}"
            )
        # the last rows by input are held out: order[:n_test] must be the latest
        order = np.argsort(data.X[:, 0], kind="stable")[::-1]
    else:
        order = np.random.default_rng(args.seed).permutation(N)
    n_test = round(args.test_fraction * N)
    if args.test_fraction > 0 and n_test < 1:
        raise UserError(
            f"--test-fraction {args.test_fraction:g} of {N} rows holds out no row; raise it or use 0"
        )
    if N - n_test < MIN_ROWS:
        raise UserError(
            f"--test-fraction {args.test_fraction:g} leaves {N - n_test} training rows of {N}; "
            f"at least {MIN_ROWS} are needed"
        )
    test = np.sort(order[:n_test]) if n_test else None
    train = np.sort(order[n_test:])
    X_train = data.X[train]
    if "exact" in models and X_train.shape[0] > 3000:
        notes.append(
            f"The exact GP costs O(N³) per NUTS step; with N = {X_train.shape[0]:,} expect a long run."
        )

    Z = None
    if any(get_spec(m).uses_inducing for m in models):
        distinct = count_distinct_rows(X_train)
        if args.num_inducing is not None and args.num_inducing > distinct:
            raise UserError(
                f"--num-inducing {args.num_inducing} is more than the {distinct} distinct input value(s) of "
                f"the training rows; choose at most {distinct}"
            )
        M = args.num_inducing if args.num_inducing is not None else min(DEFAULT_COMPARE_INDUCING, distinct)
        try:
            Z = np.asarray(select_inducing(X_train, M, seed=args.seed))
        except ValueError as err:
            raise UserError(f"--num-inducing: {err}") from err

    if data.X.shape[1] == 1:
        X_pred = data.X_test if data.X_test is not None else _prediction_inputs(data, 0.1)[0]
        if test is not None:  # held-out inputs among X_pred: elpd_test reuses the stored predictions
            X_pred = np.unique(np.concatenate([X_pred, data.X[test]]), axis=0)
    else:
        X_pred = data.X if test is None else data.X[test]
    out = (
        args.out
        if args.out is not None
        else default_output_dir(prefix=f"bayes_rbfn_compare_{_slug(data.name)}")
    )
    prepare_output_dir(out, args.overwrite)
    return ComparePlan(
        data=data,
        source=source,
        models=models,
        kernel=args.kernel or DEFAULT_KERNEL,
        Z=Z,
        train=train,
        test=test,
        X_pred=np.asarray(X_pred, dtype=np.float64),
        out=Path(out),
        notes=notes,
    )


@command(
    "compare",
    help="fit several models to the same data and compare them (PSIS-LOO, held-out density)",
    arguments=_compare_arguments,
    description=(
        "Fit several models of the collection to the same data (same inducing inputs, seed and priors)\n"
        "and compare them: ArviZ's compare table over the stored leave-one-out conditionals (PSIS-LOO),\n"
        "the held-out log predictive density on a random test split, and each model's predictive band.\n\n"
        "  bayes-rbfn compare                                 exact, sor, dtc, fitc, vfe on Snelson\n"
        "  bayes-rbfn compare --models sor fitc --num-inducing 8   fewer models and inducing inputs\n"
        "  bayes-rbfn compare DATA.csv --x t --y v --test-fraction 0.2"
    ),
)
def _run_compare(args: argparse.Namespace, console: Console) -> int:
    from bayes_rbfn.gp.sparse import VarianceCollapseWarning
    from bayes_rbfn.io.output import atomic_output_dir
    from bayes_rbfn.workflows.compare import compare_models

    start = time.perf_counter()
    configure_jax()
    with _quiet_libraries():
        plan = plan_compare(args)
        d = plan.data
        console.say(
            f"Data: {plan.source} — {len(plan.train):,} training rows"
            + ("" if plan.test is None else f", {len(plan.test):,} held out (--test-fraction)")
        )
        for note in plan.notes:
            console.say(f"  note: {note}")
        m = "" if plan.Z is None else f", M = {plan.Z.shape[0]} shared inducing inputs (k-means)"
        console.say(f"Models: {', '.join(plan.models)}; kernel {plan.kernel}{m}")

        def announce(name: str, index: int, total: int) -> None:
            console.say(
                f"[{index + 1}/{total}] fitting {name}: {args.chains} chain(s) × "
                f"({args.warmup} warm-up + {args.draws} draws) ..."
            )

        held_out = {} if plan.test is None else {"X_test": d.X[plan.test], "y_test": d.y[plan.test]}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            comparison = compare_models(
                plan.models,
                d.X[plan.train],
                d.y[plan.train],
                X_pred=plan.X_pred,
                Z=plan.Z,
                ic=args.ic,
                seed=args.seed,
                progress=not console.quiet,
                on_fit=announce,
                chains=args.chains,
                draws=args.draws,
                warmup=args.warmup,
                kernel=plan.kernel,
                target_accept=args.target_accept,
                dense_mass=True if args.dense_mass is None else bool(args.dense_mass),
                max_tree_depth=args.max_tree_depth or DEFAULT_MAX_TREE_DEPTH,
                init=args.init,
                check_diagnostics=False,
                **held_out,
            )
        collapse = sorted({str(w.message) for w in caught if issubclass(w.category, VarianceCollapseWarning)})
        report = _compare_report(plan, args, comparison, collapse, time.perf_counter() - start)
        console.say(f"Writing {plan.out} ...")
        with atomic_output_dir(plan.out, args.overwrite) as tmp:
            comparison.table.to_csv(tmp / "comparison.csv", index_label="model")
            comparison.plot(tmp / "comparison.png")
            for name, idata in comparison.idatas.items():
                idata.posterior.attrs["bayes_rbfn_command"] = _command_line(args)
                idata.posterior.attrs["bayes_rbfn_data"] = plan.source
                idata.to_netcdf(str(tmp / f"inference_{name}.nc"))
            (tmp / "report.txt").write_text(report + "\n", encoding="utf-8")
    console.result(report)
    return 0


def _compare_report(
    plan: ComparePlan, args: argparse.Namespace, comparison: Any, collapse: list[str], seconds: float
) -> str:
    d = plan.data
    table = comparison.table
    ic = comparison.ic
    columns = [
        c
        for c in (
            "rank",
            f"elpd_{ic}",
            "se",
            "elpd_diff",
            "dse",
            f"p_{ic}",
            "weight",
            "elpd_test",
            "elpd_test_se",
            "r_hat",
            "divergences",
            "collapsed_points",
        )
        if c in table and not (c.startswith("elpd_test") and plan.test is None)
    ]
    lines = [
        f"bayes-rbfn compare: {', '.join(plan.models)}; {plan.kernel} kernel"
        + ("" if plan.Z is None else f", M = {plan.Z.shape[0]} shared inducing inputs"),
        f"Data: {plan.source} — {d.description}",
        f"      {len(plan.train):,} training rows"
        + (
            ""
            if plan.test is None
            else f", {len(plan.test):,} held out (--test-fraction {args.test_fraction:g}, "
            + (f"seed {args.seed})" if args.split == "random" else "the last by input: --split time)")
        ),
    ]
    lines += [f"      note: {note}" for note in plan.notes]
    lines += [
        f"NUTS: {args.chains} chain(s) × {args.draws} draws after {args.warmup} warm-up per model; "
        f"total {_duration(seconds)}.",
        "",
        f"Ranked by PSIS-{ic.upper()} (elpd: expected log predictive density, higher is better):",
    ]
    text = table[columns].to_string(float_format=lambda v: f"{v:.4g}")
    lines += ["  " + row for row in text.splitlines()]
    lines += [
        "",
        f"How to read it: elpd_{ic} scores each model's fit to the training data (models with the same "
        "marginal likelihood — sor, dtc, asor — tie); elpd_test scores the predictive on held-out rows, "
        "which is where the approximations differ. collapsed_points is the share of prediction inputs "
        "where the model's predictive variance has lost most of the prior variance (SoR and the RBFN far "
        "from Z).",
    ]
    bad = [n for n in table.index if table.loc[n, "r_hat"] > 1.01 or table.loc[n, "divergences"] > 0]
    if bad:
        lines.append(
            f"Convergence: check {', '.join(bad)} (r_hat > 1.01 or divergences); raise --draws/--warmup or "
            "--target-accept and run again before trusting the ranking."
        )
    else:
        lines.append("Convergence: every fit has r_hat ≤ 1.01 and no divergences.")
    lines += [f"Warning: {message}" for message in collapse]
    lines += ["", f"Results in {plan.out}{os.sep}:"]
    lines += [
        "  comparison.csv   the table above (all of ArviZ's columns)",
        "  comparison.png   comparison plot, held-out elpd and each model's predictive band",
    ]
    lines += [f"  inference_{n}.nc  InferenceData of the {n} fit" for n in plan.models]
    lines.append("  report.txt       this report")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# bayes-rbfn sbc

#: Family-wise false-alarm rate of the SBC verdict (Bonferroni over the ranked quantities).
SBC_ALPHA = 0.01


def _sbc_arguments(parser: argparse.ArgumentParser) -> None:
    from bayes_rbfn.workflows import sbc

    parser.epilog = (
        "output folder (--out):\n"
        "  ranks.csv        one row per replication, one column per quantity: its rank among the thinned\n"
        "                   posterior draws, in 0..L\n"
        "  statistics.csv   per quantity: chi2 on binned ranks, degrees of freedom, p-value, mean rank\n"
        "  statistics.json  the same, with the settings, divergences and wall time\n"
        "  ecdf.png         ECDF-difference plot of the ranks with simultaneous 95% bands\n"
        "  report.txt       the printed report\n"
        "\nexit status: 0 done (whatever the verdict), 2 bad input (nothing written), 130 interrupted."
    )
    group = parser.add_argument_group("simulation-based calibration (Talts et al. 2018)")
    group.add_argument(
        "--model",
        metavar="NAME",
        type=_one_of("model", lambda: sbc.MODELS),
        default="sor",
        help=f"model to calibrate: {', '.join(sbc.MODELS)} (default sor): the very model fit runs, under "
        "fixed priors",
    )
    group.add_argument(
        "--likelihood",
        metavar="NAME",
        type=_one_of("likelihood", lambda: sbc.LIKELIHOODS),
        default="gaussian",
        help=f"its likelihood: {', '.join(sbc.LIKELIHOODS)} (default gaussian; only rbfn takes the others)",
    )
    group.add_argument(
        "--reps", type=_positive_int, default=200, metavar="R", help="simulated data sets (200)"
    )
    group.add_argument("--n", type=_positive_int, default=20, help="data points per set (per group) (20)")
    group.add_argument(
        "--num-inducing",
        type=_positive_int,
        default=5,
        metavar="M",
        help="inducing inputs / basis centres (5)",
    )
    group.add_argument("--groups", type=_positive_int, default=3, metavar="G", help="groups, for grouped (3)")
    group.add_argument("--draws", type=_positive_int, default=500, help="NUTS draws per fit (500)")
    group.add_argument("--warmup", type=_positive_int, default=300, help="NUTS warm-up iterations (300)")
    group.add_argument(
        "--thin", type=_positive_int, default=5, help="keep every thin-th draw: L = draws // thin ranks (5)"
    )
    group.add_argument("--seed", type=_non_negative_int, default=0, help="random seed (0)")
    group.add_argument(
        "--noise-scale",
        type=float,
        default=1.0,
        metavar="K",
        help="simulate data with K times the noise the model fits, a deliberately wrong model (1: none; "
        "2 shows what a miscalibrated model looks like; K ≥ 1, Gaussian likelihood)",
    )
    _output_arguments(parser)


@command(
    "sbc",
    help="simulation-based calibration of a model (ranks, chi2 tests, ECDF plot)",
    arguments=_sbc_arguments,
    description=(
        "Simulation-based calibration (Talts et al. 2018): draw the parameters and data from the prior\n"
        "predictive of the model fit runs (NumPyro's Predictive), fit every simulated data set with NUTS\n"
        "(all at once, vectorised), and rank each true parameter and the log-likelihood of the data among\n"
        "the posterior draws. Uniform ranks mean a calibrated sampler and likelihood.\n\n"
        "  bayes-rbfn sbc --model rbfn --reps 200\n"
        "  bayes-rbfn sbc --model rbfn --likelihood poisson\n"
        "  bayes-rbfn sbc --model sor --reps 100 --noise-scale 2    a wrong model: must be rejected"
    ),
)
def _run_sbc(args: argparse.Namespace, console: Console) -> int:
    from bayes_rbfn.io.output import default_output_dir, prepare_output_dir
    from bayes_rbfn.workflows import sbc

    if not (np.isfinite(args.noise_scale) and args.noise_scale >= 1):
        raise UserError(f"argument --noise-scale: must be a finite number ≥ 1, got {args.noise_scale:g}")
    if args.noise_scale != 1 and args.likelihood != "gaussian":
        raise UserError("--noise-scale needs the gaussian likelihood (it scales the noise σ)")
    if args.likelihood != "gaussian" and args.model != "rbfn":
        raise UserError(
            f"--likelihood {args.likelihood} needs --model rbfn (the {args.model!r} model "
            "marginalises its weights, which only the gaussian likelihood allows)"
        )
    if args.thin > args.draws:
        raise UserError(f"--thin {args.thin} is more than --draws {args.draws}: no draw would be kept")
    if args.num_inducing > args.n:
        raise UserError(f"--num-inducing {args.num_inducing} is more than --n {args.n} data points")
    out = args.out if args.out is not None else default_output_dir(prefix=f"bayes_rbfn_sbc_{args.model}")
    prepare_output_dir(out, args.overwrite)
    configure_jax()
    with _quiet_libraries():
        console.say(
            f"SBC of {args.model}: {args.reps} simulated data sets of n = {args.n}, each fitted with NUTS "
            f"({args.warmup} warm-up + {args.draws} draws, every {args.thin}th kept), all at once. "
            "Compiling, then sampling (no progress bar inside the vectorised run) ..."
        )
        try:
            result = sbc.run_sbc(
                args.model,
                reps=args.reps,
                n=args.n,
                num_inducing=args.num_inducing,
                draws=args.draws,
                warmup=args.warmup,
                thin=args.thin,
                seed=args.seed,
                noise_scale=args.noise_scale,
                num_groups=args.groups,
                likelihood=args.likelihood,
            )
        except ValueError as err:
            raise UserError(str(err)) from err
        report = _sbc_report(args, result, Path(out))
        with _atomic_sbc(out, args.overwrite) as tmp:
            sbc.write_sbc(result, tmp, overwrite=True)
            (tmp / "report.txt").write_text(report + "\n", encoding="utf-8")
    console.result(report)
    return 0


@contextlib.contextmanager
def _atomic_sbc(out: Path, overwrite: bool) -> Iterator[Path]:
    """The SBC files and report.txt, moved into ``out`` together (write_sbc's own folder is a subfolder
    of this one's temporary folder, renamed into it)."""
    from bayes_rbfn.io.output import atomic_output_dir

    with atomic_output_dir(out, overwrite) as tmp:
        inner = tmp / "sbc"
        yield inner
        for path in inner.iterdir():
            path.rename(tmp / path.name)
        inner.rmdir()


def _sbc_report(args: argparse.Namespace, result: Any, out: Path) -> str:
    from bayes_rbfn.workflows import sbc

    stats = sbc.statistics(result)
    Q = len(result.params)
    threshold = SBC_ALPHA / Q
    width = max(map(len, result.params))
    lines = [
        f"bayes-rbfn sbc: {result.model}, {args.reps} replications, n = {args.n}, M = {args.num_inducing}; "
        f"{result.num_ranks - 1} thinned draws per fit, ranks in 0..{result.num_ranks - 1}; "
        f"{_duration(result.seconds)}",
        f"chi2 on {result.bins} bins of the ranks ({result.bins - 1} degrees of freedom):",
        f"  {'quantity':<{width}}  {'chi2':>8}  {'p-value':>9}  {'mean rank':>9}",
    ]
    for name, q in stats["quantities"].items():
        flag = "  <" if q["pvalue"] < threshold else ""
        lines.append(f"  {name:<{width}}  {q['chi2']:8.2f}  {q['pvalue']:9.3g}  {q['mean_rank']:9.1f}{flag}")
    total = args.reps * args.draws
    lines.append(f"Divergent transitions: {result.divergences} of {total:,}.")
    if result.min_pvalue < threshold:
        lines.append(
            f"Verdict: NOT calibrated — the ranks of the quantities marked < are not uniform (p below "
            f"{SBC_ALPHA:g}/{Q} = {threshold:.2g}, a family-wise false-alarm rate of {SBC_ALPHA:g}). The "
            "sampler or the likelihood is wrong for this model"
            + (
                " (expected here: --noise-scale misspecifies the simulation)."
                if args.noise_scale != 1
                else "."
            )
        )
    else:
        lines.append(
            "Verdict: consistent with calibration — every p-value is above "
            f"{SBC_ALPHA:g}/{Q} = {threshold:.2g}; see ecdf.png for the shape of any deviation."
        )
    lines += [
        "",
        f"Results in {out}{os.sep}: ranks.csv, statistics.csv, statistics.json, ecdf.png, report.txt",
    ]
    return "\n".join(lines)
