"""Birthdays: this collection's additive RBF network against an HSGP model of the same structure.

Both models of the relative births per day (7,305 days, 1969–1988; ``bayes_rbfn/data/birthdays``) run in
one process, with the same chains, warm-up, draws, seed and target acceptance (0.8), each with its own
library's sampler at its defaults:

* ``bayes-rbfn``: :func:`bayes_rbfn.models.birthdays.birthdays_model` — intercept, trend (SE, 20 centres),
  year (periodic, 30 centres over one year), the weekday effects (times exp of the week trend less its
  mean over the days, in both models) and the holidays integrated out in one Woodbury pass, the 366
  day-of-year effects with them as group effects;
  NUTS samples the 8 hyperparameters and the week trend's values at its 6 centres (14 values), through
  the package's sampler at the case study's settings
  (:data:`bayes_rbfn.workflows.birthdays.DEFAULT_SETTINGS`: prior-median start, dense mass matrix,
  tree depth ≤ 8), but at the target acceptance both models share (0.8) instead of its 0.9.
* ``hsgp``: the same terms and priors with ``numpyro.contrib.hsgp``'s bases (Riutort-Mayol et al. 2023):
  trend ``hsgp_squared_exponential`` with m = 20 and L = 1.5 max|t|, week trend m = 8, the year the
  periodic expansion with m = 20 (20 cosines, 19 sines), every weight sampled (non-centred). The
  periodic basis is weighted by √q_j² (its covariance Σ_j q_j² cos(j ω₀ τ) is then the periodic kernel,
  which the script checks before it runs); ``hsgp_periodic_non_centered`` of numpyro multiplies by q_j²,
  and its Bessel function needs TensorFlow Probability, so the weights are computed here.

Reported for each: wall time with compilation and without it (minus JAX's trace, lowering and XLA compile
durations), min bulk ESS and ESS/s over the hyperparameters, divergences, max R-hat, PSIS-LOO ELPD with its
standard error and Pareto k̂, and LOO-R² (point estimate, Gelman et al. 2019). The LOO values of the
bayes-rbfn model are its marginal's leave-one-out conditionals log p(y_i | y_−i, θ) (non-factorised,
Bürkner et al. 2020); those of the HSGP model its pointwise likelihood. Both estimate the same ELPD.

    python benchmarks/birthdays.py [--chains 2] [--warmup 500] [--draws 500] [--seed 0] [--out DIR]
    python benchmarks/birthdays.py --only hsgp --hsgp-mass dense   # the HSGP model with a dense mass matrix

Writes ``<out>/birthdays.md`` and ``birthdays.json`` (default ``benchmarks/results/birthdays/``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _setup(chains: int):
    # One device per chain, each on one thread (two chains on two cores do not share their threads).
    os.environ.setdefault(
        "XLA_FLAGS",
        f"--xla_force_host_platform_device_count={chains} --xla_cpu_multi_thread_eigen=false "
        "intra_op_parallelism_threads=1",
    )
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


def hsgp_model(X, config, y=None):
    """The HSGP twin of :func:`bayes_rbfn.models.birthdays.birthdays_model`: same terms, same priors."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.contrib.hsgp.approximation import hsgp_squared_exponential
    from numpyro.handlers import scope

    from bayes_rbfn.models.birthdays import sample_hyperparameters

    x = X[:, 0]
    intercept = numpyro.sample("intercept", dist.Normal(0.0, 1.0))
    h = sample_hyperparameters()  # the same sites and priors as the bayes-rbfn model
    # numpyro's alpha is the SE kernel's variance (its spectral density is alpha·√(2π)ℓ·e^{−ℓ²ω²/2}).
    trend = scope(hsgp_squared_exponential, "trend")(
        x, h["trend_amplitude"] ** 2, h["trend_lengthscale"], ell=config["L"], m=config["m_trend"]
    )
    year = scope(periodic_basis_model, "year")(
        x, h["year_amplitude"], h["year_lengthscale"], config["w0"], config["m_year"]
    )
    g = scope(hsgp_squared_exponential, "week_trend")(
        x, h["week_amplitude"] ** 2, h["week_lengthscale"], ell=config["L"], m=config["m_week"]
    )
    weekday = numpyro.sample("weekday", dist.Normal(0.0, 1.0).expand([7]).to_event(1))
    holiday = numpyro.sample("holiday", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
    doy_z = numpyro.sample("doy_z", dist.Normal(0.0, 1.0).expand([366]).to_event(1))
    dow, doy = X[:, 1].astype(jnp.int32), X[:, 2].astype(jnp.int32)
    day = h["doy_scale"] * doy_z[doy] + X[:, 3:6] @ holiday
    f = intercept + trend + year + jnp.exp(g - jnp.mean(g)) * weekday[dow] + day
    numpyro.deterministic("f", f)
    numpyro.sample("y", dist.Normal(f, h["noise"]), obs=y)


#: Terms of the series of :func:`bessel_ive`: enough for a = 1/ℓ² up to ~400 (ℓ ≥ 0.05) to 1e-12.
SERIES_TERMS = 800


def bessel_ive(j, a):
    """e^{−a} I_j(a) for integer orders j ≥ 0 and a > 0, traceable and differentiable in a: the power
    series I_j(a) = Σ_k (a/2)^{2k+j} / (k! (k+j)!) summed in log space. (``numpyro.contrib.hsgp``'s
    ``modified_bessel_first_kind`` needs TensorFlow Probability, whose JAX substrate does not load with
    the installed JAX.)"""
    import jax.numpy as jnp
    from jax.scipy.special import gammaln, logsumexp

    j = jnp.asarray(j, dtype=jnp.float64)[:, None]
    k = jnp.arange(SERIES_TERMS, dtype=jnp.float64)[None, :]
    log_terms = (2 * k + j) * jnp.log(a / 2) - gammaln(k + 1) - gammaln(k + j + 1) - a
    return jnp.exp(logsumexp(log_terms, axis=1))


def periodic_basis(x, amplitude, lengthscale, w0, m):
    """(cosines, sines) of the periodic expansion and the basis weights √q_j² (Riutort-Mayol et al.
    2023, appendix B): q_j² = c_j s² e^{−a} I_j(a), a = 1/ℓ², c_0 = 1, c_j = 2, and
    Σ_j q_j² cos(j ω₀ τ) = s² exp(−2 sin²(ω₀τ/2)/ℓ²)."""
    import jax.numpy as jnp
    from numpyro.contrib.hsgp.approximation import eigenfunctions_periodic

    j = jnp.arange(m)
    q2 = jnp.where(j > 0, 2.0, 1.0) * amplitude**2 * bessel_ive(j, lengthscale**-2)
    cosines, sines = eigenfunctions_periodic(x=x, w0=w0, m=m)
    return cosines, sines, jnp.sqrt(q2)


def periodic_basis_model(x, amplitude, lengthscale, w0, m):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    cosines, sines, weight = periodic_basis(x, amplitude, lengthscale, w0, m)
    beta_cos = numpyro.sample("beta_cos", dist.Normal(0.0, 1.0).expand([m]).to_event(1))
    beta_sin = numpyro.sample("beta_sin", dist.Normal(0.0, 1.0).expand([m - 1]).to_event(1))
    beta_sin = jnp.concatenate([jnp.zeros(1), beta_sin])  # sin(0·ω₀x) = 0: no weight
    return numpyro.deterministic("f", cosines @ (weight * beta_cos) + sines @ (weight * beta_sin))


def check_periodic_basis(w0: float, m: int) -> float:
    """Largest |Σ_j q_j² cos(j ω₀ τ) − k(τ)| / s² over τ and ℓ ∈ {0.3, 0.5, 1}: the basis against the
    periodic kernel of the package. Raises if above 1e-6."""
    import jax.numpy as jnp
    import numpy as np

    from bayes_rbfn.gp.kernels import Periodic

    tau = np.linspace(0.0, 2 * np.pi / w0, 50)
    worst = 0.0
    for ell in (0.3, 0.5, 1.0):
        cosines, sines, weight = periodic_basis(jnp.asarray(tau), 1.3, ell, w0, m)
        cov = (cosines * weight**2) @ cosines[:1].T + (sines * weight**2) @ sines[:1].T  # k(τ, 0)
        kernel = np.asarray(Periodic(ell, 1.3**2, 2 * np.pi / w0)(tau[:, None], np.zeros((1, 1))))
        worst = max(worst, float(np.max(np.abs(np.asarray(cov) - kernel))) / 1.3**2)
    from scipy.special import ive

    series = np.asarray(bessel_ive(np.arange(m), jnp.asarray(25.0)))
    if np.max(np.abs(series - ive(np.arange(m), 25.0)) / ive(np.arange(m), 25.0)) > 1e-10:
        raise AssertionError("bessel_ive is off scipy.special.ive")
    if worst > 1e-6:
        raise AssertionError(f"the periodic basis is {worst:.2e} off the periodic kernel")
    return worst


def run(model, args, settings, clock, jax):
    """The HSGP model's NUTS run (NumPyro's MCMC): its draws by chain, statistics, wall time and JAX's
    compile time in it."""
    from numpyro.infer import MCMC, NUTS, init_to_median

    before = sum(clock.seconds.values())
    start = time.perf_counter()
    mcmc = MCMC(
        NUTS(
            model,
            target_accept_prob=0.8,
            init_strategy=init_to_median(),
            dense_mass=settings.hsgp_mass == "dense",
        ),
        num_warmup=settings.warmup,
        num_samples=settings.draws,
        num_chains=settings.chains,
        chain_method="parallel",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(settings.seed), *args, extra_fields=("diverging", "num_steps"))
    samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    wall = time.perf_counter() - start
    return samples, mcmc.get_extra_fields(group_by_chain=True), wall, sum(clock.seconds.values()) - before


def run_package(model_args, settings, clock, jax):
    """The bayes-rbfn model's NUTS run through the package's sampler at the case study's settings."""
    from dataclasses import replace

    from bayes_rbfn.infer.sampler import nuts_kernel, run_chains
    from bayes_rbfn.models import birthdays as B
    from bayes_rbfn.workflows.birthdays import DEFAULT_SETTINGS

    sampler = replace(
        DEFAULT_SETTINGS,
        chains=settings.chains,
        warmup=settings.warmup,
        draws=settings.draws,
        seed=settings.seed,
        target_accept=0.8,  # the HSGP twin's, numpyro's default
        progress=False,
        chain_method="parallel",
    )
    before = sum(clock.seconds.values())
    start = time.perf_counter()
    kernel = nuts_kernel(B.birthdays_model, model_args, sampler, num_points=len(model_args[-1]))
    samples, stats = run_chains(kernel, model_args, sampler)
    samples = jax.block_until_ready(samples)
    wall = time.perf_counter() - start
    return samples, stats, wall, sum(clock.seconds.values()) - before


def summarise(name, stats, samples, wall, compile_s, y, loo_values, residuals):
    import arviz as az
    import numpy as np

    from bayes_rbfn import loo_r2
    from bayes_rbfn.models.birthdays import HYPERPARAMETERS

    posterior = {k: np.asarray(samples[k]) for k in HYPERPARAMETERS}
    idata = az.from_dict(posterior=posterior, log_likelihood={"y": loo_values})
    ess = az.ess(idata.posterior, method="bulk")
    rhat = az.rhat(idata.posterior)
    min_ess = min(float(ess[k].min()) for k in HYPERPARAMETERS)
    loo = az.loo(idata, pointwise=True)
    per_site = {
        k: {
            "mean": float(np.mean(posterior[k])),
            "sd": float(np.std(posterior[k])),
            "bulk_ess": float(ess[k]),
            "rhat": float(rhat[k]),
        }
        for k in HYPERPARAMETERS
    }
    return {
        "model": name,
        "wall_s": wall,
        "compile_s": compile_s,
        "sampling_s": wall - compile_s,
        "min_bulk_ess": min_ess,
        "ess_per_s": min_ess / (wall - compile_s),
        "max_rhat": max(float(rhat[k].max()) for k in HYPERPARAMETERS),
        "divergences": int(np.sum(np.asarray(stats["diverging"]))),
        "mean_steps": float(np.mean(np.asarray(stats["num_steps"]))),
        "elpd_loo": float(loo.elpd_loo),
        "elpd_se": float(loo.se),
        "pareto_k_over_0_7": int(np.sum(np.asarray(loo.pareto_k) > 0.7)),
        "loo_r2": loo_r2(idata, y, loo_values, residuals),
        "hyperparameters": per_site,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=("bayes-rbfn", "hsgp"), default=None)
    parser.add_argument(
        "--hsgp-mass",
        choices=("diagonal", "dense"),
        default="diagonal",
        help="the HSGP model's mass matrix (numpyro's default: diagonal)",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "birthdays")
    args = parser.parse_args(argv)
    jax = _setup(args.chains)
    import numpy as np

    sys.path.insert(0, str(HERE))
    from ess_vs_numpyro import CompileClock

    from bayes_rbfn.infer.loo import replayed_loo
    from bayes_rbfn.models import birthdays as B

    clock = CompileClock(jax)
    data = B.load_birthdays()
    X, y, period = data["X"], data["y"], data["period"]
    config = {
        "L": 1.5 * float(np.max(np.abs(X[:, 0]))),
        "w0": 2 * np.pi / period,
        "m_trend": 20,
        "m_year": 20,
        "m_week": 8,
    }
    basis_error = check_periodic_basis(config["w0"], config["m_year"])
    rows = []
    if args.only in (None, "bayes-rbfn"):
        model_args = data["model_args"]
        samples, stats, wall, compile_s = run_package(model_args, args, clock, jax)
        import arviz as az

        idata = az.from_dict(posterior={k: np.asarray(v) for k, v in samples.items()})
        loo_values = replayed_loo(idata, B.birthdays_model, model_args, {}, batch_size=16)
        residuals = replayed_loo(
            idata, B.birthdays_model, model_args, {}, batch_size=16, statistic="residual"
        )
        rows.append(summarise("bayes-rbfn", stats, samples, wall, compile_s, y, loo_values, residuals))
        rows[-1]["sampler"] = "bayes_rbfn: median start, dense mass, depth ≤ 8"
        print(rows[-1], flush=True)
    if args.only in (None, "hsgp"):
        samples, stats, wall, compile_s = run(hsgp_model, (X, config, y), args, clock, jax)
        noise = np.asarray(samples["noise"])[..., None]
        f = np.asarray(samples["f"])
        from scipy.stats import norm

        loo_values = norm.logpdf(y, f, noise)
        rows.append(summarise("hsgp", stats, samples, wall, compile_s, y, loo_values, y - f))
        rows[-1]["sampler"] = f"numpyro: median start, {args.hsgp_mass} mass, depth ≤ 10"
        print(rows[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    record = {
        "date": datetime.date.today().isoformat(),
        "machine": (
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {jax.default_backend()}"
        ),
        "settings": {k: getattr(args, k) for k in ("chains", "warmup", "draws", "seed", "hsgp_mass")},
        "periodic_basis_error": basis_error,
        "rows": rows,
    }
    (args.out / "birthdays.json").write_text(json.dumps(record, indent=2))
    lines = [
        f"Birthdays, {record['date']}, {record['machine']}; "
        f"{args.chains} chains × ({args.warmup} + {args.draws})",
        "",
        "| model | sampler | wall s | compile s | min bulk ESS | ESS/s | divergences | max R-hat "
        "| steps/draw | ELPD (SE) | k̂ > 0.7 | LOO-R² |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['sampler']} | {r['wall_s']:.0f} | {r['compile_s']:.0f} | "
            f"{r['min_bulk_ess']:.0f} | "
            f"{r['ess_per_s']:.2f} | {r['divergences']} | {r['max_rhat']:.3f} | {r['mean_steps']:.0f} | "
            f"{r['elpd_loo']:.0f} ({r['elpd_se']:.0f}) | {r['pareto_k_over_0_7']} | {r['loo_r2']:.3f} |"
        )
    lines += [
        "",
        "Per hyperparameter: posterior mean ± sd (bulk ESS, R-hat)",
        "",
        "| site | " + " | ".join(r["model"] for r in rows) + " |",
        "|---|" + "---|" * len(rows),
    ]
    for k in rows[0]["hyperparameters"] if rows else ():
        cells = []
        for r in rows:
            h = r["hyperparameters"][k]
            cells.append(f"{h['mean']:.4g} ± {h['sd']:.2g} ({h['bulk_ess']:.0f}, {h['rhat']:.3f})")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    (args.out / "birthdays.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
