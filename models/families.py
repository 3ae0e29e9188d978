"""Kernel families: named hyperparameters → kernel, with weakly-informative default priors.

A :class:`KernelFamily` is what ``bayes_rbfn.fit(..., kernel=...)`` samples: the registered ones by name
(:data:`FAMILIES`, also the CLI's ``--kernel`` choices), or one of your own. The simplest way to define
one is :func:`kernel_family`: a function building the kernel from a dict of hyperparameter values, and a
prior for each (a NumPyro distribution, or a function of the data's :class:`DataScales` returning one, such
as :func:`lengthscale_prior` and :func:`variance_prior`)::

    import bayes_rbfn
    from bayes_rbfn.gp.kernels import RationalQuadratic, SquaredExponential
    from bayes_rbfn.models.families import kernel_family, lengthscale_prior, variance_prior

    family = kernel_family(
        lambda p: p["scale"] * SquaredExponential(p["lengthscale"]).on_dims([0])
        + RationalQuadratic(p["rq_lengthscale"], p["rq_variance"], mixture_shape=2.0).on_dims([1]),
        priors={
            "lengthscale": lambda s: lengthscale_prior(s, dims=[0]),
            "scale": variance_prior,
            "rq_lengthscale": lambda s: lengthscale_prior(s, dims=[1]),
            "rq_variance": lambda s: variance_prior(s, fraction=0.3),
        },
        name="se-plus-rq",
    )
    idata = bayes_rbfn.fit("sor", X, y, kernel=family)

Every name in ``priors`` becomes a sampled site of the model (the noise σ is added by the model, with
its own default prior) and a variable of ``idata.posterior``; ``fit(priors=...)`` replaces any of them
and ``fit(fixed=...)`` pins them.

A family names the hyperparameters NUTS samples (besides the noise σ), builds the kernel from a dict of
their values, and proposes default priors that adapt to the scale of the data, so that the same model
code fits inputs in seconds or in years and outputs in ppm or in births per woman. Everything here is in
the units of the data: nothing is rescaled, so stored draws can be used as they are.

Default priors (replace any of them with ``priors=``): each family of :data:`CLASS_FAMILIES` names its
kernel class and its priors (the stationary lengthscale and variance rules are those of
:mod:`bayes_rbfn.models.priors`), and the noise σ's is :func:`~bayes_rbfn.models.likelihoods.noise_prior`.
A kernel family is a kernel class in :mod:`bayes_rbfn.gp.kernels`, which carries no priors and no help
text, and its entry in :data:`CLASS_FAMILIES`.

The ``co2`` family is the classic trend-plus-seasonality kernel of Rasmussen & Williams (2006, §5.4.3),
with the period fixed at one unit of the input (a year when X is in years), and a drift term for forecasting:

    k = s² SE(ℓ) + s_drift² Matérn52(ℓ_drift) + s_med² SE(ℓ_med)
      + s_seas² Periodic(ℓ_per, p = 1) · SE(ℓ_decay).

The medium-term component (R&W use a rational quadratic) takes the year-to-year irregularities; without
it the data pull the trend's lengthscale down to ~1.5 years (even under a tight prior), and the forecast
past the end of the data falls back to the mean within a few years. Its priors keep the two SE
components apart (trend: around the span of the record; medium term: around one input unit), so they
cannot swap roles between chains.

The drift term lets the growth rate wander over several years (El Niño years, the slowdown after Pinatubo):
its predictive variance past the data grows with the horizon, where the smooth SE trend's stays nearly
flat. The weekly data hardly constrain it (their likelihood prefers a 1.5-year drift that duplicates the
medium term), so its prior is informative, and was chosen by backtest on the packaged record
(docs/cli.md, the main job's backtests): ℓ_drift ~ LogNormal(log 5, 0.15) input units, s_drift ~ 8% of
sd(y) (log-sd 0.25). Without it, the 95% band of a five-year forecast covered 22–38% of the held-out weeks.

References
----------
[1] Rasmussen, C. E. & Williams, C. K. I. (2006). *Gaussian Processes for Machine Learning*, §4.2, §5.4.3.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpyro.distributions as dist

from bayes_rbfn.gp import kernels as K
from bayes_rbfn.models.likelihoods import noise_prior
from bayes_rbfn.models.priors import DataScales, data_scales, lengthscale_prior, variance_prior

__all__ = [
    "CLASS_FAMILIES",
    "CO2_DRIFT",
    "FAMILIES",
    "DataScales",
    "KernelFamily",
    "class_family",
    "co2_family",
    "data_scales",
    "fixed_family",
    "get_family",
    "kernel_family",
    "lengthscale_prior",
    "stationary_priors",
    "variance_prior",
]


@dataclass(frozen=True)
class KernelFamily:
    """A named kernel family: the kernel hyperparameters NUTS samples, how they make a kernel, their priors.

    Pass one as ``bayes_rbfn.fit(..., kernel=family)``; :func:`kernel_family` builds one from a dict of
    priors. ``build`` must be traceable (JAX operations on the values, no ``float()``), since the values
    are NUTS's traced samples; it is called once per log-density evaluation.

    Attributes:
        name: family name used by ``fit(kernel=...)`` and the CLI, stored with a fit's results.
        params: names of the sampled kernel hyperparameters (the noise is handled by the models).
        build: function of a dict {param: value} → :class:`~bayes_rbfn.gp.kernels.Kernel`.
        priors: function of :class:`DataScales` → dict {param: numpyro distribution} (without noise).
        description: one line for ``--help``.
        fixed_kernel: the kernel of a family with nothing to sample (:func:`fixed_family`), else None.
    """

    name: str
    params: tuple[str, ...]
    build: Callable[[Mapping[str, Any]], K.Kernel]
    priors: Callable[[DataScales], dict[str, dist.Distribution]]
    description: str = ""
    fixed_kernel: K.Kernel | None = field(default=None, compare=False)

    def default_priors(self, scales: DataScales) -> dict[str, dist.Distribution]:
        """Default priors for the kernel hyperparameters and the noise."""
        priors = self.priors(scales)
        priors["noise"] = noise_prior(scales.y_sd)
        return priors


def stationary_priors(scales: DataScales) -> dict[str, dist.Distribution]:
    """``lengthscale`` (ARD when D > 1) and ``variance`` on the data's scale (:mod:`.priors`)."""
    return {"lengthscale": lengthscale_prior(scales), "variance": variance_prior(scales)}


