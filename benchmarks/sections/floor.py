"""Near the floor: the SoR log density and its gradient against what no exact SoR likelihood can
avoid.

One exact SoR likelihood cannot avoid forming K_fu and the M×M product K_uf K_fu. Both are timed on arrays
of the same shape in the same process, materialised (XLA's own evaluation of ``k(X, Z).T @ k(X, Z)``) and
streamed in the same chunks as the library; the faster of the two is the floor. Against it, interleaved:
the ``sor`` model's log density + gradient (streamed, whitened: the default), the same summed before
whitening (``ModelConfig(fast=True)``), and the implementation before the streamed pass (a triangular
solve on all N columns, autodiff). The target: the default within 3× the floor.
"""

from __future__ import annotations

from .common import (
    _config,
    _floor_fns,
    _fmt,
    _grad_fn,
    _interleaved,
    _met,
    _model_problem,
    _params,
    _trsm_sor_factor,
)

NAME = "floor"
FULL = {"N": 100_000, "M": 128, "repeats": 5}
QUICK = {"N": 20_000, "M": 128, "repeats": 5}
TARGETS = {"floor_ratio": 3.0}


def run(cfg):
    import jax

    from bayes_rbfn.gp import linalg, streaming
    from bayes_rbfn.models import sor

    N, M = cfg["N"], cfg["M"]
    data = _model_problem(N, M)
    p = _params()
    chunk = streaming.chunk_size_for(M)
    mat, streamed = _floor_fns(data, M, chunk)
    default = _grad_fn(sor, _config())
    fast = _grad_fn(sor, _config(fast=True))

    def previous(p, d):
        kernel = _family_kernel(p)
        factor = _trsm_sor_factor(kernel, d["X"], d["y"] - d["y_offset"], d["Z"], p["noise"])
        return linalg.finite_or_neg_inf(factor.log_marginal_likelihood())

    previous = jax.jit(jax.value_and_grad(previous))
    t = _interleaved(
        {
            "floor_materialised": lambda: mat(p, data["X"], data["Z"]),
            "floor_streamed": lambda: streamed(p, data["X"], data["Z"]),
            "sor": lambda: default(p, data),
            "sor_fast": lambda: fast(p, data),
            "sor_previous": lambda: previous(p, data),
        },
        cfg["repeats"],
    )
    floor = min(t["floor_materialised"]["min"], t["floor_streamed"]["min"])
    return {
        "N": N,
        "M": M,
        "chunk": chunk,
        "times": t,
        "floor": floor,
        "ratio": t["sor"]["min"] / floor,
        "ratio_fast": t["sor_fast"]["min"] / floor,
        "ratio_previous": t["sor_previous"]["min"] / floor,
    }


def _family_kernel(p):
    from bayes_rbfn.gp import kernels

    return kernels.SquaredExponential(p["lengthscale"], p["variance"])


def targets(r, report):
    t = r["times"]
    report.rows.append(
        (
            "Near the floor: sor log density + gradient ≤ 3× forming K_fu and K_uf K_fu "
            f"(N = {r['N']:,}, M = {r['M']})",
            f"{r['ratio']:.2f}× ({_fmt(t['sor']['min'])} s vs floor {_fmt(r['floor'])} s)",
            _met(r["ratio"] <= TARGETS["floor_ratio"]),
            f"fast path (sum before whitening): {r['ratio_fast']:.2f}×; previous implementation: "
            f"{r['ratio_previous']:.2f}×",
        )
    )
    for k, v in t.items():
        report.add_csv("floor", k, v["min"], "s")
    for k in ("floor", "ratio", "ratio_fast", "ratio_previous"):
        report.add_csv("floor", k, r[k], "s" if k == "floor" else "x")


def tables(r, report):
    lines = [
        f"## Near the floor: N = {r['N']:,}, M = {r['M']} (seconds, min over interleaved repeats)",
        "",
        "| what | s | × floor |",
        "|---|---|---|",
    ]
    names = {
        "floor_materialised": "floor: K_fu and K_uf K_fu, materialised",
        "floor_streamed": f"floor: the same, streamed in chunks of {r['chunk']}",
        "sor": "sor log density + gradient (streamed, whitened: the default)",
        "sor_fast": "the same, summed before whitening (`ModelConfig(fast=True)`)",
        "sor_previous": "before this work: triangular solve on all N columns, autodiff",
    }
    for k, v in r["times"].items():
        lines.append(f"| {names[k]} | {_fmt(v['min'])} | {v['min'] / r['floor']:.2f} |")
    lines.append("")
    return lines
