"""A checkpoint's manifest is checked field by field before any file is trusted: an
edited ``checkpoint.json`` — a moved ``iterations_done``, a missing field, a wrong type, a file that does
not belong to the run — is refused as corrupt, and the folder is left as it was. So is a manifest whose
chunks do not hold exactly the kept iterations up to iterations_done (a gap, an overlap, an extra chunk),
or whose sampler state holds another iteration than it says; such a checkpoint never resumes
to more, fewer or other draws."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

from bayes_rbfn import fit
from bayes_rbfn.infer import checkpoint
from bayes_rbfn.infer.checkpoint import CHECKPOINT_FILE, Checkpoint, CheckpointError, read_checkpoint


@pytest.fixture
def saved(tmp_path):
    """A checkpoint of a 10-iteration run saved after iterations 4 and 7 (draws kept from the second)."""
    folder = tmp_path / "ckpt"
    store = Checkpoint(folder, {"X": np.arange(3.0)}, {"draws": 6}, total=10)
    state = {"position": np.zeros(2)}
    done, state = store.resume(state)
    assert done == 0
    store.save(4, state, None)
    store.save(7, state, {"z": {"a": np.ones((1, 3))}, "diverging": np.zeros((1, 3), bool)})
    return folder


def edit(folder, change) -> None:
    path = folder / CHECKPOINT_FILE
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def test_an_untouched_checkpoint_reads_back(saved):
    info = read_checkpoint(saved)
    assert (info.iterations_done, info.total_iterations) == (7, 10)
    assert set(info.files) == {"state-0000007.npz", "chunk-0000007.npz"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(lambda r: r.update(iterations_done=9), "no sampler state listed", id="done-moved-on"),
        pytest.param(lambda r: r.update(iterations_done=3), "does not belong", id="done-moved-back"),
        pytest.param(lambda r: r.update(iterations_done=11), "not within", id="done-past-total"),
        pytest.param(lambda r: r.update(iterations_done=-1), "not within", id="done-negative"),
        pytest.param(lambda r: r.update(iterations_done="7"), "not a whole number", id="done-a-string"),
        pytest.param(lambda r: r.update(iterations_done=7.0), "not a whole number", id="done-a-float"),
        pytest.param(lambda r: r.update(total_iterations=True), "not a whole number", id="total-a-bool"),
        pytest.param(lambda r: r.pop("files"), "missing field 'files'", id="files-missing"),
        pytest.param(lambda r: r.pop("fingerprint"), "missing field 'fingerprint'", id="fingerprint-missing"),
        pytest.param(lambda r: r.update(files=[]), "not an object", id="files-a-list"),
        pytest.param(
            lambda r: r["files"].update({"state-0000007.npz": "0" * 12}), "no SHA-256", id="short-digest"
        ),
        pytest.param(
            lambda r: r["files"].update({"notes.txt": "0" * 64}), "does not belong", id="foreign-file"
        ),
    ],
)
def test_an_edited_manifest_is_refused_as_corrupt_and_left_alone(saved, change, message):
    edit(saved, change)
    before = {p.name: p.read_bytes() for p in saved.iterdir()}
    with pytest.raises(CheckpointError, match=f"is corrupt.*{message}"):
        read_checkpoint(saved)
    assert {p.name: p.read_bytes() for p in saved.iterdir()} == before


# --------------------------------------------------------------------------------------------------
# The chunks listed must hold exactly the kept iterations, and the state must be that of iterations_done


#: A real fit's checkpoint: one chain, 10 warm-up iterations and 10 draws, a chunk per iteration.
FIT = dict(
    num_inducing=6, chains=1, warmup=10, draws=10, checkpoint_every=1, progress=False, check_diagnostics=False
)


def fit_data():
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0.0, 5.0, 30))
    return X, np.sin(X) + 0.1 * rng.normal(size=30)


@pytest.fixture(scope="module")
def interrupted_fit(tmp_path_factory):
    """The checkpoint of a fit stopped (KeyboardInterrupt) after iteration 15: the sampler state after it
    and the draws of iterations 11–15, one chunk file each."""

    folder = tmp_path_factory.mktemp("interrupted") / "ckpt"
    write_manifest, calls = checkpoint.write_manifest, []

    def write_then_interrupt(*args, **kwargs):
        write_manifest(*args, **kwargs)
        calls.append(1)
        if len(calls) == 15:
            raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint, "write_manifest", write_then_interrupt)
        with pytest.raises(KeyboardInterrupt):
            fit("sor", *fit_data(), checkpoint=folder, **FIT)
    assert read_checkpoint(folder).iterations_done == 15
    return folder


def digest(path) -> str:

    return hashlib.sha256(path.read_bytes()).hexdigest()


def unlist(*names):
    def change(folder, record):
        for name in names:
            record["files"].pop(name)

    return change


def move_done_to(done: int, unlisted=()):
    """iterations_done set to ``done``, the state file renamed to match (and in the manifest)."""

    def change(folder, record):
        (folder / "state-0000015.npz").rename(folder / f"state-{done:07d}.npz")
        record["files"][f"state-{done:07d}.npz"] = record["files"].pop("state-0000015.npz")
        record["iterations_done"] = done
        for name in unlisted:
            record["files"].pop(name)
            (folder / name).unlink()

    return change


def list_copy(source: str, name: str):
    def change(folder, record):
        (folder / name).write_bytes((folder / source).read_bytes())
        record["files"][name] = digest(folder / name)

    return change


def merge_13_into_14(folder, record):
    """chunk-0000014 replaced by a chunk of iterations 13–14 (with its hash): 13 is listed twice."""
    with np.load(folder / "chunk-0000013.npz") as a, np.load(folder / "chunk-0000014.npz") as b:
        merged = {key: np.concatenate([a[key], b[key]], axis=1) for key in a.files}
    np.savez(folder / "chunk-0000014.npz", **merged)
    record["files"]["chunk-0000014.npz"] = digest(folder / "chunk-0000014.npz")


def edit_chunk(name: str, change):
    """The chunk file ``name`` rewritten with ``change(arrays)`` and listed with its new SHA-256."""

    def edit(folder, record):
        with np.load(folder / name) as chunk:
            arrays = change({key: chunk[key] for key in chunk.files})
        np.savez(folder / name, **arrays)
        record["files"][name] = digest(folder / name)

    return edit


def two_chains(arrays):
    """Every array with its chain repeated: the draws of two chains in a run of one."""
    return {key: np.concatenate([a, a], axis=0) for key, a in arrays.items()}


def rename_chunk(old: str, new: str):
    def change(folder, record):
        (folder / old).rename(folder / new)
        record["files"][new] = record["files"].pop(old)

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            unlist("chunk-0000013.npz"), "no draws are listed for iteration 13", id="one-chunk-unlisted"
        ),
        pytest.param(
            unlist(*(f"chunk-{k:07d}.npz" for k in range(11, 16))),
            "no draws are listed for iterations 11–15",
            id="every-chunk-unlisted",
        ),
        pytest.param(
            move_done_to(20), "no draws are listed for iterations 16–20", id="done-moved-to-the-end"
        ),
        pytest.param(
            list_copy("chunk-0000015.npz", "chunk-0000010.npz"), "ends in the warm-up", id="warm-up-copy"
        ),
        pytest.param(merge_13_into_14, "chunk-0000014.npz repeats iteration 13", id="overlapping-chunks"),
        pytest.param(rename_chunk("chunk-0000015.npz", "chunk-15.npz"), "not named as", id="renamed-chunk"),
        pytest.param(
            list_copy("state-0000015.npz", "state-0000014.npz"), "listed besides", id="second-state"
        ),
        pytest.param(
            edit_chunk("chunk-0000013.npz", two_chains),
            "chunk-0000013.npz holds the draws of 2 chains, but the run has 1",
            id="two-chains-in-one-chunk",
        ),
        pytest.param(
            edit_chunk("chunk-0000011.npz", two_chains),
            "chunk-0000011.npz holds the draws of 2 chains, but the run has 1",
            id="two-chains-in-the-first-chunk",
        ),
        pytest.param(
            edit_chunk("chunk-0000012.npz", lambda arrays: dict(list(arrays.items())[1:])),
            "chunk-0000012.npz holds other arrays, shapes or types than chunk-0000011.npz",
            id="an-array-left-out",
        ),
        pytest.param(
            edit_chunk(
                "chunk-0000014.npz", lambda arrays: {k: a.astype(np.float32) for k, a in arrays.items()}
            ),
            "chunk-0000014.npz holds other arrays, shapes or types than chunk-0000011.npz",
            id="another-dtype",
        ),
        pytest.param(
            edit_chunk("chunk-0000015.npz", lambda arrays: {k: a[:, :, None] for k, a in arrays.items()}),
            "chunk-0000015.npz holds other arrays, shapes or types than chunk-0000011.npz",
            id="another-shape",
        ),
        pytest.param(
            move_done_to(13, unlisted=("chunk-0000014.npz", "chunk-0000015.npz")),
            "that state is after iteration 15",
            id="renamed-consistently-to-13",
        ),
    ],
)
def test_a_manifest_that_does_not_match_its_draws_is_refused(interrupted_fit, tmp_path, change, message):
    """Resuming a real fit's checkpoint whose manifest lists a gap, an overlap, an extra chunk or another
    iteration than its sampler state holds, or a chunk (with its hash) of another number of chains or
    other arrays than the others, is refused as corrupt — never a run with more, fewer or other draws,
    nor a failure to join them — and the folder is left as it was."""
    folder = tmp_path / "ckpt"
    shutil.copytree(interrupted_fit, folder)
    record = json.loads((folder / CHECKPOINT_FILE).read_text())
    change(folder, record)
    (folder / CHECKPOINT_FILE).write_text(json.dumps(record))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(CheckpointError, match=f"is corrupt.*{message}"):
        fit("sor", *fit_data(), checkpoint=folder, **FIT)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
