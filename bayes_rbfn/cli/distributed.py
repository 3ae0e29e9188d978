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

Every process checks the options, its part of the data, the test file and the output folder before it
joins the others, with the messages of a single-process run; what depends on every process's rows (the
number of inducing inputs, the prediction grid) is checked right after joining, the same in all of them,
before any sampling. A process that waits for the others says so on stderr, and gives up after
``--join-timeout`` seconds with exit status :data:`EXIT_LOST_PROCESS`.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from bayes_rbfn.cli.common import (
    PROG,
    Console,
    UserError,
    check_finite_scores,
    configure_jax,
    duration,
    quiet_libraries,
)
from bayes_rbfn.cli.options import sampler_settings

__all__ = [
    "DEFAULT_JOIN_TIMEOUT",
    "EXIT_LOST_PROCESS",
    "MAX_JOIN_TIMEOUT",
    "MAX_PROCESSES",
    "SingleProcessChecks",
    "add_arguments",
    "coordinator_address",
    "run",
    "wanted",
]

#: Exit status of a process whose peer stopped, or never joined within ``--join-timeout`` (EX_TEMPFAIL:
#: run the same command again in every process; a stopped run resumes from its checkpoint).
EXIT_LOST_PROCESS = 75

#: The most processes ``--num-processes`` takes.
MAX_PROCESSES = 65_536

#: Seconds a process waits for the others to join (``--join-timeout``), by default and at most.
DEFAULT_JOIN_TIMEOUT = 300
MAX_JOIN_TIMEOUT = 86_400

#: Seconds of waiting after which a process says that it waits (at most half the join timeout).
_NOTICE_AFTER = 2.0

#: Seconds JAX's own initialisation timeout exceeds ``--join-timeout``: at its own timeout JAX's runtime
#: aborts the process (jaxlib 0.9 and 0.12), so the process gives up first, with a message.
_JAX_TIMEOUT_MARGIN = 60

#: Options of ``fit`` that a run over several processes does not take.
_REFUSED = {
    "resume": "--resume",
    "dataset": "--dataset",
    "group": "--group",
    "holdout_after": "--holdout-after",
    "holdout": "--holdout",
    "years": "--years",
}


class SingleProcessChecks(NamedTuple):
    """The checks of a run in one process (:mod:`bayes_rbfn.cli.fit`) that each process repeats, given by it.

    Given, not imported: ``fit`` imports this module.
    """

    #: ``(args, data, likelihood, notes)`` → the test data of ``--test``, or None; refuses a bad test file.
    load_test: Callable[..., Any]
    #: ``args`` → the input files that the output folder may not hold.
    inputs: Callable[[argparse.Namespace], list[str]]
    #: ``(args, data, Z, X_pred, out)``: refuses draws that would not fit in memory or on the disk.
    check_result_size: Callable[..., None]


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
    group.add_argument(
        "--join-timeout",
        type=int,
        metavar="SECONDS",
        help=f"give up when the other processes have not all joined within SECONDS, exit status "
        f"{EXIT_LOST_PROCESS} (default {DEFAULT_JOIN_TIMEOUT}, at most {MAX_JOIN_TIMEOUT})",
    )


def wanted(args: argparse.Namespace) -> bool:
    """Whether the command asks for a run over several processes.

    Args:
        args: ``fit``'s parsed arguments.

    Returns:
        True when any option of :func:`add_arguments` is given.
    """
    given = (args.coordinator, args.num_processes, args.process_id, getattr(args, "join_timeout", None))
    return bool(getattr(args, "cluster", False)) or any(v is not None for v in given)


