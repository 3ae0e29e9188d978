"""The command line (docs/output.md, the main job): end-to-end fits, the output folder's contract, the stored
predictive against a dense NumPy recomputation, Ctrl-C, and the README's quick-start commands.

The fits are small (tens of draws, a few inducing inputs) so the whole file runs in about a minute; the
analytic check is exact whatever the number of draws, because it recomputes the per-draw predictive of
docs/mathematics.md#function-space-and-weight-space-agree from the stored draws and inputs with dense
matrices (tests/reference.py), independently of
the library's Woodbury path.
"""

from __future__ import annotations

import errno
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import assert_close
from reference import gram, stored_sor_predictive

from bayes_rbfn import cli
from bayes_rbfn.cli import options
from bayes_rbfn.io import arviz_compat, output
from bayes_rbfn.io.datasets import load_dataset

ROOT = Path(__file__).resolve().parents[2]
# Tiny fits give high Pareto k̂ for a few points; the CLI reports that in words, here it is noise.
pytestmark = pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")
#: Relative jitter of the library's policy in float64 (bayes_rbfn.gp.linalg.JITTER), applied by the reference.
JITTER = 1e-8

SMALL = ["--chains", "2", "--draws", "40", "--warmup", "40", "--quiet"]


def run_cli(argv, capsys):
    """cli.main in-process: (exit status, stdout, stderr)."""
    status = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def listing(folder: Path) -> set[str]:
    """Every path below ``folder`` (hidden ones included), relative."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


# --------------------------------------------------------------------------------------------------
# The output folder's contract


def check_contract(out: Path, *, D: int, inducing: bool = True) -> Any:
    """The files and InferenceData groups of docs/output.md; returns the loaded InferenceData."""
    for name in (
        "inference.nc",
        "summary.csv",
        "trace.png",
        "predictive.png",
        "predictions.csv",
        "report.txt",
    ):
        assert (out / name).is_file(), f"{name} missing from {sorted(os.listdir(out))}"
        assert (out / name).stat().st_size > 0
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")], "temporary folders left behind"

    idata = arviz_compat.read_netcdf(out / "inference.nc")
    for group in (
        "posterior",
        "sample_stats",
        "observed_data",
        "constant_data",
        "log_likelihood",
        "predictions",
    ):
        assert group in arviz_compat.groups(idata), f"group {group} missing"
    post = idata.posterior
    for name in ("lengthscale", "variance", "noise"):
        assert name in post.data_vars
    assert "diverging" in idata.sample_stats
    assert "y" in idata.observed_data
    cd, pcd = idata.constant_data, idata.predictions_constant_data
    assert cd["X"].shape[1] == D and pcd["X_pred"].shape[1] == D
    assert ("Z" in cd) == inducing
    N = idata.observed_data["y"].size
    chains, draws = post.sizes["chain"], post.sizes["draw"]
    assert idata.log_likelihood["y"].shape == (chains, draws, N)
    for name in ("f_mean", "f_var"):
        da = idata.predictions[name]
        assert da.dims == ("chain", "draw", "point")
        assert da.shape == (chains, draws, pcd["X_pred"].shape[0])
        assert np.all(np.isfinite(da.values))
    assert np.all(idata.predictions["f_var"].values >= 0)

    loo = arviz_compat.loo(idata)
    assert np.isfinite(loo.elpd)

    summary = pd.read_csv(out / "summary.csv", index_col=0)
    assert {"mean", "sd", "ess_bulk", "r_hat"} <= set(summary.columns)
    assert {"lengthscale", "variance", "noise"} <= {str(i).split("[")[0] for i in summary.index}
    return idata


def dense_sor_predictive(idata: Any, chain: int, draw: int) -> tuple[np.ndarray, np.ndarray]:
    """The SoR latent predictive of docs/mathematics.md#function-space-and-weight-space-agree for one stored
    draw, by dense NumPy (tests/reference.py):
    condition (y − c, f* − c) ~ N(0, [[Q_ff + σ²I, Q_f*], [Q_*f, Q_**]]) on y, c the stored y_offset."""
    Xs = idata.predictions_constant_data["X_pred"].values
    return stored_sor_predictive(idata, chain, draw, Xs, JITTER)


def check_stored_predictive(idata: Any, draws=((0, 0), (0, -1), (-1, 3))) -> None:
    """Stored per-draw f_mean / f_var equal the dense recomputation from the stored draws and inputs."""
    y = idata.observed_data["y"].values
    assert_close(idata.constant_data["y_offset"].values, np.mean(y))
    for chain, draw in draws:
        mean, var = dense_sor_predictive(idata, chain, draw)
        stored_mean = idata.predictions["f_mean"].values[chain, draw]
        stored_var = idata.predictions["f_var"].values[chain, draw]
        # float64 tolerances of conftest (1e-8 relative): the two derivations agree to ~1e-12 here, with
        # few, well-separated inducing inputs (K_uu well conditioned).
        assert_close(stored_mean, mean, scale=np.max(np.abs(y)))
        assert_close(stored_var, var, scale=np.max(var))


# --------------------------------------------------------------------------------------------------
# End to end on a packaged data set (in-process; one fit shared by several tests)


@pytest.fixture(scope="module")
def snelson_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("snelson") / "results"
    argv = ["fit", "--dataset", "snelson", "--num-inducing", "8", *SMALL, "--out", str(out)]
    status = cli.main(argv)
    assert status == 0
    return out


def test_fit_packaged_dataset_writes_the_contract(snelson_run):
    idata = check_contract(snelson_run, D=1)
    assert idata.constant_data["Z"].shape == (8, 1)
    assert idata.posterior.sizes["chain"] == 2 and idata.posterior.sizes["draw"] == 40
    # The predictive reaches past the end of the data (default: 10% of the input range).
    X = idata.constant_data["X"].values[:, 0]
    X_pred = idata.predictions_constant_data["X_pred"].values[:, 0]
    assert X_pred.min() == pytest.approx(X.min())
    assert X_pred.max() == pytest.approx(X.max() + 0.1 * np.ptp(X))
    assert "bayes-rbfn fit --dataset snelson" in idata.posterior.attrs["bayes_rbfn_command"]


def test_fit_packaged_dataset_stored_predictive_matches_dense_formula(snelson_run):
    check_stored_predictive(arviz_compat.read_netcdf(snelson_run / "inference.nc"))


def test_fit_packaged_dataset_predictions_csv_and_report(snelson_run):
    idata = arviz_compat.read_netcdf(snelson_run / "inference.nc")
    table = pd.read_csv(snelson_run / "predictions.csv")
    assert list(table.columns) == [
        "x",
        "mean",
        "sd_f",
        "sd_y",
        "lower95",
        "lower50",
        "upper50",
        "upper95",
        "beyond_data",
    ]
    assert len(table) == idata.predictions_constant_data["X_pred"].shape[0]
    # Mixture mean of the stored per-draw means; intervals nested around it; sd_y > sd_f (noise).
    np.testing.assert_allclose(
        table["mean"], idata.predictions["f_mean"].values.mean(axis=(0, 1)), rtol=1e-10
    )
    assert np.all(table["lower95"] < table["lower50"]) and np.all(table["lower50"] < table["mean"])
    assert np.all(table["mean"] < table["upper50"]) and np.all(table["upper50"] < table["upper95"])
    assert np.all(table["sd_y"] > table["sd_f"])
    assert table["beyond_data"].any() and not table["beyond_data"].all()
    report = (snelson_run / "report.txt").read_text()
    for needle in (
        "Hyperparameters",
        "lengthscale",
        "r_hat",
        "Verdict",
        "divergent",
        "Results in",
        "PSIS-LOO",
    ):
        assert needle in report


def test_fit_prints_progress_and_report(tmp_path, capsys):
    out = tmp_path / "res"
    argv = ["fit", "--dataset", "snelson", "--num-inducing", "6", "--chains", "1", "--draws", "20"]
    status, stdout, stderr = run_cli([*argv, "--warmup", "20", "--no-plots", "--out", out], capsys)
    assert status == 0
    assert "Sampling: 1 chain(s)" in stderr and "Compiling" in stderr
    assert re.search(r"\d+/40", stderr), "no NumPyro progress bar over the 20 + 20 iterations"
    assert f"Results in {out}" in stdout and "Verdict" in stdout
    assert not (out / "trace.png").exists() and (out / "inference.nc").exists()


def test_ctrl_c_while_writing_leaves_nothing(snelson_run, tmp_path, capsys, monkeypatch):
    """An interrupt after inference.nc is written (here: while plotting) removes the whole folder."""
    import bayes_rbfn.infer.fitting
    import bayes_rbfn.plots

    idata = arviz_compat.read_netcdf(snelson_run / "inference.nc")
    monkeypatch.setattr(bayes_rbfn.infer.fitting, "fit", lambda *a, **k: idata)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bayes_rbfn.plots, "plot_trace", interrupted)
    before = listing(tmp_path)
    status, _, stderr = run_cli(
        ["fit", "--dataset", "snelson", "--num-inducing", "8", "--out", tmp_path / "r"], capsys
    )
    assert status == 130
    assert "interrupted; nothing was written" in stderr and "Traceback" not in stderr
    assert listing(tmp_path) == before


def test_overwrite_replaces_an_existing_folder(snelson_run, tmp_path, capsys, monkeypatch):
    import bayes_rbfn.infer.fitting

    idata = arviz_compat.read_netcdf(snelson_run / "inference.nc")
    monkeypatch.setattr(bayes_rbfn.infer.fitting, "fit", lambda *a, **k: idata)
    out = tmp_path / "old"
    out.mkdir()
    (out / "notes.txt").write_text("old results")
    argv = ["fit", "--dataset", "snelson", "--num-inducing", "8", "--quiet", "--no-plots", "--out", out]
    status, _, stderr = run_cli(argv, capsys)
    assert status == 2 and "use --overwrite" in stderr
    assert listing(out) == {"notes.txt"}
    # --overwrite replaces only what an earlier run of this program wrote (its marker lists the files)
    status, _, stderr = run_cli([*argv, "--overwrite"], capsys)
    assert status == 2 and "holds notes.txt, which this program did not write" in stderr
    assert listing(out) == {"notes.txt"}
    (out / output.MARKER).write_text("{}")  # an older version's marker, which lists no files
    status, _, stderr = run_cli([*argv, "--overwrite"], capsys)
    assert status == 2 and "holds notes.txt, which this program did not write" in stderr
    assert listing(out) == {"notes.txt", output.MARKER}
    (out / "notes.txt").unlink()
    (out / "inference.nc").write_bytes(b"an older version's result")
    status, _, _ = run_cli([*argv, "--overwrite"], capsys)
    assert status == 0
    assert (out / "inference.nc").stat().st_size > 100 and (out / output.MARKER).is_file()


def test_overwrite_keeps_what_the_user_added_to_an_earlier_result(snelson_run, tmp_path, capsys, monkeypatch):
    """The issue's reproduction: a result, then the user's notes.txt and mydata/ in it; --overwrite refuses
    (exit 2, one line naming them) and deletes nothing; without them it replaces the result."""
    import bayes_rbfn.infer.fitting

    idata = arviz_compat.read_netcdf(snelson_run / "inference.nc")
    monkeypatch.setattr(bayes_rbfn.infer.fitting, "fit", lambda *a, **k: idata)
    out = tmp_path / "res"
    argv = ["fit", "--dataset", "snelson", "--num-inducing", "8", "--quiet", "--no-plots", "--out", out]
    assert run_cli(argv, capsys)[0] == 0
    (out / "notes.txt").write_text("notes")
    (out / "mydata").mkdir()
    (out / "mydata" / "x.csv").write_text("t,y\n")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    status, stdout, stderr = run_cli([*argv, "--overwrite"], capsys)
    assert status == 2 and stdout == ""
    assert stderr.count("\n") == 1 and stderr.startswith("bayes-rbfn: error: ")
    assert "holds notes.txt, mydata/, which this program did not write" in stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]  # no lock, temporary or .partial left
    shutil.rmtree(out / "mydata")
    (out / "notes.txt").unlink()
    assert run_cli([*argv, "--overwrite"], capsys)[0] == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [output.MARKER, "inference.nc", "predictions.csv", "report.txt", "summary.csv"]
    )


def test_a_storage_error_is_reported_in_one_line(snelson_run, tmp_path, capsys, monkeypatch):
    """A full disk when inference.nc is created: HDF5's two-line message becomes one line; exit 74."""
    import bayes_rbfn.infer.fitting

    idata = arviz_compat.read_netcdf(snelson_run / "inference.nc")
    monkeypatch.setattr(bayes_rbfn.infer.fitting, "fit", lambda *a, **k: idata)

    import bayes_rbfn.io.netcdf

    def full(idata, path):
        message = "Unable to create file (unable to open file: name = 'inference.nc')\nNo space left"
        raise OSError(errno.ENOSPC, message, str(path))

    monkeypatch.setattr(bayes_rbfn.io.netcdf, "write_inference_data", full)
    out = tmp_path / "res"
    argv = ["fit", "--dataset", "snelson", "--num-inducing", "8", "--quiet", "--no-plots", "--out", out]
    status, stdout, stderr = run_cli(argv, capsys)
    assert status == 74 and stdout == ""
    assert stderr.count("\n") == 1 and stderr.startswith("bayes-rbfn: error: "), stderr
    assert "Unable to create file (unable to open file: name = 'inference.nc') No space left" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------------
