"""Packaged real data sets, read from the installed package (nothing is downloaded).

Five small public data sets ship in ``bayes_rbfn/data/`` (provenance and licences in its README.md):

- ``"co2"`` — Mauna Loa weekly atmospheric CO2, 1958–2001: the classic GP example (Rasmussen &
  Williams §5.4.3).
- ``"snelson"`` — the Snelson & Ghahramani (2006) 1-D sparse-GP benchmark, with a test grid reaching far
  outside the training inputs, where SoR's predictive variance collapses
  (docs/mathematics.md#the-sor-family-and-its-variance-collapse).
- ``"fertility"`` — World Bank total fertility rate by country and year: a grouped (panel) data set for
  the hierarchical models.
- ``"coal"`` — British coal-mining disasters per year, 1851–1961: counts, for the Poisson likelihood.
- ``"breast_cancer"`` — Breast Cancer Wisconsin (Diagnostic), as distributed by scikit-learn: 0/1
  labels (1 = malignant), for the Bernoulli likelihood.

Every loader returns a :class:`Dataset` holding float64 arrays in the units of the file, and states in
``Dataset.notes`` what it dropped and why.

The registry at the end of this module is the one place that knows the packaged data sets: each entry holds
the loader, the one-line description and the data set's own fitting defaults (:class:`DatasetDefaults`,
read by :func:`dataset_defaults`), and marks the data set a command fits when given none
(:func:`default_dataset`). It also holds the case studies, whose model reads their data itself
(:func:`list_case_studies`; ``"birthdays"``, :mod:`bayes_rbfn.models.birthdays`). The command line reads
these and names no data set.

Example:
    >>> from bayes_rbfn.io.datasets import load_dataset
    >>> ds = load_dataset("snelson")
    >>> ds.X.shape, ds.y.shape, ds.X_test.shape
    ((200, 1), (200,), (301, 1))
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "BIRTHDAYS",
    "WDI_AGGREGATE_CODES",
    "Dataset",
    "DatasetDefaults",
    "dataset_defaults",
    "dataset_options",
    "default_dataset",
    "list_case_studies",
    "list_datasets",
    "load_dataset",
]

_DATA_PACKAGE = "bayes_rbfn.data"


@dataclass(frozen=True, eq=False)
class Dataset:
    """A regression data set: inputs ``X`` (N, D), targets ``y`` (N,), optional groups and test inputs.

    The arrays are float64 (``group`` int64) and read-only, so a loaded data set cannot be changed by
    accident; copy an array (``ds.X.copy()``) to modify it. Equality is identity (``eq=False``): arrays
    have no single truth value to compare with.

    Attributes:
        name: short name (``"co2"``, or the CSV file's stem for user data).
        X: (N, D) inputs, float64.
        y: (N,) targets, float64.
        x_names: D column names of ``X``.
        y_name: name of ``y``.
        description: one line saying what the data are.
        group: (N,) int64 group codes in 0..G−1, or None for ungrouped data.
        group_names: G names, ``group_names[g]`` labels code ``g``; None when ``group`` is None.
        X_test: (S, D) prediction inputs supplied with the data set, or None.
        dropped: number of rows removed while cleaning (missing or non-finite values, aggregates, …).
        notes: what was dropped and why, in plain words ("" when nothing was).
        likelihood: the observation model the data call for (:mod:`bayes_rbfn.models.likelihoods`):
            ``"gaussian"``, or ``"poisson"`` for counts (``coal``) and ``"bernoulli"`` for 0/1 labels
            (``breast_cancer``); the CLI's default ``--likelihood``.
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    x_names: tuple[str, ...]
    y_name: str
    description: str = ""
    group: np.ndarray | None = None
    group_names: tuple[str, ...] | None = None
    X_test: np.ndarray | None = None
    dropped: int = 0
    notes: str = ""
    likelihood: str = "gaussian"

    def __post_init__(self) -> None:
        """Check the shapes and group codes; store the arrays read-only, float64 (``group`` int64).

        A 1-D ``X`` (or ``X_test``) becomes one column; names become tuples of strings.

        Raises:
            ValueError: an array of the wrong shape, not one name in ``x_names`` per column, ``group``
                without ``group_names`` (or the reverse), or a group code outside 0..G−1.
        """
        X = _frozen_array(self.X, np.float64)
        if X.ndim == 1:
            X = _frozen_array(X[:, None], np.float64)
        if X.ndim != 2:
            raise ValueError(f"Dataset {self.name!r}: X must have shape (N, D), got {X.shape}")
        n, d = X.shape
        y = _frozen_array(self.y, np.float64)
        if y.shape != (n,):
            raise ValueError(f"Dataset {self.name!r}: y must have shape ({n},), got {y.shape}")
        x_names = tuple(str(v) for v in self.x_names)
        if len(x_names) != d:
            raise ValueError(f"Dataset {self.name!r}: {len(x_names)} x_names for {d} input column(s)")
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "x_names", x_names)

        if (self.group is None) != (self.group_names is None):
            raise ValueError(f"Dataset {self.name!r}: give both group and group_names, or neither")
        if self.group is not None:
            group = _frozen_array(self.group, np.int64)
            names = tuple(str(v) for v in self.group_names)
            if group.shape != (n,):
                raise ValueError(f"Dataset {self.name!r}: group must have shape ({n},), got {group.shape}")
            if n and (group.min() < 0 or group.max() >= len(names)):
                raise ValueError(f"Dataset {self.name!r}: group codes must lie in 0..{len(names) - 1}")
            object.__setattr__(self, "group", group)
            object.__setattr__(self, "group_names", names)

        if self.X_test is not None:
            X_test = _frozen_array(self.X_test, np.float64)
            if X_test.ndim == 1:
                X_test = _frozen_array(X_test[:, None], np.float64)
            if X_test.ndim != 2 or X_test.shape[1] != d:
                raise ValueError(
                    f"Dataset {self.name!r}: X_test must have shape (S, {d}), got {X_test.shape}"
                )
            object.__setattr__(self, "X_test", X_test)

    @property
    def num_groups(self) -> int:
        """G, the number of groups (0 for ungrouped data)."""
        return 0 if self.group_names is None else len(self.group_names)

    def __repr__(self) -> str:
        """``Dataset(name=..., X=(N, D), y=(N,), …, dropped=...)``: the arrays' shapes, not their values."""
        parts = [f"name={self.name!r}", f"X={self.X.shape}", f"y={self.y.shape}"]
        if self.group_names is not None:
            parts.append(f"groups={len(self.group_names)}")
        if self.X_test is not None:
            parts.append(f"X_test={self.X_test.shape}")
        parts.append(f"dropped={self.dropped}")
        return f"Dataset({', '.join(parts)})"


