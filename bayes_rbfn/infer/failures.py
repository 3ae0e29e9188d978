"""What a fit says when it cannot give an answer: a degenerate model, or numbers that are not finite.

Two failures must never pass silently or as a bare traceback:

* NumPyro's ``RuntimeError: Cannot find valid initial parameters`` means the model's log density is −∞ or
  NaN at every start tried. :func:`explain_degenerate` turns it into a :class:`DegenerateModelError` that
  names the settings that made the model degenerate (a noise pinned near 0, coincident inducing inputs,
  pinned kernel hyperparameters far from the data's scale, data at a scale float64 cannot hold, …) and
  what to change.
* A fit whose stored predictions or log-likelihood contain NaN or ±∞ is an error, not a result:
  :func:`check_finite` raises :class:`NonFiniteResultError`.

And one that would fail late is refused early: :func:`check_result_size` estimates the memory the draws
and their per-draw outputs take (:func:`result_bytes`) and refuses, before sampling, settings that cannot fit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bayes_rbfn.io.arviz_compat import groups

__all__ = [
    "NO_VALID_START",
    "PEAK_COPIES",
    "DegenerateModelError",
    "NonFiniteResultError",
    "check_finite",
    "check_result_size",
    "estimated_params",
    "explain_degenerate",
    "format_bytes",
    "result_bytes",
]

#: Copies of the result alive at once at the peak (device arrays, NumPy, the InferenceData, the writer).
PEAK_COPIES = 3

#: The start of NumPyro's message when no initial point has a finite log density.
NO_VALID_START = "Cannot find valid initial parameters"

#: A pinned noise σ below this fraction of the targets' sd makes the Gaussian likelihood degenerate.
_TINY_NOISE = 1e-8

#: A pinned lengthscale outside [1e-6, 1e6] × the input range makes K_uu numerically rank one or diagonal.
_LENGTHSCALE_RATIO = 1e6

#: A fixed prior mean this many target sds from the targets' mean is reported as a cause.
_MEAN_SDS = 1e6

#: The same for a count or 0/1 model, in units of its latent (log-rate or log-odds) scale.
_MEAN_LINK_DISTANCE = 100.0


class DegenerateModelError(ValueError):
    """The model has no point with a finite log density that NUTS could start from."""


class NonFiniteResultError(ValueError):
    """The fit's predictions or log-likelihood contain NaN or ±∞."""


def explain_degenerate(problem: Any, jitter: float | None) -> DegenerateModelError:
    """The error to raise when NumPyro finds no valid initial parameters for ``problem``.

    Args:
        problem: the :class:`~bayes_rbfn.infer.fitting.GenerativeModel` being fitted.
        jitter: the ``jitter`` option of the fit (None: the package's policy).

    Returns:
        A :class:`DegenerateModelError` whose message lists every suspect found and what to change.
    """
    causes = []
    y = np.asarray(problem.y, dtype=float)
    X = np.asarray(problem.X, dtype=float)
    y_sd = float(np.std(y)) if y.size > 1 else 0.0
    fixed = {k: np.asarray(v, dtype=float) for k, v in problem.config.fixed.items()}
    if "noise" in fixed and y_sd > 0 and float(np.max(fixed["noise"])) < _TINY_NOISE * y_sd:
        causes.append(
            f"the noise is pinned at {float(np.max(fixed['noise'])):.3g}, against targets of sd {y_sd:.3g}: "
            "pin a larger noise or let it be sampled"
        )
    if problem.Z is not None:
        Z = np.asarray(problem.Z, dtype=float).reshape(-1, X.shape[1])
        coincident = Z.shape[0] - np.unique(Z, axis=0).shape[0]
        if coincident:
            with_jitter = "no jitter" if jitter is None else f"jitter={jitter:g}"
            causes.append(
                f"{coincident} inducing inputs coincide with others, so K_uu is singular with {with_jitter}: "
                "give distinct Z, fewer inducing inputs, or a larger jitter"
            )
    far_mean = _far_fixed_mean(problem, y, y_sd)
    if far_mean:
        causes.append(far_mean)
    spread = np.ptp(X, axis=0)
    for name, value in fixed.items():
        if "lengthscale" not in name:
            continue
        ratio = np.atleast_1d(value) / np.where(spread > 0, spread, 1.0)
        if np.any(ratio < 1 / _LENGTHSCALE_RATIO) or np.any(ratio > _LENGTHSCALE_RATIO):
            causes.append(
                f"{name} is pinned at {np.array2string(np.atleast_1d(value), precision=3)}, far from the "
                f"inputs' range {np.array2string(spread, precision=3)}: pin a lengthscale nearer that range"
            )
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y))):
        causes.append("the data hold values that are not finite")
    hint = (
        "; ".join(causes)
        if causes
        else (
            "no single setting stands out: check the priors= and fixed= values you gave, and the data's "
            "scale (the inputs span "
            f"{np.array2string(spread, precision=3)}, the targets have sd {y_sd:.3g})"
        )
    )
    return DegenerateModelError(
        f"the {problem.spec.name!r} model has no parameter values with a finite log density for NUTS to "
        f"start from: {hint}"
    )


