"""Interrupted runs lose nothing: chunked sampling with checkpoints, `bayes-rbfn fit --resume`.

What is proved:
* the one NUTS loop (bayes_rbfn.infer.sampler) returns NumPyro's own MCMC.run draws bit for bit, with or
  without a checkpoint and whatever the chunk size — so checkpointing changes nothing about the result;
* a `bayes-rbfn fit` process killed (SIGKILL) after its first saved chunk and resumed with `--resume`
  ends with the same inference.nc posterior, draw for draw, as a run that was never interrupted; so does
  an in-process Ctrl-C;
* a corrupt checkpoint (a flipped byte, a truncated manifest) and a foreign folder are refused with exit
  status 2 and a message, and are left exactly as they were.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from bayes_rbfn import build_model, cli, fit
from bayes_rbfn.infer import checkpoint
from bayes_rbfn.io import arviz_compat, netcdf

pytestmark = pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")

#: A small fit whose sampling takes long enough (hundreds of iterations) to be killed part-way.
RUN = [
    "--num-inducing",
    "6",
    "--chains",
    "2",
    "--warmup",
    "150",
    "--draws",
    "150",
    "--checkpoint-every",
    "10",
]


def write_data(path: Path, n: int = 40, seed: int = 1) -> Path:
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.0, 6.0, n))
    y = np.sin(x) + 0.2 * rng.normal(size=n)
    path.write_text("t,v\n" + "".join(f"{a:.17g},{b:.17g}\n" for a, b in zip(x, y, strict=True)))
    return path


def fit_argv(csv: Path, out: Path) -> list[str]:
    return ["fit", str(csv), "--x", "t", "--y", "v", *RUN, "--no-plots", "--quiet", "--out", str(out)]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file below ``folder`` with the SHA-256 of its content."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def interrupt_after_checkpoint(monkeypatch, count: int):
    """Make the ``count``-th checkpoint raise KeyboardInterrupt once it is saved (Ctrl-C right after it);
    returns the real manifest writer, to restore it."""
    write_manifest = checkpoint.write_manifest
    calls = []

    def write_then_interrupt(*args, **kwargs):
        write_manifest(*args, **kwargs)
        calls.append(1)
        if len(calls) == count:
            raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "write_manifest", write_then_interrupt)
    return write_manifest


def listed_state(sampler: Path) -> str:
    """The sampler-state file the checkpoint's manifest lists (a stale one may lie beside it)."""
    files = json.loads((sampler / checkpoint.CHECKPOINT_FILE).read_text())["files"]
    return next(name for name in files if name.startswith("state-"))


def assert_same_posterior(a: Path, b: Path) -> None:
    post_a = arviz_compat.read_netcdf(a / "inference.nc").posterior
    post_b = arviz_compat.read_netcdf(b / "inference.nc").posterior
    assert set(post_a.data_vars) == set(post_b.data_vars)
    for name in post_a.data_vars:
        np.testing.assert_array_equal(post_a[name].values, post_b[name].values, err_msg=name)


