"""The checkpoint folder of a NUTS run: long runs that survive Ctrl-C, a kill or a crash.

The one NUTS loop (:func:`bayes_rbfn.infer.sampler.run_chains`) runs in chunks of iterations and, given a
folder, saves after every chunk through a :class:`Checkpoint` the draws the chunk produced and the complete
sampler state (position, gradient, step size, mass matrix, adaptation windows, PRNG key). Warm-up is
chunked too: NumPyro's adaptation schedule lives in the state (its iteration counter), so a run cut
anywhere continues exactly where it stopped.

Resuming is exact. Every iteration is the same compiled step applied to the state the previous one left,
and the PRNG key travels inside that state, so the sequence of states does not depend on where the run
was cut: a run interrupted after any chunk and resumed from its checkpoint returns the same draws, bit
for bit, as the run that was never interrupted.

The checkpoint folder::

    checkpoint.json       format tag, the run's fingerprint, progress, and the SHA-256 of every file
    state-<k>.npz         sampler state after k iterations (leaves of the HMCState pytree)
    chunk-<k>.npz         the post-warm-up draws and sample statistics of the chunk ending at iteration k

Every file is written to a hidden sibling and renamed into place (:func:`bayes_rbfn.io.output.
atomic_write_bytes`); ``checkpoint.json`` is replaced last, so it names only files that are complete.
On resume the folder is checked before anything is loaded — the format tag (a foreign folder), the JSON
and every file's hash (a corrupt one), and the fingerprint of data, priors and sampler settings (a
different run) — and refused with :class:`CheckpointError` otherwise, without being changed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayes_rbfn.gp.validation import is_concrete
from bayes_rbfn.infer.processes import gathered_digest, writes_files
from bayes_rbfn.io.output import atomic_write_bytes

__all__ = [
    "CHECKPOINT_FILE",
    "DEFAULT_CHECKPOINT_EVERY",
    "FILE_OVERHEAD",
    "Checkpoint",
    "CheckpointError",
    "CheckpointInfo",
    "checkpoint_bytes",
    "fingerprint",
    "read_checkpoint",
    "write_manifest",
]

CHECKPOINT_FILE = "checkpoint.json"
FORMAT = "bayes_rbfn.infer.checkpoint"
VERSION = 1
#: Iterations per chunk (warm-up and draws alike).
DEFAULT_CHECKPOINT_EVERY = 50


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be resumed: missing, foreign, corrupt, or from a different run."""


@dataclass(frozen=True)
class CheckpointInfo:
    """What ``checkpoint.json`` records: the run's fingerprint and how far it got."""

    folder: Path
    fingerprint: dict
    iterations_done: int
    total_iterations: int
    files: dict


def fingerprint(arrays: Any, settings: Mapping[str, Any]) -> dict:
    """A record of a run: the SHA-256 of every array leaf of ``arrays`` and the JSON-able ``settings``.

    The arrays are the data and prior parameters, in pytree order. Two runs with equal fingerprints compute
    the same thing.
    """
    digest = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(arrays):
        if is_concrete(leaf):
            a = np.ascontiguousarray(np.asarray(leaf))
            digest.update(str((a.dtype.str, a.shape)).encode())
            digest.update(a.tobytes())
        else:  # rows spread over processes: each hashes its own, and the digests are combined in order
            digest.update(str((leaf.dtype.str, leaf.shape)).encode())
            digest.update(gathered_digest(leaf))
    return {"inputs_sha256": digest.hexdigest(), **json.loads(json.dumps(dict(settings), sort_keys=True))}


#: Bytes a checkpoint file takes besides its numbers: a 4 KiB block of the file system, which also holds
#: the npz headers of the dozen or so arrays of a chunk file (2.4 KB for 1 iteration of a 1-chain fit).
FILE_OVERHEAD = 4096


