"""Figures of a fit, written as PNG files: MCMC traces and ranks, and the posterior predictive over the data.

Every function draws on a :class:`matplotlib.figure.Figure` it creates itself and saves it with the Agg
renderer, so nothing here touches pyplot's global state or needs a display; the functions can be called
from a script, a notebook or the CLI alike. The trace and rank plots are drawn with matplotlib alone from
the draws ``idata.posterior[name].values`` (chain, draw, ...), the same way under every ArviZ version.

The predictive figures take the summaries already computed from the per-draw analytic moments (the
mixture mean and central intervals of y*, see :func:`bayes_rbfn.infer.predictive.mixture_quantiles`); they do
no
inference themselves. Inducing inputs Z are marked as ticks along the bottom of each panel.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from bayes_rbfn.infer.predictive import Band

__all__ = [
    "plot_birthdays",
    "plot_predicted_vs_observed",
    "plot_predictive_1d",
    "plot_predictive_groups",
    "plot_rank",
    "plot_trace",
]

_DATA_STYLE = {"color": "0.15", "ms": 2.5, "alpha": 0.7, "lw": 0, "marker": "."}
_MEAN_COLOR = "C0"
_Z_COLOR = "C3"
_DPI = 110


#: Held-out points of a backtest.
_HELD_OUT_STYLE = {"color": "C3", "marker": "x", "linestyle": "none", "markersize": 3.5}


def _save(fig: Figure, path: str | os.PathLike[str]) -> None:
    fig.savefig(path, dpi=_DPI)


#: Line styles of the elements of a vector-valued variable in the trace plot (cycled).
_ELEMENT_STYLES = ("solid", "dashed", "dotted", "dashdot")


def _draws(idata: Any, name: str) -> np.ndarray:
    """(chain, draw, K) posterior draws of ``name``, its trailing dimensions flattened to K elements."""
    values = np.asarray(idata.posterior[name].values, dtype=float)
    return values.reshape(values.shape[0], values.shape[1], -1)


def _density(ax: Any, x: np.ndarray, grid: np.ndarray, **style: Any) -> None:
    """Gaussian KDE of the finite values of ``x`` on ``grid``; a vertical line where they do not vary."""
    from scipy.stats import gaussian_kde

    x = x[np.isfinite(x)]
    if x.size == 0:
        return
    if x.size < 2 or np.ptp(x) == 0.0:
        ax.axvline(x[0], **style)
        return
    try:
        ax.plot(grid, gaussian_kde(x)(grid), **style)
    except np.linalg.LinAlgError:  # (numerically) constant draws
        ax.axvline(float(np.mean(x)), **style)


def plot_trace(idata: Any, var_names: Sequence[str], path: str | os.PathLike[str]) -> None:
    """Trace plot (per-chain densities left, draws right) of ``var_names``, one row per variable.

    Drawn with matplotlib from the posterior draws, one colour per chain; the densities are Gaussian
    kernel density estimates. Vector-valued variables (one value per group or input dimension) share their
    row, one line style per element (as ArviZ's ``compact`` trace plot).

    Args:
        idata: InferenceData or DataTree of the fit, with a ``posterior`` group.
        var_names: the posterior variables to draw.
        path: the image file to write.
    """
    names = list(var_names)
    fig = Figure(figsize=(11, max(2.2, 1.9 * len(names))), layout="constrained")
    axes = fig.subplots(len(names), 2, squeeze=False)
    for (left, right), name in zip(axes, names, strict=True):
        draws = _draws(idata, name)
        num_chains, num_draws, num_elements = draws.shape
        finite = draws[np.isfinite(draws)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        pad = 0.05 * (hi - lo) if hi > lo else 0.5 * max(abs(lo), 1.0)
        grid = np.linspace(lo - pad, hi + pad, 200)
        steps = np.arange(num_draws)
        for k in range(num_elements):
            for c in range(num_chains):
                style = {"color": f"C{c}", "linestyle": _ELEMENT_STYLES[k % len(_ELEMENT_STYLES)]}
                _density(left, draws[c, :, k], grid, lw=1.0, **style)
                right.plot(steps, draws[c, :, k], lw=0.5, alpha=0.7, **style)
        title = name if num_elements == 1 else f"{name} ({num_elements} elements, one line style each)"
        left.set_title(title, fontsize=9)
        right.set_title(title, fontsize=9)
        left.set_yticks([])
        left.set_xlim(grid[0], grid[-1])
        right.set_xlim(0, max(num_draws - 1, 1))
        for ax in (left, right):
            ax.tick_params(labelsize=8)
    axes[-1, 0].set_xlabel("value", fontsize=8)
    axes[-1, 1].set_xlabel("draw", fontsize=8)
    fig.suptitle("MCMC traces of the hyperparameters (one colour per chain)")
    _save(fig, path)


def plot_rank(idata: Any, var_names: Sequence[str], path: str | os.PathLike[str]) -> None:
    """Rank plot (Vehtari et al. 2021) of scalar ``var_names``.

    The draws of all chains are ranked together (``scipy.stats.rankdata``, ties averaged) and each chain's
    ranks are histogrammed, one row of bars per chain, with a dashed line at the count a uniform histogram
    would have. Flat histograms mean the chains mix; a chain whose ranks pile up at one end has not
    explored the same region. A vector-valued variable gets one panel per element.

    Args:
        idata: InferenceData or DataTree of the fit, with a ``posterior`` group.
        var_names: the posterior variables to draw (scalar ones; see above for the others).
        path: the image file to write.

    References:
        Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. & Bürkner, P.-C. (2021). Rank-normalization,
        folding, and localization: an improved R-hat for assessing convergence of MCMC. Bayesian Analysis
        16(2), 667–718.
    """
    from scipy.stats import rankdata

    panels = []
    for name in var_names:
        draws = _draws(idata, name)
        labels = [name] if draws.shape[2] == 1 else [f"{name}[{k}]" for k in range(draws.shape[2])]
        panels.extend((label, draws[:, :, k]) for k, label in enumerate(labels))
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(3.8 * cols, 2.6 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (label, values) in zip(axes, panels, strict=False):
        num_chains, num_draws = values.shape
        ranks = rankdata(values, axis=None).reshape(values.shape)
        total = ranks.size
        # Twice Sturges' number of bins for one chain's draws, as ArviZ's rank plot.
        bins = int(np.ceil(2 * np.log2(max(num_draws, 2)))) + 1
        edges = np.linspace(0.5, total + 0.5, bins + 1)
        counts = np.stack([np.histogram(ranks[c], bins=edges)[0] for c in range(num_chains)])
        scale = 0.9 / max(int(counts.max()), 1)
        for c in range(num_chains):
            ax.bar(
                edges[:-1],
                counts[c] * scale,
                width=np.diff(edges),
                bottom=c,
                align="edge",
                color=f"C{c}",
                edgecolor="white",
                linewidth=0.5,
            )
            ax.axhline(c + num_draws / bins * scale, color="0.2", lw=0.8, ls="--")
        ax.set_yticks(np.arange(num_chains), [f"chain {c}" for c in range(num_chains)])
        ax.set_xlim(edges[0], edges[-1])
        ax.set_ylim(0, num_chains)
        ax.set_xlabel("rank (all chains)", fontsize=8)
        ax.set_title(label, fontsize=9)
        ax.tick_params(labelsize=8)
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    fig.suptitle("Rank plots of the hyperparameters (uniform per chain = good mixing)")
    _save(fig, path)


def _mark_inducing(ax: Any, z: np.ndarray | None) -> None:
    """Ticks along the bottom of ``ax`` at the inducing inputs (x positions in data units)."""
    if z is None or len(z) == 0:
        return
    ax.plot(
        z,
        np.zeros_like(z),
        linestyle="none",
        marker="|",
        markersize=9,
        mew=1.2,
        color=_Z_COLOR,
        transform=ax.get_xaxis_transform(),
        clip_on=False,
    )


def _draw_band(ax: Any, x: np.ndarray, band: Band) -> None:
    order = np.argsort(x)
    for mass, alpha in zip(sorted(band.intervals, reverse=True), (0.18, 0.32, 0.45), strict=False):
        lo, hi = band.intervals[mass]
        ax.fill_between(x[order], lo[order], hi[order], color=_MEAN_COLOR, alpha=alpha, lw=0)
    ax.plot(x[order], band.mean[order], color=_MEAN_COLOR, lw=1.2)


def _legend_handles(band: Band, with_z: bool) -> list[Any]:
    handles: list[Any] = [Line2D([], [], **_DATA_STYLE, label="data"), Line2D([], [], color=_MEAN_COLOR)]
    handles[1].set_label("predictive mean")
    for mass, alpha in zip(sorted(band.intervals, reverse=True), (0.18, 0.32, 0.45), strict=False):
        handles.append(Patch(color=_MEAN_COLOR, alpha=alpha, label=f"{mass:.0%} interval of {band.quantity}"))
    if with_z:
        handles.append(
            Line2D(
                [], [], color=_Z_COLOR, marker="|", linestyle="none", markersize=9, label="inducing inputs"
            )
        )
    return handles


def _ylim(ax: Any, *arrays: np.ndarray) -> None:
    values = np.concatenate([np.ravel(a) for a in arrays if a is not None and np.size(a)])
    values = values[np.isfinite(values)]
    if values.size:
        lo, hi = float(values.min()), float(values.max())
        pad = 0.05 * (hi - lo) if hi > lo else 1.0
        ax.set_ylim(lo - pad, hi + pad)


def _in_window(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return (x >= lo) & (x <= hi)


def plot_predictive_1d(
    path: str | os.PathLike[str],
    *,
    X: np.ndarray,
    y: np.ndarray,
    X_pred: np.ndarray,
    band: Band,
    Z: np.ndarray | None,
    x_label: str,
    y_label: str,
    title: str,
    held_out: tuple[np.ndarray, np.ndarray] | None = None,
) -> None:
    """Posterior predictive over one input: data, mean, central intervals of y*, inducing inputs.

    ``held_out`` = (x, y): a backtest's held-out points, drawn in their own colour after the end of the
    fitted data (they are not in ``X``, ``y``), so the forecast can be judged against them.

    When the prediction inputs reach past the data, a second panel zooms on the end of the data and the
    forecast beyond it, where the predictive uncertainty grows (and, for SoR, eventually collapses to the
    noise far from every inducing input: docs/mathematics.md#the-sor-family-and-its-variance-collapse).
    """
    x, xp = np.ravel(X), np.ravel(X_pred)
    z = None if Z is None else np.ravel(Z)
    data_end = float(x.max())
    beyond = xp.max() > data_end
    fig = Figure(figsize=(11, 7.5 if beyond else 4.2), layout="constrained")
    axes = fig.subplots(2 if beyond else 1, 1, squeeze=False)[:, 0]

    ax = axes[0]
    _draw_band(ax, xp, band)
    ax.plot(x, y, **_DATA_STYLE)
    if held_out is not None:
        ax.plot(np.ravel(held_out[0]), held_out[1], **_HELD_OUT_STYLE)
    _mark_inducing(ax, z)
    ax.set_xlim(min(xp.min(), x.min()), max(xp.max(), data_end))
    _ylim(ax, y, *band.intervals[max(band.intervals)])
    ax.set_title(title)
    if beyond:
        ax.axvline(data_end, color="0.5", lw=0.8, ls="--")
        handles = _legend_handles(band, z is not None)
        if held_out is not None:
            handles.append(Line2D([], [], **_HELD_OUT_STYLE, label="held out (scored, not fitted)"))
        ax.legend(handles=handles, loc="upper left", fontsize=8, frameon=False)
        # Zoom: the last stretch of the data, as long as the forecast and at least 10% of the data range.
        horizon = float(xp.max()) - data_end
        start = data_end - max(horizon, 0.1 * float(np.ptp(x)))
        zoom = axes[1]
        _draw_band(zoom, xp[_in_window(xp, start, np.inf)], _subset(band, _in_window(xp, start, np.inf)))
        keep = _in_window(x, start, np.inf)
        zoom.plot(x[keep], y[keep], **_DATA_STYLE)
        if held_out is not None:
            zoom.plot(np.ravel(held_out[0]), held_out[1], **_HELD_OUT_STYLE)
        if z is not None:
            _mark_inducing(zoom, z[_in_window(z, start, np.inf)])
        zoom.axvline(data_end, color="0.5", lw=0.8, ls="--")
        zoom.set_xlim(start, float(xp.max()))
        in_zoom = _in_window(xp, start, np.inf)
        lo95, hi95 = band.intervals[max(band.intervals)]
        _ylim(zoom, y[keep], lo95[in_zoom], hi95[in_zoom])
        zoom.set_title("End of the data and the forecast beyond it (dashed line: last observation)")
        zoom.set_xlabel(x_label)
        zoom.set_ylabel(y_label)
    else:
        ax.legend(handles=_legend_handles(band, z is not None), loc="best", fontsize=8, frameon=False)
        ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    _save(fig, path)


def _subset(band: Band, mask: np.ndarray) -> Band:
    return Band(
        mean=band.mean[mask],
        intervals={k: (lo[mask], hi[mask]) for k, (lo, hi) in band.intervals.items()},
        quantity=band.quantity,
    )


def plot_predictive_groups(
    path: str | os.PathLike[str],
    *,
    panels: Sequence[tuple[str, np.ndarray, np.ndarray, np.ndarray, Band, np.ndarray | None]],
    x_label: str,
    y_label: str,
    title: str,
) -> None:
    """Posterior predictive of grouped data over one input, one panel per shown group.

    Args:
        path: the image file to write.
        panels: (group name, X_g, y_g, X_pred_g, band_g, Z_g) per panel; Z_g the group's inducing
            inputs (the shared ones for shared Z) or None.
        x_label: the input's axis label.
        y_label: the target's axis label.
        title: the figure's title.
    """
    n = len(panels)
    cols = min(3, n)
    rows = -(-n // cols)
    fig = Figure(figsize=(4.2 * cols, 3.2 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for i, (name, Xg, yg, Xpg, band, Zg) in enumerate(panels):
        ax = axes[i]
        _draw_band(ax, np.ravel(Xpg), band)
        ax.plot(np.ravel(Xg), yg, **_DATA_STYLE)
        _mark_inducing(ax, None if Zg is None else np.ravel(Zg))
        if np.ravel(Xpg).max() > np.ravel(Xg).max():
            ax.axvline(np.ravel(Xg).max(), color="0.5", lw=0.8, ls="--")
        ax.set_title(str(name), fontsize=10)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
    for ax in axes[n:]:
        ax.set_axis_off()
    axes[0].legend(
        handles=_legend_handles(panels[0][4], panels[0][5] is not None), loc="best", fontsize=7, frameon=False
    )
    fig.suptitle(title)
    _save(fig, path)


def plot_predicted_vs_observed(
    path: str | os.PathLike[str],
    *,
    X: np.ndarray,
    y: np.ndarray,
    band: Band,
    Z: np.ndarray | None,
    x_names: Sequence[str],
    y_label: str,
    title: str,
    data_label: str = "data",
) -> None:
    """For several inputs: predicted against observed y, and y against the first input.

    The left panel has the widest interval as error bars; the right one the predictive mean and the
    inducing inputs.

    Args:
        path: the image file to write.
        X: (S, D) inputs where ``band`` was predicted: the training data, or held-out test data
            (``data_label`` then says so in the titles and legend).
        y: (S,) observed values at X.
        band: the predictive :class:`~bayes_rbfn.infer.predictive.Band` at X.
        Z: (M, D) inducing inputs, or None.
        x_names: the D input names.
        y_label: the target's axis label.
        title: the figure's title.
        data_label: what the observed points are, in the titles and legend (default "data").
    """
    fig = Figure(figsize=(11, 4.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    lo, hi = band.intervals[max(band.intervals)]
    left.errorbar(
        y,
        band.mean,
        yerr=np.vstack([band.mean - lo, hi - band.mean]),
        fmt="o",
        ms=2.5,
        color=_MEAN_COLOR,
        ecolor=_MEAN_COLOR,
        elinewidth=0.6,
        alpha=0.6,
    )
    span = [float(min(y.min(), lo.min())), float(max(y.max(), hi.max()))]
    left.plot(span, span, color="0.4", lw=0.8, ls="--")
    left.set_xlabel(f"observed {y_label}")
    left.set_ylabel(f"predicted {y_label}")
    left.set_title(
        f"Predicted vs observed, {data_label} (bars: {max(band.intervals):.0%} interval of {band.quantity})"
    )

    x0 = np.asarray(X)[:, 0]
    right.plot(x0, y, **_DATA_STYLE, label=data_label)
    right.plot(x0, band.mean, "o", ms=2.5, color=_MEAN_COLOR, alpha=0.6, label="predictive mean")
    _mark_inducing(right, None if Z is None else np.asarray(Z).reshape(-1, np.shape(X)[1])[:, 0])
    right.set_xlabel(f"{x_names[0]} (first of {len(x_names)} inputs)")
    right.set_ylabel(y_label)
    right.set_title("Against the first input (ticks: inducing inputs)")
    right.legend(fontsize=8, frameon=False)
    fig.suptitle(title)
    _save(fig, path)


#: The days the Birthdays figure labels, as (label, month, day); the floating holidays come from the data.
_SPECIAL_DAYS = (
    ("New year", 1, 1),
    ("Valentine's", 2, 14),
    ("Leap day", 2, 29),
    ("April 1st", 4, 1),
    ("Independence day", 7, 4),
    ("Halloween", 10, 31),
    ("Christmas", 12, 25),
)


def plot_birthdays(idata: Any, path: str | os.PathLike[str]) -> None:
    """The Birthdays case study's figure from :func:`bayes_rbfn.workflows.birthdays.fit_birthdays`'s data.

    From its InferenceData, in relative births (1 = the average day), posterior means over the stored draws:
    the day-of-year and floating-holiday effects of the last year with special days labelled (top); the
    data with the slow trend; the yearly cycle over the first year; each weekday's effect exp(g(t)) β_w
    over the years.
    """
    import pandas as pd

    attrs = idata.constant_data.attrs
    y_sd, y_mean = attrs["bayes_rbfn_y_sd"], attrs["bayes_rbfn_y_mean"]
    pred = idata.predictions.mean(dim=("chain", "draw"))
    dates = pd.to_datetime(idata.constant_data["date"].values)
    X = idata.constant_data["X"].values
    relative = idata.observed_data["y"].values * y_sd + y_mean
    weekday = idata.predictions["weekday_effect"].values  # (chain, draw, 7)
    g = idata.predictions["week_trend"].values  # (chain, draw, N)
    week = np.mean(np.exp(g)[..., None] * weekday[..., None, :], axis=(0, 1))  # (N, 7)
    day_of_year = pred["day_of_year_effect"].values[X[:, 2].astype(int)]
    effect = 1.0 + (day_of_year + X[:, 3:6] @ pred["holiday_effect"].values) * y_sd

    fig = Figure(figsize=(14, 9), layout="constrained")
    grid = fig.add_gridspec(2, 3)
    ax = fig.add_subplot(grid[0, :])
    last = dates.year == dates.year.max()
    ax.plot(dates[last], effect[last], color="k", lw=1.5)
    labels = [(name, month, day) for name, month, day in _SPECIAL_DAYS]
    for j, name in enumerate(("Memorial day", "Labor day", "Thanksgiving")):
        first = np.flatnonzero(last & (X[:, 3 + j] == 1.0))
        if first.size:
            labels.append((name, dates[first[0]].month, dates[first[0]].day))
    for name, month, day in labels:
        at = np.flatnonzero(last & (dates.month == month) & (dates.day == day))
        if at.size:
            value = effect[at[0]]
            ax.annotate(
                name,
                (dates[at[0]], value),
                textcoords="offset points",
                xytext=(0, -14 if value < 1 else 6),
                ha="center",
                fontsize=8,
            )
    ax.axhline(1.0, color="gray", ls="--", lw=1)
    ax.set_title(f"Day-of-year and floating-holiday effects, {dates.year.max()} (relative births)")

    ax = fig.add_subplot(grid[1, 0])
    ax.plot(dates, relative, ".", color="lightgray", ms=2)
    ax.plot(dates, pred["trend"].values * y_sd + y_mean, color="k", lw=2)
    ax.set_title("Data and the slow trend")

    ax = fig.add_subplot(grid[1, 1])
    first_year = dates.year == dates.year.min()
    ax.plot(X[first_year, 2] + 1, 1.0 + pred["year"].values[first_year] * y_sd, color="k", lw=2)
    ax.set_title("Yearly cycle")
    ax.set_xlabel("day of year")

    ax = fig.add_subplot(grid[1, 2])
    for w, name in enumerate(idata.predictions["weekday"].values):
        line = 1.0 + week[:, w] * y_sd
        ax.plot(dates, line, lw=1.5)
        ax.annotate(str(name), (dates[-1], line[-1]), fontsize=8)
    ax.set_title("Day-of-week effects over the years")
    _save(fig, path)