def coordinator_address(text: str) -> tuple[str, int]:
    """The host and port of ``--coordinator HOST:PORT`` (an IPv6 host in brackets: ``[::1]:1234``).

    Args:
        text: the option's value.

    Returns:
        (host, port), the host without brackets.

    Raises:
        UserError: no host, no port, a port that is not a number in 1 … 65535, or blanks.
    """
    host, colon, port = text.rpartition(":")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not bare or (":" in bare and bare == host) or any(c.isspace() for c in text):
        raise UserError(
            f"--coordinator: expected HOST:PORT, process 0's host and a free port (such as "
            f"localhost:12345), got {text!r}"
        )
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        raise UserError(f"--coordinator {text}: the port must be a number in 1 … 65535, got {port!r}")
    return bare, int(port)


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
        coordinator_address(args.coordinator)
        _check_ranks(args.num_processes, args.process_id)
    timeout = args.join_timeout
    if timeout is not None and not 1 <= timeout <= MAX_JOIN_TIMEOUT:
        raise UserError(f"--join-timeout: expected 1 … {MAX_JOIN_TIMEOUT} seconds, got {timeout}")
    for name, option in _REFUSED.items():
        if getattr(args, name, None) not in (None, False):
            raise UserError(f"{option}: not available in a run over several processes")
    if args.model not in (None, "sor"):
        raise UserError(f"--model: a run over several processes fits the sor model, not {args.model!r}")
    if args.likelihood not in (None, "gaussian"):
        raise UserError("--likelihood: a run over several processes takes the gaussian likelihood")
    if args.mean not in (None, "constant"):
        raise UserError("--mean: a run over several processes takes the constant mean (the data's mean)")
    if getattr(args, "inducing", None) not in (None, "kmeans"):
        raise UserError("--inducing: a run over several processes chooses its inducing inputs by k-means")
    if args.data is None:
        raise UserError("DATA: a run over several processes reads each process's part from a CSV file")
    if args.out is None:
        raise UserError("--out: a run over several processes needs the output folder named (the same in all)")


def _check_ranks(processes: int, rank: int, where: str = "") -> None:
    """Refuse a number of processes out of 1 … :data:`MAX_PROCESSES`, or a rank out of 0 … P − 1."""
    if not 1 <= processes <= MAX_PROCESSES:
        raise UserError(f"--num-processes{where}: expected 1 … {MAX_PROCESSES:,}, got {processes}")
    if not 0 <= rank < processes:
        raise UserError(f"--process-id{where}: expected 0 … {processes - 1}, got {rank}")


def run(args: argparse.Namespace, console: Console, checks: SingleProcessChecks) -> int:
    """Fit the ``sor`` model to the parts of every process; process 0 writes the folder.

    The options, this process's part, the test file and the output folder are checked before the process
    joins the others; what depends on every part is checked after joining, before any sampling.

    Args:
        args: ``fit``'s parsed arguments, with those of :func:`add_arguments`.
        console: where the report goes (process 0 only).
        checks: those of a run in one process, with their messages.

    Returns:
        The exit status.
    """
    _check(args)
    timeout = args.join_timeout or DEFAULT_JOIN_TIMEOUT
    address, processes, rank = _where(args, timeout)
    if rank != 0:
        console.quiet = True
    with quiet_libraries():
        data, X_pred, test, notes = _prepare(args, rank, checks)
    _join(address, processes, rank, timeout, args.cluster)
    configure_jax()
    start = time.perf_counter()
    with quiet_libraries():
        X_pred, Z = _after_join(args, data, X_pred, test)
        from bayes_rbfn.infer.fitting import fit
        from bayes_rbfn.infer.sampler import ProcessLostError
        from bayes_rbfn.workflows import planning

        checkpoint = Path(f"{args.out}.checkpoint")
        for note in notes:
            console.say(f"  note: {note}")
        console.say(
            f"Fitting sor to {processes} processes' parts of {args.data} ({data.X.shape[0]:,} rows here), "
            f"{args.chains} chain(s) × ({args.warmup} + {args.draws}) ..."
        )
        try:
            idata = fit(
                "sor",
                data.X,
                data.y,
                shard=True,
                X_pred=X_pred,
                Z=Z,
                kernel=args.kernel or planning.DEFAULT_KERNEL,
                sampler=sampler_settings(
                    args,
                    max_tree_depth=planning.DEFAULT_MAX_TREE_DEPTH,
                    progress=rank == 0 and not args.quiet,
                    checkpoint=checkpoint,
                    checkpoint_every=args.checkpoint_every,
                ),
                check_diagnostics=False,
            )
        except ProcessLostError as err:
            console.error(str(err))
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_LOST_PROCESS)  # JAX's runtime would abort at exit, its peer being gone
        if rank == 0:
            names = list(data.x_names)
            _write(args, idata, names, test, console, processes, time.perf_counter() - start)
            import shutil

            shutil.rmtree(checkpoint, ignore_errors=True)
    return 0


