"""What every stochastic test shares: the seed offset and the statistical bounds, stated once.

A fixed seed is not a fixed chain across machines: XLA's code generation differs between processors, the
last bits of every floating-point result differ with it, and a NUTS trajectory is chaotic. So no test may
rest on one chain's exact trajectory. Each stochastic check below is a bound justified by the number of
draws, with a stated false-alarm rate, and must pass under any seed and any rounding.

Seeds
-----
``BAYES_RBFN_TEST_SEED=k`` (an integer ≥ 0, default 0) shifts every seed that a stochastic test uses —
the sampler's, SBC's, Hypothesis's and that of the data the statistical claims are made on — by ``k``::

    BAYES_RBFN_TEST_SEED=17 python -m pytest -q tests/infer/test_mcmc.py

Tests take their seeds from :func:`seed` and their generators from :func:`rng`. The fixed problems of the
deterministic identity tests (whose tolerances are stated for their conditioning) and the data set of
tests/workflows/test_compare.py (whose claims are about that data set) are not shifted.

Bounds (each check's false-alarm rate under a correct sampler, any seed)
------------------------------------------------------------------------
* ``K_MCSE = 4``: an MCMC estimate lies within 4 Monte-Carlo standard errors (from ArviZ's ESS) of the
  analytic value: two-sided normal tail 6.3e-5 per check.
* :func:`rhat_bound`: split-R̂ of a converged chain set exceeds it with probability ``false_alarm``, given
  the number of (split) chains, the draws per split chain and the ESS of the same quantity
  (see :func:`rhat_bound` for the derivation); :func:`assert_converged` spends ``FAMILY_FALSE_ALARM``
  over all the statistics it checks (Bonferroni), and asserts an ESS floor stated by the test.
* Divergences: at most ``MAX_DIVERGENT_FRACTION`` of the transitions. A posterior with a pathology the
  sampler cannot enter (a funnel) diverges on a large share of its transitions; a stray divergence in a
  smooth posterior, whose moments the MCSE checks verify directly, is a chance event that a fixed seed
  only hides.
"""

from __future__ import annotations

import json
import os
import warnings

import arviz as az
import numpy as np
import scipy.stats

__all__ = [
    "FAMILY_FALSE_ALARM",
    "K_MCSE",
    "MAX_DIVERGENT_FRACTION",
    "SEED_OFFSET",
    "assert_agree_within_mcse",
    "assert_converged",
    "assert_within_mcse",
    "mcse_mean",
    "record",
    "rhat_bound",
    "rng",
    "seed",
]


def _seed_offset() -> int:
    text = os.environ.get("BAYES_RBFN_TEST_SEED", "0").strip() or "0"
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"BAYES_RBFN_TEST_SEED must be a whole number ≥ 0, got {text!r}") from None
    if value < 0:
        raise ValueError(f"BAYES_RBFN_TEST_SEED must be a whole number ≥ 0, got {value}")
    return value


#: Added to every seed of the stochastic tests (environment variable ``BAYES_RBFN_TEST_SEED``).
SEED_OFFSET = _seed_offset()
#: Allowed deviation of an MCMC estimate from the analytic value, in Monte-Carlo standard errors.
K_MCSE = 4.0
#: False-alarm rate of one :func:`assert_converged` call, shared out over the statistics it checks.
FAMILY_FALSE_ALARM = 5e-4
#: Largest share of post-warm-up transitions that may diverge in a fit whose moments are then checked.
MAX_DIVERGENT_FRACTION = 1e-3


