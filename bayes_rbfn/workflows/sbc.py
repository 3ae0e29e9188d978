"""Simulation-based calibration (SBC) of the models that ``fit`` runs, or of any NumPyro model.

For r = 1..R: draw the parameters θ_r and data y_r from the model's prior predictive (NumPyro's
``Predictive``), fit the same model to y_r with NUTS, and record the rank of every true quantity among the
L thinned posterior draws of that quantity. If the sampler and the density are right, every rank is
uniform on {0, …, L} (Talts et al. 2018, Theorem 1). Uniformity is checked by a Pearson χ² test on binned
ranks (:func:`chi2_uniformity`), with a Bonferroni verdict over the quantities, and graphically by the
ECDF-difference plot with simultaneous 95% bands of Säilynoja, Bürkner & Vehtari (2022)
(:func:`plot_ecdf`, bands by :func:`ecdf_band`).

**One implementation of each model.** The simulator and the fitted density are the very model function
that :func:`bayes_rbfn.fit` samples (:func:`bayes_rbfn.models.get_model`): its priors, its observed site
``y`` (``SparseGP``, ``ExactGP``, the RBFN layer under a likelihood, or the model's own marginal), nothing
written a second time here. The only SBC-specific choice is the prior: SBC needs one that does not look
at the data (the package's default priors are scaled to the data), so the shipped models run under the
fixed priors (:func:`simulation_priors`) on a fixed design (inputs on a grid of [0, 1], inducing inputs
a grid of [0.05, 0.95]). Any other NumPyro model with an observed site can be calibrated the same way
(:func:`run_sbc` with a callable).

**Ranked quantities.** Every scalar component of every latent sample site (constrained values; ranks are
invariant under monotone maps, so these are also the ranks of log ℓ etc.), and the log-likelihood of the
simulated data at θ, log p(y_r | θ) — a data-dependent test quantity that is sensitive to errors the
parameters' marginals can miss (Modrák et al. 2023).

Which models it applies to: ``sor``, ``dtc`` and ``asor`` share one density (DTC and ASoR differ from SoR
only at prediction; ``asor`` *is* the ``sor`` model function), ``fitc``, ``exact``, ``blr``, ``grouped``,
and ``rbfn`` under every likelihood. ``vfe`` is not a generative model — its fitted "density" is Titsias's
bound and its simulator DTC's marginal, so its pseudo-posterior is not the posterior of what it simulates
and SBC is not expected to be uniform for it (``bayes_rbfn.models.sparse_models``).

**Deliberate misspecification.** ``noise_scale = k > 1`` simulates data with noise k·σ — the simulated y
get independent N(0, (k² − 1)σ²) noise added, so y = f + kσε exactly for a Gaussian likelihood — while the
fit keeps σ: the posterior of σ is pushed up against the truth and SBC must reject.

All R fits run in one ``jit`` — no Python loop of MCMC runs — each one chain of the package's one NUTS
loop (:func:`bayes_rbfn.infer.sampler.chain_init` and :func:`~bayes_rbfn.infer.sampler.chain_advance`, with
y as the model's argument). On a CPU the replications run one after the other (``lax.map``); on an
accelerator every step of the loop advances all of them at once (the transition ``jax.vmap``-ed inside the
loop's scan), where each NUTS step costs as much as the longest trajectory among the replications
(``chain_method`` of :func:`run_sbc`).

References
----------
[1] Talts, S., Betancourt, M., Simpson, D., Vehtari, A. & Gelman, A. (2018). Validating Bayesian inference
    algorithms with simulation-based calibration. arXiv:1804.06788.
[2] Säilynoja, T., Bürkner, P.-C. & Vehtari, A. (2022). Graphical test for discrete uniformity and its
    applications in goodness-of-fit evaluation and multiple sample comparison. Statistics and Computing
    32, 32.
[3] Modrák, M., Moon, A. H., Kim, S., Bürkner, P., Huurre, N., Faltejsková, K., Gelman, A. & Vehtari, A.
    (2023). Simulation-based calibration checking for Bayesian computation: the choice of test quantities
    shapes sensitivity. Bayesian Analysis.
"""

from __future__ import annotations

import csv
import functools
import io
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import scipy.stats
from numpyro import handlers
from numpyro.infer import Predictive

from bayes_rbfn.defaults import MAX_TREE_DEPTH
from bayes_rbfn.gp.validation import check_positive_int
from bayes_rbfn.infer.sampler import chain_advance, chain_init, one_device_method
from bayes_rbfn.models import blr, model_specs
from bayes_rbfn.models.families import DataScales

__all__ = [
    "LIKELIHOODS",
    "MODELS",
    "PRIORS",
    "SBCResult",
    "chi2_uniformity",
    "ecdf_band",
    "plot_ecdf",
    "quantity_names",
    "run_sbc",
    "simulation_priors",
    "statistics",
    "write_sbc",
]

#: The shipped models SBC runs: every generative model of the collection (``vfe`` is not; see the module
#: docstring), in the collection's order.
MODELS = tuple(name for name, spec in model_specs().items() if spec.generative)
#: The likelihoods of the ``rbfn`` model (the other models take ``gaussian`` only).
LIKELIHOODS = model_specs()["rbfn"].likelihoods

