"""Bad input to the command line (docs/output.md): every case exits with status 2, prints one clear line
``bayes-rbfn: error: ...`` without a traceback, and writes nothing. Ctrl-C during sampling exits 130 and
writes nothing.

None of these tests samples: the CLI validates everything before NUTS starts, and an autouse fixture
makes any call of ``fit`` fail the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from refusal import listing, refuse

import bayes_rbfn.infer.fitting
import bayes_rbfn.workflows.sbc
from bayes_rbfn import cli, runtime
from bayes_rbfn.cli import options, sbc
from bayes_rbfn.cli.compare import plan_compare
from bayes_rbfn.io import output

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_sampling(monkeypatch, tmp_path):
    """Fail if any case reaches NUTS; run in tmp_path so a default output folder would land there."""

    def fit(*args, **kwargs):
        raise AssertionError("fit() was called: bad input must be refused before sampling")

    def run_sbc(*args, **kwargs):
        raise AssertionError("run_sbc() was called: bad input must be refused before sampling")

    monkeypatch.setattr(bayes_rbfn.infer.fitting, "fit", fit)
    monkeypatch.setattr(bayes_rbfn.workflows.sbc, "run_sbc", run_sbc)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def good_csv(tmp_path):
    rng = np.random.default_rng(0)
    t = np.linspace(0, 10, 30)
    path = tmp_path / "good.csv"
    pd.DataFrame({"t": t, "s": rng.normal(size=30), "y": np.sin(t) + 0.1 * rng.normal(size=30)}).to_csv(
        path, index=False
    )
    return path


def fit_csv(path, *extra, out="res"):
    return ["fit", path, "--x", "t", "--y", "y", "--out", out, *extra]


# --------------------------------------------------------------------------------------------------
# Files


def test_missing_file(capsys, tmp_path):
    refuse(fit_csv(tmp_path / "nope.csv"), capsys, tmp_path, "nope.csv", "file not found")


def test_directory_instead_of_file(capsys, tmp_path):
    (tmp_path / "folder.csv").mkdir()
    refuse(fit_csv(tmp_path / "folder.csv"), capsys, tmp_path, "is a directory")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(capsys, tmp_path, good_csv):
    good_csv.chmod(0)
    try:
        refuse(fit_csv(good_csv), capsys, tmp_path, "cannot be read")
    finally:
        good_csv.chmod(0o644)


def test_unreadable_file_simulated(capsys, tmp_path, good_csv, monkeypatch):
    """Permission denied, also when the tests run as root (who can read a chmod-0 file)."""
    real_open = Path.open

    def denied(self, *args, **kwargs):
        if self == good_csv:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", denied)
    refuse(fit_csv(good_csv), capsys, tmp_path, "good.csv", "cannot be read", "permission denied")


def test_binary_file_is_not_csv(capsys, tmp_path):
    path = tmp_path / "image.csv"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    refuse(fit_csv(path), capsys, tmp_path, "image.csv")


def test_text_without_columns_is_not_csv(capsys, tmp_path):
    path = tmp_path / "notes.csv"
    path.write_text("just some words here\nand more words\n")
    refuse(fit_csv(path), capsys, tmp_path, "does not look like a CSV file")


def test_empty_file(capsys, tmp_path):
    path = tmp_path / "empty.csv"
    path.write_bytes(b"")
    refuse(fit_csv(path), capsys, tmp_path, "is empty")


def test_header_only(capsys, tmp_path):
    path = tmp_path / "header.csv"
    path.write_text("t,y\n")
    refuse(fit_csv(path), capsys, tmp_path, "no data rows")


# --------------------------------------------------------------------------------------------------
# Columns and values


def test_unknown_column_lists_the_columns(capsys, tmp_path, good_csv):
    message = refuse(["fit", good_csv, "--x", "time", "--y", "y"], capsys, tmp_path, "'time'")
    for column in ("t", "s", "y"):
        assert f"'{column}'" in message or column in message


def test_unknown_target_column(capsys, tmp_path, good_csv):
    refuse(["fit", good_csv, "--x", "t", "--y", "Y"], capsys, tmp_path, "'Y'")


def test_non_numeric_values(capsys, tmp_path):
    path = tmp_path / "words.csv"
    path.write_text("t,y\n1,2.0\n2,abc\n3,4.5\n4,5.5\n")
    refuse(fit_csv(path), capsys, tmp_path, "'y'", "non-numeric", "'abc'")


def test_missing_values_refused_with_strict(capsys, tmp_path):
    path = tmp_path / "gaps.csv"
    path.write_text("t,y\n1,2.0\n2,\n3,inf\n4,5.5\n5,1.0\n6,2.5\n")
    refuse(fit_csv(path, "--strict"), capsys, tmp_path, "2 of 6 rows", "strict")


def test_too_few_rows(capsys, tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("t,y\n1,2.0\n2,3.0\n")
    refuse(fit_csv(path), capsys, tmp_path, "only 2 usable row(s)", "at least 3")


def test_too_few_rows_after_dropping(capsys, tmp_path):
    path = tmp_path / "mostly_nan.csv"
    path.write_text("t,y\n1,2.0\n2,nan\n3,\n4,3.0\n")
    refuse(fit_csv(path), capsys, tmp_path, "only 2 usable row(s)", "dropping 2")


def test_constant_target(capsys, tmp_path):
    path = tmp_path / "flat.csv"
    path.write_text("t,y\n1,4\n2,4\n3,4\n4,4\n")
    refuse(fit_csv(path), capsys, tmp_path, "constant", "nothing to fit")


def test_num_inducing_larger_than_distinct_inputs(capsys, tmp_path):
    path = tmp_path / "repeats.csv"
    path.write_text("t,y\n" + "".join(f"{i % 5},{np.sin(i):.4f}\n" for i in range(40)))
    refuse(
        fit_csv(path, "--num-inducing", "6"), capsys, tmp_path, "--num-inducing 6", "5 distinct", "at most 5"
    )


def test_num_inducing_larger_than_packaged_data(capsys, tmp_path):
    refuse(["fit", "--dataset", "snelson", "--num-inducing", "500"], capsys, tmp_path, "200 distinct")


# --------------------------------------------------------------------------------------------------
# Options


@pytest.mark.parametrize("command", ["fit", "sbc"])
@pytest.mark.parametrize("value", ["-1", "9223372036854775808", "1e3"])
def test_seed_outside_what_a_key_holds(capsys, tmp_path, command, value):
    refuse([command, "--seed", value], capsys, tmp_path, "argument --seed", "")


@pytest.mark.parametrize("option", ["--chains", "--draws", "--warmup", "--num-inducing", "--max-tree-depth"])
@pytest.mark.parametrize("value", ["0", "-3", "two", "1.5"])
def test_non_positive_counts(capsys, tmp_path, option, value):
    refuse(["fit", option, value], capsys, tmp_path, f"argument {option}", "positive whole number")


#: Every whole-number option of every command but --seed, --max-tree-depth (tested above) and fit's
#: --years (1 … 20, the years of the record): (command, option, the largest value accepted).
COUNT_OPTIONS = [
    *[
        ("fit", option, most)
        for option, most in [
            ("--chains", options.MAX_CHAINS),
            ("--draws", options.MAX_ITERATIONS),
            ("--warmup", options.MAX_ITERATIONS),
            ("--num-inducing", options.MAX_INDUCING_OPTION),
            ("--max-groups", options.MAX_GROUPS_OPTION),
            ("--checkpoint-every", options.MAX_ITERATIONS),
        ]
    ],
    *[
        ("compare", option, most)
        for option, most in [
            ("--chains", options.MAX_CHAINS),
            ("--draws", options.MAX_ITERATIONS),
            ("--warmup", options.MAX_ITERATIONS),
            ("--num-inducing", options.MAX_INDUCING_OPTION),
        ]
    ],
    *[
        ("sbc", option, most)
        for option, most in [
            ("--reps", sbc.MAX_REPS),
            ("--n", sbc.MAX_POINTS),
            ("--num-inducing", sbc.MAX_POINTS),
            ("--groups", sbc.MAX_GROUPS),
            ("--draws", options.MAX_ITERATIONS),
            ("--warmup", options.MAX_ITERATIONS),
            ("--thin", options.MAX_ITERATIONS),
        ]
    ],
]


@pytest.mark.parametrize(
    ("command", "option", "most"), COUNT_OPTIONS, ids=[f"{c}{o}" for c, o, _ in COUNT_OPTIONS]
)
@pytest.mark.parametrize("value", ["9223372036854775808", "most+1"], ids=["2^63", "one-past-the-bound"])
def test_counts_past_their_bound_are_refused_when_parsed(capsys, tmp_path, command, option, most, value):
    """Refused by the option's type (not by JAX, minutes later, in a traceback), naming the bound."""
    value = str(most + 1) if value == "most+1" else value
    refuse([command, option, value, "--out", "res"], capsys, tmp_path, f"argument {option}", f"≤ {most:,}")


