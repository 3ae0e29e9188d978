"""A fit does not depend on where the origin of an input lies.

Inputs far from 0 relative to their spread (times in seconds or milliseconds since 1970 over a short span,
GPS times) hold the same points as centred ones, translated: every kernel of the package but ``Linear``
is translation-invariant, so the models' log densities, their gradients and the predictive are the same
functions of the translated data. What is proved, against the centred data as the reference (the offset
inputs are built so that they hold exactly the centred values plus the offset):

* each kernel family's Gram matrix and its derivatives with respect to every hyperparameter and both
  inputs are the centred ones (the derivative of the squared distance, written in matrix products, used
  to cancel every digit; so did the periodic kernel's sines of large phases);
* every model's log density and gradient at a fixed point, with one and two input columns, sparse passes
  streamed in blocks that pad the last one;
* the inducing inputs chosen by k-means are the centred ones translated;
* an offset training column whose spread is below ``INPUT_RELATIVE_SPREAD`` of its magnitude is refused
  with the scale check's message, and one just above is accepted;
* a full NUTS fit (slow) gives the centred fit's predictive mean and latent variance within 4 combined
  Monte-Carlo standard errors.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import stochastic
from numpyro.infer.util import initialize_model

import bayes_rbfn as br
from bayes_rbfn.gp import woodbury_sums
from bayes_rbfn.gp.inducing import select_inducing
from bayes_rbfn.gp.validation import INPUT_RELATIVE_SPREAD, INPUT_SCALES, check_scale
from bayes_rbfn.models import model_specs
from bayes_rbfn.models.families import FAMILIES

#: Offsets of the kind users bring: a Unix time in seconds, one in milliseconds, a GPS time.
OFFSETS = {"unix-seconds": 1.7e9, "unix-ms": 1.7e12, "gps": 3.1e9}
#: Relative agreement of two evaluations of the same function at the same (translated) points: the
#: arithmetic differs only in the rounding of the differences about the common point.
RTOL = 1e-9


def _translated(values: np.ndarray, offset: float) -> tuple[np.ndarray, np.ndarray]:
    """(centred, offset) inputs holding the same points: offset = centred + offset exactly."""
    shifted = values + offset
    return shifted - offset, shifted


def _data(D: int, offset: float, n: int = 60):
    gen = np.random.default_rng(5)
    X = gen.uniform(0.0, 2.0, (n, D))
    y = np.sin(3 * X[:, 0]) + (0.5 * X[:, 1] if D > 1 else 0) + 0.2 * gen.standard_normal(n)
    Zc = np.stack([np.linspace(0.1, 1.9, 7)] * D, axis=1) + 0.01 * np.arange(D)
    Xc, Xo = _translated(X, offset)
    Zc, Zo = _translated(Zc, offset)
    return (Xc, Zc), (Xo, Zo), y


@pytest.mark.parametrize("offset", list(OFFSETS.values()), ids=list(OFFSETS))
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_kernel_family_and_its_derivatives_are_translation_invariant(name, offset):
    (Xc, Zc), (Xo, Zo), _ = _data(1, offset)
    family = FAMILIES[name]
    kernel = family.build({p: 0.5 + 0.1 * i for i, p in enumerate(family.params)})
    leaves, treedef = jax.tree_util.tree_flatten(kernel)

    def total(leaves, X, Z):
        k = jax.tree_util.tree_unflatten(treedef, leaves)
        return jnp.sum(jnp.sin(k(X, Z))) + jnp.sum(jnp.cos(k(X)))

    value = jax.value_and_grad(total, argnums=(0, 1, 2))
    vc, gc = value(leaves, jnp.asarray(Xc), jnp.asarray(Zc))
    vo, go = value(leaves, jnp.asarray(Xo), jnp.asarray(Zo))
    np.testing.assert_allclose(vo, vc, rtol=RTOL)
    for a, b in zip(jax.tree_util.tree_leaves(go), jax.tree_util.tree_leaves(gc), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-9 * float(np.max(np.abs(b))))


def _potential(model: str, X, y, Z, kernel: str = "se"):
    options = {"kernel": kernel} if model_specs()[model].family is None else {}
    if model == "grouped":
        options["group"] = np.arange(X.shape[0]) % 2
        Z = np.stack([Z, Z])
    if model_specs()[model].uses_inducing:
        options["Z"] = Z
    gm = br.build_model(model, X, y, **options)
    info = initialize_model(jax.random.PRNGKey(0), gm.model, model_args=gm.args)
    point = jax.tree_util.tree_map(lambda v: jnp.full_like(v, 0.1), info.param_info.z)
    return jax.value_and_grad(info.potential_fn)(point)


@pytest.mark.parametrize("D", [1, 2], ids=["one-input", "two-inputs"])
@pytest.mark.parametrize("model", sorted(model_specs()))
def test_every_model_log_density_and_gradient_are_those_of_the_centred_inputs(model, D):
    (Xc, Zc), (Xo, Zo), y = _data(D, OFFSETS["unix-seconds"])
    vc, gc = _potential(model, Xc, y, Zc)
    vo, go = _potential(model, Xo, y, Zo)
    np.testing.assert_allclose(vo, vc, rtol=RTOL)
    for site in gc:
        np.testing.assert_allclose(go[site], gc[site], rtol=1e-7, atol=1e-9, err_msg=site)


@pytest.mark.parametrize("kernel", ["co2", "periodic", "matern32"])
def test_sor_with_the_other_kernels_is_translation_invariant(kernel):
    (Xc, Zc), (Xo, Zo), y = _data(1, OFFSETS["gps"])
    vc, gc = _potential("sor", Xc, y, Zc, kernel)
    vo, go = _potential("sor", Xo, y, Zo, kernel)
    np.testing.assert_allclose(vo, vc, rtol=RTOL)
    for site in gc:
        np.testing.assert_allclose(go[site], gc[site], rtol=1e-7, atol=1e-9, err_msg=site)


def test_streamed_sums_with_a_padded_last_block_are_translation_invariant():
    (Xc, Zc), (Xo, Zo), y = _data(1, OFFSETS["unix-ms"], n=61)

    def log_density(lengthscale, X, Z):
        kernel = br.kernels.SquaredExponential(lengthscale, 1.0)
        factor = woodbury_sums.sor_factor(kernel, X, jnp.asarray(y), Z, 0.3, chunk_size=16)
        return factor.log_marginal_likelihood()

    vc, gc = jax.value_and_grad(log_density)(0.4, jnp.asarray(Xc), jnp.asarray(Zc))
    vo, go = jax.value_and_grad(log_density)(0.4, jnp.asarray(Xo), jnp.asarray(Zo))
    np.testing.assert_allclose(vo, vc, rtol=RTOL)
    np.testing.assert_allclose(go, gc, rtol=1e-7)


@pytest.mark.parametrize("D", [1, 2], ids=["one-input", "two-inputs"])
def test_kmeans_inducing_inputs_are_the_centred_ones_translated(D):
    (Xc, _), (Xo, _), _ = _data(D, OFFSETS["unix-seconds"], n=200)
    chosen = select_inducing(Xo, 12, seed=1) - OFFSETS["unix-seconds"]
    reference = select_inducing(Xc, 12, seed=1)
    np.testing.assert_allclose(np.sort(chosen, axis=0), np.sort(reference, axis=0), atol=1e-6)


@pytest.mark.parametrize(
    ("spread", "accepted"),
    [(30.0 * INPUT_RELATIVE_SPREAD, True), (0.3 * INPUT_RELATIVE_SPREAD, False)],
    ids=["just-above", "below"],
)
def test_a_spread_too_small_for_its_magnitude_is_refused(spread, accepted):
    magnitude = 1.7e12
    x = magnitude + magnitude * spread * np.linspace(0.0, 1.0, 20)
    y = np.sin(np.linspace(0.0, 6.0, 20))
    if accepted:
        check_scale(x, "X[:, 0]", INPUT_SCALES, relative_spread=INPUT_RELATIVE_SPREAD)
        br.build_model("sor", x, y, num_inducing=5)
    else:
        with pytest.raises(ValueError, match=r"^X\[:, 0\]: its values run from .* rescale it"):
            br.build_model("sor", x, y, num_inducing=5)


@pytest.mark.slow
@pytest.mark.parametrize(("offset", "width"), [(1.7e9, 1.0), (3.1e9, 2.0)], ids=["unix-seconds", "gps"])
def test_a_fit_to_offset_inputs_is_the_centred_fit(offset, width):
    gen = stochastic.rng(41)
    x = gen.uniform(0.0, width, 100)
    y = np.sin(6 * x / width) + 0.2 * gen.standard_normal(100)
    grid = np.linspace(-0.1 * width, 1.1 * width, 13)
    xc, xo = _translated(x, offset)
    gc, go = _translated(grid, offset)
    options = dict(
        chains=2, draws=400, warmup=400, seed=stochastic.seed(3), progress=False, check_diagnostics=False
    )
    centred = br.fit("sor", xc, y, X_pred=gc, **options)
    shifted = br.fit("sor", xo, y, X_pred=go, **options)
    for name in ("f_mean", "f_var"):
        a = np.asarray(centred.predictions[name].values)
        b = np.asarray(shifted.predictions[name].values)
        for j in range(grid.size):
            stochastic.assert_agree_within_mcse(a[..., j], b[..., j], f"{name} at grid point {j}")
