"""Prediction from a model of one's own, and ``predict`` for every kernel and mean ``fit`` accepts.

* :func:`bayes_rbfn.predict_model` on a user's NumPyro model: its per-draw moments of f* equal the dense
  conditional of the joint prior of (y, f*) (tests/sparse_reference.py) for every sparse approximation
  and the exact GP, and an rbfn layer's f* equals m(x*) + K_*u α written in NumPy; the y* quantiles equal
  the mixture CDF inverted by SciPy's root finder;
* ``predict`` of a fit given a kernel object, a composite ``KernelFamily`` and a callable mean: in memory
  it gives the dense SoR conditional at the fit's draws (tests/reference.py), and the fit's stored
  ``predictions``; after a netCDF round trip it refuses, saying what to pass, and with that passed gives
  them again.
"""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import reference as dense_ref
import sparse_reference as ref
from conftest import assert_close
from scipy import optimize, stats

import bayes_rbfn as br
from bayes_rbfn.gp import kernels as K
from bayes_rbfn.infer.predictive import mixture_quantiles
from bayes_rbfn.io import arviz_compat
from bayes_rbfn.io.netcdf import write_inference_data
from bayes_rbfn.models.families import kernel_family

JITTER = 1e-8  # the float64 jitter policy (bayes_rbfn.gp.linalg.JITTER)

_gen = np.random.default_rng(20261127)  # a fixed problem and fixed draws (not a stochastic check)
N, DRAWS = 30, 5
X = np.sort(_gen.uniform(0.0, 3.0, N))
Y = np.sin(2.0 * X) + 0.1 * _gen.standard_normal(N)
Z = np.linspace(0.2, 2.8, 6)
X_NEW = np.linspace(-1.0, 4.0, 9)
SAMPLES = {
    "lengthscale": _gen.lognormal(np.log(0.7), 0.2, DRAWS),
    "variance": _gen.lognormal(0.0, 0.2, DRAWS),
    "noise": _gen.lognormal(np.log(0.2), 0.3, DRAWS),
}


def prior_mean(A):
    return 0.3 * A[:, 0] - 0.1


def _kernel(values):
    return K.SquaredExponential(lengthscale=values["lengthscale"], variance=values["variance"])


def _marginal_model(approx):
    def model(X, Z, y=None):
        values = {name: numpyro.sample(name, dist.LogNormal(0.0, 1.0)) for name in SAMPLES}
        if approx == "exact":
            gp = br.ExactGP(_kernel(values), X, values["noise"], mean=prior_mean)
        else:
            gp = br.SparseGP(_kernel(values), X, Z, values["noise"], approx=approx, mean=prior_mean)
        numpyro.sample("y", gp, obs=y)

    return model


def _layer_model(X, Z, y=None):
    values = {name: numpyro.sample(name, dist.LogNormal(0.0, 1.0)) for name in SAMPLES}
    f = br.rbfn("f", _kernel(values), X, Z, mean=prior_mean)
    numpyro.sample("y", dist.Normal(f, values["noise"]), obs=y)


def _draw(d):
    return {name: value[d] for name, value in SAMPLES.items()}


@pytest.mark.parametrize("approx", ["sor", "dtc", "fitc", "vfe", "exact"])
def test_per_draw_moments_equal_the_dense_conditional(approx):
    """At each draw: f* | y of the dense joint prior (QC&R 2005 §§4–6; R&W eq. (A.6)) plus the prior mean,
    and σ the draw's noise; the mixture moments by the law of total variance over the draws."""
    pred = br.predict_model(_marginal_model(approx), SAMPLES, X_NEW, X, Z, Y)
    assert pred.f_mean.shape == pred.f_var.shape == (DRAWS, X_NEW.size)
    A, B, A_new = X[:, None], Z[:, None], X_NEW[:, None]
    for d in range(DRAWS):
        noise = SAMPLES["noise"][d]
        mean, cov = ref.predict(approx, _kernel(_draw(d)), A, Y - prior_mean(A), B, noise, A_new, JITTER)
        assert_close(pred.f_mean[d], mean + prior_mean(A_new))
        assert_close(pred.f_var[d], np.diag(cov), scale=SAMPLES["variance"][d])
    np.testing.assert_array_equal(pred.noise, SAMPLES["noise"])
    assert_close(pred.mean, pred.f_mean.mean(0))
    assert_close(pred.var_y, pred.f_var.mean(0) + pred.f_mean.var(0) + np.mean(SAMPLES["noise"] ** 2))


