"""The RBF network layer ``bayes_rbfn.rbfn`` inside user-written NumPyro models, against dense NumPy/SciPy.

* the sites and their values for given whitened weights: α = L_uu⁻ᵀ v and f = m + K_fu α, written densely;
* the prior covariance of f is the SoR covariance Q_ff = K_fu K_uu⁻¹ K_uf (within 5 Monte-Carlo SE);
* under a Poisson likelihood the model's joint log density is SciPy's Poisson log pmf of the counts plus
  the standard normal log density of v;
* :func:`bayes_rbfn.predict_rbfn` equals K_*u α + m per draw; bad arguments name themselves.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import reference as ref
import scipy.stats
import stochastic
from conftest import assert_close
from numpyro import handlers
from numpyro.infer import Predictive
from numpyro.infer.util import log_density

import bayes_rbfn as br
from bayes_rbfn.gp.kernels import SquaredExponential
from bayes_rbfn.io import arviz_compat
from bayes_rbfn.models import layers

JITTER = 1e-8  # the float64 jitter policy (bayes_rbfn.gp.linalg.JITTER)
X = np.linspace(0.0, 2.0, 7)[:, None]
Z = np.array([[0.2], [0.9], [1.7]])
X_TEST = np.array([[-0.4], [1.1], [3.0]])
KERNEL = SquaredExponential(lengthscale=0.6, variance=0.8)
COUNTS = np.array([1, 0, 3, 2, 5, 1, 0])


def _dense(kernel_spec=KERNEL):
    return np.asarray(kernel_spec(X, Z)), ref.jittered(np.asarray(kernel_spec(Z, Z)), JITTER)


def _layer_only(mean=0.0):
    return br.rbfn("f", KERNEL, X, Z, mean=mean)


def _poisson_model(X, Z, k=None):
    """What a user writes: their priors, the layer, a Poisson likelihood with a log link."""
    ell = numpyro.sample("lengthscale", dist.LogNormal(0.0, 0.5))
    s2 = numpyro.sample("variance", dist.LogNormal(0.0, 0.5))
    f = br.rbfn("f", SquaredExponential(lengthscale=ell, variance=s2), X, Z, mean=0.5)
    numpyro.sample("k", dist.Poisson(jnp.exp(f)), obs=k)


@pytest.mark.parametrize("mean", [0.0, 0.3, "callable"], ids=["zero", "number", "callable"])
def test_sites_are_the_whitened_weights_and_their_image(mean):
    m = (lambda A: 0.2 * A[:, 0]) if mean == "callable" else mean
    v = np.array([0.3, -1.2, 0.8])
    trace = handlers.trace(handlers.substitute(_layer_only, data={"f_v": v})).get_trace(m)
    assert trace["f_v"]["type"] == "sample" and trace["f_v"]["fn"].event_shape == (3,)
    Kfu, Kuu = _dense()
    alpha = np.linalg.solve(np.linalg.cholesky(Kuu).T, v)  # α = L_uu⁻ᵀ v, so Cov α = K_uu⁻¹
    expected_f = (m(X) if callable(m) else m) + Kfu @ alpha
    assert_close(trace["f_alpha"]["value"], alpha)
    assert_close(trace["f"]["value"], expected_f)


def test_centred_sites_are_the_values_at_the_centres():
    """centred=True: the site u = K_uu α has SciPy's N(0, K_uu) log density, α = K_uu⁻¹ u and f = K_fu α,
    so that f at the centres is u itself."""
    u = np.array([0.3, -1.2, 0.8])
    layer = lambda: br.rbfn("f", KERNEL, X, Z, centred=True)  # noqa: E731
    value, trace = log_density(layer, (), {}, {"f_u": u})
    Kfu, Kuu = _dense()
    alpha = np.linalg.solve(Kuu, u)
    assert "f_v" not in trace and trace["f_u"]["type"] == "sample"
    assert_close(float(value), scipy.stats.multivariate_normal(np.zeros(3), Kuu).logpdf(u))
    assert_close(trace["f_alpha"]["value"], alpha)
    assert_close(trace["f"]["value"], Kfu @ alpha)
    at_centres = handlers.substitute(lambda: br.rbfn("f", KERNEL, Z, Z, centred=True), data={"f_u": u})
    assert_close(handlers.trace(at_centres).get_trace()["f"]["value"], u, rtol=1e-6)


def test_centred_layer_with_unfactorisable_kuu_gives_minus_inf():
    layer = lambda: br.rbfn("f", KERNEL, X, Z_COLLIDING, jitter=0.0, centred=True)  # noqa: E731
    value, trace = log_density(layer, (), {}, {"f_u": np.array([0.5, -0.4, 1.3])})
    assert float(value) == -np.inf and np.all(np.isfinite(trace["f"]["value"]))


@pytest.mark.stochastic
def test_prior_covariance_of_f_is_the_sor_covariance():
    """20,000 prior draws of f: mean 0 and covariance Q_ff within 5 SE per entry (35 checks)."""
    S = 20_000
    f = np.asarray(Predictive(_layer_only, num_samples=S)(jax.random.PRNGKey(stochastic.seed(8)))["f"])
    Kfu, Kuu = _dense()
    Q = Kfu @ np.linalg.solve(Kuu, Kfu.T)
    assert np.all(np.abs(f.mean(0)) < 5 * np.sqrt(np.diag(Q) / S))
    se = np.sqrt((np.outer(np.diag(Q), np.diag(Q)) + Q**2) / S)
    assert np.all(np.abs(f.T @ f / S - Q) < 5 * se)


def test_poisson_log_density_equals_scipy():
    params = {"lengthscale": 0.7, "variance": 1.1, "f_v": np.array([0.5, -0.4, 1.3])}
    value, _ = log_density(
        _poisson_model, (jnp.asarray(X), jnp.asarray(Z)), {"k": jnp.asarray(COUNTS)}, params
    )
    kernel = SquaredExponential(lengthscale=0.7, variance=1.1)
    Kfu, Kuu = _dense(kernel)
    f = 0.5 + Kfu @ np.linalg.solve(np.linalg.cholesky(Kuu).T, params["f_v"])
    expected = (
        scipy.stats.lognorm(s=0.5).logpdf(0.7)
        + scipy.stats.lognorm(s=0.5).logpdf(1.1)
        + scipy.stats.norm.logpdf(params["f_v"]).sum()
        + scipy.stats.poisson(np.exp(f)).logpmf(COUNTS).sum()
    )
    assert_close(float(value), expected)


def test_predictive_simulates_counts():
    prior = Predictive(_poisson_model, num_samples=5)(jax.random.PRNGKey(0), jnp.asarray(X), jnp.asarray(Z))
    assert prior["k"].shape == (5, len(X)) and prior["f"].shape == (5, len(X))
    assert prior["f_alpha"].shape == (5, len(Z))


@pytest.mark.parametrize("scoped", [False, True], ids=["plain", "under-a-scope"])
def test_the_trace_carries_each_layer_and_it_predicts_k_star_u_alpha(scoped):
    """The weights' site carries the layer in the trace: its record predicts m + K_*u α at new inputs,
    with α the trace's (substituted) weights, and nothing outside the trace is kept."""
    v = np.array([0.3, -1.2, 0.8])
    model = handlers.scope(_layer_only, prefix="net") if scoped else _layer_only
    name = "net/f" if scoped else "f"
    trace = handlers.trace(handlers.substitute(model, data={f"{name}_v": v})).get_trace(0.4)
    records = layers.layer_records(trace)
    assert list(records) == [name] and trace[f"{name}_alpha"]["type"] == "deterministic"
    _, Kuu = _dense()
    alpha = np.linalg.solve(np.linalg.cholesky(Kuu).T, v)
    assert_close(records[name].alpha, alpha)
    expected = 0.4 + np.asarray(KERNEL(X_TEST, Z)) @ alpha
    assert_close(records[name].predict(jnp.asarray(X_TEST)), expected)
    assert layers.layer_records(handlers.trace(lambda: None).get_trace()) == {}