# End to end on a CSV written here (subprocess: the real `python -m bayes_rbfn` entry point)


def test_fit_csv_in_a_subprocess(tmp_path):
    rng = np.random.default_rng(7)
    n = 60
    a, b = rng.uniform(0, 5, n), rng.uniform(-2, 2, n)
    y = np.sin(a) + 0.5 * b + 0.1 * rng.standard_normal(n) + 10.0
    frame = pd.DataFrame({"a": a, "b": b, "label": "x", "y": y})
    frame.loc[[3, 17], "y"] = [np.nan, np.inf]  # two rows to drop, with a message
    csv = tmp_path / "measurements.csv"
    frame.to_csv(csv, index=False)
    out = tmp_path / "fit of my data"
    # --model sor: 58 rows of two inputs would get the exact GP by default (docs/cli.md#several-inputs).
    argv = [csv, "--x", "a", "b", "--y", "y", "--model", "sor", "--num-inducing", "12", "--chains", "2"]
    argv += ["--draws", "40"]
    argv += ["--warmup", "40", "--seed", "3", "--out", out]
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, "-m", "bayes_rbfn", "fit", *map(str, argv)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Dropped 2 of 60 rows" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"Results in {out}" in proc.stdout and "Hyperparameters" in proc.stdout

    idata = check_contract(out, D=2)
    assert idata.observed_data["y"].size == 58
    assert idata.posterior["lengthscale"].shape[-1] == 2  # ARD: one lengthscale per input
    # Several inputs: the prediction inputs are the training inputs.
    np.testing.assert_array_equal(
        idata.predictions_constant_data["X_pred"].values, idata.constant_data["X"].values
    )
    check_stored_predictive(idata)


