"""The GPU path stays tested on a CPU-only machine: nothing the package does assumes a CPU.

On a GPU (or TPU) backend the host's BLAS thread pools are left alone — the CPU-specific setting
:func:`bayes_rbfn.runtime.single_threaded_blas` is a no-op there — and several chains on one device run
vectorised rather than one after the other (the CPU's default). The backend's name is stood in for;
everything else runs as it does on the GPU.
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
    from bayes_rbfn.gp.streaming import chunk_size_for

    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")  # also where the suite runs on a GPU
    assert (chunk_size_for(64), chunk_size_for(256)) == (2048, 512)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert (chunk_size_for(64), chunk_size_for(256), chunk_size_for(1)) == (1 << 18, 1 << 16, 1 << 20)


@pytest.mark.parametrize(
    ("backend", "devices", "chains", "method"),
    [
        ("cpu", 1, 4, "sequential"),  # one CPU device: one chain after the other (benchmarks/chain_method.py)
        ("cpu", 1, 1, "sequential"),
        ("cpu", 4, 4, "parallel"),  # a device per chain
        ("cpu", 2, 4, "sequential"),
        ("gpu", 1, 4, "vectorized"),  # one accelerator: the chains batched on it
        ("gpu", 1, 1, "sequential"),
        ("gpu", 4, 4, "parallel"),
    ],
    ids=[
        "cpu-1dev",
        "cpu-1chain",
        "cpu-dev-per-chain",
        "cpu-too-few-devs",
        "gpu-1dev",
        "gpu-1chain",
        "gpu-4dev",
    ],
)
def test_default_chain_method_follows_the_backend_and_devices(monkeypatch, backend, devices, chains, method):
    from bayes_rbfn.infer.sampler import resolve_chain_method

    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    monkeypatch.setattr(jax, "local_device_count", lambda: devices)
    assert resolve_chain_method(chains, None) == method
    assert resolve_chain_method(chains, "vectorized") == "vectorized"  # what the caller asks for wins


def _location_model(x, y=None):
    """y_i ~ N(μ, 1), μ ~ N(0, 1): the smallest model with an observed site (cheap to compile twice)."""
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    numpyro.sample("y", dist.Normal(mu, 1.0).expand([x.shape[0]]).to_event(1), obs=y)


def test_sbc_replications_run_vectorised_on_an_accelerator_with_the_same_ranks(monkeypatch):
    """SBC's replications: one after the other by default on a CPU, vectorised on an accelerator (the
    backend's name stood in for); both give every replication its own key, so the same ranks."""
    from bayes_rbfn.workflows.sbc import run_sbc

    options = dict(model_args=(jnp.zeros(5),), reps=6, draws=20, warmup=20, thin=2, seed=3)
    sequential = run_sbc(_location_model, **options)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    vectorised = run_sbc(_location_model, **options)
    assert sequential.settings["chain_method"] == "sequential"
    assert vectorised.settings["chain_method"] == "vectorized"
    np.testing.assert_array_equal(vectorised.ranks, sequential.ranks)
    assert len(np.unique(sequential.ranks)) > 3  # ranks that tell replications apart


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
    from bayes_rbfn.gp import block_loo, kernels, moments, woodbury_sums
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
        factor = woodbury_sums.sor_factor(kernel, X, y, Z, params["noise"], precision=precision)
        d = params["noise"] ** 2
        loo = block_loo.sor_loo(factor, kernel, Z, X, y, d)
        return loo, moments.sor_moments(factor, kernel, Z, X[:100], precision=precision)

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


