"""The one place where ArviZ's two lines differ: 0.x (``InferenceData``) and 1.x (xarray's ``DataTree``).

A fit is a set of named groups (``posterior``, ``sample_stats``, ``observed_data``, …), each an
``xarray.Dataset``. ArviZ 0.x holds them in an ``InferenceData``; ArviZ 1.x (arviz-base, arviz-stats,
arviz-plots) in an ``xarray.DataTree`` whose children are the groups. Attribute access (``idata.posterior``),
``"name" in idata.posterior`` and ``idata.posterior["name"].values`` read both alike; what differs, and
lives here alone, is how the object is built and extended, how its groups are listed, and the names and
signatures of ArviZ's statistics:

* :func:`from_groups`, :func:`add_groups`, :func:`groups`, :func:`group_dataset`, :func:`assign_coords`:
  the same groups, names, dims and coordinates on both lines;
* :func:`read_netcdf`: a file written under either line, read into memory under this one;
* :func:`summary`, :func:`loo`, :func:`psis_log_weights`, :func:`compare`: one result layout on both
  lines (0.x's column names; the interval columns say which interval they are).

numpyro is imported before arviz: arviz-base registers a lazily loaded ``numpyro`` module when it is
imported, and an ``import numpyro.distributions`` that runs before ``import numpyro`` then finds the package
half initialised (``module 'numpyro.distributions' has no attribute 'distribution'``).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import numpy as np
import numpyro  # noqa: F401  (before arviz: see the module docstring)
import pandas as pd
import xarray as xr


def _import_arviz() -> Any:
    """Import ArviZ, once more if its once-a-day notice lost a race with another process.

    ArviZ 0.23 writes a date stamp on the first import of a day through one shared temporary file, which
    it then renames; of two processes importing it at that moment (two test workers, or two processes of
    one run), the second finds the file already renamed and its import fails with ``FileNotFoundError``.
    The stamp is then written, so the second import skips the write. Any other error is raised as it is.

    Returns:
        The ``arviz`` module.
    """
    try:
        import arviz
    except FileNotFoundError as error:
        if "daily_warning" not in str(error):
            raise
        import arviz
    return arviz


az = _import_arviz()

__all__ = [
    "ARVIZ_1",
    "HDI_COLUMNS",
    "HDI_PROB",
    "SAMPLE_DIMS",
    "WAIC_AVAILABLE",
    "Loo",
    "add_groups",
    "assign_coords",
    "compare",
    "ess",
    "from_groups",
    "group_dataset",
    "groups",
    "loggers",
    "loo",
    "mcse_mean",
    "psis_log_weights",
    "put_variable",
    "read_netcdf",
    "rhat",
    "summary",
]

#: Whether the installed ArviZ is the 1.x line (DataTree) rather than 0.x (InferenceData).
ARVIZ_1 = int(version("arviz").split(".")[0]) >= 1
#: ArviZ 1.x has no WAIC (``az.waic`` and ``compare(ic="waic")`` were removed); 0.x has both.
WAIC_AVAILABLE = not ARVIZ_1
#: The dimensions of one posterior draw, leading every variable of a sampled group.
SAMPLE_DIMS = ("chain", "draw")
#: The groups in ArviZ's order (InferenceData's, kept for a DataTree too, so both write the same file).
_ORDER = (
    "posterior",
    "posterior_predictive",
    "predictions",
    "log_likelihood",
    "sample_stats",
    "prior",
    "prior_predictive",
    "sample_stats_prior",
    "observed_data",
    "constant_data",
    "predictions_constant_data",
)
#: Groups whose variables lead with :data:`SAMPLE_DIMS`.
_SAMPLED = frozenset(_ORDER) - {"observed_data", "constant_data", "predictions_constant_data"}
#: The summary's highest-density interval: its probability and the names of its two columns.
HDI_PROB = 0.94
HDI_COLUMNS = ("hdi_3%", "hdi_97%")


def group_dataset(idata: Any, name: str) -> xr.Dataset:
    """The group ``name`` of ``idata`` as an ``xarray.Dataset`` (a DataTree node converted)."""
    node = idata[name]
    return node.to_dataset() if isinstance(node, xr.DataTree) else node


def groups(idata: Any) -> tuple[str, ...]:
    """The names of ``idata``'s groups, in order (``("posterior", "sample_stats", …)``)."""
    if isinstance(idata, xr.DataTree):
        return tuple(idata.children)
    return tuple(idata.groups())


