"""Convergence checks after a fit: r_hat, bulk/tail ESS and divergences, with a verdict in plain words.

Thresholds follow Vehtari et al. (2021): r_hat < 1.01 and bulk/tail ESS of at least 100 per chain;
any divergent transition is worth a look (Betancourt 2017).

References
----------
[1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. & Bürkner, P.-C. (2021). Rank-normalization,
    folding, and localization: an improved R-hat for assessing convergence of MCMC. Bayesian Analysis.
[2] Betancourt, M. (2017). A conceptual introduction to Hamiltonian Monte Carlo. arXiv:1701.02434.
[3] Vehtari, A., Simpson, D., Gelman, A., Yao, Y. & Gabry, J. (2024). Pareto smoothed importance sampling.
    JMLR 25(72).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from bayes_rbfn.io import arviz_compat

__all__ = [
    "PARETO_K_MAX",
    "RHAT_MAX",
    "ConvergenceReport",
    "ConvergenceWarning",
    "check_convergence",
    "posterior_summary",
    "psis_loo",
    "warn_if_poor",
]

RHAT_MAX = 1.01
ESS_PER_CHAIN_MIN = 100

#: Pareto k̂ above which PSIS-LOO's estimate for an observation is unreliable (Vehtari et al. 2024 [3]).
PARETO_K_MAX = 0.7


class ConvergenceWarning(UserWarning):
    """The sampler's diagnostics suggest the draws do not represent the posterior well."""