# --------------------------------------------------------------------------------------------------
# Grouped data (the hierarchical model)


def test_fit_grouped_csv(tmp_path, capsys):
    rng = np.random.default_rng(11)
    rows = []
    for g, (shift, scale) in enumerate([(0.0, 1.0), (2.0, 0.5), (-1.0, 2.0)]):
        t = np.sort(rng.uniform(0, 10, 15))
        rows += [
            {"t": ti, "series": f"s{g}", "v": shift + scale * np.sin(ti) + 0.1 * rng.standard_normal()}
            for ti in t
        ]
    csv = tmp_path / "panel.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    out = tmp_path / "grouped"
    argv = [
        "fit",
        csv,
        "--x",
        "t",
        "--y",
        "v",
        "--group",
        "series",
        "--num-inducing",
        "6",
        *SMALL,
        "--out",
        out,
    ]
    status, stdout, stderr = run_cli(argv, capsys)
    assert status == 0, stderr
    assert "grouped model" in stdout
    idata = check_contract(out, D=1)
    assert idata.posterior.attrs["bayes_rbfn_model"] == "grouped"
    assert idata.posterior["noise"].shape[-1] == 3
    table = pd.read_csv(out / "predictions.csv")
    assert set(table["group"]) == {"s0", "s1", "s2"}


