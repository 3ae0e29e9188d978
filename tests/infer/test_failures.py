"""A fit that cannot give an answer says why: a degenerate model names the
settings that made it so; NaN in the predictions or log-likelihood is an error, never a result; the
convergence report words a one-chain run and its problems as sentences."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import bayes_rbfn as br
from bayes_rbfn.gp.validation import INPUT_SCALES, TARGET_SCALES, check_scale
from bayes_rbfn.infer.diagnostics import ConvergenceReport
from bayes_rbfn.infer.failures import (
    DegenerateModelError,
    NonFiniteResultError,
    check_finite,
    check_result_size,
    result_bytes,
)
from bayes_rbfn.io import arviz_compat

X = np.linspace(0.0, 6.0, 30)
Y = np.sin(X) + 0.1 * np.cos(7 * X)


def test_pinned_zero_like_noise_is_explained_not_a_runtime_error():
    """σ pinned at 1e-200 (σ² underflows to 0) makes SoR's covariance Q_ff + σ²I singular (rank M < N):
    NumPyro finds no valid start; the error says the noise is the cause and what to do."""
    with pytest.raises(DegenerateModelError, match=r"noise is pinned at 1e-200, .*pin a larger noise or let"):
        br.fit(
            "sor", X, Y, num_inducing=5, fixed={"noise": 1e-200}, chains=1, draws=5, warmup=5, progress=False
        )


def test_a_degenerate_model_without_an_obvious_cause_still_says_where_to_look():
    from bayes_rbfn.infer.failures import explain_degenerate

    problem = br.build_model("sor", X, Y, num_inducing=5)
    message = str(explain_degenerate(problem, None))
    assert "'sor' model has no parameter values with a finite log density" in message
    assert "priors= and fixed=" in message and "inputs span" in message


@pytest.mark.parametrize(
    ("model", "kwargs", "needle"),
    [
        ("sor", dict(mean=1e300), r"prior mean is fixed at 1e\+300 \(mean=, --mean on the command line\)"),
        ("sor", dict(mean=-1e200), r"prior mean is fixed at -1e\+200 \(mean=, --mean"),
        ("rbfn", dict(mean=1e3, likelihood="poisson"), r"prior mean is fixed at 1e\+03 .* the link of the"),
    ],
    ids=["huge", "huge-negative", "poisson-log-rate"],
)
def test_a_fixed_mean_far_from_the_data_is_named(model, kwargs, needle):
    """A fixed prior mean far beyond the targets makes every start's log density -inf: the message names
    the mean (the argument and the CLI option), not priors= and fixed=."""
    from bayes_rbfn.infer.failures import explain_degenerate

    y = np.round(np.exp(Y)) if kwargs.get("likelihood") == "poisson" else Y
    message = str(explain_degenerate(br.build_model(model, X, y, num_inducing=5, **kwargs), None))
    assert re.search(needle, message), message
    assert "priors= and fixed=" not in message


def test_a_fixed_mean_near_the_data_is_not_blamed():
    from bayes_rbfn.infer.failures import explain_degenerate

    message = str(explain_degenerate(br.build_model("sor", X, Y, num_inducing=5, mean=3.0), None))
    assert "prior mean" not in message and "priors= and fixed=" in message


def idata_with(f_mean: np.ndarray, log_lik: np.ndarray):
    return arviz_compat.from_groups(
        {
            "posterior": {"noise": np.ones((1, 3))},
            "log_likelihood": {"y": log_lik},
            "predictions": {"f_mean": f_mean, "f_var": np.ones_like(f_mean)},
        }
    )


@pytest.mark.parametrize(
    ("where", "value"),
    [("f_mean", np.nan), ("f_mean", np.inf), ("log_likelihood", np.nan), ("log_likelihood", -np.inf)],
    ids=["nan-mean", "inf-mean", "nan-loglik", "-inf-loglik"],
)
def test_non_finite_predictions_or_log_likelihood_are_an_error(where, value):
    f_mean, log_lik = np.zeros((1, 3, 4)), np.zeros((1, 3, 5))
    (f_mean if where == "f_mean" else log_lik)[0, 1, 2] = value
    with pytest.raises(NonFiniteResultError, match=r"hold 1 of (12|15) values that are NaN or infinite"):
        check_finite(idata_with(f_mean, log_lik))
    check_finite(idata_with(np.zeros((1, 3, 4)), np.zeros((1, 3, 5))))  # finite: accepted


@pytest.mark.parametrize(
    ("scale", "accepted"),
    [(1e-60, True), (2e-140, True), (5e-141, False), (5e139, True), (2e140, False)],
    ids=str,
)
def test_input_scale_window(scale, accepted):
    values = X * scale / X.max()  # spread and magnitude both `scale`
    if accepted:
        check_scale(values, "x", INPUT_SCALES)
    else:
        with pytest.raises(ValueError, match=r"x: its values run from 0 to .*rescale it"):
            check_scale(values, "x", INPUT_SCALES)


@pytest.mark.parametrize("scale", [1e-61, 1e61], ids=str)
def test_target_scale_window(scale):
    check_scale(Y * 1e-60 / np.ptp(Y), "y", TARGET_SCALES)
    check_scale(Y * 1e60 / np.abs(Y).max(), "y", TARGET_SCALES)
    with pytest.raises(ValueError, match=r"y: its values run from"):
        check_scale(Y * scale / (np.ptp(Y) if scale < 1 else np.abs(Y).max()), "y", TARGET_SCALES)
    check_scale(np.full(5, 3.0), "y", TARGET_SCALES)  # a constant column is another check's business


def test_result_size_estimate_and_refusal():
    """8 bytes per stored value: (params + 12 stats + 2S + N) per draw and N per kept replicate."""
    need = result_bytes(chains=2, draws=1000, params=10, N=100, S=50, replicates_per_chain=400)
    assert need == 8 * 2 * (1000 * (10 + 12 + 100 + 100) + 400 * 100)
    check_result_size(need, 3 * need)
    check_result_size(need, None)  # unknown: accepted
    with pytest.raises(ValueError, match=r"draws: .* about 12\.0 MiB of memory, and 4\.0 MiB is available"):
        check_result_size(need, need)
    with pytest.raises(ValueError, match=r"about 4\.0 MiB of disk space in /x, and 1\.0 KiB"):
        check_result_size(need, 1024, what="disk space", where=" in /x")


def test_one_chain_report_says_r_hat_needs_two_chains_and_problems_are_sentences():
    report = ConvergenceReport(float("nan"), 30.0, 20.0, 0, 40, 1, ("The effective sample size is 20.",))
    verdict = report.verdict()
    assert "nan" not in verdict.lower().replace("nan-", "")
    assert "r_hat not computed (it needs two or more chains; this run has one)" in verdict
    assert "Verdict: do not trust these results yet. The effective sample size" in verdict


def test_one_chain_report_that_passes_makes_no_between_chain_claim():
    """A one-chain run with good ESS and no divergence says it mixed within itself, and that r_hat (an
    agreement of chains) is not known: no claim that chains agree."""
    one = ConvergenceReport(float("nan"), 900.0, 800.0, 0, 1000, 1, ())
    verdict = one.verdict()
    assert "agree" not in verdict and "the chains" not in verdict
    assert "r_hat not computed (it needs two or more chains; this run has one)" in verdict
    assert "mixed well within itself" in verdict
    two = ConvergenceReport(1.002, 1800.0, 1600.0, 0, 1000, 2, ())
    assert "the chains agree and mixed well" in two.verdict()


def test_posterior_summary_at_scales_whose_fourth_powers_overflow():
    """Draws of a variance ~1e100 (targets ~1e50) and an ARD lengthscale of two very different scales:
    mcse_sd is filled, every column is that of the same draws at scale 1 times the scale (mean, sd, HDI,
    MCSEs; ESS and r_hat equal), and no warning escapes."""
    import warnings

    from bayes_rbfn.infer.diagnostics import posterior_summary

    gen = np.random.default_rng(3)
    unit = {
        "variance": 1.0 + 0.1 * gen.standard_normal((2, 200)),
        "lengthscale": gen.gamma(9.0, size=(2, 200, 2)),
    }
    scales = {"variance": 1e100, "lengthscale": np.array([1e-3, 1e80])}
    scaled = {name: values * scales[name] for name, values in unit.items()}
    names = ["variance", "lengthscale"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = posterior_summary(arviz_compat.from_groups({"posterior": scaled}), names)
    unit_posterior = arviz_compat.group_dataset(arviz_compat.from_groups({"posterior": unit}), "posterior")
    expected = pd.concat(
        [arviz_compat.summary(unit_posterior[names], kind=kind) for kind in ("stats", "diagnostics")], axis=1
    )
    columns = ["mean", "sd", "hdi_3%", "hdi_97%", "mcse_mean", "mcse_sd", "ess_bulk", "ess_tail", "r_hat"]
    assert list(summary.columns) == list(expected.columns) == columns
    assert list(summary.index) == ["variance", "lengthscale[0]", "lengthscale[1]"]
    assert np.all(np.isfinite(summary.to_numpy()))
    factor = np.array([1e100, 1e-3, 1e80])
    for column in ("mean", "sd", "hdi_3%", "hdi_97%", "mcse_mean", "mcse_sd"):
        np.testing.assert_allclose(summary[column], expected[column] * factor, rtol=1e-9)
    for column in ("ess_bulk", "ess_tail", "r_hat"):
        np.testing.assert_allclose(summary[column], expected[column], rtol=1e-9)
