"""``bayes-rbfn fit`` over several processes: each process reads its own part of the data.

Started once per process (one per host) with the coordinator's address, the number of processes and the
process's rank, or with ``--cluster`` where JAX detects them (SLURM, Open MPI, …). The data file may name
its part with ``{process}``, replaced by the rank: ``bayes-rbfn fit part-{process}.csv --x x --y y
--model sor --out run --coordinator host0:12345 --num-processes 2 --process-id 0``. Every process fits
the ``sor`` model to the rows of all of them (:mod:`bayes_rbfn.infer.processes`); process 0 writes the
output folder (``inference.nc``, ``summary.csv``, ``report.txt``, and ``test_scores.csv`` with
``--test``) and the checkpoint beside it, ``OUT.checkpoint``: after a failure the same command, started
again in every process, continues from it. docs/distributed.md shows the launch on one machine and on a
cluster.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bayes_rbfn.cli.common import PROG, Console, UserError, configure_jax, duration, quiet_libraries
from bayes_rbfn.cli.options import DEFAULT_TARGET_ACCEPT

__all__ = ["EXIT_LOST_PROCESS", "add_arguments", "run", "wanted"]

#: Exit status of a process whose peer stopped (EX_TEMPFAIL: run the same command again to resume).
EXIT_LOST_PROCESS = 75

#: Options of ``fit`` that a run over several processes does not take.
_REFUSED = {
    "resume": "--resume",
    "dataset": "--dataset",
    "group": "--group",
    "holdout_after": "--holdout-after",
    "holdout": "--holdout",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a run over several processes (``fit``'s group *several processes*).

    Args:
        parser: ``fit``'s parser.
    """
    group = parser.add_argument_group(
        "several processes (each holds its part of the data; docs/distributed.md)",
        "start the same command once per process; DATA may contain {process}, replaced by the rank",
    )
    group.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's host and a free port")
    group.add_argument("--num-processes", type=int, metavar="P", help="the number of processes of the run")
    group.add_argument("--process-id", type=int, metavar="K", help="this process's rank, 0 … P − 1")
    group.add_argument(
        "--cluster",
        action="store_true",
        help="take the coordinator, P and K from the cluster's environment (SLURM, Open MPI, …)",
    )


def wanted(args: argparse.Namespace) -> bool:
    """Whether the command asks for a run over several processes."""
    given = (args.coordinator, args.num_processes, args.process_id)
    return bool(getattr(args, "cluster", False)) or any(v is not None for v in given)


def _check(args: argparse.Namespace) -> None:
    given = {"--coordinator": args.coordinator, "--num-processes": args.num_processes}
    given["--process-id"] = args.process_id
    if args.cluster and any(v is not None for v in given.values()):
        raise UserError("--cluster: takes the coordinator and ranks from the environment; give no other")
    if not args.cluster and any(v is None for v in given.values()):
        missing = ", ".join(k for k, v in given.items() if v is None)
        raise UserError(
            f"{missing}: a run over several processes needs all of --coordinator, "
            "--num-processes and --process-id (or --cluster)"
        )
    if not args.cluster:
        if args.num_processes < 1:
            raise UserError(f"--num-processes: expected a positive number, got {args.num_processes}")
        if not 0 <= args.process_id < args.num_processes:
            raise UserError(f"--process-id: expected 0 … {args.num_processes - 1}, got {args.process_id}")
    for name, option in _REFUSED.items():
        if getattr(args, name, None) not in (None, False):
            raise UserError(f"{option}: not available in a run over several processes")
    if args.model not in (None, "sor"):
        raise UserError(f"--model: a run over several processes fits the sor model, not {args.model!r}")
    if args.likelihood not in (None, "gaussian"):
        raise UserError("--likelihood: a run over several processes takes the gaussian likelihood")
    if args.data is None:
        raise UserError("DATA: a run over several processes reads each process's part from a CSV file")
    if args.out is None:
        raise UserError("--out: a run over several processes needs the output folder named (the same in all)")


