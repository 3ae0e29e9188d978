"""Against the exact GP: ESS/s of the hyperparameters at N = 2,000, ``sor`` (M = 64) and ``exact``.

Both models are fit on the same 1-D data with one chain of the same length; ESS/s is the smallest bulk ESS
of lengthscale, variance and noise over the sampling time (compile excluded). The target: sor ≥ 20× exact.
The held-out log predictive density per point (mixture over the draws of N(y* | f_mean, f_var + σ²)) on
fresh test points says what the approximation costs in fit. If PyMC is installed, its
``gp.MarginalApprox(approx="DTC")`` is sampled on the same data, inducing inputs and default priors for a
comparison (ESS/s including compile); otherwise that row says "skipped".
"""

from __future__ import annotations

import time

from .common import _data, _diagnostics, _heldout_lpd, _met, _nuts

NAME = "exact"
FULL = {"N": 2_000, "M": 64, "warmup": 30, "draws": 30, "test": 1_000}
QUICK = {"N": 300, "M": 32, "warmup": 60, "draws": 60, "test": 300}
TARGETS = {"ess_ratio": 20.0}


def run(cfg, clock):
    import numpy as np

    N, M = cfg["N"], cfg["M"]
    X, y, _ = _data(N, 5)
    X_test, _, f_test = _data(cfg["test"], 6)
    y_test = f_test + 0.3 * np.random.default_rng(7).standard_normal(cfg["test"])
    out = {"N": N, "M": M}
    for model in ("sor", "exact"):
        kw = {"num_inducing": M} if model == "sor" else {}
        idata, ph = _nuts(
            model,
            X,
            y,
            clock,
            chains=1,
            warmup=cfg["warmup"],
            draws=cfg["draws"],
            X_pred=X_test,
            log_likelihood=False,
            **kw,
        )
        d = _diagnostics(idata)
        out[model] = {
            **d,
            **ph,
            "ess_per_s": d["ess_bulk_min"] / ph["sampling"],
            "lpd": _heldout_lpd(idata, y_test),
        }
    out["ess_ratio"] = out["sor"]["ess_per_s"] / out["exact"]["ess_per_s"]
    out["pymc"] = _pymc_dtc(X, y, X_test, y_test, M, cfg)
    return out


def _pymc_dtc(X, y, X_test, y_test, M, cfg):
    """PyMC's gp.MarginalApprox(approx="DTC") on the same data, Z and default priors, if PyMC is installed."""
    try:
        import pymc as pm
    except ImportError:
        return {"skipped": "PyMC is not installed"}
    import arviz as az
    import numpy as np

    from bayes_rbfn.gp.inducing import select_inducing
    from bayes_rbfn.models.families import data_scales, get_family

    family = get_family("se")
    priors = family.default_priors(data_scales(X, y))
    Z = np.asarray(select_inducing(X, M, method="kmeans", seed=0))
    offset = float(np.mean(y))

    def lognormal(name):
        d = priors[name]
        return pm.LogNormal(name, mu=float(d.loc), sigma=float(d.scale))

    with pm.Model():
        ell, var, noise = lognormal("lengthscale"), lognormal("variance"), lognormal("noise")
        gp = pm.gp.MarginalApprox(cov_func=var * pm.gp.cov.ExpQuad(1, ls=ell), approx="DTC")
        gp.marginal_likelihood("y", X=X, Xu=Z, y=y - offset, sigma=noise)
        t0 = time.perf_counter()
        idata = pm.sample(
            draws=cfg["draws"],
            tune=cfg["warmup"],
            chains=1,
            cores=1,
            random_seed=0,
            progressbar=False,
            compute_convergence_checks=False,
        )
        wall = time.perf_counter() - t0
    ess = az.ess(idata, var_names=["lengthscale", "variance", "noise"], method="bulk")
    ess_min = float(min(np.min(ess[n].values) for n in ("lengthscale", "variance", "noise")))
    return {"wall_incl_compile": wall, "ess_bulk_min": ess_min, "ess_per_s": ess_min / wall}


def targets(r, report):
    s, e = r["sor"], r["exact"]
    report.rows.append(
        (
            f"Against the exact GP: ESS/s of the hyperparameters at N = {r['N']:,} ≥ 20× exact's",
            f"{r['ess_ratio']:.0f}× ({s['ess_per_s']:.3g} vs {e['ess_per_s']:.3g} ESS/s)",
            _met(r["ess_ratio"] >= TARGETS["ess_ratio"]),
            f"held-out log predictive density per point: sor {s['lpd']:.4f}, exact {e['lpd']:.4f}",
        )
    )
    for m in ("sor", "exact"):
        for k in ("ess_per_s", "ess_bulk_min", "sampling", "compile", "lpd", "rhat_max"):
            report.add_csv("exact", f"{m}_{k}", r[m][k])
    pm_ = r.get("pymc", {})
    if "skipped" in pm_:
        report.rows.append(
            ("PyMC gp.MarginalApprox(approx='DTC'), same data and priors", "skipped", "—", pm_["skipped"])
        )
    elif pm_:
        report.rows.append(
            (
                "PyMC gp.MarginalApprox(approx='DTC'), same data and priors",
                f"sor/PyMC ESS/s ratio {s['ess_per_s'] / pm_['ess_per_s']:.1f}×",
                "—",
                f"PyMC {pm_['ess_per_s']:.3g} ESS/s (wall incl. compile {pm_['wall_incl_compile']:.0f} s)",
            )
        )