def record(check: str, **values) -> None:
    """Append one line of JSON to ``$BAYES_RBFN_TEST_LOG`` (if set): the margins behind each check, so runs
    under several seeds and ISAs can be compared (see tests/README.md)."""
    path = os.environ.get("BAYES_RBFN_TEST_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"check": check, "offset": SEED_OFFSET, **values}) + "\n")


def seed(base: int) -> int:
    """The test's seed ``base`` shifted by ``BAYES_RBFN_TEST_SEED``."""
    return int(base) + SEED_OFFSET


def rng(base: int) -> np.random.Generator:
    """``numpy.random.default_rng(seed(base))``."""
    return np.random.default_rng(seed(base))


def mcse_mean(series: np.ndarray) -> float:
    """MCSE of the mean of a (chain, draw) series: sd / sqrt(ESS), ESS by ArviZ's ``method="mean"``."""
    series = np.asarray(series, dtype=float)
    ess = float(az.ess(series, method="mean"))
    return float(np.std(series) / np.sqrt(ess))


def assert_within_mcse(estimate_series: np.ndarray, truth: float, what: str, k: float = K_MCSE) -> None:
    """|mean(series) − truth| ≤ k MCSE."""
    estimate = float(np.mean(estimate_series))
    se = mcse_mean(estimate_series)
    record("mcse", what=what, z=abs(estimate - truth) / max(se, 1e-300))
    assert abs(estimate - truth) <= k * se + 1e-12, (
        f"{what}: MC estimate {estimate:.6g} vs analytic {truth:.6g} differ by "
        f"{abs(estimate - truth) / max(se, 1e-300):.2f} MCSE (allowed {k})"
    )


def assert_agree_within_mcse(a: np.ndarray, b: np.ndarray, what: str, k: float = K_MCSE) -> None:
    """Two independent MCMC estimates of one quantity agree within k combined MCSE."""
    combined = float(np.hypot(mcse_mean(a), mcse_mean(b)))
    gap = abs(float(np.mean(a)) - float(np.mean(b)))
    record("mcse", what=what, z=gap / max(combined, 1e-300))
    assert gap <= k * combined, (
        f"{what}: {np.mean(a):.6g} vs {np.mean(b):.6g} differ by {gap / max(combined, 1e-300):.2f} "
        f"combined MCSE (allowed {k})"
    )


def rhat_bound(ess: float, chains: int, draws: int, false_alarm: float) -> float:
    """Upper bound on the split-R̂ of a converged chain set, exceeded with probability ``false_alarm``.

    ArviZ splits each of the C chains in two: m = 2C chains of n = ⌊draws/2⌋ draws, and
    R̂² = (n − 1)/n + (B/n)/W, with B/n the variance of the m chain means and W the within-chain
    variance (Vehtari et al. 2021, Eq. 3-4). For converged chains each chain mean is ≈ normal with variance
    σ²/(ESS/m), so (B/n)/W ≈ m/ESS · χ²_{m−1}/(m − 1), and

        R̂ ≤ sqrt((n − 1)/n + m/ESS · q_{1−p}(χ²_{m−1})/(m − 1))   with probability 1 − p.

    ``ess`` is the ESS of the same quantity (bulk for the rank-normalised R̂, folded for the tail R̂).
    """
    m = 2 * chains
    n = draws // 2
    q = float(scipy.stats.chi2.isf(false_alarm, m - 1))
    return float(np.sqrt((n - 1) / n + m / ess * q / (m - 1)))


def _scalars(ds, names):
    out = {}
    for name in names:
        values = np.asarray(ds[name].values)
        flat = values.reshape(values.shape[0], values.shape[1], -1)
        for i in range(flat.shape[-1]):
            out[name if flat.shape[-1] == 1 else f"{name}[{i}]"] = flat[..., i]
    return out


def assert_converged(
    idata, var_names: list[str], *, min_ess: float, max_divergent_fraction: float = MAX_DIVERGENT_FRACTION
) -> None:
    """The chains of ``idata`` agree and mixed, with every bound justified by the number of draws.

    For every scalar of ``var_names``: bulk and folded ESS ≥ ``min_ess`` (stated by the test, well below
    the ESS its fit reaches), and the rank-normalised bulk and folded split-R̂ below :func:`rhat_bound` at
    their own ESS, with ``FAMILY_FALSE_ALARM`` shared out over all of them; divergences at most
    ``max_divergent_fraction`` of the transitions (a test that checks no posterior moment of the fit may
    state a larger share).
    """
    post = idata.posterior
    chains, draws = post.sizes["chain"], post.sizes["draw"]
    series = _scalars(post, var_names)
    p = FAMILY_FALSE_ALARM / (2 * len(series))
    problems = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, x in series.items():
            ess = {method: float(az.ess(x, method=method)) for method in ("bulk", "folded")}
            rhat = {}
            for rhat_method, ess_method in (("z_scale", "bulk"), ("folded", "folded")):
                if not ess[ess_method] >= min_ess:
                    problems.append(f"{name}: {ess_method} ESS {ess[ess_method]:.0f} < {min_ess:.0f}")
                    continue
                if chains > 1:
                    rhat[ess_method] = float(az.rhat(x, method=rhat_method))
                    bound = rhat_bound(ess[ess_method], chains, draws, p)
                    if not rhat[ess_method] <= bound:
                        problems.append(
                            f"{name}: {ess_method} r_hat {rhat[ess_method]:.4f} > {bound:.4f} "
                            f"(ESS {ess[ess_method]:.0f})"
                        )
            # ArviZ's rank R̂ is the larger of the two
            record(
                "converged",
                name=name,
                ess_bulk=ess["bulk"],
                ess_folded=ess["folded"],
                rhat=max(rhat.values(), default=None),
            )
    divergences = int(idata.sample_stats["diverging"].values.sum())
    record("divergences", count=divergences, transitions=chains * draws)
    allowed = int(max_divergent_fraction * chains * draws)
    if divergences > allowed:
        problems.append(f"{divergences} divergent transitions (allowed {allowed} of {chains * draws})")
    assert not problems, "; ".join(problems)
