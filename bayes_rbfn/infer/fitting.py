"""Fit a model of the collection and return ArviZ InferenceData (docs/output.md).

:func:`fit` is a composition: validate → :func:`build_model` (the model bound to its data: kernel family,
priors, inducing inputs, the spec's data layout) → the one NUTS loop of :mod:`bayes_rbfn.infer.sampler`
→ per draw the analytic predictive moments and the leave-one-out conditional log-likelihood, packed into
InferenceData with exactly the groups and names of docs/output.md. It prints nothing (a progress bar aside,
when ``progress=True``). Reading a fit back from its InferenceData is :mod:`bayes_rbfn.infer.schema`'s.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from bayes_rbfn.defaults import DEFAULT_NUM_INDUCING, INITS, MAP_SEARCH_POINTS
from bayes_rbfn.defaults import default_num_inducing as num_inducing_for
from bayes_rbfn.gp.streaming import check_precision, to_host
from bayes_rbfn.gp.validation import (
    INPUT_RELATIVE_SPREAD,
    INPUT_SCALES,
    TARGET_SCALES,
    check_positive,
    check_positive_int,
    check_scale,
    check_X,
    check_y,
    check_Z,
    count_distinct_rows,
)
from bayes_rbfn.infer import diagnostics
from bayes_rbfn.infer.failures import (
    NO_VALID_START,
    check_finite,
    check_result_size,
    estimated_params,
    explain_degenerate,
    result_bytes,
)
from bayes_rbfn.infer.predictive import draw_work, model_moments
from bayes_rbfn.infer.processes import check_same, common_subsample, data_summary, spread_over_processes
from bayes_rbfn.infer.programs import by_program
from bayes_rbfn.infer.sampler import SamplerSettings, nuts_kernel, resolve_init, run_chains, sample_stats
from bayes_rbfn.infer.schema import kernel_kind, posterior_params, rebuild, rebuild_inputs
from bayes_rbfn.io import arviz_compat
from bayes_rbfn.models import ModelConfig, ModelSpec, get_model, model_specs
from bayes_rbfn.models.distributions import deferred_loo
from bayes_rbfn.models.families import KernelFamily, data_scales, get_family
from bayes_rbfn.models.layout import Layout
from bayes_rbfn.models.likelihoods import Likelihood, get_likelihood
from bayes_rbfn.models.priors import scales_from
from bayes_rbfn.runtime import available_memory, single_threaded_blas

__all__ = [
    "DEFAULT_NUM_INDUCING",
    "INITS",
    "Float32Warning",
    "GenerativeModel",
    "add_posterior_predictive",
    "add_prior_draws",
    "backtest_scores",
    "build_model",
    "check_fit",
    "default_num_inducing",
    "fit",
    "holdout_split",
    "pointwise_loo",
    "posterior_params",
    "prior_predictive",
    "rebuild",
    "sample_posterior",
    "score_holdout",
    "to_inference_data",
]


def default_num_inducing(X: Any, samples_weights: bool = False) -> int:
    """M for inputs X (N, D) when none is given, at most the distinct inputs.

    :func:`bayes_rbfn.defaults.default_num_inducing`: 64 for one input; with several, more where N is
    small, and more on an accelerator than on the CPU.
    """
    X = np.asarray(X)
    X = X[:, None] if X.ndim == 1 else X
    return num_inducing_for(
        X.shape[0],
        X.shape[1],
        count_distinct_rows(X),
        samples_weights=samples_weights,
        accelerator=jax.default_backend() != "cpu",
    )


#: Draws per chain of the posterior_predictive group that fit() writes by default.
DEFAULT_PREDICTIVE_DRAWS = 1000

#: The named prior means of ``fit(mean=...)`` (besides a number or a callable).
MEANS = ("constant", "zero", "linear")


class Float32Warning(UserWarning):
    """JAX computes in float32 (its ``jax_enable_x64`` flag is off), so :func:`fit` runs in float32."""


#: Whether this process has had its :class:`Float32Warning` (it is given once).
_float32_warned = [False]


def _warn_if_float32() -> None:
    """Issue :class:`Float32Warning`, once per process, when JAX's default float is float32."""
    if _float32_warned[0] or jax.dtypes.canonicalize_dtype(np.float64) == np.float64:
        return
    _float32_warned[0] = True
    warnings.warn(
        "JAX's float64 is off (jax_enable_x64), so this fit runs in float32 (about 7 significant digits, "
        "and a larger jitter on K_uu): call numpyro.enable_x64() before fitting, before any other JAX "
        "computation, for float64 (the library never turns it on itself)",
        Float32Warning,
        stacklevel=3,
    )


def _sampler_settings(sampler: SamplerSettings | None, **given: Any) -> SamplerSettings:
    """``sampler``, or the settings given by name (the rest at :class:`SamplerSettings`' defaults)."""
    named = {k: v for k, v in given.items() if v is not None}
    if sampler is None:
        return SamplerSettings(**named)
    if not isinstance(sampler, SamplerSettings):
        raise ValueError(f"sampler: expected a SamplerSettings, got {type(sampler).__name__}")
    if named:
        raise ValueError(
            f"sampler: give the NUTS settings either as sampler= or by name, not both ({', '.join(named)})"
        )
    return sampler


def _split_sampler_settings(sampler: SamplerSettings | None, options: dict[str, Any]) -> SamplerSettings:
    """Take the sampler's fields out of ``fit``'s ``options`` (in place) and refuse any unknown one."""
    sampler_fields = {f.name for f in dataclasses.fields(SamplerSettings)}
    settings = _sampler_settings(sampler, **{k: options.pop(k) for k in list(options) if k in sampler_fields})
    unknown = sorted(set(options) - MODEL_OPTIONS)
    if unknown:
        raise ValueError(f"{unknown[0]}: not an option of fit (see help(bayes_rbfn.fit))")
    return settings


def _non_negative_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"{name}: must be a whole number ≥ 0 (or None), got {value!r}")
    return int(value)


def _resolve_mean(mean: Any, spec: ModelSpec, likelihood: Likelihood, y: np.ndarray) -> tuple[Any, float]:
    """(config.mean, data["y_offset"]) for ``fit(mean=...)``: see :func:`fit`."""
    constant = likelihood.constant_mean(y)
    if isinstance(mean, str):
        if mean not in MEANS:
            raise ValueError(
                f"mean: expected one of {', '.join(MEANS)}, a number or a callable, got {mean!r}"
            )
        if mean == "linear" and not spec.takes_linear_mean:
            raise ValueError(f"mean: the {spec.name!r} model takes a constant mean only (got 'linear')")
        return ("constant", 0.0) if mean == "zero" else (mean, constant)
    if callable(mean):
        if not spec.takes_linear_mean:
            raise ValueError(f"mean: the {spec.name!r} model takes a constant mean only (got a callable)")
        return mean, 0.0
    if isinstance(mean, bool) or not isinstance(mean, int | float | np.integer | np.floating):
        raise ValueError(f"mean: expected one of {', '.join(MEANS)}, a number or a callable, got {mean!r}")
    if not np.isfinite(mean):
        raise ValueError(f"mean: must be finite, got {mean!r}")
    return "constant", float(mean)