#: Fixed priors of the kernel hyperparameters under SBC (inputs on [0, 1], a latent of unit scale), and of
#: blr's; a likelihood's own parameters take its ``simulation_priors``. The grouped model takes the
#: lengthscale, variance and noise priors as its population locations' priors.
PRIORS: dict[str, dist.Distribution] = {
    "lengthscale": dist.LogNormal(math.log(0.3), 0.4),
    "variance": dist.LogNormal(0.0, 0.5),
    # blr: the model's own default priors for one input and data of unit sd (signal variance ≈ 1, noise
    # σ ≈ 0.2)
    **blr.FAMILY.priors(DataScales(input_range=np.ones(1), y_sd=1.0, input_dim=1)),
}
#: Name of the log-likelihood test quantity.
LOGLIK = "log_lik"


@dataclass(frozen=True)
class SBCResult:
    """The outcome of :func:`run_sbc`.

    Attributes:
        ranks: (R, Q) integer ranks in {0, …, num_ranks − 1}, one column per quantity.
        params: the Q quantity names (:func:`quantity_names`), in column order.
        num_ranks: L + 1, with L the number of thinned posterior draws per replication.
        chi2, pvalues: χ² statistic and p-value per quantity name (:func:`chi2_uniformity`).
        bins: number of χ² bins (``bins − 1`` degrees of freedom).
        divergences: total number of divergent NUTS transitions after warmup, over all replications.
        model: the model name. noise_scale: the fitted/simulated noise ratio (1: well specified).
        settings: every argument of :func:`run_sbc` (JSON-serialisable).
        seconds: wall time of the fits, compilation included.
    """

    ranks: np.ndarray
    params: tuple[str, ...]
    num_ranks: int
    chi2: dict[str, float]
    pvalues: dict[str, float]
    bins: int
    divergences: int
    model: str
    noise_scale: float
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: float = float("nan")

    @property
    def min_pvalue(self) -> float:
        """The smallest p-value over the quantities."""
        return min(self.pvalues.values())


def chi2_uniformity(ranks: np.ndarray, num_ranks: int, bins: int) -> tuple[float, float]:
    """Pearson χ² test of ranks uniform on {0, …, num_ranks−1}, pooled into ``bins`` contiguous bins.

    Bin expectations are exact for the discrete uniform (unequal bins when ``bins`` ∤ ``num_ranks``).

    Args:
        ranks: (R,) integer ranks.
        num_ranks: number of possible rank values.
        bins: number of bins.

    Returns:
        (statistic, p-value) with ``bins − 1`` degrees of freedom.
    """
    ranks = np.asarray(ranks)
    edges = np.linspace(0, num_ranks, bins + 1).round().astype(int)
    pairs = itertools.pairwise(edges)
    counts = np.array([np.sum((ranks >= a) & (ranks < b)) for a, b in pairs])
    expected = len(ranks) * np.diff(edges) / num_ranks
    stat = float(np.sum((counts - expected) ** 2 / expected))
    return stat, float(scipy.stats.chi2.sf(stat, bins - 1))


# --------------------------------------------------------------------------------------------------
# The shipped models, bound to the SBC design


def simulation_priors(model: str, likelihood: str = "gaussian") -> dict[str, dist.Distribution]:
    """The fixed priors SBC simulates a shipped model under.

    :data:`PRIORS` for the kernel (or blr's) hyperparameters, the likelihood's ``simulation_priors`` for its
    own parameters.
    """
    from bayes_rbfn.models import get_model
    from bayes_rbfn.models.families import get_family
    from bayes_rbfn.models.likelihoods import get_likelihood

    spec = get_model(model)
    family = spec.family if spec.family is not None else get_family("se")
    priors = {k: PRIORS[k] for k in family.params}
    if spec.family is None:
        priors.update(get_likelihood(likelihood).simulation_priors)
    return priors


@functools.cache
def _shipped(model: str, likelihood: str, n: int, num_inducing: int, num_groups: int) -> tuple[Callable, Any]:
    """model_fn(y): the model :func:`bayes_rbfn.fit` runs, on the fixed SBC design."""
    from bayes_rbfn.models import ModelConfig, get_model
    from bayes_rbfn.models.families import get_family
    from bayes_rbfn.models.likelihoods import get_likelihood

    spec = get_model(model)
    lik = get_likelihood(likelihood)
    spec.check_likelihood(lik.name)
    family = spec.family if spec.family is not None else get_family("se")
    config = ModelConfig(family=family, priors=simulation_priors(model, likelihood), likelihood=lik)
    dtype = jnp.zeros(()).dtype
    X = np.linspace(0.0, 1.0, n)[:, None]
    Z = np.linspace(0.05, 0.95, num_inducing)[:, None]
    offset = lik.simulation_offset
    codes = np.repeat(np.arange(num_groups), n) if spec.grouped else None
    X_all = jnp.asarray(np.tile(X, (num_groups, 1)) if spec.grouped else X, dtype)
    data, _ = spec.prepare(
        X_all,
        jnp.zeros(X_all.shape[0], dtype),
        jnp.asarray(Z, dtype) if spec.uses_inducing else None,
        y_offset=0.0 if spec.grouped else offset,
        constant_mean=False,
        group=codes,
        group_pred=codes,
    )
    data = {k: v for k, v in data.items() if k != "y"}

    def model_fn(y):
        spec.model({**data, "y": y}, config)

    model_fn.__name__ = model if lik.name == "gaussian" else f"{model}-{lik.name}"
    return model_fn


