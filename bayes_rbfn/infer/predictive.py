"""Posterior predictive from per-draw analytic moments: batching, mixtures and draws.

Given a posterior (one hyperparameter set per draw) every model gives the latent f* at new inputs in closed
form for each draw: mean m_s and variance v_s. The posterior predictive is the equal-weight mixture over
draws, whose moments follow from the law of total variance:

    E[f*] = mean_s m_s,     Var[f*] = mean_s v_s + var_s m_s,

and for an observation y* the noise variance σ_s² is added inside the first term. Both the per-draw
moments and the mixture are computed in batches of test points, so memory stays bounded (draws ×
batch × M) for 100k test points.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayes_rbfn.gp.streaming import to_host

__all__ = [
    "Band",
    "PredictiveSummary",
    "band_of_the_mean",
    "band_of_y",
    "compiled_predict",
    "draw_devices",
    "mixture_moments",
    "mixture_quantiles",
    "model_moments",
    "noise_draws",
    "per_draw_moments",
    "predict",
    "predict_model",
    "predictor_key",
    "sample_predictive",
]

#: Test points per batch when evaluating per-draw moments.
DEFAULT_BATCH = 2048

#: Working memory (bytes) of one call of a streaming model's per-draw predictive (see
#: :func:`streamed_batches`); the per-draw outputs themselves (2 × draws × S × 8 bytes) come on top.
STREAM_BUDGET = 1 << 28

#: At most this many draws per call of a streaming model's per-draw predictive. Under ``vmap`` each chunk's
#: products become batched products over the draws; a few draws at a time keep the batch cache-resident,
#: where many fall out of cache.
MAX_DRAWS_PER_CALL = 8


def streamed_batches(S: int, M: int, budget: int = STREAM_BUDGET, N: int | None = None) -> tuple[int, int]:
    """(test points per call, draws per call) for a model whose ``predict`` streams over its test points.

    All S points go in one call, so each draw's O(NM²) factor is computed once; draws are batched so that
    the call's working memory, ~8·(2S + 4MC + 8M²) bytes per draw for chunks of C points
    (:func:`bayes_rbfn.gp.streaming.chunk_size_for`, but never more than the N data or S test points a
    chunk holds), stays within ``budget``, and at most :data:`MAX_DRAWS_PER_CALL` at a time.
    """
    from bayes_rbfn.gp.streaming import chunk_size_for

    C = min(chunk_size_for(M), max(int(S), int(N or 0)))
    per_draw = 8 * (2 * S + 4 * M * C + 8 * M * M)
    return max(int(S), 1), int(max(1, min(budget // per_draw, MAX_DRAWS_PER_CALL)))


@dataclass(frozen=True)
class PredictiveSummary:
    """Posterior predictive summary at S test points: per-draw moments and their mixture over draws.

    Not NumPyro's ``Predictive``, which draws samples from a model: this holds moments, in closed form.

    Attributes:
        f_mean, f_var: per-draw moments of the latent f* (noise excluded), with the draws on the leading
            axes: (chains, draws, S) from an InferenceData, (draws, S) from a dict of samples.
        mean: mixture mean (S,). var: mixture variance of the latent f* (S,).
        var_y: mixture variance of a new observation y* (f* plus noise) (S,); None without a noise σ.
        noise: σ per draw (the leading axes of ``f_mean``) or per draw and point (its shape), or None (a
            model without Gaussian noise).
    """

    f_mean: np.ndarray
    f_var: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    var_y: np.ndarray | None
    noise: np.ndarray | None = None

    @classmethod
    def from_draws(cls, f_mean: Any, f_var: Any, noise: Any | None = None) -> PredictiveSummary:
        """The summary of per-draw moments, mixed over draws by :func:`mixture_moments`.

        Args:
            f_mean: per-draw latent means, draws on the leading axes (…, S).
            f_var: per-draw latent variances, the shape of ``f_mean``.
            noise: σ per draw or per draw and point (see :func:`mixture_moments`), or None.
        """
        f_mean = np.asarray(f_mean, dtype=float)
        f_var = np.asarray(f_var, dtype=float)
        mean, var, var_y = mixture_moments(f_mean, f_var, noise)
        noise = None if noise is None else np.asarray(noise, dtype=float)
        return cls(f_mean=f_mean, f_var=f_var, mean=mean, var=var, var_y=var_y, noise=noise)

    def quantiles(self, probs: Any, *, latent: bool = False) -> np.ndarray:
        """Quantiles of the mixture over draws at every point (:func:`mixture_quantiles`, exact).

        Of a new observation y*, each draw's N(m_s, v_s + σ_s²), by default; of the latent f*, each draw's
        N(m_s, v_s), with ``latent=True``.

        Args:
            probs: (Q,) probabilities in (0, 1), e.g. [0.025, 0.975].
            latent: quantiles of f* instead of y*.

        Returns:
            (Q, S) quantiles; unpack a pair as ``lo, hi = pred.quantiles([0.025, 0.975])``.
        """
        return mixture_quantiles(self.f_mean, self._draw_variances(latent), probs)

    def band(self, masses: Sequence[float] = (0.5, 0.95), *, latent: bool = False) -> Band:
        """Mean and central intervals of the mixture (of y* by default, of f* with ``latent=True``).

        Args:
            masses: central interval probabilities, e.g. (0.5, 0.95).
            latent: intervals of f* instead of y*.
        """
        return Band(
            mean=self.mean,
            intervals=_intervals(self.f_mean, self._draw_variances(latent), masses),
            quantity="f*" if latent else "y*",
            sd_f=np.sqrt(self.var),
            sd_y=None if self.var_y is None else np.sqrt(self.var_y),
        )

    def _draw_variances(self, latent: bool) -> np.ndarray:
        """Each draw's variance of f* (``latent``) or of y*, (T, S)."""
        if latent:
            return self.f_var.reshape(-1, self.f_var.shape[-1])
        if self.noise is None:
            raise ValueError(
                "latent: this predictive has no noise σ (a non-Gaussian likelihood, or an rbfn layer without "
                "noise_site=), so there is no band of y*; pass latent=True for f*"
            )
        return _with_noise(self.f_var, self.noise)