def _frozen_array(value: Any, dtype: type) -> np.ndarray:
    arr = np.array(value, dtype=dtype, copy=True)
    arr.setflags(write=False)
    return arr


def _open_data(relative: str):
    """Binary file handle on a packaged data file (works from a wheel, a zip or a source tree)."""
    return resources.files(_DATA_PACKAGE).joinpath(relative).open("rb")


# --------------------------------------------------------------------------------------------------
# co2


def _decimal_year(dates: pd.Series) -> np.ndarray:
    """Year + (day of year − 1) / days in that year, e.g. 1958-03-29 → 1958 + 87/365 ≈ 1958.238."""
    days_in_year = np.where(dates.dt.is_leap_year, 366.0, 365.0)
    return (
        dates.dt.year.to_numpy(np.float64) + (dates.dt.day_of_year.to_numpy(np.float64) - 1.0) / days_in_year
    )


def _load_co2() -> Dataset:
    with _open_data("co2/statsmodels_co2_weekly.csv") as fh:
        raw = pd.read_csv(fh, dtype={"date": str, "co2": np.float64})
    dates = pd.to_datetime(raw["date"], format="%Y%m%d")
    keep = raw["co2"].notna().to_numpy()
    dropped = int((~keep).sum())
    missing_dates = dates[~keep]
    notes = (
        f"Dropped {dropped} of {len(raw)} weeks with no CO2 value (empty in the file"
        + (
            f"; first {missing_dates.iloc[0]:%Y-%m-%d}, last {missing_dates.iloc[-1]:%Y-%m-%d})."
            if dropped
            else ")."
        )
        + " X is the decimal year of the week's date: year + (day of year − 1) / days in the year."
    )
    return Dataset(
        name="co2",
        X=_decimal_year(dates[keep])[:, None],
        y=raw["co2"].to_numpy()[keep],
        x_names=("year",),
        y_name="co2_ppmv",
        description="Mauna Loa atmospheric CO2 (ppmv), weekly 1958–2001; X = decimal year (NOAA/Scripps)",
        dropped=dropped,
        notes=notes,
    )


# --------------------------------------------------------------------------------------------------
# snelson


