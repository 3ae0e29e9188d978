"""Kernel families (models/families.py): the registered ``rq`` family, user families from
:func:`kernel_family` with priors on the data's scale, and one short fit of a composite family.

The kernels themselves are checked against their NumPy formulas in tests/gp/test_kernels.py; here the
families are: their names, their priors (which follow the units of X and y), their validation, and that
``bayes_rbfn.fit(..., kernel=<family>)`` samples every hyperparameter a family names; and that each composite
family's one-line description (what ``bayes-rbfn fit --help`` lists) names the kernel it builds, term by term.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpyro.distributions as dist
import pytest
from conftest import assert_close

import bayes_rbfn as br
from bayes_rbfn.cli.options import kernel_names
from bayes_rbfn.gp import kernels as K
from bayes_rbfn.models.families import (
    FAMILIES,
    co2_family,
    data_scales,
    get_family,
    kernel_family,
    lengthscale_prior,
    variance_prior,
)


def _scales(rng):
    """Inputs spanning 10 and 0.02 units, targets of sd ≈ 50: priors must follow each."""
    X = np.column_stack([rng.uniform(0.0, 10.0, 40), rng.uniform(0.0, 0.02, 40)])
    y = 50.0 * rng.normal(size=40)
    return X, y, data_scales(X, y)


def _median(d):
    base = d.base_dist if isinstance(d, dist.Independent) else d
    return np.exp(np.asarray(base.loc))


def test_rq_family_is_registered_and_listed_by_the_cli(rng):
    assert "rq" in FAMILIES and "rq" in kernel_names()
    family = get_family("rq")
    X, y, scales = _scales(rng)
    priors = family.default_priors(scales)
    assert set(priors) == {*family.params, "noise"} == {"lengthscale", "variance", "mixture_shape", "noise"}
    # Two inputs: the one-input median 0.2 · range, √2 times longer (families' module docstring).
    assert_close(_median(priors["lengthscale"]), 0.2 * np.sqrt(2.0) * np.ptp(X, axis=0))
    assert_close(_median(priors["variance"]), np.std(y) ** 2)
    kernel = family.build({"lengthscale": np.array([1.0, 0.01]), "variance": 2.0, "mixture_shape": 0.5})
    assert type(kernel) is K.RationalQuadratic
    assert_close(kernel.mixture_shape, 0.5)


def test_each_class_family_builds_its_class_and_the_kernels_carry_no_priors_or_help_text():
    """A kernel family is a kernel class and its entry in CLASS_FAMILIES (name, priors, help line), listed
    in that order before the composite co2; the classes of gp.kernels carry none of it, and the maths
    layer imports no NumPyro."""
    from bayes_rbfn.models.families import CLASS_FAMILIES

    assert list(FAMILIES) == [*(f.name for f in CLASS_FAMILIES), "co2"]
    assert "imq" in kernel_names()
    classes = {"se": K.SquaredExponential, "rq": K.RationalQuadratic, "periodic": K.Periodic}
    for family in CLASS_FAMILIES:
        kernel = family.build({p: 0.5 + i for i, p in enumerate(family.params)})
        assert isinstance(kernel, K.Kernel) and family.params == type(kernel).params and family.description
        if family.name in classes:
            assert type(kernel) is classes[family.name]
    kernel_classes = [c for c in vars(K).values() if isinstance(c, type) and issubclass(c, K.Kernel)]
    for cls in kernel_classes:
        assert not {"family", "description", "default_priors"} & set(vars(cls)), cls.__name__
    gp_sources = (Path(K.__file__).parent).glob("*.py")
    assert not [p.name for p in gp_sources if "import numpyro" in p.read_text()]


def test_every_registered_family_builds_a_kernel_from_its_prior_medians(rng):
    _, _, scales = _scales(rng)
    for name, family in FAMILIES.items():
        priors = family.priors(scales)
        assert tuple(priors) == family.params or set(priors) == set(family.params), name
        kernel = family.build({p: _median(priors[p]) for p in family.params})
        assert isinstance(kernel, K.Kernel), name


def test_kernel_family_resolves_priors_on_the_data_scale(rng):
    X, y, scales = _scales(rng)
    family = kernel_family(
        lambda p: (
            p["scale"] * K.SquaredExponential(p["l0"]).on_dims([0])
            + K.RationalQuadratic(p["l1"], p["rq_variance"], mixture_shape=2.0).on_dims([1])
        ),
        priors={
            "l0": lambda s: lengthscale_prior(s, dims=[0]),
            "scale": variance_prior,
            "l1": lambda s: lengthscale_prior(s, fraction=1.0, dims=[1]),
            "rq_variance": lambda s: variance_prior(s, fraction=0.3, sd=0.5),
            "unused": dist.HalfNormal(1.0),
        },
        name="se-plus-rq",
    )
    assert family.params == ("l0", "scale", "l1", "rq_variance", "unused")
    assert get_family(family) is family
    priors = family.default_priors(scales)
    assert set(priors) == {*family.params, "noise"}
    assert_close(_median(priors["l0"]), 0.2 * np.ptp(X[:, 0]))
    assert_close(_median(priors["l1"]), np.ptp(X[:, 1]))
    assert_close(_median(priors["rq_variance"]), (0.3 * np.std(y)) ** 2)
    assert priors["l0"].event_shape == () and isinstance(priors["unused"], dist.HalfNormal)
    assert lengthscale_prior(scales).event_shape == (2,)
    kernel = family.build({"l0": 2.0, "scale": 3.0, "l1": 0.01, "rq_variance": 1.0, "unused": 1.0})
    expected = 3.0 * K.SquaredExponential(2.0)(X[:, :1]) + K.RationalQuadratic(0.01, 1.0, 2.0)(X[:, 1:])
    assert_close(kernel(X), expected)


BAD_FAMILIES = [
    ("registered-name", dict(name="se"), "name"),
    ("empty-name", dict(name=""), "name"),
    ("reserved-noise", dict(priors={"noise": dist.LogNormal(0.0, 1.0)}), "'noise'"),
    ("not-an-identifier", dict(priors={"a b": dist.LogNormal(0.0, 1.0)}), "'a b'"),
    ("prior-not-a-distribution", dict(priors={"lengthscale": 1.0}), "prior of 'lengthscale'"),
    ("build-not-callable", dict(build="se"), "build"),
]


@pytest.mark.parametrize(
    ("changes", "match"), [c[1:] for c in BAD_FAMILIES], ids=[c[0] for c in BAD_FAMILIES]
)
def test_kernel_family_rejects_bad_arguments(changes, match):
    args = {
        "build": lambda p: K.SquaredExponential(p["lengthscale"]),
        "priors": {"lengthscale": dist.LogNormal(0.0, 1.0)},
        "name": "mine",
        **changes,
    }
    with pytest.raises(ValueError, match=match):
        kernel_family(**args)


def test_a_family_may_not_pose_as_a_registered_one():
    """A fit stores only the family's name: a different family named "se" would be rebuilt as the SE."""
    from dataclasses import replace

    impostor = replace(FAMILIES["se"], build=lambda p: K.Matern32(p["lengthscale"], p["variance"]))
    with pytest.raises(ValueError, match="differs from the registered family"):
        get_family(impostor)
    same = replace(FAMILIES["se"], description="the SE, described anew")
    assert get_family(same) is same