# --------------------------------------------------------------------------------------------------
# The default data set, model and kernel (the main job, with fewer draws)


def test_main_job_defaults_on_co2(tmp_path, capsys):
    """`bayes-rbfn fit` fits the backtest-calibrated main job to the packaged CO2 record: the DTC model, the
    co2 kernel with its drift term, a sampled linear mean, and a forecast past 2001 with no warning (DTC keeps
    the prior variance past the inducing inputs)."""
    out = tmp_path / "co2"
    argv = ["fit", "--chains", "1", "--draws", "15", "--warmup", "15", "--num-inducing", "16", "--no-plots"]
    status, stdout, stderr = run_cli([*argv, "--quiet", "--out", out], capsys)
    assert status == 0, stderr
    idata = arviz_compat.read_netcdf(out / "inference.nc")
    attrs = idata.posterior.attrs
    assert attrs["bayes_rbfn_model"] == "dtc" and attrs["bayes_rbfn_kernel"] == "co2"
    for name in ("seasonal_variance", "medium_lengthscale", "drift_lengthscale", "drift_variance"):
        assert name in idata.posterior, name
    assert "mean_slope" in idata.posterior and "mean_intercept" in idata.posterior
    co2 = load_dataset("co2")
    assert idata.observed_data["y"].size == co2.y.size
    assert idata.predictions_constant_data["X_pred"].values.max() > co2.X.max() + 4.0  # years past the end
    assert "co2_ppmv" in stdout and "mean linear" in stdout
    assert "Forecast warning" not in stdout


