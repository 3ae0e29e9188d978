"""Shared test configuration: float64 everywhere (docs/mathematics.md#numerics), tolerances stated once,
keyed by dtype."""

import contextlib
import gc
import os
import shutil
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
# XLA logs an ERROR line for every persistent-cache hit ("AOT result ... +prefer-no-gather"): tuning flags,
# not missing CPU features. Keep test output readable; real failures still raise in Python.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax
import numpy as np
import pytest

from bayes_rbfn import runtime
from bayes_rbfn.io import arviz_compat  # noqa: F401  (imports ArviZ safely before a test module does)

#: XLA's CPU code generation for the suite's processes (inherited by the CLI's subprocesses and the notebooks'
#: kernels): the older LLVM emitters instead of the fusion emitters, XLA's default in jaxlib 0.9. The suite
#: is compile-bound, and they compile faster: a small fit took 16.7 s instead of 24.2 s, and
#: test_sparse_models + test_small_noise 211 s instead of 263 s (2-core AMD EPYC, 26 Nov 2026). The same
#: operations, fused differently: a run's last bits change, as on another CPU, and every test must pass
#: under either (the stochastic ones at another seed too; README "Testing"). Not the library's default: at
#: N = 10⁶ a value-and-gradient pass was slower with them (1.57 s against 1.26 s). Set
#: ``BAYES_RBFN_TEST_XLA_DEFAULTS=1`` (or name the flag in ``XLA_FLAGS``) to run under XLA's defaults.
#: XLA reads the flags when JAX first starts a backend, after these imports (none of which starts one).
#: jaxlib 0.9 knows the flag; jaxlib 0.11 and newer removed it and refuse to start with an unknown flag.
_EMITTERS_FLAG = "--xla_cpu_use_fusion_emitters=false"
_JAXLIB = tuple(int(part) for part in version("jaxlib").split(".")[:2])
if (
    not os.environ.get("BAYES_RBFN_TEST_XLA_DEFAULTS")
    and "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", "")
    and (0, 9) <= _JAXLIB < (0, 11)
):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_EMITTERS_FLAG}".strip()

runtime.enable_x64()
runtime.limit_blas_threads()
#: JAX's persistent compilation cache, in a folder of this run shared by its processes: the xdist workers
#: (children of the pytest process, whose pid names the folder), the CLI's subprocesses and the notebooks'
#: kernels (``BAYES_RBFN_CACHE_DIR``). A program compiled once serves the other processes, and the same
#: process again after the memory-map guard below has cleared JAX's caches: the suite took 19 min 30 s
#: instead of 22 min 48 s on 2 cores (24 Nov 2026). The folder starts empty, so a local run times what CI
#: runs, and is removed at the end (``BAYES_RBFN_TEST_CACHE=DIR`` keeps one instead,
#: ``BAYES_RBFN_NO_CACHE=1`` turns it off). An earlier CI run segfaulted in XLA's executable serialisation
#: with this cache on; the likely cause was the memory-map limit that the guard below now keeps away from.
_OWNER_PID = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()
_CACHE = Path(
    os.environ.get("BAYES_RBFN_TEST_CACHE")
    or Path(tempfile.gettempdir()) / f"bayes_rbfn_tests_jax_{_OWNER_PID}"
)
os.environ["BAYES_RBFN_CACHE_DIR"] = str(_CACHE)
runtime.enable_compilation_cache(_CACHE)  # unless BAYES_RBFN_NO_CACHE is set

#: Relative tolerances for identities that mathematics fixes exactly, keyed by dtype.
RTOL = {np.dtype("float64"): 1e-8, np.dtype("float32"): 2e-3}
#: Absolute floor, relative to the scale of the compared quantity.
ATOL = {np.dtype("float64"): 1e-10, np.dtype("float32"): 1e-4}


def assert_close(actual, expected, dtype=np.float64, scale=None, rtol=None, atol=None):
    """Assert ``actual ≈ expected`` with the dtype's tolerances; ``scale`` sets the absolute floor's unit."""
    dtype = np.dtype(dtype)
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    scale = np.max(np.abs(expected)) if scale is None else scale
    np.testing.assert_allclose(
        actual,
        expected,
        rtol=RTOL[dtype] if rtol is None else rtol,
        atol=(ATOL[dtype] if atol is None else atol) * max(float(scale), 1.0),
    )


