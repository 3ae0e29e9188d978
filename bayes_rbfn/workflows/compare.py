"""Fit several models of the collection to the same data and compare them: PSIS-LOO and held-out density.

:func:`compare_models` fits each named model with :func:`bayes_rbfn.fit` on the same data, the same
inducing inputs Z and the same seed, and returns a :class:`Comparison`:

* ``table`` — ArviZ's :func:`arviz.compare` over the stored leave-one-out conditionals (PSIS-LOO,
  Vehtari, Gelman & Gabry 2017 [1]; for a GP the conditionals log p(y_i | y_−i, θ) of Bürkner, Gabry &
  Vehtari 2020 [2]), plus held-out columns when a test split is given:

      elpd_test = Σ_i log p(y_i* | y) ≈ Σ_i log (1/S) Σ_s N(y_i* | m_s(x_i*), v_s(x_i*) + σ_s²),

  the log predictive density of each test target under the posterior predictive, which is the mixture
  over the S posterior draws of the per-draw analytic Gaussian (log-mean-exp over draws, per point);
  ``elpd_test_se`` its sampling standard error over test points, sqrt(n · var_i), as ArviZ reports for
  LOO; ``elpd_test_mcse`` its Monte Carlo standard error from the draws' effective sample size (delta
  method, below); and the convergence of each fit (``r_hat``, ``divergences``) and the share of
  prediction points where its predictive variance has collapsed (``collapsed_points``);
* ``idatas`` — one fit per model, exactly as :func:`bayes_rbfn.fit` returns it (InferenceData or DataTree);
* ``plot(path)`` — the elpd comparison plot of ``table`` (in the style of ArviZ's, drawn with matplotlib),
  the held-out elpd, and the predictive bands of every model on one figure; ``write(folder)`` — table
  CSV, plot PNG and ``inference_<model>.nc`` files, atomically.

What the two criteria measure. PSIS-LOO scores the *training* density each model's posterior was sampled
from. Models with the same training density therefore tie: SoR, DTC and augmented SoR share SoR's marginal
likelihood and have identical LOO values; VFE's LOO uses DTC's conditionals under its pseudo-posterior
(see :mod:`bayes_rbfn.models.sparse_models`). What tells them apart is the predictive at new inputs — DTC
restores the prior variance SoR drops away from Z (Quiñonero-Candela & Rasmussen 2005 [3], §5) — and that
is what ``elpd_test`` measures. Use both: LOO to compare training densities without held-out data, the
held-out density to compare predictives.

Variance collapse (docs/mathematics.md#the-sor-family-and-its-variance-collapse). SoR's predictive variance
(and the RBFN's) vanishes where the Nyström
covariance loses the prior variance, 1 − Q_**/K_** → 1. :func:`variance_collapse` evaluates that fraction
at the prediction inputs, averaged over the posterior draws, and warns
(:class:`bayes_rbfn.gp.sparse.VarianceCollapseWarning`, through
:func:`bayes_rbfn.infer.collapse.collapse_check`) when a model in
:data:`~bayes_rbfn.infer.collapse.VARIANCE_COLLAPSE_MODELS` is asked to predict where most of it is gone;
:func:`compare_models` runs it for every such model, and :func:`bayes_rbfn.fit` after sampling.

Monte Carlo error of elpd_test. With p̂_i = (1/S) Σ_s p_is, the delta method gives
Σ_i log p̂_i ≈ const + (1/S) Σ_s g_s with g_s = Σ_i p_is / p̂_i, so the MCSE of elpd_test is the MCSE of
the mean of g over the (autocorrelated) chains, which :func:`arviz.mcse` estimates from its ESS. Summing
inside g keeps the correlation between test points (they share the draws).

References
----------
[1] Vehtari, A., Gelman, A. & Gabry, J. (2017). Practical Bayesian model evaluation using leave-one-out
    cross-validation and WAIC. Statistics and Computing 27, 1413–1432.
[2] Bürkner, P.-C., Gabry, J. & Vehtari, A. (2020). Efficient leave-one-out cross-validation for Bayesian
    non-factorized normal and Student-t models. Computational Statistics.
[3] Quiñonero-Candela, J. & Rasmussen, C. E. (2005). A unifying view of sparse approximate Gaussian
    process regression. JMLR 6, 1939–1959.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import logsumexp

from bayes_rbfn.gp.validation import check_X, check_y
from bayes_rbfn.infer.collapse import COLLAPSE_THRESHOLD, variance_collapse
from bayes_rbfn.infer.diagnostics import check_convergence
from bayes_rbfn.infer.fitting import fit, rebuild
from bayes_rbfn.infer.predictive import mixture_moments, noise_draws
from bayes_rbfn.infer.predictive import predict as posterior_predict
from bayes_rbfn.infer.sampler import SamplerSettings
from bayes_rbfn.io import arviz_compat
from bayes_rbfn.io.netcdf import write_inference_data
from bayes_rbfn.io.output import atomic_output_dir
from bayes_rbfn.models import ModelSpec, get_model

__all__ = [
    "Bands",
    "Comparison",
    "ElpdTest",
    "compare_models",
    "elpd_test",
    "plot_bands",
    "predictive_bands",
]

# --------------------------------------------------------------------------------------------------
# Held-out log predictive density


@dataclass(frozen=True)
class ElpdTest:
    """Held-out expected log predictive density of one model.

    Attributes:
        elpd: Σ_i log p(y_i* | y), a float.
        se: sampling standard error over the n test points, sqrt(n · var_i(pointwise)).
        mcse: Monte Carlo standard error from the posterior draws (delta method, module docstring).
        pointwise: (n,) log p(y_i* | y).
    """

    elpd: float
    se: float
    mcse: float
    pointwise: np.ndarray


def elpd_test(f_mean: Any, f_var: Any, noise: Any, y_test: Any) -> ElpdTest:
    """Held-out log predictive density of the posterior predictive mixture.

    ``log p(y_i* | y) = log (1/S) Σ_s N(y_i* | f_mean_s,i, f_var_s,i + σ_s²)`` per test point (log-mean-exp
    over the S = chains × draws posterior draws), summed over points.

    Args:
        f_mean: per-draw latent means, (chains, draws, n).
        f_var: per-draw latent variances, (chains, draws, n).
        noise: per-draw σ, (chains, draws) or a scalar.
        y_test: (n,) held-out targets.

    Returns:
        :class:`ElpdTest`.
    """
    f_mean = np.asarray(f_mean, dtype=np.float64)
    f_var = np.asarray(f_var, dtype=np.float64)
    if f_mean.ndim != 3 or f_var.shape != f_mean.shape:
        raise ValueError(f"f_mean, f_var: expected equal shapes (chains, draws, n), got {f_mean.shape}")
    y_test = np.asarray(y_test, dtype=np.float64)
    if y_test.shape != f_mean.shape[-1:]:
        raise ValueError(f"y_test: expected shape ({f_mean.shape[-1]},), got {y_test.shape}")
    noise2 = np.broadcast_to(np.asarray(noise, dtype=np.float64) ** 2, f_mean.shape[:2])[..., None]
    var_y = f_var + noise2
    logp = -0.5 * (np.log(2.0 * np.pi * var_y) + (y_test - f_mean) ** 2 / var_y)  # (chains, draws, n)
    num_draws = logp.shape[0] * logp.shape[1]
    pointwise = logsumexp(logp, axis=(0, 1)) - np.log(num_draws)
    n = pointwise.size
    se = float(np.sqrt(n * np.var(pointwise))) if n > 1 else float("nan")
    # p_is / p̂_i, summed over test points: the delta-method influence of each draw on Σ_i log p̂_i.
    ratio = np.exp(logp - pointwise)
    g = ratio.sum(axis=-1)
    mcse = arviz_compat.mcse_mean(g) if g.shape[1] >= 4 else float("nan")
    return ElpdTest(elpd=float(pointwise.sum()), se=se, mcse=mcse, pointwise=pointwise)


# --------------------------------------------------------------------------------------------------
# Variance collapse


# --------------------------------------------------------------------------------------------------
# Predictive bands


@dataclass(frozen=True)
class Bands:
    """Posterior predictive bands at S inputs: moment-matched mixture over the draws (law of total variance).

    Attributes:
        X: (S, D) inputs.
        mean: (S,) predictive mean.
        f_sd: (S,) sd of the latent f*.
        y_sd: (S,) sd of a new observation y* (noise included).
    """

    X: np.ndarray
    mean: np.ndarray
    f_sd: np.ndarray
    y_sd: np.ndarray

    def interval(self, z: float = 2.0, observed: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) = mean ∓ z·sd, of y* (``observed``) or of f*."""
        sd = self.y_sd if observed else self.f_sd
        return self.mean - z * sd, self.mean + z * sd


