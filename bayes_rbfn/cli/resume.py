"""The resume protocol of ``bayes-rbfn fit``: the checkpoint folder, the run record, what Ctrl-C keeps.

The checkpoint folder is ``OUT.partial`` next to the output folder; the run record is the command line,
so ``--resume`` reruns the very same options. The sampler's own checkpoint files (state and draws) are
:mod:`bayes_rbfn.infer.checkpoint`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

from bayes_rbfn.cli.common import PROG, Interrupted, StorageError, UserError, build_parser, package_version

__all__ = [
    "INDUCING_RECORD",
    "PARTIAL_SUFFIX",
    "RUN_FORMAT",
    "RUN_RECORD",
    "check_output_free",
    "check_resumable",
    "failed",
    "interrupted",
    "partial_dir",
    "resume_args",
    "save_inducing",
    "saved_inducing",
    "saved_progress",
    "start_partial",
]


#: Suffix of the checkpoint folder next to the output folder, and the record of the run kept in it.
PARTIAL_SUFFIX = ".partial"


RUN_RECORD = "run.json"


#: The learned inducing inputs of a run (``--inducing greedy`` or ``optimised``), kept for --resume.
INDUCING_RECORD = "inducing.npy"


RUN_FORMAT = "bayes_rbfn.fit-run"


def partial_dir(out: Path) -> Path:
    """The checkpoint folder of the output folder ``out``: ``out.partial`` next to it, an absolute path.

    ``out`` is taken with every symbolic link resolved, so a link and its target share one checkpoint
    folder, as they share the lock of :func:`bayes_rbfn.io.output.output_lock`.
    """
    out = Path(os.path.realpath(os.path.abspath(out)))
    return out.parent / (out.name + PARTIAL_SUFFIX)  # "/.partial" for the root, which has no name


def saved_progress(partial: Path) -> Any:
    """The checkpoint in ``partial``, or None when there is none that a run could continue from.

    A :class:`~bayes_rbfn.infer.checkpoint.CheckpointInfo`; None also when there is no first checkpoint
    yet, or a corrupt one.
    """
    from bayes_rbfn.infer.checkpoint import CheckpointError, read_checkpoint

    try:
        info = read_checkpoint(partial / "sampler")
    except (CheckpointError, OSError):  # OSError: a path the system refuses (a name too long, …)
        return None
    return info if info.iterations_done > 0 else None


def start_partial(partial: Path, args: argparse.Namespace, out: Path) -> list[str]:
    """Prepare the checkpoint folder of a new run and record its options for --resume.

    A leftover ``partial`` that holds saved iterations is refused (continue it with --resume), unless
    ``--overwrite``; one that holds none (its run stopped before the first checkpoint) is removed, so a
    corrected rerun with the same --out just works. A folder there that this program did not write is never
    removed. Call it while holding the output folder's lock (no live run is using ``partial``).

    Returns:
        Notes for the console (what was removed).
    """
    from bayes_rbfn.io.output import atomic_write_bytes

    notes = []
    if partial.exists() or partial.is_symlink():
        if not partial.is_dir() or partial.is_symlink() or not (partial / RUN_RECORD).is_file():
            raise UserError(
                f"{partial}: this program keeps the checkpoint of --out {out} there, but it holds something "
                "else; move it away or choose another --out"
            )
        info = saved_progress(partial)
        if info is not None and not args.overwrite:
            raise UserError(
                f"{partial} holds an interrupted run for this output folder ({info.iterations_done} of "
                f"{info.total_iterations} iterations saved): continue it with '{PROG} fit --resume {out}', "
                "or add --overwrite to start afresh"
            )
        if info is None:
            notes.append(f"removed {partial}: its run stopped before saving any iteration")
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    # Paths relative to the folder that holds OUT and OUT.partial, so that a moved project resumes;
    # "origin" (that folder when the run started) finds data that stayed behind.
    base = partial.parent
    record = {
        "format": RUN_FORMAT,
        "version": 2,
        "argv": list(args.argv),
        "cwd": _relative(os.getcwd(), base),
        "out": _relative(out, base),
        "origin": str(base),
        "package": package_version(),
    }
    atomic_write_bytes(partial / RUN_RECORD, json.dumps(record, indent=1).encode("utf-8"))
    return notes


def save_inducing(partial: Path, Z: Any) -> None:
    """Keep a run's learned inducing inputs (M, D) in its checkpoint folder, so --resume takes the same."""
    import io

    import numpy as np

    from bayes_rbfn.io.output import atomic_write_bytes

    buffer = io.BytesIO()
    np.save(buffer, np.asarray(Z, dtype=float), allow_pickle=False)
    atomic_write_bytes(partial / INDUCING_RECORD, buffer.getvalue())


