"""LOO-PIT from the exact leave-one-out conditionals of a GP marginal.

The probability integral transform of each observation under its leave-one-out predictive,

    PIT_i = P(y_i' ≤ y_i | y_−i) = Σ_s w_is F(y_i | y_−i, θ_s),

is uniform on [0, 1] when the model is calibrated ([1] §6.3, [2]): a U shape says the predictive is
too narrow, a hump that it is too wide, a slope that it is biased. Here F(y_i | y_−i, θ) is the CDF of the
model's own LOO conditional at one posterior draw, Φ((y_i − μ_−i)/σ_−i) for a GP marginal (the same
O(NM²) passes that give the stored log-likelihood: :func:`bayes_rbfn.gp.block_loo.sor_loo`,
:func:`bayes_rbfn.gp.conditional.exact_loo`), or the likelihood's CDF for a factorised continuous
likelihood; the w_is are the Pareto-smoothed importance weights ∝ 1 / p(y_i | y_−i, θ_s) of PSIS-LOO [3]
(``arviz.psislw``) that turn draws of θ | y into draws of θ | y_−i.

``arviz.loo_pit`` instead weights the ``posterior_predictive`` replicates: right for a factorised model,
whose replicate of y_i given θ does not depend on y_i, but not for a GP marginal, whose replicates
y_rep ~ p(y_rep | y, θ) have seen y_i through f (its values are pulled towards 1/2 and hide misfit).
For a model of this package use :func:`loo_pit`; to draw the result, plot the ECDF of the values minus
the uniform CDF with a simultaneous band (Säilynoja, Bürkner & Vehtari 2022; the SBC workflow's
``ecdf_band`` computes one for ranks).

References
----------
[1] Gelman, A., Carlin, J. B., Stern, H. S., Dunson, D. B., Vehtari, A. & Rubin, D. B. (2013). *Bayesian
    Data Analysis*, 3rd ed., §6.3.
[2] Gabry, J., Simpson, D., Vehtari, A., Betancourt, M. & Gelman, A. (2019). Visualization in Bayesian
    workflow. JRSS A 182, 389–402.
[3] Vehtari, A., Gelman, A. & Gabry, J. (2017). Practical Bayesian model evaluation using leave-one-out
    cross-validation and WAIC. Statistics and Computing 27, 1413–1432.
[4] Bürkner, P.-C., Gabry, J. & Vehtari, A. (2020). Efficient leave-one-out cross-validation for Bayesian
    non-factorized normal and Student-t models. Computational Statistics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from bayes_rbfn.io import arviz_compat
from bayes_rbfn.io.arviz_compat import group_dataset, groups, psis_log_weights, put_variable

__all__ = ["loo_log_likelihood", "loo_pit", "loo_r2", "pit_weights", "replayed_loo"]


def replayed_loo(
    idata: Any,
    model: Callable,
    args: tuple,
    kwargs: dict,
    *,
    site: str = "y",
    batch_size: int = 64,
    statistic: str = "log_density",
) -> np.ndarray:
    """LOO values of a model's observed ``site`` at every posterior draw, shape (chain, draw, N).

    Replays ``model(*args, **kwargs)`` at each draw of ``idata.posterior``
    (:func:`bayes_rbfn.infer.replicates.replay`) and evaluates the site's distribution on its observed
    value: ``loo_log_prob`` (``statistic="log_density"``) or ``loo_pit`` (``"pit"``) of a ``SparseGP`` or
    ``ExactGP``; for a factorised continuous likelihood with ``"pit"``, its ``cdf``. Draws are evaluated
    ``batch_size`` at a time, through :func:`bayes_rbfn.models.distributions.deferred_loo`.
    """
    import jax

    from bayes_rbfn.infer.replicates import flat_draws, observed_node, replay
    from bayes_rbfn.models.distributions import deferred_loo

    flat, lead = flat_draws(idata)
    method = {"log_density": "loo_log_prob", "pit": "loo_pit", "residual": "loo_residual"}[statistic]
    key = jax.random.PRNGKey(0)  # for sites a draw does not hold (none, for a posterior of this model)

    def one(values, exact):
        node = observed_node(replay(model, values, key, args, kwargs), site)
        fn = node["fn"]
        if hasattr(fn, method):
            return getattr(fn, method)(node["value"], exact=exact)
        if statistic == "pit" and not fn.support.is_discrete:
            return fn.cdf(node["value"])  # a factorised likelihood: the pointwise CDF
        raise ValueError(
            f"site: {site!r} is a {type(fn).__name__}, not a SparseGP or ExactGP"
            + (
                " (a factorised likelihood's pointwise log density is already what az.from_numpyro stores)"
                if statistic == "log_density"
                else " or a continuous likelihood (a discrete one's PIT is not uniform when calibrated)"
            )
        )

    def evaluate(values, exact):
        batched = jax.jit(jax.vmap(lambda v: one(v, exact)))
        total = len(next(iter(values.values())))
        return np.concatenate(
            [
                np.asarray(batched({n: v[s : s + batch_size] for n, v in values.items()}))
                for s in range(0, total, batch_size)
            ]
        )

    return deferred_loo(evaluate, flat).reshape(*lead, -1)


def loo_log_likelihood(
    idata: Any,
    model: Callable,
    *args: Any,
    site: str = "y",
    batch_size: int = 64,
    **kwargs: Any,
) -> Any:
    """Put the LOO conditionals of a GP-marginal site into ``idata.log_likelihood`` so ``az.loo`` works.

    ``az.from_numpyro`` stores one log density per draw for a site whose likelihood does not factorise
    (``SparseGP``, ``ExactGP``), and ``az.loo`` would then see a single observation. For PSIS-LOO of such a
    model the pointwise values must be the conditionals log p(y_i | y_−i, θ) ([4]): this replays ``model``
    at every posterior draw and calls the site's ``loo_log_prob`` on the observed value
    (:func:`replayed_loo`).

    Args:
        idata: InferenceData from ``az.from_numpyro`` with a ``posterior`` group.
        model: the NumPyro model function.
        *args: the model's positional arguments, as passed to ``MCMC.run`` (with the data).
        site: the observed site whose distribution is a ``SparseGP`` or ``ExactGP``.
        batch_size: posterior draws evaluated at a time.
        **kwargs: the model's keyword arguments, as passed to ``MCMC.run`` (with the data).

    Returns:
        ``idata``, with ``log_likelihood[site]`` of shape (chain, draw, N) (replaced if present).
    """
    import xarray as xr

    post = idata.posterior
    values = replayed_loo(idata, model, args, kwargs, site=site, batch_size=batch_size)
    array = xr.DataArray(
        values,
        dims=("chain", "draw", f"{site}_dim_0"),
        coords={"chain": post["chain"].values, "draw": post["draw"].values},
    )
    put_variable(idata, "log_likelihood", site, array)
    return idata


def pit_weights(idata: Any, log_likelihood: np.ndarray) -> np.ndarray:
    """Normalised PSIS-LOO weights w_is, shape (S, N), from log p(y_i | y_−i, θ_s) of shape (chain, draw, N).

    The relative efficiency is ArviZ's for ``az.loo`` (mean ESS of the posterior over the number of draws).
    """
    chains, draws = log_likelihood.shape[:2]
    flat = log_likelihood.reshape(chains * draws, -1)
    reff = 1.0
    if chains > 1:
        ess = arviz_compat.ess(group_dataset(idata, "posterior"), method="mean")
        reff = float(np.mean(np.hstack([np.ravel(ess[v].values) for v in ess.data_vars]))) / flat.shape[0]
    return np.exp(psis_log_weights(-flat, reff))


def loo_r2(idata: Any, y: Any, log_likelihood: np.ndarray, residuals: np.ndarray) -> float:
    """LOO-R² = 1 − Var(y − ŷ_loo) / Var(y), the share of the variance of y the LOO predictive means explain.

    ŷ_loo are the leave-one-out predictive means; the point estimate of [5].

    ŷ_loo,i = Σ_s w_is E[y_i | y_−i, θ_s] with the PSIS-LOO weights of :func:`pit_weights`.

    Args:
        idata: the fit's InferenceData (its posterior sets the weights' relative efficiency).
        y: (N,) observations.
        log_likelihood: log p(y_i | y_−i, θ_s), shape (chain, draw, N): a GP marginal's LOO conditionals
            (:func:`replayed_loo`), or a factorised likelihood's pointwise log density.
        residuals: y_i − E[y_i | y_−i, θ_s] of the same shape: ``replayed_loo(..., statistic="residual")``
            for a GP marginal; y_i − E[y_i | θ_s] for a factorised likelihood.

    References
    ----------
    [5] Gelman, A., Goodrich, B., Gabry, J. & Vehtari, A. (2019). R-squared for Bayesian regression
        models. The American Statistician 73, 307–309.
    """
    y = np.asarray(y, dtype=np.float64)
    weights = pit_weights(idata, np.asarray(log_likelihood))
    chains, draws = np.shape(residuals)[:2]
    loo_residual = np.sum(weights * np.asarray(residuals).reshape(chains * draws, -1), axis=0)
    return float(1.0 - np.var(loo_residual) / np.var(y))


def _stored_log_likelihood(idata: Any, site: str) -> np.ndarray | None:
    if "log_likelihood" in groups(idata) and site in idata.log_likelihood:
        values = np.asarray(idata.log_likelihood[site].values)
        return values.reshape(*values.shape[:2], -1)
    return None


def _fit_pit_values(idata: Any, rebuild: Mapping[str, Any]) -> np.ndarray:
    """The CDFs F(y_i | y_−i, θ_s) of a :func:`bayes_rbfn.fit` result, (chain, draw, N).

    In the order of the observations; ``rebuild`` holds the ``kernel`` and ``mean`` to pass again
    (:func:`bayes_rbfn.infer.schema.rebuild_with_layout`).
    """
    from bayes_rbfn.infer.fitting import pointwise_loo
    from bayes_rbfn.infer.predictive import draw_work
    from bayes_rbfn.infer.schema import rebuild_with_layout

    spec, config, data, layout, params = rebuild_with_layout(idata, **rebuild)
    pit = pointwise_loo(spec, dataclasses.replace(config, loo_statistic="pit"), params, draw_work(data), data)
    return layout.to_observations(pit, batch_ndim=2)


def loo_pit(
    idata: Any,
    model: Callable | None = None,
    *args: Any,
    site: str = "y",
    batch_size: int = 64,
    **kwargs: Any,
) -> np.ndarray:
    """LOO-PIT values PIT_i = Σ_s w_is F(y_i | y_−i, θ_s), exact per draw and PSIS-weighted; shape (N,).

    Uniform on [0, 1] for a calibrated model (see the module docstring)::

        pit = bayes_rbfn.loo_pit(idata)                          # the result of bayes_rbfn.fit
        pit = bayes_rbfn.loo_pit(idata, kernel=my_kernel)        # … one fitted with a kernel object
        pit = bayes_rbfn.loo_pit(idata, model, X, Z, y=y)        # a model of one's own (az.from_numpyro)
        scipy.stats.kstest(pit, "uniform")

    Args:
        idata: the InferenceData of :func:`bayes_rbfn.fit` (in memory or read from its inference.nc), or
            of ``az.from_numpyro`` for a model of one's own.
        model: for a model of one's own: the NumPyro model, with ``*args, **kwargs`` as given to
            ``MCMC.run`` (with the data). Its observed ``site`` is a :class:`~bayes_rbfn.SparseGP` or
            :class:`~bayes_rbfn.ExactGP` (or a factorised continuous likelihood). Its PSIS weights come
            from ``idata.log_likelihood[site]`` when that holds the LOO conditionals
            (:func:`bayes_rbfn.loo_log_likelihood`), else they are computed.
        *args: the model's positional arguments, as given to ``MCMC.run`` (a model of one's own).
        site: the observed site.
        batch_size: posterior draws evaluated at a time (a model of one's own).
        **kwargs: the model's keyword arguments, as given to ``MCMC.run`` (a model of one's own). For a
            result of :func:`bayes_rbfn.fit`, only what no file can hold, as :func:`bayes_rbfn.predict`
            takes it: ``kernel`` (a kernel object or a family of one's own) and ``mean`` (a callable).

    Returns:
        (N,) PIT values in [0, 1], in the order of the observations.
    """
    if not hasattr(idata, "posterior"):
        raise ValueError(
            f"idata: expected an InferenceData with a posterior group, got {type(idata).__name__}"
        )
    if model is None:
        if "bayes_rbfn_model" not in idata.posterior.attrs:
            raise ValueError(
                "model: this InferenceData was not written by bayes_rbfn.fit; pass the NumPyro model and its "
                "arguments: loo_pit(idata, model, *args, **kwargs)"
            )
        unknown = sorted(set(kwargs) - {"kernel", "mean"})
        if args or unknown:
            raise ValueError(
                f"model: arguments {', '.join(map(repr, unknown)) or 'given positionally'} are for a model "
                "of one's own; a result of bayes_rbfn.fit takes only kernel= and mean="
            )
        pit = _fit_pit_values(idata, kwargs)
        log_lik = _stored_log_likelihood(idata, "y")
        if log_lik is None:
            raise ValueError("idata: no log_likelihood group (fit with log_likelihood=True)")
    else:
        replay = {"site": site, "batch_size": batch_size}
        pit = replayed_loo(idata, model, args, kwargs, statistic="pit", **replay)
        log_lik = _stored_log_likelihood(idata, site)
        if log_lik is None or log_lik.shape != pit.shape:
            log_lik = replayed_loo(idata, model, args, kwargs, **replay)
    weights = pit_weights(idata, log_lik)
    values = np.sum(weights * pit.reshape(weights.shape), axis=0)
    return np.clip(values, 0.0, 1.0)