def test_predict_rbfn_is_k_star_u_alpha_per_draw():
    gen = np.random.default_rng(4)
    samples = {
        "lengthscale": np.exp(gen.normal(-0.5, 0.1, (2, 3))),
        "variance": np.exp(gen.normal(0.0, 0.1, (2, 3))),
        "f_alpha": gen.normal(size=(2, 3, len(Z))),
    }

    def make_kernel(s):
        return SquaredExponential(lengthscale=s["lengthscale"], variance=s["variance"])

    out = br.predict_rbfn(samples, make_kernel, Z, X_TEST, mean=0.5, batch_size=4)
    assert out.shape == (2, 3, len(X_TEST))
    for c, d in [(0, 0), (1, 2)]:
        kernel = SquaredExponential(
            lengthscale=samples["lengthscale"][c, d], variance=samples["variance"][c, d]
        )
        assert_close(out[c, d], 0.5 + np.asarray(kernel(X_TEST, Z)) @ samples["f_alpha"][c, d])
    with pytest.raises(ValueError, match="samples: no 'g_alpha'"):
        br.predict_rbfn(samples, make_kernel, Z, X_TEST, name="g")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({"kernel": "se"}, "kernel:", id="kernel"),
        pytest.param({"Z": np.ones((3, 2))}, "Z:", id="Z-dimensions"),
        pytest.param({"mean": np.ones(3)}, "mean:", id="mean-shape"),
        pytest.param({"X": np.ones((2, 2, 2))}, "X:", id="X-shape"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, match):
    args = {"kernel": KERNEL, "X": X, "Z": Z, **kwargs}
    mean = args.pop("mean", 0.0)
    with pytest.raises(ValueError, match=match), handlers.seed(rng_seed=0):
        br.rbfn("f", args["kernel"], args["X"], args["Z"], mean=mean)