def _dataset(name: str, variables: Mapping[str, Any], dims: Mapping[str, Sequence[str]]) -> xr.Dataset:
    """A group's Dataset: each variable with its named dims (``<var>_dim_<i>`` where none are given).

    Variables of a sampled group lead with (chain, draw); a scalar of another group is stored with one
    element (shape (1,)), as ArviZ 0.x's converter stores it, so that files keep one schema. Every
    dimension gets integer coordinates 0, 1, …, as ArviZ's converters give it.
    """
    lead = SAMPLE_DIMS if name in _SAMPLED else ()
    arrays = {}
    for var, value in variables.items():
        value = np.asarray(value) if lead else np.atleast_1d(value)
        rest = value.ndim - len(lead)
        names = list(dims.get(var, ()))[:rest]
        names += [f"{var}_dim_{i}" for i in range(len(names), rest)]
        arrays[var] = xr.DataArray(value, dims=(*lead, *names))
    dataset = xr.Dataset(arrays)
    return dataset.assign_coords({d: np.arange(n) for d, n in dataset.sizes.items()})


def from_groups(
    data: Mapping[str, Mapping[str, Any] | None],
    *,
    dims: Mapping[str, Sequence[str]] | None = None,
    coords: Mapping[str, Sequence[Any]] | None = None,
) -> Any:
    """This line's ArviZ object from {group: {variable: array}}: 0.x's InferenceData, 1.x's DataTree.

    Args:
        data: the groups in order; a group given as None is left out. Arrays of a sampled group
            (``posterior``, ``sample_stats``, ``log_likelihood``, ``posterior_predictive``, ``predictions``,
            ``prior``, ``prior_predictive``) have shape (chain, draw, …).
        dims: variable → names of its dimensions after (chain, draw); the same name in several groups.
        coords: dimension → its coordinate values (default 0, 1, …), in every group that has it.

    Returns:
        The same groups, variables, dims and coordinates on either line.
    """
    present = sorted((g for g, v in data.items() if v is not None), key=_rank)
    datasets = {g: _dataset(g, data[g], dims or {}) for g in present}
    for g, dataset in datasets.items():
        datasets[g] = dataset.assign_coords(
            {d: list(v) for d, v in (coords or {}).items() if d in dataset.dims}
        )
    if ARVIZ_1:
        return xr.DataTree.from_dict(datasets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return az.InferenceData(**datasets)


def add_groups(
    idata: Any,
    data: Mapping[str, Mapping[str, Any] | xr.Dataset],
    *,
    dims: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """Add (or replace) groups of ``idata`` in place.

    Args:
        idata: this line's ArviZ object.
        data: group → {variable: array} (as :func:`from_groups`) or an ``xarray.Dataset``.
        dims: variable → names of its dimensions after (chain, draw).
    """
    for name, variables in data.items():
        dataset = variables if isinstance(variables, xr.Dataset) else _dataset(name, variables, dims or {})
        if ARVIZ_1:
            idata[name] = xr.DataTree(dataset)
            idata.children = dict(sorted(idata.children.items(), key=lambda item: _rank(item[0])))
        else:
            if name in idata.groups():
                del idata[name]  # InferenceData's add_groups would list a present group twice
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                idata.add_groups({name: dataset})


def put_variable(idata: Any, group: str, name: str, array: xr.DataArray) -> None:
    """Set the variable ``name`` of ``idata``'s group ``group`` (made if absent) to ``array``, in place."""
    present = group in groups(idata)
    dataset = group_dataset(idata, group) if present else xr.Dataset()
    add_groups(idata, {group: dataset.assign({name: array})})


def _rank(group: str) -> int:
    """A group's place in :data:`_ORDER` (groups of other names last)."""
    return _ORDER.index(group) if group in _ORDER else len(_ORDER)


def assign_coords(idata: Any, dim: str, values: Sequence[Any]) -> list[str]:
    """Name the coordinates of ``dim`` in every group that has it, in place; returns those groups."""
    found = [g for g in groups(idata) if dim in group_dataset(idata, g).dims]
    for g in found:
        add_groups(idata, {g: group_dataset(idata, g).assign_coords({dim: list(values)})})
    return found


def loggers() -> set[logging.Logger]:
    """The loggers ArviZ writes through (0.x builds its own ``arviz._log`` beside ``getLogger("arviz")``)."""
    return {logging.getLogger("arviz"), getattr(az, "_log", logging.getLogger("arviz"))}


def read_netcdf(path: str | os.PathLike[str]) -> Any:
    """Read a fit's netCDF file (written under either ArviZ line) into memory, as this line's object."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if ARVIZ_1:
            with xr.open_datatree(path, engine="h5netcdf") as tree:
                return tree.load().copy()
        return az.from_netcdf(path).map(lambda ds: ds.load())


def ess(posterior: xr.Dataset, *, method: str = "bulk", var_names: Sequence[str] | None = None) -> xr.Dataset:
    """``az.ess`` of each variable of a posterior Dataset (``method``: bulk, tail, mean, …), quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return az.ess(posterior, var_names=None if var_names is None else list(var_names), method=method)


def rhat(posterior: xr.Dataset, *, var_names: Sequence[str] | None = None) -> xr.Dataset:
    """``az.rhat`` (rank-normalised split R-hat) of each variable of a posterior Dataset, quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return az.rhat(posterior, var_names=None if var_names is None else list(var_names))


def mcse_mean(draws: np.ndarray) -> float:
    """Monte-Carlo standard error of the mean of (chain, draw) draws (``az.mcse``), quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not ARVIZ_1:  # 0.x: an array gives a number (a DataArray would give a Dataset)
            return float(np.asarray(az.mcse(np.asarray(draws), method="mean")))
        return float(np.asarray(az.mcse(xr.DataArray(np.asarray(draws), dims=SAMPLE_DIMS), method="mean")))


def summary(posterior: xr.Dataset, kind: str) -> pd.DataFrame:
    """``az.summary`` of a posterior Dataset, unrounded, with one column layout on both lines.

    Args:
        posterior: variables of shape (chain, draw, …).
        kind: ``"stats"`` (mean, sd and the 94 % highest-density interval, :data:`HDI_COLUMNS`) or
            ``"diagnostics"`` (mcse_mean, mcse_sd, ess_bulk, ess_tail, r_hat).

    Returns:
        A DataFrame, a row per scalar element (``name`` or ``name[i, j]``).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not ARVIZ_1:
            return az.summary(posterior, kind=kind, round_to="none", hdi_prob=HDI_PROB)
        table = az.summary(posterior, kind=kind, round_to="none", ci_kind="hdi", ci_prob=HDI_PROB)
    percent = f"{round(HDI_PROB * 100)}"
    table = table.rename(columns={f"hdi{percent}_lb": HDI_COLUMNS[0], f"hdi{percent}_ub": HDI_COLUMNS[1]})
    if kind == "diagnostics":
        table = table[["mcse_mean", "mcse_sd", "ess_bulk", "ess_tail", "r_hat"]]
    return table


@dataclass(frozen=True)
class Loo:
    """PSIS-LOO of a fit, the same fields on both ArviZ lines.

    Attributes:
        elpd: the expected log pointwise predictive density, Σ_i log p(y_i | y_−i).
        se: its standard error, ArviZ's: √N times the sd of the pointwise values (ddof 0 on ArviZ 0.x,
            1 on 1.x, as R's loo package).
        p: the effective number of parameters (``p_loo``).
        pareto_k: (N,) Pareto k̂ of each observation's importance weights.
        warning: whether ArviZ flagged the estimate (some k̂ above its threshold).
        elpd_i: (N,) the pointwise elpd values.
    """

    elpd: float
    se: float
    p: float
    pareto_k: np.ndarray
    warning: bool
    elpd_i: np.ndarray


def loo(idata: Any, reff: float | None = None) -> Loo:
    """PSIS-LOO over ``idata``'s one ``log_likelihood`` variable (``az.loo(…, pointwise=True)``)."""
    result = _elpd_loo(idata, reff)
    if ARVIZ_1:
        elpd, p = result.elpd, result.p
    else:
        elpd, p = result["elpd_loo"], result["p_loo"]
    return Loo(
        elpd=float(elpd),
        se=float(result["se"] if not ARVIZ_1 else result.se),
        p=float(p),
        pareto_k=np.ravel(np.asarray(result.pareto_k)),
        warning=bool(result.warning),
        elpd_i=np.ravel(np.asarray(result.elpd_i if ARVIZ_1 else result.loo_i)),
    )


def _elpd_loo(idata: Any, reff: float | None) -> Any:
    """The line's own ``az.loo(…, pointwise=True)`` result, unsmoothed where there are too few draws."""
    try:
        result = az.loo(idata, pointwise=True, reff=reff)
    except ValueError as err:  # 1.x: too few draws for a Pareto tail of 5; 0.x then leaves them unsmoothed
        if not ARVIZ_1 or "n_draws_tail" not in str(err):
            raise
        log_lik = next(iter(group_dataset(idata, "log_likelihood").data_vars.values()))
        log_ratios = -log_lik
        log_weights = log_ratios - log_ratios.reduce(np.logaddexp.reduce, dim=SAMPLE_DIMS)
        pareto_k = xr.full_like(log_lik.isel(chain=0, draw=0, drop=True), np.inf)
        result = az.loo(idata, pointwise=True, reff=reff, log_weights=log_weights, pareto_k=pareto_k)
    return result


def psis_log_weights(log_ratios: np.ndarray, reff: float) -> np.ndarray:
    """Pareto-smoothed, normalised log importance weights (Vehtari et al. 2024), (S, N) → (S, N).

    Args:
        log_ratios: (S, N) log importance ratios of S draws for N observations (for LOO, −log p(y_i | θ_s)).
        reff: the relative efficiency of the draws (ESS over S).

    Returns:
        (S, N) log weights; each column's weights sum to 1.
    """
    log_ratios = np.asarray(log_ratios, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a large Pareto k is az.loo's to report
        if not ARVIZ_1:
            log_weights, _ = az.psislw(log_ratios.T, reff=reff)
            return np.asarray(log_weights).T
        # arviz-stats takes log-likelihood values, whose negatives are the LOO log ratios. With too few
        # draws for a tail of 5 it refuses; 0.x then leaves the ratios unsmoothed, and so does this.
        log_lik = xr.DataArray(-log_ratios[None], dims=(*SAMPLE_DIMS, "obs"))
        try:
            log_weights, _ = log_lik.azstats.psislw(r_eff=reff)
            log_weights = np.asarray(log_weights.transpose(*SAMPLE_DIMS, "obs").values)[0]
        except ValueError as err:
            if "n_draws_tail" not in str(err):
                raise
            log_weights = log_ratios
    return log_weights - np.logaddexp.reduce(log_weights, axis=0)


#: The columns of :func:`compare`'s table, on both lines.
_COMPARE_COLUMNS = ("rank", "elpd_{ic}", "p_{ic}", "elpd_diff", "weight", "se", "dse", "warning")


def compare(idatas: Mapping[str, Any], *, ic: str = "loo", seed: int | None = None) -> pd.DataFrame:
    """``az.compare`` of fits by PSIS-LOO (or WAIC on ArviZ 0.x), ranked best first.

    Args:
        idatas: model name → fit, each with a ``log_likelihood`` group.
        ic: ``"loo"``; ``"waic"`` only where :data:`WAIC_AVAILABLE`.
        seed: seed of the stacking weights' optimiser start (0.x).

    Returns:
        A DataFrame indexed by model name with the columns rank, elpd_<ic>, p_<ic>, elpd_diff (the best
        model's elpd minus this one's, ≥ 0), weight (stacking), se, dse and warning.
    """
    if ic not in ("loo", "waic") or (ic == "waic" and not WAIC_AVAILABLE):
        raise ValueError(f"ic: {ic!r} is not available with arviz {version('arviz')}; use 'loo'")
    columns = [c.format(ic=ic) for c in _COMPARE_COLUMNS]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not ARVIZ_1:
            return az.compare(dict(idatas), ic=ic, seed=seed)[columns]
        results = {name: _elpd_loo(idata, None) for name, idata in idatas.items()}  # each LOO once
        table = az.compare(results, round_to="none")
    table = table.rename(columns={"elpd": "elpd_loo", "p": "p_loo"})
    table["elpd_diff"] = np.abs(table["elpd_diff"].to_numpy(dtype=np.float64))
    table["warning"] = [bool(results[name].warning) for name in table.index]
    return table[columns]