def _where(args: argparse.Namespace, timeout: int) -> tuple[str, int, int]:
    """(coordinator's HOST:PORT, number of processes, this process's rank), given or from the cluster.

    Refuses a coordinator whose host cannot be found and, in process 0, a port that is taken.
    """
    option = "--cluster" if args.cluster else "--coordinator"
    if args.cluster:
        address, processes, rank = _detect_cluster(timeout)
        _check_ranks(processes, rank, " (from the cluster's environment)")
    else:
        address, processes, rank = args.coordinator, args.num_processes, args.process_id
    host, port = coordinator_address(address)
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as err:  # socket.gaierror: no such host
        why = err.strerror or err
        raise UserError(f"{option} {address}: cannot find the host {host!r} ({why})") from None
    if rank == 0:
        _check_port_free(option, address, port)
    return address, processes, rank


def _detect_cluster(timeout: int) -> tuple[str, int, int]:
    """The coordinator, the number of processes and the rank that JAX detects in the cluster's environment.

    The detection :func:`jax.distributed.initialize` runs first (SLURM, Open MPI, Kubernetes, Cloud TPU),
    here before joining, so that the rank is known and the absence of a cluster is a one-line refusal.
    """
    try:
        from jax._src.clusters import ClusterEnv

        detect = ClusterEnv.auto_detect_unset_distributed_params
    except (ImportError, AttributeError):  # pragma: no cover - a JAX without this detection
        raise UserError(
            "--cluster: this JAX cannot detect the cluster before joining it; give --coordinator, "
            "--num-processes and --process-id"
        ) from None
    try:
        address, processes, rank, _ = detect(
            os.environ.get("JAX_COORDINATOR_ADDRESS"), None, None, None, None, timeout
        )
    except Exception as err:  # the environment's own detection failed (a malformed variable, …)
        raise UserError(f"--cluster: JAX could not read the cluster's environment: {err}") from None
    if address is None or processes is None or rank is None:
        raise UserError(
            "--cluster: no cluster found in this process's environment (JAX detects SLURM, Open MPI, "
            "Kubernetes and Cloud TPU); elsewhere give --coordinator, --num-processes and --process-id"
        )
    return str(address), int(processes), int(rank)


def _check_port_free(option: str, address: str, port: int) -> None:
    """Refuse, in process 0, a port that another program holds (JAX's coordinator would crash binding it)."""
    import errno

    for family, anywhere in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 here: try IPv4
            continue
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((anywhere, port))
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    raise UserError(
                        f"{option} {address}: port {port} is in use on this host, where process 0 serves "
                        "the coordinator; choose a free port"
                    ) from None
                if err.errno == errno.EACCES:
                    raise UserError(
                        f"{option} {address}: port {port} is not open to this user here (permission "
                        "denied); choose a port from 1024 up"
                    ) from None
                continue
            return


def _join(address: str, processes: int, rank: int, timeout: int, cluster: bool) -> None:
    """Join the other processes (:func:`bayes_rbfn.runtime.initialize_distributed`), waiting ``timeout`` s.

    After a moment's wait the process says on stderr that it waits, and for how many; when the others have
    not all joined within ``timeout`` seconds it says which did not and exits with
    :data:`EXIT_LOST_PROCESS` (JAX's runtime would abort the process at its own timeout, without a word).
    """
    from bayes_rbfn import runtime

    who = f"process {rank} of {processes}"
    joined = threading.Event()
    lock = threading.Lock()
    answered = [False]  # whether process 0's port answered while this one waited (rank > 0)

    def probe() -> None:
        answered[0] = answered[0] or (rank > 0 and _answers(address))

    def notice() -> None:
        probe()
        with lock:
            if not joined.is_set():
                others = "the other process" if processes == 2 else f"the other {processes - 1} processes"
                print(
                    f"{who}: waiting for {others} at {address} (gives up after {timeout} s; --join-timeout)",
                    file=sys.stderr,
                    flush=True,
                )

    def give_up() -> None:
        probe()
        with lock:
            if joined.is_set():
                return
            absent = _absent(address, processes, rank, answered[0])
            Console().error(
                f"{who}: gave up after {timeout} s (--join-timeout): {absent}; "
                f"start every process of the run{' (the same command)' if cluster else ''} within that "
                "time; nothing was written"
            )
            sys.stdout.flush()
            os._exit(EXIT_LOST_PROCESS)  # the main thread is inside JAX's connect, which cannot be stopped

    timers = []
    if processes > 1:
        timers = [threading.Timer(min(_NOTICE_AFTER, timeout / 2), notice), threading.Timer(timeout, give_up)]
    for timer in timers:
        timer.daemon = True
        timer.start()
    try:
        runtime.initialize_distributed(
            address, processes, rank, initialization_timeout=timeout + _JAX_TIMEOUT_MARGIN
        )
    finally:
        with lock:
            joined.set()
        for timer in timers:
            timer.cancel()