def _default_priors(spec, family, likelihood: Likelihood, scales, mean_kind: Any, offset: float) -> dict:
    """Default priors: the kernel family's on the latent scale, the likelihood's, the linear mean's."""
    if spec.family is not None:  # blr: α and β, no separate noise
        return family.default_priors(scales)
    # Counts and labels: f is a log-rate or log-odds, whose amplitude has no data units.
    latent = scales if likelihood.link == "identity" else dataclasses.replace(scales, y_sd=1.0)
    priors = {**family.priors(latent), **likelihood.default_priors(scales.y_sd)}
    if mean_kind == "linear":
        priors["mean_intercept"] = dist.Normal(offset, 2.0 * latent.y_sd)
        slope_scale = jnp.asarray(2.0 * latent.y_sd / latent.input_range)
        priors["mean_slope"] = dist.Normal(jnp.zeros_like(slope_scale), slope_scale).to_event(1)
    return priors


def _choose_inducing(
    method: str, X: Any, y: Any, M: int, spec: ModelSpec, config: ModelConfig, seed: int
) -> np.ndarray:
    """Z for ``fit(inducing_method=...)`` by :func:`bayes_rbfn.infer.inducing.inducing_inputs`."""
    from bayes_rbfn.infer.inducing import LEARNED_METHODS, inducing_inputs

    if method in LEARNED_METHODS:
        lik = config.likelihood
        if not lik.marginalisable or spec.grouped or spec.family is not None or config.mesh is not None:
            raise ValueError(
                f"inducing_method: {method!r} searches the VFE bound of a Gaussian GP on one device; not "
                f"for the {spec.name!r} model with the {lik.name!r} likelihood here (use 'kmeans')"
            )
    Z, _ = inducing_inputs(
        X,
        y,
        M,
        method=method,
        kernel=config.family,
        mean=config.mean if isinstance(config.mean, str) else "constant",
        priors=config.priors,
        fixed=config.fixed,
        jitter=config.jitter,
        seed=seed,
    )
    return Z


def _resolve_priors(defaults: dict, priors: Mapping[str, Any] | None, fixed: Mapping[str, Any]) -> dict:
    resolved = dict(defaults)
    for name, prior in (priors or {}).items():
        if name not in resolved and name not in ("lengthscale_mu", "lengthscale_tau"):
            raise ValueError(
                f"priors: unknown hyperparameter {name!r}; this model samples {', '.join(resolved)}"
            )
        if not isinstance(prior, dist.Distribution):
            raise ValueError(f"priors: the prior for {name!r} must be a numpyro distribution")
        resolved[name] = prior
    for name in fixed:
        if name not in resolved:
            raise ValueError(f"fixed: unknown hyperparameter {name!r}; choose from {', '.join(resolved)}")
    return resolved


#: Draws :func:`_map_draws` evaluates side by side in each step of its sequential map, outside the band of
#: per-draw working memory (elements) ``ONE_DRAW_PER_STEP`` where it takes them one at a time.
DRAWS_PER_STEP = 4
ONE_DRAW_PER_STEP = (1 << 17, 1 << 20)

#: Elements of output (draws × values per draw) one call of :func:`_map_draws`'s program returns at most.
MAX_OUTPUT_PER_CALL = 1 << 25

#: Rows of the data, drawn from every process, from which a fit whose data are spread over processes
#: chooses its inducing inputs (:func:`bayes_rbfn.infer.processes.common_subsample`).
INDUCING_SUBSAMPLE = 20_000


def _draws_per_step(per_draw_elements: int) -> int:
    """Draws :func:`_map_draws` evaluates side by side (``vmap``) in one step of its sequential map.

    A wide ``vmap`` makes every chunk's arrays that many times larger and runs the per-draw Cholesky and
    triangular solves as batched LAPACK loops, which on a CPU gained nothing beyond a few draws at a time
    on fit's LOO log-likelihood; tiny draws (dozens of points) take four, so a step's fixed cost is shared.
    """
    lo, hi = ONE_DRAW_PER_STEP
    return 1 if lo <= int(per_draw_elements) < hi else DRAWS_PER_STEP


