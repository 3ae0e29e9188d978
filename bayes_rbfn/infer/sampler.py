"""The one NUTS loop: :func:`bayes_rbfn.fit`, the command line and SBC all sample through it.

NumPyro's NUTS kernel (``numpyro.infer.NUTS``) supplies the transition; this module drives it. A chain is
``kernel.init`` once, then ``kernel.sample`` applied again and again inside a compiled ``lax.scan``
(:func:`chain_init`, :func:`chain_advance`). :func:`run_chains` runs ``chains`` of them — vectorised
(``vmap``), one per device (``pmap``) or one after the other — in chunks of iterations, and with a
checkpoint folder saves the draws and the complete sampler state after each chunk
(:mod:`bayes_rbfn.infer.checkpoint`), so that a run cut anywhere continues exactly where it stopped.
SBC vmaps the same two functions over its simulated data sets (:mod:`bayes_rbfn.workflows.sbc`).

The draws equal NumPyro's ``MCMC.run`` with the same kernel, key and chain method, bit for bit, with or
without a checkpoint and whatever the chunk length: every iteration is the same compiled step applied to
the state the previous one left, and the PRNG key travels inside that state (tests/infer/test_resume.py).

Sampler settings travel as one :class:`SamplerSettings`; :func:`nuts_kernel` turns them into the kernel,
with the Laplace start of :func:`laplace_start` when ``init="map"`` (or ``"auto"`` on a large data set).

References
----------
[1] Hoffman, M. D. & Gelman, A. (2014). The No-U-Turn sampler. JMLR 15, 1593–1623.
[2] Phan, D., Pradhan, N. & Jankowiak, M. (2019). Composable effects for flexible and accelerated
    probabilistic programming in NumPyro. arXiv:1912.11554.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize
from numpyro.infer import NUTS, init_to_median, init_to_value

from bayes_rbfn.defaults import (
    DENSE_MASS_MAX_HYPERPARAMETERS,
    DENSE_MASS_MAX_PARAMS,
    INITS,
    MAP_START_MIN_POINTS,
    MAX_TREE_DEPTH,
)
from bayes_rbfn.gp.validation import check_positive_int
from bayes_rbfn.infer.checkpoint import DEFAULT_CHECKPOINT_EVERY, Checkpoint, CheckpointError
from bayes_rbfn.infer.programs import by_program
from bayes_rbfn.runtime import single_threaded_blas

__all__ = [
    "CHAIN_METHODS",
    "STAT_FIELDS",
    "ProcessLostError",
    "SamplerSettings",
    "chain_advance",
    "chain_init",
    "is_lost_process",
    "laplace_start",
    "lost_process_message",
    "nuts_kernel",
    "one_device_method",
    "resolve_chain_method",
    "resolve_dense_mass",
    "resolve_init",
    "run_chains",
    "sample_stats",
    "sampled_size",
    "sampled_sizes",
    "window_estimates_full_rank",
]

#: How several chains run: one per device, vectorised on one, or one after the other.
CHAIN_METHODS = ("parallel", "vectorized", "sequential")
#: The name of the chains' axis of the parallel (one chain per device) programs.
CHAIN_AXIS = "chains"

#: Sample statistics collected per iteration (names as NumPyro's ``extra_fields``).
STAT_FIELDS = ("diverging", "potential_energy", "accept_prob", "num_steps", "energy", "adapt_state.step_size")

#: Without a checkpoint, chunks shorter than this would cost more in dispatch than a progress bar is worth.
_MIN_PROGRESS_CHUNK = 10


@dataclass(frozen=True)
class SamplerSettings:
    """Everything NUTS is run with, checked once.

    Attributes:
        chains, draws, warmup: chains, kept draws and warm-up (adaptation) iterations per chain.
        seed: PRNG seed; chain c starts from ``jax.random.split(PRNGKey(seed), chains)[c]``.
        target_accept, dense_mass, max_tree_depth: NUTS's target acceptance probability, dense (True) or
            diagonal (False) mass matrix — None: dense when the model samples at most
            :data:`~bayes_rbfn.defaults.DENSE_MASS_MAX_PARAMS` unconstrained values, else diagonal —
            and at most 2^depth − 1 leapfrog steps per draw (depth 1 …
            :data:`~bayes_rbfn.defaults.MAX_TREE_DEPTH`).
        init: ``"median"`` (NumPyro's prior-median start, identity mass matrix), ``"map"`` (the
            posterior mode and a Laplace mass matrix, :func:`laplace_start`) or ``"auto"``: ``"map"``
            for :data:`~bayes_rbfn.defaults.MAP_START_MIN_POINTS` data points or more, else
            ``"median"`` (:func:`resolve_init`).
        chain_method: one of :data:`CHAIN_METHODS`, or None: parallel when there is a device per chain,
            else one after the other on a CPU and vectorised on an accelerator
            (:func:`resolve_chain_method`).
        progress: a progress bar on stderr.
        checkpoint: a folder to save the state and draws in after every ``checkpoint_every`` iterations
            (and to resume from), or None.
        checkpoint_every: iterations between checkpoints (and between progress-bar updates without one).
            Not the ``chunk_size`` of the models' streamed passes, which counts data points.
    """

    chains: int = 4
    draws: int = 1000
    warmup: int = 1000
    seed: int = 0
    target_accept: float = 0.8
    dense_mass: bool | None = None
    max_tree_depth: int = 10
    init: str = "auto"
    chain_method: str | None = None
    progress: bool = True
    checkpoint: str | os.PathLike[str] | None = None
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY

    def __post_init__(self) -> None:
        """Check every setting's type and range.

        Raises:
            ValueError: naming the first setting out of range.
        """
        for name in ("chains", "draws", "warmup", "max_tree_depth", "checkpoint_every"):
            check_positive_int(getattr(self, name), name)
        if self.max_tree_depth > MAX_TREE_DEPTH:
            raise ValueError(
                f"max_tree_depth: must be at most {MAX_TREE_DEPTH} (a tree of depth d takes up to 2^d − 1 "
                f"leapfrog steps per draw), got {self.max_tree_depth!r}"
            )
        if (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, int | np.integer)
            or not 0 <= self.seed < 2**63
        ):
            raise ValueError(f"seed: expected a whole number in 0 … 2⁶³ − 1, got {self.seed!r}")
        if not (isinstance(self.target_accept, int | float) and 0.0 < self.target_accept < 1.0):
            raise ValueError(f"target_accept: expected a number in (0, 1), got {self.target_accept!r}")
        if self.dense_mass is not None and not isinstance(self.dense_mass, bool | np.bool_):
            raise ValueError(f"dense_mass: expected True, False or None, got {self.dense_mass!r}")
        if self.init not in INITS:
            raise ValueError(f"init: expected one of {', '.join(INITS)}, got {self.init!r}")
        if self.chain_method is not None and self.chain_method not in CHAIN_METHODS:
            raise ValueError(
                f"chain_method: expected one of {', '.join(CHAIN_METHODS)} or None, got {self.chain_method!r}"
            )

    def record(self) -> dict:
        """The settings that decide the draws, JSON-able (for a checkpoint's fingerprint)."""
        skip = ("progress", "checkpoint", "chain_method")
        return {k: v for k, v in asdict(self).items() if k not in skip}


def resolve_chain_method(chains: int, requested: str | None) -> str:
    """The chain method a run uses: ``requested``, else one chosen by the devices.

    One chain per device when there are enough devices; else, on a CPU, one chain after the other, and on
    an accelerator all chains vectorised.

    On one CPU device vectorised chains are the slower: each step of the batch lasts as long as the
    longest of its trees, all of them evaluated, and the batched program compiles longer. On an
    accelerator a batch keeps the device busier than one chain does.
    """
    if requested is not None:
        return requested
    if chains > 1 and jax.local_device_count() >= chains:
        return "parallel"
    return "sequential" if chains == 1 else one_device_method()


def one_device_method() -> str:
    """How independent chains share one device: ``"sequential"`` on a CPU, ``"vectorized"`` on an accelerator.

    Used by :func:`resolve_chain_method`, and for SBC's replications too.
    """
    return "sequential" if jax.default_backend() == "cpu" else "vectorized"


#: The optimisers of the mode search (SciPy's names). Each runs from the same start and the lowest end
#: with a positive-definite Hessian is kept. BFGS alone needs the fewest gradients, but its curvature
#: estimate can carry it from the prior-median start out along the ridge of long lengthscales and large
#: variance, into a poorer local minimum or a region where the SoR potential is rounding noise
#: (indefinite Hessian). Newton-CG, whose Hessian-vector products are differences of the gradient, can
#: reach the mode where BFGS does not.
MODE_SEARCHES = ("BFGS", "Newton-CG")

#: The mode search's second start: the median start with the latent site of this name (every kernel
#: family's lengthscales) divided by :data:`SHORT_START_FACTOR`. From the prior median (ℓ a fifth of each
#: input's range) both optimisers can end in a local mode that takes a short-scale part of the signal for
#: noise; from shorter lengthscales the search can meet that part as signal first. The second start
#: makes the local mode rarer, not impossible, and larger factors do no better.
SHORT_START_SITE = "lengthscale"
SHORT_START_FACTOR = 4.0


class _SearchEnd(NamedTuple):
    """Where one optimiser of the mode search ended: u, the potential and the Hessian's Cholesky factor."""

    u: jax.Array
    value: float
    L: jax.Array


def _search_end(
    objective, gradient, model_args, start, start_value, method, maxiter, dtype, to_beat=np.inf
) -> _SearchEnd | str | None:
    """One SciPy optimiser from ``start``; its end with the Hessian there, a string saying why not, or None.

    The Hessian comes from central differences of the gradient, column by column, symmetrised. The string
    says why the end is not a candidate mode; None when the end is no lower than ``to_beat`` (the best end
    so far: its Hessian is not needed).
    """
    from bayes_rbfn.gp import linalg

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # inf/NaN trial points: the line search steps back
        result = scipy.optimize.minimize(
            objective, start, jac=True, method=method, options={"maxiter": maxiter}
        )
    if not (np.all(np.isfinite(result.x)) and np.isfinite(result.fun)):
        return "ended at a non-finite point"
    if not result.fun <= start_value:
        return "ended above its start"
    if result.fun >= to_beat:
        return None
    u = jnp.asarray(result.x, dtype=dtype)
    step = 1e-4 * jnp.maximum(1.0, jnp.abs(u))
    eye = jnp.eye(u.shape[0], dtype=u.dtype)
    columns = []
    for i in range(u.shape[0]):
        delta = step[i] * eye[i]
        columns.append((gradient(u + delta, model_args) - gradient(u - delta, model_args)) / (2 * step[i]))
    H = jnp.stack(columns, axis=1)
    L = linalg.cholesky(0.5 * (H + H.T), 0.0)
    if not bool(jnp.all(jnp.isfinite(L))):
        return "the Hessian of the potential at its end is not positive definite"
    return _SearchEnd(u, float(result.fun), L)


def _mode_starts(info: Any) -> list[np.ndarray]:
    """The mode search's starts in the unconstrained space, as float64 vectors.

    Args:
        info: NumPyro's ``initialize_model`` result at the median start.

    Returns:
        The median start and, where the model has a :data:`SHORT_START_SITE` and the shorter values lie
        in its prior's support, the same point with that site :data:`SHORT_START_FACTOR` times smaller.
    """
    from jax.flatten_util import ravel_pytree
    from numpyro.distributions.transforms import biject_to

    starts = [np.asarray(ravel_pytree(info.param_info.z)[0], dtype=np.float64)]
    if SHORT_START_SITE in info.param_info.z:  # the second start: every lengthscale shorter
        to_support = biject_to(info.model_trace[SHORT_START_SITE]["fn"].support)
        shorter = dict(info.param_info.z)
        shorter[SHORT_START_SITE] = to_support.inv(to_support(shorter[SHORT_START_SITE]) / SHORT_START_FACTOR)
        short_start = np.asarray(ravel_pytree(shorter)[0], dtype=np.float64)
        if np.all(np.isfinite(short_start)):  # else outside the prior's support (a bounded prior, say)
            starts.append(short_start)
    return starts


def _potential_value_and_gradient(info: Any, unravel: Callable) -> Callable:
    """The compiled value and gradient of the potential on the flat unconstrained vector.

    Args:
        info: NumPyro's ``initialize_model`` result (``dynamic_args=True``).
        unravel: maps the flat vector u back to the pytree of unconstrained sites.

    Returns:
        ``value_and_gradient(u, args)``: the potential given the model's arguments ``args`` and its
        gradient in u (:func:`~bayes_rbfn.infer.programs.by_program`: kept, so a refit compiles nothing).
    """

    def potential(u, args):
        return info.potential_fn(*args)(unravel(u))

    return by_program(jax.value_and_grad(potential))


def _lowest_end(
    value_and_gradient: Callable, args: tuple, starts: list[np.ndarray], maxiter: int, dtype: Any
) -> tuple[_SearchEnd | None, list[str]]:
    """Every optimiser of :data:`MODE_SEARCHES` from each of ``starts`` on the potential given ``args``.

    Args:
        value_and_gradient: the compiled potential and gradient, ``(u, args) -> (value, gradient)``.
        args: the model's arguments the potential is evaluated with.
        starts: the float64 start vectors, searched in order.
        maxiter: iterations of each optimiser at most.
        dtype: dtype of the unconstrained vector the compiled program takes.

    Returns:
        The lowest end that is a candidate mode (None if none is), and why the others were not.
    """

    def gradient(u, args):
        return value_and_gradient(u, args)[1]

    def objective(u: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = value_and_gradient(jnp.asarray(u, dtype=dtype), args)
        return float(value), np.asarray(grad, dtype=np.float64)

    best, failures = None, []
    for start in starts:
        start_value = objective(start)[0]
        for method in MODE_SEARCHES:
            to_beat = np.inf if best is None else best.value
            end = _search_end(objective, gradient, args, start, start_value, method, maxiter, dtype, to_beat)
            if isinstance(end, str):
                failures.append(f"{method}: {end}")
            elif end is not None:
                best = end
    return best, failures


def _staged_search(
    search: Callable, model_args: tuple, search_args: tuple | None, starts: list[np.ndarray]
) -> tuple[_SearchEnd | None, list[str]]:
    """The mode search on ``model_args``, first on ``search_args`` (a subset of the data) where given.

    Args:
        search: ``(args, starts) -> (lowest end or None, failures)``, as :func:`_lowest_end`.
        model_args: the model's arguments on all the data.
        search_args: the model's arguments for the first stage, or None for one stage.
        starts: the starts of the search (:func:`_mode_starts`).

    Returns:
        The lowest end on ``model_args`` that is a candidate mode (None if none is), and why the
        searches on ``model_args`` that ended elsewhere were not.
    """
    first_stage = search(search_args, starts)[0] if search_args is not None else None
    if first_stage is None:
        return search(model_args, starts)
    best, failures = search(model_args, [np.asarray(first_stage.u, dtype=np.float64)])
    if best is None:  # the subset's mode led nowhere on all the data: both starts there
        best, more = search(model_args, starts)
        failures += more
    return best, failures


def laplace_start(
    model: Any,
    model_args: tuple,
    seed: int = 0,
    *,
    maxiter: int = 200,
    search_args: tuple | None = None,
) -> tuple[dict, Any]:
    """The posterior mode in NumPyro's unconstrained space and the inverse Hessian there.

    NUTS started from the prior median with an identity mass matrix spends its first adaptation window
    on deep trees with tiny steps whenever the posterior is much narrower than the prior (a million data
    points: posterior sds ~1e-3 on the log scale). Started at the mode with the Laplace approximation's
    covariance H⁻¹ as its inverse mass matrix, its first step sizes are already of order one. The mode is
    searched by SciPy's BFGS and by its Newton-CG on the potential (−log joint density, data as arguments
    of one compiled program), both from the same start (:data:`MODE_SEARCHES`); the lower end where the
    Hessian H is positive definite is kept. H comes from central differences of the gradient, column by
    column (the SoR family's hand-written reverse pass has no forward mode), symmetrised and inverted
    through its Cholesky factor.

    Each step of the search is one call of the compiled value and gradient on the host
    (:func:`~bayes_rbfn.infer.programs.by_program`: kept, so a refit compiles nothing). SciPy's optimisers
    take a first step of unit length and backtrack, where a raw-gradient first step can leave a region of
    flat likelihood that a line search then takes for the mode.

    The searches start from the prior median and, where the model has lengthscales, from the same point
    with every lengthscale :data:`SHORT_START_FACTOR` times shorter: the lowest end of the two is kept
    (a GP's potential can have a local mode that explains part of the signal as noise, see
    :data:`SHORT_START_FACTOR`). With ``search_args`` (the model's arguments on a random subset of the
    data, :meth:`~bayes_rbfn.infer.fitting.GenerativeModel.subset_args`) the search runs in two stages:
    from both starts on the subset, where each gradient is cheaper, then on ``model_args`` from the
    lowest end of the first stage only (from both starts, as without a subset, if the first stage found
    no mode or its mode led to none). The mode, the Hessian and the failure rule are those of
    ``model_args`` alone.

    Args:
        model: NumPyro model.
        model_args: its positional arguments.
        seed: PRNG seed of the median start the optimisers begin from.
        maxiter: iterations of each optimiser at most, in each stage.
        search_args: the model's arguments for the first stage, or None for one stage.

    Returns:
        (values, inverse_mass_matrix): constrained values of the latent sites at the mode (for
        ``init_to_value``) and the (P, P) inverse Hessian in NumPyro's order of the unconstrained sites.

    Raises:
        FloatingPointError: when no optimiser ends at a finite point below its start with a positive
            definite Hessian; the message gives each one's reason (the caller falls back to the median
            start).
    """
    from jax.flatten_util import ravel_pytree
    from numpyro.infer.util import initialize_model

    from bayes_rbfn.gp import linalg

    info = initialize_model(
        jax.random.PRNGKey(seed),
        model,
        model_args=model_args,
        init_strategy=init_to_median(num_samples=15),
        dynamic_args=True,
    )
    u0, unravel = ravel_pytree(info.param_info.z)
    value_and_gradient = _potential_value_and_gradient(info, unravel)

    def search(args: tuple, starts: list[np.ndarray]) -> tuple[_SearchEnd | None, list[str]]:
        return _lowest_end(value_and_gradient, args, starts, maxiter, u0.dtype)

    best, failures = _staged_search(search, model_args, search_args, _mode_starts(info))
    if best is None:
        raise FloatingPointError(f"the posterior mode search found no mode ({'; '.join(failures)})")
    u, eye = best.u, jnp.eye(best.u.shape[0], dtype=best.u.dtype)
    values = info.postprocess_fn(*model_args)(unravel(u))
    return {k: values[k] for k in info.param_info.z}, linalg.cho_solve(best.L, eye)


def window_estimates_full_rank(num_params: int, warmup: int, dense: bool) -> bool:
    """Whether each mass-matrix estimate of NumPyro's warm-up has draws enough to be positive definite.

    Positive definite unshrunk, from every estimate of the warm-up schedule: more draws than parameters for
    a dense matrix, two for a diagonal one.
    """
    from numpyro.infer.hmc_util import build_adaptation_schedule

    slow_windows = build_adaptation_schedule(warmup)[1:-1]  # between the start and end buffers
    smallest = min((w.end - w.start + 1 for w in slow_windows), default=None)
    return smallest is None or smallest > (num_params if dense else 1)


def sampled_sizes(model: Callable, model_args: tuple) -> dict[str, int]:
    """The unconstrained values NUTS samples in ``model``: {latent sample site: its size}.

    From one abstract trace (``jax.eval_shape``: nothing is computed or compiled).
    """
    from numpyro import handlers

    def latent_values() -> dict:
        trace = handlers.trace(handlers.seed(model, jax.random.PRNGKey(0))).get_trace(*model_args)
        return {
            name: site["value"]
            for name, site in trace.items()
            if site["type"] == "sample" and not site["is_observed"]
        }

    return {name: int(np.prod(value.shape)) for name, value in jax.eval_shape(latent_values).items()}


def sampled_size(model: Callable, model_args: tuple) -> int:
    """How many unconstrained values NUTS samples in ``model``: the sizes of its latent sample sites."""
    return sum(sampled_sizes(model, model_args).values())


def resolve_dense_mass(model: Callable, model_args: tuple, settings: SamplerSettings) -> bool:
    """The settings' ``dense_mass``, or for None whether the model samples few enough values.

    Few enough: at most :data:`~bayes_rbfn.defaults.DENSE_MASS_MAX_PARAMS` values, or at most
    :data:`~bayes_rbfn.defaults.DENSE_MASS_MAX_HYPERPARAMETERS` when every sampled site is a hyperparameter
    (no weights, no raw variables: :func:`bayes_rbfn.models.layout.is_hyperparameter_site`).
    """
    from bayes_rbfn.models.layout import is_hyperparameter_site

    if settings.dense_mass is not None:
        return bool(settings.dense_mass)
    sizes = sampled_sizes(model, model_args)
    total = sum(sizes.values())
    if total <= DENSE_MASS_MAX_PARAMS:
        return True
    return total <= DENSE_MASS_MAX_HYPERPARAMETERS and all(map(is_hyperparameter_site, sizes))


def resolve_init(init: str, num_points: int | None) -> str:
    """The start a run takes: ``init``, or for ``"auto"`` the mode or the median by the data's size.

    ``"auto"`` takes the mode (``"map"``) from :data:`~bayes_rbfn.defaults.MAP_START_MIN_POINTS` data points
    on — where the warm-up gradients it saves outweigh its compilation — and ``"median"`` below it or where
    the size is not given.
    """
    if init != "auto":
        return init
    return "map" if num_points is not None and num_points >= MAP_START_MIN_POINTS else "median"


def nuts_kernel(
    model: Callable,
    model_args: tuple,
    settings: SamplerSettings,
    *,
    num_points: int | None = None,
    search_args: tuple | None = None,
) -> NUTS:
    """NumPyro's NUTS on ``model`` with the settings' step-size target, mass matrix and start.

    With ``init="map"`` — or ``"auto"`` and ``num_points`` (the data set's size) at least
    :data:`~bayes_rbfn.defaults.MAP_START_MIN_POINTS` — the chains start at the posterior mode with the
    Laplace inverse Hessian as their initial mass matrix (:func:`laplace_start`, its first stage on
    ``search_args`` where given; the median start, with a ``RuntimeWarning``, if the mode search fails).
    """
    init_strategy, inverse_mass_matrix = init_to_median(num_samples=15), None
    dense_mass = resolve_dense_mass(model, model_args, settings)
    if resolve_init(settings.init, num_points) == "map":
        try:
            with single_threaded_blas():
                values, inverse_mass_matrix = laplace_start(
                    model, model_args, settings.seed, search_args=search_args
                )
            init_strategy = init_to_value(values=values)
            if not dense_mass:
                inverse_mass_matrix = jnp.diagonal(inverse_mass_matrix)
        except FloatingPointError as err:
            chose = "" if settings.init == "map" else f" (the mode start, at N ≥ {MAP_START_MIN_POINTS:,})"
            message = f"init={settings.init!r}{chose} fell back to the median start: {err}"
            warnings.warn(message, RuntimeWarning, stacklevel=3)
    return NUTS(
        model,
        target_accept_prob=settings.target_accept,
        dense_mass=dense_mass,
        max_tree_depth=settings.max_tree_depth,
        init_strategy=init_strategy,
        inverse_mass_matrix=inverse_mass_matrix,
        # NumPyro (like Stan) shrinks each window's mass-matrix estimate towards 10⁻³·I, an absolute scale
        # that dwarfs posterior variances of ~10⁻⁶ (a million points). With a Laplace start the estimates
        # are taken as they are — where every window has more draws than there are parameters, so that
        # an unshrunk dense estimate cannot be singular.
        regularize_mass_matrix=inverse_mass_matrix is None
        or not window_estimates_full_rank(inverse_mass_matrix.shape[0], settings.warmup, dense_mass),
    )


def chain_init(kernel: Any, warmup: int) -> Callable[[jax.Array, tuple], Any]:
    """``init(key, model_args)`` → the state of one chain before its first iteration.

    Traceable: vmap it over chains, or over SBC's data sets.
    """

    def init(key: jax.Array, model_args: tuple) -> Any:
        return kernel.init(key, warmup, None, model_args, {})

    return init


def _stat(state: Any, field: str) -> jax.Array:
    value = state
    for part in field.split("."):
        value = getattr(value, part)
    return value


def chain_advance(kernel: Any, batched: bool = False) -> Callable[[Any, tuple, int], tuple[Any, dict]]:
    """``advance(state, model_args, length)`` → (state after ``length`` NUTS iterations, what each left).

    What each iteration left: ``{"z": {site: (length, ...)}, stat: (length,)}`` for the
    :data:`STAT_FIELDS`.

    With ``batched``, ``state`` and every array of ``model_args`` carry a leading axis of independent
    chains, each with its own data (SBC's replications), and what is left is ``(length, chains, ...)``:
    the transition is vmapped inside the scan. (A vmap of the whole scan gives the same draws but batches
    NUTS's nested while loops again in every round of the scan's batching fixpoint, so it traces and
    compiles longer.)
    """
    transition = lambda s, args: kernel.sample(s, args, {})  # noqa: E731
    if batched:
        transition = jax.vmap(transition)

    def advance(state: Any, model_args: tuple, length: int) -> tuple[Any, dict]:
        def step(s: Any, _: None) -> tuple[Any, dict]:
            s = transition(s, model_args)
            return s, {"z": s.z, **{f: _stat(s, f) for f in STAT_FIELDS}}

        return jax.lax.scan(step, state, None, length=length)

    return advance


def _chunk_length(settings: SamplerSettings) -> int:
    total = settings.warmup + settings.draws
    if settings.checkpoint is not None:
        return settings.checkpoint_every
    if not settings.progress:
        return total  # one compiled scan
    # One compiled program for every chunk: a length that divides the run, else the run in one piece.
    length = math.gcd(total, settings.checkpoint_every)
    return length if length >= _MIN_PROGRESS_CHUNK else total


def run_chains(
    kernel: Any,
    model_args: tuple,
    settings: SamplerSettings,
    *,
    run_record: dict | None = None,
    on_chunk: Callable[[int, int], None] | None = None,
) -> tuple[dict, dict]:
    """Run the settings' chains of NUTS on ``kernel``; the post-warm-up draws and sample statistics.

    Args:
        kernel: a NumPyro NUTS kernel built on the model (:func:`nuts_kernel`).
        model_args: positional arguments of the model (arrays: data, prior parameters).
        settings: :class:`SamplerSettings`. With ``checkpoint`` the run continues from the checkpoint in
            that folder when it holds one of the same run, else starts afresh there.
        run_record: JSON-able description of the model and its data besides ``model_args`` (which are
            hashed), recorded in a checkpoint and compared on resume.
        on_chunk: called as ``on_chunk(iterations_done, total)`` after each chunk.

    Returns:
        ``(samples, stats)``: constrained draws ``{site: (chains, draws, ...)}`` (as NumPyro's
        ``get_samples(group_by_chain=True)``) and ``{field: (chains, draws)}`` for :data:`STAT_FIELDS`.

    Raises:
        CheckpointError: the folder holds a checkpoint of a different run, a corrupt one, or other files.
    """
    chains, total = settings.chains, settings.warmup + settings.draws
    method = "sequential" if chains == 1 else resolve_chain_method(chains, settings.chain_method)
    # As NumPyro's MCMC: one chain starts from the seed's key itself, several from its split.
    key = jax.random.PRNGKey(settings.seed)
    keys = key[None] if chains == 1 else jax.random.split(key, chains)
    init, advance = chain_init(kernel, settings.warmup), chain_advance(kernel)
    parallel = method == "parallel"
    store = None
    if settings.checkpoint is not None:
        record = {**settings.record(), **(run_record or {}), "chain_method": method}
        store = Checkpoint(settings.checkpoint, model_args, record, total)
    if method == "sequential":
        # One chain after the other, each its own unbatched program, initialised eagerly — as NumPyro's
        # MCMC runs a single chain or "sequential" chains (a compiled init rounds differently). Chunk by
        # chunk the chains take turns, so that a checkpoint holds every chain's state after the same
        # iteration; a chain's draws do not depend on the chunks it ran in.
        one_advance = by_program(advance, static_argnums=(2,))

        def each_init(keys: jax.Array, args: tuple) -> Any:
            return _stack([init(k, args) for k in keys])

        def each_advance(state: Any, args: tuple, length: int) -> tuple[Any, dict]:
            runs = [one_advance(_take(state, c), args, length) for c in range(chains)]
            return _stack([r[0] for r in runs]), _stack([r[1] for r in runs])  # chunk: (chains, length, ...)

        with single_threaded_blas():
            collected = _run(each_init, each_advance, keys, model_args, settings, store, on_chunk)
        return _postprocess(kernel, model_args, collected)
    # Several chains batched together, as NumPyro's MCMC batches them: one per device (each initialised
    # and advanced inside pmap), or vectorised (the kernel initialised eagerly with all the keys, which
    # makes it vmap its own transition). The methods compile to different programs whose rounding
    # differs, so a checkpoint continues only under the method that started it (it records the method).
    if parallel:
        # A named axis: pmap's default axis is an object whose repr (a memory address) enters the lowered
        # program, whose persistent-cache key then differs in every process (all its compile paid again).
        batched_init = jax.pmap(init, in_axes=(0, None), axis_name=CHAIN_AXIS)
        batched_advance = jax.pmap(
            advance, in_axes=(0, None, None), static_broadcasted_argnums=2, axis_name=CHAIN_AXIS
        )
    else:
        advance_all = by_program(advance, static_argnums=(2,))

        def batched_init(keys: jax.Array, args: tuple) -> Any:
            return kernel.init(keys, settings.warmup, None, args, {})

        def batched_advance(state: Any, args: tuple, length: int) -> tuple[Any, dict]:
            state, chunk = advance_all(state, args, length)  # chunk: (length, chains, ...)
            return state, jax.tree_util.tree_map(lambda a: jnp.swapaxes(a, 0, 1), chunk)

    with single_threaded_blas():
        collected = _run(batched_init, batched_advance, keys, model_args, settings, store, on_chunk)
    return _postprocess(kernel, model_args, collected)


def sample_stats(stats: dict) -> dict[str, np.ndarray]:
    """:func:`run_chains`'s statistics under ArviZ's names for the ``sample_stats`` group.

    ``diverging``, ``lp`` (minus the potential energy), ``acceptance_rate``, ``n_steps``, ``tree_depth``,
    ``energy``, ``step_size``; each (chains, draws).
    """
    steps = np.asarray(stats["num_steps"])
    return {
        "diverging": np.asarray(stats["diverging"]),
        "lp": -np.asarray(stats["potential_energy"]),
        "acceptance_rate": np.asarray(stats["accept_prob"]),
        "n_steps": steps,
        "tree_depth": np.floor(np.log2(np.maximum(steps, 1))).astype(int),
        "energy": np.asarray(stats["energy"]),
        "step_size": np.asarray(stats["adapt_state.step_size"]),
    }


def _stack(trees: list) -> Any:
    """Trees of one chain each → one tree with a leading axis of chains."""
    return jax.tree_util.tree_map(lambda *parts: jnp.stack(parts), *trees)


def _take(tree: Any, chain: int) -> Any:
    return jax.tree_util.tree_map(lambda a: a[chain], tree)


def _run(init, advance, keys, model_args, settings, store=None, on_chunk=None) -> dict:
    """The chunk loop over batched chains (``keys`` (C, 2)).

    Returns {"z": {site: (C, draws, ...)}, stat: (C, draws)}: the kept (post-warm-up) iterations.
    """
    warmup, total = settings.warmup, settings.warmup + settings.draws
    state = init(keys, model_args)
    done, kept = 0, []
    if store is not None:
        done, state = store.resume(state)
    length = _chunk_length(settings)
    bar = _progress_bar(total, done, settings.progress)
    try:
        while done < total:
            step = min(length, total - done)
            try:
                state, chunk = advance(state, model_args, step)
                keep = max(warmup - done, 0)  # warm-up iterations of this chunk are not kept
                draws = None
                if keep < step:
                    draws = jax.tree_util.tree_map(lambda a, k=keep: np.asarray(a)[:, k:], chunk)
                if store is not None:
                    store.save(done + step, state, draws)
                elif draws is not None:
                    kept.append(draws)
            except Exception as err:  # the chunk's computation or its transfer: a peer process may be gone
                if jax.process_count() > 1 and is_lost_process(err):
                    raise ProcessLostError(lost_process_message(err, store, done)) from err
                raise
            done += step
            if bar is not None:
                bar.set_description("sample" if done > warmup else "warmup")
                bar.update(step)
            if on_chunk is not None:
                on_chunk(done, total)
    finally:
        if bar is not None:
            bar.close()
    if store is not None:
        if jax.process_count() > 1:  # process 0 writes the chunks the others read back
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("bayes_rbfn checkpoint written")
        collected = store.draws()
        got = {np.shape(a)[1] for a in jax.tree_util.tree_leaves(collected)}
        if got != {settings.draws}:  # read_checkpoint's checks make this unreachable; never return fewer
            raise CheckpointError(
                f"{store.folder}: the checkpoint holds {sorted(got)} draws per chain, not {settings.draws}"
            )
        return collected
    return jax.tree_util.tree_map(lambda *parts: np.concatenate(parts, axis=1), *kept)


class ProcessLostError(RuntimeError):
    """Another process of a multi-process run stopped, so this one cannot go on."""


#: What the collectives' errors say when a process of the run is gone (Gloo's closed connection, the
#: coordination service's missed heartbeats).
_LOST_PROCESS_SIGNS = ("gloo", "connection closed", "heartbeat", "coordination service", "unavailable")


def is_lost_process(err: BaseException) -> bool:
    """Whether ``err``, raised by a computation of a multi-process run, says a process is gone."""
    text = str(err).lower()
    return any(sign in text for sign in _LOST_PROCESS_SIGNS)


def lost_process_message(err: BaseException, store: Checkpoint | None, done: int) -> str:
    """The one-paragraph error of a run whose peer process stopped: what happened and how to go on.

    Args:
        err: the collective's error.
        store: the run's checkpoint, or None.
        done: the iterations done before the failed chunk.

    Returns:
        The message.
    """
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    where = (
        f"the checkpoint in {store.folder} holds the run up to its last saved chunk (iteration ≤ {done}): "
        "start every process again with the same arguments to continue from it"
        if store is not None
        else "nothing was saved (give a checkpoint folder to be able to resume)"
    )
    return (
        f"another process of the run stopped (process {jax.process_index()} of {jax.process_count()} saw "
        f"its collectives fail: {first}); this process stops too. {where}"
    )


def _postprocess(kernel: Any, model_args: tuple, collected: dict) -> tuple[dict, dict]:
    postprocess = by_program(lambda z, args: jax.vmap(jax.vmap(kernel.postprocess_fn(args, {})))(z))
    samples = {k: np.asarray(v) for k, v in postprocess(collected["z"], model_args).items()}
    return samples, {f: np.asarray(collected[f]) for f in STAT_FIELDS}


def _progress_bar(total: int, done: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc="warmup", unit="it", dynamic_ncols=True)
