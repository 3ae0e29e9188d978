"""Sharded over simulated devices: the SoR pass spread over two CPU devices equals the single-device one.

The worker runs with ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` (set by ``run.py`` from
``devices``). The data are sharded over a one-axis mesh and the ``sor`` log density + gradient compared with
the single-device one: the largest relative difference of the value and of each gradient (the target:
≤ 1e-10; the sums are added in a fixed block order on any device count), and, for scale, how much another
chunk length on one device (another summation order) moves the gradient. Both are timed, interleaved.
"""

from __future__ import annotations

from .common import _config, _fmt, _grad_fn, _interleaved, _met, _model_problem, _params

NAME = "sharded"
FULL = {"N": 1_000_000, "M": 64, "repeats": 3, "devices": 2}
QUICK = {"N": 100_000, "M": 64, "repeats": 3, "devices": 2}


def run(cfg):
    import jax
    import numpy as np

    from bayes_rbfn.gp import streaming
    from bayes_rbfn.models import sor

    N, M = cfg["N"], cfg["M"]
    mesh = streaming.data_mesh()
    data = _model_problem(N, M)
    placed = streaming.shard_data(data, mesh)
    p = _params()
    single, sharded = _grad_fn(sor, _config()), _grad_fn(sor, _config(mesh=mesh))
    t = _interleaved(
        {"single": lambda: single(p, data), "sharded": lambda: sharded(p, placed)}, cfg["repeats"]
    )
    a, b = single(p, data), sharded(p, placed)
    other_chunk = _grad_fn(sor, _config(chunk_size=streaming.chunk_size_for(M) // 2))(p, data)

    def rel(u, v):
        u, v = np.asarray(u), np.asarray(v)
        return float(np.max(np.abs(u - v)) / np.max(np.abs(u)))

    value_rel = rel(a[0], b[0])
    grad_rel = {k: rel(a[1][k], b[1][k]) for k in a[1]}
    chunk_rel = {k: rel(a[1][k], other_chunk[1][k]) for k in a[1]}
    worst = max(value_rel, *grad_rel.values())
    return {
        "N": N,
        "M": M,
        "devices": jax.device_count(),
        "times": t,
        "max_rel_diff": worst,
        "value_rel_diff": value_rel,
        "grad_rel_diff": grad_rel,
        "grad_rel_diff_other_chunk_size": chunk_rel,
        "speedup": t["single"]["min"] / t["sharded"]["min"],
    }


def targets(r, report):
    report.rows.append(
        (
            f"Sharded over {r['devices']} simulated CPU devices (N = {r['N']:,}, M = {r['M']}): "
            "equals single-device to 1e-10 (tests/gp/test_streaming.py: N = 4,000, 4,001, 200,001)",
            f"log density {r['value_rel_diff']:.1e} relative; gradient "
            f"{max(r['grad_rel_diff'].values()):.1e}",
            _met(r["max_rel_diff"] <= 1e-10),
            f"sums added in a fixed block order on any device count; for comparison, another chunk "
            f"length on one device (another summation order) moves the gradient by "
            f"{max(r['grad_rel_diff_other_chunk_size'].values()):.1e}: the gradient is ill-conditioned. "
            f"Time per gradient {_fmt(r['times']['sharded']['min'])} s sharded vs "
            f"{_fmt(r['times']['single']['min'])} s on one device ({r['speedup']:.2f}×)",
        )
    )
    report.add_csv("sharded", "speedup", r["speedup"], "x")
    report.add_csv("sharded", "max_rel_diff", r["max_rel_diff"])