def _map_draws(
    fn: Any, params: Mapping[str, Any], per_draw_elements: int, data: Any = None, values_per_draw: int = 1
) -> np.ndarray:
    """Evaluate ``fn(draw_params, data)`` for every draw: a sequential map over the draws in one program.

    A few draws go side by side per step where each is small (:func:`_draws_per_step`).

    ``data`` is an argument of the compiled function, not a constant folded into it: compiling does not grow
    with N and a refit on data of the same shapes reuses the program. The draws go in as few calls as keep
    each call's output (``values_per_draw`` per draw) within :data:`MAX_OUTPUT_PER_CALL` elements, split
    evenly (the last call padded by fewer draws than there are calls; one compiled shape).
    """
    leaves = jax.tree_util.tree_leaves(params)
    chains, draws = leaves[0].shape[:2]
    total = chains * draws
    flat = jax.tree_util.tree_map(lambda a: a.reshape((total, *a.shape[2:])), params)
    calls = -(-total // max(1, MAX_OUTPUT_PER_CALL // max(int(values_per_draw), 1)))
    batch = -(-total // calls)
    step = min(batch, _draws_per_step(per_draw_elements))

    def over_draws(part: Any, data: Any) -> jax.Array:
        return jax.lax.map(lambda p: fn(p, data), part, batch_size=step)

    compiled = by_program(over_draws)
    out = []
    for s in range(0, total, batch):
        part = jax.tree_util.tree_map(lambda a, s=s: a[s : s + batch], flat)
        k = min(batch, total - s)
        if k < batch:
            part = jax.tree_util.tree_map(
                lambda a, k=k: jnp.concatenate([a, jnp.repeat(a[-1:], batch - k, 0)]), part
            )
        out.append(to_host(compiled(part, data))[:k])
    result = np.concatenate(out, axis=0)
    return result.reshape(chains, draws, *result.shape[1:])


def pointwise_loo(spec: ModelSpec, config: ModelConfig, params: Mapping[str, Any], work: int, data: Any):
    """The stored log-likelihood: ``spec.log_likelihood`` at every draw, shape (chains, draws, ...).

    For the Gaussian-marginal models these are the LOO conditionals of
    :func:`bayes_rbfn.gp.block_loo.sor_loo`. Their Woodbury form has no digits left at a point the model
    interpolates (leverage near 1); there the value must come from a leave-block-out pass whose program
    costs seconds to compile. So the draws go through :func:`bayes_rbfn.models.distributions.deferred_loo`
    (via ``ModelConfig.loo_exact``): all with that pass deferred, then only the draws that need it with the
    pass.
    """
    chains, draws = np.shape(next(iter(params.values())))[:2]
    flat = {k: np.asarray(v).reshape(chains * draws, *np.shape(v)[2:]) for k, v in params.items()}

    def evaluate(some: dict, exact: Any) -> np.ndarray:
        bound = dataclasses.replace(config, loo_exact=exact)
        one_chain = {k: v[None] for k, v in some.items()}  # _map_draws takes (chains, draws, ...)
        return _map_draws(
            lambda p, d: spec.log_likelihood(p, d, bound), one_chain, work, data, np.size(data["y"])
        )[0]

    values = deferred_loo(evaluate, flat)
    return values.reshape(chains, draws, *values.shape[1:])


@dataclass(frozen=True, eq=False)
class GenerativeModel:
    """A model of the collection bound to its data: exactly what :func:`fit` samples, as a NumPyro model.

    ``model(data, prior_values)`` is a plain NumPyro model ending in the observed site ``y``; ``args`` are
    its arguments with the data's y, ``prior_args`` the same with y = None, so that::

        gm = bayes_rbfn.build_model("sor", X, y)
        prior = numpyro.infer.Predictive(gm.model, num_samples=500)(key, *gm.prior_args)  # prior predictive
        mcmc = numpyro.infer.MCMC(numpyro.infer.NUTS(gm.model), num_warmup=500, num_samples=500)
        mcmc.run(key, *gm.args)
        post = numpyro.infer.Predictive(gm.model, mcmc.get_samples())(key, *gm.prior_args)  # posterior pred.

    The priors' numeric parameters (which adapt to the data's scales) are an argument, not constants, so
    that data of the same shapes give the same compiled program.

    Attributes:
        spec, config: the model of the collection and its settings. data: the model's data dict (the
        padded layout for ``grouped``). layout: what the drivers know of that layout
        (:class:`~bayes_rbfn.models.layout.Layout`).
        X, y, Z, X_pred: the checked arrays.
    """

    spec: ModelSpec
    config: ModelConfig
    data: dict
    layout: Layout
    X: Any
    y: Any
    Z: Any
    X_pred: Any

    def model(self, data: dict, prior_values: dict) -> None:
        """The NumPyro model (see the class docstring)."""
        config = dataclasses.replace(self.config, priors=_with_values(self.config.priors, prior_values))
        self.spec.model(data, config)

    @property
    def args(self) -> tuple[dict, dict]:
        """(data, prior parameters): the arguments of :meth:`model` conditioned on the observed y."""
        return self.data, _numeric_values(self.config.priors)

    @property
    def prior_args(self) -> tuple[dict, dict]:
        """The arguments of :meth:`model` with y = None: ``Predictive`` then simulates y."""
        return {**self.data, "y": None}, _numeric_values(self.config.priors)

    def subset_args(self, size: int, seed: int = 0) -> tuple[dict, dict] | None:
        """:attr:`args` on a random subset of ``size`` observations, or None where it cannot be cut so.

        The subset is the first stage of the mode search on a large data set
        (:func:`~bayes_rbfn.infer.sampler.laplace_start`). None where the layout cannot be cut that way
        (grouped, or sharded over devices) or ``size`` is not below the number of observations.

        Only X and y are cut: the inducing inputs, the prior mean's offset and the inputs' centre stay
        those of the whole data set, so the subset's potential has the same parameters and meaning.
        """
        N = self.X.shape[0]
        if not self.layout.flat or self.config.mesh is not None or size >= N:
            return None
        keep = np.sort(np.random.default_rng([seed, N, size]).choice(N, size, replace=False))
        data, priors = self.args
        return {**data, "X": data["X"][keep], "y": data["y"][keep]}, priors

    def record(self) -> dict:
        """What defines the model besides :attr:`args` (arrays), JSON-able: recorded in a checkpoint."""
        return {
            "model": self.spec.name,
            "family": self.config.family.name,
            "fixed": {k: np.asarray(v).tolist() for k, v in sorted(self.config.fixed.items())},
            "hyperprior": bool(self.config.hyperprior),
            "jitter": self.config.jitter,
            # Only when set, so that the records of earlier checkpoints (float64) stay the same.
            **({"precision": self.config.precision} if self.config.precision != "float64" else {}),
        }


def build_model(
    model: str | ModelSpec,
    X: Any,
    y: Any,
    *,
    Z: Any = None,
    num_inducing: int | None = None,
    kernel: Any = "se",
    priors: Mapping[str, Any] | None = None,
    fixed: Mapping[str, Any] | None = None,
    noise: float | None = None,
    hyperprior: bool = False,
    likelihood: str = "gaussian",
    mean: Any = "constant",
    group: Any = None,
    group_pred: Any = None,
    inducing_method: str = "kmeans",
    jitter: float | None = None,
    precision: str = "float64",
    X_pred: Any = None,
    seed: int = 0,
    _mesh_for: tuple = (False, 1, None),
) -> GenerativeModel:
    """The model :func:`fit` samples, bound to the data, for NumPyro's own tools (``Predictive``, ``MCMC``).

    Takes the model-defining arguments of :func:`fit` (same meanings, same checks) and returns a
    :class:`GenerativeModel`. ``y`` sets the default priors' scales and the constant mean; it is the
    observed value in ``args``.
    """
    spec = get_model(model)
    X, y, lik = _checked_data(spec, X, y, likelihood)
    mean_kind, offset = _resolve_mean(mean, spec, lik, np.asarray(y))
    family = _family_for(spec, kernel)
    _check_numerics(spec, jitter, precision)
    fixed = _fixed_values(fixed, noise)
    shard, chains, chain_method = _mesh_for
    mesh = _data_mesh(shard, spec, chains, chain_method)
    scales, offset, summary, X_inducing = _data_scales_and_offset(X, y, mesh, mean, offset, X_pred, Z, seed)
    config = ModelConfig(
        family=family,
        priors=_resolve_priors(_default_priors(spec, family, lik, scales, mean_kind, offset), priors, fixed),
        fixed=fixed,
        hyperprior=hyperprior,
        jitter=jitter,
        mesh=mesh,
        precision=precision,
        likelihood=lik,
        mean=mean_kind,
    )
    if spec.uses_inducing:
        Z = _inducing_inputs(spec, config, X, y, Z, num_inducing, inducing_method, X_inducing, seed)
    X_pred = X if X_pred is None else check_X(X_pred, "X_pred", dim=X.shape[1])
    for j in range(X.shape[1]):
        check_scale(X_pred[:, j], f"X_pred[:, {j}]", INPUT_SCALES)
    if group is not None and not spec.grouped:
        raise ValueError(f"group: the {spec.name!r} model is not grouped; use model='grouped'")
    data, layout = spec.prepare(
        X,
        y,
        Z,
        y_offset=offset,
        constant_mean=isinstance(mean, str) and mean == "constant",
        group=group,
        group_pred=group_pred,
        X_pred=X_pred,
    )
    if summary is not None:
        data["x_centre"] = jnp.asarray(summary.x_mean, dtype=X.dtype)
    data = _placed_data(data, X, y, Z, X_pred, mesh)
    return GenerativeModel(spec=spec, config=config, data=data, layout=layout, X=X, y=y, Z=Z, X_pred=X_pred)


def _checked_data(
    spec: ModelSpec, X: Any, y: Any, likelihood: str
) -> tuple[jax.Array, jax.Array, Likelihood]:
    """X (N, D) and y (N,) checked for shape and scale, and the likelihood, checked against both."""
    X = check_X(X, "X")
    y = check_y(y, X.shape[0])
    for j in range(X.shape[1]):
        check_scale(X[:, j], f"X[:, {j}]", INPUT_SCALES, relative_spread=INPUT_RELATIVE_SPREAD)
    check_scale(y, "y", TARGET_SCALES)
    lik = get_likelihood(likelihood)
    spec.check_likelihood(lik.name)
    lik.check(np.asarray(y))
    return X, y, lik


def _family_for(spec: ModelSpec, kernel: Any) -> KernelFamily:
    """The kernel family of ``kernel``, or the model's own (blr's α, β), where a kernel choice is refused."""
    if spec.family is None:
        return get_family(kernel)
    if not (isinstance(kernel, str) and kernel == "se"):
        raise ValueError(f"kernel: the {spec.name!r} model has no kernel to choose (got {kernel!r})")
    return spec.family


def _check_numerics(spec: ModelSpec, jitter: Any, precision: str) -> None:
    """Refuse a jitter that is not a finite number > 0 and a mixed precision the model cannot run."""
    real = isinstance(jitter, int | float | np.floating) and not isinstance(jitter, bool)
    if jitter is not None and not (real and 0 < jitter < np.inf):
        raise ValueError(
            f"jitter: expected a finite number > 0 (relative to the kernel's variance; None for the "
            f"package's policy), got {jitter!r}"
        )
    check_precision(precision)
    if precision != "float64" and not spec.takes_precision:
        takes = [name for name, other in model_specs().items() if other.takes_precision]
        raise ValueError(
            f"precision: the {spec.name!r} model has no streamed O(NM²) pass to run in mixed precision; "
            f"use one of {', '.join(takes)}"
        )


def _fixed_values(fixed: Mapping[str, Any] | None, noise: float | None) -> dict[str, jax.Array]:
    """The pinned values as arrays, the noise σ of ``noise=`` among them; scalars checked > 0."""
    fixed = dict(fixed or {})
    if noise is not None:
        fixed["noise"] = check_positive(noise, "noise")
    for name, value in fixed.items():
        fixed[name] = jnp.asarray(check_positive(value, f"fixed[{name!r}]") if np.ndim(value) == 0 else value)
    return fixed


def _data_scales_and_offset(
    X: jax.Array, y: jax.Array, mesh: Any, mean: Any, offset: float, X_pred: Any, Z: Any, seed: int
) -> tuple[Any, float, Any, jax.Array]:
    """The data's scales and summaries: what the priors, the mean and the inducing inputs are set from.

    Returns (scales of the default priors, the constant mean, the sharded data's summary or None, the
    rows that the inducing inputs are chosen from). A sharded fit takes the data's summaries from exactly
    rounded sums, which are the same numbers whether its rows are in this process or spread over several
    (:mod:`bayes_rbfn.infer.processes`).
    """
    if mesh is None:
        return data_scales(X, y), offset, None, X
    summary, spread = data_summary(X, y), spread_over_processes(mesh)
    if spread and X_pred is None:
        raise ValueError(
            "X_pred: with the data spread over processes, give the prediction inputs (the same in every "
            "process)"
        )
    if spread and (callable(mean) or (isinstance(mean, str) and mean == "linear")):
        raise ValueError("mean: with the data spread over processes the prior mean is a constant")
    if isinstance(mean, str) and mean == "constant":
        offset = summary.y_mean
    X_inducing = common_subsample(X, INDUCING_SUBSAMPLE, seed) if spread and Z is None else X
    return scales_from(summary.x_max - summary.x_min, summary.y_sd), offset, summary, X_inducing


def _inducing_inputs(
    spec: ModelSpec,
    config: ModelConfig,
    X: jax.Array,
    y: jax.Array,
    Z: Any,
    num_inducing: int | None,
    inducing_method: str,
    X_inducing: jax.Array,
    seed: int,
) -> jax.Array:
    """Z as given (checked; (G, M, D) for the grouped model), or chosen by ``inducing_method``."""
    if Z is None:
        M = default_num_inducing(X_inducing, spec.samples_weights) if num_inducing is None else num_inducing
        Z = _choose_inducing(inducing_method, X_inducing, y, M, spec, config, seed)
    if np.ndim(Z) == 3 and spec.grouped:
        return jnp.asarray(np.stack([np.asarray(check_Z(z, X, f"Z[{g}]")) for g, z in enumerate(Z)]), X.dtype)
    return jnp.asarray(check_Z(Z, X), dtype=X.dtype)


def _placed_data(data: dict, X: jax.Array, y: jax.Array, Z: Any, X_pred: Any, mesh: Any) -> dict:
    """The model's data on the devices of ``mesh``: sharded by rows, or every process's rows as one array."""
    if mesh is None:
        return data
    from bayes_rbfn.gp.streaming import process_rows, replicated, shard_data

    if not spread_over_processes(mesh):
        return shard_data(data, mesh)
    for name, value in (("Z", Z), ("X_pred", X_pred)):
        check_same(value, name)
    # Every process's rows as one global array; the rest, equal in every process, replicated.
    return {
        **{k: replicated(v, mesh) for k, v in data.items() if k not in ("X", "y")},
        "X": process_rows(X, mesh),
        "y": process_rows(y, mesh),
    }


#: The keyword options of :func:`build_model` that :func:`fit` passes on.
MODEL_OPTIONS = frozenset(inspect.signature(build_model).parameters) - {
    "model",
    "X",
    "y",
    "seed",
    "_mesh_for",
}


def prior_predictive(
    model: str | ModelSpec, X: Any, y: Any, *, num_samples: int = 500, seed: int = 0, **options: Any
) -> Any:
    """Prior predictive check: draws of the parameters and of y from the prior of the model :func:`fit` runs.

    Args:
        model: a model name or a :class:`~bayes_rbfn.models.ModelSpec`, as :func:`build_model`.
        X: (N, D) or (N,) inputs, as :func:`build_model`.
        y: (N,) targets: only the observed data the simulations are compared with (and it sets the default
            priors).
        num_samples: prior draws.
        seed: PRNG seed.
        **options: the other model-defining arguments of :func:`fit`, as :func:`build_model`.

    Returns:
        The line's ArviZ object (InferenceData on ArviZ 0.x, DataTree on 1.x) with groups ``prior`` (the
        parameters), ``prior_predictive`` (y, dims obs) and ``observed_data``, for ArviZ's prior
        predictive plots.
    """
    num_samples = check_positive_int(num_samples, "num_samples")
    problem = build_model(model, X, y, seed=seed, **options)
    draws, y_sim = _prior_draws(problem, num_samples, jax.random.PRNGKey(seed))
    return arviz_compat.from_groups(
        {"prior": draws, "prior_predictive": {"y": y_sim}, "observed_data": {"y": np.asarray(problem.y)}},
        dims={"y": ["obs"]},
    )


def _prior_draws(problem: GenerativeModel, num_samples: int, key: jax.Array) -> tuple[dict, np.ndarray]:
    """Draws from the prior of ``problem``'s model: the parameters and y simulated by its observed site.

    The parameters as {site: (1, num_samples, …)}, y as (1, num_samples, N) in the order of the
    observations.

    One program for all draws (NumPyro's ``Predictive`` under :func:`by_program`), kept for the next call
    with the same shapes.
    """
    from numpyro.infer import Predictive

    def simulate(key: jax.Array, data: dict, prior_values: dict) -> dict:
        return Predictive(problem.model, num_samples=num_samples)(key, data, prior_values)

    with single_threaded_blas():
        draws = by_program(simulate)(key, *problem.prior_args)
    draws = {k: to_host(v)[None] for k, v in draws.items() if k not in problem.spec.unstored_sites}
    y_sim = draws.pop("y")
    y_sim = problem.layout.to_observations(y_sim, batch_ndim=2)
    return draws, y_sim


def add_prior_draws(idata: Any, problem: GenerativeModel, *, num_draws: int, seed: int) -> None:
    """Add the groups ``prior`` and ``prior_predictive`` of ``num_draws`` prior draws to a fit.

    Each parameter has the dimension names it has in ``posterior``.

    Args:
        idata: the fit (:func:`to_inference_data`), extended in place.
        problem: its model and data (:func:`build_model`).
        num_draws: prior draws.
        seed: the fit's seed; the draws take a key of their own derived from it.
    """
    # A key of its own, apart from the sampler's (seed) and the posterior predictive's (fold_in 1).
    key = jax.random.fold_in(jax.random.PRNGKey(seed), 2)
    draws, y_sim = _prior_draws(problem, check_positive_int(num_draws, "num_draws"), key)
    post = idata.posterior
    dims = {"y": ["obs"]}
    for name, value in draws.items():
        if name in post and post[name].shape[2:] == value.shape[2:]:
            dims[name] = list(post[name].dims[2:])
    arviz_compat.add_groups(idata, {"prior": draws, "prior_predictive": {"y": y_sim}}, dims=dims)


def fit(
    model: str | ModelSpec,
    X: Any,
    y: Any,
    *,
    sampler: SamplerSettings | None = None,
    shard: Any = False,
    holdout_after: float | None = None,
    holdout: float | None = None,
    check_diagnostics: bool = True,
    log_likelihood: bool = True,
    posterior_predictive: int | None = DEFAULT_PREDICTIVE_DRAWS,
    prior_draws: int | None = 0,
    coords: Mapping[str, Any] | None = None,
    **options: Any,
) -> Any:
    """Fit a model of the collection with NUTS and return ArviZ InferenceData (docs/output.md).

    Public steps, each callable on its own (docs/library.md, *fit, step by step*): :func:`build_model` →
    :func:`sample_posterior` → :func:`to_inference_data` → :func:`add_prior_draws`,
    :func:`add_posterior_predictive`, :func:`score_holdout` → :func:`check_fit`.

    Args:
        model: a name (:func:`bayes_rbfn.models.available_models`) or a :class:`bayes_rbfn.models.ModelSpec`.
        X: (N, D) or (N,) inputs.
        y: (N,) targets.
        sampler: the NUTS settings, a :class:`~bayes_rbfn.infer.sampler.SamplerSettings`; or its fields by
            name in ``options`` (``chains``, ``draws``, ``warmup``, ``seed``, …), not both.
        shard: ``True`` or a :class:`jax.sharding.Mesh` with a ``"data"`` axis: the O(NM²) pass over devices.
        holdout_after: a backtest: fit the points with x ≤ ``holdout_after``, score the rest.
        holdout: the same, scoring the last ``holdout`` fraction of the points by x (:func:`backtest_scores`).
        check_diagnostics: warn on poor convergence or collapsed predictive variance (:func:`check_fit`).
        log_likelihood: store the LOO conditionals (N values per draw).
        posterior_predictive: replicates y_rep per chain (None: at every draw; 0: none).
        prior_draws: draws of the prior and the prior predictive to store (default 0: none).
        coords: ArviZ coordinates, e.g. ``{"input_dim": ["year"]}``.
        **options: the model's options, those of :func:`build_model` (``Z``, ``num_inducing``, ``kernel``,
            ``priors``, ``likelihood``, ``mean``, …), and the sampler's.

    Returns:
        The line's ArviZ object (InferenceData on ArviZ 0.x, DataTree on 1.x) with the groups of
        :func:`to_inference_data`, posterior_predictive, and prior and prior_predictive with
        ``prior_draws``; in the units of the data.

    Warns:
        Float32Warning: once per process when JAX's x64 mode is off (``numpyro.enable_x64()`` first).

    Raises:
        ValueError: a bad argument (the message names it), before sampling starts.
        DegenerateModelError: no parameter values have a finite log density.
        NonFiniteResultError: the predictions or log-likelihood hold NaN or ±∞.
    """
    _warn_if_float32()
    settings = _split_sampler_settings(sampler, options)
    if posterior_predictive is not None:
        posterior_predictive = _non_negative_int(posterior_predictive, "posterior_predictive")
    prior_draws = 0 if prior_draws is None else _non_negative_int(prior_draws, "prior_draws")
    X, y, *held_out = _backtest_split(X, y, options, holdout_after=holdout_after, holdout=holdout)
    problem = build_model(
        model, X, y, seed=settings.seed, _mesh_for=(shard, settings.chains, settings.chain_method), **options
    )
    settings = _check_before_sampling(problem, settings, coords, posterior_predictive, prior_draws)
    with warnings.catch_warnings(), single_threaded_blas():
        # NumPyro warns when chains > devices; the fallback (resolve_chain_method) is deliberate.
        warnings.filterwarnings("ignore", message="There are not enough devices")
        samples, stats = sample_posterior(problem, settings)
        seed = settings.seed
        inducing = "given" if options.get("Z") is not None else options.get("inducing_method", "kmeans")
        idata = to_inference_data(problem, samples, stats, log_likelihood=log_likelihood, inducing=inducing)
        if prior_draws:
            add_prior_draws(idata, problem, num_draws=prior_draws, seed=seed)
        if posterior_predictive != 0:
            add_posterior_predictive(idata, problem, samples, seed=seed, draws_per_chain=posterior_predictive)
        check_finite(idata)
        if held_out:
            score_holdout(idata, *held_out, **rebuild_inputs(problem.spec, problem.config))
        _set_coords(idata, coords)
    if check_diagnostics:
        check_fit(idata, problem, samples)
    return idata


def _backtest_split(
    X: Any, y: Any, options: Mapping[str, Any], *, holdout_after: float | None, holdout: float | None
) -> tuple[Any, ...]:
    """:func:`holdout_split` for :func:`fit` (X, y and no held-out points without a backtest)."""
    if holdout_after is None and holdout is None:
        return X, y
    if options.get("group") is not None:
        raise ValueError("holdout: a backtest of grouped data is not supported (split each group yourself)")
    if options.get("likelihood", "gaussian") != "gaussian":
        raise ValueError("holdout: the backtest scores need the gaussian likelihood")
    return holdout_split(X, y, holdout_after=holdout_after, holdout=holdout)


def _rows(problem: GenerativeModel) -> tuple[Any, Any]:
    """The fit's X and y: every process's rows where the data are spread over processes."""
    if spread_over_processes(problem.config.mesh):
        return to_host(problem.data["X"]), to_host(problem.data["y"])
    return problem.X, problem.y


def _shape(problem: GenerativeModel) -> tuple[int, int]:
    """(N, D) of the fit's X, every process's rows counted, without gathering them."""
    X = problem.data["X"] if spread_over_processes(problem.config.mesh) else problem.X
    return X.shape[0], X.shape[1]


def _check_before_sampling(
    problem: GenerativeModel,
    settings: SamplerSettings,
    coords: Mapping[str, Any] | None,
    posterior_predictive: int | None,
    prior_draws: int,
) -> SamplerSettings:
    """Refuse, before any sampling, coordinates of the wrong length and a result too large for memory.

    Returns:
        The settings, with chains one after the other where each chain uses every device (a mesh).
    """
    (N, D), Z, X_pred = _shape(problem), problem.Z, problem.X_pred
    _check_coords(coords, {"obs": N, "input_dim": D, "point": X_pred.shape[0]})
    params = estimated_params(Z, D)
    need = result_bytes(
        chains=settings.chains,
        draws=settings.draws,
        params=params,
        N=N,
        S=X_pred.shape[0],
        replicates_per_chain=posterior_predictive,
    ) + 8 * prior_draws * (N + params)
    check_result_size(need, available_memory())
    if problem.config.mesh is not None and settings.chain_method is None:
        return dataclasses.replace(settings, chain_method="sequential")
    return settings


def sample_posterior(problem: GenerativeModel, settings: SamplerSettings) -> tuple[dict, dict]:
    """NUTS on a model bound to its data: the first step after :func:`build_model`.

    The start and mass matrix of :func:`bayes_rbfn.infer.sampler.nuts_kernel` (a mode search on a subset
    of the data for ``init="map"``), then the one NUTS loop (:func:`bayes_rbfn.infer.sampler.run_chains`).

    Args:
        problem: the model and its data (:func:`build_model`).
        settings: the NUTS settings.

    Returns:
        (samples, stats): {site: (chains, draws, …)} and NUTS's per-draw statistics.

    Raises:
        DegenerateModelError: no parameter values have a finite log density.
    """
    N = _shape(problem)[0]
    subset = N >= 2 * MAP_SEARCH_POINTS and resolve_init(settings.init, N) == "map"
    search_args = problem.subset_args(MAP_SEARCH_POINTS, settings.seed) if subset else None
    try:
        kernel_nuts = nuts_kernel(
            problem.model, problem.args, settings, num_points=N, search_args=search_args
        )
        return run_chains(kernel_nuts, problem.args, settings, run_record=problem.record())
    except RuntimeError as err:
        if NO_VALID_START not in str(err):
            raise
        raise explain_degenerate(problem, problem.config.jitter) from err


def check_fit(idata: Any, problem: GenerativeModel, samples: Mapping[str, Any]) -> None:
    """Warn where a fit should not be trusted as it is: the last step of :func:`fit`.

    A :class:`~bayes_rbfn.infer.diagnostics.ConvergenceWarning` on poor r_hat, ESS or divergences, and
    a :class:`~bayes_rbfn.gp.sparse.VarianceCollapseWarning` where the SoR family's predictions at
    ``X_pred`` have lost most of the prior variance.

    Args:
        idata: the fit (:func:`to_inference_data`).
        problem: its model and data (:func:`build_model`).
        samples: its draws (:func:`sample_posterior`).
    """
    diagnostics.warn_if_poor(diagnostics.check_convergence(idata))
    _warn_if_collapsed(problem.spec, problem.config, problem.Z, samples, problem.X_pred)


#: Posterior draws (at most) over which fit() averages the variance-collapse diagnostic.
_COLLAPSE_DRAWS = 200


def _warn_if_collapsed(spec: ModelSpec, config: ModelConfig, Z: Any, samples: dict, X_pred: Any) -> None:
    """Warn (VarianceCollapseWarning) when SoR/RBFN predictions at X_pred have lost most prior variance.

    See docs/mathematics.md#the-sor-family-and-its-variance-collapse; computed from a thinned set of draws.
    """
    from bayes_rbfn.infer.collapse import collapse_check

    if not spec.variance_collapses or Z is None or np.ndim(Z) != 2:
        return
    params = posterior_params({k: np.asarray(v) for k, v in samples.items()}, config.fixed)
    chains, draws = jax.tree_util.tree_leaves(params)[0].shape[:2]
    step = max(1, (chains * draws) // _COLLAPSE_DRAWS)
    thinned = {k: np.asarray(v)[:, ::step] for k, v in params.items()}
    collapse_check(config, Z, thinned, X_pred, model=spec.name)


def _numeric_values(tree: Any) -> Any:
    """The numeric parameters of (a dict of) numpyro distributions as nested dicts keyed by field name.

    Not the distributions' own pytree flattening: numpyro gathers their fields in a set, whose order (and
    so the compiled program and its persistent-cache key) changes from one Python process to the next.
    """
    if isinstance(tree, dict):
        return {k: _numeric_values(v) for k, v in tree.items()}
    if isinstance(tree, dist.Distribution):
        fields = sorted(type(tree).gather_pytree_data_fields())
        values = {f: _numeric_values(tree.__dict__.get(f)) for f in fields}
        return {f: v for f, v in values.items() if v is not None}
    if isinstance(tree, float | int | np.ndarray | jax.Array) and not isinstance(tree, bool):
        return tree
    return None


def _with_values(tree: Any, values: Any) -> Any:
    """``tree`` (as in :func:`_numeric_values`) with its numeric parameters replaced by ``values``."""
    if isinstance(tree, dict):
        return {k: _with_values(v, values[k]) for k, v in tree.items()}
    if isinstance(tree, dist.Distribution):
        new = copy.copy(tree)
        for f, v in values.items():
            new.__dict__[f] = _with_values(tree.__dict__[f], v)
        return new
    return values


def _data_mesh(shard: Any, spec: ModelSpec, chains: int, chain_method: str | None) -> Any:
    """The mesh of ``fit(shard=...)``, or None."""
    if shard is None or shard is False:
        return None
    if not spec.shards_data:
        sharded = [name for name, other in model_specs().items() if other.shards_data]
        raise ValueError(
            f"shard: the {spec.name!r} model does not shard its data; use one of {', '.join(sharded)}"
        )
    if chain_method == "parallel":
        raise ValueError("shard: chains cannot also run in parallel over the devices the data use")
    from bayes_rbfn.gp.streaming import DATA_AXIS, data_mesh

    mesh = data_mesh() if shard is True else shard
    if DATA_AXIS not in getattr(mesh, "axis_names", ()):
        raise ValueError(f"shard: expected True or a jax.sharding.Mesh with a {DATA_AXIS!r} axis")
    return mesh


def add_posterior_predictive(
    idata: Any,
    problem: GenerativeModel,
    samples: Mapping[str, Any],
    *,
    seed: int,
    draws_per_chain: int | None = DEFAULT_PREDICTIVE_DRAWS,
) -> None:
    """Add the group ``posterior_predictive``: replicates y_rep ~ p(y_rep | y), (chains, kept draws, N).

    At (evenly thinned) posterior draws: the model's own observed site, replicated given the data
    (:func:`bayes_rbfn.infer.replicates.replicate_site`).

    Args:
        idata: the fit (:func:`to_inference_data`), extended in place.
        problem: its model and data (:func:`build_model`).
        samples: its draws (:func:`sample_posterior`).
        seed: the fit's seed; the replicates take a key of their own derived from it.
        draws_per_chain: replicates per chain, at evenly thinned draws (None: every draw).
    """
    replicates = _posterior_predictive(problem, samples, seed, draws_per_chain)
    arviz_compat.add_groups(idata, {"posterior_predictive": {"y": replicates}}, dims={"y": ["obs"]})


def _posterior_predictive(
    problem: GenerativeModel, samples: Mapping[str, Any], seed: int, per_chain: int | None
) -> np.ndarray:
    """The replicates of :func:`add_posterior_predictive`, (chains, kept draws, N)."""
    from bayes_rbfn.infer.replicates import replicate_site

    bound_model, (data, prior_values) = problem.model, problem.args
    stored = {k: np.asarray(v) for k, v in samples.items() if k not in problem.spec.unstored_sites}
    chains, draws = next(iter(stored.values())).shape[:2]
    step = 1 if per_chain is None else -(-draws // per_chain)
    thinned = {k: v[:, ::step] for k, v in stored.items()}
    kept = next(iter(thinned.values())).shape[1]
    flat = {k: v.reshape(chains * kept, *v.shape[2:]) for k, v in thinned.items()}

    step = _draws_per_step(draw_work(data))

    def replicate(key: jax.Array, draws: dict, data: dict, prior_values: dict) -> jax.Array:
        # A sequential map over draws, a few side by side: a draw holds O(NM) of kernel values.
        keys = jax.random.split(key, next(iter(draws.values())).shape[0])
        return jax.lax.map(
            lambda a: replicate_site(bound_model, a[1], a[0], "y", (data, prior_values), {}),
            (keys, draws),
            batch_size=step,
        )

    with single_threaded_blas():
        key = jax.random.fold_in(jax.random.PRNGKey(seed), 1)
        y_rep = to_host(by_program(replicate)(key, flat, data, prior_values))
    y_rep = problem.layout.to_observations(y_rep, batch_ndim=1)
    return y_rep.reshape(chains, kept, -1)


#: Fewest points on either side of a backtest's split.
MIN_HOLDOUT_POINTS = 10


def holdout_split(
    X: Any, y: Any, *, holdout_after: float | None = None, holdout: float | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X_train, y_train, X_test, y_test): the training points, and the rest.

    The training points are those with x ≤ ``holdout_after``, or all but the last ``holdout`` fraction by x.
    One input column; at least 10 points on each side.
    """
    X = np.asarray(check_X(X, "X"))
    y = np.asarray(check_y(y, X.shape[0]))
    if (holdout_after is None) == (holdout is None):
        raise ValueError("holdout: give either holdout_after or holdout, not both")
    if X.shape[1] != 1:
        raise ValueError(f"holdout: a backtest splits one input column by its value; X has {X.shape[1]}")
    x = X[:, 0]
    if holdout is not None:
        if isinstance(holdout, bool) or not (isinstance(holdout, int | float) and 0 < holdout < 1):
            raise ValueError(f"holdout: expected a fraction in (0, 1), got {holdout!r}")
        n_test = int(np.ceil(holdout * x.size))
        cut = np.sort(x)[x.size - n_test - 1] if n_test < x.size else -np.inf
    else:
        cut = float(holdout_after)
        if not np.isfinite(cut):
            raise ValueError(f"holdout_after: must be a finite number, got {holdout_after!r}")
    train = x <= cut
    n_train, n_test = int(train.sum()), int((~train).sum())
    if min(n_train, n_test) < MIN_HOLDOUT_POINTS:
        raise ValueError(
            f"holdout: the split at x = {cut:g} leaves {n_train} point(s) to fit and {n_test} to score; "
            f"each side needs at least {MIN_HOLDOUT_POINTS}"
        )
    return X[train], y[train], X[~train], y[~train]


def score_holdout(idata: Any, X_test: Any, y_test: Any, *, kernel: Any = None, mean: Any = None) -> None:
    """Score the fit's predictive of y* at held-out points; store them and the scores in the fit.

    The scores are :func:`bayes_rbfn.infer.scores.score`'s, read back by :func:`backtest_scores`.

    Args:
        idata: the fit, extended in place (``constant_data`` gains ``X_holdout``, ``y_holdout``).
        X_test: (S, D) held-out inputs.
        y_test: (S,) their targets.
        kernel: the fit's kernel object or family of one's own, which no file holds (as
            :func:`bayes_rbfn.predict`).
        mean: the fit's callable prior mean, likewise.
    """
    import xarray as xr

    from bayes_rbfn.infer.scores import score

    X_test = np.asarray(check_X(X_test, "X_test"))
    y_test = np.asarray(check_y(y_test, X_test.shape[0], "y_test"))
    result = score(idata, X_test, y_test, kernel=kernel, mean=mean)
    result["holdout_after"] = float(np.max(idata.constant_data["X"].values[:, 0]))
    idata.constant_data["X_holdout"] = xr.DataArray(X_test, dims=("holdout", "input_dim"))
    idata.constant_data["y_holdout"] = xr.DataArray(y_test, dims=("holdout",))
    idata.posterior.attrs["bayes_rbfn_backtest"] = json.dumps(result)


def backtest_scores(idata: Any) -> dict[str, float]:
    """The scores of a fit with ``holdout_after``/``holdout`` (see :func:`fit`); ValueError otherwise."""
    text = idata.posterior.attrs.get("bayes_rbfn_backtest")
    if not text:
        raise ValueError("idata: this fit has no backtest (fit with holdout_after= or holdout=)")
    return json.loads(str(text))


def _check_coords(coords: Mapping[str, Any] | None, sizes: Mapping[str, int]) -> None:
    """Refuse, before sampling, coordinates of the wrong length for the dimensions known up front."""
    if coords is not None and not isinstance(coords, Mapping):
        raise ValueError(f"coords: expected a dict {{dimension: names}}, got {type(coords).__name__}")
    for dim, values in (coords or {}).items():
        if dim in sizes and len(values) != sizes[dim]:
            raise ValueError(f"coords: {dim!r} has {sizes[dim]} entries, got {len(values)} names")


def _set_coords(idata: Any, coords: Mapping[str, Any] | None) -> None:
    """Name the coordinates of ``coords`` (e.g. ``input_dim``) in every group that has that dimension."""
    for dim, values in (coords or {}).items():
        values = list(values)
        sizes = {g: arviz_compat.group_dataset(idata, g).sizes.get(dim) for g in arviz_compat.groups(idata)}
        size = next((n for n in sizes.values() if n is not None), None)
        if size is None:
            raise ValueError(f"coords: no dimension {dim!r}; the fit has obs, point, input_dim, …")
        if size != len(values):
            raise ValueError(f"coords: {dim!r} has {size} entries, got {len(values)} names")
        arviz_compat.assign_coords(idata, dim, values)


def to_inference_data(
    problem: GenerativeModel,
    samples: Mapping[str, Any],
    stats: Mapping[str, Any],
    *,
    log_likelihood: bool = True,
    inducing: str | None = None,
) -> Any:
    """The fit as ArviZ groups (docs/output.md): the step after :func:`sample_posterior`.

    Args:
        problem: the model and its data (:func:`build_model`).
        samples: {site: (chains, draws, …)} (:func:`sample_posterior`).
        stats: NUTS's per-draw statistics (:func:`sample_posterior`).
        log_likelihood: also store the LOO conditionals (N values per draw).
        inducing: how the inducing inputs were chosen (``"given"``, ``"kmeans"``, …), stored as the
            attribute ``bayes_rbfn_inducing`` of a model with inducing inputs.

    Returns:
        posterior, sample_stats, log_likelihood, observed_data, constant_data, predictions (f_mean,
        f_var at X_pred) and predictions_constant_data, in the units of the data.
    """
    spec, config, data, layout = problem.spec, problem.config, problem.data, problem.layout
    X, y = _rows(problem)
    samples = {k: np.asarray(v) for k, v in samples.items()}
    params = posterior_params(samples, config.fixed)
    loglik = None
    if log_likelihood:
        loglik = layout.to_observations(
            pointwise_loo(spec, config, params, draw_work(data), data), batch_ndim=2
        )
    extra_pred = tuple(jnp.asarray(a) for a in layout.predictive_args)
    f_mean, f_var = model_moments(spec, config, data, params, problem.X_pred, extra=extra_pred)
    posterior, dims = _posterior_with_dims(spec, layout, samples, problem.Z, X.shape[1])
    constant, predictions_constant = _constant_groups(problem, X, dims)
    idata = arviz_compat.from_groups(
        {
            "posterior": posterior,
            "sample_stats": sample_stats(stats),
            "log_likelihood": None if loglik is None else {"y": loglik},
            "observed_data": {"y": np.asarray(y)},
            "constant_data": constant,
            "predictions": {"f_mean": f_mean, "f_var": f_var},
            "predictions_constant_data": predictions_constant,
        },
        dims=dims,
    )
    idata.posterior.attrs.update(_fit_attributes(spec, config))
    if spec.uses_inducing and inducing is not None:
        idata.posterior.attrs["bayes_rbfn_inducing"] = inducing
    return idata


def _posterior_with_dims(
    spec: ModelSpec, layout: Layout, samples: Mapping[str, np.ndarray], Z: Any, D: int
) -> tuple[dict, dict[str, list[str]]]:
    """The stored posterior sites, and the dimension names of every variable of the fit's groups."""
    dims: dict[str, list[str]] = {"y": ["obs"], "X": ["obs", "input_dim"], "X_pred": ["point", "input_dim"]}
    dims.update({"f_mean": ["point"], "f_var": ["point"]})
    sizes = {"input_dim": D}
    if Z is not None:
        sizes["inducing"] = np.shape(Z)[-2]
    sizes.update(layout.sizes)
    posterior = {}
    for name, value in samples.items():
        if name in spec.unstored_sites:
            continue
        posterior[name] = value
        if value.shape[2:]:
            site_dims = spec.site_dims(name, value.shape[2:], sizes)
            if site_dims is not None:
                dims[name] = site_dims
    dims.update(layout.dims)
    return posterior, dims


def _constant_groups(problem: GenerativeModel, X: Any, dims: dict[str, list[str]]) -> tuple[dict, dict]:
    """``constant_data`` and ``predictions_constant_data`` of a fit; their dimension names go to ``dims``."""
    data, layout, Z = problem.data, problem.layout, problem.Z
    constant = {"X": np.asarray(X)}
    predictions_constant = {"X_pred": np.asarray(problem.X_pred)}
    if Z is not None:
        constant["Z"] = np.asarray(Z)
        dims["Z"] = ["inducing", "input_dim"]
    constant["y_offset"] = np.asarray(data["y_offset"])
    if "x_centre" in data:
        constant["x_centre"] = np.asarray(data["x_centre"])
        dims["x_centre"] = ["input_dim"]
    constant.update({k: np.asarray(v) for k, v in layout.constant_data.items()})
    predictions_constant.update({k: np.asarray(v) for k, v in layout.predictions_constant_data.items()})
    return constant, predictions_constant


def _fit_attributes(spec: ModelSpec, config: ModelConfig) -> dict[str, Any]:
    """The posterior attributes from which :func:`bayes_rbfn.infer.schema.rebuild` rebuilds a fit."""
    return {
        "bayes_rbfn_model": spec.name,
        "bayes_rbfn_kernel": config.family.name,
        "bayes_rbfn_kernel_kind": kernel_kind(config.family),
        "bayes_rbfn_fixed": json.dumps({k: np.asarray(v).tolist() for k, v in config.fixed.items()}),
        "bayes_rbfn_hyperprior": int(config.hyperprior),
        "bayes_rbfn_jitter": "" if config.jitter is None else float(config.jitter),
        "bayes_rbfn_likelihood": config.likelihood.name,
        "bayes_rbfn_mean": config.mean if isinstance(config.mean, str) else "callable",
        "bayes_rbfn_precision": config.precision,
    }