def _user(model: Callable, model_args: tuple, model_kwargs: Mapping[str, Any], observed: str) -> Callable:
    def model_fn(y):
        model(*model_args, **{**model_kwargs, observed: y})

    model_fn.__name__ = getattr(model, "__name__", "model")
    return model_fn


def _latent_sites(model_fn: Callable, observed: str) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """({name: shape} of the latent sample sites in the order the model samples them, every site name)."""
    try:
        trace = handlers.trace(handlers.seed(model_fn, 0)).get_trace(None)
    except TypeError as err:
        raise ValueError(f"observed: calling the model with {observed}=None failed ({err})") from err
    if observed not in trace or trace[observed]["type"] != "sample":
        raise ValueError(f"observed: the model has no sample site {observed!r}")
    latent = {
        name: tuple(site["value"].shape)
        for name, site in trace.items()
        if site["type"] == "sample" and not site["is_observed"] and name != observed
    }
    return latent, set(trace)


def _names(sites: Mapping[str, tuple[int, ...]]) -> tuple[str, ...]:
    names = []
    for name, shape in sites.items():
        if not shape:
            names.append(name)
        else:
            names += [f"{name}[{','.join(map(str, i))}]" for i in np.ndindex(*shape)]
    return (*names, LOGLIK)


def quantity_names(
    model: str | Callable = "sor",
    num_groups: int = 3,
    *,
    likelihood: str = "gaussian",
    n: int = 20,
    num_inducing: int = 5,
    model_args: tuple = (),
    model_kwargs: Mapping[str, Any] | None = None,
    observed: str = "y",
) -> tuple[str, ...]:
    """Names of the ranked quantities, in the column order of :attr:`SBCResult.ranks`.

    Every scalar component of every latent sample site (``name`` or ``name[i]``), then ``log_lik``.
    """
    model_fn, observed = _resolve(
        model, likelihood, n, num_inducing, num_groups, model_args, model_kwargs, observed
    )
    return _names(_latent_sites(model_fn, observed)[0])


def _resolve(model, likelihood, n, num_inducing, num_groups, model_args, model_kwargs, observed):
    if callable(model):
        return _user(model, tuple(model_args), dict(model_kwargs or {}), observed), observed
    if model not in MODELS:
        raise ValueError(f"model: expected one of {', '.join(MODELS)} or a NumPyro model; got {model!r}")
    return _shipped(model, likelihood, n, num_inducing, num_groups), "y"


# --------------------------------------------------------------------------------------------------
# The fits: every replication in one compiled program


def _flatten(values: Mapping[str, Any], sites: Mapping[str, tuple[int, ...]]) -> jax.Array:
    """One draw's latent values as a vector in the order of :func:`_names` (without log_lik)."""
    return jnp.concatenate([jnp.ravel(jnp.asarray(values[name], dtype=float)) for name in sites])


def _log_lik(model_fn: Callable, observed: str, values: Mapping[str, Any], y: Any) -> jax.Array:
    """log p(y | θ) of the observed site, summed over its elements."""
    trace = handlers.trace(handlers.substitute(model_fn, data=dict(values))).get_trace(y)
    site = trace[observed]
    return jnp.sum(site["fn"].log_prob(site["value"]))


@partial(
    jax.jit,
    static_argnames=(
        "model_fn",
        "observed",
        "warmup",
        "draws",
        "thin",
        "target_accept",
        "max_tree_depth",
        "names",
        "vectorized",
    ),
)
def _run(
    keys: jax.Array,
    truth: dict,
    y_sim: jax.Array,
    model_fn: Callable,
    observed: str,
    names: tuple[str, ...],
    warmup: int,
    draws: int,
    thin: int,
    target_accept: float,
    max_tree_depth: int,
    vectorized: bool,
) -> tuple[jax.Array, jax.Array]:
    """All replications in one program: ranks (R, Q) and divergences (R,).

    Each replication is one chain of the package's NUTS loop (:func:`bayes_rbfn.infer.sampler.chain_init`
    and :func:`~bayes_rbfn.infer.sampler.chain_advance`, the very steps ``fit`` runs) on its own simulated
    data. ``vectorized``: the initialisations are vmapped, and each step of the loop advances every
    replication at once; else the replications run one after the other (``lax.map``), each its own chain.
    Replication r gets the same key either way.
    """
    from numpyro.infer import NUTS, init_to_median

    sites = dict(zip(names[::2], names[1::2], strict=True))  # name → shape, passed hashable
    kernel = NUTS(
        model_fn,
        target_accept_prob=target_accept,
        max_tree_depth=max_tree_depth,
        init_strategy=init_to_median(num_samples=15),
    )
    init = chain_init(kernel, warmup)

    def start(key, y):
        """Replication r's state before its first iteration, from its own key (either method)."""
        return init(jax.random.split(key)[1], (y,))

    def ranks(run, true_values, y):
        """One replication's ranks and divergences from its iterations (leaves (warmup + draws, ...))."""
        kept = jax.tree_util.tree_map(lambda a: a[warmup:][thin - 1 :: thin], run["z"])

        def quantities(values):
            return jnp.append(_flatten(values, sites), _log_lik(model_fn, observed, values, y))

        constrained = jax.vmap(kernel.postprocess_fn((y,), {}))(kept)
        posterior = jax.vmap(quantities)(constrained)
        true_q = quantities(true_values)
        return jnp.sum(posterior < true_q[None, :], axis=0), jnp.sum(run["diverging"][warmup:])

    if vectorized:
        states = jax.vmap(start)(keys, y_sim)
        # One scan over warm-up and draws (NUTS's adaptation follows the iteration count in its state).
        _, run = chain_advance(kernel, batched=True)(states, (y_sim,), warmup + draws)
        by_replication = jax.tree_util.tree_map(lambda a: jnp.swapaxes(a, 0, 1), run)  # (R, iterations, ...)
        return jax.vmap(ranks)(by_replication, truth, y_sim)

    advance = chain_advance(kernel)

    def one(args):
        key, true_values, y = args
        _, run = advance(start(key, y), (y,), warmup + draws)
        return ranks(run, true_values, y)

    return jax.lax.map(one, (keys, truth, y_sim))