def _rational_quadratic_priors(scales: DataScales) -> dict[str, dist.Distribution]:
    """The stationary priors, and ``mixture_shape`` ~ LogNormal(0, 1)."""
    return {**stationary_priors(scales), "mixture_shape": dist.LogNormal(0.0, 1.0)}


def _periodic_priors(scales: DataScales) -> dict[str, dist.Distribution]:
    """``lengthscale`` ~ LogNormal(0, 1), ``variance`` on the data's scale, ``period`` ~ LogNormal.

    The lengthscale is relative to the period (the sine's argument has no units); the period's prior is
    LogNormal(log(range / 4), 1).
    """
    return {
        "lengthscale": dist.LogNormal(0.0, 1.0),
        "variance": variance_prior(scales),
        "period": dist.LogNormal(float(np.log(np.mean(scales.input_range) / 4)), 1.0),
    }


def class_family(
    name: str,
    cls: type[K.Kernel],
    priors: Callable[[DataScales], dict[str, dist.Distribution]] = stationary_priors,
    description: str = "",
) -> KernelFamily:
    """The family of one kernel class: its ``params`` sampled under ``priors``.

    Args:
        name: the family's name (``fit(kernel=name)``, ``--kernel name``).
        cls: a :class:`~bayes_rbfn.gp.kernels.Kernel` subclass whose constructor takes its ``params`` by
            name.
        priors: :class:`DataScales` → {param: prior}, one per name of ``cls.params``.
        description: one line for ``--help``.

    Returns:
        The :class:`KernelFamily` named ``name``.
    """
    return KernelFamily(
        name=name,
        params=cls.params,
        build=lambda p: cls(**{param: p[param] for param in cls.params}),
        priors=priors,
        description=description,
    )