def _read_column(relative: str) -> np.ndarray:
    with _open_data(relative) as fh:
        return np.loadtxt(fh, dtype=np.float64, ndmin=1)


def _load_snelson() -> Dataset:
    X = _read_column("snelson/snelson_train_inputs.dat")
    y = _read_column("snelson/snelson_train_outputs.dat")
    X_test = _read_column("snelson/snelson_test_inputs.dat")
    return Dataset(
        name="snelson",
        X=X[:, None],
        y=y,
        x_names=("x",),
        y_name="y",
        description="Snelson & Ghahramani (2006) 1-D sparse-GP benchmark: 200 training points, 301 test"
        " inputs",
        X_test=X_test[:, None],
        notes="",
    )


# --------------------------------------------------------------------------------------------------
# fertility

#: Country Codes of the World Development Indicators that are regional, income, lending or other
#: aggregates rather than countries or economies (World Bank WDI country metadata, "Region" empty;
#: this list covers the codes used from the 2010s on, including the former IFC regional
#: classification C?A and the IDA/IBRD "T??" totals). Any row with one of these codes is dropped.
WDI_AGGREGATE_CODES: frozenset[str] = frozenset(
    {
        # World and groupings of countries
        "WLD", "ARB", "CEB", "EMU", "EUU", "OED", "FCS", "HPC", "LDC", "INX",
        # Small states
        "CSS", "OSS", "PSS", "SST",
        # Regions, all income levels
        "EAS", "ECS", "LCN", "MEA", "NAC", "SAS", "SSF", "AFE", "AFW",
        # Regions, developing countries only
        "EAP", "ECA", "LAC", "MNA", "SSA",
        # Income groups
        "HIC", "LIC", "LMC", "LMY", "MIC", "UMC", "NOC", "OEC",
        # Lending groups
        "IBD", "IBT", "IDA", "IDB", "IDX",
        # Demographic-dividend groups
        "EAR", "LTE", "PRE", "PST",
        # IDA & IBRD totals by region
        "TEA", "TEC", "TLA", "TMN", "TSA", "TSS",
        # Former IFC regional classification
        "CAA", "CEA", "CEU", "CLA", "CME", "CSA",
    }
)  # fmt: skip

_FERTILITY_ID_COLUMNS = ("Country Name", "Country Code", "Indicator Name", "Indicator Code")


def _load_fertility(
    countries: Sequence[str] | None = None, max_groups: int | None = None, min_years: int = 20
) -> Dataset:
    """Long format: one row per (country, year) with a value; X = year, y = births per woman.

    Args:
        countries: country codes ("FRA") or names ("France"), case-insensitive; keeps these, in this order.
        max_groups: keep at most this many countries: the first ``max_groups`` of ``countries`` when given,
            otherwise ``max_groups`` countries evenly spread over the alphabetical list of codes.
        min_years: drop countries with fewer yearly values than this (their curve is too short to fit).
    """
    if min_years < 1:
        raise ValueError(f"fertility: min_years must be ≥ 1, got {min_years}")
    if max_groups is not None and max_groups < 1:
        raise ValueError(f"fertility: max_groups must be ≥ 1, got {max_groups}")
    with _open_data("fertility/fertility.csv") as fh:
        wide = pd.read_csv(fh)
    year_cols = [c for c in wide.columns if c not in _FERTILITY_ID_COLUMNS]
    values = wide[year_cols].to_numpy(np.float64)  # (rows, years)
    years = np.array([float(c) for c in year_cols])
    codes = wide["Country Code"].astype(str).str.strip().to_numpy()
    names = wide["Country Name"].astype(str).str.strip().to_numpy()
    counts = np.isfinite(values).sum(axis=1)

    is_aggregate = np.isin(codes, sorted(WDI_AGGREGATE_CODES))
    too_short = ~is_aggregate & (counts < min_years)
    eligible = ~is_aggregate & ~too_short
    # Sorted by code so that group codes, and the max_groups subset, do not depend on the file's row order.
    order = sorted(np.flatnonzero(eligible), key=lambda i: codes[i])

    selection_note = ""
    if countries is not None:
        order = _select_countries(countries, codes, names, counts, is_aggregate, eligible, min_years)
        selection_note = f" Kept the {len(order)} requested countries."
    if max_groups is not None and len(order) > max_groups:
        order, cap_note = _cap_countries(order, max_groups, requested=countries is not None)
        selection_note += cap_note

    X_parts, y_parts, g_parts = [], [], []
    for g, i in enumerate(order):
        have = np.isfinite(values[i])
        X_parts.append(years[have])
        y_parts.append(values[i, have])
        g_parts.append(np.full(int(have.sum()), g))

    n_cells = values.size
    dropped_agg = int(counts[is_aggregate].sum())
    dropped_short = int(counts[too_short].sum())
    n_missing = int(n_cells - counts.sum())
    agg_list = ", ".join(f"{codes[i]} ({names[i]})" for i in np.flatnonzero(is_aggregate))
    short_list = ", ".join(codes[too_short])
    notes = (
        f"Long format from {len(wide)} rows × {len(year_cols)} years. "
        f"Skipped {n_missing} empty (country, year) cells. "
        f"Dropped {int(is_aggregate.sum())} regional/income aggregates "
        f"({dropped_agg} values), identified by the WDI aggregate Country Codes: {agg_list or 'none'}. "
        f"Dropped {int(too_short.sum())} countries with fewer than {min_years} yearly values "
        f"({dropped_short} values): {short_list or 'none'}." + selection_note
    )
    return Dataset(
        name="fertility",
        X=np.concatenate(X_parts)[:, None] if X_parts else np.empty((0, 1)),
        y=np.concatenate(y_parts) if y_parts else np.empty(0),
        x_names=("year",),
        y_name="births_per_woman",
        description=(
            "World Bank total fertility rate (births per woman) by country, 1960–2013; "
            "X = year, group = country (World Development Indicators, CC BY 4.0)"
        ),
        group=np.concatenate(g_parts) if g_parts else np.empty(0, dtype=np.int64),
        group_names=tuple(codes[i] for i in order),
        dropped=n_missing + dropped_agg + dropped_short,
        notes=notes,
    )


