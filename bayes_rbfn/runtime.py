"""Process-level JAX settings for applications (the CLI, tests, benchmarks) — never applied on import.

The library itself does not touch JAX's global configuration (docs/mathematics.md#numerics). Programs that
own their
process call these explicitly:

* :func:`enable_x64` — float64 everywhere (the CLI and the tests run in float64);
* :func:`enable_compilation_cache` — JAX's persistent compilation cache, so a second run of the same
  model and data shapes skips XLA compilation;
* :func:`limit_blas_threads` / :func:`single_threaded_blas` — one OpenBLAS thread: JAX's CPU LAPACK
  kernels (Cholesky, triangular solves) run in SciPy's OpenBLAS, whose worker threads otherwise compete
  with XLA's for the same cores and slow small solves many times over;
* :func:`use_host_devices` — expose N CPU devices so NUTS chains run in parallel, one per core; must
  run before JAX initialises its backend (before the first computation);
* :func:`initialize_distributed` — join a run of several processes (one per host) through JAX's
  distributed runtime, with CPU collectives between CPU hosts; also before the first computation.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = [
    "HEARTBEAT_TIMEOUT_SECONDS",
    "available_memory",
    "computes_on_cpu",
    "default_cache_dir",
    "enable_compilation_cache",
    "enable_x64",
    "initialize_distributed",
    "limit_blas_threads",
    "single_threaded_blas",
    "use_host_devices",
]


def enable_x64() -> None:
    """Use float64 by default (``jax_enable_x64``)."""
    import jax

    jax.config.update("jax_enable_x64", True)


def default_cache_dir() -> Path:
    """``$BAYES_RBFN_CACHE_DIR``, else ``$XDG_CACHE_HOME/bayes_rbfn/jax`` (``~/.cache/bayes_rbfn/jax``)."""
    if os.environ.get("BAYES_RBFN_CACHE_DIR"):
        return Path(os.environ["BAYES_RBFN_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "bayes_rbfn" / "jax"


def enable_compilation_cache(path: str | os.PathLike | None = None) -> Path | None:
    """Turn on JAX's persistent compilation cache at ``path`` (default :func:`default_cache_dir`).

    Set ``BAYES_RBFN_NO_CACHE=1`` to leave it off. Returns the directory used, or None.
    """
    if os.environ.get("BAYES_RBFN_NO_CACHE"):
        return None
    import jax

    directory = Path(path) if path is not None else default_cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return directory


#: Seconds without a heartbeat after which the distributed runtime declares a process dead, and the
#: others stop with an error instead of waiting for it (JAX's default: 100).
HEARTBEAT_TIMEOUT_SECONDS = 30


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    heartbeat_timeout_seconds: int = HEARTBEAT_TIMEOUT_SECONDS,
    initialization_timeout: int = 300,
    shutdown_timeout_seconds: int = 300,
) -> None:
    """Join a multi-process run: :func:`jax.distributed.initialize`, with CPU collectives on CPU hosts.

    Call it in every process, first thing, before any JAX computation. Without arguments JAX detects the
    cluster from its environment (SLURM, Open MPI, Kubernetes, Cloud TPU: ``cluster_detection_method``
    of :func:`jax.distributed.initialize`); else give the coordinator's ``host:port`` (process 0's host),
    the number of processes and this process's rank, 0 … num_processes − 1. CPU devices of different
    processes exchange their sums through Gloo (``jax_cpu_collectives_implementation``), which XLA's CPU
    client otherwise lacks; accelerators use their own (NCCL on GPUs).

    Args:
        coordinator_address: ``host:port`` of the coordinator, or None to detect it.
        num_processes: the number of processes of the run, or None to detect it.
        process_id: this process's rank, or None to detect it.
        heartbeat_timeout_seconds: how long a silent process may stay silent before the run stops.
        initialization_timeout: how long to wait for every process to join, in seconds.
        shutdown_timeout_seconds: how long a process that ends waits at the shutdown barrier for the
            others (JAX's default, 300 s); where a peer has died, the bound on the stop when the runtime
            has not yet marked that peer dead.

    The persistent compilation cache (:func:`enable_compilation_cache`) is turned off for the process:
    under jaxlib 0.12.1 a multi-process program loaded from it deadlocks in its first Gloo collective,
    so every process compiles its programs afresh.
    """
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        heartbeat_timeout_seconds=heartbeat_timeout_seconds,
        initialization_timeout=initialization_timeout,
        shutdown_timeout_seconds=shutdown_timeout_seconds,
    )


def use_host_devices(count: int) -> None:
    """Ask XLA for ``count`` CPU devices (``--xla_force_host_platform_device_count``).

    Only effective before JAX's backend initialises; a no-op if the flag is already set.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={int(count)}".strip()


def _load_lapack() -> None:
    """Load the OpenBLAS behind JAX's CPU LAPACK kernels (SciPy's) so that threadpoolctl can see it.

    threadpoolctl only limits libraries already loaded, and jaxlib loads SciPy's OpenBLAS on its first
    Cholesky or triangular solve: a limit set before that would not reach it, and its spinning threads
    would slow every log density with a Cholesky inside.
    """
    import scipy.linalg.cython_lapack  # noqa: F401


def computes_on_cpu() -> bool:
    """Whether JAX's default backend is the CPU.

    Before JAX has started its backends (which this does not do: the XLA flags may still be changing) the
    answer is yes, the one backend every install has.
    """
    import jax

    try:
        from jax._src.xla_bridge import backends_are_initialized
    except ImportError:  # pragma: no cover - a future JAX without this helper
        return jax.default_backend() == "cpu"
    return not backends_are_initialized() or jax.default_backend() == "cpu"


def single_threaded_blas():
    """Context manager: OpenBLAS (and other BLAS pools) limited to one thread, restored on exit.

    Only where JAX computes on the CPU (whose LAPACK kernels call that BLAS); on a GPU or TPU the host's
    BLAS pools are left as they are, and the context does nothing.
    """
    from threadpoolctl import threadpool_limits

    if not computes_on_cpu():
        return contextlib.nullcontext()
    _load_lapack()
    return threadpool_limits(limits=1, user_api="blas")


def limit_blas_threads() -> None:
    """Limit BLAS pools to one thread for the rest of the process (for programs that own the process)."""
    single_threaded_blas()  # the limit holds from construction; only leaving its context would undo it


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux's MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return None