def _far_fixed_mean(problem: Any, y: np.ndarray, y_sd: float) -> str:
    """The cause to report when the fixed prior mean lies too far from the targets; else ''.

    The fixed prior mean is ``mean=`` a number (``--mean``); too far: the likelihood of the centred targets
    cannot be finite.
    """
    if problem.config.mean != "constant" or "y_offset" not in problem.data or y.size == 0:
        return ""
    offset = np.asarray(problem.data["y_offset"], dtype=float)
    likelihood = problem.config.likelihood
    identity = getattr(likelihood, "link", "identity") == "identity"
    reference = float(np.mean(y)) if identity else float(likelihood.constant_mean(y))
    # On the link scale of counts and labels f is of order one, and exp(f) overflows past ~700.
    limit = _MEAN_SDS * max(y_sd, np.finfo(float).tiny) if identity else _MEAN_LINK_DISTANCE
    distance = float(np.max(np.abs(offset - reference)))
    if distance <= limit:
        return ""
    where = "the targets' mean" if identity else "the link of the targets' mean"
    return (
        f"the prior mean is fixed at {float(np.ravel(offset)[0]):.3g} (mean=, --mean on the command line), "
        f"{distance:.3g} from {where} {reference:.3g} (targets of sd {y_sd:.3g}): give a mean near the "
        "data, or 'constant' (the data's mean)"
    )


def check_finite(idata: Any) -> None:
    """Raise :class:`NonFiniteResultError` when the fit's predictions or log-likelihood are not finite."""
    checked = {"predictions": ("f_mean", "f_var"), "log_likelihood": None}
    present = groups(idata)
    for group, names in checked.items():
        if group not in present:
            continue
        data = idata[group]
        for name in names or list(data.data_vars):
            if name not in data:
                continue
            values = np.asarray(data[name].values)
            bad = int(np.size(values) - np.count_nonzero(np.isfinite(values)))
            if bad:
                raise NonFiniteResultError(
                    f"the fit's {group} ({name}) hold {bad} of {values.size} values that are NaN or "
                    "infinite, so it is not a result: rescale the data (inputs and targets of order 1 are "
                    "safest) or pin fewer hyperparameters"
                )


def result_bytes(
    *, chains: int, draws: int, params: int, N: int, S: int, replicates_per_chain: int | None
) -> int:
    """Bytes of a fit's stored result, float64.

    Per draw the parameters and sample statistics, the predictive mean and variance at the S prediction
    inputs and N log-likelihood values, and the N-vector replicates of the posterior predictive
    (``replicates_per_chain`` draws per chain; None: every draw).
    """
    kept = draws if replicates_per_chain is None else min(draws, replicates_per_chain)
    per_draw = params + 12 + 2 * S + N
    return 8 * chains * (draws * per_draw + kept * N)


def estimated_params(Z: Any, input_dim: int) -> int:
    """Stored parameter values per draw, roughly: weights, lengthscales and a few scalars.

    A weight per inducing input (the weight-space models; an upper bound for the others), a lengthscale per
    input, and a few scalars.
    """
    return (0 if Z is None else int(np.size(Z)) // max(input_dim, 1)) + input_dim + 10


def format_bytes(size: float) -> str:
    """A size in bytes as a short phrase: "512 bytes", "3.2 MiB", "1.5 GiB"."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover


def check_result_size(need: int, available: int | None, *, what: str = "memory", where: str = "") -> None:
    """Raise ValueError naming ``draws`` when ``PEAK_COPIES × need`` bytes exceed ``available``.

    ``available`` None: unknown, accepted. ``what``/``where`` word the message ("disk space", "in /data").
    """
    peak = need * (PEAK_COPIES if what == "memory" else 1)
    if available is not None and peak > available:
        raise ValueError(
            f"draws: the draws and their per-draw outputs would need about {format_bytes(peak)} of {what}"
            f"{where}, and {format_bytes(available)} is available; use fewer draws or chains (or fewer "
            "prediction inputs)"
        )
