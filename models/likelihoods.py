"""Observation models of the collection: y_i | f_i, with a link from the latent f to the mean of y.

Every shipped model has a latent function f with a GP (or SoR) prior. With the ``gaussian`` likelihood
f can be marginalised analytically (the SoR, sparse, exact and BLR models); with any other the latent is
sampled in weight space by the RBF network (:func:`bayes_rbfn.models.layers.rbfn`), and y is observed
through one of:

=====================  ===============================================  ===========  ================
``likelihood``         y_i | f_i                                        link         extra parameters
=====================  ===============================================  ===========  ================
``gaussian``           Normal(f_i, σ)                                   identity     ``noise`` σ
``student_t``          StudentT(ν, f_i, σ) (robust to outliers)         identity     ``noise`` σ, ``df`` ν
``laplace``            Laplace(f_i, b) (absolute errors: a median fit)  identity     ``noise`` b
``poisson``            Poisson(exp f_i)                                 log          —
``negative_binomial``  NegativeBinomial2(mean exp f_i, concentration φ)  log          ``concentration`` φ
``bernoulli``          Bernoulli(logits f_i)                            logit        —
=====================  ===============================================  ===========  ================

Default priors of the extra parameters (replace them with ``fit(priors=...)``, pin them with ``fixed=``):

* ``noise`` σ: LogNormal(log(0.2 sd(y)), 1), as for every Gaussian model of the collection (the Laplace
  scale b takes the same prior: its sd is √2 b);
* ``df`` ν: Gamma(2, 0.1) — the prior of Juárez & Steel [1] (mode 10, mean 20): it keeps ν away from
  0 while letting the data choose between heavy tails (ν ≲ 5) and near-normality (ν ≳ 30);
* ``concentration`` φ: LogNormal(log 10, 1.5): Var(y) = μ + μ²/φ, so overdispersion from slight
  (φ ~ 200) to strong (φ ~ 0.5) lies within ±2 sd.

On the link scale the latent f of a count or 0/1 model has no data units: the kernel's amplitude prior is
then that of data of unit spread (``variance`` ~ LogNormal(0, 1), a log-rate or log-odds amplitude of
order one), and the constant mean is the link of the mean of y (log of the mean count, logit of the share
of ones).

References
----------
[1] Juárez, M. A. & Steel, M. F. J. (2010). Model-based clustering of non-Gaussian panel data based on
    skew-t distributions. Journal of Business & Economic Statistics 28, 52–66.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

__all__ = ["LIKELIHOODS", "Likelihood", "get_likelihood", "noise_prior"]


@dataclass(frozen=True)
class Likelihood:
    """An observation model y_i | f_i.

    Attributes:
        name: the value of ``fit(likelihood=...)`` and ``--likelihood``.
        params: the extra parameters it samples (``noise``, ``df``, ``concentration``), in order.
        link: ``"identity"``, ``"log"`` or ``"logit"``.
        observe: (f (N,), {param: value}) → a NumPyro distribution with batch shape (N,).
        default_priors: y_sd → {param: prior} for ``params``.
        description: one line for ``--help``.
        simulation_priors: {param: prior} for ``params`` under simulation-based calibration
            (:mod:`bayes_rbfn.workflows.sbc`: a latent of unit scale on inputs in [0, 1]).
        simulation_offset: the latent's constant prior mean there (the link of a typical mean of y).
    """

    name: str
    params: tuple[str, ...]
    link: str
    observe: Callable[[jax.Array, Mapping[str, Any]], dist.Distribution]
    default_priors: Callable[[float], dict[str, dist.Distribution]]
    description: str
    simulation_priors: Mapping[str, dist.Distribution] = field(default_factory=dict, compare=False)
    simulation_offset: float = 0.0

    @property
    def marginalisable(self) -> bool:
        """Whether the latent f can be integrated out analytically (Gaussian noise)."""
        return self.name == "gaussian"

    def inverse_link(self, f: Any) -> Any:
        """The mean of y given the latent f: f, exp f or the logistic of f (NumPy or JAX arrays)."""
        xp = jnp if isinstance(f, jax.Array) else np
        if self.link == "log":
            return xp.exp(f)
        if self.link == "logit":
            return 1.0 / (1.0 + xp.exp(-f))
        return f

    def constant_mean(self, y: np.ndarray) -> float:
        """The constant prior mean of f for these data: the link of the mean of y."""
        m = float(np.mean(y))
        if self.link == "log":
            return float(np.log(max(m, 0.5 / y.size)))
        if self.link == "logit":
            p = min(max(m, 0.5 / y.size), 1.0 - 0.5 / y.size)
            return float(np.log(p / (1.0 - p)))
        return m

    def check(self, y: np.ndarray) -> None:
        """Raise ``ValueError`` naming ``likelihood`` and the first offending rows when y cannot be data."""
        y = np.asarray(y, dtype=float)
        if self.link == "log":
            bad = np.flatnonzero((y < 0) | (y != np.round(y)))
            what = "counts (whole numbers ≥ 0)"
        elif self.link == "logit":
            bad = np.flatnonzero((y != 0) & (y != 1))
            what = "labels 0 or 1"
        else:
            return
        if bad.size:
            rows = ", ".join(str(i) for i in bad[:5]) + (", …" if bad.size > 5 else "")
            values = ", ".join(f"{y[i]:g}" for i in bad[:5])
            raise ValueError(
                f"likelihood: {self.name!r} needs y to be {what}; {bad.size} value(s) are not, "
                f"first at rows {rows} (0-based): {values}"
            )


def noise_prior(y_sd: float) -> dist.Distribution:
    """The noise σ's default prior, LogNormal(log(0.2 sd(y)), 1).

    For every Gaussian model of the collection and the Gaussian and Student-t likelihoods.
    """
    return dist.LogNormal(float(np.log(0.2 * y_sd)), 1.0)


#: The noise σ's prior under simulation-based calibration: about 30 % of the latent's unit scale.
_SIMULATION_NOISE = dist.LogNormal(math.log(0.3), 0.4)

LIKELIHOODS: dict[str, Likelihood] = {
    lik.name: lik
    for lik in (
        Likelihood(
            name="gaussian",
            params=("noise",),
            link="identity",
            observe=lambda f, p: dist.Normal(f, p["noise"]),
            default_priors=lambda y_sd: {"noise": noise_prior(y_sd)},
            description="y ~ Normal(f, σ) (default; the weights can be marginalised)",
            simulation_priors={"noise": _SIMULATION_NOISE},
        ),
        Likelihood(
            name="student_t",
            params=("noise", "df"),
            link="identity",
            observe=lambda f, p: dist.StudentT(p["df"], f, p["noise"]),
            default_priors=lambda y_sd: {"noise": noise_prior(y_sd), "df": dist.Gamma(2.0, 0.1)},
            description="y ~ StudentT(ν, f, σ), robust to outliers; ν ~ Gamma(2, 0.1) or fixed",
            simulation_priors={"noise": _SIMULATION_NOISE, "df": dist.LogNormal(math.log(5.0), 0.4)},
        ),
        Likelihood(
            name="laplace",
            params=("noise",),
            link="identity",
            observe=lambda f, p: dist.Laplace(f, p["noise"]),
            default_priors=lambda y_sd: {"noise": noise_prior(y_sd)},
            description="y ~ Laplace(f, b), absolute-error noise robust to outliers; b is the noise",
            simulation_priors={"noise": _SIMULATION_NOISE},
        ),
        Likelihood(
            name="poisson",
            params=(),
            link="log",
            observe=lambda f, p: dist.Poisson(jnp.exp(f)),
            default_priors=lambda y_sd: {},
            description="counts: y ~ Poisson(exp f)",
            simulation_offset=math.log(2.0),  # a rate of 2
        ),
        Likelihood(
            name="negative_binomial",
            params=("concentration",),
            link="log",
            observe=lambda f, p: dist.NegativeBinomial2(jnp.exp(f), p["concentration"]),
            default_priors=lambda y_sd: {"concentration": dist.LogNormal(float(np.log(10.0)), 1.5)},
            description="overdispersed counts: y ~ NegativeBinomial(mean exp f, concentration φ)",
            simulation_priors={"concentration": dist.LogNormal(math.log(5.0), 0.5)},
            simulation_offset=math.log(2.0),
        ),
        Likelihood(
            name="bernoulli",
            params=(),
            link="logit",
            observe=lambda f, p: dist.Bernoulli(logits=f),
            default_priors=lambda y_sd: {},
            description="0/1 labels: y ~ Bernoulli(logistic f)",
        ),
    )
}


def get_likelihood(likelihood: str | Likelihood) -> Likelihood:
    """Resolve a likelihood name; unknown names raise ``ValueError`` listing the valid ones."""
    if isinstance(likelihood, Likelihood):
        return likelihood
    if isinstance(likelihood, str) and likelihood in LIKELIHOODS:
        return LIKELIHOODS[likelihood]
    raise ValueError(f"likelihood: unknown likelihood {likelihood!r}; choose one of {', '.join(LIKELIHOODS)}")
