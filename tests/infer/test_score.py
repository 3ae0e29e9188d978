"""``bayes_rbfn.score``: the scores of a fit's predictive of y* at held-out inputs — from the stored
predictions when the fit's X_pred are the test inputs, from ``predict`` otherwise — against a direct
NumPy/SciPy computation from the per-draw moments (tests/reference.py: RMSE, log mixture density, CRPS in
closed form, coverage by the mixture CDF)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close
from reference import mixture_scores, stored_sor_predictive

import bayes_rbfn as br
from bayes_rbfn.infer import scores

JITTER = 1e-8  # the float64 jitter policy (bayes_rbfn.gp.linalg.JITTER)


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(11)
    X = rng.uniform(0.0, 2.0, size=(55, 2))
    y = np.sin(2.0 * X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.normal(size=55)
    X_train, y_train, X_test, y_test = X[:40], y[:40], X[40:], y[40:]
    idata = br.fit(
        "sor",
        X_train,
        y_train,
        num_inducing=6,
        X_pred=X_test,
        chains=1,
        draws=60,
        warmup=60,
        progress=False,
        check_diagnostics=False,
        log_likelihood=False,
        posterior_predictive=0,
    )
    return idata, X_test, y_test


def test_score_of_the_stored_predictions_equals_a_direct_computation(fitted):
    idata, X_test, y_test = fitted
    result = br.score(idata, X_test, y_test)
    S = X_test.shape[0]
    f_mean = idata.predictions["f_mean"].values.reshape(-1, S)
    f_var = idata.predictions["f_var"].values.reshape(-1, S)
    noise = idata.posterior["noise"].values.reshape(-1, 1)
    expected = mixture_scores(f_mean, np.sqrt(f_var + noise**2), y_test)
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert result["n"] == S
    assert set(result) == {
        "n",
        "rmse",
        "mae",
        "crps",
        "lpd",
        *(f"{kind}_{level}" for kind in ("coverage", "interval_score") for level in (50, 80, 95)),
    }


def test_score_at_other_inputs_predicts_them(fitted):
    """The same points in another order are not the stored X_pred: predict() computes them, and every
    score (a mean over points) is the same. Both sides come from the one predictive, so predict() at the
    reordered points is also checked, at a few draws, against the dense SoR conditional
    (tests/reference.py)."""
    idata, X_test, y_test = fitted
    order = np.arange(X_test.shape[0])[::-1]
    pred = br.predict(idata, X_test[order])
    for c, d in ((0, 0), (0, 31), (0, 59)):
        mean, var = stored_sor_predictive(idata, c, d, X_test[order], jitter=JITTER)
        assert_close(pred.f_mean[c, d], mean, scale=np.max(np.abs(mean)))
        assert_close(pred.f_var[c, d], var, scale=np.max(var))
    stored = br.score(idata, X_test, y_test)
    predicted = br.score(idata, X_test[order], y_test[order])
    for key, value in stored.items():
        assert predicted[key] == pytest.approx(value, rel=1e-8, abs=1e-12), key


def test_score_is_exported_lazily():
    assert "score" in br.__all__ and br.score is scores.score


def test_score_refuses_bad_test_data_and_non_gaussian_fits(fitted, monkeypatch):
    idata, X_test, y_test = fitted
    with pytest.raises(ValueError, match=r"y_test: expected shape \(15,\)"):
        br.score(idata, X_test, y_test[:-1])
    with pytest.raises(ValueError, match="y_test: 1 value"):
        br.score(idata, X_test, np.r_[y_test[:-1], np.nan])
    monkeypatch.setitem(idata.posterior.attrs, "bayes_rbfn_likelihood", "poisson")
    with pytest.raises(ValueError, match="'poisson' likelihood"):
        br.score(idata, X_test, y_test)