def test_sbc_whose_runs_cannot_fit_in_memory(capsys, tmp_path, monkeypatch):
    """Within every option's bound, but not within the memory: refused before sampling, naming the options."""
    monkeypatch.setattr(runtime, "available_memory", lambda: 8 * 2**30)
    argv = ["sbc", "--reps", "100000", "--n", "10000", "--out", "res"]
    refuse(
        argv, capsys, tmp_path, "--reps, --n, --warmup, --draws:", "would need about", "8.0 GiB is available"
    )


@pytest.mark.parametrize("command", ["fit", "compare"])
@pytest.mark.parametrize("value", ["31", "2147483648"])
def test_tree_depth_beyond_what_nuts_counts(capsys, tmp_path, command, value):
    """2^D − 1 leapfrog steps are counted in 32 bits: D ≤ 30."""
    refuse([command, "--max-tree-depth", value], capsys, tmp_path, "argument --max-tree-depth", "≤ 30")


@pytest.mark.parametrize(
    ("option", "name", "valid"),
    [
        ("--model", "sorr", ["sor", "rbfn", "exact", "grouped"]),
        ("--kernel", "gaussian", ["se", "matern52", "periodic", "co2"]),
        ("--dataset", "mauna_loa", ["co2", "snelson", "fertility"]),
    ],
    ids=["model", "kernel", "dataset"],
)
def test_unknown_names_list_the_valid_ones(capsys, tmp_path, option, name, valid):
    message = refuse(
        ["fit", option, name],
        capsys,
        tmp_path,
        f"unknown {option[2:].replace('dataset', 'data set')} {name!r}",
    )
    for v in valid:
        assert v in message