def run_bayes_rbfn(argv: list[str]) -> subprocess.CompletedProcess:
    """``python -m bayes_rbfn ARGV`` in a fresh process (the real entry point: one JAX device per chain)."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, "-m", "bayes_rbfn", *argv], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The reference: the same fit never interrupted, in a process of its own (as a user runs it)."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    csv = write_data(folder / "data.csv")
    out = folder / "res"
    run_bayes_rbfn(fit_argv(csv, out))
    assert not (folder / "res.partial").exists(), "the checkpoint folder is removed after a complete run"
    return csv, out


@pytest.fixture(scope="module")
def uninterrupted_here(uninterrupted, tmp_path_factory):
    """The same reference computed in this process: in-process runs get this process's JAX devices (the
    chains may be vectorised here and parallel in a fresh process), which changes the rounding."""
    csv, _ = uninterrupted
    out = tmp_path_factory.mktemp("uninterrupted_here") / "res"
    assert cli.main(fit_argv(csv, out)) == 0
    return csv, out


# --------------------------------------------------------------------------------------------------
# The chunked sampler is NumPyro's sampler


def numpyro_mcmc_reference(model, X, y, chains: int, chain_method: str, **options) -> tuple[dict, dict]:
    """NumPyro's own ``MCMC.run`` on the very model ``fit`` samples (``build_model``), with fit's default
    NUTS settings: the independent reference of the one NUTS loop."""
    from numpyro.infer import MCMC, NUTS, init_to_median

    problem = build_model(model, X, y, **options)
    kernel = NUTS(
        problem.model,
        target_accept_prob=0.8,
        dense_mass=True,
        max_tree_depth=10,
        init_strategy=init_to_median(num_samples=15),
    )
    mcmc = MCMC(
        kernel,
        num_warmup=30,
        num_samples=30,
        num_chains=chains,
        chain_method=chain_method,
        progress_bar=False,
        jit_model_args=True,
    )
    mcmc.run(
        jax.random.PRNGKey(0), *problem.args, extra_fields=("diverging", "num_steps", "potential_energy")
    )
    return mcmc.get_samples(group_by_chain=True), mcmc.get_extra_fields(group_by_chain=True)


@pytest.mark.parametrize(
    ("model", "chains", "chain_method", "whole"),
    [
        # one chain after the other (the default on a CPU), taking turns chunk by chunk with a checkpoint
        pytest.param("sor", 2, "sequential", True, id="sor-two-sequential-chains"),
        # the batched program (the default on an accelerator), on a model with weights: in chunks only (its
        # vmapped NUTS takes ~7 s to trace per program; the whole-run scan is the same loop, checked on sor)
        pytest.param("rbfn", 2, "vectorized", False, id="rbfn-two-vectorised-chains"),
    ],
)
def test_the_nuts_loop_equals_numpyro_mcmc_draw_for_draw(tmp_path, model, chains, chain_method, whole):
    """fit's NUTS loop gives NumPyro's MCMC.run draws bit for bit — without a checkpoint (the whole run in
    one compiled scan; sequential chains) and with chunks of 7 (warm-up cut mid-window); a finished
    checkpoint returns them again; the checkpoint of another run (other data) is refused and left as it
    was."""
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 5, 30))
    y = np.sin(X) + 0.1 * rng.normal(size=30)
    samples, extra = numpyro_mcmc_reference(model, X, y, chains, chain_method, num_inducing=6)
    options = dict(
        num_inducing=6,
        chains=chains,
        draws=30,
        warmup=30,
        progress=False,
        check_diagnostics=False,
        chain_method=chain_method,  # NumPyro's chains and ours: the same programs, the same rounding
        # fit's default dense_mass=None takes a dense mass matrix for these models (≤ 10 sampled values):
        # the reference's dense_mass=True
    )
    runs = {"no-checkpoint": fit(model, X, y, **options)} if whole else {}
    runs["chunks-of-7"] = fit(model, X, y, checkpoint=tmp_path / "c7", checkpoint_every=7, **options)
    compared = set(samples) & set(runs["chunks-of-7"].posterior.data_vars)
    assert {"lengthscale", "variance", "noise"} <= compared
    for run, idata in runs.items():
        for name in compared:
            np.testing.assert_array_equal(
                idata.posterior[name].values, samples[name], err_msg=f"{run}: {name}"
            )
        np.testing.assert_array_equal(idata.sample_stats["diverging"].values, extra["diverging"], err_msg=run)
        np.testing.assert_array_equal(idata.sample_stats["n_steps"].values, extra["num_steps"], err_msg=run)
        np.testing.assert_array_equal(
            idata.sample_stats["lp"].values, -extra["potential_energy"], err_msg=run
        )
    # a second call on a finished checkpoint of the same run samples nothing and returns the same draws
    again = fit(model, X, y, checkpoint=tmp_path / "c7", checkpoint_every=7, **options)
    np.testing.assert_array_equal(again.posterior["noise"].values, samples["noise"])
    # the same folder for other data: refused, untouched
    before = snapshot(tmp_path / "c7")
    with pytest.raises(checkpoint.CheckpointError, match="different run"):
        fit(model, X, y + 1.0, checkpoint=tmp_path / "c7", checkpoint_every=7, **options)
    assert snapshot(tmp_path / "c7") == before


def test_the_batched_loop_gives_each_chain_the_draws_of_its_own_run():
    """``chain_advance(kernel, batched=True)`` — SBC's loop: one step advances every chain, each on its own
    data — gives each chain the draws (to 1e-9) of the unbatched loop run on that chain's data alone, which
    for the first chain are NumPyro's MCMC.run draws (the loop itself is checked against MCMC.run draw for
    draw above)."""
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS, init_to_median

    from bayes_rbfn.infer.sampler import chain_advance, chain_init

    def model(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 2.0))
        s = numpyro.sample("s", dist.LogNormal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(mu, s).expand([y.shape[0]]).to_event(1), obs=y)

    warmup, draws = 15, 15
    rng = np.random.default_rng(3)
    ys = jax.numpy.asarray(rng.normal([[-1.0], [0.5], [2.0]], [[0.3], [1.0], [2.0]], size=(3, 12)))
    keys = jax.random.split(jax.random.PRNGKey(4), 3)
    kernel = NUTS(model, init_strategy=init_to_median(num_samples=15))
    init = chain_init(kernel, warmup)
    advance_all, advance_one = chain_advance(kernel, batched=True), chain_advance(kernel)

    @jax.jit  # as in SBC: one program, the initialisations vmapped, then the batched loop
    def batched_run(keys, ys):
        states = jax.vmap(lambda key, y: init(key, (y,)))(keys, ys)
        return advance_all(states, (ys,), warmup + draws)[1]  # leaves (iterations, chains, ...)

    @jax.jit
    def single_run(key, y):
        return advance_one(init(key, (y,)), (y,), warmup + draws)[1]  # leaves (iterations, ...)

    run = batched_run(keys, ys)
    for chain in range(3):
        alone = single_run(keys[chain], ys[chain])
        for name in ("mu", "s"):
            np.testing.assert_allclose(run["z"][name][:, chain], alone["z"][name], rtol=1e-9, err_msg=name)
        np.testing.assert_allclose(run["potential_energy"][:, chain], alone["potential_energy"], rtol=1e-9)
    mcmc = MCMC(
        NUTS(model, init_strategy=init_to_median(num_samples=15)),
        num_warmup=warmup,
        num_samples=draws,
        progress_bar=False,
    )
    mcmc.run(keys[0], ys[0], extra_fields=("potential_energy",))
    np.testing.assert_allclose(run["z"]["mu"][warmup:, 0], mcmc.get_samples()["mu"], rtol=1e-9)
    np.testing.assert_allclose(np.exp(run["z"]["s"][warmup:, 0]), mcmc.get_samples()["s"], rtol=1e-9)
    np.testing.assert_allclose(
        run["potential_energy"][warmup:, 0], mcmc.get_extra_fields()["potential_energy"], rtol=1e-9
    )


# --------------------------------------------------------------------------------------------------
# The command line: kill, Ctrl-C, resume


def test_killed_fit_resumes_to_the_uninterrupted_result(uninterrupted, tmp_path):
    csv, reference = uninterrupted
    out = tmp_path / "res"
    manifest = tmp_path / "res.partial" / "sampler" / checkpoint.CHECKPOINT_FILE
    proc = subprocess.Popen(
        [sys.executable, "-m", "bayes_rbfn", *fit_argv(csv, out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    deadline = time.monotonic() + 240
    try:
        while not manifest.is_file():
            assert proc.poll() is None, f"the fit ended before its first checkpoint: {proc.stderr.read()!r}"
            assert time.monotonic() < deadline, "no checkpoint within 240 s"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    done = json.loads(manifest.read_text())["iterations_done"]
    assert 10 <= done < 300, f"killed after {done} iterations: not part-way"
    assert not out.exists()

    run_bayes_rbfn(["fit", "--resume", str(out), "--quiet"])
    assert_same_posterior(out, reference)
    assert not (tmp_path / "res.partial").exists()


def test_ctrl_c_keeps_the_checkpoint_and_resume_finishes(uninterrupted_here, tmp_path, capsys, monkeypatch):
    csv, reference = uninterrupted_here
    out = tmp_path / "res"
    write_manifest = interrupt_after_checkpoint(monkeypatch, 3)
    assert cli.main(fit_argv(csv, out)) == 130
    err = capsys.readouterr().err
    assert "30 of 300 iterations are saved" in err and f"--resume {out}" in err
    assert not out.exists() and (tmp_path / "res.partial").is_dir()

    monkeypatch.setattr(checkpoint, "write_manifest", write_manifest)
    # a new run into the same folder does not silently discard the saved one
    assert cli.main(fit_argv(csv, out)) == 2
    assert "--resume" in capsys.readouterr().err
    # --resume takes no other options
    assert cli.main(["fit", "--resume", str(out), "--draws", "5"]) == 2
    assert "takes no other option" in capsys.readouterr().err

    assert cli.main(["fit", "--resume", str(tmp_path / "res.partial"), "--quiet"]) == 0
    assert_same_posterior(out, reference)


def test_corrupt_checkpoint_is_refused_and_left_untouched(uninterrupted, tmp_path, capsys, monkeypatch):
    csv, _ = uninterrupted
    out = tmp_path / "res"
    write_manifest = interrupt_after_checkpoint(monkeypatch, 2)
    assert cli.main(fit_argv(csv, out)) == 130
    monkeypatch.setattr(checkpoint, "write_manifest", write_manifest)
    sampler = tmp_path / "res.partial" / "sampler"
    manifest = sampler / checkpoint.CHECKPOINT_FILE
    state = sampler / listed_state(sampler)
    intact = {path: path.read_bytes() for path in (manifest, state)}

    def flip_a_byte():
        data = bytearray(intact[state])
        data[len(data) // 2] ^= 0xFF
        state.write_bytes(bytes(data))

    damages = {
        "flipped-byte": flip_a_byte,
        "truncated-manifest": lambda: manifest.write_bytes(intact[manifest][:40]),
        "missing-state": state.unlink,
    }
    capsys.readouterr()
    for name, damage in damages.items():
        damage()
        before = snapshot(tmp_path)
        assert cli.main(["fit", "--resume", str(out)]) == 2, name
        err = capsys.readouterr().err
        assert "cannot continue" in err and ("corrupt" in err or "missing" in err), (name, err)
        assert "Traceback" not in err
        assert snapshot(tmp_path) == before, name
        for path, content in intact.items():
            path.write_bytes(content)


@pytest.mark.parametrize("kind", ["empty-folder", "other-files", "foreign-record", "no-such-folder"])
def test_foreign_folder_is_refused_and_left_untouched(tmp_path, capsys, kind):
    folder = tmp_path / "results"
    if kind != "no-such-folder":
        folder.mkdir()
    if kind == "other-files":
        (folder / "notes.txt").write_text("mine")
        (folder / "inference.nc").write_bytes(b"\x89HDF")
    elif kind == "foreign-record":
        (folder / "run.json").write_text(json.dumps({"format": "something-else", "argv": ["fit"]}))
    before = snapshot(tmp_path)
    assert cli.main(["fit", "--resume", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bayes-rbfn: error: --resume") and "Traceback" not in err
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------------------------------
# Faults after start-up: a full disk, a crash; resuming from elsewhere


def hidden_temporaries(folder: Path) -> list[str]:
    """Hidden temporary files or folders (``.NAME.tmp-*``, ``.NAME.old-*``) anywhere below ``folder``."""
    return sorted(
        str(p.relative_to(folder)) for p in folder.rglob(".*") if ".tmp-" in p.name or ".old-" in p.name
    )


def disk_full_after_checkpoint(monkeypatch, count: int):
    """The ``count``-th checkpoint fails as a full disk does: its manifest's temporary file is written, and
    moving it into place raises ENOSPC (inside the real writer, whose clean-up runs); returns the real
    manifest writer, to restore it."""
    from bayes_rbfn.io import output

    write_manifest = checkpoint.write_manifest
    calls = []

    def no_space(tmp_path, path):
        assert Path(tmp_path).is_file()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    def write_or_fail(*args, **kwargs):
        calls.append(1)
        with monkeypatch.context() as patch:
            if len(calls) == count:
                patch.setattr(output, "atomic_replace", no_space)
            write_manifest(*args, **kwargs)

    monkeypatch.setattr(checkpoint, "write_manifest", write_or_fail)
    return write_manifest


def test_full_disk_keeps_the_sampling_for_resume(uninterrupted_here, tmp_path, capsys, monkeypatch):
    """ENOSPC while saving a checkpoint, then while writing the results: exit 74 with one line that says
    what is kept, the .partial kept, no hidden temporaries; --resume (from another directory, with the data
    path saved relative to where the run was typed) ends with the uninterrupted posterior."""
    csv, reference = uninterrupted_here
    out = tmp_path / "res"

    def one_error(expected: str) -> str:
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("bayes-rbfn: error: ")]
        assert len(errors) == 1 and "Traceback" not in err, err
        assert "No space left on device" in errors[0] and expected in errors[0], errors[0]
        assert f"--resume {out}" in errors[0]
        assert not out.exists() and (tmp_path / "res.partial").is_dir()
        assert hidden_temporaries(tmp_path) == [], hidden_temporaries(tmp_path)
        return errors[0]

    write_manifest = disk_full_after_checkpoint(monkeypatch, 4)
    monkeypatch.chdir(csv.parent)  # the data path is typed relative to here
    argv = fit_argv(Path(csv.name), out)
    assert cli.main(argv) == 74
    one_error("30 of 300 iterations are saved")
    monkeypatch.setattr(checkpoint, "write_manifest", write_manifest)

    def full(idata, filename):
        Path(filename).write_bytes(b"\x89HDF half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(filename))

    with monkeypatch.context() as patch:
        patch.setattr(netcdf, "write_inference_data", full)
        assert cli.main(["fit", "--resume", str(out), "--quiet"]) == 74
        one_error("300 of 300 iterations are saved")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert cli.main(["fit", "--resume", str(out), "--quiet"]) == 0
    assert_same_posterior(out, reference)
    assert hidden_temporaries(tmp_path) == [] and not (tmp_path / "res.partial").exists()


def test_a_crash_before_the_first_checkpoint_does_not_block_a_rerun(
    uninterrupted_here, tmp_path, capsys, monkeypatch
):
    """A run that dies after start-up with nothing saved leaves no .partial that a rerun would trip on."""
    import bayes_rbfn.infer.fitting

    csv, reference = uninterrupted_here
    out = tmp_path / "res"

    def crash(*args, **kwargs):
        raise MemoryError("simulated: the machine ran out of memory while compiling")

    monkeypatch.setattr(bayes_rbfn.infer.fitting, "fit", crash)
    with pytest.raises(MemoryError):
        cli.main(fit_argv(csv, out))
    assert not (tmp_path / "res.partial").exists() and not out.exists()
    # a .partial that a killed run left before its first checkpoint is removed by the rerun, with a note
    (tmp_path / "res.partial").mkdir()
    record = {"format": "bayes_rbfn.fit-run", "version": 1, "argv": fit_argv(csv, out), "out": str(out)}
    (tmp_path / "res.partial" / "run.json").write_text(json.dumps(record))
    assert cli.main(["fit", "--resume", str(out)]) == 2
    assert "nothing to continue; run the same fit again without --resume" in capsys.readouterr().err
    # the rerun removes it (with a note) and runs; its sampling is stood in for by the reference's draws
    monkeypatch.setattr(
        bayes_rbfn.infer.fitting, "fit", lambda *a, **k: arviz_compat.read_netcdf(reference / "inference.nc")
    )
    assert cli.main([a for a in fit_argv(csv, out) if a != "--quiet"]) == 0
    assert (
        f"removed {tmp_path / 'res.partial'}: its run stopped before saving any iteration"
        in capsys.readouterr().err
    )
    assert (out / "inference.nc").is_file() and not (tmp_path / "res.partial").exists()


def test_a_moved_project_resumes_and_a_filled_output_folder_gets_advice_that_works(
    tmp_path, capsys, monkeypatch
):
    """run.json records its paths relative to the folder holding OUT and OUT.partial, so a project folder
    (data, OUT.partial, the command typed inside it) that moved resumes from its new place. Before that,
    an output folder filled meanwhile is refused, untouched, with advice that --resume can follow (never
    --overwrite, which --resume refuses)."""
    project = tmp_path / "project"
    project.mkdir()
    write_data(project / "data.csv", n=30)
    monkeypatch.chdir(project)
    tiny = ["--num-inducing", "5", "--chains", "1", "--warmup", "10", "--draws", "10"]
    argv = ["fit", "data.csv", "--x", "t", "--y", "v", *tiny, "--checkpoint-every", "5", "--no-plots"]
    argv += ["--quiet", "--out", "res"]
    write_manifest = interrupt_after_checkpoint(monkeypatch, 1)
    assert cli.main(argv) == 130
    monkeypatch.setattr(checkpoint, "write_manifest", write_manifest)
    capsys.readouterr()
    record = json.loads((project / "res.partial" / "run.json").read_text())
    assert (record["out"], record["cwd"]) == ("res", ".")

    (project / "res").mkdir()
    (project / "res" / "notes.txt").write_text("mine")
    before = snapshot(project)
    assert cli.main(["fit", "--resume", "res"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("bayes-rbfn: error: --resume res: the output folder") and "--overwrite" not in line
    assert "is not empty" in line and "move" in line
    assert "then run 'bayes-rbfn fit --resume res' again" in line
    assert snapshot(project) == before
    shutil.rmtree(project / "res")

    moved = tmp_path / "elsewhere" / "project moved"
    moved.parent.mkdir()
    project.rename(moved)
    monkeypatch.chdir(moved)
    assert cli.main(["fit", "--resume", "res"]) == 0, capsys.readouterr().err
    assert arviz_compat.read_netcdf(moved / "res" / "inference.nc").posterior.sizes["draw"] == 10
    assert sorted(p.name for p in moved.iterdir()) == ["data.csv", "res"]


# --------------------------------------------------------------------------------------------------
# An edited manifest, a full disk while inference.nc is written, SIGTERM and repeated Ctrl-C

#: A fit of one chain, 10 warm-up iterations and 10 draws, checkpointed after every iteration.
SHORT = ["--num-inducing", "6", "--chains", "1", "--warmup", "10", "--draws", "10", "--checkpoint-every", "1"]


def short_argv(csv: Path, out: Path) -> list[str]:
    return ["fit", str(csv), "--x", "t", "--y", "v", *SHORT, "--no-plots", "--quiet", "--out", str(out)]


def one_error_line(err: str) -> str:
    errors = [line for line in err.splitlines() if line.startswith("bayes-rbfn: error: ")]
    assert len(errors) == 1 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    return errors[0]


def test_an_edited_manifest_is_refused_by_resume(tmp_path, capsys, monkeypatch):
    """`--resume` of a checkpoint whose manifest leaves out a chunk, names a state of another iteration
    than the one inside it, or lists (with its hash) a chunk edited to hold two chains, exits 2 with one
    line and changes nothing (the cases: test_checkpoint.py)."""
    csv, out = write_data(tmp_path / "data.csv"), tmp_path / "res"
    write_manifest = interrupt_after_checkpoint(monkeypatch, 15)
    assert cli.main(short_argv(csv, out)) == 130
    monkeypatch.setattr(checkpoint, "write_manifest", write_manifest)
    sampler = tmp_path / "res.partial" / "sampler"
    manifest = sampler / checkpoint.CHECKPOINT_FILE
    intact = manifest.read_text()
    chunk = sampler / "chunk-0000013.npz"
    intact_chunk = chunk.read_bytes()

    def chunk_of_two_chains(record):  # its hash recomputed: only its shape tells
        with np.load(chunk) as arrays:
            doubled = {key: np.concatenate([arrays[key]] * 2) for key in arrays.files}
        np.savez(chunk, **doubled)
        record["files"][chunk.name] = hashlib.sha256(chunk.read_bytes()).hexdigest()

    def one_chunk_unlisted(record):
        record["files"].pop("chunk-0000013.npz")

    def renamed_to_13(record):  # consistent names, but the state inside is after iteration 15
        (sampler / "state-0000015.npz").rename(sampler / "state-0000013.npz")
        record["files"]["state-0000013.npz"] = record["files"].pop("state-0000015.npz")
        record["iterations_done"] = 13
        del record["files"]["chunk-0000014.npz"], record["files"]["chunk-0000015.npz"]

    capsys.readouterr()
    for change, message in [
        (chunk_of_two_chains, "chunk-0000013.npz holds the draws of 2 chains, but the run has 1"),
        (one_chunk_unlisted, "no draws are listed for iteration 13"),
        (renamed_to_13, "that state is after iteration 15"),  # last: it renames the state file
    ]:
        record = json.loads(intact)
        chunk.write_bytes(intact_chunk)
        change(record)
        manifest.write_text(json.dumps(record))
        before = snapshot(tmp_path)
        assert cli.main(["fit", "--resume", str(out), "--quiet"]) == 2, change.__name__
        line = one_error_line(capsys.readouterr().err)
        assert "is corrupt" in line and message in line, line
        assert snapshot(tmp_path) == before and not out.exists()


def test_the_disk_space_check_counts_the_checkpoint(tmp_path, capsys, monkeypatch):
    """With 4 MiB free, 200 draws fit (about 3.5 MiB) when checkpointed every 1,000 iterations, but not
    with a checkpoint file per iteration (4.3 MiB): refused before sampling, exit 2, nothing written."""
    import bayes_rbfn.infer.fitting
    from bayes_rbfn.io import output

    csv = write_data(tmp_path / "data.csv")
    monkeypatch.setattr(output, "free_space", lambda out: (4 * 2**20, tmp_path))

    def sampled(*args, **kwargs):
        raise MemoryError("stands in for the sampling: the checks before it passed")

    monkeypatch.setattr(bayes_rbfn.infer.fitting, "fit", sampled)
    argv = ["fit", str(csv), "--x", "t", "--y", "v", "--chains", "1", "--warmup", "10", "--draws", "200"]
    argv += ["--no-plots", "--quiet", "--out", str(tmp_path / "res")]
    with pytest.raises(MemoryError, match="checks before it passed"):
        cli.main([*argv, "--checkpoint-every", "1000"])
    assert cli.main([*argv, "--checkpoint-every", "1"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "disk space" in line and "with the checkpoint" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]


def test_inference_data_is_written_as_arviz_writes_it_and_a_full_disk_is_an_oserror(tmp_path):
    """write_inference_data builds the netCDF file in memory (HDF5 never meets a full disk: that crashed the
    process at exit) and writes it with plain I/O: the same groups and attributes as ArviZ's own file, and
    on a full disk (/dev/full) an OSError naming the file, which the command line turns into status 74.
    ArviZ's own file: InferenceData.to_netcdf on ArviZ 0.x, xarray's DataTree.to_netcdf on 1.x."""
    rng = np.random.default_rng(0)
    idata = arviz_compat.from_groups(
        {
            "posterior": {"noise": rng.normal(size=(2, 5))},
            "sample_stats": {"diverging": rng.normal(size=(2, 5)) > 1},
            "observed_data": {"y": rng.normal(size=7)},
        }
    )
    idata.attrs = {"bayes_rbfn_data": "test"}
    posterior = arviz_compat.group_dataset(idata, "posterior")
    arviz_compat.add_groups(idata, {"posterior": posterior.assign_attrs(bayes_rbfn_model="sor")})
    netcdf.write_inference_data(idata, tmp_path / "ours.nc")
    idata.to_netcdf(str(tmp_path / "arviz.nc"))
    ours = arviz_compat.read_netcdf(tmp_path / "ours.nc")
    theirs = arviz_compat.read_netcdf(tmp_path / "arviz.nc")
    names = arviz_compat.groups(ours)
    assert names == arviz_compat.groups(theirs) == ("posterior", "sample_stats", "observed_data")
    assert ours.attrs == theirs.attrs == {"bayes_rbfn_data": "test"}
    assert ours.posterior.attrs["bayes_rbfn_model"] == "sor"
    assert all(
        arviz_compat.group_dataset(ours, g).identical(arviz_compat.group_dataset(theirs, g)) for g in names
    )
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    with pytest.raises(OSError) as raised:
        netcdf.write_inference_data(idata, "/dev/full")
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == "/dev/full"


def can_mount_tmpfs(folder: Path) -> bool:
    if os.geteuid() != 0:
        return False
    folder.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)]).returncode == 0


#: `python -c`: fill the disk of the output folder but 64 KiB just before inference.nc is written, then
#: run the command line (a real ENOSPC inside HDF5).
FILL_THEN_FIT = """
import os, sys
from bayes_rbfn.io import netcdf
write = netcdf.write_inference_data
def fill_then_write(idata, path):
    disk = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    st = os.statvfs(disk)
    with open(os.path.join(disk, "ballast"), "wb") as fh:
        fh.write(bytes(max(0, st.f_bavail * st.f_frsize - 65536)))
    write(idata, path)