def checkpoint_bytes(*, chains: int, draws: int, warmup: int, params: int, checkpoint_every: int) -> int:
    """Bytes on disk of a finished checkpoint folder, roughly from above.

    One chunk file per chunk that holds kept iterations (``params`` values and the
    :data:`~bayes_rbfn.infer.sampler.STAT_FIELDS` per draw and chain), two sampler states (the new one is
    written before the old one is removed; position, momentum, gradient and up to four dense
    ``params × params`` matrices per chain) and the manifest, each file with :data:`FILE_OVERHEAD`.
    """
    total = warmup + draws
    every = checkpoint_every
    chunk_files = total // every - warmup // every + (1 if total % every else 0)
    chunks = chunk_files * FILE_OVERHEAD + 8 * chains * draws * (params + 6)
    states = 2 * (FILE_OVERHEAD + 8 * chains * (4 * params * params + 8 * params + 32))
    manifest = FILE_OVERHEAD + 100 * (chunk_files + 1)
    return chunks + states + manifest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _save_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> str:
    """Write ``arrays`` to ``path`` (npz) atomically; returns the SHA-256 of what was written."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    data = buffer.getvalue()
    atomic_write_bytes(path, data)
    return hashlib.sha256(data).hexdigest()


def _manifest_problem(record: Mapping[str, Any]) -> str:
    """What is wrong with the fields of a manifest, or "" (its own fields, before any file is hashed)."""
    for field, kind in (
        ("fingerprint", dict),
        ("files", dict),
        ("iterations_done", int),
        ("total_iterations", int),
    ):
        if field not in record:
            return f"missing field {field!r}"
        value = record[field]
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"field {field!r} is not {'an object' if kind is dict else 'a whole number'}: {value!r}"
    done, total, files = record["iterations_done"], record["total_iterations"], record["files"]
    if not 0 <= done <= total or total < 1:
        return f"iterations_done {done} is not within 0..total_iterations {total}"
    for name, digest in files.items():
        if not (
            isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)
        ):
            return f"file {name!r} has no SHA-256"
        step = name.removeprefix("state-").removeprefix("chunk-").removesuffix(".npz")
        if name == step or not step.isdigit() or int(step) > done:
            return f"file {name!r} does not belong to a run at iteration {done}"
        if name != f"{name[:6]}{int(step):07d}.npz":
            return f"file {name!r} is not named as this program names its files"
    if done and f"state-{done:07d}.npz" not in files:
        return f"no sampler state listed for iteration {done}"
    states = sorted(n for n in files if n.startswith("state-") and n != f"state-{done:07d}.npz")
    if states:
        return f"{states[0]} is listed besides the sampler state of iteration {done}"
    return ""


def _kept_from(record: Mapping[str, Any]) -> int | str:
    """The first kept (post-warm-up) iteration of the run a manifest describes: ``total − draws + 1``.

    ``draws`` is the draws per chain its fingerprint records; a string says why the manifest does not tell.
    """
    total, draws = record["total_iterations"], record["fingerprint"].get("draws")
    if isinstance(draws, bool) or not isinstance(draws, int) or not 1 <= draws <= total:
        return f"its fingerprint records no number of draws within 1..{total}: {draws!r}"
    warmup = record["fingerprint"].get("warmup", total - draws)
    if warmup != total - draws:
        return f"warm-up {warmup!r} + draws {draws} is not total_iterations {total}"
    return total - draws + 1


def _chunk_arrays(path: Path) -> dict[str, tuple[tuple[int, ...], str]] | None:
    """The shape and dtype of every array in the chunk file ``path``, or None when it cannot be read."""
    try:
        with np.load(path) as chunk:
            return {key: (tuple(np.shape(chunk[key])), chunk[key].dtype.str) for key in chunk.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None


def _chunk_problem(name: str, arrays: Mapping[str, tuple[tuple[int, ...], str]] | None, chains: Any) -> str:
    """What is wrong with the arrays of one chunk file on their own, or "".

    Every array is (chains, iterations, ...) with the same chains and iterations; ``chains`` is the
    number the run's fingerprint records (not checked when it records none).
    """
    if not arrays or any(len(shape) < 2 or shape[1] < 1 for shape, _ in arrays.values()):
        return f"{name} holds no readable draws"
    counts = {shape[0] for shape, _ in arrays.values()}
    if len({shape[1] for shape, _ in arrays.values()}) > 1 or len(counts) > 1:
        return f"{name} holds arrays of different numbers of chains or iterations"
    if isinstance(chains, int) and not isinstance(chains, bool) and counts != {chains}:
        count = counts.pop()
        held = f"{count} {'chain' if count == 1 else 'chains'}"
        return f"{name} holds the draws of {held}, but the run has {chains}"
    return ""


def _coverage_problem(
    folder: Path, files: Mapping[str, str], done: int, kept_from: int, chains: Any = None
) -> str:
    """What is wrong with the chunks a manifest lists, or "".

    Together they must hold every kept iteration from ``kept_from`` to ``done`` once, in order, and
    nothing else (files already hashed); each must hold the same arrays, of ``chains`` chains (when the
    fingerprint records it), that differ only in their iterations, so that they join into one run.
    """
    chunks = sorted((int(n[6:13]), n) for n in files if n.startswith("chunk-"))
    expected = kept_from  # the first iteration the next chunk must start with
    first: tuple[str, dict] | None = None  # the first chunk and its arrays less their iterations
    for end, name in chunks:
        if end < kept_from:
            return f"{name} ends in the warm-up, whose iterations are not kept (draws start at {kept_from})"
        arrays = _chunk_arrays(folder / name)
        problem = _chunk_problem(name, arrays, chains)
        if problem or arrays is None:
            return problem
        length = next(iter(arrays.values()))[0][1]
        layout = {key: (shape[:1] + shape[2:], dtype) for key, (shape, dtype) in arrays.items()}
        if first is None:
            first = (name, layout)
        elif layout != first[1]:
            return f"{name} holds other arrays, shapes or types than {first[0]}"
        start = end - length + 1
        if start > expected:
            return f"no draws are listed for {_iterations(expected, start - 1)}"
        if start < expected:
            return f"{name} repeats {_iterations(start, min(end, expected - 1))}"
        expected = end + 1
    if expected <= done:
        return f"no draws are listed for {_iterations(expected, done)}"
    return ""


def _iterations(first: int, last: int) -> str:
    return f"iteration {first}" if first == last else f"iterations {first}–{last}"


def read_checkpoint(folder: str | os.PathLike[str]) -> CheckpointInfo:
    """Read and verify the checkpoint folder ``folder`` (nothing in it is changed).

    The chunks listed must hold every kept iteration — from ``total_iterations − draws + 1`` (the
    fingerprint records the draws per chain) to ``iterations_done`` — exactly once, with no gap, overlap
    or extra chunk, each the same arrays of the fingerprint's number of chains, and the one sampler state
    listed must be that of ``iterations_done``; the counter inside that state is compared on
    :meth:`Checkpoint.resume`.

    Raises:
        CheckpointError: no such folder, no ``checkpoint.json`` (not a checkpoint), a foreign or newer
            format, unreadable JSON, a manifest whose files do not match its progress (see above), or a
            listed file that is missing or whose SHA-256 differs (corrupt).
    """
    folder = Path(folder)
    manifest = folder / CHECKPOINT_FILE
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: no such folder")
    if not manifest.is_file():
        raise CheckpointError(f"{folder}: not a bayes_rbfn checkpoint (no {CHECKPOINT_FILE})")
    try:
        record = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{folder}: {CHECKPOINT_FILE} is corrupt ({err})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise CheckpointError(f"{folder}: {CHECKPOINT_FILE} is not a bayes_rbfn checkpoint")
    if record.get("version") != VERSION:
        raise CheckpointError(f"{folder}: checkpoint version {record.get('version')!r}, expected {VERSION}")
    problem = _manifest_problem(record)
    kept_from = _kept_from(record) if not problem else 0
    if isinstance(kept_from, str):
        problem = kept_from
    if problem:
        raise CheckpointError(f"{folder}: {CHECKPOINT_FILE} is corrupt ({problem})")
    files = dict(record["files"])
    info = CheckpointInfo(
        folder=folder,
        fingerprint=dict(record["fingerprint"]),
        iterations_done=record["iterations_done"],
        total_iterations=record["total_iterations"],
        files=files,
    )
    for name, expected in files.items():
        path = folder / name
        if Path(name).name != name or not path.is_file():
            raise CheckpointError(f"{folder}: checkpoint file {name} is missing")
        if _sha256(path) != expected:
            raise CheckpointError(f"{folder}: checkpoint file {name} is corrupt (its SHA-256 differs)")
    problem = _coverage_problem(
        folder, files, info.iterations_done, int(kept_from), info.fingerprint.get("chains")
    )
    if problem:
        raise CheckpointError(f"{folder}: {CHECKPOINT_FILE} is corrupt ({problem})")
    return info


def write_manifest(folder: Path, run_fingerprint: dict, done: int, total: int, files: dict) -> None:
    """Write the checkpoint's manifest atomically: the run's fingerprint, progress and files."""
    record = {
        "format": FORMAT,
        "version": VERSION,
        "fingerprint": run_fingerprint,
        "iterations_done": done,
        "total_iterations": total,
        "files": files,
    }
    atomic_write_bytes(folder / CHECKPOINT_FILE, json.dumps(record, indent=1).encode("utf-8"))


class Checkpoint:
    """The checkpoint folder of one run: where it stands, and the state and draws saved after each chunk.

    Args:
        folder: the folder (created when missing; must be empty, absent, or hold a checkpoint of this run).
        arrays: the run's array inputs (data and prior parameters), hashed into its fingerprint.
        settings: the run's JSON-able settings (sampler, model), part of its fingerprint.
        total: iterations of the whole run (warm-up and draws).
    """

    def __init__(self, folder: str | os.PathLike[str], arrays: Any, settings: Mapping[str, Any], total: int):
        """The checkpoint of one run in ``folder``; nothing is read or written until :meth:`resume`.

        Args:
            folder: the folder (created when missing; must be empty, absent, or hold a checkpoint of this
                run).
            arrays: the run's array inputs (data and prior parameters), hashed into its fingerprint.
            settings: the run's JSON-able settings (sampler, model), part of its fingerprint.
            total: iterations of the whole run (warm-up and draws).
        """
        self.folder = Path(folder)
        self.fingerprint = fingerprint(arrays, settings)
        self.total = int(total)
        self.files: dict[str, str] = {}

    def resume(self, initial_state: Any) -> tuple[int, Any]:
        """(iterations done, state to continue from): ``(0, initial_state)`` for a fresh folder.

        Raises:
            CheckpointError: the folder holds a checkpoint of a different run, a corrupt one (see
                :func:`read_checkpoint`; also a state whose own iteration counter is not the manifest's),
                other files, or a state that does not fit ``initial_state``'s structure.
        """
        done, state = 0, initial_state
        if self.folder.is_dir() and any(self.folder.iterdir()):
            info = read_checkpoint(self.folder)
            if info.fingerprint != self.fingerprint:
                differ = sorted(
                    k
                    for k in set(info.fingerprint) | set(self.fingerprint)
                    if info.fingerprint.get(k) != self.fingerprint.get(k)
                )
                raise CheckpointError(
                    f"{self.folder}: the checkpoint is of a different run ({', '.join(differ)} differ; "
                    "inputs_sha256 covers the data and priors, chain_method how the chains run)"
                )
            if info.total_iterations != self.total:
                raise CheckpointError(
                    f"{self.folder}: the checkpoint is of a run of {info.total_iterations} iterations, "
                    f"not {self.total}"
                )
            done = info.iterations_done
            leaves, treedef = jax.tree_util.tree_flatten(initial_state)
            state = _load_state(self.folder / f"state-{done:07d}.npz", leaves, treedef)
            # The sampler's own iteration counter (NumPyro's HMCState.i) travels inside the state file.
            counter = getattr(state, "i", None)
            if counter is not None and not np.all(np.asarray(counter) == done):
                raise CheckpointError(
                    f"{self.folder}: {CHECKPOINT_FILE} is corrupt (it lists state-{done:07d}.npz as the "
                    f"state after iteration {done}, but that state is after iteration "
                    f"{', '.join(map(str, np.unique(np.asarray(counter))))})"
                )
            self.files = dict(info.files)
        if writes_files():
            self.folder.mkdir(parents=True, exist_ok=True)
        return done, state

    def save(self, done: int, state: Any, draws: Mapping[str, Any] | None) -> None:
        """Record the state after ``done`` iterations and the kept ``draws`` of the chunk that ended there.

        ``draws`` is ``{"z": {site: (chains, n, ...)}, stat: (chains, n)}``; None for a chunk of warm-up only.
        In a run of several processes only process 0 writes (the others' states and draws are the same).
        """
        if not writes_files():
            return
        new_files: dict[str, str] = {}
        if draws is not None:
            name = f"chunk-{done:07d}.npz"
            new_files[name] = _save_npz(self.folder / name, _flatten_collected(draws))
        state_name = f"state-{done:07d}.npz"
        state_leaves = {f"leaf{i:03d}": np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(state))}
        new_files[state_name] = _save_npz(self.folder / state_name, state_leaves)
        stale = [n for n in self.files if n.startswith("state-")]
        self.files = {n: h for n, h in self.files.items() if n not in stale} | new_files
        write_manifest(self.folder, self.fingerprint, done, self.total, self.files)
        for name in stale:
            (self.folder / name).unlink(missing_ok=True)

    def draws(self) -> dict:
        """Every saved chunk concatenated along the draw axis: ``{"z": {site: …}, stat: …}``.

        A process that does not write (not process 0 of a multi-process run) reads the chunks process 0
        listed in the manifest.
        """
        if not writes_files():
            self.files = dict(read_checkpoint(self.folder).files)
        return _read_draws(self.folder, self.files)


def _load_state(path: Path, template: list, treedef: Any) -> Any:
    """The sampler state saved in ``path``, checked leaf by leaf against the freshly initialised one."""
    with np.load(path) as saved:
        loaded = [saved[f"leaf{i:03d}"] for i in range(len(saved.files))]
    if len(loaded) != len(template) or any(
        a.shape != np.shape(b) or a.dtype != np.asarray(b).dtype
        for a, b in zip(loaded, template, strict=False)
    ):
        raise CheckpointError(f"{path.parent}: the saved sampler state does not fit this model")
    return jax.tree_util.tree_unflatten(treedef, [jnp.asarray(a) for a in loaded])


def _flatten_collected(collected: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """{"z/<site>": …, "<stat>": …} from the per-iteration collection (chains, iterations, ...)."""
    out = {f"z/{k}": np.asarray(v) for k, v in collected["z"].items()}
    out.update({f: np.asarray(v) for f, v in collected.items() if f != "z"})
    return out


def _read_draws(folder: Path, files: Mapping[str, str]) -> dict:
    """The saved chunks concatenated along the draw axis: {"z": {site: …}, stat: …}."""
    parts: dict[str, list[np.ndarray]] = {}
    for name in sorted(n for n in files if n.startswith("chunk-")):
        with np.load(folder / name) as chunk:
            for key in chunk.files:
                parts.setdefault(key, []).append(chunk[key])
    joined = {k: np.concatenate(v, axis=1) for k, v in parts.items()}
    out: dict[str, Any] = {"z": {}}
    for key, value in joined.items():
        if key.startswith("z/"):
            out["z"][key[2:]] = value
        else:
            out[key] = value
    return out