def test_sor_forecast_past_the_inducing_inputs_is_flagged(tmp_path, capsys):
    """sor forecasts past its last inducing input: the report says the band there cannot be trusted."""
    out = tmp_path / "co2_sor"
    argv = ["fit", "--model", "sor", "--mean", "constant", "--chains", "1", "--draws", "10", "--warmup", "10"]
    argv += ["--num-inducing", "16", "--no-plots", "--quiet", "--out", out]
    status, stdout, stderr = run_cli(argv, capsys)
    assert status == 0, stderr
    assert arviz_compat.read_netcdf(out / "inference.nc").posterior.attrs["bayes_rbfn_model"] == "sor"
    assert "Forecast warning" in stdout and "past the last inducing input" in stdout


def test_coal_counts_default_to_a_poisson_rbfn_whose_band_is_the_rate(tmp_path, capsys):
    """`fit --dataset coal` takes the data set's likelihood (poisson) and the weight-space model; the band
    in predictions.csv is of the rate exp f, each draw's f* = c + K_*u α recomputed densely from the stored
    weights and hyperparameters; replicates of y are counts; the input dimension carries its column name."""
    out = tmp_path / "coal"
    argv = ["fit", "--dataset", "coal", "--num-inducing", "8", "--no-plots", *SMALL, "--out", out]
    status, _, stderr = run_cli(argv, capsys)
    assert status == 0, stderr
    idata = arviz_compat.read_netcdf(out / "inference.nc")
    attrs = idata.posterior.attrs
    assert attrs["bayes_rbfn_model"] == "rbfn" and attrs["bayes_rbfn_likelihood"] == "poisson"
    assert list(idata.constant_data["X"].coords["input_dim"].values) == ["year"]
    y_rep = idata.posterior_predictive["y"].values
    assert np.all(y_rep >= 0) and np.all(y_rep == np.round(y_rep))
    post, cd = idata.posterior, idata.constant_data
    X, Z, Xs = cd["X"].values, cd["Z"].values, idata.predictions_constant_data["X_pred"].values
    c = cd["y_offset"].values.item()
    rates = []
    for chain in range(post.sizes["chain"]):
        for draw in range(post.sizes["draw"]):
            spec = {
                "kind": "se",
                "lengthscale": post["lengthscale"].values[chain, draw],
                "variance": post["variance"].values[chain, draw],
            }
            rates.append(np.exp(c + gram(spec, Xs, Z) @ post["f_alpha"].values[chain, draw]))
    rates = np.array(rates)
    table = pd.read_csv(out / "predictions.csv")
    assert_close(table["mean"].to_numpy(), rates.mean(axis=0), rtol=1e-7)
    assert_close(table["upper95"].to_numpy(), np.quantile(rates, 0.975, axis=0), rtol=1e-7)
    assert np.all(table["lower95"] > 0)
    report = (out / "report.txt").read_text()
    assert "poisson likelihood" in report and "of the rate of disasters" in report
    assert X.shape == (111, 1)