#: The kernel classes that are families of the collection, in the order ``--help`` lists them.
CLASS_FAMILIES: tuple[KernelFamily, ...] = (
    class_family(
        "se", K.SquaredExponential, description="squared exponential (RBF), ARD lengthscales when D > 1"
    ),
    class_family("exponential", K.Exponential, description="exponential (Matérn 1/2)"),
    class_family("matern32", K.Matern32, description="Matérn 3/2, ARD lengthscales when D > 1"),
    class_family("matern52", K.Matern52, description="Matérn 5/2, ARD lengthscales when D > 1"),
    class_family(
        "rq",
        K.RationalQuadratic,
        _rational_quadratic_priors,
        "rational quadratic (a mixture of SE lengthscales) with a sampled mixture shape",
    ),
    class_family(
        "imq",
        K.InverseMultiquadric,
        description="inverse multiquadric 1/√(1 + r²) (heavy-tailed correlations), ARD when D > 1",
    ),
    class_family("periodic", K.Periodic, _periodic_priors, "periodic (MacKay) with a sampled period"),
)


#: The drift term of the ``co2`` family: its kernel, the median of ℓ_drift (input units) and of s_drift as a
#: fraction of sd(y) (see the module docstring: chosen by backtest).
CO2_DRIFT = (K.Matern52, 5.0, 0.08)


def co2_family(
    drift_kernel: type[K.Stationary] = CO2_DRIFT[0],
    drift_lengthscale: float = CO2_DRIFT[1],
    drift_fraction: float = CO2_DRIFT[2],
) -> KernelFamily:
    """The ``co2`` family (the module docstring's kernel), with its drift term as given.

    Args:
        drift_kernel: the drift term's stationary kernel class (default Matérn 5/2).
        drift_lengthscale: the median of ℓ_drift ~ LogNormal(log ℓ, 0.15), in input units.
        drift_fraction: the median of s_drift as a fraction of sd(y) (log-sd 0.25).

    Returns:
        The :class:`KernelFamily` named ``"co2"``; :data:`FAMILIES` holds the one of the defaults.
    """

    def build(p: Mapping[str, Any]) -> K.Kernel:
        trend = K.SquaredExponential(lengthscale=p["lengthscale"], variance=p["variance"])
        drift = drift_kernel(lengthscale=p["drift_lengthscale"], variance=p["drift_variance"])
        medium = K.SquaredExponential(lengthscale=p["medium_lengthscale"], variance=p["medium_variance"])
        seasonal = K.Periodic(
            lengthscale=p["seasonal_lengthscale"], variance=p["seasonal_variance"], period=1.0
        )
        decay = K.SquaredExponential(lengthscale=p["seasonal_decay"], variance=1.0)
        return trend + drift + medium + seasonal * decay

    def priors(s: DataScales) -> dict[str, dist.Distribution]:
        span = float(np.mean(s.input_range))
        return {
            # the trend varies over the whole record (median: the span; 95%: ~0.4 to ~2.7 spans)
            "lengthscale": dist.LogNormal(float(np.log(span)), 0.5),
            "variance": dist.LogNormal(float(np.log(s.y_sd**2)), 1.5),
            # the drift of the growth rate over several input units
            "drift_lengthscale": dist.LogNormal(float(np.log(drift_lengthscale)), 0.15),
            "drift_variance": dist.LogNormal(float(np.log((drift_fraction * s.y_sd) ** 2)), 0.5),
            # medium-term irregularities over about one input unit (a year), a few % of the spread of y
            "medium_lengthscale": dist.LogNormal(0.0, 0.5),
            "medium_variance": dist.LogNormal(float(np.log((0.05 * s.y_sd) ** 2)), 1.5),
            # the seasonal amplitude is a small part of the total spread
            "seasonal_variance": dist.LogNormal(float(np.log((0.1 * s.y_sd) ** 2)), 1.5),
            "seasonal_lengthscale": dist.LogNormal(0.0, 0.5),
            "seasonal_decay": dist.LogNormal(float(np.log(span)), 0.75),
        }

    drift_name = drift_kernel.__name__.replace("Matern", "Matérn")
    return KernelFamily(
        name="co2",
        params=(
            "lengthscale",
            "variance",
            "drift_lengthscale",
            "drift_variance",
            "medium_lengthscale",
            "medium_variance",
            "seasonal_variance",
            "seasonal_lengthscale",
            "seasonal_decay",
        ),
        build=build,
        priors=priors,
        description=(
            f"long trend + drift + medium term + yearly seasonality (SE + {drift_name} + SE + Periodic·SE), "
            "X in years"
        ),
    )