def saved_inducing(partial: Path) -> Any:
    """The inducing inputs (M, D) :func:`save_inducing` kept in ``partial``, or None when it kept none.

    Raises:
        UserError: the file is there but does not hold a finite (M, D) array (corrupt).
    """
    import numpy as np

    path = partial / INDUCING_RECORD
    if not path.is_file():
        return None
    try:
        Z = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise UserError(f"--resume: {path} is corrupt ({err}); nothing was changed") from None
    if Z.ndim != 2 or 0 in Z.shape or not np.all(np.isfinite(Z)):
        raise UserError(f"--resume: {path} is corrupt (not a finite (M, D) array of inducing inputs)")
    return Z


def _relative(path: str | os.PathLike[str], base: Path) -> str:
    """``path`` (symbolic links resolved) relative to the folder ``base``.

    Absolute where no relative path leads there (another drive).
    """
    real = os.path.realpath(os.path.abspath(path))
    try:
        return os.path.relpath(real, base)
    except ValueError:
        return real


def failed(partial: Path, out: Path, resuming: bool, err: BaseException) -> BaseException | None:
    """After a run failed (not Ctrl-C): keep a checkpoint that holds iterations, remove one that holds none.

    Removing an empty one lets the same command simply be run again. A failed write is turned into a
    :class:`StorageError` that says what was kept. None: re-raise ``err`` as it is.
    """
    info = saved_progress(partial)
    if info is None and not resuming:
        shutil.rmtree(partial, ignore_errors=True)
    if not isinstance(err, OSError):
        return None
    where = f" ({err.filename})" if err.filename else ""
    reason = f"cannot write{where}: {err.strerror or err}"
    if info is None:
        return StorageError(f"{reason}; no results were written and no iteration was saved")
    return StorageError(
        f"{reason}; no results were written. {info.iterations_done} of {info.total_iterations} iterations "
        f"are saved in {partial}: make room, then continue with '{PROG} fit --resume {out}'"
    )


def interrupted(partial: Path, out: Path, resuming: bool) -> BaseException:
    """The exception to raise after Ctrl-C during sampling: keep a checkpoint that holds draws."""
    info = saved_progress(partial)
    if info is None:
        if not resuming:
            shutil.rmtree(partial, ignore_errors=True)
        return KeyboardInterrupt()
    return Interrupted(
        f"interrupted; no results were written. {info.iterations_done} of {info.total_iterations} "
        f"iterations are saved in {partial}: continue with '{PROG} fit --resume {out}'"
    )