# --------------------------------------------------------------------------------------------------
# MCMC: the layer with Z = X under a Poisson likelihood is the latent exact GP

POISSON_X = np.linspace(0.0, 3.0, 12)[:, None]
POISSON_KERNEL = SquaredExponential(lengthscale=0.8, variance=0.5)


def _poisson_counts():
    gen = stochastic.rng(12)
    K = np.asarray(POISSON_KERNEL(POISSON_X, POISSON_X)) + 1e-10 * np.eye(len(POISSON_X))
    f = 1.0 + np.linalg.cholesky(K) @ gen.standard_normal(len(POISSON_X))
    return gen.poisson(np.exp(f))


@pytest.fixture(scope="module")
def poisson_fits():
    """NUTS on f with the kernel held fixed: (i) the layer with Z = X, whose prior on f is
    K_ff (K_ff + δI)⁻¹ K_ff = K_ff − O(δ) (δ the 1e-8 relative jitter); (ii) a latent exact GP,
    f ~ MultivariateNormal(1, K_ff + δI). 2 chains × 1,000 draws each."""
    from numpyro.infer import MCMC, NUTS

    counts = jnp.asarray(_poisson_counts())
    X = jnp.asarray(POISSON_X)
    K = ref.jittered(np.asarray(POISSON_KERNEL(POISSON_X, POISSON_X)), JITTER)

    def layer_model(k=None):
        f = br.rbfn("f", POISSON_KERNEL, X, X, mean=1.0)
        numpyro.sample("k", dist.Poisson(jnp.exp(f)), obs=k)

    def latent_model(k=None):
        f = numpyro.sample("f", dist.MultivariateNormal(jnp.ones(len(K)), covariance_matrix=jnp.asarray(K)))
        numpyro.sample("k", dist.Poisson(jnp.exp(f)), obs=k)

    out = {}
    for name, model, dense in (("layer", layer_model, False), ("latent", latent_model, True)):
        mcmc = MCMC(
            NUTS(model, dense_mass=dense),
            num_warmup=500,
            num_samples=1000,
            num_chains=2,
            chain_method="sequential",
            progress_bar=False,
        )
        mcmc.run(jax.random.PRNGKey(stochastic.seed(13 if name == "layer" else 14)), k=counts)
        diverging = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["diverging"])
        out[name] = arviz_compat.from_groups(
            {
                "posterior": {"f": np.asarray(mcmc.get_samples(group_by_chain=True)["f"])},
                "sample_stats": {"diverging": diverging},
            }
        )
    return out


@pytest.mark.stochastic
@pytest.mark.parametrize("name", ["layer", "latent"])
def test_poisson_fits_converged(poisson_fits, name):
    """Both chains converged (tests/stochastic.py's bounds, bulk and folded ESS ≥ 300 of 2,000 draws)."""
    stochastic.assert_converged(poisson_fits[name], ["f"], min_ess=300)


