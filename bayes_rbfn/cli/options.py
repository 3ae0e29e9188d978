"""Option types, the option groups shared by the subcommands, and the data set an invocation names.

The shared option groups are data, kernel, sampler and output.

Each option type turns a bad value into a one-line message naming the valid ones.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bayes_rbfn.cli.common import PROG, Console, UserError
from bayes_rbfn.defaults import (
    DENSE_MASS_MAX_HYPERPARAMETERS,
    DENSE_MASS_MAX_PARAMS,
    INITS,
    MAP_START_MIN_POINTS,
    MAX_TREE_DEPTH,
)
from bayes_rbfn.io.datasets import (
    Dataset,
    dataset_defaults,
    dataset_options,
    default_dataset,
    list_case_studies,
    list_datasets,
    load_dataset,
)
from bayes_rbfn.io.reader import read_xy_csv
from bayes_rbfn.workflows.planning import (
    DEFAULT_MAX_TREE_DEPTH,
    MIN_ROWS,
    keep_groups,
)

__all__ = [
    "DEFAULT_CHAINS",
    "DEFAULT_CHECKPOINT_EVERY",
    "DEFAULT_DRAWS",
    "DEFAULT_TARGET_ACCEPT",
    "DEFAULT_WARMUP",
    "MAX_CHAINS",
    "MAX_GROUPS_OPTION",
    "MAX_INDUCING_OPTION",
    "MAX_ITERATIONS",
    "chain_count",
    "count_option",
    "data_arguments",
    "dataset_descriptions",
    "dataset_names",
    "fraction",
    "group_count",
    "inducing_count",
    "iterations",
    "kernel_arguments",
    "kernel_names",
    "likelihood_names",
    "load_checked_data",
    "load_data",
    "mean_option",
    "model_names",
    "number_option",
    "one_of",
    "option_error",
    "output_arguments",
    "positive_int",
    "probability",
    "sampler_arguments",
    "sampler_settings",
    "seed",
    "slug",
    "tree_depth",
]


DEFAULT_CHAINS = 2


DEFAULT_DRAWS = 500


DEFAULT_WARMUP = 500


DEFAULT_TARGET_ACCEPT = 0.8


def sampler_settings(
    args: argparse.Namespace, *, max_tree_depth: int, progress: bool, **checkpointing: Any
) -> Any:
    """The NUTS settings that ``--chains`` … ``--init`` give, as one SamplerSettings.

    Args:
        args: the parsed options.
        max_tree_depth: the depth when ``--max-tree-depth`` is not given.
        progress: show a progress bar.
        **checkpointing: ``checkpoint`` and ``checkpoint_every``, where the command checkpoints.

    Returns:
        The :class:`~bayes_rbfn.infer.sampler.SamplerSettings`.
    """
    from bayes_rbfn.infer.sampler import SamplerSettings

    return SamplerSettings(
        chains=args.chains,
        draws=args.draws,
        warmup=args.warmup,
        seed=args.seed,
        target_accept=args.target_accept or DEFAULT_TARGET_ACCEPT,
        dense_mass=args.dense_mass,
        max_tree_depth=args.max_tree_depth or max_tree_depth,
        init=args.init,
        progress=progress,
        **checkpointing,
    )


#: Iterations between checkpoints of ``bayes-rbfn fit`` (see bayes_rbfn.infer.checkpoint).
DEFAULT_CHECKPOINT_EVERY = 50


def number_option(
    convert: Callable[[str], Any], accept: Callable[[Any], bool], expected: str, must: str
) -> Callable[[str], Any]:
    """An option type: ``convert`` the text, then ``accept`` the value.

    A failed conversion says "expected {expected}", a refused value "must {must}"; both messages quote
    what was given.
    """

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"must {must}, got {text}")
        return value

    return parse


positive_int = number_option(int, lambda v: v >= 1, "a positive whole number", "be a positive whole number")


def count_option(most: int) -> Callable[[str], int]:
    """An option type for a count: a whole number in 1 … ``most``.

    Args:
        most: the largest count accepted.

    Returns:
        The option type; its refusal names the range ("must be a positive whole number ≤ 10,000").
    """
    return number_option(
        int, lambda v: 1 <= v <= most, "a positive whole number", f"be a positive whole number ≤ {most:,}"
    )


#: The most iterations one option asks of a chain (--warmup, --draws, --checkpoint-every; sbc's --warmup,
#: --draws, --thin): warm-up and draws together stay within the 32-bit counters NumPyro keeps when float64
#: is off (2³¹ − 1).
MAX_ITERATIONS = 10**9
#: The most chains of --chains.
MAX_CHAINS = 10_000
#: The most inducing inputs of --num-inducing: each M × M matrix then takes 800 MB.
MAX_INDUCING_OPTION = 10_000
#: The most groups of --max-groups.
MAX_GROUPS_OPTION = 1_000_000
iterations = count_option(MAX_ITERATIONS)
chain_count = count_option(MAX_CHAINS)
inducing_count = count_option(MAX_INDUCING_OPTION)
group_count = count_option(MAX_GROUPS_OPTION)
#: NUTS's tree depth: 1 … MAX_TREE_DEPTH (2^depth − 1 leapfrog steps at most, counted in 32 bits).
tree_depth = number_option(
    int,
    lambda v: 1 <= v <= MAX_TREE_DEPTH,
    "a positive whole number",
    f"be a positive whole number ≤ {MAX_TREE_DEPTH}",
)
#: A PRNG seed: what JAX's keys hold (a signed 64-bit integer ≥ 0).
seed = number_option(int, lambda v: 0 <= v < 2**63, "a whole number ≥ 0", "lie in 0 … 2⁶³ − 1")
probability = number_option(
    float, lambda v: 0.0 < v < 1.0, "a number between 0 and 1", "lie strictly between 0 and 1"
)
fraction = number_option(
    float, lambda v: bool(np.isfinite(v)) and v >= 0.0, "a number ≥ 0", "be a finite number ≥ 0"
)


def one_of(kind: str, valid: Callable[[], Sequence[str]]) -> Callable[[str], str]:
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


def likelihood_names() -> list[str]:
    """The names ``--likelihood`` takes."""
    from bayes_rbfn.models.likelihoods import LIKELIHOODS

    return list(LIKELIHOODS)


def mean_option(text: str) -> str | float:
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


def model_names() -> list[str]:
    """The names ``--model`` takes (the collection's registry)."""
    from bayes_rbfn.models import available_models

    return list(available_models())


def kernel_names() -> list[str]:
    """The names ``--kernel`` takes (the kernel families)."""
    from bayes_rbfn.models.families import FAMILIES

    return list(FAMILIES)


def dataset_descriptions() -> dict[str, str]:
    """The packaged data sets with their one-line descriptions, and the collection's case studies.

    The case studies are those that bring their own model (:func:`~bayes_rbfn.io.datasets.list_case_studies`).
    """
    return {**list_datasets(), **list_case_studies()}


def dataset_names() -> list[str]:
    """The names ``--dataset`` takes."""
    return list(dataset_descriptions())


def data_arguments(parser: argparse.ArgumentParser, default_dataset: str, grouped: bool) -> None:
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
        type=one_of("data set", dataset_names),
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
            type=group_count,
            metavar="G",
            help="grouped data: keep G groups, evenly spread over the sorted group labels",
        )


