"""Packaged data sets: shapes, values against an independent read of the raw files, cleaning rules."""

from importlib import resources

import numpy as np
import pandas as pd
import pytest

from bayes_rbfn.io.datasets import WDI_AGGREGATE_CODES, Dataset, list_datasets, load_dataset


def _raw(relative: str):
    return resources.files("bayes_rbfn.data").joinpath(relative)


@pytest.fixture(scope="module")
def raw_fertility() -> pd.DataFrame:
    with _raw("fertility/fertility.csv").open("rb") as fh:
        return pd.read_csv(fh)


def test_list_datasets_names_and_descriptions():
    listed = list_datasets()
    assert set(listed) == {"co2", "snelson", "fertility", "coal", "breast_cancer"}
    assert all(isinstance(d, str) and d and "\n" not in d for d in listed.values())


def test_unknown_name_lists_valid_ones():
    with pytest.raises(
        ValueError, match=r"unknown data set 'mauna'.*breast_cancer, co2, coal, fertility, snelson"
    ):
        load_dataset("mauna")


def test_unknown_option_is_an_error():
    with pytest.raises(ValueError, match=r"no option\(s\) countries.*none"):
        load_dataset("co2", countries=["FRA"])


@pytest.mark.parametrize("name", ["co2", "snelson", "fertility"])
def test_common_contract(name):
    ds = load_dataset(name)
    assert isinstance(ds, Dataset)
    n, d = ds.X.shape
    assert ds.X.dtype == np.float64 and ds.y.dtype == np.float64
    assert ds.y.shape == (n,) and len(ds.x_names) == d and ds.y_name
    assert np.all(np.isfinite(ds.X)) and np.all(np.isfinite(ds.y))
    assert ds.description and ds.name == name
    with pytest.raises(ValueError, match="read-only"):
        ds.X[0, 0] = 0.0


# --------------------------------------------------------------------------------------------------
# co2


def test_co2_drops_the_59_missing_weeks():
    with _raw("co2/statsmodels_co2_weekly.csv").open("rb") as fh:
        raw = pd.read_csv(fh)
    assert len(raw) == 2284 and raw["co2"].isna().sum() == 59
    ds = load_dataset("co2")
    assert ds.X.shape == (2284 - 59, 1)
    assert ds.dropped == 59
    assert "Dropped 59" in ds.notes and "no CO2 value" in ds.notes
    np.testing.assert_array_equal(ds.y, raw["co2"].dropna().to_numpy())


def test_co2_decimal_year():
    ds = load_dataset("co2")
    # 1958-03-29 is day 88 of a 365-day year: 1958 + 87/365.
    assert ds.X[0, 0] == pytest.approx(1958 + 87 / 365, abs=1e-12)
    assert round(ds.X[0, 0], 2) == 1958.24
    assert ds.y[0] == 316.1
    # 2001-12-29 is day 363: the last week.
    assert ds.X[-1, 0] == pytest.approx(2001 + 362 / 365, abs=1e-12)
    assert np.all(np.diff(ds.X[:, 0]) > 0)
    assert ds.x_names == ("year",)


# --------------------------------------------------------------------------------------------------
# snelson


def test_snelson_sizes_and_values():
    ds = load_dataset("snelson")
    assert ds.X.shape == (200, 1) and ds.y.shape == (200,) and ds.X_test.shape == (301, 1)
    assert ds.dropped == 0 and ds.group is None
    with _raw("snelson/snelson_train_inputs.dat").open("rb") as fh:
        raw_x = pd.read_csv(fh, header=None, sep=r"\s+")[0].to_numpy()
    with _raw("snelson/snelson_train_outputs.dat").open("rb") as fh:
        raw_y = pd.read_csv(fh, header=None, sep=r"\s+")[0].to_numpy()
    np.testing.assert_array_equal(ds.X[:, 0], raw_x)
    np.testing.assert_array_equal(ds.y, raw_y)
    assert ds.X[0, 0] == 5.7007757
    assert 0.05 < ds.X.min() and ds.X.max() < 5.97
    assert ds.X_test[0, 0] == -3.0 and ds.X_test[-1, 0] == pytest.approx(10.0)


# --------------------------------------------------------------------------------------------------
# fertility


def test_fertility_long_format_matches_raw(raw_fertility):
    ds = load_dataset("fertility")
    assert ds.group is not None and ds.group.dtype == np.int64
    assert ds.X.shape == (ds.y.size, 1)
    assert set(np.unique(ds.group)) == set(range(ds.num_groups))
    # Spot checks against the wide file, read independently.
    raw = raw_fertility.set_index("Country Code")
    for code, year in [("FRA", 1960), ("USA", 2000), ("ABW", 2011), ("ZWE", 1985)]:
        g = ds.group_names.index(code)
        rows = (ds.group == g) & (ds.X[:, 0] == year)
        assert rows.sum() == 1
        assert ds.y[rows][0] == raw.loc[code, str(year)]
    # Every kept country contributes exactly its non-empty years.
    for g, code in enumerate(ds.group_names):
        assert (ds.group == g).sum() == raw.loc[code].iloc[3:].notna().sum()


