"""NUTS in chunks with a checkpoint after each one: long runs that survive Ctrl-C, a kill or a crash.

:func:`sample_in_chunks` drives a NumPyro kernel itself — ``kernel.init`` once per chain, then
``kernel.sample`` inside a compiled ``lax.scan`` of ``chunk_size`` iterations, chains vectorised (``vmap``)
or one per device (``pmap``) — and after every chunk saves, into a checkpoint folder, the draws the
chunk produced and the complete sampler state (position, gradient, step size, mass matrix, adaptation
windows, PRNG key). Warm-up is chunked too: NumPyro's adaptation schedule lives in the state (its
iteration counter), so a run cut anywhere continues exactly where it stopped.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayes_rbfn.io.output import atomic_write_bytes

__all__ = [
    "CHECKPOINT_FILE",
    "DEFAULT_CHUNK_SIZE",
    "CheckpointError",
    "CheckpointInfo",
    "fingerprint",
    "read_checkpoint",
    "sample_in_chunks",
    "write_manifest",
]

CHECKPOINT_FILE = "checkpoint.json"
FORMAT = "bayes_rbfn.infer.checkpoint"
VERSION = 1
#: Iterations per chunk (warm-up and draws alike).
DEFAULT_CHUNK_SIZE = 50

#: Sample statistics collected per iteration (names as NumPyro's ``extra_fields``).
STAT_FIELDS = ("diverging", "potential_energy", "accept_prob", "num_steps", "energy", "adapt_state.step_size")


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
    """A record of a run: the SHA-256 of every array leaf of ``arrays`` (data and prior parameters, in
    pytree order) and the JSON-able ``settings``. Two runs with equal fingerprints compute the same
    thing."""
    digest = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(arrays):
        a = np.ascontiguousarray(np.asarray(leaf))
        digest.update(str((a.dtype.str, a.shape)).encode())
        digest.update(a.tobytes())
    return {"inputs_sha256": digest.hexdigest(), **json.loads(json.dumps(dict(settings), sort_keys=True))}


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


def read_checkpoint(folder: str | os.PathLike[str]) -> CheckpointInfo:
    """Read and verify the checkpoint folder ``folder`` (nothing in it is changed).

    Raises:
        CheckpointError: no such folder, no ``checkpoint.json`` (not a checkpoint), a foreign or newer
            format, unreadable JSON, or a listed file that is missing or whose SHA-256 differs (corrupt).
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
    try:
        files = dict(record["files"])
        info = CheckpointInfo(
            folder=folder,
            fingerprint=dict(record["fingerprint"]),
            iterations_done=int(record["iterations_done"]),
            total_iterations=int(record["total_iterations"]),
            files=files,
        )
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(
            f"{folder}: {CHECKPOINT_FILE} is corrupt (missing or bad field {err})"
        ) from None
    for name, expected in files.items():
        path = folder / name
        if Path(name).name != name or not path.is_file():
            raise CheckpointError(f"{folder}: checkpoint file {name} is missing")
        if _sha256(path) != expected:
            raise CheckpointError(f"{folder}: checkpoint file {name} is corrupt (its SHA-256 differs)")
    return info


def write_manifest(folder: Path, run_fingerprint: dict, done: int, total: int, files: dict) -> None:
    record = {
        "format": FORMAT,
        "version": VERSION,
        "fingerprint": run_fingerprint,
        "iterations_done": done,
        "total_iterations": total,
        "files": files,
    }
    atomic_write_bytes(folder / CHECKPOINT_FILE, json.dumps(record, indent=1).encode("utf-8"))


def _stat(state: Any, field: str) -> jax.Array:
    value = state
    for part in field.split("."):
        value = getattr(value, part)
    return value


