"""The machinery of the streamed O(NM²) passes (:mod:`bayes_rbfn.gp.streaming`): the block layout and
chunk lengths, and the passes sharded over two simulated CPU devices (a subprocess with
``--xla_force_host_platform_device_count=2``): the log density, its gradient, the LOO values and the
predictive moments equal the single-device ones to 1e-10 — also for a large, ill-conditioned problem where
merely reordering the sums changes the gradient by more than that, because the sums are added in the same
fixed block order on any number of devices — and ``fit(shard=True)`` runs.

The passes themselves against dense references: tests/gp/test_streamed_passes.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types

import pytest

from bayes_rbfn.gp import streaming


@pytest.mark.parametrize(
    ("N", "C", "devices", "blocks"),
    [
        (1000, 4096, 1, 1),  # fewer points than a chunk: one block, not 16 of 63 points
        (8192, 4096, 1, 2),
        (16383, 4096, 1, 2),
        (16384, 4096, 1, 4),
        (65535, 4096, 1, 8),
        (65536, 4096, 1, 16),
        (10**6, 2048, 1, 16),  # never more than SUM_BLOCKS
        (1000, 4096, 2, 2),  # rounded up to the device count
        (10**6, 2048, 3, 18),
    ],
    ids=["N<C", "2C", "4C-1", "4C", "16C-1", "16C", "million", "2-devices-small", "3-devices"],
)
def test_blocks_are_whole_chunks(N, C, devices, blocks):
    """The block count: whole chunks per block, a power of two up to SUM_BLOCKS, a multiple of the devices."""
    mesh = types.SimpleNamespace(shape={streaming.DATA_AXIS: devices}) if devices > 1 else None  # its size
    assert streaming.block_count(mesh, N, C) == (devices, blocks)
    C_eff, per_block, N_pad = streaming.block_layout(N, C, blocks)
    assert C_eff <= C and N <= N_pad < N + blocks * per_block * 8


def test_chunk_size_for():
    assert streaming.chunk_size_for(64) == 2048
    assert streaming.chunk_size_for(128) == 1024
    assert streaming.chunk_size_for(1) == 16384
    assert streaming.chunk_size_for(100_000) == 256


# --------------------------------------------------------------------------------------------------
# Sharded over two simulated devices (a subprocess: the device count is fixed when JAX starts)

_SHARDED_SCRIPT = textwrap.dedent(
    """
    import json, numpy as np, jax, jax.numpy as jnp
    from functools import partial
    jax.config.update("jax_enable_x64", True)
    from bayes_rbfn.gp import block_loo, streaming, woodbury_sums
    from bayes_rbfn import fit
    from bayes_rbfn.models.families import FAMILIES
    from bayes_rbfn.models import ModelConfig, sor

    assert jax.device_count() == 2, jax.devices()
    mesh = streaming.data_mesh()
    rng = np.random.default_rng(0)
    out = {}
    problems = []
    for N in (4001,):   # odd: the leftover point is handled outside shard_map (even: N = 2,000 below)
        X = jnp.asarray(rng.uniform(0, 5, (N, 2)))
        y = jnp.asarray(np.sin(np.asarray(X).sum(1)) + 0.1 * rng.standard_normal(N))
        data = {"X": X, "y": y, "Z": jnp.asarray(rng.uniform(0, 5, (30, 2))), "y_offset": jnp.asarray(0.1)}
        params = {"lengthscale": jnp.asarray([0.8, 1.1]), "variance": jnp.asarray(1.3),
                  "noise": jnp.asarray(0.2)}
        problems.append((str(N), data, params, jnp.asarray(rng.uniform(-1, 6, (1001, 2))), 512))
    # Large and ill-conditioned (64 dense inducing inputs, cond(K_uu) ~ 1e10 at the jitter floor): here a
    # mere change of summation order moves the gradient by ~8e-8 ("reordered" below), so agreement to
    # 1e-10 holds only because the sums are added in the same order on one device and on two (and the
    # LOO values, whose precision wc − ‖v‖² cancels, see each point in the same chunk shape).
    N = 200_001
    X = rng.uniform(0, 10, (N, 1))
    y = np.sin(1.3 * X[:, 0]) + 0.2 * X[:, 0] + 0.3 * rng.standard_normal(N)
    data = {"X": jnp.asarray(X), "y": jnp.asarray(y), "Z": jnp.linspace(0.0, 10.0, 64)[:, None],
            "y_offset": jnp.asarray(float(y.mean()))}
    params = {"lengthscale": jnp.asarray(1.0), "variance": jnp.asarray(1.0), "noise": jnp.asarray(0.3)}
    problems.append(("200001", data, params, jnp.asarray(rng.uniform(-1, 11, (3000, 1))), None))
    for key, data, params, X_test, chunk in problems:
        single = ModelConfig(family=FAMILIES["se"], priors={}, chunk_size=chunk)
        sharded = ModelConfig(family=FAMILIES["se"], priors={}, chunk_size=chunk, mesh=mesh)
        placed = streaming.shard_data(data, mesh)
        # One program per configuration (four would compile four times as long): value and gradient,
        # pointwise LOO, predictive moments.
        @partial(jax.jit, static_argnums=2)
        def evaluate(p, d, c):
            value, gradient = jax.value_and_grad(sor.log_density)(p, d, c)
            return {"log_density": value, "gradient": gradient, "loo": sor.log_likelihood(p, d, c),
                    "predict": sor.predict(p, d, c, X_test)}
        a, b = evaluate(params, data, single), evaluate(params, placed, sharded)
        rel = {
            name: max(
                float(np.max(np.abs(np.asarray(u) - np.asarray(v)))
                      / max(np.max(np.abs(np.asarray(u))), 1e-300))
                for u, v in zip(jax.tree_util.tree_leaves(a[name]), jax.tree_util.tree_leaves(b[name]))
            )
            for name in a
        }
        out[key] = rel
    # LOO at interpolated points (alone at their inducing inputs, σ = 1e-8, one in each device's half):
    # sor_loo's leave-block-out pass, whose per-block R factors are all-gathered across devices, = one
    # device's; with the floor at -inf (no such pass) their values differ (the pass was taken).
    from bayes_rbfn.gp import kernels
    Xi = rng.uniform(0, 5, (2000, 1))
    Xi[[500, 1500, 1999]] = [[7.0], [9.0], [11.0]]
    Zi = jnp.asarray(np.concatenate([np.linspace(0, 5, 20)[:, None], Xi[[500, 1500, 1999]]]))
    Xi = jnp.asarray(Xi)
    yi = jnp.sin(2 * Xi[:, 0])
    kern = kernels.SquaredExponential(0.7, 1.3)
    out["interpolated"], out["interpolated_changed"] = {}, []
    for chunk in (64, 512):  # 16 and 2 blocks: each device gets whole blocks (streaming.block_count)
        def loo_i(m):  # compiled as in a fit (8 s in all, against 62 s op by op), so exact=True
            @jax.jit
            def loo(Xi, yi, Zi):
                f = woodbury_sums.sor_factor(kern, Xi, yi, Zi, 1e-8, chunk_size=chunk, mesh=m)
                return block_loo.sor_loo(f, kern, Zi, Xi, yi, 1e-16, chunk_size=chunk, mesh=m, exact=True)
            return np.asarray(loo(Xi, yi, Zi))
        a, b = loo_i(None), loo_i(mesh)
        out["interpolated"][str(chunk)] = float(np.max(np.abs(a - b) / np.abs(a)))
        if chunk == 64:  # (one chunk length suffices to show that the pass is taken)
            floor = block_loo.LOO_LEVERAGE_FLOOR[jnp.dtype("float64")]
            block_loo.LOO_LEVERAGE_FLOOR[jnp.dtype("float64")] = -np.inf
            out["interpolated_changed"].append(np.flatnonzero(loo_i(None) != a).tolist())
            block_loo.LOO_LEVERAGE_FLOOR[jnp.dtype("float64")] = floor
    # The predictive's draws spread round-robin over both devices = all on one device.
    from bayes_rbfn.infer import predictive
    _, data4, params4, X_test4, chunk4 = problems[0]
    config = ModelConfig(family=FAMILIES["se"], priors={}, chunk_size=chunk4)
    draws = {k: jnp.asarray(np.asarray(v) * np.exp(rng.normal(0, 0.1, (2, 7) + np.shape(v))))
             for k, v in params4.items()}
    spread = predictive.draw_devices(config)
    out["draw_devices"] = len(spread)
    out["draw_devices_with_mesh"] = predictive.draw_devices(
        ModelConfig(family=FAMILIES["se"], priors={}, mesh=mesh))
    predict_fn = lambda p, Xb, data: sor.predict(p, data, config, Xb)
    one = predictive.per_draw_moments(predict_fn, draws, X_test4, batch_size=None, draw_batch=3, data=data4)
    used, real_compiled = set(), predictive.compiled_predict
    def spying_compiled(*args, **kwargs):  # the devices the batches' outputs were computed on
        fn = real_compiled(*args, **kwargs)
        def run(*inputs):
            result = fn(*inputs)
            used.update(str(d) for d in result[0].devices())
            return result
        return run
    predictive.compiled_predict = spying_compiled
    two = predictive.per_draw_moments(predict_fn, draws, X_test4, batch_size=None, draw_batch=3, data=data4,
                                      devices=spread)
    predictive.compiled_predict = real_compiled
    out["draw_devices_used"] = len(used)
    out["draws_over_devices"] = max(
        float(np.max(np.abs(u - v)) / np.max(np.abs(u))) for u, v in zip(one, two))
    # Control (reported, not asserted): one device, another chunk length = another summation order.
    grad = jax.jit(jax.grad(lambda p, d, c: sor.log_density(p, d, c)), static_argnums=2)
    a = grad(params, data, single)
    b = grad(params, data, ModelConfig(family=FAMILIES["se"], priors={}, chunk_size=256))
    out["reordered"] = max(abs(float(a[k]) - float(b[k])) / abs(float(a[k])) for k in a)
    Xf = rng.uniform(0, 5, (600, 1))
    yf = np.sin(2 * Xf[:, 0]) + 0.1 * rng.standard_normal(600)
    idata = fit("sor", Xf, yf, num_inducing=16, chains=1, warmup=30, draws=20, progress=False,
                shard=True, check_diagnostics=False)
    out["fit_draws"] = int(idata.posterior.sizes["draw"])
    out["fit_finite"] = bool(np.all(np.isfinite(idata.predictions["f_mean"].values)))
    print("RESULT" + json.dumps(out))
    """
)


def test_sharded_equals_single_device():
    """2 simulated CPU devices: sharded log density, gradient, LOO, predictive = one device's to 1e-10,
    also the LOO values of interpolated points (sor_loo's leave-block-out pass), and so are the
    predictive's draws spread over both devices;
    also at N = 200,001 with cond(K_uu) ~ 1e10, where another summation order alone differs by more
    (the sums are added in a fixed block order whatever the device count: streaming.SUM_BLOCKS)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
    env["JAX_PLATFORMS"] = "cpu"
    # A guard against a hang, not a time limit: the script took 161 s in the full suite on a 2-core AMD EPYC
    # before its evaluations were compiled together (98 s alone after).
    proc = subprocess.run(
        [sys.executable, "-c", _SHARDED_SCRIPT], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT"))
    result = json.loads(line[len("RESULT") :])
    for N in ("4001", "200001", "interpolated"):
        for name, rel in result[N].items():
            assert rel < 1e-10, (N, name, rel, "reordered sums alone differ by", result["reordered"])
    assert result["interpolated_changed"] == [[500, 1500, 1999]]
    assert result["fit_draws"] == 20 and result["fit_finite"]
    # Draw batches spread over both devices (7 batches of 3 draws, the last padded) = one device's.
    assert result["draw_devices"] == 2 and result["draw_devices_with_mesh"] is None
    assert result["draw_devices_used"] == 2
    assert result["draws_over_devices"] < 1e-10, result["draws_over_devices"]