def _cap_countries(order: list[int], max_groups: int, requested: bool) -> tuple[list[int], str]:
    """(the first ``max_groups`` rows requested, or that many spread over the codes; the note on which)."""
    if not requested:
        picks = np.unique(np.round(np.linspace(0, len(order) - 1, max_groups)).astype(int))
        order = [order[i] for i in picks]
        return order, (
            f" Kept {len(order)} countries evenly spread over the alphabetical list of codes (max_groups)."
        )
    return order[:max_groups], f" Kept the first {max_groups} of them (max_groups)."


def _select_countries(
    countries: Sequence[str],
    codes: np.ndarray,
    names: np.ndarray,
    counts: np.ndarray,
    is_aggregate: np.ndarray,
    eligible: np.ndarray,
    min_years: int,
) -> list[int]:
    """Row indices of the requested countries (by code or name, case-insensitive), in the order given."""
    if isinstance(countries, str):
        countries = [countries]
    lookup: dict[str, int] = {}
    spelled: dict[str, str] = {}  # lower-case key → spelling in the file, for suggestions
    for i, (code, name) in enumerate(zip(codes, names, strict=True)):
        for label in (code, name):
            lookup.setdefault(label.lower(), i)
            spelled.setdefault(label.lower(), label)
    chosen: list[int] = []
    for requested in countries:
        key = str(requested).strip().lower()
        if key not in lookup:
            valid = [f"{codes[i]} ({names[i]})" for i in np.flatnonzero(eligible)]
            close = difflib.get_close_matches(key, list(lookup), n=3, cutoff=0.6)
            hint = f" Did you mean {', '.join(repr(spelled[c]) for c in close)}?" if close else ""
            raise ValueError(
                f"fertility: unknown country {requested!r}.{hint} Give a Country Code or Country Name, "
                f"e.g. {', '.join(valid[:6])}, … ({len(valid)} countries available)"
            )
        i = lookup[key]
        if is_aggregate[i]:
            raise ValueError(
                f"fertility: {codes[i]} ({names[i]}) is a regional/income aggregate, not a country; "
                "aggregates are excluded"
            )
        if not eligible[i]:
            raise ValueError(
                f"fertility: {codes[i]} ({names[i]}) has only {counts[i]} yearly values, fewer than "
                f"min_years={min_years}; pass a smaller min_years to include it"
            )
        if i not in chosen:
            chosen.append(i)
    if not chosen:
        raise ValueError("fertility: countries is empty; give at least one country or None for all")
    return chosen


# --------------------------------------------------------------------------------------------------
# coal, breast_cancer


