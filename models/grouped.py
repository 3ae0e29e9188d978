"""``grouped`` — hierarchical SoR GP for grouped data (series, subjects, countries).

Each group g has its own hyperparameters drawn from a shared population distribution (partial pooling),
non-centred so NUTS sees unit-scale variables:

    log θ_g = μ_θ + τ_θ z_{θ,g},   z_{θ,g} ~ N(0, 1),   μ_θ ~ N(m_θ, s_θ),   τ_θ ~ HalfNormal(0.5)

for θ ∈ {lengthscale (one per input dimension), variance, noise, …}, where N(m_θ, s_θ) is the log-scale
version of the family's default (or the user's log-normal) prior. Within a group,
y_g ~ N(c_g, Q_ff^(g) + σ_g² I) (SoR), with shared inducing inputs Z (M, D) or per-group Z (G, M, D).

The groups are conditionally independent given the population, so their values and observations sit in
a ``numpyro.plate`` over groups. All groups are evaluated as one batched computation: the data are packed
into a padded (G, N_max) layout (:class:`~bayes_rbfn.models.layout.Layout` tells the drivers where each
observation sits in it) and the SoR factorisation (the one streamed pass,
:func:`bayes_rbfn.gp.woodbury_sums.sor_factor`) is ``vmap``-ed over groups. Padding is masked exactly:
the pass gives a padded point weight 0, so it adds nothing to any of the Woodbury sums, and the 2π-term
counts only the real points. Groups of unequal size are therefore handled without a Python loop.

Posterior variables: per-group ``lengthscale``, ``variance``, ``noise`` (dims group[, input_dim]) and
population ``<name>_mu``, ``<name>_tau`` (and the raw ``<name>_z``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from bayes_rbfn.gp import block_loo, linalg, moments, sparse, woodbury_sums
from bayes_rbfn.models.common import ModelMarginal, observe
from bayes_rbfn.models.layout import Layout
from bayes_rbfn.models.spec import ModelConfig, ModelSpec

__all__ = [
    "SPEC",
    "TAU_SCALE",
    "log_density",
    "log_likelihood",
    "model",
    "predict",
    "prepare",
    "read_layout",
    "simulate",
]


#: Prior scale of the population spread τ of every log-hyperparameter.
TAU_SCALE = 0.5


def _lognormal_params(prior: dist.Distribution, name: str) -> tuple[Any, Any]:
    base = prior.base_dist if isinstance(prior, dist.Independent) else prior
    if not isinstance(base, dist.LogNormal):
        raise ValueError(
            f"priors: the grouped model needs a LogNormal prior for {name!r} (its population location), "
            f"got {type(base).__name__}"
        )
    return base.loc, base.scale


def prepare(X, y, Z, y_offset, group, group_pred, X_pred) -> tuple[dict, Layout]:
    """Pack (N,) data into the padded (G, N_max) layout; validate the group codes.

    Returns:
        (data, layout): the model's data {X (G, N_max, D), y (G, N_max), mask, Z, y_offset (G,)}, and its
        :class:`~bayes_rbfn.models.layout.Layout` (where each observation sits in the padding, the group
        code of each prediction input, the codes the fit stores).
    """
    if group is None:
        raise ValueError("group: the grouped model needs a group code for every observation")
    group = np.asarray(group)
    n = X.shape[0]
    if group.shape != (n,):
        raise ValueError(f"group: expected shape ({n},), got {group.shape}")
    if not np.issubdtype(group.dtype, np.integer):
        raise ValueError("group: expected integer group codes 0..G-1")
    G = int(group.max()) + 1
    counts = np.bincount(group, minlength=G)
    if group.min() < 0 or np.any(counts == 0):
        raise ValueError("group: codes must be 0..G-1 with every group present")
    n_max = int(counts.max())
    order = np.argsort(group, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    flat_index = padded_index(group)
    position = flat_index - group * n_max

    Xn = np.asarray(X)
    yn = np.asarray(y)
    D = Xn.shape[1]
    X_pad = np.zeros((G, n_max, D), dtype=Xn.dtype)
    # padded rows repeat a real input of the group so kernels stay well defined
    X_pad[:] = Xn[order[starts]][:, None, :]
    y_pad = np.zeros((G, n_max), dtype=yn.dtype)
    mask = np.zeros((G, n_max), dtype=bool)
    X_pad[group, position] = Xn
    y_pad[group, position] = yn
    mask[group, position] = True

    if isinstance(y_offset, str):
        offset = np.bincount(group, weights=yn, minlength=G) / counts
    else:
        offset = np.broadcast_to(np.asarray(y_offset, dtype=float), (G,)).copy()

    if Z is None:
        raise ValueError("Z: the grouped model needs inducing inputs")
    Z = np.asarray(Z)
    if Z.ndim == 3 and Z.shape[0] != G:
        raise ValueError(f"Z: per-group inducing inputs need shape (G={G}, M, D), got {Z.shape}")

    if group_pred is None:
        if X_pred is not None and np.asarray(X_pred).shape[0] == n and np.array_equal(np.asarray(X_pred), Xn):
            group_pred = group
        else:
            raise ValueError("group_pred: give the group code of every prediction input")
    group_pred = np.asarray(group_pred)
    if group_pred.ndim != 1 or (group_pred.size and (group_pred.min() < 0 or group_pred.max() >= G)):
        raise ValueError(f"group_pred: expected codes in 0..{G - 1}")

    dtype = Xn.dtype
    data = {
        "X": jnp.asarray(X_pad),
        "y": jnp.asarray(y_pad),
        "mask": jnp.asarray(mask),
        "Z": jnp.asarray(Z, dtype=dtype),
        "y_offset": jnp.asarray(offset, dtype=dtype),
    }
    padded = Layout(
        observation_index=flat_index,
        predictive_args=(group_pred.astype(np.int32),),
        sizes={"group": G},
        constant_data={"obs_group": group},
        predictions_constant_data={"pred_group": group_pred},
        dims={
            "y_offset": ["group"],
            "obs_group": ["obs"],
            "pred_group": ["point"],
            **({"Z": ["group", "inducing", "input_dim"]} if Z.ndim == 3 else {}),
        },
    )
    return data, padded


def read_layout(constant_data: Any, predictions_constant_data: Any) -> dict:
    """The group codes a fit stored (:func:`prepare`'s ``constant_data``), as ``prepare``'s arguments.

    Args:
        constant_data: the fit's group of that name (its ``obs_group``).
        predictions_constant_data: the fit's group of that name (its ``pred_group``).

    Returns:
        {"group": the observations' codes, "group_pred": the prediction inputs'}.
    """
    return {
        "group": np.asarray(constant_data["obs_group"].values),
        "group_pred": np.asarray(predictions_constant_data["pred_group"].values),
    }


def padded_index(group: np.ndarray) -> np.ndarray:
    """Where each observation sits in the flattened (G, N_max) layout, shape (N,).

    group · N_max + its rank within the group (in the order of the observations).
    """
    counts = np.bincount(group)
    order = np.argsort(group, kind="stable")
    position = np.empty(group.size, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    position[order] = np.arange(group.size) - np.repeat(starts, counts)
    return group * int(counts.max()) + position


def _group_values(config: ModelConfig, G: int) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in (*config.family.params, "noise"):
        if name in config.fixed:
            value = jnp.asarray(config.fixed[name])
            values[name] = jnp.broadcast_to(value, (G, *value.shape))
            continue
        prior = config.priors[name]
        loc, scale = _lognormal_params(prior, name)
        shape = prior.event_shape
        mu = numpyro.sample(
            f"{name}_mu", dist.Normal(jnp.broadcast_to(loc, shape), scale).to_event(len(shape))
        )
        tau = numpyro.sample(f"{name}_tau", dist.HalfNormal(TAU_SCALE))
        with numpyro.plate("group", G):
            z = numpyro.sample(f"{name}_z", dist.Normal(jnp.zeros(shape), 1.0).to_event(len(shape)))
        values[name] = numpyro.deterministic(name, jnp.exp(mu + tau * z))
    return values


def _group_factor(params_g, X_g, y_g, mask_g, Z_g, offset_g, config: ModelConfig):
    """One group's SoR Woodbury factor for its centred, masked targets, with what its LOO needs."""
    kernel = config.family.build(params_g)
    noise = params_g["noise"]
    r = (y_g - offset_g) * mask_g
    factor = woodbury_sums.sor_factor(kernel, X_g, r, Z_g, noise, config.jitter, mask=mask_g)
    return factor, kernel, X_g, r, Z_g, noise, mask_g


def _z_axis(data: dict) -> int | None:
    return 0 if data["Z"].ndim == 3 else None


def _per_group(params: dict, data: dict, config: ModelConfig, fn):
    by_group = {k: params[k] for k in (*config.family.params, "noise")}
    return jax.vmap(
        lambda p, X, y, m, Z, c: fn(*_group_factor(p, X, y, m, Z, c, config)),
        in_axes=(0, 0, 0, 0, _z_axis(data), 0),
    )(by_group, data["X"], data["y"], data["mask"], data["Z"], data["y_offset"])


def model(data: dict, config: ModelConfig) -> None:
    """NumPyro model: population (μ, τ) → per-group hyperparameters → y_g ~ N(c_g, Q^(g) + σ_g² I) per group.

    ``data``: the padded layout of :func:`prepare` (``X`` (G, N_max, D), ``y`` (G, N_max) or None,
    ``mask``, ``Z``, ``y_offset`` (G,)); simulated y are 0 at the padding.
    """
    G, N_max = data["X"].shape[:2]
    values = _group_values(config, G)
    marginal = ModelMarginal(
        log_density, simulate, values, data, config, (N_max,), replicate, batch_shape=(G,)
    )
    with numpyro.plate("group", G):
        observe(marginal, data)


def simulate(key: jax.Array, sample_shape: tuple, params: dict, data: dict, config: ModelConfig) -> jax.Array:
    """Draws of the padded y (G, N_max): each group's SoR marginal N(c_g, Q^(g) + σ_g² I); 0 at the padding.

    Drawn by :meth:`~bayes_rbfn.models.distributions.SparseGP.sample` in O(NM).
    """
    from bayes_rbfn.models.distributions import SparseGP

    names = (*config.family.params, "noise")

    def one_group(p, X_g, Z_g, c_g, key_g):
        marginal = SparseGP(config.family.build(p), X_g, Z_g, p["noise"], mean=c_g, jitter=config.jitter)
        return marginal.sample(key_g, sample_shape)

    G = data["y_offset"].shape[0]
    by_group = {k: params[k] for k in names}
    draws = jax.vmap(one_group, in_axes=(0, 0, _z_axis(data), 0, 0), out_axes=-2)(
        by_group, data["X"], data["Z"], data["y_offset"], jax.random.split(key, G)
    )
    return jnp.where(data["mask"], draws, 0.0)


def replicate(
    key: jax.Array, sample_shape: tuple, params: dict, data: dict, config: ModelConfig
) -> jax.Array:
    """Posterior predictive replicates of the padded y (G, N_max) given the observed y; 0 at the padding.

    Each group's SoR conditional (:func:`bayes_rbfn.gp.sparse.replicates`) under its own factor.
    """
    by_group = {k: params[k] for k in (*config.family.params, "noise")}

    def one_group(p, X_g, y_g, mask_g, Z_g, c_g, key_g):
        factor, kernel, X_g, r, Z_g, noise, _ = _group_factor(p, X_g, y_g, mask_g, Z_g, c_g, config)
        return c_g + sparse.replicates("sor", factor, kernel, X_g, r, Z_g, noise, key_g, sample_shape)

    G = data["y_offset"].shape[0]
    draws = jax.vmap(one_group, in_axes=(0, 0, 0, 0, _z_axis(data), 0, 0), out_axes=-2)(
        by_group, data["X"], data["y"], data["mask"], data["Z"], data["y_offset"], jax.random.split(key, G)
    )
    return jnp.where(data["mask"], draws, 0.0)


@partial(jax.jit, static_argnames="config")
def log_density(params: dict, data: dict, config: ModelConfig):
    """log N(y_g | c_g, Q^(g) + σ_g² I) of each group g, shape (G,), one batched computation.

    -inf where a group's factorisation fails.
    """
    logp = _per_group(params, data, config, lambda f, *_: f.log_marginal_likelihood())
    return linalg.finite_or_neg_inf(logp)


def log_likelihood(params: dict, data: dict, config: ModelConfig):
    """Per-group SoR LOO conditionals in the padded layout (G·N_max,) (the layout orders them)."""

    def loo(factor, kernel, X_g, r, Z_g, noise, mask_g):
        return block_loo.sor_loo(
            factor,
            kernel,
            Z_g,
            X_g,
            r,
            noise**2,
            mask=mask_g,
            exact=config.loo_exact,
            statistic=config.loo_statistic,
        )

    return _per_group(params, data, config, loo).reshape(-1)


def predict(params: dict, data: dict, config: ModelConfig, X_test, group_test):
    """Per-draw SoR moments at X_test, each point under its own group's hyperparameters and factor.

    :func:`bayes_rbfn.gp.moments.weight_space_moments` with that group's weight posterior.
    """
    R, weights = _per_group(params, data, config, lambda f, *_: (f.weight_cov_factor(), f.weight_mean()))
    names = (*config.family.params, "noise")
    shared_Z = data["Z"].ndim == 2

    def one_point(x, g):
        kernel = config.family.build({k: params[k][g] for k in names})
        Z = data["Z"] if shared_Z else data["Z"][g]
        mean, var, _ = moments.weight_space_moments(R[g], weights[g], kernel.inducing_cross(Z, x[None, :]))
        return mean[0] + data["y_offset"][g], var[0]

    return jax.vmap(one_point)(X_test, group_test)


def layout(
    X: Any,
    y: Any,
    Z: Any,
    *,
    y_offset: Any,
    constant_mean: bool,
    group: Any = None,
    group_pred: Any = None,
    X_pred: Any = None,
) -> tuple[dict, Layout]:
    """:func:`prepare` as the spec's ``prepare`` hook: a constant prior mean is each group's own mean."""
    return prepare(X, y, Z, "mean" if constant_mean else y_offset, group, group_pred, X_pred)


SPEC = ModelSpec(
    name="grouped",
    model=model,
    predict=predict,
    log_likelihood=log_likelihood,
    uses_inducing=True,
    description="hierarchical SoR GP for grouped data: per-group hyperparameters, partial pooling",
    grouped=True,
    prepare=layout,
    read_layout=read_layout,
    predictive_inputs=("group",),
    rank=4,
)