def test_layer_predicts_the_network_at_each_draw():
    """site names an rbfn layer: f* = m(x*) + K_*u α with α = L_uu⁻ᵀ v (NumPy), known given the draw
    (f_var = 0); σ from ``noise_site``."""
    samples = {**SAMPLES, "f_v": _gen.standard_normal((DRAWS, Z.size))}
    pred = br.predict_model(_layer_model, samples, X_NEW, X, Z, Y, site="f", noise_site="noise")
    B, A_new = Z[:, None], X_NEW[:, None]
    for d in range(DRAWS):
        kernel = _kernel(_draw(d))
        Kuu = ref.gram(kernel, B)
        Luu = np.linalg.cholesky(Kuu + JITTER * np.mean(np.diag(Kuu)) * np.eye(Z.size))
        alpha = np.linalg.solve(Luu.T, samples["f_v"][d])
        assert_close(pred.f_mean[d], prior_mean(A_new) + ref.gram(kernel, A_new, B) @ alpha)
    np.testing.assert_array_equal(pred.f_var, 0.0)
    np.testing.assert_array_equal(pred.noise, SAMPLES["noise"])
    without_noise = br.predict_model(_layer_model, samples, X_NEW, X, Z, Y, site="f")
    assert without_noise.noise is None and without_noise.var_y is None
    with pytest.raises(ValueError, match="no noise σ"):
        without_noise.quantiles([0.5])


def test_quantiles_invert_the_mixture_cdf():
    """y*: the root of (1/T) Σ_s Φ((q − m_s)/√(v_s + σ_s²)) = p by Brent's method; f*: mixture_quantiles
    of the per-draw moments; the band's intervals are the same quantiles."""
    pred = br.predict_model(_marginal_model("sor"), SAMPLES, X_NEW, X, Z, Y)
    probs = [0.025, 0.5, 0.975]
    q = pred.quantiles(probs)
    sd_y = np.sqrt(pred.f_var + SAMPLES["noise"][:, None] ** 2)
    for j in range(X_NEW.size):
        for i, p in enumerate(probs):

            def excess(t, j=j, p=p):
                return stats.norm.cdf(t, pred.f_mean[:, j], sd_y[:, j]).mean() - p

            expected = optimize.brentq(excess, -50.0, 50.0, xtol=1e-12)
            assert q[i, j] == pytest.approx(expected, abs=1e-7)
    np.testing.assert_array_equal(
        pred.quantiles(probs, latent=True), mixture_quantiles(pred.f_mean, pred.f_var, probs)
    )
    lo, hi = pred.band((0.95,)).intervals[0.95]
    np.testing.assert_array_equal(lo, q[0])
    np.testing.assert_array_equal(hi, q[2])


def test_inference_data_keeps_its_chain_and_draw_axes():
    """Samples as ArviZ's fit object (chain 1, draw 5, as az.from_numpyro gives): (chains, draws, S)."""
    idata = arviz_compat.from_groups({"posterior": {name: value[None] for name, value in SAMPLES.items()}})
    pred = br.predict_model(_marginal_model("dtc"), idata, X_NEW, X, Z, Y)
    flat = br.predict_model(_marginal_model("dtc"), SAMPLES, X_NEW, X, Z, Y)
    assert pred.f_mean.shape == (1, DRAWS, X_NEW.size) and pred.noise.shape == (1, DRAWS)
    np.testing.assert_allclose(pred.f_mean[0], flat.f_mean, rtol=1e-12)
    np.testing.assert_allclose(pred.f_var[0], flat.f_var, rtol=1e-12)


#: (model, samples, options, the start of the error message)
BAD_REQUESTS = {
    "y-is-not-a-gp": (_layer_model, "layer", {}, r"site: 'y' is a Normal, not a SparseGP.*layers: 'f'"),
    "missing-draws": (
        _marginal_model("sor"),
        "lengthscale",
        {},
        r"no draws .* site\(s\) 'variance', 'noise'",
    ),
    "no-such-site": (_marginal_model("sor"), "all", {"site": "z"}, r"site: the model has no site 'z'"),
    "noise-of-a-marginal": (
        _marginal_model("sor"),
        "all",
        {"noise_site": "noise"},
        r"noise_site: 'y' is a GP",
    ),
    "noise-not-scalar": (
        _layer_model,
        "layer",
        {"site": "f", "noise_site": "f_v"},
        r"one σ per draw, got shape \(6,\)",
    ),
}