def _load_coal() -> Dataset:
    with _open_data("coal/coal_disasters.csv") as fh:
        frame = pd.read_csv(fh)
    return Dataset(
        name="coal",
        X=frame["year"].to_numpy(dtype=np.float64)[:, None],
        y=frame["disasters"].to_numpy(dtype=np.float64),
        x_names=("year",),
        y_name="disasters",
        description="British coal-mining disasters (explosions killing ten or more) per year, 1851–1961",
        likelihood="poisson",
    )


#: The features of ``load_dataset("breast_cancer")`` by default: two inputs, for plots and a small network.
BREAST_CANCER_FEATURES = ("mean radius", "mean texture")


def _load_breast_cancer(features: Sequence[str] | str = BREAST_CANCER_FEATURES) -> Dataset:
    with _open_data("breast_cancer/feature_names.csv") as fh:
        names = list(pd.read_csv(fh)["feature"])
    with _open_data("breast_cancer/breast_cancer.csv") as fh:
        # The first line is scikit-learn's header (rows, features, class names), not column names.
        frame = pd.read_csv(fh, header=None, skiprows=1, names=[*names, "class"])
    if isinstance(features, str):
        features = names if features == "all" else [features]
    features = list(features)
    unknown = [f for f in features if f not in names]
    if unknown or not features:
        close = difflib.get_close_matches(unknown[0], names, n=3) if unknown else []
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ValueError(
            f"features: unknown feature(s) {', '.join(map(repr, unknown)) or '(none given)'}{hint}; "
            f"choose from the 30 names of scikit-learn's load_breast_cancer, or 'all'"
        )
    return Dataset(
        name="breast_cancer",
        X=frame[features].to_numpy(dtype=np.float64),
        # scikit-learn codes 0 = malignant, 1 = benign; here 1 marks the malignant masses.
        y=(frame["class"].to_numpy() == 0).astype(np.float64),
        x_names=tuple(features),
        y_name="malignant",
        description="Breast Cancer Wisconsin (Diagnostic): 569 masses, y = 1 malignant, 0 benign",
        likelihood="bernoulli",
    )


# --------------------------------------------------------------------------------------------------
# Registry


@dataclass(frozen=True)
class DatasetDefaults:
    """A packaged data set's own fitting defaults; a field left None takes the command's general default.

    An option given on the command line overrides any of them.

    Attributes:
        kernel: the kernel family's name (``--kernel``).
        model: the model's name (``--model``).
        mean: the prior mean (``--mean``), where the model takes it.
        max_tree_depth: NUTS' tree depth D, at most 2^D − 1 steps per draw (``--max-tree-depth``).
        num_inducing: M, the inducing inputs (``--num-inducing``).
    """

    kernel: str | None = None
    model: str | None = None
    mean: str | None = None
    max_tree_depth: int | None = None
    num_inducing: int | None = None


@dataclass(frozen=True)
class _Entry:
    """One packaged data set: its description, its loader (None for a case study), its defaults.

    ``default_for``: the commands (``"fit"``, ``"compare"``) that fit it when given no data.
    """

    description: str
    loader: Callable[..., Dataset] | None
    defaults: DatasetDefaults = DatasetDefaults()
    default_for: tuple[str, ...] = ()


#: The Birthdays case study's name: US births per day, read by the collection's Birthdays model
#: (:func:`bayes_rbfn.models.birthdays.load_birthdays`) and fitted by :mod:`bayes_rbfn.workflows.birthdays`.
BIRTHDAYS = "birthdays"