def test_every_registered_model_is_accepted_by_name():
    """--model reads the registry at run time: every registered model is a valid choice."""
    from bayes_rbfn.models import available_models

    parser = cli.build_parser()
    for name in available_models():
        assert parser.parse_args(["fit", "--model", name]).model == name


@pytest.mark.parametrize("value", ["0", "1", "1.5", "high"])
def test_target_accept_out_of_range(capsys, tmp_path, value):
    refuse(["fit", "--target-accept", value], capsys, tmp_path, "--target-accept")


def test_negative_extension(capsys, tmp_path):
    refuse(["fit", "--x-pred-extend", "-0.1"], capsys, tmp_path, "--x-pred-extend")


@pytest.mark.parametrize("value", ["1e308", "1e300"])
def test_extension_that_overflows(capsys, tmp_path, good_csv, value):
    refuse(fit_csv(good_csv, "--x-pred-extend", value), capsys, tmp_path, "--x-pred-extend", "past the")


@pytest.mark.parametrize("option", ["--draws", "--chains"])
def test_draws_that_cannot_fit_in_memory(capsys, tmp_path, good_csv, option):
    """Estimated before starting: the message says how much would be needed and how much there is."""
    big = ["--draws", "1000000000"] if option == "--draws" else ["--chains", "10000", "--draws", "100000000"]
    refuse(fit_csv(good_csv, *big), capsys, tmp_path, "--draws", "would need about", "of memory", "available")


