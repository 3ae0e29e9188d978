"""Each packaged data set's own fitting defaults: one record in the data layer, which the drivers read.

Proves: every data folder the package ships has a registry entry with a :class:`DatasetDefaults` record,
whose values are those written here; the plan ``bayes-rbfn fit`` builds for co2, coal, snelson and no
arguments at all (the main job) takes the record's values, an option overriding them; ``--max-groups``
reaches the fertility loader, which picks the countries itself; ``fit --help`` writes the data sets' own
defaults from the records; and no module of ``bayes_rbfn/workflows`` or ``bayes_rbfn/cli`` names a data
set in a string literal (read with ``ast``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bayes_rbfn import cli
from bayes_rbfn.cli import birthdays as birthdays_cli
from bayes_rbfn.cli.common import Console
from bayes_rbfn.cli.fit import plan_fit
from bayes_rbfn.io.datasets import (
    DatasetDefaults,
    dataset_defaults,
    dataset_options,
    default_dataset,
    list_case_studies,
    list_datasets,
    load_dataset,
)
from bayes_rbfn.workflows.birthdays import DEFAULT_SETTINGS

ROOT = Path(__file__).resolve().parents[2]

#: The records as the data layer should hold them (None: the command's general default).
EXPECTED = {
    "co2": DatasetDefaults(kernel="co2", model="dtc", mean="linear", max_tree_depth=5),
    "snelson": DatasetDefaults(),
    "fertility": DatasetDefaults(),
    "coal": DatasetDefaults(num_inducing=20),
    "breast_cancer": DatasetDefaults(),
    "birthdays": DatasetDefaults(max_tree_depth=8),
}


def packaged_names() -> list[str]:
    return [*list_datasets(), *list_case_studies()]


def test_every_data_folder_has_one_record():
    folders = {p.name for p in (ROOT / "bayes_rbfn" / "data").iterdir() if p.is_dir() and p.name[0] != "_"}
    assert sorted(packaged_names()) == sorted(folders) == sorted(EXPECTED)
    assert set(list_case_studies()) == {"birthdays"}
    for name in packaged_names():
        assert dataset_defaults(name) == EXPECTED[name], name
        assert dataset_defaults(name.upper()) == EXPECTED[name]  # names in any case, as load_dataset


def test_unknown_names_and_case_studies_are_refused():
    with pytest.raises(ValueError, match="unknown data set 'mauna_loa'; valid names: birthdays, "):
        dataset_defaults("mauna_loa")
    with pytest.raises(ValueError, match="case study"):
        load_dataset("birthdays")
    with pytest.raises(ValueError, match="no default data set"):
        default_dataset("sbc")


def test_the_commands_default_data_sets():
    assert default_dataset() == default_dataset("fit") == "co2"
    assert default_dataset("compare") == "snelson"


def test_only_fertility_picks_its_groups_itself():
    assert [n for n in list_datasets() if "max_groups" in dataset_options(n)] == ["fertility"]
    assert dataset_options("birthdays") == ()


def fit_plan(tmp_path, *argv: str):
    args = cli.build_parser().parse_args(["fit", *argv, "--out", str(tmp_path / "out")])
    return plan_fit(args, Console())


@pytest.mark.parametrize("argv", [(), ("--dataset", "co2")], ids=["main-job", "co2"])
def test_the_co2_plan_takes_its_record(tmp_path, argv):
    plan = fit_plan(tmp_path, *argv)
    assert plan.data.name == "co2"
    assert (plan.model, plan.kernel, plan.mean) == ("dtc", "co2", "linear")
    assert plan.sampler.max_tree_depth == 5


def test_options_override_the_record(tmp_path):
    argv = ["--dataset", "co2", "--model", "sor", "--kernel", "se", "--mean", "constant"]
    plan = fit_plan(tmp_path, *argv, "--max-tree-depth", "7", "--num-inducing", "12")
    assert (plan.model, plan.kernel, plan.mean, plan.sampler.max_tree_depth) == ("sor", "se", "constant", 7)
    assert plan.Z.shape == (12, 1)


def test_the_coal_plan_takes_twenty_centres(tmp_path):
    plan = fit_plan(tmp_path, "--dataset", "coal")
    assert plan.Z.shape == (20, 1)
    assert (plan.model, plan.kernel, plan.likelihood, plan.sampler.max_tree_depth) == (
        "rbfn",
        "se",
        "poisson",
        10,
    )


def test_a_data_set_without_its_own_defaults_takes_the_general_ones(tmp_path):
    plan = fit_plan(tmp_path, "--dataset", "snelson", "--num-inducing", "8")
    assert (plan.model, plan.kernel, plan.mean, plan.sampler.max_tree_depth) == ("sor", "se", "constant", 10)


def test_max_groups_reaches_the_fertility_loader(tmp_path):
    plan = fit_plan(tmp_path, "--dataset", "fertility", "--max-groups", "3", "--num-inducing", "8")
    assert plan.data.num_groups == 3
    # The loader's own note, not keep_groups' ("Kept 3 of … groups … (--max-groups)").
    note = "Kept 3 countries evenly spread over the alphabetical list of codes (max_groups)."
    assert note in plan.data.notes
    assert "(--max-groups)" not in plan.data.notes
    assert plan.data.group_names == load_dataset("fertility", max_groups=3).group_names


def test_the_birthdays_settings_take_its_record(tmp_path):
    assert DEFAULT_SETTINGS.max_tree_depth == 8
    argv = ["fit", "--dataset", "birthdays", "--years", "1", "--out", str(tmp_path / "out")]
    assert birthdays_cli.plan(cli.build_parser().parse_args(argv)).sampler.max_tree_depth == 8


def test_the_help_is_written_from_the_records(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "D ≤ 30 (default 10; 5 for --dataset co2, 8 for --dataset birthdays)" in text
    assert "model (default sor; dtc for --dataset co2; grouped for grouped data;" in text
    assert "(default linear for --dataset co2; else constant)" in text
    assert "kernel family (default: co2 for --dataset co2; else se)" in text
    assert "(default 20 for --dataset coal; min(64, distinct inputs) for one input" in text


def dataset_literals(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, value) of every string constant in ``source`` that is one of ``names``."""
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
    ]


def test_the_literal_finder_finds_a_name():
    source = 'A = "co2"\ndef f(x="coal"):\n    return f"{x} {\'snelson\'}", "co2 record"\n'
    assert dataset_literals(source, {"co2", "coal", "snelson"}) == [(1, "co2"), (2, "coal"), (3, "snelson")]


DRIVERS = sorted(p for folder in ("workflows", "cli") for p in (ROOT / "bayes_rbfn" / folder).rglob("*.py"))


@pytest.mark.parametrize("path", DRIVERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_driver_names_a_data_set(path):
    assert dataset_literals(path.read_text(encoding="utf-8"), set(packaged_names())) == []
