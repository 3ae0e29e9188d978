"""A checkpoint's manifest is checked field by field before any file is trusted (issue 19, class 7): an
edited ``checkpoint.json`` — a moved ``iterations_done``, a missing field, a wrong type, a file that does
not belong to the run — is refused as corrupt, and the folder is left as it was."""

from __future__ import annotations

import json

import numpy as np
import pytest

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