def test_fertility_aggregates_removed(raw_fertility):
    ds = load_dataset("fertility")
    aggregate_names = [
        "OECD members",
        "Other small states",
        "Pacific island small states",
        "Latin America & Caribbean (all income levels)",
        "Sub-Saharan Africa (IFC classification)",
    ]
    by_name = raw_fertility.set_index("Country Name")["Country Code"]
    for name in aggregate_names:
        assert by_name[name] in WDI_AGGREGATE_CODES
        assert by_name[name] not in ds.group_names
    assert not set(ds.group_names) & WDI_AGGREGATE_CODES
    # The rule touches only aggregates: every other code in the file is a country or economy.
    in_file = set(raw_fertility["Country Code"]) & WDI_AGGREGATE_CODES
    assert in_file == {by_name[n] for n in aggregate_names}
    assert "aggregate" in ds.notes and "OED" in ds.notes


def test_fertility_short_series_dropped(raw_fertility):
    ds = load_dataset("fertility", min_years=20)
    counts = raw_fertility.set_index("Country Code").iloc[:, 3:].notna().sum(axis=1)
    assert "AND" not in ds.group_names  # Andorra: 5 values
    assert "GRL" in ds.group_names  # Greenland: 22 values
    assert all(counts[c] >= 20 for c in ds.group_names)
    expected = {c for c in counts.index if counts[c] >= 20} - WDI_AGGREGATE_CODES
    assert set(ds.group_names) == expected
    assert ds.dropped == raw_fertility.iloc[:, 4:].size - ds.y.size
    assert len(load_dataset("fertility", min_years=1).group_names) > len(ds.group_names)


def test_fertility_countries_subset_by_code_or_name():
    ds = load_dataset("fertility", countries=["France", "usa", "JPN", "FRA"])
    assert ds.group_names == ("FRA", "USA", "JPN")
    assert ds.y.size == 3 * 52
    assert np.array_equal(np.unique(ds.group), [0, 1, 2])


def test_fertility_max_groups_is_deterministic():
    a = load_dataset("fertility", max_groups=6)
    b = load_dataset("fertility", max_groups=6)
    assert a.num_groups == 6 and a.group_names == b.group_names
    np.testing.assert_array_equal(a.y, b.y)
    full = load_dataset("fertility").group_names
    assert a.group_names[0] == full[0] and a.group_names[-1] == full[-1]
    c = load_dataset("fertility", countries=["DEU", "ITA", "ESP"], max_groups=2)
    assert c.group_names == ("DEU", "ITA")


@pytest.mark.parametrize(
    ("countries", "match"),
    [
        (["Frnace"], r"unknown country 'Frnace'.*'France'.*ABW \(Aruba\)"),
        (["XYZ"], r"unknown country 'XYZ'.*e\.g\. ABW"),
        (["OED"], r"aggregate"),
        (["Andorra"], r"only 5 yearly values.*min_years"),
        ([], r"empty"),
    ],
    ids=["misspelt", "unknown-code", "aggregate", "too-short", "empty"],
)
def test_fertility_bad_countries(countries, match):
    with pytest.raises(ValueError, match=match):
        load_dataset("fertility", countries=countries)


def test_dataset_validates_shapes():
    with pytest.raises(ValueError, match="y must have shape"):
        Dataset(name="t", X=np.zeros((3, 1)), y=np.zeros(2), x_names=("x",), y_name="y")
    with pytest.raises(ValueError, match="group codes"):
        Dataset(
            name="t", X=np.zeros((2, 1)), y=np.zeros(2), x_names=("x",), y_name="y",
            group=np.array([0, 2]), group_names=("a", "b"),
        )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# coal, breast_cancer: checked against the raw files read independently


def _raw_rows(relative: str) -> list[list[str]]:
    import csv

    with _raw(relative).open(newline="") as fh:
        return list(csv.reader(fh))


def test_coal_counts():
    """111 consecutive years 1851–1961, 191 disasters (Jarrett 1979), whole numbers ≥ 0; Poisson."""
    ds = load_dataset("coal")
    assert ds.X.shape == (111, 1) and ds.x_names == ("year",) and ds.y_name == "disasters"
    np.testing.assert_array_equal(ds.X[:, 0], np.arange(1851, 1962))
    assert ds.y.sum() == 191
    assert np.all(ds.y >= 0) and np.all(ds.y == np.round(ds.y))
    rows = _raw_rows("coal/coal_disasters.csv")[1:]
    np.testing.assert_array_equal(ds.y, [float(r[1]) for r in rows])
    assert ds.likelihood == "poisson"


def test_breast_cancer_labels_and_features():
    """569 masses, 212 malignant (y = 1; scikit-learn codes them 0), the default two features, first row
    as in the raw CSV; Bernoulli."""
    ds = load_dataset("breast_cancer")
    assert ds.X.shape == (569, 2) and ds.x_names == ("mean radius", "mean texture")
    assert set(np.unique(ds.y)) == {0.0, 1.0} and ds.y.sum() == 212 and (ds.y == 0).sum() == 357
    rows = _raw_rows("breast_cancer/breast_cancer.csv")
    assert rows[0] == ["569", "30", "malignant", "benign"]
    first = rows[1]
    np.testing.assert_array_equal(ds.X[0], [float(first[0]), float(first[1])])
    assert ds.y[0] == (1.0 if first[-1] == "0" else 0.0)
    full = load_dataset("breast_cancer", features="all")
    assert full.X.shape == (569, 30)
    np.testing.assert_array_equal(full.X[0], [float(v) for v in first[:30]])
    assert ds.likelihood == "bernoulli"


def test_breast_cancer_unknown_feature_is_named():
    with pytest.raises(ValueError, match=r"features: unknown feature\(s\) 'mean radiu'.*did you mean"):
        load_dataset("breast_cancer", features=["mean radiu"])