def _answers(address: str) -> bool:
    """Whether something accepts connections at the coordinator's HOST:PORT."""
    host, port = coordinator_address(address)
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


def _absent(address: str, processes: int, rank: int, answered: bool) -> str:
    """Which processes did not join, as far as this one can tell (JAX does not name them).

    ``answered``: whether process 0's port answered while this process waited (for a rank above 0).
    """
    if rank == 0:
        if processes == 2:
            return f"process 1 never joined at {address}"
        return (
            f"of processes 1 … {processes - 1}, one or more never joined at {address} (JAX does not say "
            "which)"
        )
    if not answered:
        return f"process 0, the coordinator, never answered at {address}"
    if processes == 2:
        return f"process 0 answered at {address}, but the run did not form (the same --num-processes?)"
    if processes == 3:
        return f"process 0 answered at {address}, but process {3 - rank} never joined"
    return (
        f"process 0 answered at {address}, but of the {processes - 2} processes other than 0 and {rank}, one "
        "or more never joined (JAX does not say which)"
    )


def _prepare(
    args: argparse.Namespace, rank: int, checks: SingleProcessChecks
) -> tuple[Any, np.ndarray, Any, list[str]]:
    """Read and check this process's part, the test file and the output folder, before joining.

    The checks are those of a run in one process, with the same messages.

    Returns:
        (this process's part, the prediction inputs — the test file's, or this part's grid, which only
        checks ``--x-pred-extend`` —, the test data or None, notes for the report).
    """
    from bayes_rbfn.cli.options import load_checked_data
    from bayes_rbfn.io.output import prepare_output_dir
    from bayes_rbfn.models.likelihoods import get_likelihood

    part = argparse.Namespace(**vars(args))
    part.data = args.data.replace("{process}", str(rank))
    data, _ = load_checked_data(part)
    notes = [data.notes] if data.notes else []
    test = checks.load_test(part, data, get_likelihood("gaussian"), notes)
    if test is not None:
        X_pred = test.X
    elif data.X.shape[1] == 1:
        X_pred = _grid(float(data.X[:, 0].min()), float(data.X[:, 0].max()), args.x_pred_extend)
    else:
        raise UserError("--test: with several inputs, give the prediction inputs as a test file")
    prepare_output_dir(args.out, args.overwrite, protect=checks.inputs(part))
    # This part's rows: a lower bound of the run's, so a refusal here holds for the run.
    checks.check_result_size(part, data, None, X_pred, Path(args.out))
    return data, X_pred, test, notes


def _after_join(args: argparse.Namespace, data: Any, X_pred: np.ndarray, test: Any) -> tuple[np.ndarray, Any]:
    """(prediction inputs, inducing inputs) of the run, from every process's rows; the same in all of them.

    A refusal here (parts of unequal sizes, more inducing inputs than distinct inputs) is the same in every
    process, so all of them stop with it.
    """
    import jax

    from bayes_rbfn.cli.options import option_error
    from bayes_rbfn.infer.fitting import INDUCING_SUBSAMPLE
    from bayes_rbfn.infer.processes import common_subsample, data_summary
    from bayes_rbfn.models import get_model
    from bayes_rbfn.workflows import planning

    try:
        summary = data_summary(data.X, data.y)
    except ValueError as err:
        raise UserError(f"{args.data}: {str(err).removeprefix('X: ')}") from None
    if test is None:
        X_pred = _grid(float(summary.x_min[0]), float(summary.x_max[0]), args.x_pred_extend)
    inputs = data.X
    if jax.process_count() > 1:  # as fit() would: k-means on a subsample drawn from every process
        inputs = common_subsample(data.X, INDUCING_SUBSAMPLE, args.seed)
    try:
        Z = planning.choose_inducing(
            inputs, args.num_inducing, None, args.seed, samples_weights=get_model("sor").samples_weights
        )
    except ValueError as err:
        raise option_error(err) from None
    return X_pred, Z


def _grid(lo: float, hi: float, extend: float) -> np.ndarray:
    """One input's prediction grid over [lo, hi] and ``extend`` × its range past it (``--x-pred-extend``)."""
    from bayes_rbfn.workflows import planning

    try:
        return planning.prediction_grid(lo, hi, extend)
    except ValueError as err:
        raise UserError(f"--{err}") from None


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
        check_finite_scores(scores, f"--test {args.test}: the")
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
