"""The GPU path stays tested on a CPU-only machine (issue 20): nothing the package does assumes a CPU.

On a GPU (or TPU) backend the host's BLAS thread pools are left alone — the one CPU-specific setting the
package makes (:func:`bayes_rbfn.runtime.single_threaded_blas`) is a no-op there. The backend's name is
stood in for; everything else runs as it does on the GPU.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
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


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="JAX computes off the CPU here")
def test_blas_pinned_on_the_cpu():
    assert runtime.computes_on_cpu()
    with runtime.single_threaded_blas():
        assert all(n == 1 for n in blas_threads())


def test_streamed_pass_chunks_fill_a_gpu_and_fit_a_cpu_cache(monkeypatch):
    """The chunk of the streamed O(NM²) pass: ≈ 1 MiB of K_uc on the CPU, ≈ 128 MiB on an accelerator."""
    from bayes_rbfn.gp.parallel import chunk_size_for

    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")  # also where the suite runs on a GPU
    assert (chunk_size_for(64), chunk_size_for(256)) == (2048, 512)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert (chunk_size_for(64), chunk_size_for(256), chunk_size_for(1)) == (1 << 18, 1 << 16, 1 << 20)


def _product_precisions(jaxpr) -> list:
    """The ``precision`` of every matrix product (``dot_general``) in ``jaxpr`` and the programs inside it
    (scan and map bodies, custom-derivative rules, shard_map)."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append(eqn.params["precision"])
        for value in eqn.params.values():
            for inner in value if isinstance(value, tuple | list) else [value]:
                inner = getattr(inner, "jaxpr", inner)  # a ClosedJaxpr's program
                if hasattr(inner, "eqns"):
                    found += _product_precisions(inner)
    return found


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("precision", ["float64", "mixed"])
def test_sor_pass_takes_its_products_at_full_precision(precision, dtype):
    """The SoR log density, its gradient, the LOO values and the predictive moments (and DTC's, FITC's and
    VFE's log densities, gradients and predictives) trace every matrix product at full precision: on a GPU,
    JAX's default rounds float32 products to TF32 (10-bit mantissa), which moved an H200's float32 sums by
    5e-4 relative and made "mixed" wrong by O(1) on an H100. A CPU ignores the setting, so this reads the
    traced program instead of the numbers."""
    from bayes_rbfn.gp import kernels, parallel
    from bayes_rbfn.models import ModelConfig
    from bayes_rbfn.models import sor as sor_model
    from bayes_rbfn.models.families import FAMILIES

    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.uniform(0.0, 10.0, (3_000, 1)), dtype)
    y = jnp.sin(X[:, 0])
    Z = jnp.asarray(np.linspace(0.5, 9.5, 16)[:, None], dtype)
    one = jnp.ones((), dtype)
    data = {"X": X, "y": y, "Z": Z, "y_offset": 0 * one}
    params = {"lengthscale": one, "variance": one, "noise": 0.3 * one}
    config = ModelConfig(family=FAMILIES["se"], priors={}, precision=precision)

    def predictive(params):
        kernel = kernels.SquaredExponential(params["variance"], params["lengthscale"])
        factor = parallel.sor_factor(kernel, X, y, Z, params["noise"], precision=precision)
        d = params["noise"] ** 2
        loo = parallel.sor_loo(factor, kernel, Z, X, y, d)
        return loo, parallel.sor_moments(factor, kernel, Z, X[:100], precision=precision)

    programs = {
        "log density and gradient": jax.value_and_grad(lambda p: sor_model.log_density(p, data, config)),
        "LOO and moments": predictive,
    }
    for approx in ("dtc", "fitc", "vfe"):  # the rest of the family: its own restored variances and traces
        programs[f"{approx}: log density and gradient"] = jax.value_and_grad(
            lambda p, approx=approx: sor_model.marginal(p, data, config, approx).log_prob(y)
        )
        programs[f"{approx}: predictive"] = lambda p, approx=approx: sor_model.predict(
            p, data, config, X[:50], approx
        )
    for name, program in programs.items():
        found = _product_precisions(jax.make_jaxpr(program)(params).jaxpr)
        assert len(found) >= 8, (name, found)  # the chunk loops' products are in there
        highest = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
        assert all(p == highest for p in found), (name, found)
