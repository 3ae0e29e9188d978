"""The sparse models of the collection (dtc, fitc, vfe, asor) against dense references, without MCMC.

tests/gp/test_sparse.py checks the library blocks of bayes_rbfn.gp.sparse; here the *models* are checked as
the driver uses them: each model's jitted ``log_density(params, data, config)``, its NumPyro ``model`` (the
joint log density NumPyro computes from the ``factor`` site), its per-draw ``predict`` (with the prior
mean offset c) and its ``log_likelihood``, each against a dense N×N reference built from the formulas of
Quiñonero-Candela & Rasmussen (2005) and Titsias (2009) in tests/sparse_reference.py. The MCMC-level
checks (LOO against brute force on posterior draws, rankings) are in tests/workflows/test_compare.py.
Tolerances: conftest's float64 ones (1e-8 relative) unless stated next to the test.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
import sparse_reference as ref
from conftest import assert_close
from numpyro.infer.util import log_density as numpyro_log_density

from bayes_rbfn.gp.kernels import SquaredExponential
from bayes_rbfn.models import ModelConfig, available_models, exact, get_model, sor
from bayes_rbfn.models import sparse_models as sm
from bayes_rbfn.models.families import FAMILIES

#: The policy's float64 jitter, used by the models (config.jitter=None) and passed to the references.
JITTER = 1e-8
SPARSE = ("dtc", "fitc", "vfe", "asor")
#: The dense reference's covariance for each model's training density (asor trains as SoR).
REFERENCE_METHOD = {"dtc": "dtc", "fitc": "fitc", "vfe": "vfe", "asor": "sor", "sor": "sor"}
#: Hyperparameter sets at which the log densities and predictives are compared.
PARAMS = {
    "short-lengthscale": {"lengthscale": 0.4, "variance": 1.3, "noise": 0.2},
    "long-lengthscale": {"lengthscale": 2.5, "variance": 0.6, "noise": 0.5},
    "small-noise": {"lengthscale": 0.9, "variance": 2.0, "noise": 0.05},
}


@dataclass(frozen=True)
class Case:
    X: np.ndarray
    y: np.ndarray
    Z: np.ndarray
    X_test: np.ndarray
    y_offset: float
    params: dict

    def data(self) -> dict:
        return {
            "X": jnp.asarray(self.X),
            "y": jnp.asarray(self.y),
            "Z": jnp.asarray(self.Z),
            "y_offset": jnp.asarray(self.y_offset),
        }

    def kernel(self):
        return SquaredExponential(lengthscale=self.params["lengthscale"], variance=self.params["variance"])

    def jparams(self) -> dict:
        return {k: jnp.asarray(v) for k, v in self.params.items()}


def _case(dim: int, params: dict) -> Case:
    """N = 30 data, M = 7 inducing inputs, S = 45 test inputs reaching far outside the data (S is not a
    multiple of asor's point batch, so its remainder path is exercised)."""
    rng = np.random.default_rng(11 + dim)
    n, m, s = 30, 7, 45
    if dim == 1:
        X = np.sort(rng.uniform(-3.0, 3.0, n))[:, None]
        Z = np.linspace(-2.7, 2.7, m)[:, None]
        X_test = np.linspace(-8.0, 8.0, s)[:, None]
        params = dict(params)
    else:
        X = rng.uniform(-2.0, 2.0, (n, 2))
        Z = X[np.argsort(X[:, 0])[:: n // m][:m]]
        X_test = rng.uniform(-6.0, 6.0, (s, 2))
        params = dict(params, lengthscale=params["lengthscale"] * np.array([1.0, 1.7]))
    y = 1.5 + np.sin(1.3 * X.sum(axis=1)) + 0.2 * rng.standard_normal(n)
    return Case(X=X, y=y, Z=Z, X_test=X_test, y_offset=float(np.mean(y)), params=params)


CASES = [(dim, name) for dim in (1, 2) for name in PARAMS]
CASE_IDS = [f"{dim}d-{name}" for dim, name in CASES]


@pytest.fixture(params=CASES, ids=CASE_IDS)
def case(request) -> Case:
    dim, name = request.param
    return _case(dim, PARAMS[name])


def _config(jitter: float | None = None) -> ModelConfig:
    family = FAMILIES["se"]
    priors = {
        "lengthscale": dist.LogNormal(0.0, 1.0),
        "variance": dist.LogNormal(0.0, 1.0),
        "noise": dist.LogNormal(-1.0, 1.0),
    }
    return ModelConfig(family=family, priors=priors, jitter=jitter)


CONFIG = _config()


def _log_density(name: str):
    return {
        "dtc": sm.dtc_log_density,
        "fitc": sm.fitc_log_density,
        "vfe": sm.vfe_log_density,
        "asor": sor.log_density,
        "sor": sor.log_density,
        "exact": exact.log_density,
    }[name]


# --------------------------------------------------------------------------------------------------
# Registration


def test_models_are_in_the_collection():
    """The four models are registered through models/sparse_models.py's SPECS, with inducing inputs."""
    names = available_models()
    for name in SPARSE:
        assert name in names
        spec = get_model(name)
        assert spec.uses_inducing and not spec.grouped
    assert get_model("asor").log_likelihood is sor.log_likelihood


# --------------------------------------------------------------------------------------------------
# Log densities against dense scipy references


@pytest.mark.parametrize("name", SPARSE)
def test_log_density_equals_dense(case, name):
    """dtc: log N(y−c | 0, Q_ff+σ²I); fitc: + diag(K_ff−Q_ff); vfe: − tr(K_ff−Q_ff)/(2σ²); asor: SoR."""
    value = _log_density(name)(case.jparams(), case.data(), CONFIG)
    expected = ref.log_marginal(
        REFERENCE_METHOD[name],
        case.kernel(),
        case.X,
        case.y - case.y_offset,
        case.Z,
        case.params["noise"],
        JITTER,
    )
    assert_close(value, expected, rtol=1e-7)


@pytest.mark.parametrize("name", SPARSE)
def test_numpyro_joint_is_prior_plus_dense_likelihood(name):
    """The NumPyro model's joint log density = Σ log priors + the model's (dense) log likelihood term."""
    c = _case(1, PARAMS["short-lengthscale"])
    spec = get_model(name)
    params = c.jparams()
    joint, _ = numpyro_log_density(spec.model, (c.data(), CONFIG), {}, params)
    prior = sum(float(CONFIG.priors[k].log_prob(v)) for k, v in params.items())
    likelihood = ref.log_marginal(
        REFERENCE_METHOD[name], c.kernel(), c.X, c.y - c.y_offset, c.Z, c.params["noise"], JITTER
    )
    assert_close(joint, prior + likelihood, rtol=1e-7)


def test_dtc_density_is_sor_density(case):
    """DTC's marginal likelihood is SoR's (QC&R 2005 §5): the two models sample the same posterior."""
    data, params = case.data(), case.jparams()
    assert_close(sm.dtc_log_density(params, data, CONFIG), sor.log_density(params, data, CONFIG), rtol=1e-12)
    assert_close(sm.dtc_log_likelihood(params, data, CONFIG), sor.log_likelihood(params, data, CONFIG))


def test_vfe_is_sor_minus_trace_and_below_exact(case):
    """Titsias (2009) eq. (9): VFE = SoR − tr(K_ff − Q_ff)/(2σ²) exactly, and ≤ the exact log marginal."""
    data, params = case.data(), case.jparams()
    vfe = float(sm.vfe_log_density(params, data, CONFIG))
    gap = float(sor.log_density(params, data, CONFIG)) - vfe
    trace = ref.vfe_trace(case.kernel(), case.X, case.Z, JITTER)
    assert trace > 0
    assert_close(gap, trace / (2.0 * case.params["noise"] ** 2), rtol=1e-7)
    assert vfe <= float(exact.log_density(params, data, CONFIG))


@pytest.mark.parametrize("name", ["dtc", "fitc", "vfe"])
def test_log_density_is_neg_inf_on_failed_factorisation(name):
    """A non-finite hyperparameter gives -inf (NUTS rejects the step), never NaN."""
    c = _case(1, PARAMS["short-lengthscale"])
    params = dict(c.jparams(), lengthscale=jnp.asarray(jnp.nan))
    assert float(_log_density(name)(params, c.data(), CONFIG)) == -np.inf


# --------------------------------------------------------------------------------------------------
# Per-draw predictives against dense formulas


@pytest.mark.parametrize("name", ["dtc", "fitc", "vfe"])
def test_predict_equals_dense(case, name):
    """Per-draw moments = the dense conditional of the model's joint prior of (y, f*), plus the offset c.

    DTC/VFE: [[Q_ff + σ²I, Q_f*], [Q_*f, K_**]]; FITC: [[Q_ff + Λ, Q_f*], [Q_*f, K_**]] (QC&R 2005
    eqs. (21), (25); Titsias 2009 §3).
    """
    mean, var = get_model(name).predict(case.jparams(), case.data(), CONFIG, jnp.asarray(case.X_test))
    ref_mean, ref_cov = ref.predict(
        name, case.kernel(), case.X, case.y - case.y_offset, case.Z, case.params["noise"], case.X_test, JITTER
    )
    scale = case.params["variance"]
    assert_close(mean, ref_mean + case.y_offset, scale=scale + abs(case.y_offset), rtol=1e-7)
    assert_close(var, np.diag(ref_cov), scale=scale, rtol=1e-7)


def _asor_dense(c: Case, jitter: float) -> tuple[np.ndarray, np.ndarray]:
    """Augmented SoR by brute force: for each x*, SoR's dense predictive with inducing inputs Z ∪ {x*}.

    K_u'u' = [[K_uu + δI, k_u*], [k_*u, k_**]] with δ = jitter · mean(diag K_uu): the policy's jitter on
    the K_uu block, none on the added input (as the model does). Q'_ab = K_au' K_u'u'⁻¹ K_u'b by dense
    solves, and the predictive is the conditional of [[Q'_ff + σ²I, Q'_f*], [Q'_*f, Q'_**]] on y.
    """
    kernel, noise = c.kernel(), c.params["noise"]
    Kuu = ref.gram(kernel, c.Z)
    Kuu = Kuu + jitter * np.mean(np.diag(Kuu)) * np.eye(Kuu.shape[0])
    y = c.y - c.y_offset
    means, variances = [], []
    for s in range(c.X_test.shape[0]):
        x = c.X_test[s : s + 1]
        Kus = ref.gram(kernel, c.Z, x)
        K_aug = np.block([[Kuu, Kus], [Kus.T, ref.gram(kernel, x)]])
        Kfu_aug = np.hstack([ref.gram(kernel, c.X, c.Z), ref.gram(kernel, c.X, x)])
        Ksu_aug = np.hstack([Kus.T, ref.gram(kernel, x)])
        Qff = Kfu_aug @ np.linalg.solve(K_aug, Kfu_aug.T)
        Qsf = Ksu_aug @ np.linalg.solve(K_aug, Kfu_aug.T)
        Qss = Ksu_aug @ np.linalg.solve(K_aug, Ksu_aug.T)
        C = Qff + noise**2 * np.eye(len(y))
        means.append((Qsf @ np.linalg.solve(C, y))[0] + c.y_offset)
        variances.append((Qss - Qsf @ np.linalg.solve(C, Qsf.T))[0, 0])
    return np.array(means), np.array(variances)


def test_asor_predict_equals_dense_augmentation(case):
    """asor = SoR whose inducing inputs are Z plus the test input (Rasmussen & Quiñonero-Candela 2005):
    the bordered O(NM) update equals the dense (M+1)-point SoR predictive."""
    mean, var = sm.asor_predict(case.jparams(), case.data(), CONFIG, jnp.asarray(case.X_test))
    ref_mean, ref_var = _asor_dense(case, JITTER)
    scale = case.params["variance"]
    # The dense reference solves with K_u'u' of condition number up to ~1e8 (jittered K_uu): 1e-6.
    assert_close(mean, ref_mean, scale=scale + abs(case.y_offset), rtol=1e-6, atol=1e-8)
    assert_close(var, ref_var, scale=scale, rtol=1e-6, atol=1e-8)


def test_asor_at_inducing_inputs_is_sor():
    """Adding an inducing input that is already in Z changes nothing: asor = SoR at x* ∈ Z."""
    c = _case(1, PARAMS["short-lengthscale"])
    config = _config(jitter=0.0)
    at_Z = jnp.asarray(c.Z)
    mean, var = sm.asor_predict(c.jparams(), c.data(), config, at_Z)
    sor_mean, sor_var = sor.predict(c.jparams(), c.data(), config, at_Z)
    assert_close(mean, sor_mean, scale=1.3 + abs(c.y_offset), rtol=1e-7)
    assert_close(var, sor_var, scale=1.3, rtol=1e-7, atol=1e-9)


def test_asor_predict_under_vmap_over_draws():
    """The driver vmaps predict over draws; asor's lax.map over test points must give the per-draw values."""
    c = _case(1, PARAMS["short-lengthscale"])
    draws = {
        "lengthscale": jnp.array([0.4, 0.9, 1.7]),
        "variance": jnp.array([1.3, 0.5, 2.0]),
        "noise": jnp.array([0.2, 0.3, 0.1]),
    }
    X_test = jnp.asarray(c.X_test)
    mean, var = jax.jit(jax.vmap(lambda p: sm.asor_predict(p, c.data(), CONFIG, X_test)))(draws)
    for i in range(3):
        m_i, v_i = sm.asor_predict({k: v[i] for k, v in draws.items()}, c.data(), CONFIG, X_test)
        assert_close(mean[i], m_i)
        assert_close(var[i], v_i)


# --------------------------------------------------------------------------------------------------
# Z = X: the sparse models are the exact GP


def _grid_case(dim: int) -> Case:
    """Inputs ~1.5 lengthscales apart, so K_ff factorises without jitter (as in tests/gp/test_sparse.py)."""
    rng = np.random.default_rng(3 + dim)
    if dim == 1:
        X = np.linspace(-4.0, 4.0, 9)[:, None]
        X_test = np.linspace(-6.0, 6.0, 13)[:, None]
        params = {"lengthscale": 0.7, "variance": 1.5, "noise": 0.3}
    else:
        g = np.linspace(-1.2, 1.2, 3)
        X = np.stack(np.meshgrid(g, g), axis=-1).reshape(-1, 2)
        X_test = rng.uniform(-2.5, 2.5, (8, 2))
        params = {"lengthscale": np.array([0.8, 0.8]), "variance": 1.5, "noise": 0.3}
    y = 0.7 + np.sin(X.sum(axis=1)) + 0.1 * rng.standard_normal(X.shape[0])
    return Case(X=X, y=y, Z=X, X_test=X_test, y_offset=float(np.mean(y)), params=params)


@pytest.mark.parametrize("name", SPARSE)
@pytest.mark.parametrize("dim", [1, 2], ids=["1d-grid", "2d-grid"])
def test_z_equals_x_recovers_exact_gp(name, dim):
    """With Z = X (no jitter) DTC, FITC, VFE and the augmented SoR have the exact GP's log density and
    predictive — unlike SoR, whose variance at new points lacks the power function
    (docs/mathematics.md#inducing-inputs-at-the-data)."""
    c = _grid_case(dim)
    config = _config(jitter=0.0)
    data, params, X_test = c.data(), c.jparams(), jnp.asarray(c.X_test)
    assert_close(_log_density(name)(params, data, config), exact.log_density(params, data, config))
    mean, var = get_model(name).predict(params, data, config, X_test)
    exact_mean, exact_var = exact.predict(params, data, config, X_test)
    assert_close(mean, exact_mean, scale=1.5 + abs(c.y_offset))
    assert_close(var, exact_var, scale=1.5, rtol=1e-7)
    loo = get_model(name).log_likelihood(params, data, config)
    assert_close(loo, exact.log_likelihood(params, data, config), rtol=1e-7)
    if dim == 1:
        _, sor_var = sor.predict(params, data, config, X_test)
        assert np.max(np.asarray(exact_var - sor_var)) > 0.1  # SoR is not the exact GP here


# --------------------------------------------------------------------------------------------------
# Predictive variances order as theory says


def test_variance_ordering(case):
    """SoR ≤ DTC = VFE and SoR ≤ asor pointwise; DTC's excess over SoR is K_** − Q_** (QC&R 2005 §5)."""
    data, params, X_test = case.data(), case.jparams(), jnp.asarray(case.X_test)
    _, v_sor = sor.predict(params, data, CONFIG, X_test)
    _, v_dtc = sm.dtc_predict(params, data, CONFIG, X_test)
    _, v_vfe = sm.vfe_predict(params, data, CONFIG, X_test)
    _, v_asor = sm.asor_predict(params, data, CONFIG, X_test)
    floor = -1e-10 * case.params["variance"]
    assert np.all(np.asarray(v_dtc - v_sor) >= floor)
    assert np.all(np.asarray(v_asor - v_sor) >= floor)
    assert_close(v_vfe, v_dtc)
    residual = np.diag(ref.gram(case.kernel(), case.X_test)) - np.diag(
        ref.nystrom(case.kernel(), case.Z, case.X_test, case.X_test, JITTER)
    )
    assert_close(v_dtc - v_sor, residual, scale=case.params["variance"], rtol=1e-7)


@pytest.mark.parametrize("name", ["sor", *SPARSE])
def test_far_from_inducing_inputs(case, name):
    """Far from Z (and X): SoR's latent variance collapses to 0 (y*'s to σ²); DTC, FITC, VFE and asor
    revert to the prior, mean c and variance s²
    (docs/mathematics.md#the-sor-family-and-its-variance-collapse)."""
    X_far = jnp.asarray(np.full((3, case.X.shape[1]), 60.0) * np.array([[1.0], [-1.0], [2.0]]))
    mean, var = get_model(name).predict(case.jparams(), case.data(), CONFIG, X_far)
    s2 = case.params["variance"]
    assert_close(mean, np.full(3, case.y_offset), scale=s2 + abs(case.y_offset))
    assert_close(var, np.zeros(3) if name == "sor" else np.full(3, s2), scale=s2)
