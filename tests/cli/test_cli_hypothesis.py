"""Property-based: the command line's arguments. For generated values of every option of
``bayes-rbfn fit`` — integers far out of range, NaN, ±inf, 1e308, text, empty strings, unicode — the CLI
either exits 2 with exactly one line ``bayes-rbfn: error: …`` on stderr, no traceback and nothing written,
or hands ``fit`` arguments that the library itself accepts (its own validation: ``build_model``,
``SamplerSettings`` and the backtest split all run on them). Nothing else may happen: an exception of any
other kind escaping ``main`` fails the property.

The output folder is generated too: missing, empty, an earlier result (written here or moved
here) with or without the user's files in it, a user's folder, a file; named directly, through a symbolic
link or a chain of two; on a read-only file system. A moved interrupted run (its ``run.json`` of either
version) must still be found by ``--resume``. Each case exits 2 in one line or reaches sampling, as the
folder's state says, and leaves every file as it was.

Sampling is stood in for (a run per example would take hours): the stand-in runs the library's checks and
raises :class:`Accepted`.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import bayes_rbfn.infer.fitting
from bayes_rbfn import cli
from bayes_rbfn.infer.fitting import build_model, holdout_split
from bayes_rbfn.io import output


class Accepted(Exception):
    """The CLI reached sampling with arguments the library accepts."""


def stand_in_fit(model, X, y, *, sampler, holdout_after=None, holdout=None, coords=None, **options):
    options.pop("check_diagnostics", None)
    if holdout_after is not None or holdout is not None:
        X, y, _, _ = holdout_split(X, y, holdout_after=holdout_after, holdout=holdout)
    build_model(model, X, y, seed=sampler.seed, **options)  # the library's own checks
    raise Accepted


NUMBERS = st.one_of(
    st.integers(min_value=1, max_value=40).map(str),  # values a fit takes, so that many examples reach it
    st.floats(min_value=0.01, max_value=0.99).map(repr),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["0", "1", "2", "-1", "1e308", "-1e308", "1e-308", "nan", "inf", "-inf", "0.5", "0x10"]),
)
TEXT = st.one_of(st.text(max_size=12), st.sampled_from(["", " ", "--", "é", "1,5", "None", "True"]))
VALUE = st.one_of(NUMBERS, TEXT)

#: Options that take one value, and what they are most often given.
OPTIONS = {
    "--chains": NUMBERS,
    "--draws": NUMBERS,
    "--warmup": NUMBERS,
    "--seed": NUMBERS,
    "--target-accept": NUMBERS,
    "--max-tree-depth": NUMBERS,
    "--num-inducing": NUMBERS,
    "--x-pred-extend": NUMBERS,
    "--checkpoint-every": NUMBERS,
    "--holdout": NUMBERS,
    "--holdout-after": NUMBERS,
    "--mean": st.one_of(NUMBERS, st.sampled_from(["constant", "zero", "linear", "median"])),
    "--model": st.one_of(
        TEXT, st.sampled_from(["sor", "rbfn", "dtc", "fitc", "vfe", "exact", "blr", "grouped"])
    ),
    "--kernel": st.one_of(TEXT, st.sampled_from(["se", "matern32", "co2", "periodic"])),
    "--likelihood": st.one_of(TEXT, st.sampled_from(["gaussian", "poisson", "student_t", "bernoulli"])),
    "--init": st.one_of(TEXT, st.sampled_from(["auto", "median", "map"])),
    "--x": st.one_of(TEXT, st.sampled_from(["t", "s", "y"])),
    "--y": st.one_of(TEXT, st.sampled_from(["t", "s", "y"])),
}

ARGUMENTS = st.dictionaries(st.sampled_from(sorted(OPTIONS)), VALUE, max_size=4).flatmap(
    lambda chosen: st.fixed_dictionaries({k: OPTIONS[k] for k in chosen})
)


@pytest.fixture(scope="module")
def csv_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hypothesis_cli")
    rng = np.random.default_rng(0)
    t = np.linspace(0, 10, 30)
    path = folder / "data.csv"
    pd.DataFrame({"t": t, "s": rng.normal(size=30), "y": np.sin(t) + 0.1 * rng.normal(size=30)}).to_csv(
        path, index=False
    )
    return path


@settings(
    max_examples=300, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(arguments=ARGUMENTS)
def test_fit_arguments_exit_2_in_one_line_or_reach_a_valid_fit(arguments, csv_file, capsys, monkeypatch):
    monkeypatch.setattr(bayes_rbfn.infer.fitting, "fit", stand_in_fit)
    out = csv_file.parent / "res"
    argv = ["fit", str(csv_file), "--x", "t", "--y", "y", "--out", str(out), "--quiet"]
    for option, value in arguments.items():
        argv += [f"{option}={value}"]  # '=' so that values starting with '-' stay values
    before = sorted(p.name for p in csv_file.parent.iterdir())
    try:
        status = cli.main(argv)
    except Accepted:
        status = None
        event("accepted: reached sampling")
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if status is not None:
        assert status == 2, (argv, captured.err)
        errors = captured.err.splitlines()
        assert len(errors) == 1 and errors[0].startswith("bayes-rbfn: error: "), (argv, captured.err)
        event("exit 2")
    assert sorted(p.name for p in csv_file.parent.iterdir()) == before, argv


# --------------------------------------------------------------------------------------------------
# Output paths: links, moved folders, read-only file systems

#: What --out holds before the run.
TARGETS = ["missing", "empty", "result", "result+file", "result+folder", "result+link", "user-folder", "file"]
#: Few examples: each is one CLI call that stops before sampling (10–250 ms).
PATH_SETTINGS = settings(
    max_examples=30, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
_case = itertools.count()


def tree(folder: Path) -> dict[str, object]:
    """Every path below ``folder`` with its content (a link's target; None for a folder)."""
    return {
        str(p.relative_to(folder)): (
            os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else None
        )
        for p in folder.rglob("*")
    }


def make_target(folder: Path, target: str, moved: bool) -> None:
    """``folder`` as ``target`` says; an earlier result is written where it is, or elsewhere and moved."""
    if target == "file":
        folder.write_text("not a folder")
    elif target == "empty":
        folder.mkdir()
    elif target == "user-folder":
        folder.mkdir()
        (folder / "thesis.tex").write_text("years of work")
    elif target.startswith("result"):
        first = folder.with_name("first place") / "res" if moved else folder
        first.parent.mkdir(exist_ok=True)
        with output.atomic_output_dir(first, overwrite=False) as tmp:
            (tmp / "inference.nc").write_bytes(b"\x89HDF")
            (tmp / "plots").mkdir()
            (tmp / "plots" / "trace.png").write_bytes(b"png")
        if moved:
            first.rename(folder)
            first.parent.rmdir()
        if target == "result+file":
            (folder / "notes.txt").write_text("mine")
        elif target == "result+folder":
            (folder / "plots" / "mine").mkdir()
        elif target == "result+link":
            (folder / "data").symlink_to(folder.parent)


@PATH_SETTINGS
@given(
    target=st.sampled_from(TARGETS),
    via=st.sampled_from(["direct", "link", "link-to-link"]),
    moved=st.booleans(),
    read_only=st.sampled_from([False, False, True]),
    overwrite=st.booleans(),
)
@example(target="result", via="link-to-link", moved=True, read_only=False, overwrite=True)
@example(target="result+file", via="link", moved=True, read_only=False, overwrite=True)
@example(target="missing", via="link", moved=False, read_only=True, overwrite=False)
@example(target="empty", via="direct", moved=False, read_only=True, overwrite=False)
def test_output_paths_exit_2_in_one_line_or_reach_sampling(
    target, via, moved, read_only, overwrite, csv_file, tmp_path_factory, capsys, monkeypatch
):
    root = tmp_path_factory.mktemp(f"paths{next(_case)}")
    place = root / "place"  # the parent of the real output folder
    place.mkdir()
    make_target(place / "res", target, moved)
    out = place / "res"
    if via != "direct":
        (root / "link").symlink_to(out)
        out = root / "link"
        if via == "link-to-link":
            (root / "link2").symlink_to("link")
            out = root / "link2"
    accepted = target in ("missing", "empty") or (target == "result" and overwrite)
    before = tree(root)
    monkeypatch.setattr(bayes_rbfn.infer.fitting, "fit", stand_in_fit)
    argv = ["fit", str(csv_file), "--x", "t", "--y", "y", "--out", str(out), "--quiet"]
    argv += ["--overwrite"] if overwrite else []
    with monkeypatch.context() as patch:
        if read_only:  # a read-only mount, as access(2) and statvfs(2) report it for `place`
            real_access, real_statvfs = os.access, os.statvfs
            patch.setattr(
                output.os,
                "access",
                lambda path, mode, *a, **k: (
                    not (mode & os.W_OK) and real_access(path, mode, *a, **k)
                    if Path(path) == place
                    else real_access(path, mode, *a, **k)
                ),
            )
            patch.setattr(
                output.os,
                "statvfs",
                lambda path: (
                    type("StatVfs", (), {"f_flag": os.ST_RDONLY})()
                    if Path(path) == place
                    else real_statvfs(path)
                ),
            )
        try:
            status = cli.main(argv)
        except Accepted:
            status = None
    err = capsys.readouterr().err
    event(f"{target}, {via}: {'sampling' if status is None else f'exit {status}'}")
    if accepted and not read_only:
        assert status is None, err
    else:
        assert status == 2, err
        (line,) = err.splitlines()
        assert line.startswith("bayes-rbfn: error: output folder "), line
        if accepted:
            assert line.endswith("(read-only file system)"), line
        elif target.startswith("result+") and overwrite:
            assert "which this program did not write" in line, line
    assert tree(root) == before


@PATH_SETTINGS
@given(
    version=st.sampled_from([1, 2]),
    data_inside=st.booleans(),
    typed_relative=st.booleans(),
    moved=st.booleans(),
    via_link=st.booleans(),
)
def test_a_moved_interrupted_run_is_found_by_resume(
    version, data_inside, typed_relative, moved, via_link, csv_file, tmp_path_factory, capsys, monkeypatch
):
    """A project folder holding OUT.partial (its run stopped before any checkpoint), possibly moved: --resume
    finds the run, its output folder and its data, and so reaches the check that says nothing was saved."""
    root = tmp_path_factory.mktemp(f"moved{next(_case)}")
    project = root / "project"
    project.mkdir()
    data = project / "data.csv" if data_inside else root / "data.csv"
    shutil.copy(csv_file, data)
    typed = os.path.relpath(data, project) if typed_relative else str(data)
    partial = project / "res.partial"
    partial.mkdir()
    argv = ["fit", typed, "--x", "t", "--y", "y", "--out", "res", "--quiet"]
    if version == 1:
        record = {"version": 1, "cwd": str(project), "out": str(project / "res")}
    else:
        record = {"version": 2, "cwd": ".", "out": "res", "origin": str(project)}
    record = {"format": "bayes_rbfn.fit-run", "argv": argv, **record}
    (partial / "run.json").write_text(json.dumps(record))
    if moved:
        project = project.rename(root / "moved project")
    if via_link:
        (root / "link").symlink_to(project / "res")
    monkeypatch.setattr(bayes_rbfn.infer.fitting, "fit", stand_in_fit)
    before = tree(root)
    with monkeypatch.context() as patch:
        patch.chdir(root)
        status = cli.main(["fit", "--resume", "link" if via_link else str(project / "res")])
    err = capsys.readouterr().err
    assert status == 2, err
    (line,) = err.splitlines()
    assert "the run stopped before saving any iteration" in line, line
    assert tree(root) == before