def predictive_bands(idata: Any, X_test: Any = None) -> Bands:
    """Predictive bands of a fit, at its stored ``X_pred`` (default) or at new inputs X_test (S, D).

    The mixture over draws is summarised by its mean and variance (``E[f*] = mean_s m_s``,
    ``Var[f*] = mean_s v_s + var_s m_s``, σ_s² added inside for y*), so ``mean ± 2 sd`` is a moment-matched
    band, not a mixture quantile. Not for grouped models (use :func:`bayes_rbfn.predict` with groups).
    """
    spec, _, _, params = rebuild(idata)
    if spec.grouped:
        raise ValueError("idata: predictive_bands does not handle grouped models; use bayes_rbfn.predict")
    if X_test is None:
        X = np.asarray(idata.predictions_constant_data["X_pred"].values)
        f_mean = np.asarray(idata.predictions["f_mean"].values)
        f_var = np.asarray(idata.predictions["f_var"].values)
    else:
        pred = posterior_predict(idata, X_test)
        X, f_mean, f_var = np.asarray(check_X(X_test, "X_test")), pred.f_mean, pred.f_var
    mean, var_f, var_y = mixture_moments(f_mean, f_var, noise_draws(params, f_mean.shape[:2]))
    return Bands(X=X, mean=mean, f_sd=np.sqrt(np.maximum(var_f, 0.0)), y_sd=np.sqrt(np.maximum(var_y, 0.0)))