netcdf.write_inference_data = fill_then_write
from bayes_rbfn.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_full_disk_inside_hdf5_exits_74_and_keeps_the_checkpoint(tmp_path):
    """A real full disk (a tmpfs) while HDF5 writes inference.nc: exit 74 with one line, the checkpoint
    kept for --resume, and no native crash as the process ends."""
    disk = tmp_path / "disk"
    if not can_mount_tmpfs(disk):
        pytest.skip("needs root and a tmpfs mount (test_an_h5py_error_with_an_errno_becomes_an_oserror)")
    try:
        csv, out = write_data(disk / "data.csv"), disk / "res"
        proc = subprocess.run(
            [sys.executable, "-c", FILL_THEN_FIT, *short_argv(csv, out)],
            capture_output=True,
            text=True,
            env={**os.environ, "MPLBACKEND": "Agg"},
            timeout=300,
        )
        assert proc.returncode == 74, (proc.returncode, proc.stderr[-3000:])
        line = one_error_line(proc.stderr)
        assert "No space left on device" in line and "20 of 20 iterations are saved" in line, line
        assert f"--resume {out}" in line and not out.exists()
        assert checkpoint.read_checkpoint(disk / "res.partial" / "sampler").iterations_done == 20
    finally:
        subprocess.run(["umount", str(disk)])