@pytest.mark.stochastic
@pytest.mark.parametrize("point", range(len(POISSON_X)), ids=[f"x={x:g}" for x in POISSON_X[:, 0]])
def test_poisson_layer_matches_the_latent_exact_gp(poisson_fits, point):
    """E[f(x_i) | k] agrees between the two parameterisations within 4 combined MCSE, and so does
    E[f(x_i)²] (the spread)."""
    a = poisson_fits["layer"].posterior["f"].values[..., point]
    b = poisson_fits["latent"].posterior["f"].values[..., point]
    stochastic.assert_agree_within_mcse(a, b, f"E[f(x_{point}) | k]")
    stochastic.assert_agree_within_mcse(a**2, b**2, f"E[f(x_{point})² | k]")


# --------------------------------------------------------------------------------------------------
# K_uu that cannot be factorised: -inf, never NaN

#: Two centres 1e-11 apart: K_uu is singular in float64 at every lengthscale of the prior.
Z_COLLIDING = np.array([[0.5], [0.5 + 1e-11], [1.5]])


def _poisson_model_colliding(X, Z, k=None):
    """A Poisson model whose layer has no jitter and colliding centres, beside a well-posed layer."""
    ell = numpyro.sample("lengthscale", dist.LogNormal(0.0, 0.5))
    g = br.rbfn("g", SquaredExponential(lengthscale=ell, variance=1.0), X, Z[::2], jitter=0.0)
    f = br.rbfn("f", SquaredExponential(lengthscale=ell, variance=1.0), X, Z, jitter=0.0)
    numpyro.sample("k", dist.Poisson(jnp.exp(0.5 + g + 1e-3 * f)), obs=k)


def test_unfactorisable_kuu_gives_minus_inf_not_nan():
    """The model's log density at a point where K_uu (jitter 0, centres 1e-11 apart) has no Cholesky
    factor is -inf, and the sites the likelihood sees are finite."""
    params = {"lengthscale": 0.7, "f_v": np.array([0.5, -0.4, 1.3]), "g_v": np.array([0.1, 0.2])}
    args = (jnp.asarray(X), jnp.asarray(Z_COLLIDING))
    value, trace = log_density(_poisson_model_colliding, args, {"k": jnp.asarray(COUNTS)}, params)
    assert float(value) == -np.inf
    assert np.all(np.isfinite(trace["f"]["value"])) and np.all(np.isfinite(trace["f_alpha"]["value"]))
    jitted = jax.jit(lambda p: log_density(_poisson_model_colliding, args, {"k": COUNTS}, p)[0])
    assert float(jitted(params)) == -np.inf
    params["lengthscale"] = 1e-12  # the centres are 10 lengthscales apart: K_uu factorises
    assert np.isfinite(float(jitted(params)))


def test_nuts_on_a_poisson_model_with_colliding_centres_does_not_crash():
    """Colliding centres without jitter. (i) K_uu singular at every lengthscale: NUTS cannot start, and
    NumPyro says so (RuntimeError), rather than failing on a NaN rate in the Poisson likelihood's
    parameter check. (ii) Centres 1e-7 apart factorise only for lengthscales below ~5: a short run
    rejects the points above, and ends with finite draws, all of them where K_uu factorises."""
    from numpyro.infer import MCMC, NUTS

    def model(Z, prior_median, k=None):
        ell = numpyro.sample("lengthscale", dist.LogNormal(np.log(prior_median), 1.0))
        f = br.rbfn("f", SquaredExponential(lengthscale=ell, variance=1.0), X, Z, jitter=0.0)
        numpyro.sample("k", dist.Poisson(jnp.exp(f)), obs=k)

    counts = jnp.asarray(COUNTS)
    mcmc = MCMC(NUTS(model), num_warmup=30, num_samples=30, progress_bar=False)
    with pytest.raises(RuntimeError, match="Cannot find valid initial parameters"):
        mcmc.run(jax.random.PRNGKey(0), jnp.asarray(Z_COLLIDING), 1.0, k=counts)
    Z_close = jnp.asarray([[0.5], [0.5 + 1e-7], [1.5]])
    mcmc.run(jax.random.PRNGKey(1), Z_close, 3.0, k=counts)
    draws = mcmc.get_samples()
    assert np.all(np.isfinite(draws["f_alpha"])) and np.all(np.isfinite(draws["lengthscale"]))