_REGISTRY: dict[str, _Entry] = {
    "co2": _Entry(
        "Mauna Loa weekly atmospheric CO2 (ppmv) 1958–2001, X = decimal year; 2,225 weeks",
        _load_co2,
        # The main job (`bayes-rbfn fit` with no arguments) forecasts, so it takes the model and mean that
        # the backtests on the record itself calibrated (see docs/cli.md, the main job): DTC keeps the prior
        # variance past the data that SoR loses, and a sampled linear mean carries the rise forward. The co2
        # kernel family is the one built for this record: trend, a drift of the growth rate, medium-term
        # and seasonal terms (models/families.py). Tree depth 5: before the mass matrix adapts, the first
        # warm-up iterations run to the full depth (2^10 − 1 = 1023 steps at the general depth 10); once
        # adapted a draw takes about 7 steps, well below 2^5 − 1 = 31, so the cap shortens only that start
        # and leaves r_hat and ESS as they were.
        DatasetDefaults(kernel="co2", model="dtc", mean="linear", max_tree_depth=5),
        default_for=("fit",),
    ),
    "snelson": _Entry(
        "Snelson & Ghahramani 1-D sparse-GP benchmark: 200 train points, 301 test inputs",
        _load_snelson,
        # `bayes-rbfn compare` with no data: its test grid reaches far outside the training inputs, where
        # SoR's collapsing variance is easy to see.
        default_for=("compare",),
    ),
    "fertility": _Entry(
        "World Bank fertility rate by country 1960–2013 (grouped/panel); options countries, max_groups, "
        "min_years",
        _load_fertility,
    ),
    "coal": _Entry(
        "British coal-mining disasters per year 1851–1961 (counts; Poisson by default)",
        _load_coal,
        # 111 years and a rate that varies over about 20 years; the weights are sampled (Poisson RBFN), and
        # 20 centres 5.5 years apart fit as well as 64, with under a third of the weights for NUTS to sample.
        DatasetDefaults(num_inducing=20),
    ),
    "breast_cancer": _Entry(
        "Breast Cancer Wisconsin, 569 masses, y = 1 malignant (0/1 labels; Bernoulli by default); "
        "option features",
        _load_breast_cancer,
    ),
    BIRTHDAYS: _Entry(
        "US births per day 1969–1988 (7,305 days), the Birthdays case study's additive model; option --years",
        None,
        # Tree depth 8 (at most 255 steps per draw): as for co2, the first warm-up trees, before the mass
        # matrix adapts, are the long ones.
        DatasetDefaults(max_tree_depth=8),
    ),
}


def _entry(name: str) -> tuple[str, _Entry]:
    """(the registry's key, its entry) for a name in any case; ValueError listing the names otherwise."""
    key = str(name).strip().lower()
    if key not in _REGISTRY:
        raise ValueError(f"unknown data set {name!r}; valid names: {', '.join(sorted(_REGISTRY))}")
    return key, _REGISTRY[key]


def list_datasets() -> dict[str, str]:
    """Names of the packaged data sets :func:`load_dataset` reads, each with a one-line description."""
    return {name: entry.description for name, entry in _REGISTRY.items() if entry.loader is not None}


def list_case_studies() -> dict[str, str]:
    """Names of the packaged case studies (their own model reads their data), with one-line descriptions."""
    return {name: entry.description for name, entry in _REGISTRY.items() if entry.loader is None}


def dataset_defaults(name: str) -> DatasetDefaults:
    """The fitting defaults of a packaged data set or case study (:class:`DatasetDefaults`).

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    return _entry(name)[1].defaults


def dataset_options(name: str) -> tuple[str, ...]:
    """The options :func:`load_dataset` takes for ``name`` (``"max_groups"`` for one that picks its groups).

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    loader = _entry(name)[1].loader
    return () if loader is None else tuple(inspect.signature(loader).parameters)


def default_dataset(command: str = "fit") -> str:
    """The packaged data set ``command`` fits when given none: ``"fit"`` (the main job) or ``"compare"``.

    Raises:
        ValueError: no data set is marked for ``command``.
    """
    for name, entry in _REGISTRY.items():
        if command in entry.default_for:
            return name
    raise ValueError(f"command {command!r} has no default data set")


def load_dataset(name: str, **options: Any) -> Dataset:
    """Load a packaged data set by name.

    Args:
        name: one of :func:`list_datasets` (``"co2"``, ``"snelson"``, ``"fertility"``, ``"coal"``,
            ``"breast_cancer"``).
        **options: data-set specific options (:func:`dataset_options`); ``"fertility"`` takes
            ``countries`` (list of codes or names), ``max_groups`` and ``min_years``; ``"breast_cancer"``
            takes ``features`` (column names of scikit-learn's ``load_breast_cancer``, or ``"all"``). The
            others take none.

    Returns:
        The :class:`Dataset`, float64 arrays in the file's units.

    Raises:
        ValueError: unknown name (the message lists the valid ones), a case study (its model reads its
            data), unknown option, or a bad option value (e.g. an unknown country).
    """
    key = str(name).strip().lower()
    loadable = list_datasets()
    if key not in loadable:
        if key in _REGISTRY:
            raise ValueError(f"data set {key!r} is a case study: its own model reads its data")
        raise ValueError(f"unknown data set {name!r}; valid names: {', '.join(sorted(loadable))}")
    loader = _REGISTRY[key].loader
    assert loader is not None
    accepted = list(dataset_options(key))
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        allowed = ", ".join(accepted) if accepted else "none"
        raise ValueError(f"data set {key!r} has no option(s) {', '.join(unknown)}; its options: {allowed}")
    return loader(**options)