@pytest.mark.parametrize(("model", "samples", "options", "match"), BAD_REQUESTS.values(), ids=BAD_REQUESTS)
def test_bad_requests_say_what_is_wrong(model, samples, options, match):
    draws = {
        "all": SAMPLES,
        "lengthscale": {"lengthscale": SAMPLES["lengthscale"]},
        "layer": {**SAMPLES, "f_v": np.zeros((DRAWS, Z.size))},
    }[samples]
    with pytest.raises(ValueError, match=match):
        br.predict_model(model, draws, X_NEW, X, Z, Y, **options)


# --------------------------------------------------------------------------------------------------
# predict() after fit() with a kernel object, a composite KernelFamily and a callable mean

FIXED_KERNEL = K.SquaredExponential(lengthscale=0.7, variance=1.0)
FAMILY = kernel_family(
    lambda p: (
        K.SquaredExponential(p["lengthscale"], p["variance"]) + K.Matern32(p["rough_lengthscale"], 0.05)
    ),
    priors={
        "lengthscale": dist.LogNormal(0.0, 0.5),
        "variance": dist.LogNormal(0.0, 0.5),
        "rough_lengthscale": dist.LogNormal(-1.0, 0.5),
    },
    name="se-plus-rough",
)
X_PRED = np.linspace(-0.5, 3.5, 7)


def fit_mean(A):  # the fits' callable prior mean
    return 0.3 * A[:, 0]


@pytest.fixture(scope="module")
def fits():
    """Two tiny SoR fits: a fixed kernel object; the composite family with a callable prior mean."""
    common = dict(
        num_inducing=6,
        X_pred=X_PRED,
        chains=1,
        draws=100,
        warmup=100,
        progress=False,
        check_diagnostics=False,
        log_likelihood=False,
        posterior_predictive=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "kernel": br.fit("sor", X, Y, kernel=FIXED_KERNEL, **common),
            "family": br.fit("sor", X, Y, kernel=FAMILY, mean=fit_mean, **common),
        }


