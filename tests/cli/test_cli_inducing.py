"""``bayes-rbfn fit --inducing``: learned inducing inputs reach the fit, the file and ``--resume``.

The learned Z are checked against the library's own search on the same rows (the search itself is
tested against a dense NumPy bound in tests/gp/test_inducing_search.py); what is tested here is the
plumbing: the option, the stored Z and method, the refusals, and that a resumed run takes the Z its
first part used instead of searching again.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from refusal import refuse

from bayes_rbfn import cli
from bayes_rbfn.infer import checkpoint
from bayes_rbfn.infer import inducing as inducing_module
from bayes_rbfn.infer.inducing import inducing_inputs
from bayes_rbfn.io import arviz_compat

pytestmark = pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")

SMALL = ["--model", "vfe", "--num-inducing", "6", "--chains", "1", "--no-plots", "--quiet"]


def write_csv(folder):
    rng = np.random.default_rng(5)
    c1, c2 = rng.uniform(0.0, 2.0, 50), rng.uniform(-1.0, 1.0, 50)
    y = np.sin(2.0 * c1) + 0.5 * c2**2 + 0.1 * rng.normal(size=50)
    frame = pd.DataFrame({"c1": c1, "c2": c2, "y": y})
    frame.to_csv(folder / "data.csv", index=False)
    return folder / "data.csv", frame


def fit_argv(csv, out, *extra):
    return [str(a) for a in ["fit", csv, "--x", "c1", "c2", "--y", "y", *SMALL, "--out", out, *extra]]


@pytest.mark.slow
def test_optimised_inducing_inputs_are_stored_with_their_method(tmp_path):
    csv, frame = write_csv(tmp_path)
    out = tmp_path / "res"
    assert cli.main(fit_argv(csv, out, "--inducing", "optimised", "--draws", "60", "--warmup", "60")) == 0
    idata = arviz_compat.read_netcdf(out / "inference.nc")
    X, y = frame[["c1", "c2"]].to_numpy(), frame["y"].to_numpy()
    expected, found = inducing_inputs(X, y, 6, method="optimised", kernel="se", seed=0)
    np.testing.assert_allclose(idata.constant_data["Z"].values, expected, rtol=1e-12, atol=1e-12)
    assert found.bound > found.start_bound
    assert not np.allclose(expected, inducing_inputs(X, y, 6, seed=0)[0])
    assert idata.posterior.attrs["bayes_rbfn_inducing"] == "optimised"


@pytest.mark.slow
def test_resume_takes_the_learned_inducing_inputs_of_the_first_part(tmp_path, capsys, monkeypatch):
    csv, _ = write_csv(tmp_path)
    out = tmp_path / "res"
    argv = fit_argv(
        csv, out, "--inducing", "greedy", "--draws", "40", "--warmup", "40", "--checkpoint-every", "20"
    )
    write_manifest = checkpoint.write_manifest
    calls = []

    def write_then_interrupt(*args, **kwargs):
        write_manifest(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "write_manifest", write_then_interrupt)
    assert cli.main(argv) == 130
    monkeypatch.setattr(checkpoint, "write_manifest", write_manifest)
    saved = np.load(tmp_path / "res.partial" / "inducing.npy")
    capsys.readouterr()

    # A corrupt record is refused in one line, and nothing is changed.
    record = tmp_path / "res.partial" / "inducing.npy"
    intact = record.read_bytes()
    record.write_bytes(b"not an array")
    assert cli.main(["fit", "--resume", str(out), "--quiet"]) == 2
    assert "inducing.npy is corrupt" in capsys.readouterr().err
    assert record.read_bytes() == b"not an array"
    record.write_bytes(intact)

    # The resumed run takes the kept Z: it does not search again (another machine could end elsewhere).
    def searched(*args, **kwargs):
        raise AssertionError("the resumed run searched the bound again")

    monkeypatch.setattr(inducing_module.inducing_search, "greedy_inducing", searched)
    assert cli.main(["fit", "--resume", str(out), "--quiet"]) == 0, capsys.readouterr().err
    idata = arviz_compat.read_netcdf(out / "inference.nc")
    np.testing.assert_array_equal(idata.constant_data["Z"].values, saved)
    assert idata.posterior.attrs["bayes_rbfn_inducing"] == "greedy"


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        pytest.param(["--likelihood", "poisson"], ["--inducing optimised", "VFE bound"], id="poisson"),
        pytest.param(
            ["--model", "rbfn", "--likelihood", "student_t"], ["--inducing optimised"], id="student-t"
        ),
    ],
)
def test_learned_inducing_inputs_are_refused_without_the_bound(tmp_path, capsys, extra, needles):
    csv, frame = write_csv(tmp_path)
    counts = frame.assign(y=np.round(np.exp(frame["y"])).astype(int))
    counts.to_csv(csv, index=False)
    argv = [
        "fit",
        csv,
        "--x",
        "c1",
        "c2",
        "--y",
        "y",
        "--inducing",
        "optimised",
        *extra,
        "--out",
        tmp_path / "o",
    ]
    refuse(argv, capsys, tmp_path, *needles)


def test_several_processes_refuse_learned_inducing_inputs(tmp_path, capsys):
    csv, _ = write_csv(tmp_path)
    argv = [
        "fit", csv, "--x", "c1", "c2", "--y", "y", "--inducing", "greedy", "--out", tmp_path / "o",
        "--coordinator", "localhost:23456", "--num-processes", "2", "--process-id", "0",
    ]  # fmt: skip
    refuse(argv, capsys, tmp_path, "--inducing: a run over several processes")