def kernel_arguments(group: Any, default_kernel: str, default_num_inducing: str) -> None:
    """--kernel and --num-inducing (shared by fit and compare); ``default_num_inducing`` words the default."""
    group.add_argument(
        "--kernel",
        metavar="NAME",
        type=one_of("kernel", kernel_names),
        help=f"kernel family (default: {default_kernel}); listed below",
    )
    group.add_argument(
        "--num-inducing",
        type=inducing_count,
        metavar="M",
        help=f"inducing inputs (RBF centres), chosen by k-means (default {default_num_inducing})",
    )


def sampler_arguments(parser: argparse.ArgumentParser) -> None:
    """The NUTS options (shared by fit and compare)."""
    sampler = parser.add_argument_group("sampler (NUTS)")
    sampler.add_argument(
        "--chains",
        type=chain_count,
        default=DEFAULT_CHAINS,
        help=f"Markov chains, run in parallel up to the number of cores (default {DEFAULT_CHAINS})",
    )
    sampler.add_argument(
        "--draws",
        type=iterations,
        default=DEFAULT_DRAWS,
        help=f"draws per chain (default {DEFAULT_DRAWS})",
    )
    sampler.add_argument(
        "--warmup",
        type=iterations,
        default=DEFAULT_WARMUP,
        help=f"warm-up (adaptation) iterations per chain, discarded (default {DEFAULT_WARMUP})",
    )
    sampler.add_argument(
        "--seed", type=seed, default=0, help="random seed (inducing inputs and NUTS; default 0)"
    )
    sampler.add_argument(
        "--target-accept",
        type=probability,
        metavar="P",
        help=f"NUTS target acceptance probability; raise it (e.g. 0.95) after divergences "
        f"(default {DEFAULT_TARGET_ACCEPT}; 0.95 for --dataset birthdays)",
    )
    sampler.add_argument(
        "--max-tree-depth",
        type=tree_depth,
        metavar="D",
        help=f"NUTS takes at most 2^D − 1 steps per draw, D ≤ {MAX_TREE_DEPTH} "
        f"(default {DEFAULT_MAX_TREE_DEPTH}{_own_tree_depths()})",
    )
    sampler.add_argument(
        "--dense-mass",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="adapt a dense mass matrix (default: dense when the model samples at most "
        f"{DENSE_MASS_MAX_PARAMS} values, or at most {DENSE_MASS_MAX_HYPERPARAMETERS} that are all "
        "hyperparameters, as fit(dense_mass=None); else diagonal)",
    )
    sampler.add_argument(
        "--init",
        choices=INITS,
        default="auto",
        help="how the chains start: 'median' (prior median, identity mass matrix), 'map' (the posterior "
        "mode and a Laplace mass matrix: much shorter early warm-up for large data sets) or 'auto' "
        f"(default: map from {MAP_START_MIN_POINTS:,} data points on, else median)",
    )


