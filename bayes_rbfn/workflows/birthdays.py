"""The Birthdays case study as one call: :func:`fit_birthdays`.

It fits the collection's Birthdays model (:mod:`bayes_rbfn.models.birthdays`) to the packaged US births
per day and returns the fit as ArviZ's object (InferenceData on ArviZ 0.x, DataTree on 1.x).

NUTS runs through the package's one loop (:mod:`bayes_rbfn.infer.sampler`), at :data:`DEFAULT_SETTINGS`
unless told otherwise. The returned data hold:

* ``posterior``: the eight hyperparameters and the week trend's values at its centres (``week_rbfn_u``)
  and weights;
* ``sample_stats``, ``observed_data`` (``y``, standardised) and ``constant_data`` (``X``, ``date``,
  ``births``, the scales that undo the standardisation);
* ``log_likelihood``: the marginal's leave-one-out conditionals log p(y_i | y_−i, θ) per draw, for
  PSIS-LOO ([1]; the marginal does not factorise over days); the LOO-R² ([2]) from the same conditionals'
  residuals is in the group's ``loo_r2`` attribute;
* ``predictions``: each component's posterior mean given the hyperparameters, at a thinned set of draws
  (:func:`components`), in standardised units: ``trend`` (with the intercept) and ``year`` at the days,
  ``week_trend`` g at the days, ``weekday_effect`` β_w, ``holiday_effect`` γ_h and
  ``day_of_year_effect`` β_d (the day-of-year effects' posterior means,
  :meth:`~bayes_rbfn.models.distributions.SparseGP.group_moments`).

References
----------
[1] Bürkner, P.-C., Gabry, J. & Vehtari, A. (2021). Efficient leave-one-out cross-validation for Bayesian
    non-factorized normal and Student-t models. Computational Statistics 36, 1243–1261.
[2] Gelman, A., Goodrich, B., Gabry, J. & Vehtari, A. (2019). R-squared for Bayesian regression models.
    The American Statistician 73(3), 307–309.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayes_rbfn.infer.loo import loo_r2, replayed_loo
from bayes_rbfn.infer.replicates import flat_draws, replay
from bayes_rbfn.infer.sampler import SamplerSettings, nuts_kernel, run_chains, sample_stats
from bayes_rbfn.io import arviz_compat
from bayes_rbfn.io.datasets import BIRTHDAYS, dataset_defaults
from bayes_rbfn.models import birthdays as B

__all__ = ["COMPONENT_DRAWS", "DEFAULT_SETTINGS", "components", "fit_birthdays"]

#: The sampler's defaults for the case study: two chains of 500 + 500, a dense mass matrix over the 14
#: sampled values (the hyperparameters of trend, year and week trend are correlated), target acceptance
#: 0.95 (the potential's curvature along the week trend's lengthscale grows several-fold towards the
#: posterior's small lengthscales, so a step size tuned to the bulk is too long there), at most 2^D − 1
#: steps per draw at the data set's own tree depth D (its record in :mod:`bayes_rbfn.io.datasets`).
DEFAULT_SETTINGS = SamplerSettings(
    chains=2,
    warmup=500,
    draws=500,
    target_accept=0.95,
    dense_mass=True,
    max_tree_depth=dataset_defaults(BIRTHDAYS).max_tree_depth,
)

#: Draws (over all chains) at which :func:`components` is evaluated by :func:`fit_birthdays`.
COMPONENT_DRAWS = 40

#: The draws replayed at once by the LOO conditionals and the components.
_BATCH = 16

#: Sites of size N per draw that the posterior does not store (``predictions`` holds g).
_UNSTORED = ("week_rbfn", "week_trend")


def components(samples: dict[str, Any], data: dict[str, Any]) -> dict[str, np.ndarray]:
    """Each component's posterior mean given the hyperparameters, at every draw of ``samples``.

    Args:
        samples: {site: (T, ...)} draws of the model's sampled sites (flattened over chains).
        data: :func:`bayes_rbfn.models.birthdays.load_birthdays`'s dict.

    Returns:
        {name: (T, ...)}: ``trend`` (T, N) with the intercept, ``year`` (T, N), ``week_trend`` (T, N) g,
        ``weekday_effect`` (T, 7) β, ``holiday_effect`` (T, 3) γ, ``day_of_year_effect`` (T, 366) β_d,
        in standardised units;
        f = trend + year + exp(g) β_w(t) + β_d(t) + Σ_h γ_h 1_h(t) is the mean of y given the draw.
    """
    X, y = jnp.asarray(data["X"]), jnp.asarray(data["y"])
    args = (X, data["Z"], data["period"], y)
    width = 11  # t | 7 weekday columns | 3 holidays: the additive kernel's inputs
    at_days = jnp.zeros((X.shape[0], width), X.dtype).at[:, 0].set(X[:, 0])
    unit = jnp.eye(width, dtype=X.dtype)
    key = jax.random.PRNGKey(0)  # every site of the model is in a draw: nothing is drawn from it

    def one(values: dict) -> dict:
        trace = replay(B.birthdays_model, values, key, args, {})
        marginal = trace["y"]["fn"]
        moments = marginal.component_moments(
            y,
            {
                "intercept": at_days[:1],
                "trend": at_days,
                "year": at_days,
                "week": unit[1:8],
                "holiday": unit[8:11],
            },
        )
        return {
            "trend": moments["intercept"].mean[0] + moments["trend"].mean,
            "year": moments["year"].mean,
            "week_trend": trace["week_trend"]["value"],
            "weekday_effect": moments["week"].mean,
            "holiday_effect": moments["holiday"].mean,
            "day_of_year_effect": marginal.group_moments(y).mean,
        }

    batched = jax.jit(jax.vmap(one))
    total = len(next(iter(samples.values())))
    parts = [
        batched({k: jnp.asarray(v[s : s + _BATCH]) for k, v in samples.items()})
        for s in range(0, total, _BATCH)
    ]
    return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}


def fit_birthdays(
    settings: SamplerSettings = DEFAULT_SETTINGS,
    *,
    years: int | None = None,
    component_draws: int = COMPONENT_DRAWS,
    on_chunk: Any = None,
) -> Any:
    """Fit the Birthdays model with NUTS; ArviZ's object of the fit (module docstring).

    Args:
        settings: the sampler's settings (:class:`~bayes_rbfn.infer.sampler.SamplerSettings`; with
            ``checkpoint`` a run cut short continues where it stopped).
        years: fit the last ``years`` years of the record only (None: all 20, 7,305 days).
        component_draws: the draws, spread evenly over the chains, at which the components are evaluated.
        on_chunk: passed to :func:`~bayes_rbfn.infer.sampler.run_chains` (progress).

    Returns:
        InferenceData (ArviZ 0.x) or DataTree (1.x) with posterior, sample_stats, observed_data,
        constant_data, log_likelihood (LOO conditionals; attribute ``loo_r2``) and predictions (the
        components).
    """
    data = B.load_birthdays(years)
    args = data["model_args"]
    N = len(data["y"])
    kernel = nuts_kernel(B.birthdays_model, args, settings, num_points=N)
    record = {"model": BIRTHDAYS, "years": years}
    samples, stats = run_chains(kernel, args, settings, run_record=record, on_chunk=on_chunk)
    posterior = {k: np.asarray(v) for k, v in samples.items() if k not in _UNSTORED}
    draws_only = arviz_compat.from_groups({"posterior": posterior})
    loo_values = replayed_loo(draws_only, B.birthdays_model, args, {}, batch_size=_BATCH)
    residuals = replayed_loo(draws_only, B.birthdays_model, args, {}, batch_size=_BATCH, statistic="residual")

    predictions, keep = _component_predictions(posterior, data, settings, component_draws)

    dims, coords = _dims_coords()
    relative = data["y"] * data["y_sd"] + data["y_mean"]
    idata = arviz_compat.from_groups(
        {
            "posterior": posterior,
            "predictions": predictions,
            "log_likelihood": {"y": loo_values},
            "sample_stats": sample_stats(stats),
            "observed_data": {"y": np.asarray(data["y"])},
            "constant_data": {
                "X": np.asarray(data["X"]),
                "date": np.asarray(data["dates"]),
                "births": relative * data["births_mean"],
            },
        },
        dims=dims,
        coords=coords,
    )
    predictions_kept = arviz_compat.group_dataset(idata, "predictions").assign_coords(draw=keep)
    arviz_compat.add_groups(idata, {"predictions": predictions_kept})
    idata.log_likelihood.attrs["loo_r2"] = loo_r2(idata, data["y"], loo_values, residuals)
    scales = {k: float(data[k]) for k in ("t_mean", "t_sd", "y_mean", "y_sd", "births_mean", "period")}
    idata.constant_data.attrs.update({f"bayes_rbfn_{k}": v for k, v in scales.items()})
    idata.posterior.attrs.update({"bayes_rbfn_model": BIRTHDAYS, "bayes_rbfn_years": years or 0})
    return idata


def _dims_coords() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(dims, coords) of the fit's variables: days, week centres, weekdays, holidays, days of the year."""
    dims = {
        "week_rbfn_u": ["week_centre"],
        "week_rbfn_alpha": ["week_centre"],
        "y": ["day"],
        "X": ["day", "column"],
        "date": ["day"],
        "births": ["day"],
        "trend": ["day"],
        "year": ["day"],
        "week_trend": ["day"],
        "weekday_effect": ["weekday"],
        "holiday_effect": ["holiday"],
        "day_of_year_effect": ["day_of_year"],
    }
    coords = {
        "column": list(B.COLUMNS),
        "weekday": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"],
        "holiday": list(B.HOLIDAYS),
    }
    return dims, coords


def _component_predictions(
    posterior: dict[str, np.ndarray], data: dict[str, Any], settings: SamplerSettings, component_draws: int
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(the components at draws spread evenly over each chain, (chain, kept draw, …); the kept draws)."""
    chains, draws = settings.chains, settings.draws
    per_chain = max(1, min(draws, -(-component_draws // chains)))
    keep = np.unique(np.linspace(0, draws - 1, per_chain).astype(int))
    flat, _ = flat_draws({k: np.asarray(v)[:, keep].reshape(-1, *v.shape[2:]) for k, v in posterior.items()})
    predictions = {k: v.reshape(chains, len(keep), *v.shape[1:]) for k, v in components(flat, data).items()}
    return predictions, keep