def resume_args(args: argparse.Namespace) -> tuple[Path, argparse.Namespace]:
    """The checkpoint folder named by ``--resume`` and the options of the run saved in it."""
    defaults = _fit_defaults()
    given = [
        name
        for name, value in vars(args).items()
        if name not in ("resume", "quiet", "argv", "command") and value != defaults.get(name)
    ]
    if given:
        options = ", ".join("--" + name.replace("_", "-") if name != "data" else "DATA.csv" for name in given)
        raise UserError(
            "--resume takes no other option but --quiet (the run's own options are saved with it); "
            f"got {options}"
        )
    folder = Path(args.resume)
    candidates = [folder, partial_dir(folder)] if not folder.name.endswith(PARTIAL_SUFFIX) else [folder]
    partial = next((c for c in candidates if (c / RUN_RECORD).is_file()), None)
    if partial is None:
        raise UserError(
            f"--resume {folder}: no interrupted run there (neither {folder} nor {partial_dir(folder)} holds "
            f"a {RUN_RECORD} of '{PROG} fit')"
        )
    try:
        record = json.loads((partial / RUN_RECORD).read_text(encoding="utf-8"))
        if record.get("format") != RUN_FORMAT:
            raise ValueError("not a record of bayes-rbfn fit")
        argv = [str(a) for a in record["argv"]]
        # Version 1 stored absolute paths; version 2 stores them relative to "origin", the folder that
        # held OUT and OUT.partial when the run started (Path's "/" keeps an absolute path as it is).
        recorded_out = Path(record["out"])
        origin = Path(record.get("origin") or recorded_out.parent)
        cwd = record.get("cwd")
        if not (origin.is_absolute() and (cwd is None or isinstance(cwd, str))):
            raise ValueError("no absolute origin folder")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(
            f"--resume {folder}: {partial / RUN_RECORD} is corrupt ({err}); nothing was changed"
        ) from None
    saved = build_parser().parse_args(argv)
    if saved.command != "fit" or saved.resume is not None:
        raise UserError(f"--resume {folder}: {partial / RUN_RECORD} is not a record of '{PROG} fit'")
    # The run's folders may have moved since: OUT is wherever OUT.partial now is.
    here = Path(os.path.realpath(os.path.abspath(partial))).parent
    out = here / os.path.relpath(origin / recorded_out, origin)
    if partial_dir(out) != Path(os.path.realpath(os.path.abspath(partial))):
        raise UserError(
            f"--resume {folder}: {partial} does not belong to the output folder {origin / recorded_out}"
        )
    for name in ("data", "test"):
        if getattr(saved, name, None) is None:
            continue
        # A relative data path is relative to where the command was typed. The data (or test) file is
        # looked for where it now is if it moved along with the run's folders, else where it was.
        data = Path(getattr(saved, name)).expanduser()
        typed_in = Path.cwd() if cwd is None else origin / cwd
        then = Path(os.path.normpath(data if data.is_absolute() else typed_in / data))
        moved = Path(os.path.normpath(here / os.path.relpath(then, origin)))
        setattr(saved, name, str(moved if moved.exists() or not then.exists() else then))
    saved.quiet = saved.quiet or args.quiet
    saved.argv = argv
    saved.out = out
    check_output_free(folder, partial, out, saved.overwrite)
    return partial, saved


def check_resumable(partial: Path, folder: Path, out: Path, overwrite: bool) -> None:
    """Refuse to resume a checkpoint that cannot be continued, or into an output folder that is taken.

    Call it while holding the output folder's lock (no live run is writing ``partial``).
    """
    from bayes_rbfn.infer.checkpoint import CheckpointError, read_checkpoint

    try:
        read_checkpoint(partial / "sampler")
    except CheckpointError as err:
        if not (partial / "sampler").exists():
            raise UserError(
                f"--resume {folder}: the run stopped before saving any iteration, so there is nothing to "
                f"continue; run the same fit again without --resume (it starts afresh)"
            ) from None
        raise UserError(f"--resume {folder}: cannot continue: {err}; nothing was changed") from None
    check_output_free(folder, partial, out, overwrite)


def check_output_free(folder: Path, partial: Path, out: Path, overwrite: bool) -> None:
    """Refuse to resume into an output folder that the resumed run may not fill.

    ``out`` may be missing or empty, or, when the run was started with ``--overwrite``, hold an earlier
    result of this program and nothing else. The advice is one that works with ``--resume``, which takes
    no other option.

    Raises:
        UserError: ``out`` holds files the run may not replace (with ``--overwrite``, the message names
            one it did not write).
    """
    from bayes_rbfn.io.output import foreign_entries

    try:
        filled = out.is_dir() and any(out.iterdir())
    except OSError:
        return  # prepare_output_dir reports a folder that cannot be listed
    if not filled:
        return
    if not overwrite:
        why = "exists and is not empty"
    else:
        foreign = foreign_entries(out, limit=1)
        if not foreign:
            return
        why = f"holds {foreign[0]}, which this program did not write"
    raise UserError(
        f"--resume {folder}: the output folder {out} {why}, so the resumed run may not replace it; the "
        f"sampling is kept in {partial}: move {out} away (or empty it), then run "
        f"'{PROG} fit --resume {folder}' again"
    )


def _fit_defaults() -> dict:
    """Every ``fit`` option at its default (to detect options given together with --resume)."""
    return vars(build_parser().parse_args(["fit"]))