@pytest.mark.parametrize(
    ("column", "scale", "needle"),
    [
        ("t", 1e-160, "column 't'"),
        ("t", 1e300, "column 't'"),
        ("y", 1e100, "column 'y'"),
        ("y", 1e-100, "column 'y'"),
    ],
    ids=["x-1e-160", "x-near-1e300", "y-1e100", "y-1e-100"],
)
def test_columns_at_scales_float64_cannot_carry(capsys, tmp_path, column, scale, needle):
    """Refused with the column and its range (not k-means' "Probabilities contain NaN", nor a NaN result)."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"t": np.linspace(1, 10, 30), "y": rng.normal(size=30)})
    frame[column] *= scale
    frame.to_csv(tmp_path / "scaled.csv", index=False)
    message = refuse(fit_csv(tmp_path / "scaled.csv"), capsys, tmp_path, needle, "rescale")
    assert "NaN" not in message and "Probabilities" not in message


def test_unknown_option(capsys, tmp_path):
    refuse(["fit", "--chain", "2"], capsys, tmp_path, "unrecognized arguments", "--help")


def test_unknown_command(capsys, tmp_path):
    refuse(["fitt"], capsys, tmp_path, "invalid choice", "fit")


def test_no_command(capsys, tmp_path):
    refuse([], capsys, tmp_path, "choose a command", "fit", "datasets")


def test_file_and_dataset_together(capsys, tmp_path, good_csv):
    refuse([*fit_csv(good_csv), "--dataset", "co2"], capsys, tmp_path, "either a CSV file or --dataset")


def test_file_without_columns(capsys, tmp_path, good_csv):
    refuse(["fit", good_csv], capsys, tmp_path, "--x COL", "--y COL")


def test_columns_without_file(capsys, tmp_path):
    refuse(["fit", "--x", "t", "--y", "y"], capsys, tmp_path, "--x/--y", "CSV file")


def test_grouped_model_without_groups(capsys, tmp_path, good_csv):
    refuse([*fit_csv(good_csv), "--model", "grouped"], capsys, tmp_path, "needs grouped data", "--group")


def test_group_column_with_ungrouped_model(capsys, tmp_path, good_csv):
    refuse(
        [*fit_csv(good_csv), "--group", "s", "--model", "sor"],
        capsys,
        tmp_path,
        "--group needs a grouped model",
    )


def test_same_column_twice(capsys, tmp_path, good_csv):
    refuse(["fit", good_csv, "--x", "t", "--y", "t"], capsys, tmp_path, "both an input")


# --------------------------------------------------------------------------------------------------
# The output folder


def test_existing_non_empty_output_folder(capsys, tmp_path, good_csv):
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "old.txt").write_text("keep me")
    refuse(fit_csv(good_csv), capsys, tmp_path, "not empty", "--overwrite")
    assert (tmp_path / "res" / "old.txt").read_text() == "keep me"


def test_output_folder_is_a_file(capsys, tmp_path, good_csv):
    (tmp_path / "res").write_text("a file")
    refuse(fit_csv(good_csv), capsys, tmp_path, "not a folder")


def test_overwrite_never_deletes_what_this_program_did_not_write(capsys, tmp_path, good_csv):
    """--overwrite replaces only an earlier result (the marker file every output folder gets)."""
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "thesis.tex").write_text("years of work")
    refuse(fit_csv(good_csv, "--overwrite"), capsys, tmp_path, "did not write", "will not delete")
    refuse(
        ["compare", good_csv, "--x", "t", "--y", "y", "--out", "res", "--overwrite"],
        capsys,
        tmp_path,
        "did not write",
    )


def earlier_result(folder: Path, *user_files: str) -> None:
    """An output folder as a run of this program leaves it (its marker listing its files), plus files of
    the user's."""
    folder.mkdir()
    (folder / "inference.nc").write_bytes(b"\x89HDF")
    marker = {"format": "bayes_rbfn.output", "version": 2, "files": ["inference.nc"]}
    (folder / output.MARKER).write_text(json.dumps(marker))
    for name in user_files:
        (folder / name).write_text("mine")


@pytest.mark.parametrize("through", ["folder", "symlink"])
def test_overwrite_refuses_an_earlier_result_holding_the_users_files(capsys, tmp_path, good_csv, through):
    """--overwrite deletes only what the marker lists: a user's file in an earlier result is named and
    kept, also when --out is a symbolic link to the folder."""
    earlier_result(tmp_path / "res", "notes.txt")
    (tmp_path / "olink").symlink_to("res")
    out = "res" if through == "folder" else "olink"
    refuse(fit_csv(good_csv, "--overwrite", out=out), capsys, tmp_path, "holds notes.txt", "did not write")


