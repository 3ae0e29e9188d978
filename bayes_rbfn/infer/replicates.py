"""Posterior predictive replicates that condition on the data, for any NumPyro model of the package's pieces.

NumPyro's ``Predictive`` simulates an observed site by calling its distribution's ``sample`` at each
posterior draw. For a factorised likelihood (the ``rbfn`` layer's Poisson, Bernoulli, …) the latent f is
itself a posterior draw, so that is y_rep ~ p(y_rep | y). For a GP *marginal* (:class:`SparseGP`,
:class:`ExactGP`, the ``grouped`` and ``blr`` models) f has been integrated out, and ``sample`` draws
from the marginal N(m, Q_ff + σ²I), which ignores y: replicates far too wide for a posterior predictive
check, and an ``az.loo_pit`` that cannot see a misfit. :func:`posterior_replicates` replays the model at
every posterior draw with the data observed and asks the observed site's distribution for
``sample_replicates(key, y)`` (f drawn from its conditional given y, then the noise) where it has one,
``sample(key)`` otherwise. :func:`bayes_rbfn.infer.predictive.predict_model` replays a model the same way
(:func:`replay`) for the per-draw conditional of f* at new inputs.

References
----------
[1] Gelman, A., Carlin, J. B., Stern, H. S., Dunson, D. B., Vehtari, A. & Rubin, D. B. (2013). *Bayesian
    Data Analysis*, 3rd ed., §6.3 (posterior predictive checking: y_rep ~ p(y_rep | y)).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from bayes_rbfn.io.arviz_compat import put_variable

__all__ = ["flat_draws", "observed_node", "posterior_replicates", "replay", "replicate_site"]


def replay(model: Callable, values: Mapping[str, Any], key: jax.Array, args, kwargs) -> dict:
    """The trace of ``model(*args, **kwargs)`` at one posterior draw ``values`` {site: value} (traceable).

    Every site named in ``values`` takes its value (``numpyro.handlers.substitute``); any other sample site
    is drawn from ``key``.
    """
    from numpyro import handlers

    model = handlers.seed(handlers.substitute(model, data=dict(values)), key)
    return handlers.trace(model).get_trace(*args, **kwargs)


def observed_node(trace: Mapping[str, Any], site: str) -> dict:
    """The trace's node of the observed sample ``site``; a ValueError saying why when it is not one."""
    if site not in trace:
        raise ValueError(f"site: the model has no site {site!r}")
    node = trace[site]
    if node["type"] != "sample" or not node["is_observed"]:
        raise ValueError(f"site: {site!r} is not an observed sample site (pass the data it observes)")
    return node


def flat_draws(samples: Any) -> tuple[dict[str, np.ndarray], tuple[int, ...]]:
    """Posterior draws as {site: (T, ...)} NumPy arrays, and the shape of their leading draw axes.

    Args:
        samples: a dict {site: (T, ...)} (``mcmc.get_samples()``), or an ArviZ fit with a ``posterior``
            group (``az.from_numpyro``), whose (chain, draw) axes are flattened.

    Returns:
        ({site: (T, ...)}, (T,) for a dict or (chains, draws) for an ArviZ fit).
    """
    if hasattr(samples, "posterior"):
        post = samples.posterior
        chains, draws = post.sizes["chain"], post.sizes["draw"]
        flat = {n: np.asarray(v.values).reshape(chains * draws, *v.shape[2:]) for n, v in post.items()}
        return flat, (chains, draws)
    if not (isinstance(samples, Mapping) and samples):
        raise ValueError(
            "samples: expected a dict {site: draws} or an ArviZ fit (InferenceData, DataTree) with a "
            "posterior group"
        )
    flat = {n: np.asarray(v) for n, v in samples.items()}
    sizes = {v.shape[0] if v.ndim else -1 for v in flat.values()}
    if len(sizes) != 1 or -1 in sizes:
        raise ValueError("samples: every site needs the same number of draws along its first axis")
    return flat, (sizes.pop(),)


def replicate_site(model: Callable, values: Mapping[str, Any], key: jax.Array, site: str, args, kwargs):
    """One replicate of the observed ``site`` at one posterior draw ``values`` (traceable).

    Replays ``model(*args, **kwargs)`` with the draw substituted (:func:`replay`; sites missing from
    ``values`` are drawn from ``key``), then draws from the site's distribution:
    ``sample_replicates(key, y)`` for a GP marginal, ``sample(key)`` for a factorised likelihood (already
    conditional through the latent draws).
    """
    k_model, k_site = jax.random.split(key)
    node = observed_node(replay(model, values, k_model, args, kwargs), site)
    conditional = getattr(node["fn"], "sample_replicates", None)
    if conditional is not None:
        return conditional(k_site, node["value"])
    return node["fn"].sample(k_site)


def posterior_replicates(
    model: Callable,
    samples: Any,
    *args: Any,
    seed: int | jax.Array = 0,
    site: str = "y",
    batch_size: int = 64,
    **kwargs: Any,
) -> Any:
    """Posterior predictive replicates y_rep ~ p(y_rep | y) of a model's observed site, one per draw.

    Use it where NumPyro's ``Predictive`` would be used for a posterior predictive check: for a site whose
    distribution is a GP marginal (``SparseGP``, ``ExactGP``) ``Predictive`` draws from the marginal and
    ignores y, while this draws f from its conditional given y at each posterior draw, then the noise::

        mcmc.run(key, X, Z, y)
        y_rep = bayes_rbfn.posterior_replicates(model, mcmc.get_samples(), X, Z, y)   # (S, N)
        idata = az.from_numpyro(mcmc, posterior_predictive={"y": y_rep})

    Args:
        model: the NumPyro model function.
        samples: posterior draws, a dict {site: (S, ...)} (``mcmc.get_samples()``), or an InferenceData
            with a ``posterior`` group (``az.from_numpyro``), whose draws are then all used.
        *args: the model's positional arguments *with the observed data* (as given to ``MCMC.run``).
        seed: an int or a PRNG key.
        site: the observed site to replicate.
        batch_size: draws evaluated per compiled batch.
        **kwargs: the model's keyword arguments *with the observed data* (as given to ``MCMC.run``).

    Returns:
        For a dict, an array (S, *event_shape) of replicates; for an InferenceData, the same object with
        ``posterior_predictive[site]`` of shape (chain, draw, ...) (replaced if present).
    """
    key = jax.random.PRNGKey(seed) if isinstance(seed, int) else seed
    is_idata = hasattr(samples, "posterior")
    flat, lead = flat_draws(samples)
    total = int(np.prod(lead))

    batched = jax.jit(jax.vmap(lambda k, values: replicate_site(model, values, k, site, args, kwargs)))
    keys = jax.random.split(key, total)
    y_rep = np.concatenate(
        [
            np.asarray(batched(keys[s : s + batch_size], {n: v[s : s + batch_size] for n, v in flat.items()}))
            for s in range(0, total, batch_size)
        ]
    )
    if not is_idata:
        return y_rep
    import xarray as xr

    post = samples.posterior
    y_rep = y_rep.reshape(*lead, *y_rep.shape[1:])
    dims = ("chain", "draw", *(f"{site}_dim_{i}" for i in range(y_rep.ndim - 2)))
    array = xr.DataArray(
        y_rep, dims=dims, coords={"chain": post["chain"].values, "draw": post["draw"].values}
    )
    put_variable(samples, "posterior_predictive", site, array)
    return samples