# --------------------------------------------------------------------------------------------------
# --help, datasets


def test_help_explains_every_option(capsys):
    status, stdout, _ = run_cli(["--help"], capsys)
    assert status == 0 and "fit" in stdout and "datasets" in stdout
    status, stdout, _ = run_cli(["fit", "--help"], capsys)
    assert status == 0
    for option in (
        "--x", "--y", "--group", "--dataset", "--strict", "--model", "--kernel", "--num-inducing", "--chains",
        "--draws", "--warmup", "--seed", "--out", "--overwrite", "--x-pred-extend", "--target-accept",
        "--quiet", "--no-plots",
    ):  # fmt: skip
        assert option in stdout, option
    from bayes_rbfn.models import available_models
    from bayes_rbfn.models.families import FAMILIES

    for name in [*available_models(), *FAMILIES]:
        assert re.search(rf"^\s+{re.escape(name)}\s", stdout, re.M), f"{name} not listed in fit --help"
    for family in FAMILIES.values():  # the family's own description (tests/models/test_kernel_families.py)
        assert family.description in stdout, family.name
    assert "Matérn52" in stdout  # the co2 family's drift term
    status, stdout, _ = run_cli(["datasets", "--help"], capsys)
    assert status == 0


def test_datasets_lists_the_packaged_data(capsys):
    status, stdout, _ = run_cli(["datasets"], capsys)
    assert status == 0
    for name in ("co2", "snelson", "fertility"):
        assert re.search(rf"^\s+{name}\s", stdout, re.M)
    assert "[default]" in stdout


def test_commands_are_one_table():
    """Subcommands are registered in cli.COMMANDS and each becomes a subparser with --help."""
    assert {"fit", "datasets"} <= set(cli.COMMANDS)
    parser = cli.build_parser()
    for name in cli.COMMANDS:
        with pytest.raises(SystemExit) as done:
            parser.parse_args([name, "--help"])
        assert done.value.code == 0


# --------------------------------------------------------------------------------------------------
# README quick start: exactly two commands, the ones CI and this file exercise

README = ROOT / "README.md"
TEST_COMMAND = 'pip install -e ".[test]" && python -m pytest -q -n 2 --dist loadfile'
MAIN_JOB_COMMAND = "pip install -e . && bayes-rbfn fit"