def _with_noise(f_var: np.ndarray, noise: Any | None) -> np.ndarray:
    """Per-draw variances of y*, (T, S): f_var plus σ² of each draw (or of each draw and point)."""
    S = f_var.shape[-1]
    var = np.asarray(f_var, dtype=float).reshape(-1, S)
    return var if noise is None else var + np.reshape(noise, (var.shape[0], -1)) ** 2


def per_draw_moments(
    predict_fn: Any,
    params: Mapping[str, Any],
    X_test: Any,
    *,
    batch_size: int | None = DEFAULT_BATCH,
    extra: tuple = (),
    draw_batch: int | None = None,
    data: Any = None,
    devices: Sequence[Any] | None = None,
    key: Hashable | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Evaluate ``predict_fn(draw_params, X_batch, *extra_batch) → (mean, var)`` for every draw.

    Args:
        predict_fn: per-draw traceable function.
        params: dict of arrays with leading (chains, draws) axes.
        X_test: (S, D) test inputs.
        batch_size: test points per batch (``None``: all at once). The last batch is padded to full size,
            so one compiled program serves every call.
        extra: arrays with leading S axis batched alongside X_test.
        draw_batch: draws per batch (``None``: all at once). The last batch is padded to full size, as
            the test points' are.
        data: when given, passed to ``predict_fn`` as its keyword ``data``: an argument of the compiled
            function rather than a constant folded into it (compiling does not grow with the data, and
            data of the same shapes reuse the compiled program).
        devices: spread the draw batches round-robin over these devices (data and test inputs are
            copied to each once; the draws are independent, so nothing is communicated). ``None``: the
            default device. See :func:`draw_devices`.
        key: what defines ``predict_fn``, by value (:func:`predictor_key`): with a key, the compiled
            program is kept and a later call with an equal key reuses it (see :func:`compiled_predict`).

    Returns:
        (f_mean, f_var), each (chains, draws, S) as NumPy arrays.
    """
    leaves = jax.tree_util.tree_leaves(params)
    chains, draws = leaves[0].shape[:2]
    # Sliced on the host: a slice of a device array would be one more dispatched program per batch.
    flat = jax.tree_util.tree_map(lambda a: np.asarray(a).reshape(chains * draws, *np.shape(a)[2:]), params)
    total = chains * draws
    draw_batch = total if draw_batch is None else max(1, min(draw_batch, total))
    fn = compiled_predict(predict_fn, data is not None, key=key)
    S = X_test.shape[0]
    batch_size = S if batch_size is None else max(1, min(int(batch_size), S))
    means = np.empty((total, S))
    vars_ = np.empty((total, S))
    devices = list(devices) if devices else [None]

    def place(tree, device):
        return tree if device is None else jax.device_put(tree, device)

    data_on = [place(data, device) for device in devices]
    pending: deque = deque()

    def store(d0, d1, start, stop, m, v):
        means[d0:d1, start:stop] = to_host(m)[: d1 - d0, : stop - start]
        vars_[d0:d1, start:stop] = to_host(v)[: d1 - d0, : stop - start]

    for start in range(0, S, batch_size):
        stop = min(start + batch_size, S)
        Xb = _pad_rows(X_test[start:stop], batch_size)
        eb = tuple(_pad_rows(e[start:stop], batch_size) for e in extra)
        inputs_on = [place((Xb, eb), device) for device in devices]
        for k, d0 in enumerate(range(0, total, draw_batch)):
            d1 = min(d0 + draw_batch, total)
            on = k % len(devices)
            pb = jax.tree_util.tree_map(lambda a, d0=d0, d1=d1: _pad_rows(a[d0:d1], draw_batch), flat)
            Xd, ed = inputs_on[on]
            # Dispatch this batch before copying out an earlier one, so host copies overlap compute
            # (and every device has a batch in flight).
            pending.append((d0, d1, start, stop, *fn(place(pb, devices[on]), Xd, data_on[on], *ed)))
            if len(pending) > len(devices):
                store(*pending.popleft())
    while pending:
        store(*pending.popleft())
    return means.reshape(chains, draws, S), vars_.reshape(chains, draws, S)


def draw_devices(config: Any) -> list[Any] | None:
    """The devices :func:`per_draw_moments` spreads a model's draws over, or None.

    Every local device when there are several and the model's pass is not already sharded over a mesh
    (``config.mesh``), else None.

    On several GPUs this divides the predictive's time by their number; on a CPU host started with
    ``XLA_FLAGS=--xla_force_host_platform_device_count=k`` it runs k draw batches at once.
    """
    if getattr(config, "mesh", None) is not None:
        return None
    local = jax.local_devices()
    return local if len(local) > 1 else None


def draw_work(data: Mapping[str, Any]) -> int:
    """Rough size (elements) of one draw's working arrays: 4·N·M (M = N without inducing inputs)."""
    n = int(np.prod(data["y"].shape))
    m = int(data["Z"].shape[-2]) if "Z" in data else n
    return n * m * 4


def model_moments(
    spec: Any,
    config: Any,
    data: Mapping[str, Any],
    params: Mapping[str, Any],
    X_test: Any,
    *,
    extra: tuple = (),
    batch_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-draw moments ``spec.predict`` gives at X_test, batched for the model.

    Used by ``fit`` and :func:`predict`.

    A model whose ``predict`` streams gets all test points per call (:func:`streamed_batches`: each draw's
    O(NM²) factor once); any other gets ``batch_size`` (default :data:`DEFAULT_BATCH`) points per call and
    as many draws as keep ~5·10⁷ elements of working arrays (:func:`draw_work`). Draws are spread over the
    local devices (:func:`draw_devices`), with BLAS single-threaded.

    Returns:
        (f_mean, f_var), each (chains, draws, S).
    """
    from bayes_rbfn.runtime import single_threaded_blas

    def predict_fn(p, Xb, *eb, data):
        return spec.predict(p, data, config, Xb, *eb)

    M = int(data["Z"].shape[-2]) if "Z" in data else int(data["X"].shape[0])
    if batch_size is None and spec.predict_streams:
        batch_size, draw_batch = streamed_batches(X_test.shape[0], M, N=int(np.prod(data["y"].shape)))
    else:
        batch_size = DEFAULT_BATCH if batch_size is None else batch_size
        draw_batch = int(max(1, 5e7 // max(draw_work(data) + batch_size * M, 1)))
    with single_threaded_blas():
        return per_draw_moments(
            predict_fn,
            params,
            X_test,
            batch_size=batch_size,
            extra=extra,
            draw_batch=draw_batch,
            data=data,
            devices=draw_devices(config),
            key=predictor_key(spec, config),
        )


def _pad_rows(a: Any, n: int) -> Any:
    """``a`` with its leading axis padded to ``n`` rows by repeating its last row (NumPy stays NumPy)."""
    k = a.shape[0]
    if k == n:
        return a
    xp = np if isinstance(a, np.ndarray) else jnp
    return xp.concatenate([a, xp.repeat(a[-1:], n - k, axis=0)])


#: Compiled per-draw predictives, by the value of what defines them (:func:`predictor_key`), most recently
#: used last. JAX caches a compiled program by the identity of the Python function, and every call of
#: :func:`model_moments` makes a new one (a closure over the model and its settings, which :func:`predict`
#: rebuilds from the file): without this, each ``predict`` traced and compiled the predictive anew.
_COMPILED: OrderedDict[Hashable, Any] = OrderedDict()

#: How many compiled predictives :data:`_COMPILED` keeps.
COMPILED_KEPT = 16


def predictor_key(spec: Any, config: Any) -> Hashable | None:
    """What defines a model's per-draw predictive, by value; None when a part cannot be hashed.

    The model and every setting its ``predict`` reads (kernel family, pinned values, jitter, likelihood,
    prior mean, the pass's chunking, mesh and precision); the priors are not among them. With None nothing
    is cached.
    """
    fixed = tuple(
        sorted(
            (name, np.asarray(v).dtype.str, np.shape(v), np.asarray(v).tobytes())
            for name, v in config.fixed.items()
        )
    )
    key = (
        spec,
        config.family,
        fixed,
        config.hyperprior,
        config.jitter,
        config.fast,
        config.chunk_size,
        config.mesh,
        config.precision,
        config.likelihood,
        config.mean,
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def compiled_predict(predict_fn: Any, with_data: bool = False, key: Hashable | None = None) -> Any:
    """Jitted, draw-vmapped ``predict_fn``; test inputs, data and extras are shared by all draws.

    With a ``key`` (:func:`predictor_key`) the program is kept (the last :data:`COMPILED_KEPT`) and
    returned again for an equal key, so that a second ``predict`` of the same model and shapes runs
    without tracing or compiling.
    """
    if key is not None:
        key = (key, with_data)
        if key in _COMPILED:
            _COMPILED.move_to_end(key)
            return _COMPILED[key]

    def over_draws(p, Xb, data, *eb):
        if with_data:
            return jax.vmap(lambda q: predict_fn(q, Xb, *eb, data=data))(p)
        return jax.vmap(lambda q: predict_fn(q, Xb, *eb))(p)

    compiled = jax.jit(over_draws)
    if key is not None:
        _COMPILED[key] = compiled
        while len(_COMPILED) > COMPILED_KEPT:
            _COMPILED.popitem(last=False)
    return compiled


def mixture_moments(
    f_mean: Any, f_var: Any, noise: Any | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Mixture moments over draws by the law of total variance.

    Args:
        f_mean: per-draw latent means with draws on the leading axes (…, S).
        f_var: per-draw latent variances, the shape of ``f_mean``.
        noise: σ per draw (the leading axes of ``f_mean``) or per draw and point (the shape of
            ``f_mean``, e.g. a grouped model's per-group noise), or None.

    Returns:
        (mean (S,), var of f* (S,), var of y* (S,) or None); var y* = var f* + mean over draws of σ².
    """
    f_mean = np.asarray(f_mean, dtype=float)
    f_var = np.asarray(f_var, dtype=float)
    S = f_mean.shape[-1]
    m = f_mean.reshape(-1, S)
    v = f_var.reshape(-1, S)
    mean = m.mean(axis=0)
    var_f = v.mean(axis=0) + _mean_square_deviation(m, mean)
    var_y = None
    if noise is not None:
        n2 = np.asarray(noise, dtype=float) ** 2
        if n2.size == m.shape[0]:
            var_y = var_f + n2.mean()
        elif n2.size == m.size:
            var_y = var_f + n2.reshape(m.shape).mean(axis=0)
        else:
            raise ValueError(
                f"noise: expected one value per draw ({m.shape[0]}) or per draw and point "
                f"({m.shape[0]}×{S}), got shape {n2.shape}"
            )
    return mean, var_f, var_y


def _mean_square_deviation(m: np.ndarray, mean: np.ndarray, rows: int = 256) -> np.ndarray:
    """mean over rows of (m − mean)², as ``m.var(axis=0)`` but in blocks of rows.

    No temporary of m's size: 4,000 draws × 10,000 points is 320 MB per temporary.
    """
    total = np.zeros_like(mean)
    for start in range(0, m.shape[0], rows):
        deviation = m[start : start + rows] - mean
        total += np.einsum("ds,ds->s", deviation, deviation)
    return total / m.shape[0]


def mixture_quantiles(
    f_mean: Any, f_var: Any, probs: Any, *, tol: float = 1e-9, batch_size: int = 256
) -> np.ndarray:
    """Quantiles of the equal-weight Gaussian mixture over draws, per point (exact, by bisection).

    At each point the predictive is the mixture (1/T) Σ_s N(m_s, v_s); its CDF is increasing, so each
    quantile is found by bisection on F(q) = (1/T) Σ_s Φ((q − m_s)/√v_s) inside the bracket
    [min_s (m_s − 9√v_s), max_s (m_s + 9√v_s)], to ``tol`` times the bracket's width. Unlike mean ± z·sd
    of :func:`mixture_moments`, this respects skewness and multimodality of the mixture. Add σ_s² to
    ``f_var`` for intervals of a new observation y*.

    Args:
        f_mean: per-draw means m_s with draws on the leading axes (…, S).
        f_var: per-draw variances v_s, the shape of ``f_mean``.
        probs: (Q,) probabilities in (0, 1).
        tol: relative width at which bisection stops.
        batch_size: points per batch (memory T × batch).

    Returns:
        (Q, S) quantiles.
    """
    from scipy.special import ndtr

    probs = np.atleast_1d(np.asarray(probs, dtype=float))
    if np.any((probs <= 0) | (probs >= 1)):
        raise ValueError(f"probs: must lie strictly between 0 and 1, got {probs.tolist()}")
    f_mean = np.asarray(f_mean, dtype=float)
    S = f_mean.shape[-1]
    m = f_mean.reshape(-1, S)
    sd = np.sqrt(np.maximum(np.asarray(f_var, dtype=float).reshape(-1, S), 0.0))
    out = np.empty((probs.size, S))
    iterations = int(np.ceil(np.log2(1.0 / tol))) + 1
    for start in range(0, S, batch_size):
        mb, sb = m[:, start : start + batch_size], sd[:, start : start + batch_size]
        # A zero variance (a draw without uncertainty) is a point mass: a tiny floor keeps Φ defined.
        sb = np.maximum(sb, 1e-300)
        lo = np.tile(np.min(mb - 9.0 * sb, axis=0), (probs.size, 1))
        hi = np.tile(np.max(mb + 9.0 * sb, axis=0), (probs.size, 1))
        for _ in range(iterations):
            mid = 0.5 * (lo + hi)
            cdf = ndtr((mid[:, None, :] - mb[None]) / sb[None]).mean(axis=1)
            below = cdf < probs[:, None]
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
        out[:, start : start + batch_size] = 0.5 * (lo + hi)
    return out


def predict(
    idata: Any,
    X_test: Any,
    *,
    group: Any = None,
    batch_size: int | None = None,
    kernel: Any = None,
    mean: Any = None,
) -> PredictiveSummary:
    """Posterior predictive at new inputs from a fit's InferenceData.

    Rebuilds the model and data from ``idata`` (its ``constant_data`` and the ``bayes_rbfn_*``
    attributes written by :func:`bayes_rbfn.fit`), evaluates the per-draw analytic moments in batches and
    combines them by the law of total variance. For posterior samples of a NumPyro model of one's own, see
    :func:`predict_model`.

    The fit is rebuilt from what its InferenceData holds, alike in memory and read back with
    ``arviz.from_netcdf``. What no file can hold is passed again: a kernel object or a
    :class:`~bayes_rbfn.models.families.KernelFamily` of one's own as ``kernel``, a callable prior mean as
    ``mean``; a fit that used one is refused without it, with a message naming the keyword.

    Args:
        idata: InferenceData from :func:`bayes_rbfn.fit` (or loaded from ``inference.nc``).
        X_test: (S, D) or (S,) inputs.
        group: (S,) group codes for grouped models.
        batch_size: test points per batch; ``None`` chooses: all of them for a model whose ``predict``
            streams (``sor``: each draw's factor computed once, draws batched within
            :data:`STREAM_BUDGET`), else :data:`DEFAULT_BATCH` (see :func:`model_moments`).
        kernel: the ``kernel`` the fit was given, when it was a kernel object or a family of one's own
            (see above).
        mean: the callable ``mean`` the fit was given, when it was one.

    Returns:
        A :class:`PredictiveSummary`: f_mean, f_var (chains, draws, S), the mixture moments, the noise σ per
        draw (``pred.quantiles``, ``pred.band``).
    """
    from bayes_rbfn.infer.schema import rebuild

    spec, config, data, params = rebuild(idata, kernel=kernel, mean=mean)
    from bayes_rbfn.gp.validation import check_X

    X_test = check_X(X_test, "X_test", dim=data["X"].shape[-1])
    given = {"group": group}
    missing = [name for name in spec.predictive_inputs if given[name] is None]
    if missing:
        raise ValueError(
            f"{missing[0]}: the {spec.name} model needs the {missing[0]} code of every test point"
        )
    extra = tuple(jnp.asarray(np.asarray(given[name], dtype=np.int32)) for name in spec.predictive_inputs)

    f_mean, f_var = model_moments(spec, config, data, params, X_test, extra=extra, batch_size=batch_size)
    return PredictiveSummary.from_draws(f_mean, f_var, noise_draws(params, f_mean.shape[:2], group=group))


def predict_model(
    model: Any,
    samples: Any,
    X_test: Any,
    *args: Any,
    site: str = "y",
    noise_site: str | None = None,
    mean_test: Any = None,
    batch_size: int | None = DEFAULT_BATCH,
    draw_batch: int = 64,
    **kwargs: Any,
) -> PredictiveSummary:
    """Posterior predictive at new inputs of a NumPyro model of one's own, from its posterior samples.

    Replays ``model(*args, **kwargs)`` at every posterior draw with the draw substituted
    (:func:`bayes_rbfn.infer.replicates.replay`, as :func:`bayes_rbfn.posterior_replicates` does) and takes
    the latent f* at ``X_test`` from ``site``:

    * an observed site whose distribution is a :class:`~bayes_rbfn.models.distributions.SparseGP` or
      :class:`~bayes_rbfn.models.distributions.ExactGP`: the analytic conditional of f* given the observed
      y at that draw (their ``condition``: SoR/DTC/FITC/VFE or exact, [1]); the noise σ of each draw is
      the distribution's ``noise``;
    * the name of an :func:`~bayes_rbfn.models.layers.rbfn` layer (its deterministic site f): f* = m(x*) +
      K_*u α, known given the draw's weights (f_var = 0); the likelihood is the model's own, so σ comes
      only from ``noise_site``.

    The per-draw moments are then mixed over draws as :func:`predict` does (:class:`PredictiveSummary`)::

        pred = bayes_rbfn.predict_model(model, mcmc.get_samples(), X_new, X, Z, y)
        pred.f_mean, pred.f_var                    # (draws, S): each draw's moments of f*
        lo, hi = pred.quantiles([0.025, 0.975])    # 95% band of y* (mixture over draws, noise included)

    Args:
        model: the NumPyro model function.
        samples: posterior draws: a dict {site: (T, ...)} (``mcmc.get_samples()``) or an InferenceData with
            a ``posterior`` group (``az.from_numpyro``). Every latent sample site of the model needs draws.
        X_test: (S, D) or (S,) new inputs.
        *args: the model's positional arguments *with the observed data* (as given to ``MCMC.run``).
        site: the observed GP-marginal site, or the name of the rbfn layer.
        noise_site: for an rbfn layer under a Gaussian likelihood, the site holding σ (a scalar per draw),
            so that y* has a band; not taken for a GP marginal, whose σ is its own.
        mean_test: (S,) the prior mean at ``X_test``, needed when the model gave the mean as an array at X
            (a number or a callable is evaluated at ``X_test`` itself).
        batch_size: test points per compiled call (``None``: all).
        draw_batch: draws per compiled call.
        **kwargs: the model's keyword arguments *with the observed data* (as given to ``MCMC.run``).

    Returns:
        A :class:`PredictiveSummary`: ``f_mean``, ``f_var`` with the draws on the leading axes, (T, S) from a
        dict or (chains, draws, S) from an InferenceData; mixture ``mean``, ``var`` (f*), ``var_y`` (y*);
        ``noise`` σ per draw; :meth:`PredictiveSummary.quantiles` and :meth:`PredictiveSummary.band` of y*
        or f*.

    References:
        [1] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
            process regression. JMLR 6, 1939–1959.
    """
    from bayes_rbfn.gp.validation import check_X
    from bayes_rbfn.infer.replicates import flat_draws

    flat, lead = flat_draws(samples)
    X_test = np.asarray(check_X(X_test, "X_test"))
    extra = _mean_test_values(mean_test, X_test)
    run = partial(_replay_with_layers, model, args, kwargs)
    # One eager run at the first draw settles what the site is; the compiled runs below are the same model.
    is_layer = _check_site(*run({name: value[0] for name, value in flat.items()}), flat, site, noise_site)
    moments, noise_of = _per_draw_functions(run, site, noise_site, is_layer)
    params = {name: value[None] for name, value in flat.items()}  # per_draw_moments' (chains, draws) axes
    f_mean, f_var = per_draw_moments(
        moments, params, X_test, batch_size=batch_size, extra=extra, draw_batch=draw_batch
    )
    noise = None if is_layer and noise_site is None else _noise_draws(noise_of, flat, lead, draw_batch)
    S = X_test.shape[0]
    return PredictiveSummary.from_draws(f_mean.reshape(*lead, S), f_var.reshape(*lead, S), noise)


def _mean_test_values(mean_test: Any, X_test: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(mean_test,)`` as an (S,) array for :func:`per_draw_moments`' ``extra``, or ``()`` without one."""
    if mean_test is None:
        return ()
    values = np.asarray(mean_test, dtype=X_test.dtype).reshape(-1)
    if values.shape != (X_test.shape[0],):
        raise ValueError(f"mean_test: expected shape ({X_test.shape[0]},), got {np.shape(mean_test)}")
    return (values,)


def _replay_with_layers(
    model: Any, args: tuple, kwargs: dict, values: Mapping[str, Any]
) -> tuple[dict, dict]:
    """The model's trace at one draw (every latent site substituted) and its rbfn layers' records."""
    from bayes_rbfn.infer.replicates import replay
    from bayes_rbfn.models.layers import layer_records

    trace = replay(model, values, jax.random.PRNGKey(0), args, kwargs)  # nothing is drawn: all substituted
    return trace, layer_records(trace)


def _check_site(
    trace: Mapping[str, Any], layers: Mapping[str, Any], flat: Mapping[str, Any], site: str, noise_site: Any
) -> bool:
    """Refuse draws that miss a latent site, and a ``site``/``noise_site`` :func:`predict_model` cannot use.

    Returns:
        Whether ``site`` is an rbfn layer (else it is an observed GP marginal).
    """
    from bayes_rbfn.infer.replicates import observed_node

    missing = [n for n, node in trace.items() if _is_latent(node) and n not in flat]
    if missing:
        raise ValueError(
            f"samples: no draws of the model's site(s) {', '.join(map(repr, missing))}; pass the posterior "
            "samples of every latent site (mcmc.get_samples())"
        )
    if site in layers:
        if noise_site is not None:
            if noise_site not in trace:
                raise ValueError(f"noise_site: the model has no site {noise_site!r}")
            if np.ndim(trace[noise_site]["value"]) != 0:
                raise ValueError(
                    f"noise_site: {noise_site!r} must hold one σ per draw, got shape "
                    f"{np.shape(trace[noise_site]['value'])}"
                )
        return True
    node = observed_node(trace, site)
    if not hasattr(node["fn"], "condition"):
        layer_names = f" (its rbfn layers: {', '.join(map(repr, layers))})" if layers else ""
        raise ValueError(
            f"site: {site!r} is a {type(node['fn']).__name__}, not a SparseGP or ExactGP; name the "
            f"observed GP marginal, or the rbfn layer the latent comes from{layer_names}"
        )
    if noise_site is not None:
        raise ValueError(f"noise_site: {site!r} is a GP marginal, whose noise σ is its own")
    return False


def _per_draw_functions(
    run: Callable, site: str, noise_site: str | None, is_layer: bool
) -> tuple[Callable, Callable]:
    """(moments, noise_of) of one draw: f*'s mean and variance at test inputs, and the noise σ."""

    def moments(values, Xb, *mean_b):
        trace, layers = run(values)
        mean_b = mean_b[0] if mean_b else None
        if is_layer:
            f = layers[site].predict(Xb, mean_b)
            return f, jnp.zeros_like(f)
        node = trace[site]
        conditional = node["fn"].condition(node["value"], Xb, mean_test=mean_b)
        return conditional.mean, conditional.variance

    def noise_of(values):
        trace, _ = run(values)
        return trace[site]["fn"].noise if not is_layer else jnp.asarray(trace[noise_site]["value"])

    return moments, noise_of


def _noise_draws(
    noise_of: Callable, flat: Mapping[str, np.ndarray], lead: tuple, draw_batch: int
) -> np.ndarray:
    """σ at every draw, ``draw_batch`` draws per compiled call, in the shape ``lead`` of the draws."""
    batched = jax.jit(jax.vmap(noise_of))
    total = int(np.prod(lead))
    return np.concatenate(
        [
            np.asarray(batched({n: v[s : s + draw_batch] for n, v in flat.items()}))
            for s in range(0, total, draw_batch)
        ]
    ).reshape(lead)


def _is_latent(node: Mapping[str, Any]) -> bool:
    """Whether a trace node is a latent sample site (not observed, not auxiliary)."""
    return (
        node["type"] == "sample" and not node["is_observed"] and not node["infer"].get("is_auxiliary", False)
    )


def noise_draws(
    params: Mapping[str, Any], draws_shape: tuple[int, ...], *, group: Any = None
) -> np.ndarray | None:
    """The noise sd σ of every posterior draw, shaped for :func:`mixture_moments`.

    Args:
        params: the posterior {site: (chains, draws, ...)} with pinned values merged
            (:func:`bayes_rbfn.infer.schema.rebuild`); a pinned σ is a number.
        draws_shape: (chains, draws).
        group: (S,) group codes of the test points, for a model with one σ per group.

    Returns:
        (chains, draws), or (chains, draws, S) for a per-group σ indexed by ``group``; None when the model
        has no noise (a non-Gaussian likelihood).
    """
    noise = params.get("noise")
    if noise is None:
        return None
    noise = np.asarray(noise, dtype=float)
    if group is not None and noise.ndim == len(draws_shape) + 1:
        return noise[..., np.asarray(group)]
    return np.broadcast_to(noise, draws_shape)


@dataclass(frozen=True)
class Band:
    """Posterior predictive summary at prediction inputs: mean and central intervals.

    Attributes:
        mean: (S,) predictive mean.
        intervals: {probability mass: (lower (S,), upper (S,))}, e.g. {0.5: …, 0.95: …}.
        quantity: what the intervals are of, for the legends: ``"y*"`` (a new observation, the default),
            ``"f*"`` (the latent function), or for a count or 0/1 likelihood ``"the rate"`` /
            ``"the probability"`` (the mean of y given f).
        sd_f: (S,) sd of the latent f* (of the mean of y given f for a non-Gaussian likelihood).
        sd_y: (S,) sd of a new observation y*.
    """

    mean: np.ndarray
    intervals: Mapping[float, tuple[np.ndarray, np.ndarray]]
    quantity: str = "y*"
    sd_f: np.ndarray | None = None
    sd_y: np.ndarray | None = None


def _interval_probs(masses: Sequence[float]) -> list[float]:
    return sorted({p for c in masses for p in ((1 - c) / 2, (1 + c) / 2)})


def _intervals(f_mean: Any, var_draws: Any, masses: Sequence[float]) -> dict:
    """{mass: (lower, upper)}: central intervals of the mixture over draws (:func:`mixture_quantiles`)."""
    probs = _interval_probs(masses)
    q = mixture_quantiles(f_mean, var_draws, probs)
    return {c: (q[probs.index((1 - c) / 2)], q[probs.index((1 + c) / 2)]) for c in masses}


def band_of_y(idata: Any, masses: Sequence[float]) -> Band:
    """A Gaussian likelihood's band of a new observation y* at the fit's ``X_pred``.

    Central intervals are quantiles of the mixture over draws of N(m_s, v_s + σ_s²)
    (:func:`mixture_quantiles`), the sds of f* and y* its moments (:func:`mixture_moments`).

    Args:
        idata: InferenceData of :func:`bayes_rbfn.fit` with its ``predictions`` group.
        masses: central interval probabilities, e.g. (0.5, 0.95).
    """
    from bayes_rbfn.infer.schema import rebuild_with_layout

    spec, _, _, layout, params = rebuild_with_layout(idata)
    group = dict(zip(spec.predictive_inputs, layout.predictive_args, strict=True)).get("group")
    f_mean = np.asarray(idata.predictions["f_mean"].values)
    f_var = np.asarray(idata.predictions["f_var"].values)
    S = f_mean.shape[-1]
    noise = noise_draws(params, f_mean.shape[:2], group=group)
    mean, var_f, var_y = mixture_moments(f_mean, f_var, noise)
    var_y = var_f if var_y is None else var_y
    intervals = _intervals(f_mean.reshape(-1, S), _with_noise(f_var, noise), masses)
    return Band(mean=mean, intervals=intervals, sd_f=np.sqrt(var_f), sd_y=np.sqrt(var_y))


def band_of_the_mean(idata: Any, masses: Sequence[float]) -> Band:
    """A non-Gaussian likelihood's band of the mean of y given f at the fit's ``X_pred``, and the sd of y*.

    The mean of y given f is the rate exp f, the probability logistic f, or f itself for Student-t; its
    band is quantiles over the draws, each draw's latent being known given its weights (f_var = 0). The sd
    of a new observation y* is by the law of total variance, Var y* = E_s[Var(y | f_s)] + Var_s[E(y | f_s)].
    """
    from bayes_rbfn.infer.schema import rebuild

    _, config, _, params = rebuild(idata)
    likelihood = config.likelihood
    f = np.asarray(idata.predictions["f_mean"].values)
    draws_shape = f.shape[:2]
    T, S = f.shape[0] * f.shape[1], f.shape[-1]
    f = f.reshape(T, S)
    given = {
        name: jnp.reshape(jnp.broadcast_to(jnp.asarray(params[name], dtype=f.dtype), draws_shape), (T, 1))
        for name in likelihood.params
    }
    mu = likelihood.inverse_link(f)
    with np.errstate(over="ignore", invalid="ignore"):
        var_obs = np.asarray(likelihood.observe(jnp.asarray(f), given).variance)
    probs = _interval_probs(masses)
    q = np.quantile(mu, probs, axis=0)
    intervals = {c: (q[probs.index((1 - c) / 2)], q[probs.index((1 + c) / 2)]) for c in masses}
    quantity = {"log": "the rate", "logit": "the probability"}.get(likelihood.link, "the location f")
    return Band(
        mean=mu.mean(axis=0),
        intervals=intervals,
        quantity=quantity,
        sd_f=mu.std(axis=0),
        sd_y=np.sqrt(var_obs.mean(axis=0) + mu.var(axis=0)),
    )


def sample_predictive(
    pred: PredictiveSummary, noise: Any | None = None, *, num_samples: int | None = None, seed: int = 0
) -> np.ndarray:
    """Draws from the predictive: one Gaussian draw per posterior draw (marginal, per test point).

    With ``noise`` (per-draw σ, shape (chains, draws)) the draws are of y*, else of the latent f*.
    Returns (num_samples, S); by default one per posterior draw.
    """
    rng = np.random.default_rng(seed)
    S = pred.f_mean.shape[-1]
    m = pred.f_mean.reshape(-1, S)
    v = pred.f_var.reshape(-1, S)
    if noise is not None:
        v = v + np.asarray(noise, dtype=float).reshape(-1, 1) ** 2
    idx = np.arange(m.shape[0]) if num_samples is None else rng.integers(0, m.shape[0], size=num_samples)
    return m[idx] + np.sqrt(np.maximum(v[idx], 0.0)) * rng.standard_normal((idx.size, S))