def test_a_read_only_output_file_system_is_named(capsys, tmp_path, good_csv, monkeypatch):
    """A read-only mount is "read-only file system", not "permission denied". The tests cannot mount
    one (as root, chmod does not stop writes), so access(2) and statvfs(2) answer for tmp_path as the
    kernel does on a read-only mount."""
    real_access, real_statvfs = os.access, os.statvfs

    def access(path, mode, *args, **kwargs):
        if Path(path) == tmp_path and mode & os.W_OK:
            return False
        return real_access(path, mode, *args, **kwargs)

    def statvfs(path):
        result = real_statvfs(path)
        if Path(path) != tmp_path:
            return result
        return type("StatVfs", (), {"f_flag": result.f_flag | os.ST_RDONLY})()

    monkeypatch.setattr(output.os, "access", access)
    monkeypatch.setattr(output.os, "statvfs", statvfs)
    message = refuse(fit_csv(good_csv), capsys, tmp_path, "cannot write in", "(read-only file system)")
    assert "permission denied" not in message


@pytest.mark.parametrize("where", ["data-folder", "data-folder-parent"])
def test_overwrite_never_replaces_the_folder_of_the_input(capsys, tmp_path, where):
    """`fit proj/data.csv … --out proj --overwrite`: refused even when proj looks like an earlier result."""
    project = tmp_path / "proj" / "sub"
    project.mkdir(parents=True)
    csv = project / "data.csv"
    csv.write_text("t,y\n" + "".join(f"{i},{(i * 7) % 5}\n" for i in range(12)))
    out = project if where == "data-folder" else tmp_path / "proj"
    (out / output.MARKER).write_text("{}")
    refuse(
        ["fit", csv, "--x", "t", "--y", "y", "--out", out, "--overwrite"],
        capsys,
        tmp_path,
        "holds the input file",
    )


@pytest.mark.parametrize("out", [".", "..", "./"], ids=["cwd", "parent-of-cwd", "cwd-slash"])
def test_current_directory_is_never_the_output_folder(capsys, tmp_path, good_csv, out):
    (tmp_path / output.MARKER).write_text("{}")  # even if it looks like an earlier result
    refuse(
        fit_csv(good_csv, "--overwrite", out=out),
        capsys,
        tmp_path,
        "current directory",
    )


@pytest.mark.parametrize(
    "out", ["/proc/self/res", "/proc/bayes_rbfn_res", "/sys/kernel/res", "/dev/res"], ids=str
)
def test_system_folders_are_refused(capsys, tmp_path, good_csv, out):
    refuse(fit_csv(good_csv, out=out), capsys, tmp_path, "system folder")


@pytest.mark.parametrize(
    "argv",
    [
        ["fit", "good.csv", "--x", "t", "--y", "y"],
        ["fit", "--dataset", "birthdays"],
        ["compare"],
        ["sbc"],
    ],
    ids=["fit", "fit-birthdays", "compare", "sbc"],
)
def test_the_root_folder_is_never_the_output_folder(capsys, tmp_path, good_csv, argv):
    refuse([*argv, "--out", "/"], capsys, tmp_path, "output folder /:", "root of the file system")


def test_a_tmpfs_below_dev_is_a_place_for_results(tmp_path, good_csv):
    """/dev/shm, a tmpfs, is no system folder: the run reaches sampling (which the fixture stops)."""
    shm = Path("/dev/shm")
    try:
        mounts = [line.split()[1:3] for line in Path("/proc/self/mounts").read_text().splitlines()]
    except OSError:
        mounts = []
    if ["/dev/shm", "tmpfs"] not in mounts or not os.access(shm, os.W_OK):
        pytest.skip("no writable tmpfs mounted at /dev/shm")
    out = shm / f"bayes_rbfn_test_{os.getpid()}_{tmp_path.name}"
    try:
        with pytest.raises(AssertionError, match=r"fit\(\) was called"):
            cli.main([str(a) for a in fit_csv(good_csv, "--quiet", out=out)])
        assert not out.exists()
    finally:
        for path in shm.glob(f"*{out.name}*"):  # the lock and OUT.partial, had they been left
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()


def test_output_name_too_long(capsys, tmp_path, good_csv):
    name = "r" * 250  # a valid name, but not once ".partial" or ".NAME.tmp-xxxxxxxx" is added
    refuse(fit_csv(good_csv, out=name), capsys, tmp_path, "name is too long")


def test_output_parent_is_a_file(capsys, tmp_path, good_csv):
    (tmp_path / "afile").write_text("x")
    refuse(fit_csv(good_csv, out="afile/res"), capsys, tmp_path, "is a file, not a folder")


# --------------------------------------------------------------------------------------------------
# Ctrl-C