@dataclass(frozen=True)
class ConvergenceReport:
    """Worst diagnostics over the checked variables and what to do about them."""

    max_rhat: float
    min_ess_bulk: float
    min_ess_tail: float
    divergences: int
    num_draws: int
    chains: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Whether no diagnostic found a problem (``problems`` is empty)."""
        return not self.problems

    def verdict(self) -> str:
        """One paragraph in plain words."""
        rhat = (
            f"r_hat ≤ {self.max_rhat:.3f}"
            if self.chains > 1
            else "r_hat not computed (it needs two or more chains; this run has one)"
        )
        head = (
            f"{rhat}, bulk ESS ≥ {self.min_ess_bulk:.0f}, "
            f"tail ESS ≥ {self.min_ess_tail:.0f}, "
            f"{self.divergences} divergent transition(s) in {self.chains} chain(s) × {self.num_draws} draws."
        )
        if self.ok and self.chains == 1:
            return head + (
                " Verdict: the chain mixed well within itself. Whether it found the whole posterior is not "
                "checked: that needs two or more chains to compare (r_hat); run more chains to check it."
            )
        if self.ok:
            return head + " Verdict: the chains agree and mixed well; the summaries can be trusted."
        return head + " Verdict: do not trust these results yet. " + " ".join(self.problems)


def check_convergence(idata: Any, var_names: list[str] | None = None) -> ConvergenceReport:
    """Compute the worst r_hat / ESS over ``var_names`` and the number of divergences in ``sample_stats``.

    ``var_names`` defaults to all posterior variables.
    """
    post = arviz_compat.group_dataset(idata, "posterior")
    # Hyperparameters by default, not the RBFN layer's M weights (whitened ``*_v``, ``*_alpha``).
    names = var_names or [v for v in post.data_vars if "inducing" not in post[v].dims]
    names = [n for n in names if n in post.data_vars] or list(post.data_vars)
    chains, draws = post.sizes["chain"], post.sizes["draw"]
    rhat = arviz_compat.rhat(post, var_names=names) if chains > 1 else None  # r_hat needs two chains
    ess_bulk = arviz_compat.ess(post, var_names=names, method="bulk")
    ess_tail = arviz_compat.ess(post, var_names=names, method="tail")

    def worst(ds, fn):
        vals = np.concatenate([np.ravel(ds[v].values) for v in ds.data_vars])
        vals = vals[np.isfinite(vals)]
        return float(fn(vals)) if vals.size else float("nan")

    max_rhat = worst(rhat, np.max) if chains > 1 else float("nan")
    min_bulk = worst(ess_bulk, np.min)
    min_tail = worst(ess_tail, np.min)
    has_stats = "sample_stats" in arviz_compat.groups(idata)
    divergences = int(idata.sample_stats["diverging"].values.sum()) if has_stats else 0
    problems = []
    if chains > 1 and not (max_rhat < RHAT_MAX):
        problems.append(
            f"The chains disagree: r_hat is {max_rhat:.3f} (want < {RHAT_MAX}); run longer "
            "(more --warmup and --draws) or tighten the priors."
        )
    need = ESS_PER_CHAIN_MIN * chains
    if min(min_bulk, min_tail) < need:
        problems.append(
            f"The effective sample size is {min(min_bulk, min_tail):.0f} (want ≥ {need}): draw more samples."
        )
    if divergences:
        problems.append(
            f"{divergences} divergent transition(s): the sampler missed part of the posterior; raise "
            "target_accept (e.g. 0.95) or reparameterise/tighten the priors."
        )
    return ConvergenceReport(max_rhat, min_bulk, min_tail, divergences, draws, chains, tuple(problems))


def warn_if_poor(report: ConvergenceReport) -> None:
    """Issue a :class:`ConvergenceWarning` that says what to do when the diagnostics are poor."""
    if not report.ok:
        warnings.warn(report.verdict(), ConvergenceWarning, stacklevel=3)


def posterior_summary(idata: Any, var_names: list[str]) -> Any:
    """``az.summary`` of the posterior's ``var_names``, in the data's units at any scale float64 holds.

    A pandas DataFrame, unrounded.

    ArviZ's Monte-Carlo standard error of the sd takes fourth powers of the draws, which overflow beyond
    ~1e77 (a kernel variance when the targets are ~1e50), leaving ``mcse_sd`` empty. So mean, sd and HDI
    come from the draws as they are, and the diagnostics (``mcse_mean``, ``mcse_sd``, ESS, r_hat) from
    each element's draws divided by its largest magnitude, the standard errors multiplied back (ESS and
    r_hat do not depend on the scale). ArviZ's warnings (one chain has no r_hat) are not passed on.
    """
    import pandas as pd

    post = arviz_compat.group_dataset(idata, "posterior")[list(var_names)]
    scale = abs(post).max(dim=("chain", "draw"))
    scale = scale.where(np.isfinite(scale) & (scale > 0), 1.0)
    stats = arviz_compat.summary(post, kind="stats")
    diagnostics = arviz_compat.summary(post / scale, kind="diagnostics")
    # az.summary's rows: the variables in order, each one's elements in C order, as ravel gives them.
    factor = np.concatenate([np.ravel(scale[name].values) for name in var_names])
    for column in ("mcse_mean", "mcse_sd"):
        diagnostics[column] = diagnostics[column].to_numpy() * factor
    return pd.concat([stats, diagnostics], axis=1)


def psis_loo(idata: Any) -> tuple[Any | None, str]:
    """PSIS-LOO of a fit (``az.loo`` over its ``log_likelihood`` group) and a note on its reliability.

    Returns:
        (:class:`~bayes_rbfn.io.arviz_compat.Loo` or None, note): the note counts observations with
        Pareto k̂ > :data:`PARETO_K_MAX`, passes on ArviZ's own warning about high k̂, or says why LOO
        could not be computed (then None); "" when all is well. LOO is a bonus in a report, never a
        reason to fail, so no exception escapes.
    """
    loo, note = None, ""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            loo = arviz_compat.loo(idata)
        except Exception as err:
            return None, f"PSIS-LOO could not be computed ({type(err).__name__}: {err})."
    bad = int(np.sum(np.asarray(loo.pareto_k) > PARETO_K_MAX))
    if bad:
        note = (
            f"{bad} observation(s) have Pareto k̂ > {PARETO_K_MAX}: the PSIS-LOO estimate is unreliable "
            "for them."
        )
    elif loo.warning:
        note = "ArviZ warns that some Pareto k̂ are high; treat elpd_loo with care."
    return loo, note