def plot_bands(
    bands: Bands,
    ax: Any,
    *,
    X: Any = None,
    y: Any = None,
    X_test: Any = None,
    y_test: Any = None,
    Z: Any = None,
    z: float = 2.0,
    color: str = "C0",
    label: str | None = None,
) -> Any:
    """Draw 1-D predictive bands on a matplotlib Axes: mean, ±z sd of f* (dark) and of y* (light).

    Optionally the training data (black dots), held-out data (red crosses) and the inducing inputs Z
    (a rug of ticks along the bottom). Returns ``ax``.
    """
    if bands.X.shape[1] != 1:
        raise ValueError(f"bands: plot_bands draws 1-D inputs only, got D = {bands.X.shape[1]}")
    order = np.argsort(bands.X[:, 0])
    x = bands.X[order, 0]
    lo_y, hi_y = bands.interval(z, observed=True)
    lo_f, hi_f = bands.interval(z, observed=False)
    ax.fill_between(x, lo_y[order], hi_y[order], color=color, alpha=0.15, lw=0, label=f"±{z:g} sd of y*")
    ax.fill_between(x, lo_f[order], hi_f[order], color=color, alpha=0.35, lw=0, label=f"±{z:g} sd of f*")
    ax.plot(x, bands.mean[order], color=color, lw=1.5, label=label or "predictive mean")
    if X is not None and y is not None:
        ax.plot(np.asarray(X).reshape(len(y), -1)[:, 0], y, "k.", ms=3, label="training data")
    if X_test is not None and y_test is not None:
        ax.plot(np.asarray(X_test).reshape(len(y_test), -1)[:, 0], y_test, "rx", ms=3, label="held-out data")
    if Z is not None:
        Zc = np.asarray(Z).reshape(np.shape(Z)[0], -1)[:, 0]
        ax.plot(Zc, np.full_like(Zc, 0.02), "|", color="0.2", ms=10, transform=ax.get_xaxis_transform())
    return ax


