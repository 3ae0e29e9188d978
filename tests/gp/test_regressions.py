"""Regressions in the numerical stack that once broke this project."""

import json
import subprocess
import sys
import textwrap

import pytest

_CONCURRENT_BATCHED_SOLVES = textwrap.dedent(
    """
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl

    L = jnp.broadcast_to(jnp.eye(15) + 0.1 * jnp.tril(jnp.ones((15, 15)), -1), (6000, 15, 15))
    b = jnp.ones((6000, 15))

    @jax.jit
    def two_independent_batched_solves(L, b):
        x1 = jax.vmap(lambda l, v: jsl.solve_triangular(l, v, lower=True))(L, b)
        x2 = jax.vmap(lambda l, v: jsl.solve_triangular(l, v, lower=True, trans="T"))(L, 2 * b)
        return x1.sum() + x2.sum()

    for i in range(200):
        two_independent_batched_solves(L, b + i).block_until_ready()
    print("done")
    """
)


@pytest.mark.parametrize("attempt", range(3), ids=lambda i: f"attempt-{i}")
def test_concurrent_batched_triangular_solves_do_not_deadlock(attempt):
    """jaxlib 0.10.x deadlocked (~1 run in 3 on 2 cores) when XLA ran two batched LAPACK triangular
    solves at once; vectorised NUTS chains and per-draw predictions do exactly that. The version pin in
    pyproject.toml avoids it; this test fails (times out) if an affected jaxlib comes back."""
    result = subprocess.run(
        [sys.executable, "-c", _CONCURRENT_BATCHED_SOLVES], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout


_BLAS_LIMIT = textwrap.dedent(
    """
    import json
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from threadpoolctl import threadpool_info
    from bayes_rbfn import runtime

    def openblas_threads():
        return {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["internal_api"] == "openblas"}

    {how}
    # JAX's first Cholesky loads the OpenBLAS behind its LAPACK kernels, after the limit was set.
    jnp.linalg.cholesky(jnp.eye(4) * 2.0).block_until_ready()
    print(json.dumps(openblas_threads()))
    """
)


@pytest.mark.parametrize(
    "how",
    ["runtime.limit_blas_threads()", "ctx = runtime.single_threaded_blas(); ctx.__enter__()"],
    ids=["process-wide", "scoped"],
)
def test_blas_limit_reaches_the_lapack_that_jax_loads_later(how):
    """threadpoolctl limits only the BLAS libraries already loaded; jaxlib loads SciPy's OpenBLAS on its
    first LAPACK call, so a limit set before it never reached it and its spinning threads slowed every
    SoR log density by ~25 % on 2 cores. The limit must hold for every OpenBLAS in the process after
    JAX's first factorisation (a fresh process, so nothing was loaded before)."""
    result = subprocess.run(
        [sys.executable, "-c", _BLAS_LIMIT.replace("{how}", how)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    threads = json.loads(result.stdout.strip().splitlines()[-1])
    assert threads, "no OpenBLAS found in the process"
    assert all(n == 1 for n in threads.values()), threads