def sample_in_chunks(
    kernel: Any,
    rng_key: jax.Array,
    model_args: tuple,
    *,
    chains: int,
    warmup: int,
    draws: int,
    folder: str | os.PathLike[str],
    run_fingerprint: dict,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    parallel: bool = False,
    progress: bool = False,
    on_chunk: Callable[[int, int], None] | None = None,
) -> tuple[dict, dict]:
    """Run ``chains`` NUTS chains of ``warmup`` + ``draws`` iterations, saving a checkpoint after every chunk.

    Continues from the checkpoint in ``folder`` when it holds one of the same run (same fingerprint),
    else starts afresh (``folder`` must then be empty or absent).

    Args:
        kernel: a NumPyro MCMC kernel (NUTS) built on the model.
        rng_key: PRNG key; chain c starts from ``jax.random.split(rng_key, chains)[c]``.
        model_args: positional arguments of the model (arrays: data, prior parameters).
        chains, warmup, draws: as for NumPyro's MCMC.
        folder: the checkpoint folder (created when missing).
        run_fingerprint: :func:`fingerprint` of the run, recorded and checked on resume.
        chunk_size: iterations per chunk, i.e. between checkpoints.
        parallel: one chain per device (``pmap``; needs ``jax.local_device_count() >= chains``) instead
            of vectorised chains (``vmap``).
        progress: a progress bar on stderr.
        on_chunk: called as ``on_chunk(iterations_done, total)`` after each saved chunk.

    Returns:
        ``(samples, stats)``: constrained draws ``{site: (chains, draws, ...)}`` (as NumPyro's
        ``get_samples(group_by_chain=True)``) and ``{field: (chains, draws)}`` for :data:`STAT_FIELDS`.

    Raises:
        CheckpointError: ``folder`` holds a checkpoint of a different run, a corrupt one, or other files.
    """
    folder = Path(folder)
    total = warmup + draws
    keys = jax.random.split(rng_key, chains)

    def init(key: jax.Array, args: tuple) -> Any:
        return kernel.init(key, warmup, None, args, {})

    init_states = jax.jit(jax.vmap(init, in_axes=(0, None)))(keys, model_args)
    leaves, treedef = jax.tree_util.tree_flatten(init_states)

    files: dict[str, str] = {}
    done = 0
    state = init_states
    if folder.is_dir() and any(folder.iterdir()):
        info = read_checkpoint(folder)
        if info.fingerprint != run_fingerprint:
            differ = sorted(
                k
                for k in set(info.fingerprint) | set(run_fingerprint)
                if info.fingerprint.get(k) != run_fingerprint.get(k)
            )
            raise CheckpointError(
                f"{folder}: the checkpoint is of a different run ({', '.join(differ)} differ; "
                "inputs_sha256 covers the data and priors, chains_in_parallel the JAX devices available)"
            )
        done, files = info.iterations_done, dict(info.files)
        state = _load_state(folder / f"state-{done:07d}.npz", leaves, treedef)
    folder.mkdir(parents=True, exist_ok=True)

    def chunk(state: Any, args: tuple, length: int) -> tuple[Any, dict]:
        def step(s: Any, _: None) -> tuple[Any, dict]:
            s = kernel.sample(s, args, {})
            return s, {"z": s.z, **{f: _stat(s, f) for f in STAT_FIELDS}}

        return jax.lax.scan(step, state, None, length=length)

    if parallel:
        run_chunk = jax.pmap(chunk, in_axes=(0, None, None), static_broadcasted_argnums=2)
    else:
        run_chunk = jax.jit(jax.vmap(chunk, in_axes=(0, None, None)), static_argnums=2)

    bar = _progress_bar(total, done, progress)
    try:
        while done < total:
            length = min(chunk_size, total - done)
            state, collected = run_chunk(state, model_args, length)
            first = done
            done += length
            new_files: dict[str, str] = {}
            keep = max(warmup - first, 0)  # warm-up iterations of this chunk are not kept
            if keep < length:
                arrays = _flatten_collected(
                    jax.tree_util.tree_map(lambda a, k=keep: np.asarray(a)[:, k:], collected)
                )
                name = f"chunk-{done:07d}.npz"
                new_files[name] = _save_npz(folder / name, arrays)
            state_name = f"state-{done:07d}.npz"
            state_leaves = {
                f"leaf{i:03d}": np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(state))
            }
            new_files[state_name] = _save_npz(folder / state_name, state_leaves)
            stale = [n for n in files if n.startswith("state-")]
            files = {n: h for n, h in files.items() if n not in stale} | new_files
            write_manifest(folder, run_fingerprint, done, total, files)
            for name in stale:
                (folder / name).unlink(missing_ok=True)
            if bar is not None:
                bar.set_description("sample" if done > warmup else "warmup")
                bar.update(length)
            if on_chunk is not None:
                on_chunk(done, total)
    finally:
        if bar is not None:
            bar.close()

    draws_by_field = _read_draws(folder, files)
    z = draws_by_field.pop("z")
    postprocess = jax.jit(lambda z, args: jax.vmap(jax.vmap(kernel.postprocess_fn(args, {})))(z))
    samples = {k: np.asarray(v) for k, v in postprocess(z, model_args).items()}
    stats = {f: draws_by_field[f] for f in STAT_FIELDS}
    return samples, stats


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


def _flatten_collected(collected: dict) -> dict[str, np.ndarray]:
    """{"z/<site>": …, "<stat>": …} from the per-iteration collection (chains, iterations, ...)."""
    out = {f"z/{k}": np.asarray(v) for k, v in collected["z"].items()}
    out.update({f: np.asarray(collected[f]) for f in STAT_FIELDS})
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


def _progress_bar(total: int, done: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc="warmup", unit="it", dynamic_ncols=True)