# --------------------------------------------------------------------------------------------------
# The comparison


@dataclass(frozen=True, eq=False)
class Comparison:
    """Several models fitted to the same data, and their comparison (see the module docstring).

    Attributes:
        idatas: model name → its fit, as :func:`bayes_rbfn.fit` returns it (in the order given).
        table: :func:`bayes_rbfn.io.arviz_compat.compare`'s table (index: model name, ranked by ``elpd_<ic>``;
            the same columns on both ArviZ lines) plus the columns
            ``elpd_test``, ``elpd_test_se``, ``elpd_test_mcse`` (NaN without a test split), ``r_hat``
            (worst over the hyperparameters; NaN for a one-chain fit, which has none), ``divergences``
            and ``collapsed_points`` (share of the prediction inputs where the model's predictive
            variance has collapsed; 0 for models whose predictive cannot collapse).
        elpd_test: model name → :class:`ElpdTest` (empty without a test split).
        variance_lost: model name → (S,) posterior-mean 1 − Q_**/K_** at the prediction inputs, for the
            models in :data:`VARIANCE_COLLAPSE_MODELS`.
        X, y: training data. X_test, y_test: held-out data or None. X_pred: (S, D) inputs of the stored
            predictions (the bands). ic: the information criterion of ``table``.
    """

    idatas: dict[str, Any]
    table: pd.DataFrame
    elpd_test: dict[str, ElpdTest]
    variance_lost: dict[str, np.ndarray]
    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray | None
    y_test: np.ndarray | None
    X_pred: np.ndarray
    ic: str = "loo"
    _bands: dict[str, Bands] = field(default_factory=dict, init=False, repr=False)

    def bands(self) -> dict[str, Bands]:
        """Model name → :class:`Bands` at ``X_pred`` (from the stored per-draw predictions)."""
        if not self._bands:
            self._bands.update({name: predictive_bands(idata) for name, idata in self.idatas.items()})
        return dict(self._bands)

    def _plot_compare(self, ax: Any) -> None:
        """The comparison plot on ``ax``, drawn with matplotlib from ``table`` (its models top down).

        Per model its elpd as an open circle with ± se; for every model after the first (the best), just
        above its circle, its elpd ± ``dse`` (the standard error of its elpd difference to the best) as a
        grey bar; a dashed vertical line at the best elpd.
        """
        elpd = self.table[f"elpd_{self.ic}"].to_numpy(dtype=float)
        se = self.table["se"].to_numpy(dtype=float)
        dse = self.table["dse"].to_numpy(dtype=float)
        rows = np.arange(len(elpd), dtype=float)
        ax.axvline(np.nanmax(elpd), color="0.5", lw=0.8, ls="--")
        ax.errorbar(elpd, rows, xerr=se, fmt="o", color="k", mfc="none", ms=5, capsize=0)
        if len(elpd) > 1:
            ax.errorbar(
                elpd[1:], rows[1:] - 0.3, xerr=dse[1:], fmt="^", color="0.55", ms=4, capsize=0, lw=2.5
            )
        ax.set_yticks(rows, [str(name) for name in self.table.index])
        ax.set_ylim(len(elpd) - 0.5, -0.7)
        ax.set_xlabel(f"elpd_{self.ic} (○ ± se; grey: ± se of the difference to the best)", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.set_title(f"PSIS-{self.ic.upper()} (higher is better)", fontsize=9)

    def plot(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        z: float = 2.0,
        xlim: tuple[float, float] | None = None,
        dpi: int = 120,
    ) -> Any:
        """One figure: the elpd comparison plot, the held-out elpd (with a test split) and each model's bands.

        The bands (1-D inputs only) are mean ± z sd of f* (dark) and y* (light) at ``X_pred``, with the
        training data, the held-out data and the inducing inputs; all panels share the axes, so a
        collapsing variance is visible side by side. ``xlim`` limits the input axis (default: the range
        of X_pred). Saved to ``path`` (PNG) when given.

        Returns:
            The matplotlib Figure.
        """
        from matplotlib.figure import Figure

        names = list(self.idatas)
        one_d = self.X.shape[1] == 1
        ncols = min(3, len(names))
        nrows_bands = -(-len(names) // ncols) if one_d else 0
        fig = Figure(figsize=(4.2 * max(ncols, 2), 3.2 * (1 + nrows_bands)), layout="constrained")
        grid = fig.add_gridspec(1 + nrows_bands, max(ncols, 2))
        top = fig.add_subfigure(grid[0, :])
        ax_loo, ax_test = top.subplots(1, 2)
        self._plot_compare(ax_loo)
        if self.elpd_test:
            order = [n for n in self.table.index if n in self.elpd_test]
            values = [self.elpd_test[n].elpd for n in order]
            errors = [self.elpd_test[n].se for n in order]
            ax_test.errorbar(values, range(len(order)), xerr=errors, fmt="o", color="k", mfc="none")
            ax_test.set_yticks(range(len(order)), order)
            ax_test.invert_yaxis()
            ax_test.set_xlabel("elpd_test (± se)", fontsize=8)
            ax_test.tick_params(labelsize=8)
            ax_test.set_title(f"held-out log predictive density, n = {self.y_test.size}", fontsize=9)
        else:
            ax_test.axis("off")
            ax_test.text(0.5, 0.5, "no held-out data (X_test, y_test)", ha="center", va="center")
        if one_d:
            bands = self.bands()
            Z = self._shared_Z()
            first = None
            for k, name in enumerate(names):
                ax = fig.add_subplot(grid[1 + k // ncols, k % ncols], sharey=first, sharex=first)
                first = first or ax
                plot_bands(
                    bands[name],
                    ax,
                    X=self.X,
                    y=self.y,
                    X_test=self.X_test,
                    y_test=self.y_test,
                    Z=Z if "Z" in self.idatas[name].constant_data else None,
                    z=z,
                    color=f"C{k}",
                )
                ax.set_title(self._panel_title(name), fontsize=9)
                ax.tick_params(labelsize=8)
            first.legend(fontsize=6, loc="upper left")
            if xlim is not None:
                first.set_xlim(*xlim)
        if path is not None:
            fig.savefig(path, dpi=dpi)
        return fig

    def write(self, folder: str | os.PathLike[str], overwrite: bool = False) -> Path:
        """Write ``comparison.csv``, ``comparison.png`` and ``inference_<model>.nc`` files to ``folder``.

        Atomic as :func:`bayes_rbfn.io.output.atomic_output_dir`: an existing non-empty folder is refused
        unless ``overwrite``, and an interrupted or failed write leaves ``folder`` as it was.

        Returns:
            The folder's path.
        """
        with atomic_output_dir(folder, overwrite) as tmp:
            self.table.to_csv(tmp / "comparison.csv", index_label="model")
            self.plot(tmp / "comparison.png")
            for name, idata in self.idatas.items():
                write_inference_data(idata, tmp / f"inference_{name}.nc")
        return Path(folder)

    def _shared_Z(self) -> np.ndarray | None:
        for idata in self.idatas.values():
            if "Z" in idata.constant_data:
                return np.asarray(idata.constant_data["Z"].values)
        return None

    def _panel_title(self, name: str) -> str:
        row = self.table.loc[name]
        text = f"{name}: elpd_{self.ic} {row[f'elpd_{self.ic}']:.1f}"
        if self.elpd_test:
            text += f", elpd_test {row['elpd_test']:.1f}"
        return text


def _model_names(models: Sequence[str | ModelSpec]) -> list[ModelSpec]:
    if isinstance(models, str) or not isinstance(models, Sequence):
        raise ValueError(f"models: expected a sequence of model names, got {models!r}")
    specs = [get_model(m) for m in models]
    names = [s.name for s in specs]
    if len(specs) < 2:
        raise ValueError(f"models: need at least two models to compare, got {names}")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"models: each model may appear once; repeated: {', '.join(duplicates)}")
    grouped = [s.name for s in specs if s.grouped]
    if grouped:
        raise ValueError(f"models: compare_models does not handle grouped models ({', '.join(grouped)})")
    return specs


def compare_models(
    models: Sequence[str | ModelSpec],
    X: Any,
    y: Any,
    *,
    X_test: Any = None,
    y_test: Any = None,
    X_pred: Any = None,
    Z: Any = None,
    num_inducing: int | None = None,
    ic: str = "loo",
    seed: int = 0,
    progress: bool = False,
    collapse_threshold: float = COLLAPSE_THRESHOLD,
    on_fit: Callable[[str, int, int], None] | None = None,
    sampler: SamplerSettings | None = None,
    **fit_options: Any,
) -> Comparison:
    """Fit each model to the same data with :func:`bayes_rbfn.fit` and compare them.

    Every model with inducing inputs uses the same Z (given, or chosen once by the first such fit with
    ``num_inducing``), and every fit the same seed, priors and settings, so differences in the table are
    differences between the models.

    Args:
        models: two or more model names (see :func:`bayes_rbfn.models.available_models`), e.g.
            ``["exact", "sor", "dtc", "fitc", "vfe"]``. Grouped models are not supported.
        X: (N, D) or (N,) training inputs.
        y: (N,) targets.
        X_test: (S, D) or (S,) held-out inputs for the ``elpd_test`` columns (given with ``y_test`` or not
            at all).
        y_test: (S,) held-out targets at ``X_test``.
        X_pred: (S, D) inputs of the stored per-draw predictions and of the plotted bands (default
            ``X_test`` when given, else X). With Snelson's data, pass its test grid here. When every row
            of X_test is also a row of X_pred, ``elpd_test`` reuses the stored predictions; otherwise the
            per-draw moments at X_test are computed once more from the draws.
        Z: (M, D) inducing inputs shared by the sparse models.
        num_inducing: M when Z is not given.
        ic: ``"loo"`` (PSIS-LOO, default) or ``"waic"`` (ArviZ 0.x only: 1.x has no WAIC).
        seed: PRNG seed of every fit.
        progress: show progress bars.
        sampler: the NUTS settings of every fit as one
            :class:`~bayes_rbfn.infer.sampler.SamplerSettings` (its seed and progress replace ``seed`` and
            ``progress``; then give no sampler setting in ``fit_options``).
        collapse_threshold: share of lost prior variance above which a prediction point counts as
            collapsed (:func:`variance_collapse`; a warning is issued for SoR and the RBFN).
        on_fit: called as ``on_fit(name, index, total)`` before each fit (e.g. for a CLI progress line).
        **fit_options: passed to every :func:`bayes_rbfn.fit` call (``chains``, ``draws``, ``warmup``,
            ``kernel`` — a family name —, ``priors``, ``fixed``, ``noise``, ``target_accept``, …).

    Returns:
        :class:`Comparison`.

    Raises:
        ValueError: fewer than two or repeated models, a grouped model, a test split given by halves or of
            the wrong shape, a kernel object instead of a family name, or an invalid fit option.
    """
    specs = _model_names(models)
    _check_options(ic, fit_options)
    X, y, X_test, y_test, X_pred = _check_data(X, y, X_test, y_test, X_pred)
    idatas = _fit_models(specs, X, y, X_pred, Z, num_inducing, seed, progress, sampler, on_fit, fit_options)
    tests = _elpd_tests(idatas, X_test, y_test, X_pred)
    lost = _variance_lost(idatas, X_test, X_pred, collapse_threshold)
    table = _table(idatas, ic, seed if sampler is None else sampler.seed, tests, lost, collapse_threshold)
    return Comparison(
        idatas=idatas,
        table=table,
        elpd_test=tests,
        variance_lost=lost,
        X=X,
        y=y,
        X_test=X_test,
        y_test=y_test,
        X_pred=X_pred,
        ic=ic,
    )


def _check_options(ic: str, fit_options: dict[str, Any]) -> None:
    """Refuse an unknown information criterion and the fit options :func:`compare_models` cannot honour.

    Args:
        ic: ``"loo"`` or ``"waic"``.
        fit_options: the options passed to every fit.

    Raises:
        ValueError: an unknown or unavailable ``ic``, a grouping option, or a kernel object.
    """
    if ic not in ("loo", "waic"):
        raise ValueError(f"ic: expected 'loo' or 'waic', got {ic!r}")
    if ic == "waic" and not arviz_compat.WAIC_AVAILABLE:
        raise ValueError("ic: WAIC is gone from ArviZ 1.x (this environment's ArviZ); use 'loo'")
    if "group" in fit_options or "group_pred" in fit_options:
        raise ValueError("group: compare_models does not handle grouped models")
    if not isinstance(fit_options.get("kernel", "se"), str):
        raise ValueError(
            "kernel: compare_models needs a kernel family name (e.g. 'se'): the held-out predictions and "
            "bands are recomputed from the stored draws, which a fixed kernel object cannot be rebuilt from"
        )


def _check_data(
    X: Any, y: Any, X_test: Any, y_test: Any, X_pred: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray]:
    """The checked training data, test split and prediction inputs of :func:`compare_models`.

    Args:
        X: (N, D) or (N,) training inputs.
        y: (N,) targets.
        X_test: held-out inputs or None.
        y_test: held-out targets or None (given with ``X_test`` or not at all).
        X_pred: inputs of the stored predictions, or None for ``X_test`` when given, else X.

    Returns:
        (X, y, X_test, y_test, X_pred) as arrays (the test split None when not given).
    """
    X = np.asarray(check_X(X, "X"))
    y = np.asarray(check_y(y, X.shape[0]))
    if (X_test is None) != (y_test is None):
        raise ValueError("X_test, y_test: give both (a held-out split) or neither")
    if X_test is not None:
        X_test = np.asarray(check_X(X_test, "X_test", dim=X.shape[1]))
        y_test = np.asarray(check_y(y_test, X_test.shape[0], name="y_test"))
    if X_pred is None:
        X_pred = X if X_test is None else X_test
    X_pred = np.asarray(check_X(X_pred, "X_pred", dim=X.shape[1]))
    return X, y, X_test, y_test, X_pred


def _fit_models(
    specs: list[ModelSpec],
    X: np.ndarray,
    y: np.ndarray,
    X_pred: np.ndarray,
    Z: Any,
    num_inducing: int | None,
    seed: int,
    progress: bool,
    sampler: SamplerSettings | None,
    on_fit: Callable[[str, int, int], None] | None,
    fit_options: dict[str, Any],
) -> dict[str, Any]:
    """Fit every model with :func:`bayes_rbfn.fit`, the sparse ones on one shared Z.

    Args:
        specs: the models, in order.
        X: (N, D) training inputs.
        y: (N,) targets.
        X_pred: (S, D) inputs of the stored predictions.
        Z: (M, D) shared inducing inputs, or None for those the first sparse fit chooses.
        num_inducing: M when Z is not given.
        seed: PRNG seed of every fit (without ``sampler``).
        progress: show progress bars (without ``sampler``).
        sampler: the NUTS settings of every fit, or None.
        on_fit: called as ``on_fit(name, index, total)`` before each fit, or None.
        fit_options: passed to every fit.

    Returns:
        Model name → its fit, in the order of ``specs``.
    """
    idatas: dict[str, Any] = {}
    for k, spec in enumerate(specs):
        if on_fit is not None:
            on_fit(spec.name, k, len(specs))
        idatas[spec.name] = fit(
            spec,
            X,
            y,
            Z=Z if spec.uses_inducing else None,
            num_inducing=num_inducing,
            X_pred=X_pred,
            **({"seed": seed, "progress": progress} if sampler is None else {"sampler": sampler}),
            **fit_options,
        )
        if spec.uses_inducing and Z is None and "Z" in idatas[spec.name].constant_data:
            Z = np.asarray(idatas[spec.name].constant_data["Z"].values)
    return idatas


def _elpd_tests(
    idatas: dict[str, Any], X_test: np.ndarray | None, y_test: np.ndarray | None, X_pred: np.ndarray
) -> dict[str, ElpdTest]:
    """The held-out density of every fit (:func:`_elpd_test_of_fit`); empty without a test split.

    Args:
        idatas: model name → its fit.
        X_test: (S, D) held-out inputs or None.
        y_test: (S,) held-out targets or None.
        X_pred: (S, D) inputs of the stored predictions.

    Returns:
        Model name → :class:`ElpdTest`.
    """
    tests: dict[str, ElpdTest] = {}
    if X_test is not None:
        for name, idata in idatas.items():
            tests[name] = _elpd_test_of_fit(idata, X_test, y_test, X_pred)
    return tests


def _variance_lost(
    idatas: dict[str, Any], X_test: np.ndarray | None, X_pred: np.ndarray, threshold: float
) -> dict[str, np.ndarray]:
    """The posterior-mean lost prior variance at X_pred of every model whose predictive can collapse.

    :func:`variance_collapse` checks (and warns about) X_pred and the test inputs not among them.

    Args:
        idatas: model name → its fit.
        X_test: (S, D) held-out inputs or None.
        X_pred: (S, D) inputs of the stored predictions.
        threshold: share of lost prior variance above which a point counts as collapsed.

    Returns:
        Model name → (S,) 1 − Q_**/K_** at X_pred, for the models in ``VARIANCE_COLLAPSE_MODELS``.
    """
    lost: dict[str, np.ndarray] = {}
    for name, idata in idatas.items():
        if get_model(name).variance_collapses:
            in_pred = X_test is None or _rows_in(X_test, X_pred) is not None
            points = X_pred if in_pred else np.concatenate([X_pred, X_test])
            lost[name] = variance_collapse(idata, points, threshold=threshold)[: X_pred.shape[0]]
    return lost


def _rows_in(X_test: np.ndarray, X_pred: np.ndarray) -> np.ndarray | None:
    """Indices of X_test's rows among X_pred's (exact matches), or None when some row is missing."""
    where = {row.tobytes(): i for i, row in enumerate(np.ascontiguousarray(X_pred, dtype=np.float64))}
    index = [where.get(row.tobytes()) for row in np.ascontiguousarray(X_test, dtype=np.float64)]
    return None if any(i is None for i in index) else np.asarray(index, dtype=np.int64)


def _elpd_test_of_fit(idata: Any, X_test: np.ndarray, y_test: np.ndarray, X_pred: np.ndarray) -> ElpdTest:
    """elpd_test from the stored predictions, or from a new per-draw prediction at X_test.

    The stored predictions serve when every test input is among X_pred.
    """
    _, _, _, params = rebuild(idata)
    index = _rows_in(X_test, X_pred)
    if index is not None:
        f_mean = np.asarray(idata.predictions["f_mean"].values)[..., index]
        f_var = np.asarray(idata.predictions["f_var"].values)[..., index]
    else:
        pred = posterior_predict(idata, X_test)
        f_mean, f_var = pred.f_mean, pred.f_var
    return elpd_test(f_mean, f_var, noise_draws(params, f_mean.shape[:2]), y_test)


def _table(
    idatas: dict[str, Any],
    ic: str,
    seed: int,
    tests: dict[str, ElpdTest],
    lost: dict[str, np.ndarray],
    threshold: float,
) -> pd.DataFrame:
    table = arviz_compat.compare(idatas, ic=ic, seed=seed)
    nan = float("nan")
    table["elpd_test"] = [tests[n].elpd if n in tests else nan for n in table.index]
    table["elpd_test_se"] = [tests[n].se if n in tests else nan for n in table.index]
    table["elpd_test_mcse"] = [tests[n].mcse if n in tests else nan for n in table.index]
    reports = {n: check_convergence(idatas[n]) for n in table.index}
    table["r_hat"] = [reports[n].max_rhat for n in table.index]
    table["divergences"] = [reports[n].divergences for n in table.index]
    table["collapsed_points"] = [
        float(np.mean(lost[n] > threshold)) if n in lost else 0.0 for n in table.index
    ]
    return table