def quick_start_commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^    \$ (.*)$", section, re.M)


def test_readme_quick_start_has_exactly_the_two_commands():
    assert quick_start_commands() == [MAIN_JOB_COMMAND, TEST_COMMAND]


def test_readme_test_command_is_what_ci_runs():
    """Run .ci/run's own extraction line on the README: it must yield the test command."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    extraction = next(line for line in ci.splitlines() if line.startswith("cmd=$("))
    proc = subprocess.run(
        ["bash", "-c", f'{extraction}\nprintf "%s" "$cmd"'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout == TEST_COMMAND


def test_readme_main_job_command_parses():
    """The main-job command's CLI part is accepted by the parser as `fit` with every default."""
    cli_part = MAIN_JOB_COMMAND.split("&&")[-1].strip()
    tokens = shlex.split(cli_part)
    assert tokens[0] == "bayes-rbfn"
    args = cli.build_parser().parse_args(tokens[1:])
    assert args.command == "fit"
    assert args.data is None and args.dataset is None and args.model is None and args.kernel is None
    assert (args.chains, args.draws, args.warmup) == (
        options.DEFAULT_CHAINS,
        options.DEFAULT_DRAWS,
        options.DEFAULT_WARMUP,
    )
    # The console script the README calls is the one pyproject declares.
    assert 'bayes-rbfn = "bayes_rbfn.cli:main"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# Targets at the edge of the accepted scales; a fixed mean far from the data

TINY = ["--num-inducing", "8", "--chains", "1", "--draws", "100", "--warmup", "100", "--no-plots"]


def _sine_csv(path: Path, scale: float) -> Path:
    t = np.linspace(0.0, 10.0, 30)
    y = scale * (np.sin(t) + 0.1 * np.random.default_rng(0).standard_normal(30))
    pd.DataFrame({"t": t, "y": y}).to_csv(path, index=False)
    return path


def test_quiet_fit_of_targets_at_1e50_warns_nothing_and_fills_mcse_sd(tmp_path, capsys):
    """y ~ 1e50 (an accepted scale; the kernel variance ~1e100, whose fourth powers overflow): --quiet
    prints nothing on stderr and no RuntimeWarning escapes, and summary.csv's mcse_sd is filled, in the
    data's units (between 1e-3 and 1 posterior sd)."""
    csv = _sine_csv(tmp_path / "big.csv", 1e50)
    argv = ["fit", csv, "--x", "t", "--y", "y", *TINY, "--quiet", "--out", tmp_path / "res"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status, _, stderr = run_cli(argv, capsys)
    assert status == 0, stderr
    assert stderr == ""
    escaped = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert not escaped, escaped
    summary = pd.read_csv(tmp_path / "res" / "summary.csv", index_col="parameter")
    assert summary["mcse_sd"].notna().all(), summary
    ratio = summary["mcse_sd"] / summary["sd"]
    assert np.all((ratio > 1e-3) & (ratio < 1.0)), summary
    assert 1e48 < summary.loc["noise", "mean"] < 1e50  # σ = 0.1 × 1e50 generated the data


def test_a_fixed_mean_far_from_the_data_names_the_mean_option(tmp_path, capsys):
    """--mean 1e300 leaves no start with a finite log density: one line that names --mean, exit 2."""
    csv, out = _sine_csv(tmp_path / "data.csv", 1.0), tmp_path / "res"
    argv = ["fit", csv, "--x", "t", "--y", "y", *TINY, "--mean", "1e300", "--quiet", "--out", out]
    status, _, stderr = run_cli(argv, capsys)
    assert status == 2, stderr
    errors = stderr.splitlines()
    assert len(errors) == 1 and errors[0].startswith("bayes-rbfn: error: "), stderr
    assert "--mean" in errors[0] and "priors= and fixed=" not in errors[0], errors[0]
    assert not out.exists()