@contextlib.contextmanager
def compile_events(prefix="/jax/core/compile/"):
    """Yields the list of JAX's compile events (tracing, lowering, XLA compilation: durations whose name
    starts with ``prefix``) reported inside the block."""
    events: list[str] = []

    def listen(event, seconds, **kwargs):
        if event.startswith(prefix):
            events.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield events
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)


#: Seconds each of the heaviest test files took in a cold run of the suite (27 Nov 2026, clean clone of
#: fed70f0, 2-core AMD EPYC, both cores busy; junit times). Files start heaviest first, so that
#: ``-n 2 --dist loadfile`` hands the long ones out early and its two processes finish together
#: (longest-processing-time-first scheduling); the order within a file is kept. Files not listed follow in
#: their collection order. gp/test_streamed_passes.py and gp/test_streaming.py share the 132 s of the
#: gp/test_parallel.py they were split from, as they shared a later run of the two (37 s and 32 s).
FILE_SECONDS = {
    "infer/test_mcmc.py": 199,
    "infer/test_resume.py": 186,
    "infer/test_distributed.py": 80,
    "cli/test_cli_distributed.py": 35,
    "test_notebooks.py": 243,
    "cli/test_cli.py": 170,
    "workflows/test_sbc_models.py": 156,
    "workflows/test_sbc.py": 96,
    "workflows/test_compare.py": 80,
    "cli/test_cli_lock.py": 74,
    "gp/test_adversarial.py": 73,
    "gp/test_streamed_passes.py": 71,
    "gp/test_small_noise.py": 69,
    "gp/test_streaming.py": 61,
    "models/test_generative.py": 59,
    "infer/test_programs.py": 50,
    "models/test_layers.py": 46,
    "models/test_sparse_models.py": 41,
    "cli/test_cli_compare.py": 41,
    "infer/test_laplace_start.py": 40,
    "gp/test_sparse.py": 39,
    "gp/test_identities.py": 36,
    "gp/test_mixed_precision.py": 31,
}


#: Test files whose time is XLA compiling programs that then run once on small inputs (the library's entry
#: points called eagerly, compiled primitive by primitive and scan by scan for every shape and dtype). Their
#: tests compile with XLA's optimisations mostly off (``jax_disable_most_optimizations``: backend
#: optimisation level 0, no expensive LLVM passes): test_adversarial and test_sparse took 137 s instead of
#: 171 s alone (27 Nov 2026, 2-core AMD EPYC). Not for the files that sample: their programs run long enough
#: for the optimisations to pay (at level 0 the grouped fit sampled 2.3 times slower); a module-scoped
#: fixture (a fit) is set up before this switch and compiles as usual. The programs round differently, as
#: on another CPU, and every test passes either way; ``BAYES_RBFN_TEST_XLA_DEFAULTS=1`` leaves it off.
#: test_cli is here for its in-process CLI runs, short chains whose time is compiling.
FAST_COMPILE_FILES = frozenset(
    {
        "cli/test_cli.py",
        "gp/test_adversarial.py",
        "gp/test_blr.py",
        "gp/test_core_bad_input.py",
        "gp/test_gp_blr.py",
        "gp/test_identities.py",
        "gp/test_interpolation.py",
        "gp/test_kernels.py",
        "gp/test_mixed_precision.py",
        "gp/test_small_noise.py",
        "gp/test_sparse.py",
        "gp/test_streamed_passes.py",
        "gp/test_streaming.py",
        "infer/test_laplace_start.py",
        "models/test_blr_model.py",
        "models/test_distributions.py",
        "models/test_generative.py",
        "models/test_sparse_models.py",
    }
)
_FAST_COMPILE = not os.environ.get("BAYES_RBFN_TEST_XLA_DEFAULTS")

