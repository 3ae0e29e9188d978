"""The GPU path stays tested on a CPU-only machine (issue 20): nothing the package does assumes a CPU.

On a GPU (or TPU) backend the host's BLAS thread pools are left alone — the one CPU-specific setting the
package makes (:func:`bayes_rbfn.runtime.single_threaded_blas`) is a no-op there. The backend's name is
stood in for; everything else runs as it does on the GPU.
"""

from __future__ import annotations

import contextlib

import jax
import pytest
from jax._src import xla_bridge
from threadpoolctl import threadpool_info

from bayes_rbfn import runtime


def blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


@pytest.mark.parametrize("backend", ["gpu", "tpu"])
def test_no_blas_pinning_off_the_cpu(monkeypatch, backend):
    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    monkeypatch.setattr(xla_bridge, "backends_are_initialized", lambda: True)
    assert not runtime.computes_on_cpu()
    before = blas_threads()
    with runtime.single_threaded_blas() as ctx:
        assert isinstance(runtime.single_threaded_blas(), contextlib.nullcontext)
        assert ctx is None and blas_threads() == before


def test_blas_pinned_on_the_cpu():
    assert jax.default_backend() == "cpu" and runtime.computes_on_cpu()
    with runtime.single_threaded_blas():
        assert all(n == 1 for n in blas_threads())


def test_streamed_pass_chunks_fill_a_gpu_and_fit_a_cpu_cache(monkeypatch):
    """The chunk of the streamed O(NM²) pass: ≈ 1 MiB of K_uc on the CPU, ≈ 128 MiB on an accelerator."""
    from bayes_rbfn.gp.parallel import chunk_size_for

    assert (chunk_size_for(64), chunk_size_for(256)) == (2048, 512)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert (chunk_size_for(64), chunk_size_for(256), chunk_size_for(1)) == (1 << 18, 1 << 16, 1 << 20)