FAMILIES: dict[str, KernelFamily] = {
    **{family.name: family for family in CLASS_FAMILIES},
    "co2": co2_family(),
}


def fixed_family(kernel: K.Kernel) -> KernelFamily:
    """A family with no sampled kernel hyperparameters: the given kernel is used as it is."""
    return KernelFamily(
        name=type(kernel).__name__,
        params=(),
        build=lambda p: kernel,
        priors=lambda s: {},
        description="fixed kernel",
        fixed_kernel=kernel,
    )


#: Names a family's hyperparameter may not take: sites that the models sample or observe themselves.
_RESERVED = frozenset({"noise", "y", "f"})


def kernel_family(
    build: Callable[[Mapping[str, Any]], K.Kernel],
    priors: Mapping[str, dist.Distribution | Callable[[DataScales], dist.Distribution]],
    name: str = "custom",
    description: str = "",
) -> KernelFamily:
    """A kernel family from a build function and one prior per sampled hyperparameter.

    Args:
        build: function of a dict {name: value} (one entry per key of ``priors``) returning a
            :class:`~bayes_rbfn.gp.kernels.Kernel`; traceable (see :class:`KernelFamily`).
        priors: {name: prior}, in the order the hyperparameters are sampled. A prior is a NumPyro
            distribution, or a function of the data's :class:`DataScales` returning one (e.g.
            :func:`lengthscale_prior`, :func:`variance_prior`), so that it follows the units of the data.
        name: the family's name, stored with a fit's results; not one of :data:`FAMILIES`.
        description: one line describing the family.

    Returns:
        A :class:`KernelFamily` for ``bayes_rbfn.fit(..., kernel=...)``.

    Raises:
        ValueError: a prior that is neither, a reserved or non-identifier name, or a registered name.
    """
    if not callable(build):
        raise ValueError(f"kernel_family: build must be a function of the hyperparameters, got {build!r}")
    if not isinstance(name, str) or not name or name in FAMILIES:
        raise ValueError(
            f"kernel_family: name must be a new non-empty string (not one of {', '.join(FAMILIES)}), "
            f"got {name!r}"
        )
    priors = dict(priors)
    for param, prior in priors.items():
        if not (isinstance(param, str) and param.isidentifier()) or param in _RESERVED:
            raise ValueError(
                f"kernel_family: {param!r} cannot name a hyperparameter (a Python identifier other than "
                f"{', '.join(sorted(_RESERVED))})"
            )
        # A numpyro Distribution is callable too (it samples); test for it first.
        if not (isinstance(prior, dist.Distribution) or callable(prior)):
            raise ValueError(
                f"kernel_family: the prior of {param!r} must be a numpyro distribution or a function of "
                f"DataScales returning one, got {prior!r}"
            )

    def resolve(scales: DataScales) -> dict[str, dist.Distribution]:
        return {
            param: prior if isinstance(prior, dist.Distribution) else prior(scales)
            for param, prior in priors.items()
        }

    return KernelFamily(
        name=name,
        params=tuple(priors),
        build=build,
        priors=resolve,
        description=description or "user-defined kernel family",
    )


def get_family(kernel: str | K.Kernel | KernelFamily) -> KernelFamily:
    """Resolve a family name, a kernel object (fixed hyperparameters) or a family.

    A family named like a registered one must be that family (the same ``build`` and ``params``): a fit
    stores only the name, and its results are rebuilt with the registered family.
    """
    if isinstance(kernel, KernelFamily):
        registered = FAMILIES.get(kernel.name)
        if registered is not None and (
            kernel.build is not registered.build or kernel.params != registered.params
        ):
            raise ValueError(
                f"kernel: a KernelFamily named {kernel.name!r} differs from the registered family of that "
                "name; give it another name"
            )
        return kernel
    if isinstance(kernel, K.Kernel):
        return fixed_family(kernel)
    if isinstance(kernel, str) and kernel in FAMILIES:
        return FAMILIES[kernel]
    raise ValueError(
        f"kernel: unknown kernel {kernel!r}; choose one of {', '.join(FAMILIES)} or pass a Kernel"
    )