#: Test files whose time is other processes compiling: the CLI's subprocesses, the notebooks' kernels (smoke
#: runs of at most 50 + 50 iterations), the distributed workers. For the whole of each such file, module
#: fixtures included, those processes inherit ``JAX_DISABLE_MOST_OPTIMIZATIONS=1`` (the switch above, as JAX
#: reads it at start-up). What it saves each file, and the whole suite, is in
#: benchmarks/results/test_suite/history.md.
SUBPROCESS_FAST_COMPILE_FILES = frozenset(
    {
        "test_notebooks.py",
        "infer/test_distributed.py",
        "cli/test_cli.py",
        "cli/test_cli_distributed.py",
        "cli/test_cli_lock.py",
    }
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not _FAST_COMPILE or _relative_path(item) not in SUBPROCESS_FAST_COMPILE_FILES:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:  # set for the item's protocol, restored after it
        patch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
        yield


@pytest.fixture(autouse=True)
def _fast_compile_in_compile_bound_files(request):
    if not _FAST_COMPILE or _relative_path(request.node) not in FAST_COMPILE_FILES:
        yield
        return
    previous = jax.config.values["jax_disable_most_optimizations"]
    jax.config.update("jax_disable_most_optimizations", True)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", previous)


def _relative_path(item) -> str | None:
    """The test's file relative to tests/ (as FILE_SECONDS names it), or None outside tests/."""
    try:
        return Path(item.fspath).relative_to(Path(__file__).parent).as_posix()
    except ValueError:
        return None


def pytest_configure(config):
    # pytest-xdist ≥ 3 hands out the files with the most tests first (``--loadscope-reorder``, its default),
    # which put the two longest files, with few tests each, last. Keep the order sorted below instead.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_unconfigure(config):
    # The pytest process that started the run (not an xdist worker) removes the run's cache folder.
    if not hasattr(config, "workerinput") and not os.environ.get("BAYES_RBFN_TEST_CACHE"):
        shutil.rmtree(_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    # stable: the order within a file is kept
    items.sort(key=lambda item: FILE_SECONDS.get(_relative_path(item), 0), reverse=True)


#: Linux refuses a process more than vm.max_map_count (65,530 by default) memory mappings, and every program
#: XLA compiles for the CPU holds ~19 of its own until JAX's caches drop it. The suite's two long-lived
#: processes compile tens of thousands of programs (the eager calls of the hypothesis tests compile every
#: primitive anew for every shape), and crossing the limit killed a worker inside XLA's compiler
#: (segmentation fault in ``backend_compile_and_load``; 24 Nov 2026, at 36,000 maps in the other worker).
#: The caches are cleared after any test that leaves the count above this share of the limit (not after
#: every file: programs compiled in one file, e.g. the eager primitives of common shapes, serve the next).
MAP_COUNT_SHARE = 0.5


def _map_count_limit() -> int:
    try:
        return int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return 0


_MAP_LIMIT = _map_count_limit()


def _map_count() -> int:
    try:
        with open("/proc/self/maps", "rb") as maps:
            return maps.read().count(b"\n")
    except OSError:
        return 0


def _release_compiled_programs() -> None:
    jax.clear_caches()
    gc.collect()


#: Maps left after the last clearing: programs still referenced (a module's fixtures, jitted functions held
#: by the library) stay mapped, so the next clearing waits until the count has grown by a tenth of the limit
#: again, rather than clearing, and recompiling, after every test.
_after_last_clear = [0]


@pytest.fixture(autouse=True)
def _clear_caches_near_the_map_limit():
    yield
    if not _MAP_LIMIT:
        return
    count = _map_count()
    if count > MAP_COUNT_SHARE * _MAP_LIMIT and count > _after_last_clear[0] + 0.1 * _MAP_LIMIT:
        _release_compiled_programs()
        _after_last_clear[0] = _map_count()


#: ``BAYES_RBFN_TEST_DURATIONS=FILE`` appends "seconds<TAB>phase<TAB>test id<TAB>time<TAB>outcome" for
#: every test phase as it finishes (with xdist the controller repeats its processes' lines), so that a run
#: cut short still tells where its time went and what failed.
_DURATIONS = os.environ.get("BAYES_RBFN_TEST_DURATIONS")


def pytest_runtest_logreport(report):
    if _DURATIONS:
        with open(_DURATIONS, "a") as out:
            out.write(
                f"{report.duration:.2f}\t{report.when}\t{report.nodeid}\t{time.time():.0f}\t{report.outcome}\n"
            )