def _outside_the_sor_pass(dtype: str) -> dict:
    """Programs of the exact GP, BLR, the RBFN layer and model, the analytic layer, interpolation and the
    distributions' simulators, in ``dtype``: name → (function, argument)."""
    import numpyro.distributions as dist
    from numpyro.infer.util import log_density

    from bayes_rbfn.gp import basis, conditional, interpolation, kernels, sparse
    from bayes_rbfn.gp import blr as blr_math
    from bayes_rbfn.models import ModelConfig, blr, exact, rbfn, sparse_models
    from bayes_rbfn.models.distributions import ExactGP, SparseGP
    from bayes_rbfn.models.families import FAMILIES

    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.uniform(0.0, 10.0, (300, 1)), dtype)
    y = jnp.sin(X[:, 0])
    Z = jnp.asarray(np.linspace(0.5, 9.5, 16)[:, None], dtype)
    one = jnp.ones((), dtype)
    key = jax.random.PRNGKey(0)
    data = {"X": X, "y": y, "Z": Z, "y_offset": 0 * one, "x_centre": 0 * one}
    theta = {"lengthscale": one, "variance": one, "noise": 0.3 * one}
    lognormal = dist.LogNormal(0.0, 1.0)
    config = ModelConfig(family=FAMILIES["se"], priors=dict.fromkeys(theta, lognormal))
    blr_config = ModelConfig(family=blr.FAMILY, priors={})
    blr_theta = {"weight_precision": one, "noise_precision": 4 * one}
    kernel = kernels.SquaredExponential(one, one)
    Phi = blr.design_matrix(X, Z)
    return {
        "exact log density + gradient": (
            jax.value_and_grad(lambda p: exact.log_density(p, data, config)),
            theta,
        ),
        "exact predict": (lambda p: exact.predict(p, data, config, X[:50]), theta),
        "exact LOO": (lambda p: exact.log_likelihood(p, data, config), theta),
        "blr log density + gradient": (
            jax.value_and_grad(lambda p: blr.log_density(p, data, blr_config)),
            blr_theta,
        ),
        "blr predict": (lambda p: blr.predict(p, data, blr_config, X[:50]), blr_theta),
        "blr simulate": (lambda p: blr.simulate(key, (3,), p, data, blr_config), blr_theta),
        "rbfn model log density + gradient": (
            jax.value_and_grad(lambda p: log_density(rbfn.model, (data, config), {}, p)[0]),
            dict(theta, f_v=jnp.zeros(16, dtype)),
        ),
        "rbfn predict": (
            lambda p: rbfn.predict(p, data, config, X[:50]),
            dict(theta, f_alpha=jnp.zeros(16, dtype)),
        ),
        "ExactGP sample": (lambda n: ExactGP(kernel, X, n).sample(key, (3,)), 0.3 * one),
        "SparseGP sample": (lambda n: SparseGP(kernel, X, Z, n).sample(key, (3,)), 0.3 * one),
        "augmented SoR predict": (lambda p: sparse_models.asor_predict(p, data, config, X[:50]), theta),
        "analytic exact_gp": (lambda n: conditional.exact_gp(kernel, X, y, n, X[:50]).mean, 0.3 * one),
        "analytic sor": (lambda n: conditional.sor(kernel, X, y, Z, n, X[:50]).mean, 0.3 * one),
        "analytic rbfn_weights": (lambda n: conditional.rbfn_weights(kernel, X, y, Z, n).mean, 0.3 * one),
        "analytic rbf_ridge": (lambda n: conditional.rbf_ridge(kernel, X, y, Z, n, X[:50]), 0.3 * one),
        "analytic FITC": (lambda n: sparse.fitc(kernel, X, y, Z, n, X[:50]).mean, 0.3 * one),
        "blr posterior covariance": (
            lambda a: blr_math.posterior_unchecked(Phi, y, a, 4 * one).cov,
            one,
        ),
        "blr equivalent kernel": (
            lambda a: blr_math.equivalent_kernel(
                Phi, Phi[:20], blr_math.posterior_unchecked(Phi, y, a, 4 * one), 4 * one
            ),
            one,
        ),
        "eigen basis": (lambda x: basis._eigen_basis(kernel, Z, x, 8, 0.0, None)[0], X),
        "interpolant native norm": (
            lambda f: interpolation.native_norm(
                interpolation.interpolate(interpolation.ThinPlate(), X[:40], f, degree=1)
            ),
            y[:40],
        ),
        "interpolate": (
            lambda f: interpolation.interpolate(interpolation.ThinPlate(), X[:40], f, degree=1)(X[:20]),
            y[:40],
        ),
    }


OUTSIDE_THE_SOR_PASS = (
    "exact log density + gradient",
    "exact predict",
    "exact LOO",
    "blr log density + gradient",
    "blr predict",
    "blr simulate",
    "rbfn model log density + gradient",
    "rbfn predict",
    "ExactGP sample",
    "SparseGP sample",
    "augmented SoR predict",
    "analytic exact_gp",
    "analytic sor",
    "analytic rbfn_weights",
    "analytic rbf_ridge",
    "analytic FITC",
    "blr posterior covariance",
    "blr equivalent kernel",
    "eigen basis",
    "interpolant native norm",
    "interpolate",
)


@pytest.mark.parametrize("name", OUTSIDE_THE_SOR_PASS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_products_outside_the_sor_pass_are_at_full_precision(dtype, name):
    """The rest of the package follows the same precision policy
    (:func:`bayes_rbfn.gp.linalg.full_precision`). Before it, 61 products in 20 of these 21 programs took
    JAX's default, TF32 for float32 on a GPU (among them the RBFN layer's K_fu α and the exact GP's
    predictive mean and LOO). ``predict_rbfn``, a host loop over jitted batches, is decorated alike but
    cannot be traced whole."""
    programs = _outside_the_sor_pass(dtype)
    assert set(programs) == set(OUTSIDE_THE_SOR_PASS)
    program, argument = programs[name]
    found = _product_precisions(jax.make_jaxpr(program)(argument).jaxpr)
    assert found, name
    highest = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
    assert all(p == highest for p in found), (name, found)