def run(args: argparse.Namespace, console: Console) -> int:
    """Fit the ``sor`` model to the parts of every process; process 0 writes the folder.

    Args:
        args: ``fit``'s parsed arguments, with those of :func:`add_arguments`.
        console: where the report goes (process 0 only).

    Returns:
        The exit status.
    """
    from bayes_rbfn import runtime

    _check(args)
    if args.cluster:
        runtime.initialize_distributed()
    else:
        runtime.initialize_distributed(args.coordinator, args.num_processes, args.process_id)
    configure_jax()
    import jax

    rank, processes = jax.process_index(), jax.process_count()
    if rank != 0:
        console.quiet = True
    start = time.perf_counter()
    with quiet_libraries():
        X, y, names, X_pred, test = _load(args, rank)
        from bayes_rbfn.infer.fitting import fit
        from bayes_rbfn.infer.sampler import ProcessLostError
        from bayes_rbfn.workflows import planning

        checkpoint = Path(f"{args.out}.checkpoint")
        console.say(
            f"Fitting sor to {processes} processes' parts of {args.data} ({X.shape[0]:,} rows here), "
            f"{args.chains} chain(s) × ({args.warmup} + {args.draws}) ..."
        )
        try:
            idata = fit(
                "sor",
                X,
                y,
                shard=True,
                X_pred=X_pred,
                num_inducing=args.num_inducing,
                kernel=args.kernel or planning.DEFAULT_KERNEL,
                chains=args.chains,
                warmup=args.warmup,
                draws=args.draws,
                seed=args.seed,
                target_accept=args.target_accept or DEFAULT_TARGET_ACCEPT,
                dense_mass=args.dense_mass,
                max_tree_depth=args.max_tree_depth or planning.DEFAULT_MAX_TREE_DEPTH,
                progress=rank == 0 and not args.quiet,
                checkpoint=checkpoint,
                chunk_size=args.checkpoint_every,
                check_diagnostics=False,
            )
        except ProcessLostError as err:
            console.error(str(err))
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_LOST_PROCESS)  # JAX's runtime would abort at exit, its peer being gone
        if rank == 0:
            _write(args, idata, names, test, console, processes, time.perf_counter() - start)
            import shutil

            shutil.rmtree(checkpoint, ignore_errors=True)
    return 0


def _load(args: argparse.Namespace, rank: int) -> tuple[Any, Any, list[str], np.ndarray, Any]:
    """This process's rows, the input names, the prediction inputs (the same in every process), the test."""
    from bayes_rbfn.infer.processes import data_summary
    from bayes_rbfn.io.reader import read_xy_csv
    from bayes_rbfn.workflows import planning
    from bayes_rbfn.workflows.planning import MIN_ROWS

    path = args.data.replace("{process}", str(rank))
    data = read_xy_csv(path, args.x, args.y, strict=args.strict, min_rows=MIN_ROWS)
    test = None
    if args.test is not None:
        test = read_xy_csv(args.test, args.x, args.y, strict=args.strict, min_rows=1)
        X_pred = test.X
    elif data.X.shape[1] == 1:
        summary = data_summary(data.X, data.y)
        try:
            X_pred = planning.prediction_grid(
                float(summary.x_min[0]), float(summary.x_max[0]), args.x_pred_extend
            )
        except ValueError as err:
            raise UserError(f"--{err}") from None
    else:
        raise UserError("--test: with several inputs, give the prediction inputs as a test file")
    return data.X, data.y, list(data.x_names), X_pred, test


def _write(args, idata, names, test, console: Console, processes: int, seconds: float) -> None:
    """Process 0's output folder: inference.nc, summary.csv, report.txt (and test_scores.csv)."""
    import pandas as pd

    from bayes_rbfn.infer.diagnostics import check_convergence, posterior_summary
    from bayes_rbfn.infer.schema import hyperparameter_names
    from bayes_rbfn.io.netcdf import write_inference_data
    from bayes_rbfn.io.output import atomic_output_dir

    idata.posterior.attrs["bayes_rbfn_command"] = " ".join([PROG, *args.argv])
    summary = posterior_summary(idata, hyperparameter_names(idata)).round(4)
    check = check_convergence(idata)
    lines = [
        f"{PROG} fit: sor model, {processes} processes, {idata.observed_data['y'].size:,} observations "
        f"of {args.y} against {', '.join(names)}",
        f"NUTS: {idata.posterior.sizes['chain']} chain(s) × {idata.posterior.sizes['draw']} draws; "
        f"{duration(seconds)} in all.",
        "",
        summary.to_string(),
        "",
        f"Diagnostics: {check.verdict()}",
    ]
    scores = None
    if test is not None:
        from bayes_rbfn.infer.scores import score

        scores = score(idata, test.X, test.y)
        lines += ["", "Test data: " + ", ".join(f"{k} {v:.4g}" for k, v in scores.items())]
    report = "\n".join(lines) + "\n"
    with atomic_output_dir(args.out, args.overwrite) as folder:
        write_inference_data(idata, folder / "inference.nc")
        summary.to_csv(folder / "summary.csv")
        (folder / "report.txt").write_text(report)
        if scores is not None:
            pd.DataFrame([scores]).to_csv(folder / "test_scores.csv", index=False)
    console.say(report)
    console.say(f"Results in {args.out}/")
