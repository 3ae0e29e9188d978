"""Linear in N: time per SoR log density + gradient from N = 10⁴ to 10⁶ at M = 64.

At each N the ``sor`` gradient and the floor (forming K_fu and K_uf K_fu, streamed, and materialised too up
to N = 300,000; the faster of the two) are timed, interleaved; the slope of a least-squares line through
log time against log N is the figure (target ≤ 1.1), with the floor's own slope for comparison. The report
draws ``scaling.png``: both against N on log-log axes, with the linear reference.
"""

from __future__ import annotations

from .common import _config, _floor_fns, _fmt, _grad_fn, _interleaved, _met, _model_problem, _params

NAME = "scaling"
FULL = {"Ns": [10_000, 30_000, 100_000, 300_000, 1_000_000], "M": 64, "repeats": 3}
QUICK = {"Ns": [1_000, 10_000, 100_000], "M": 64, "repeats": 3}
TARGETS = {"scaling_exponent": 1.1}


def run(cfg):
    import numpy as np

    from bayes_rbfn.gp import streaming
    from bayes_rbfn.models import sor

    M = cfg["M"]
    rows = []
    grad = _grad_fn(sor, _config())
    p = _params()
    for N in cfg["Ns"]:
        data = _model_problem(N, M)
        mat, streamed = _floor_fns(data, M, streaming.chunk_size_for(M))
        fns = {
            "sor": lambda d=data: grad(p, d),
            "floor_streamed": lambda d=data, f=streamed: f(p, d["X"], d["Z"]),
        }
        if N <= 300_000:
            fns["floor_materialised"] = lambda d=data, f=mat: f(p, d["X"], d["Z"])
        t = _interleaved(fns, cfg["repeats"])
        floor = min(v["min"] for k, v in t.items() if k.startswith("floor"))
        rows.append({"N": N, "M": M, "sor": t["sor"]["min"], "floor": floor, "times": t})
    logN = np.log([r["N"] for r in rows])
    exponent = float(np.polyfit(logN, np.log([r["sor"] for r in rows]), 1)[0])
    floor_exponent = float(np.polyfit(logN, np.log([r["floor"] for r in rows]), 1)[0])
    return {"rows": rows, "exponent": exponent, "floor_exponent": floor_exponent}


def targets(r, report):
    Ns = [row["N"] for row in r["rows"]]
    report.rows.append(
        (
            f"Linear in N: exponent of time per gradient, N = {Ns[0]:,}…{Ns[-1]:,}, M = {r['rows'][0]['M']} ≤ 1.1",  # noqa: E501
            f"{r['exponent']:.3f}",
            _met(r["exponent"] <= TARGETS["scaling_exponent"]),
            f"floor's own exponent {r['floor_exponent']:.3f}",
        )
    )
    for row in r["rows"]:
        report.add_csv("scaling", f"sor_N{row['N']}", row["sor"], "s")
        report.add_csv("scaling", f"floor_N{row['N']}", row["floor"], "s")
    report.add_csv("scaling", "exponent", r["exponent"])
    _plot(r, report.outdir / "scaling.png")


def tables(r, report):
    lines = [
        f"## Scaling in N (M = {r['rows'][0]['M']}); fitted exponent {r['exponent']:.3f}",
        "",
        "| N | s / gradient | floor s | × floor |",
        "|---|---|---|---|",
    ]
    for row in r["rows"]:
        lines.append(
            f"| {row['N']:,} | {_fmt(row['sor'])} | {_fmt(row['floor'])} | {row['sor'] / row['floor']:.2f} |"
        )
    lines += ["", "![scaling](scaling.png)", ""]
    return lines


def _plot(r, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    N = np.array([row["N"] for row in r["rows"]], dtype=float)
    t = np.array([row["sor"] for row in r["rows"]])
    f = np.array([row["floor"] for row in r["rows"]])
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.loglog(N, t, "o-", label=f"sor log density + gradient (slope {r['exponent']:.2f})")
    ax.loglog(N, f, "s--", label=f"floor: K_fu and K_uf K_fu (slope {r['floor_exponent']:.2f})")
    ax.loglog(N, t[0] * N / N[0], "k:", label="linear reference (slope 1)")
    ax.set_xlabel("N (data points)")
    ax.set_ylabel("seconds per evaluation")
    ax.set_title(f"SoR, M = {r['rows'][0]['M']}, 1-D, float64")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
