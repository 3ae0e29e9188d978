"""``bayes-rbfn sbc``: simulation-based calibration of a model of the collection.

Ranks, χ² tests and the ECDF plot, through :func:`bayes_rbfn.workflows.sbc.run_sbc`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bayes_rbfn.cli.common import Console, UserError, command, configure_jax, duration, quiet_libraries
from bayes_rbfn.cli.options import count_option, iterations, one_of, option_error, output_arguments, seed

__all__ = ["SBC_ALPHA"]


#: Family-wise false-alarm rate of the SBC verdict (Bonferroni over the ranked quantities).
SBC_ALPHA = 0.01

#: The most simulated data sets of --reps.
MAX_REPS = 100_000
#: The most data points per set of --n, and inducing inputs of --num-inducing.
MAX_POINTS = 1_000_000
#: The most groups of --groups.
MAX_GROUPS = 10_000


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
        type=one_of("model", lambda: sbc.MODELS),
        default="sor",
        help=f"model to calibrate: {', '.join(sbc.MODELS)} (default sor): the very model fit runs, under "
        "fixed priors",
    )
    group.add_argument(
        "--likelihood",
        metavar="NAME",
        type=one_of("likelihood", lambda: sbc.LIKELIHOODS),
        default="gaussian",
        help=f"its likelihood: {', '.join(sbc.LIKELIHOODS)} (default gaussian; only rbfn takes the others)",
    )
    group.add_argument(
        "--reps", type=count_option(MAX_REPS), default=200, metavar="R", help="simulated data sets (200)"
    )
    group.add_argument(
        "--n", type=count_option(MAX_POINTS), default=20, help="data points per set (per group) (20)"
    )
    group.add_argument(
        "--num-inducing",
        type=count_option(MAX_POINTS),
        default=5,
        metavar="M",
        help="inducing inputs / basis centres (5)",
    )
    group.add_argument(
        "--groups", type=count_option(MAX_GROUPS), default=3, metavar="G", help="groups, for grouped (3)"
    )
    group.add_argument("--draws", type=iterations, default=500, help="NUTS draws per fit (500)")
    group.add_argument("--warmup", type=iterations, default=300, help="NUTS warm-up iterations (300)")
    group.add_argument(
        "--thin", type=iterations, default=5, help="keep every thin-th draw: L = draws // thin ranks (5)"
    )
    group.add_argument("--seed", type=seed, default=0, help="random seed (0)")
    group.add_argument(
        "--noise-scale",
        type=float,
        default=1.0,
        metavar="K",
        help="simulate data with K times the noise the model fits, a deliberately wrong model (1: none; "
        "2 shows what a miscalibrated model looks like; K ≥ 1, Gaussian likelihood)",
    )
    output_arguments(parser)


@command(
    "sbc",
    help="simulation-based calibration of a model (ranks, chi2 tests, ECDF plot)",
    arguments=_sbc_arguments,
    description=(
        "Simulation-based calibration (Talts et al. 2018): draw the parameters and data from the prior\n"
        "predictive of the model fit runs (NumPyro's Predictive), fit every simulated data set with NUTS\n"
        "(one compiled run: on a CPU one after the other, on a GPU all at once), and rank each true\n"
        "parameter and the log-likelihood of the data among the posterior draws. Uniform ranks mean a\n"
        "calibrated sampler and likelihood.\n\n"
        "  bayes-rbfn sbc --model rbfn --reps 200\n"
        "  bayes-rbfn sbc --model rbfn --likelihood poisson\n"
        "  bayes-rbfn sbc --model sor --reps 100 --noise-scale 2    a wrong model: must be rejected"
    ),
)
def _run_sbc(args: argparse.Namespace, console: Console) -> int:
    from bayes_rbfn.io.output import default_output_dir, output_lock, prepare_output_dir, remove_leftovers
    from bayes_rbfn.workflows import sbc

    if not (np.isfinite(args.noise_scale) and args.noise_scale >= 1):
        raise UserError(f"argument --noise-scale: must be a finite number ≥ 1, got {args.noise_scale:g}")
    if args.noise_scale != 1 and args.likelihood != "gaussian":
        raise UserError("--noise-scale needs the gaussian likelihood (it scales the noise σ)")
    from bayes_rbfn.models import get_model

    try:
        get_model(args.model).check_likelihood(args.likelihood)
    except ValueError as err:
        raise option_error(err) from None
    if args.thin > args.draws:
        raise UserError(f"--thin {args.thin} is more than --draws {args.draws}: no draw would be kept")
    if args.num_inducing > args.n:
        raise UserError(f"--num-inducing {args.num_inducing} is more than --n {args.n} data points")
    out = args.out if args.out is not None else default_output_dir(prefix=f"bayes_rbfn_sbc_{args.model}")
    prepare_output_dir(out, args.overwrite)
    configure_jax()
    _check_memory(args)
    with quiet_libraries(), output_lock(out):
        remove_leftovers(out)
        console.say(
            f"SBC of {args.model}: {args.reps} simulated data sets of n = {args.n}, each fitted with NUTS "
            f"({args.warmup} warm-up + {args.draws} draws, every {args.thin}th kept), in one compiled run. "
            "Compiling, then sampling (no progress bar inside it) ..."
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


def _check_memory(args: argparse.Namespace) -> None:
    """Refuse a run whose simulated data and NUTS runs cannot fit in memory (an estimate, from above).

    Every iteration of a replication's NUTS run is kept until its draws are ranked: one replication at a
    time on a CPU, all of them at once on an accelerator (``one_device_method``).

    Args:
        args: the parsed options of ``sbc``.

    Raises:
        UserError: the estimate exceeds the memory available; the message names the options to lower.
    """
    from bayes_rbfn.infer.failures import PEAK_COPIES, format_bytes
    from bayes_rbfn.infer.sampler import one_device_method
    from bayes_rbfn.runtime import available_memory

    groups = args.groups if args.model == "grouped" else 1
    points = args.n * groups
    # A weight per inducing input and group, a value per group, a few scalars; the sample statistics.
    values = args.num_inducing * groups + groups + 10 + 12
    at_once = args.reps if one_device_method() == "vectorized" else 1
    workspace = points * (points if args.model == "exact" else args.num_inducing)
    need = 8 * (
        args.reps * (3 * points + values) + at_once * ((args.warmup + args.draws) * values + workspace)
    )
    available = available_memory()
    if available is not None and PEAK_COPIES * need > available:
        raise UserError(
            f"--reps, --n, --warmup, --draws: this run would need about {format_bytes(PEAK_COPIES * need)} "
            f"of memory, and {format_bytes(available)} is available; use fewer replications (--reps), "
            "iterations (--warmup, --draws) or data points (--n)"
        )


@contextlib.contextmanager
def _atomic_sbc(out: Path, overwrite: bool) -> Iterator[Path]:
    """The SBC files and report.txt, moved into ``out`` together.

    write_sbc's own folder is a subfolder of this one's temporary folder, renamed into it.
    """
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
        f"{duration(result.seconds)}",
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