def one_chain_argv(csv: Path, out: Path) -> list[str]:
    """:func:`fit_argv` with one chain (each of two processes compiles for one device)."""
    argv = fit_argv(csv, out)
    argv[argv.index("--chains") + 1] = "1"
    return argv


def test_sigterm_and_repeated_ctrl_c_end_a_fit_quietly(tmp_path):
    """SIGTERM ends a fit as Ctrl-C does, with exit status 143; Ctrl-C pressed again and again while the
    program exits (and SIGTERM after SIGTERM) is ignored: one line, no traceback, the sampling kept."""
    csv = write_data(tmp_path / "data.csv")
    procs = {}
    for name in ("SIGINT", "SIGTERM"):
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "bayes_rbfn", *one_chain_argv(csv, tmp_path / name)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "MPLBACKEND": "Agg"},
        )
    try:
        deadline = time.monotonic() + 240
        for name, proc in procs.items():
            manifest = tmp_path / f"{name}.partial" / "sampler" / checkpoint.CHECKPOINT_FILE
            while not manifest.is_file():
                assert proc.poll() is None, f"{name} ended before a checkpoint: {proc.stderr.read()!r}"
                assert time.monotonic() < deadline, "no checkpoint within 240 s"
                time.sleep(0.02)
        while any(proc.poll() is None for proc in procs.values()):  # until both have exited
            for name, proc in procs.items():
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(getattr(signal, name))
            assert time.monotonic() < deadline, "still running after the signals"
            time.sleep(0.05)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=60)
    for name, status in (("SIGINT", 130), ("SIGTERM", 143)):
        err = procs[name].stderr.read()
        assert procs[name].returncode == status, (name, procs[name].returncode, err[-3000:])
        line = one_error_line(err)
        assert line.startswith("bayes-rbfn: error: " + ("interrupted" if status == 130 else "terminated"))
        assert "iterations are saved" in line and f"--resume {tmp_path / name}" in line, line
        assert checkpoint.read_checkpoint(tmp_path / f"{name}.partial" / "sampler").iterations_done >= 10
