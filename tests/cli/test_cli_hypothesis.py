"""Property-based: the command line's arguments (issue 19). For generated values of every option of
``bayes-rbfn fit`` — integers far out of range, NaN, ±inf, 1e308, text, empty strings, unicode — the CLI
either exits 2 with exactly one line ``bayes-rbfn: error: …`` on stderr, no traceback and nothing written,
or hands ``fit`` arguments that the library itself accepts (its own validation: ``build_model``,
``SamplerSettings`` and the backtest split all run on them). Nothing else may happen: an exception of any
other kind escaping ``main`` fails the property.

Sampling is stood in for (a run per example would take hours): the stand-in runs the library's checks and
raises :class:`Accepted`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import bayes_rbfn.infer.fitting
from bayes_rbfn import cli
from bayes_rbfn.infer.fitting import build_model, holdout_split


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
