"""Prediction over several devices: the ``predict`` section's measurement with the host's cores as JAX
devices.

The worker runs with ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` (set by ``run.py`` from
``devices``), so ``predictive.predict`` spreads its draw batches round-robin over two CPU devices; held to
the same target as ``predict`` (≤ 10 s warm).
"""

from __future__ import annotations

from . import predict
from .common import _config, _met

NAME = "predict_devices"
FULL = {"N": 2_000, "M": 64, "draws": 4_000, "points": 10_000, "devices": 2}
QUICK = {"N": 1_000, "M": 64, "draws": 400, "points": 2_000, "devices": 2}


def run(cfg, clock):
    """The prediction of :func:`predict.run` with the host's cores as ``cfg["devices"]`` JAX devices
    (``--xla_force_host_platform_device_count``): the draw batches are spread round-robin over them."""
    import jax

    from bayes_rbfn.infer import predictive

    assert jax.device_count() == cfg["devices"], jax.devices()
    assert len(predictive.draw_devices(_config()) or ()) == cfg["devices"]
    return predict.run(cfg, clock)


def targets(r, report):
    report.rows.append(
        (
            f"Prediction as above, the 2 cores as {r.get('_devices', 2)} JAX devices (draw batches "
            "spread over them)",
            f"{r['warm_call']:.1f} s ({r['first_call']:.1f} s on the first call)",
            _met(r["warm_call"] <= predict.TARGETS["predict_seconds"]),
            f"peak RSS {r['peak_rss_mb']:.0f} MB; XLA_FLAGS=--xla_force_host_platform_device_count=2",
        )
    )
    for k in ("warm_call", "first_call", "peak_rss_mb"):
        report.add_csv("predict_devices", k, r[k])