def _assert_stored_predictions(pred, idata):
    np.testing.assert_allclose(pred.f_mean, idata.predictions["f_mean"].values, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(pred.f_var, idata.predictions["f_var"].values, rtol=1e-10, atol=1e-12)


def _dense_sor_moments(idata, which, draw):
    """The SoR latent predictive at X_PRED for one draw of ``fits[which]``, from tests/reference.py's own
    kernel formulas and dense solves: (y − m(X), f* − m(X*)) ~ N(0, [[Q_ff + σ²I, Q_f*], [Q_*f, Q_**]]),
    m the fit's prior mean (the stored constant, or ``fit_mean``), X and Z as the fit stored them."""
    post, cd = idata.posterior, idata.constant_data
    value = {name: float(post[name].values[draw]) for name in post.data_vars}
    spec = {"kind": "se", "lengthscale": 0.7, "variance": 1.0}  # FIXED_KERNEL
    if which == "family":  # FAMILY
        smooth = {"kind": "se", "lengthscale": value["lengthscale"], "variance": value["variance"]}
        rough = {"kind": "matern32", "lengthscale": value["rough_lengthscale"], "variance": 0.05}
        spec = {"kind": "sum", "parts": [smooth, rough]}
    A, B, A_new = cd["X"].values, cd["Z"].values, X_PRED[:, None]
    offset = cd["y_offset"].values.item()
    mean_of = (lambda P: fit_mean(P) + offset) if which == "family" else (lambda P: np.full(len(P), offset))
    Kuu = dense_ref.jittered(dense_ref.gram(spec, B), JITTER)
    mean, cov = dense_ref.sor_function_space(
        dense_ref.gram(spec, A, B), Kuu, dense_ref.gram(spec, A_new, B), Y - mean_of(A), value["noise"]
    )
    return mean + mean_of(A_new), np.diag(cov)


@pytest.mark.parametrize("which", ["kernel", "family"])
def test_predict_in_memory_is_the_dense_sor_conditional(fits, which):
    """``predict`` of the fit at a few draws equals the dense SoR conditional (:func:`_dense_sor_moments`);
    it also gives the stored predictions, which are computed by the same predictive (that check only shows
    that predict reads the fit's draws in their order)."""
    idata = fits[which]
    given = {"kernel": FIXED_KERNEL} if which == "kernel" else {"kernel": FAMILY, "mean": fit_mean}
    pred = br.predict(idata, X_PRED, **given)
    for draw in ((0, 0), (0, 57), (0, 99)):
        mean, var = _dense_sor_moments(idata, which, draw)
        assert_close(pred.f_mean[draw], mean, scale=np.max(np.abs(mean)))
        assert_close(pred.f_var[draw], var, scale=np.max(var))
    _assert_stored_predictions(pred, idata)
    assert pred.noise.shape == (1, 100) and pred.quantiles([0.1, 0.9]).shape == (2, X_PRED.size)


#: (fit, what predict is given, the refusal) after a netCDF round trip
REFUSALS = {
    "kernel-object": (
        "kernel",
        {},
        r"kernel 'SquaredExponential' was a kernel object, which the file cannot hold",
    ),
    "kernel-family": (
        "family",
        {},
        r"kernel 'se-plus-rough' was a KernelFamily of one's own, which the file",
    ),
    "callable-mean": (
        "family",
        {"kernel": FAMILY},
        r"prior mean was a Python callable, which the file cannot",
    ),
}


@pytest.mark.parametrize("source", ["memory", "file"])
@pytest.mark.parametrize(("which", "refused_with", "match"), REFUSALS.values(), ids=REFUSALS)
def test_predict_needs_what_no_file_can_hold(fits, tmp_path, which, refused_with, match, source):
    """In memory as after writing and reading the netCDF file (the InferenceData holds nothing its file
    does not): refused with the keyword to pass; with it, the stored predictions. A round trip: the values
    themselves are checked against the dense conditional
    (test_predict_in_memory_is_the_dense_sor_conditional)."""
    path = tmp_path / "inference.nc"
    write_inference_data(fits[which], path)
    loaded = fits[which] if source == "memory" else arviz_compat.read_netcdf(path)
    keyword = "mean" if refused_with else "kernel"
    with pytest.raises(ValueError, match=rf"{match}.* bayes_rbfn.predict\(idata, X_test, {keyword}=\.\.\.\)"):
        br.predict(loaded, X_PRED, **refused_with)
    given = {"kernel": FIXED_KERNEL} if which == "kernel" else {"kernel": FAMILY, "mean": fit_mean}
    _assert_stored_predictions(br.predict(loaded, X_PRED, **given), fits[which])


def test_holdout_scores_of_a_fit_with_a_kernel_object():
    """fit(kernel=<object>, holdout=...) scores its held-out points (fit passes on the kernel it was given,
    which no file holds): the stored RMSE is that of the mixture mean of the dense SoR predictive
    (tests/reference.py) at the held-out inputs, from the stored draws of the noise."""
    from bayes_rbfn.infer.fitting import backtest_scores

    x = np.linspace(0.0, 6.0, 40)
    idata = br.fit(
        "sor",
        x,
        np.sin(x),
        kernel=FIXED_KERNEL,
        num_inducing=6,
        holdout=0.25,
        sampler=br.SamplerSettings(chains=1, draws=20, warmup=40, progress=False),
        check_diagnostics=False,
        log_likelihood=False,
        posterior_predictive=0,
    )
    cd, noise = idata.constant_data, idata.posterior["noise"].values[0]
    spec = {"kind": "se", "lengthscale": 0.7, "variance": 1.0}
    A, B, y_fit = cd["X"].values, cd["Z"].values, idata.observed_data["y"].values
    X_out, y_out = cd["X_holdout"].values, cd["y_holdout"].values
    c = cd["y_offset"].values.item()
    Kfu, Kuu, Ksu = (dense_ref.gram(spec, P, B) for P in (A, B, X_out))
    means = [
        dense_ref.sor_function_space(Kfu, dense_ref.jittered(Kuu, JITTER), Ksu, y_fit - c, s)[0] + c
        for s in noise
    ]
    expected = np.sqrt(np.mean((np.mean(means, axis=0) - y_out) ** 2))
    assert_close(backtest_scores(idata)["rmse"], expected, rtol=1e-6)


def test_predict_refuses_a_kernel_other_than_the_fits(fits, tmp_path):
    path = tmp_path / "inference.nc"
    write_inference_data(fits["kernel"], path)
    with pytest.raises(
        ValueError, match=r"kernel: the fit's kernel was 'SquaredExponential', got 'matern52'"
    ):
        br.predict(arviz_compat.read_netcdf(path), X_PRED, kernel="matern52")
    with pytest.raises(ValueError, match=r"mean: only a fit with a callable prior mean takes one"):
        br.predict(fits["kernel"], X_PRED, kernel=FIXED_KERNEL, mean=jnp.sin)