def test_ctrl_c_during_sampling_writes_nothing(capsys, tmp_path, good_csv, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bayes_rbfn.infer.fitting, "fit", interrupted)
    before = listing(tmp_path)
    status = cli.main([str(a) for a in fit_csv(good_csv)])
    captured = capsys.readouterr()
    assert status == 130
    assert "bayes-rbfn: error: interrupted; nothing was written" in captured.err
    assert "Traceback" not in captured.err
    assert listing(tmp_path) == before


# --------------------------------------------------------------------------------------------------
# The real entry point


def test_bad_input_in_a_subprocess(tmp_path):
    """`python -m bayes_rbfn`: exit status 2, one line on stderr, no traceback, nothing written."""
    path = tmp_path / "data.csv"
    path.write_text("time,value\n1,2\n2,3\n3,5\n4,4\n")
    proc = subprocess.run(
        [sys.executable, "-m", "bayes_rbfn", "fit", str(path), "--x", "t", "--y", "value", "--out", "res"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bayes-rbfn: error: ")
    assert "'t'" in lines[0] and "time" in lines[0] and "value" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]


# --------------------------------------------------------------------------------------------------
# Likelihoods and means


@pytest.fixture
def counts_csv(tmp_path):
    path = tmp_path / "counts.csv"
    k = [0, 1, 3, -1, 2, 0.5, 4, 1, 0, 2]
    pd.DataFrame({"t": np.arange(10.0), "y": k}).to_csv(path, index=False)
    return path


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--likelihood", "poisson"], ["--likelihood: 'poisson' needs y to be counts", "rows 3, 5"]),
        (
            ["--likelihood", "bernoulli"],
            ["--likelihood: 'bernoulli' needs y to be labels 0 or 1", "rows 2, 3"],
        ),
        (
            ["--likelihood", "poisson", "--model", "sor"],
            ["--likelihood: 'poisson' needs the weight-space model rbfn"],
        ),
        (["--likelihood", "student_t", "--model", "exact"], ["--likelihood: 'student_t' needs"]),
        (["--likelihood", "gamma"], ["--likelihood", "gamma"]),
        (["--mean", "quadratic"], ["--mean", "quadratic"]),
        (["--mean", "inf"], ["--mean", "finite"]),
        (["--mean", "linear", "--model", "blr"], ["--mean linear", "'blr'"]),
    ],
    ids=[
        "negative-fractional-counts",
        "labels-not-0-1",
        "poisson-sor",
        "student-t-exact",
        "unknown",
        "unknown-mean",
        "infinite-mean",
        "linear-mean-blr",
    ],
)
def test_bad_likelihood_or_mean_is_refused(counts_csv, capsys, tmp_path, extra, needles):
    refuse(fit_csv(counts_csv, *extra), capsys, tmp_path, *needles)


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["--holdout-after", "9.5"], ["--holdout-after", "leaves", "each side needs at least 10"]),
        (["--holdout", "0.1"], ["--holdout", "3 to score", "at least 10"]),
        (["--holdout-after", "5", "--x", "t", "s"], ["--holdout-after", "one input column"]),
    ],
    ids=["too-few-held-out", "too-small-fraction", "several-inputs"],
)
def test_bad_backtest_is_refused(good_csv, capsys, tmp_path, argv, needles):
    refuse(fit_csv(good_csv, *argv), capsys, tmp_path, *needles)


def test_backtest_of_grouped_data_is_refused(capsys, tmp_path):
    refuse(["fit", "--dataset", "fertility", "--holdout", "0.2", "--out", "res"], capsys, tmp_path, "grouped")


def test_compare_time_split_needs_one_input(good_csv, capsys, tmp_path):
    argv = ["compare", good_csv, "--x", "t", "s", "--y", "y", "--split", "time", "--out", "res"]
    refuse(argv, capsys, tmp_path, "--split time", "one input column")


def test_compare_time_split_holds_out_the_last_rows(good_csv):
    """--split time: the held-out rows are the latest by the input (checked on the plan, before fitting)."""
    args = cli.build_parser().parse_args(
        ["compare", str(good_csv), "--x", "t", "--y", "y", "--split", "time", "--test-fraction", "0.2"]
    )
    plan = plan_compare(args)
    t = pd.read_csv(good_csv)["t"].to_numpy()
    assert plan.test is not None and len(plan.test) == 6
    assert t[plan.test].min() > t[plan.train].max()
