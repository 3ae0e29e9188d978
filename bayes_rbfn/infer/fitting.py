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
from bayes_rbfn.gp.priors import scales_from
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
from bayes_rbfn.models.families import data_scales, get_family
from bayes_rbfn.models.layout import Layout
from bayes_rbfn.models.likelihoods import Likelihood, get_likelihood
from bayes_rbfn.runtime import available_memory, single_threaded_blas

__all__ = [
    "DEFAULT_NUM_INDUCING",
    "INITS",
    "Float32Warning",
    "GenerativeModel",
    "backtest_scores",
    "build_model",
    "default_num_inducing",
    "fit",
    "holdout_split",
    "pointwise_loo",
    "posterior_params",
    "prior_predictive",
    "rebuild",
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
    X = check_X(X, "X")
    y = check_y(y, X.shape[0])
    for j in range(X.shape[1]):
        check_scale(X[:, j], f"X[:, {j}]", INPUT_SCALES, relative_spread=INPUT_RELATIVE_SPREAD)
    check_scale(y, "y", TARGET_SCALES)
    lik = get_likelihood(likelihood)
    spec.check_likelihood(lik.name)
    lik.check(np.asarray(y))
    mean_kind, offset = _resolve_mean(mean, spec, lik, np.asarray(y))
    if spec.family is not None:
        # The model brings its own hyperparameters (e.g. blr's α, β); a kernel choice would be ignored.
        if not (isinstance(kernel, str) and kernel == "se"):
            raise ValueError(f"kernel: the {spec.name!r} model has no kernel to choose (got {kernel!r})")
        family = spec.family
    else:
        family = get_family(kernel)
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
    fixed = dict(fixed or {})
    if noise is not None:
        fixed["noise"] = check_positive(noise, "noise")
    for name, value in fixed.items():
        fixed[name] = jnp.asarray(check_positive(value, f"fixed[{name!r}]") if np.ndim(value) == 0 else value)
    shard, chains, chain_method = _mesh_for
    mesh = _data_mesh(shard, spec, chains, chain_method)
    # A sharded fit takes the data's summaries from exactly rounded sums, which are the same numbers
    # whether its rows are in this process or spread over several (bayes_rbfn.infer.processes).
    summary = data_summary(X, y) if mesh is not None else None
    spread = spread_over_processes(mesh)
    X_inducing = X
    if summary is None:
        scales = data_scales(X, y)
    else:
        if spread and X_pred is None:
            raise ValueError(
                "X_pred: with the data spread over processes, give the prediction inputs (the same in "
                "every process)"
            )
        if spread and (callable(mean) or (isinstance(mean, str) and mean == "linear")):
            raise ValueError("mean: with the data spread over processes the prior mean is a constant")
        scales = scales_from(summary.x_max - summary.x_min, summary.y_sd)
        if isinstance(mean, str) and mean == "constant":
            offset = summary.y_mean
        if spread and Z is None:
            X_inducing = common_subsample(X, INDUCING_SUBSAMPLE, seed)
    defaults = _default_priors(spec, family, lik, scales, mean_kind, offset)
    resolved_priors = _resolve_priors(defaults, priors, fixed)
    config = ModelConfig(
        family=family,
        priors=resolved_priors,
        fixed=fixed,
        hyperprior=hyperprior,
        jitter=jitter,
        mesh=mesh,
        precision=precision,
        likelihood=lik,
        mean=mean_kind,
    )
    if spec.uses_inducing:
        if Z is None:
            M = (
                default_num_inducing(X_inducing, spec.samples_weights)
                if num_inducing is None
                else num_inducing
            )
            Z = _choose_inducing(inducing_method, X_inducing, y, M, spec, config, seed)
        if np.ndim(Z) == 3 and spec.grouped:
            Z = jnp.asarray(
                np.stack([np.asarray(check_Z(z, X, f"Z[{g}]")) for g, z in enumerate(Z)]), X.dtype
            )
        else:
            Z = jnp.asarray(check_Z(Z, X), dtype=X.dtype)
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
    if spread:
        for name, value in (("Z", Z), ("X_pred", X_pred)):
            check_same(value, name)
        # Every process's rows as one global array; the rest, equal in every process, replicated.
        from bayes_rbfn.gp.streaming import process_rows, replicated

        data = {
            **{k: replicated(v, mesh) for k, v in data.items() if k not in ("X", "y")},
            "X": process_rows(X, mesh),
            "y": process_rows(y, mesh),
        }
    elif mesh is not None:
        from bayes_rbfn.gp.streaming import shard_data

        data = shard_data(data, mesh)
    return GenerativeModel(spec=spec, config=config, data=data, layout=layout, X=X, y=y, Z=Z, X_pred=X_pred)


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


def _add_prior(idata: Any, problem: GenerativeModel, num_samples: int, seed: int) -> None:
    """Add the groups ``prior`` and ``prior_predictive`` of ``num_samples`` prior draws to a fit's ``idata``.

    Each parameter has the dimension names it has in ``posterior``.
    """
    # A key of its own, apart from the sampler's (seed) and the posterior predictive's (fold_in 1).
    key = jax.random.fold_in(jax.random.PRNGKey(seed), 2)
    draws, y_sim = _prior_draws(problem, num_samples, key)
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

    validate → the model bound to its data (:func:`build_model`) → the one NUTS loop
    (:func:`bayes_rbfn.infer.sampler.run_chains`) → InferenceData. docs/library.md explains every option.

    Args:
        model: a model name (:func:`bayes_rbfn.models.available_models`) or a
            :class:`~bayes_rbfn.models.ModelSpec`.
        X: (N, D) or (N,) inputs.
        y: (N,) targets.
        sampler: the NUTS settings as one :class:`~bayes_rbfn.infer.sampler.SamplerSettings`, or give its
            fields by name in ``options`` (``chains``, ``draws``, ``warmup``, ``seed``, ``target_accept``,
            ``dense_mass``, ``max_tree_depth``, ``init``, ``chain_method``, ``progress``, ``checkpoint``,
            ``checkpoint_every``), not both.
        shard: ``True`` or a :class:`jax.sharding.Mesh` with a ``"data"`` axis: split the ``sor`` model's
            O(NM²) pass over the devices (chains then run one after the other).
        holdout_after: a backtest for one input: fit the points with x ≤ ``holdout_after`` and score the
            predictive on the rest (:func:`backtest_scores` reads the scores).
        holdout: a backtest for one input: fit all but the last ``holdout`` fraction of the points (by x)
            and score the predictive on the rest.
        check_diagnostics: warn (:class:`~bayes_rbfn.infer.diagnostics.ConvergenceWarning`) on poor
            r_hat, ESS or divergences.
        log_likelihood: store the LOO conditionals (N values per draw).
        posterior_predictive: draws per chain of replicates y_rep ~ p(y_rep | y) (default 1,000; None:
            every draw; 0: none).
        prior_draws: draws of the prior and the prior predictive to store (default 0: none).
        coords: ArviZ coordinates, e.g. ``{"input_dim": ["year"]}``.
        **options: the model's options (those of :func:`build_model`: ``Z``, ``num_inducing``, ``X_pred``,
            ``kernel``, ``priors``, ``fixed``, ``noise``, ``hyperprior``, ``likelihood``, ``mean``,
            ``group``, ``group_pred``, ``inducing_method``, ``jitter``, ``precision``) and the sampler's.

    Returns:
        The line's ArviZ object (InferenceData on ArviZ 0.x, DataTree on 1.x:
        :mod:`bayes_rbfn.io.arviz_compat`) with posterior, sample_stats, observed_data, constant_data,
        log_likelihood, posterior_predictive, predictions (f_mean, f_var at X_pred) and
        predictions_constant_data; with ``prior_draws``, prior and prior_predictive too. In the units of
        the data.

    Warns:
        Float32Warning: once per process when JAX's x64 mode is off (call ``numpyro.enable_x64()`` first).

    Raises:
        ValueError: a bad argument (the message names it), before sampling starts.
        DegenerateModelError: no parameter values have a finite log density.
        NonFiniteResultError: the predictions or log-likelihood hold NaN or ±∞.
    """
    _warn_if_float32()
    sampler_fields = {f.name for f in dataclasses.fields(SamplerSettings)}
    settings = _sampler_settings(sampler, **{k: options.pop(k) for k in list(options) if k in sampler_fields})
    unknown = sorted(set(options) - MODEL_OPTIONS)
    if unknown:
        raise ValueError(f"{unknown[0]}: not an option of fit (see help(bayes_rbfn.fit))")
    if posterior_predictive is not None:
        posterior_predictive = _non_negative_int(posterior_predictive, "posterior_predictive")
    prior_draws = 0 if prior_draws is None else _non_negative_int(prior_draws, "prior_draws")
    X_holdout = y_holdout = None
    if holdout_after is not None or holdout is not None:
        if options.get("group") is not None:
            raise ValueError(
                "holdout: a backtest of grouped data is not supported (split each group yourself)"
            )
        if options.get("likelihood", "gaussian") != "gaussian":
            raise ValueError("holdout: the backtest scores need the gaussian likelihood")
        X, y, X_holdout, y_holdout = holdout_split(X, y, holdout_after=holdout_after, holdout=holdout)
    problem = build_model(
        model, X, y, seed=settings.seed, _mesh_for=(shard, settings.chains, settings.chain_method), **options
    )
    spec, config, data, layout = problem.spec, problem.config, problem.data, problem.layout
    X, y, Z, X_pred = problem.X, problem.y, problem.Z, problem.X_pred
    if spread_over_processes(config.mesh):  # every process's rows, for the per-observation groups
        X, y = to_host(data["X"]), to_host(data["y"])
    _check_coords(coords, {"obs": X.shape[0], "input_dim": X.shape[1], "point": X_pred.shape[0]})
    need = result_bytes(
        chains=settings.chains,
        draws=settings.draws,
        params=estimated_params(Z, X.shape[1]),
        N=X.shape[0],
        S=X_pred.shape[0],
        replicates_per_chain=posterior_predictive,
    ) + 8 * prior_draws * (X.shape[0] + estimated_params(Z, X.shape[1]))
    check_result_size(need, available_memory())
    if config.mesh is not None and settings.chain_method is None:
        settings = dataclasses.replace(settings, chain_method="sequential")  # each chain uses every device
    with warnings.catch_warnings(), single_threaded_blas():
        # NumPyro warns when chains > devices; the fallback (resolve_chain_method) is deliberate.
        warnings.filterwarnings("ignore", message="There are not enough devices")
        try:
            kernel_nuts = nuts_kernel(
                problem.model,
                problem.args,
                settings,
                num_points=X.shape[0],
                search_args=(
                    problem.subset_args(MAP_SEARCH_POINTS, settings.seed)
                    if X.shape[0] >= 2 * MAP_SEARCH_POINTS
                    and resolve_init(settings.init, X.shape[0]) == "map"
                    else None
                ),
            )
            samples, stats = run_chains(kernel_nuts, problem.args, settings, run_record=problem.record())
        except RuntimeError as err:
            if NO_VALID_START not in str(err):
                raise
            raise explain_degenerate(problem, config.jitter) from err
        idata = _to_inference_data(
            spec, config, data, layout, samples, stats, X, y, Z, X_pred, log_likelihood=log_likelihood
        )
        if spec.uses_inducing:
            chosen = "given" if options.get("Z") is not None else options.get("inducing_method", "kmeans")
            idata.posterior.attrs["bayes_rbfn_inducing"] = chosen
        if prior_draws:
            _add_prior(idata, problem, prior_draws, settings.seed)
        if posterior_predictive != 0:
            replicates = _posterior_predictive(
                problem.model, problem.args, spec, layout, samples, settings.seed, posterior_predictive
            )
            arviz_compat.add_groups(idata, {"posterior_predictive": {"y": replicates}}, dims={"y": ["obs"]})
        check_finite(idata)
        if X_holdout is not None:
            _score_holdout(idata, X_holdout, y_holdout, **rebuild_inputs(problem.spec, problem.config))
        _set_coords(idata, coords)
    if check_diagnostics:
        diagnostics.warn_if_poor(diagnostics.check_convergence(idata))
        _warn_if_collapsed(spec, config, Z, samples, X_pred)
    return idata


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


def _posterior_predictive(
    bound_model: Any,
    model_args: tuple,
    spec: ModelSpec,
    layout: Layout,
    samples: Mapping[str, Any],
    seed: int,
    per_chain: int | None,
) -> np.ndarray:
    """Posterior predictive replicates y_rep ~ p(y_rep | y), (chains, kept draws, N).

    At (evenly thinned) posterior draws: the model's own observed site, replicated given the data
    (:func:`bayes_rbfn.infer.replicates.replicate_site`).
    """
    from bayes_rbfn.infer.replicates import replicate_site

    data, prior_values = model_args
    stored = {k: np.asarray(v) for k, v in samples.items() if k not in spec.unstored_sites}
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
    y_rep = layout.to_observations(y_rep, batch_ndim=1)
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


def _score_holdout(
    idata: Any, X_test: np.ndarray, y_test: np.ndarray, *, kernel: Any = None, mean: Any = None
) -> None:
    """Score the fit's predictive of y* at the held-out points; store them and the scores in ``idata``.

    The scores are :func:`bayes_rbfn.infer.scores.score`'s; ``kernel`` and ``mean`` are the fit's kernel
    object or family of one's own and callable prior mean, which no file holds (as
    :func:`bayes_rbfn.predict`).
    """
    import xarray as xr

    from bayes_rbfn.infer.scores import score

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


def _to_inference_data(
    spec, config, data, layout, samples, stats, X, y, Z, X_pred, log_likelihood: bool = True
) -> Any:
    samples = {k: np.asarray(v) for k, v in samples.items()}
    params = posterior_params(samples, config.fixed)
    work = draw_work(data)

    loglik = None
    if log_likelihood:
        loglik = layout.to_observations(pointwise_loo(spec, config, params, work, data), batch_ndim=2)
    extra_pred = tuple(jnp.asarray(a) for a in layout.predictive_args)

    f_mean, f_var = model_moments(spec, config, data, params, X_pred, extra=extra_pred)

    D = X.shape[1]
    dims: dict[str, list[str]] = {"y": ["obs"], "X": ["obs", "input_dim"], "X_pred": ["point", "input_dim"]}
    dims.update({"f_mean": ["point"], "f_var": ["point"]})
    sizes = {"input_dim": D}
    if Z is not None:
        sizes["inducing"] = np.shape(Z)[-2]
    sizes.update(layout.sizes)
    posterior, post_dims = {}, {}
    for name, value in samples.items():
        if name in spec.unstored_sites:
            continue
        posterior[name] = value
        extra_dims = value.shape[2:]
        if not extra_dims:
            continue
        site_dims = spec.site_dims(name, extra_dims, sizes)
        if site_dims is not None:
            post_dims[name] = site_dims
    dims.update(post_dims)

    constant = {"X": np.asarray(X)}
    predictions_constant = {"X_pred": np.asarray(X_pred)}
    if Z is not None:
        constant["Z"] = np.asarray(Z)
        dims["Z"] = ["inducing", "input_dim"]
    constant["y_offset"] = np.asarray(data["y_offset"])
    if "x_centre" in data:
        constant["x_centre"] = np.asarray(data["x_centre"])
        dims["x_centre"] = ["input_dim"]
    constant.update({k: np.asarray(v) for k, v in layout.constant_data.items()})
    predictions_constant.update({k: np.asarray(v) for k, v in layout.predictions_constant_data.items()})
    dims.update(layout.dims)

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
    mean_attr = config.mean if isinstance(config.mean, str) else "callable"
    attrs = {
        "bayes_rbfn_model": spec.name,
        "bayes_rbfn_kernel": config.family.name,
        "bayes_rbfn_kernel_kind": kernel_kind(config.family),
        "bayes_rbfn_fixed": json.dumps({k: np.asarray(v).tolist() for k, v in config.fixed.items()}),
        "bayes_rbfn_hyperprior": int(config.hyperprior),
        "bayes_rbfn_jitter": "" if config.jitter is None else float(config.jitter),
        "bayes_rbfn_likelihood": config.likelihood.name,
        "bayes_rbfn_mean": mean_attr,
        "bayes_rbfn_precision": config.precision,
    }
    idata.posterior.attrs.update(attrs)
    return idata