def _own_tree_depths() -> str:
    """``"; 5 for --dataset co2, …"``: the packaged data sets' own tree depths, for --max-tree-depth."""
    depths = {name: dataset_defaults(name).max_tree_depth for name in dataset_names()}
    own = [f"{depth} for --dataset {name}" for name, depth in depths.items() if depth is not None]
    return "; " + ", ".join(own) if own else ""


def output_arguments(parser: argparse.ArgumentParser) -> Any:
    """--out, --overwrite, --quiet (shared by every command that writes a folder); returns the group."""
    output = parser.add_argument_group("output")
    output.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        help="output folder (default: a new folder bayes_rbfn_<data>_<date-time> here)",
    )
    output.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier result of this program in --out: only the files it wrote there (any other "
        "file makes it refuse)",
    )
    output.add_argument(
        "--quiet", action="store_true", help="no progress or notes; only the final report (and errors)"
    )
    return output


def load_data(args: argparse.Namespace, default: str | None = None) -> tuple[Dataset, str]:
    """The data set to fit and a phrase saying where it came from.

    Args:
        args: the parsed options.
        default: the packaged data set fitted without a file or --dataset (None: the main job's,
            :func:`~bayes_rbfn.io.datasets.default_dataset`).
    """
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
        # A pipe with no writer yet blocks; say so (even with --quiet: silence would look like a hang).
        data = read_xy_csv(
            args.data,
            args.x,
            args.y,
            group_col=group_col,
            strict=args.strict,
            min_rows=MIN_ROWS,
            on_wait=Console().say,
        )
        return keep_groups(data, max_groups), f"file {args.data}"
    given = [opt for opt, val in (("--x", args.x), ("--y", args.y), ("--group", group_col)) if val]
    if given:
        raise UserError(
            f"{'/'.join(given)} name columns of a CSV file; give the file too "
            f"({PROG} fit DATA.csv --x COL --y COL), or drop {'/'.join(given)} to fit a packaged data set"
        )
    name = args.dataset or default or default_dataset()
    if name in list_case_studies():
        raise UserError(f"--dataset {name}: '{PROG} fit --dataset {name}' fits it, with its own model")
    options: dict[str, Any] = {}
    if max_groups is not None and "max_groups" in dataset_options(name):  # a loader that picks them itself
        options["max_groups"] = max_groups
    try:
        data = load_dataset(name, **options)
    except ValueError as err:
        raise UserError(str(err)) from err
    return keep_groups(data, max_groups), f"packaged data set {name!r}"


def load_checked_data(args: argparse.Namespace) -> tuple[Dataset, str]:
    """:func:`load_data`, refusing columns whose scale float64 cannot carry (a UserError naming the source).

    The check is :func:`bayes_rbfn.workflows.planning.check_data_scales`.
    """
    from bayes_rbfn.workflows.planning import check_data_scales

    data, source = load_data(args)
    try:
        check_data_scales(data)
    except ValueError as err:
        raise UserError(f"{source}: {err}") from None
    return data, source


def slug(name: str) -> str:
    """``name`` with every character but letters, digits, ``-`` and ``_`` replaced by ``_`` (for folders)."""
    keep = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
    return keep or "data"


def option_error(err: ValueError) -> UserError:
    """A library error about an argument as the command line's error about its option.

    For example ``"num_inducing 80 is more than ..."`` → ``"--num-inducing 80 is more than ..."``.
    """
    message = str(err)
    name, _, rest = message.partition(" ")
    if name.rstrip(":").isidentifier():
        message = "--" + name.replace("_", "-") + (" " + rest if rest else "")
    return UserError(message)