def test_fit_samples_every_hyperparameter_of_a_composite_family():
    """fit("sor", kernel=<kernel_family>) on 2-D inputs: SE on one column × a sampled scale, plus a
    rational quadratic on the other and a fixed white-noise term; every named hyperparameter is a
    posterior variable with positive draws, and the stored predictive moments are finite."""
    rng = np.random.default_rng(3)
    X = np.column_stack([np.linspace(0.0, 5.0, 30), rng.uniform(-1.0, 1.0, 30)])
    y = np.sin(X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.normal(size=30)
    family = kernel_family(
        lambda p: (
            p["scale"] * K.SquaredExponential(p["lengthscale"]).on_dims([0])
            + K.RationalQuadratic(p["rq_lengthscale"], p["rq_variance"], p["mixture_shape"]).on_dims([1])
            + K.WhiteNoise(1e-4)
        ),
        priors={
            "lengthscale": lambda s: lengthscale_prior(s, dims=[0]),
            "scale": variance_prior,
            "rq_lengthscale": lambda s: lengthscale_prior(s, dims=[1]),
            "rq_variance": lambda s: variance_prior(s, fraction=0.3),
            "mixture_shape": dist.LogNormal(0.0, 1.0),
        },
        name="se-plus-rq",
    )
    idata = br.fit(
        "sor",
        X,
        y,
        kernel=family,
        num_inducing=8,
        chains=1,
        draws=50,
        warmup=50,
        progress=False,
        check_diagnostics=False,
        log_likelihood=False,
        posterior_predictive=0,
    )
    post = idata.posterior
    for name in (*family.params, "noise"):
        values = post[name].values
        assert values.shape == (1, 50) and np.all(values > 0) and np.all(np.isfinite(values)), name
    assert post.attrs["bayes_rbfn_kernel"] == "se-plus-rq"
    assert np.all(np.isfinite(idata.predictions["f_mean"].values))
    assert np.all(np.isfinite(idata.predictions["f_var"].values))


# --------------------------------------------------------------------------------------------------
# The one-line descriptions `bayes-rbfn fit --help` lists name the kernel each family builds, term by term

#: How a description names each kernel class (any other by its class name).
SYMBOLS = {
    K.SquaredExponential: "SE",
    K.Matern52: "Matérn52",
    K.Matern32: "Matérn32",
    K.Exponential: "Exponential",
    K.Periodic: "Periodic",
}


def formula(kernel: K.Kernel) -> str:
    """The kernel's structure as descriptions write it: ``SE + Matérn52 + Periodic·SE``."""
    if isinstance(kernel, K.Sum):
        return f"{formula(kernel.k1)} + {formula(kernel.k2)}"
    if isinstance(kernel, K.Product):
        factors = [formula(k) for k in (kernel.k1, kernel.k2)]
        return "·".join(f"({f})" if " + " in f else f for f in factors)
    return SYMBOLS.get(type(kernel), type(kernel).__name__)


COMPOSITE = [
    name for name, fam in FAMILIES.items() if isinstance(fam.build(dict.fromkeys(fam.params, 1.0)), K.Sum)
]


def test_there_is_a_composite_family():
    assert "co2" in COMPOSITE


@pytest.mark.parametrize("name", COMPOSITE)
def test_composite_family_description_names_every_term_it_builds(name):
    family = FAMILIES[name]
    kernel = family.build(dict.fromkeys(family.params, 1.0))
    assert f"({formula(kernel)})" in family.description, (formula(kernel), family.description)


def test_co2_description_has_the_drift_term():
    assert formula(FAMILIES["co2"].build(dict.fromkeys(FAMILIES["co2"].params, 1.0))) == (
        "SE + Matérn52 + SE + Periodic·SE"
    )
    assert "drift" in FAMILIES["co2"].description


#: Data on the co2 family's scales: 40 input units, targets with sd ≈ 8.
CO2_LIKE_X = np.linspace(0.0, 40.0, 9)[:, None]
CO2_LIKE_Y = np.linspace(0.0, 24.0, 9)


@pytest.mark.parametrize(
    ("drift_kernel", "symbol"),
    [(K.Matern52, "Matérn52"), (K.Matern32, "Matérn32"), (K.Exponential, "Exponential")],
    ids=["matern52", "matern32", "matern12"],
)
def test_co2_family_takes_its_drift_term_as_given(drift_kernel, symbol):
    family = co2_family(drift_kernel, drift_lengthscale=3.0, drift_fraction=0.1)
    kernel = family.build(dict.fromkeys(family.params, 1.0))
    assert isinstance(kernel.k1.k1.k2, drift_kernel)
    assert f"(SE + {symbol} + SE + Periodic·SE)" in family.description
    priors = family.priors(data_scales(CO2_LIKE_X, CO2_LIKE_Y))
    y_sd = np.std(CO2_LIKE_Y)
    assert_close(priors["drift_lengthscale"].loc, np.log(3.0), rtol=1e-12)
    assert_close(priors["drift_variance"].loc, 2 * np.log(0.1 * y_sd), rtol=1e-12)


def test_the_registered_co2_drift_is_the_backtested_one():
    """Matérn 5/2 with ℓ_drift ~ LogNormal(log 5, 0.15) and s_drift ~ LogNormal(log(0.08 sd(y)), 0.25)."""
    priors = FAMILIES["co2"].priors(data_scales(CO2_LIKE_X, CO2_LIKE_Y))
    y_sd = np.std(CO2_LIKE_Y)
    assert type(FAMILIES["co2"].build(dict.fromkeys(FAMILIES["co2"].params, 1.0)).k1.k1.k2) is K.Matern52
    assert_close(priors["drift_lengthscale"].loc, np.log(5.0), rtol=1e-12)
    assert_close(priors["drift_lengthscale"].scale, 0.15, rtol=1e-12)
    assert_close(priors["drift_variance"].loc, 2 * np.log(0.08 * y_sd), rtol=1e-12)
    assert_close(priors["drift_variance"].scale, 0.5, rtol=1e-12)