def _check_settings(
    seed: Any, noise_scale: Any, target_accept: Any, bins: Any, **counts: Any
) -> tuple[dict[str, int], int, int]:
    """The checked counts of :func:`run_sbc`, the number of rank values L + 1 and the χ² bins.

    The counts are positive integers, by name; ``ValueError`` naming the first bad argument.
    """
    ints = {name: check_positive_int(value, name) for name, value in counts.items()}
    if ints.get("max_tree_depth", 0) > MAX_TREE_DEPTH:
        raise ValueError(f"max_tree_depth: must be at most {MAX_TREE_DEPTH}, got {ints['max_tree_depth']}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise ValueError(f"seed: must be a whole number in 0 … 2⁶³ − 1, got {seed!r}")
    if ints["num_inducing"] > ints["n"]:
        raise ValueError(f"num_inducing: {ints['num_inducing']} is more than n = {ints['n']}")
    if ints["thin"] > ints["draws"]:
        raise ValueError(f"thin: {ints['thin']} is more than draws = {ints['draws']}")
    if isinstance(noise_scale, bool) or not (
        isinstance(noise_scale, (int, float, np.floating)) and np.isfinite(noise_scale) and noise_scale >= 1
    ):
        raise ValueError(
            f"noise_scale: must be a finite number ≥ 1 (k > 1 simulates noise k·σ), got {noise_scale!r}"
        )
    if not (isinstance(target_accept, (float, np.floating)) and 0 < target_accept < 1):
        raise ValueError(f"target_accept: must be a number in (0, 1), got {target_accept!r}")
    num_ranks = ints["draws"] // ints["thin"] + 1
    if bins is None:
        bins = max(2, min(num_ranks, ints["reps"] // 10, 10))
    elif check_positive_int(bins, "bins") < 2 or bins > num_ranks:
        raise ValueError(
            f"bins: must be an integer in [2, {num_ranks}] (the number of rank values), got {bins!r}"
        )
    return ints, num_ranks, int(bins)


def run_sbc(
    model: str | Callable = "sor",
    reps: int = 200,
    n: int = 20,
    num_inducing: int = 5,
    draws: int = 500,
    warmup: int = 300,
    thin: int = 5,
    seed: int = 0,
    noise_scale: float = 1.0,
    bins: int | None = None,
    *,
    likelihood: str = "gaussian",
    num_groups: int = 3,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
    model_args: tuple = (),
    model_kwargs: Mapping[str, Any] | None = None,
    observed: str = "y",
    chain_method: str | None = None,
) -> SBCResult:
    """Run SBC with ``reps`` replications, each fitted with one NUTS chain, all in one compiled program.

    Args:
        model: a shipped model, one of :data:`MODELS` (under :func:`simulation_priors`, on a grid of n
            inputs on [0, 1]), or any NumPyro model function whose observed site ``observed`` takes its
            value from the keyword argument of that name (None to simulate), e.g.::

                def model(x, y=None):
                    s = numpyro.sample("s", dist.LogNormal(0, 1))
                    numpyro.sample("y", dist.Normal(0, s).expand([len(x)]).to_event(1), obs=y)

                run_sbc(model, model_args=(x,), reps=200)

        reps: number of simulated data sets R.
        n: data points per set (per group for ``grouped``).
        num_inducing: M inducing inputs (≤ n).
        draws: NUTS iterations after adaptation.
        warmup: NUTS iterations for adaptation.
        thin: keep every thin-th draw, so L = draws // thin posterior draws are ranked against each truth
            and ranks lie in {0, …, L}.
        seed: PRNG seed (everything — prior draws, data, NUTS — follows from it).
        noise_scale: k ≥ 1; k > 1 simulates with noise k·σ while the model fits σ (the deliberate
            misspecification SBC must reject; Gaussian likelihoods with a ``noise`` site only).
        bins: χ² bins (default min(L + 1, reps // 10, 10), at least 2: ≥ 10 expected counts per bin).
        likelihood: the likelihood of a shipped model (only ``rbfn`` takes other than ``gaussian``).
        num_groups: G for ``grouped``.
        target_accept: NUTS's target acceptance probability.
        max_tree_depth: NUTS's maximum tree depth.
        model_args: a user's model's positional arguments.
        model_kwargs: a user's model's keyword arguments.
        observed: a user's model's observed site.
        chain_method: ``"sequential"`` (the replications one after the other) or ``"vectorized"`` (every
            NUTS step advances all of them at once); ``None``: sequential on a CPU, vectorised on an
            accelerator (:func:`bayes_rbfn.infer.sampler.one_device_method`). On a CPU a vectorised step
            lasts as long as the longest trajectory among the replications and the batched program
            compiles longer. Both give replication r the same key: the same draws up to rounding.

    Returns:
        :class:`SBCResult` with ranks (R, Q) of the quantities :func:`quantity_names`.

    Raises:
        ValueError: an unknown model or an invalid argument (the message names it).

    References:
        Talts et al. (2018), Algorithm 1; Modrák et al. (2023) (see the module docstring).
    """
    counts = _counts(reps, n, num_inducing, draws, warmup, thin, num_groups, max_tree_depth)
    ints, num_ranks, bins = _check_settings(seed, noise_scale, target_accept, bins, **counts)
    method = _chain_method(chain_method)
    model_fn, observed, sites = _model_sites(
        model, likelihood, ints, model_args, model_kwargs, observed, noise_scale
    )
    ranks, div, seconds = _replicate(
        model_fn, observed, sites, ints, seed, noise_scale, target_accept, method, model, likelihood
    )
    settings = _settings(model, model_fn, likelihood, ints, seed, noise_scale, target_accept, method)
    return _result(ranks, div, _names(sites), num_ranks, bins, seconds, settings, likelihood, noise_scale)


def _counts(
    reps: Any,
    n: Any,
    num_inducing: Any,
    draws: Any,
    warmup: Any,
    thin: Any,
    num_groups: Any,
    max_tree_depth: Any,
) -> dict[str, Any]:
    """The count arguments of :func:`run_sbc` by name, in the order :func:`_check_settings` checks them.

    Args:
        reps: number of simulated data sets R.
        n: data points per set.
        num_inducing: M inducing inputs.
        draws: NUTS iterations after adaptation.
        warmup: NUTS iterations for adaptation.
        thin: keep every thin-th draw.
        num_groups: G for ``grouped``.
        max_tree_depth: NUTS's maximum tree depth.

    Returns:
        {name: value}, unchecked.
    """
    return {
        "reps": reps,
        "n": n,
        "num_inducing": num_inducing,
        "draws": draws,
        "warmup": warmup,
        "thin": thin,
        "num_groups": num_groups,
        "max_tree_depth": max_tree_depth,
    }


def _chain_method(chain_method: str | None) -> str:
    """The checked ``chain_method`` of :func:`run_sbc`, the device's default for None.

    Args:
        chain_method: ``"sequential"``, ``"vectorized"`` or None.

    Returns:
        ``"sequential"`` or ``"vectorized"``.
    """
    if chain_method not in (None, "sequential", "vectorized"):
        raise ValueError(f"chain_method: expected 'sequential', 'vectorized' or None, got {chain_method!r}")
    return chain_method or one_device_method()


def _model_sites(
    model: str | Callable,
    likelihood: str,
    ints: Mapping[str, int],
    model_args: tuple,
    model_kwargs: Mapping[str, Any] | None,
    observed: str,
    noise_scale: Any,
) -> tuple[Callable, str, dict[str, tuple[int, ...]]]:
    """The model function SBC simulates and fits, its observed site and its latent sites.

    Args:
        model: a shipped model's name or a NumPyro model function.
        likelihood: the likelihood of a shipped model.
        ints: the checked counts (:func:`_check_settings`).
        model_args: a user's model's positional arguments.
        model_kwargs: a user's model's keyword arguments.
        observed: a user's model's observed site.
        noise_scale: k ≥ 1, the simulated/fitted noise ratio.

    Returns:
        (model_fn(y), the observed site's name, {name: shape} of the latent sample sites).

    Raises:
        ValueError: ``noise_scale`` ≠ 1 without a Gaussian likelihood and a ``noise`` site.
    """
    model_fn, observed = _resolve(
        model,
        likelihood,
        ints["n"],
        ints["num_inducing"],
        ints["num_groups"],
        model_args,
        model_kwargs,
        observed,
    )
    sites, every_site = _latent_sites(model_fn, observed)
    if noise_scale != 1 and (likelihood != "gaussian" or "noise" not in every_site):
        raise ValueError("noise_scale: needs a Gaussian likelihood with a 'noise' site (σ) to scale")
    return model_fn, observed, sites


def _replicate(
    model_fn: Callable,
    observed: str,
    sites: Mapping[str, tuple[int, ...]],
    ints: Mapping[str, int],
    seed: int,
    noise_scale: float,
    target_accept: float,
    method: str,
    model: str | Callable,
    likelihood: str,
) -> tuple[np.ndarray, jax.Array, float]:
    """Simulate the R data sets from the prior predictive and fit each one: the ranks, timed.

    Args:
        model_fn: model_fn(y), from :func:`_model_sites`.
        observed: the observed site's name.
        sites: {name: shape} of the latent sample sites.
        ints: the checked counts (:func:`_check_settings`).
        seed: PRNG seed of the run.
        noise_scale: k ≥ 1, the simulated/fitted noise ratio.
        target_accept: NUTS's target acceptance probability.
        method: ``"sequential"`` or ``"vectorized"`` (:func:`_chain_method`).
        model: as given to :func:`run_sbc`.
        likelihood: the likelihood of a shipped model.

    Returns:
        (ranks (R, Q) as int64, divergences (R,), wall time in seconds of simulation and fits).
    """
    start = time.perf_counter()
    k_prior, k_noise, k_fit = jax.random.split(jax.random.PRNGKey(int(seed)), 3)
    truth, y_sim = _simulate(
        k_prior, k_noise, model_fn, observed, sites, ints["reps"], noise_scale, model, likelihood
    )
    flat_sites = tuple(itertools.chain.from_iterable((name, shape) for name, shape in sites.items()))
    ranks, div = _run(
        jax.random.split(k_fit, ints["reps"]),
        truth,
        y_sim,
        model_fn,
        observed,
        flat_sites,
        ints["warmup"],
        ints["draws"],
        ints["thin"],
        float(target_accept),
        ints["max_tree_depth"],
        method == "vectorized",
    )
    ranks = np.asarray(jax.block_until_ready(ranks)).astype(np.int64)
    return ranks, div, time.perf_counter() - start


def _simulate(
    k_prior: jax.Array,
    k_noise: jax.Array,
    model_fn: Callable,
    observed: str,
    sites: Mapping[str, tuple[int, ...]],
    reps: int,
    noise_scale: float,
    model: str | Callable,
    likelihood: str,
) -> tuple[dict[str, jax.Array], jax.Array]:
    """The R replicate data sets and their true latent values, drawn from the prior predictive.

    Args:
        k_prior: key of the prior predictive draws.
        k_noise: key of the extra noise when ``noise_scale`` > 1 (:func:`_add_noise`).
        model_fn: model_fn(y), from :func:`_model_sites`.
        observed: the observed site's name.
        sites: {name: shape} of the latent sample sites.
        reps: number of data sets R.
        noise_scale: k ≥ 1, the simulated/fitted noise ratio.
        model: as given to :func:`run_sbc`.
        likelihood: the likelihood of a shipped model.

    Returns:
        ({latent site: (R, ...) true values}, (R, ...) simulated data of the observed site).
    """
    prior = Predictive(model_fn, num_samples=reps)(k_prior, None)
    y_sim = prior[observed]
    if noise_scale != 1:
        y_sim = _add_noise(k_noise, y_sim, prior, float(noise_scale), model, likelihood)
    return {name: prior[name] for name in sites}, y_sim


def _settings(
    model: str | Callable,
    model_fn: Callable,
    likelihood: str,
    ints: Mapping[str, int],
    seed: int,
    noise_scale: float,
    target_accept: float,
    method: str,
) -> dict[str, Any]:
    """The record of a run's settings, :attr:`SBCResult.settings` (JSON-serialisable).

    Args:
        model: as given to :func:`run_sbc`.
        model_fn: from :func:`_model_sites` (its name labels a user's model).
        likelihood: the likelihood of a shipped model.
        ints: the checked counts (:func:`_check_settings`).
        seed: PRNG seed of the run.
        noise_scale: k ≥ 1, the simulated/fitted noise ratio.
        target_accept: NUTS's target acceptance probability.
        method: ``"sequential"`` or ``"vectorized"`` (:func:`_chain_method`).

    Returns:
        The settings by name; ``num_groups`` only for ``grouped``.
    """
    label = model if isinstance(model, str) else model_fn.__name__
    settings = {
        "model": label,
        "likelihood": likelihood,
        **ints,
        "seed": int(seed),
        "noise_scale": float(noise_scale),
        "target_accept": float(target_accept),
        "chain_method": method,
        "priors": (
            {k: repr(v) for k, v in simulation_priors(model, likelihood).items()}
            if isinstance(model, str)
            else "the model's own"
        ),
        "dtype": str(jnp.zeros(()).dtype),
    }
    if model != "grouped":
        settings.pop("num_groups")
    return settings


def _result(
    ranks: np.ndarray,
    div: jax.Array,
    names: tuple[str, ...],
    num_ranks: int,
    bins: int,
    seconds: float,
    settings: dict[str, Any],
    likelihood: str,
    noise_scale: float,
) -> SBCResult:
    """The :class:`SBCResult` of the ranks: the χ² test of each quantity and the record.

    Args:
        ranks: (R, Q) ranks, one column per name.
        div: (R,) divergences.
        names: the Q quantity names (:func:`_names`).
        num_ranks: L + 1.
        bins: number of χ² bins.
        seconds: wall time of the fits.
        settings: from :func:`_settings`.
        likelihood: the likelihood of a shipped model.
        noise_scale: k ≥ 1, the simulated/fitted noise ratio.

    Returns:
        :class:`SBCResult`.
    """
    chi2, pvalues = {}, {}
    for j, name in enumerate(names):
        chi2[name], pvalues[name] = chi2_uniformity(ranks[:, j], num_ranks, int(bins))
    label = settings["model"]
    return SBCResult(
        ranks=ranks,
        params=names,
        num_ranks=num_ranks,
        chi2=chi2,
        pvalues=pvalues,
        bins=int(bins),
        divergences=int(np.sum(div)),
        model=label if likelihood == "gaussian" else f"{label} ({likelihood})",
        noise_scale=float(noise_scale),
        settings=settings,
        seconds=seconds,
    )


def _add_noise(key, y_sim, prior, k: float, model, likelihood: str) -> jax.Array:
    """y + N(0, (k² − 1)σ²) per element: data with noise kσ for a Gaussian likelihood (module docstring)."""
    sigma = jnp.asarray(prior["noise"])
    sigma = sigma.reshape(sigma.shape + (1,) * (y_sim.ndim - sigma.ndim))
    extra = jnp.sqrt(k * k - 1.0) * sigma * jax.random.normal(key, y_sim.shape, y_sim.dtype)
    if model == "grouped":  # the padding stays 0
        extra = extra * (y_sim != 0)
    return y_sim + extra


# --------------------------------------------------------------------------------------------------
# ECDF plot and output folder


def ecdf_band(
    num_ranks: int, num_reps: int, prob: float = 0.95, seed: int = 0, num_sims: int = 10_000
) -> tuple[np.ndarray, np.ndarray]:
    """Simultaneous ``prob`` band of ECDF − uniform CDF for ``num_reps`` ranks uniform on {0, …, L}.

    With L = ``num_ranks`` − 1, the ranks r are mapped to u = (r + 1)/(L + 1) and the ECDF is evaluated at
    z_i = i/(L + 1), i = 1..L, where its count K_i = #{u ≤ z_i} is Binomial(R, z_i) for uniform ranks
    (R = ``num_reps``). The simulation method of Säilynoja et al. (2022, §3): draw ``num_sims`` sets of R
    discrete-uniform ranks (their histograms, Multinomial(R, 1/(L + 1), …), from a NumPy Generator seeded
    with ``seed``); for each, the smallest over the z_i of the two-sided pointwise tail probability
    p_i(K_i) = min(1, 2 min(P(K ≤ K_i), P(K ≥ K_i))), K ~ Binomial(R, z_i); γ = the (1 − ``prob``)
    quantile of these minima (an observed minimum: ``method="inverted_cdf"``). The band at z_i is the
    central Binomial(R, z_i) interval of probability 1 − γ, {k : p_i(k) ≥ γ} (each excluded tail has
    probability < γ/2), divided by R, minus z_i. Its ends come from the very tail probabilities the minima
    were computed with, so a set of ranks lies inside the band at every z_i exactly when its minimum is
    ≥ γ, and the joint probability of that is ``prob`` up to the simulation error, or more where the
    minima are coarsely discrete (small L and R; for L = 1 the band is the pointwise binomial interval).

    Args:
        num_ranks: L + 1, the number of possible rank values (``SBCResult.num_ranks``); at least 2.
        num_reps: R, the number of ranks (replications); at least 1.
        prob: joint probability of the band, in (0, 1).
        seed: seed of the simulation.
        num_sims: number of simulated sets of ranks.

    Returns:
        (lower, upper): the band's (L,) limits of ECDF − CDF at the z_i.

    Raises:
        ValueError: an argument out of range.

    References:
        Säilynoja, T., Bürkner, P.-C. & Vehtari, A. (2022). Graphical test for discrete uniformity and its
        applications in goodness-of-fit evaluation and multiple sample comparison. Statistics and
        Computing 32, 32, §3.
    """
    L = check_positive_int(num_ranks, "num_ranks") - 1
    R = check_positive_int(num_reps, "num_reps")
    num_sims = check_positive_int(num_sims, "num_sims")
    if L < 1:
        raise ValueError(f"num_ranks must be at least 2, got {num_ranks}")
    if not 0.0 < prob < 1.0:
        raise ValueError(f"prob must be in (0, 1), got {prob}")
    z = np.arange(1, L + 1) / (L + 1)
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(R, np.full(L + 1, 1.0 / (L + 1)), size=num_sims)
    K = np.cumsum(counts, axis=1)[:, :L]  # (num_sims, L): #{r ≤ i − 1} = #{u ≤ z_i}
    gamma = np.quantile(_two_sided_tail(K, R, z).min(axis=1), 1.0 - prob, method="inverted_cdf")
    inside = _two_sided_tail(np.arange(R + 1)[:, None], R, z) >= gamma  # (R + 1, L), an interval per column
    lower = np.argmax(inside, axis=0)
    upper = R - np.argmax(inside[::-1], axis=0)
    return lower / R - z, upper / R - z


def _two_sided_tail(K: np.ndarray, R: int, z: np.ndarray) -> np.ndarray:
    """min(1, 2 min(P(X ≤ K), P(X ≥ K))), X ~ Binomial(R, z), elementwise (z along K's last axis)."""
    tail = np.minimum(scipy.stats.binom.cdf(K, R, z), scipy.stats.binom.sf(K - 1, R, z))
    return np.minimum(2.0 * tail, 1.0)


def plot_ecdf(result: SBCResult, path: str | os.PathLike[str] | None = None, ci_prob: float = 0.95):
    """ECDF-difference plot of the ranks of every quantity, with simultaneous ``ci_prob`` bands.

    The ranks r ∈ {0, …, L} are mapped to u = (r + 1)/(L + 1) and their ECDF is evaluated at the L fixed
    points z_i = i/(L + 1), i = 1..L, where a discrete-uniform rank has exactly the Uniform(0, 1) CDF
    (no jittering). Each panel draws ECDF − CDF at the z_i (a step line, 0 at z = 0 and z = 1) inside the
    simultaneous band of :func:`ecdf_band` (Säilynoja et al. 2022, simulation method), which is
    calibrated because the evaluation points do not depend on the ranks. Plain matplotlib.

    Args:
        result: from :func:`run_sbc`.
        path: PNG file to write (None: do not write).
        ci_prob: joint probability of the bands.

    Returns:
        A matplotlib Figure (not registered with pyplot, so nothing needs closing).

    References:
        Säilynoja, Bürkner & Vehtari (2022), §2–3 (see the module docstring).
    """
    from matplotlib.figure import Figure

    Q = len(result.params)
    ncols = min(Q, 5)
    nrows = math.ceil(Q / ncols)
    fig = Figure(figsize=(3.2 * ncols, 2.6 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    R = len(result.ranks)
    L = result.num_ranks - 1
    z = np.arange(1, L + 1) / (L + 1)
    lower, upper = ecdf_band(result.num_ranks, R, ci_prob)
    # The curves run from z = 0 to z = 1, where ECDF and CDF are both exactly 0 and 1.
    x = np.concatenate([[0.0], z, [1.0]])
    band_lo = np.concatenate([[0.0], lower, [0.0]])
    band_hi = np.concatenate([[0.0], upper, [0.0]])
    for j, name in enumerate(result.params):
        ax = axes.flat[j]
        ranks = np.asarray(result.ranks[:, j])
        diff = np.searchsorted(np.sort(ranks), np.arange(L), side="right") / R - z  # #{r ≤ i − 1}/R − z_i
        ax.fill_between(x, band_lo, band_hi, step="post", color="C0", alpha=0.2, lw=0)
        ax.step(x, np.concatenate([[0.0], diff, [0.0]]), where="post", color="C0", lw=1.2)
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.set_xlim(0.0, 1.0)
        ax.set_title(f"{name}  p={result.pvalues[name]:.2g}", fontsize=9)
        ax.set_xlabel("fractional rank", fontsize=8)
        ax.tick_params(labelsize=8)
    for ax in axes.flat[Q:]:
        ax.set_visible(False)
    fig.suptitle(
        f"SBC {result.model}: ECDF − uniform CDF, {ci_prob:.0%} simultaneous bands "
        f"(R={R}, L={L}, noise_scale={result.noise_scale:g})",
        fontsize=10,
    )
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def statistics(result: SBCResult) -> dict[str, Any]:
    """The test statistics of ``result`` as a JSON-serialisable dict (written to ``statistics.json``).

    Keys: ``model``, ``settings``, ``num_ranks``, ``bins``, ``dof``, ``divergences``, ``seconds``,
    ``min_pvalue`` and ``quantities`` = {name: {"chi2", "dof", "pvalue", "mean_rank"}}.
    """
    dof = result.bins - 1
    quantities = {
        name: {
            "chi2": result.chi2[name],
            "dof": dof,
            "pvalue": result.pvalues[name],
            "mean_rank": float(np.mean(result.ranks[:, j])),
        }
        for j, name in enumerate(result.params)
    }
    return {
        "model": result.model,
        "settings": result.settings,
        "num_ranks": result.num_ranks,
        "bins": result.bins,
        "dof": dof,
        "divergences": result.divergences,
        "seconds": result.seconds,
        "min_pvalue": result.min_pvalue,
        "quantities": quantities,
    }


def _csv_text(header: list[str], rows: list[list[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def write_sbc(result: SBCResult, out_dir: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Write ``ranks.csv``, ``statistics.csv``, ``statistics.json`` and ``ecdf.png`` into ``out_dir``.

    * ``ranks.csv``: header of quantity names, one row per replication, integer ranks in {0, …, L};
    * ``statistics.csv``: one row per quantity — ``quantity, chi2, dof, pvalue, mean_rank``;
    * ``statistics.json``: :func:`statistics` (also divergences, settings and wall time);
    * ``ecdf.png``: :func:`plot_ecdf`.

    Written atomically through :func:`bayes_rbfn.io.output.atomic_output_dir`: everything goes into a hidden
    sibling folder that replaces ``out_dir`` only when complete.

    Returns:
        The output folder.

    Raises:
        bayes_rbfn.io.reader.InputError: ``out_dir`` exists and is not empty (and not ``overwrite``), or is
            a file.
    """
    from bayes_rbfn.io.output import atomic_output_dir

    out = Path(out_dir)
    stats = statistics(result)
    ranks_csv = _csv_text(list(result.params), result.ranks.tolist())
    stats_rows = [
        [name, q["chi2"], q["dof"], q["pvalue"], q["mean_rank"]] for name, q in stats["quantities"].items()
    ]
    stats_csv = _csv_text(["quantity", "chi2", "dof", "pvalue", "mean_rank"], stats_rows)
    with atomic_output_dir(out, overwrite) as tmp:
        (tmp / "ranks.csv").write_text(ranks_csv, encoding="utf-8")
        (tmp / "statistics.csv").write_text(stats_csv, encoding="utf-8")
        (tmp / "statistics.json").write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
        plot_ecdf(result, tmp / "ecdf.png")
    return out
