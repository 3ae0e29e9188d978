"""Atomic output folders and files (DESIGN §6: an interrupted or failed run leaves no half-written result).

The CLI writes every result file into a hidden temporary folder next to the requested one and moves it
into place only when everything has been written::

    prepare_output_dir(out, overwrite)          # refuse early, before any sampling
    with atomic_output_dir(out, overwrite) as tmp:
        idata.to_netcdf(tmp / "inference.nc")
        ...                                     # summary.csv, plots
    # here `out` holds the complete results; after an exception or Ctrl-C it is as it was before

Renaming a directory within one file system is atomic, which is why the temporary folder is a sibling
of ``out`` (same parent) rather than in the system temp directory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from bayes_rbfn.io.reader import InputError

__all__ = [
    "InputError",
    "atomic_output_dir",
    "atomic_replace",
    "atomic_write_bytes",
    "default_output_dir",
    "prepare_output_dir",
]


def prepare_output_dir(out: str | os.PathLike[str], overwrite: bool) -> None:
    """Check that results may be written to the folder ``out``; nothing is created or changed.

    Accepted: ``out`` does not exist (its parent is created later), exists as an empty folder, or exists
    as a non-empty folder and ``overwrite`` is True.

    Raises:
        InputError: ``out`` is a file (or other non-folder), a non-empty folder without ``overwrite``
            ("use --overwrite"), or its nearest existing parent is a file or not writable.
    """
    out = Path(out)
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise InputError(f"output folder {out}: exists and is not a folder; choose another --out")
        if not overwrite and any(out.iterdir()):
            raise InputError(
                f"output folder {out}: exists and is not empty; use --overwrite to replace it, or "
                "choose another --out"
            )
    parent = _nearest_existing(out.absolute().parent)
    if not parent.is_dir():
        raise InputError(f"output folder {out}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"output folder {out}: cannot write in {parent} (permission denied)")


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _sibling(out: Path, tag: str) -> Path:
    """A fresh hidden name next to ``out``, e.g. ``.results.tmp-3f9a1c``; the caller creates it."""
    while True:
        candidate = out.parent / f".{out.name}.{tag}-{secrets.token_hex(4)}"
        if not candidate.exists() and not candidate.is_symlink():
            return candidate


@contextlib.contextmanager
def atomic_output_dir(out: str | os.PathLike[str], overwrite: bool) -> Iterator[Path]:
    """Yield an empty temporary folder; on success it becomes ``out``, on failure it is removed.

    The temporary folder is a hidden sibling of ``out`` (same parent, so the final rename is atomic).
    When the ``with`` block completes, the folder is renamed to ``out``; if ``out`` already exists
    (empty, or non-empty with ``overwrite``) it is first renamed to a hidden backup, which is deleted
    only once the new folder is in place, and restored if that rename fails. If the block raises —
    including ``KeyboardInterrupt`` — the temporary folder is deleted, the exception propagates and
    ``out`` is exactly as it was: never a half-written result. If the finished folder cannot be moved
    into place (say ``out`` was filled by another program meanwhile), it is kept and the InputError
    names it, so a long run is not lost.

    Args:
        out: the final output folder.
        overwrite: replace an existing non-empty ``out``.

    Yields:
        Path of the temporary folder to write every result file into.

    Raises:
        InputError: as :func:`prepare_output_dir`, or when the temporary folder cannot be created.
    """
    out = Path(out).absolute()
    prepare_output_dir(out, overwrite)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"output folder {out}: cannot create {out.parent} ({err.strerror or err})") from err
    # os.mkdir (not tempfile.mkdtemp, which makes mode 0o700) so the final folder gets the user's umask.
    while True:
        tmp = _sibling(out, "tmp")
        try:
            tmp.mkdir()
            break
        except FileExistsError:
            continue
        except OSError as err:
            raise InputError(
                f"output folder {out}: cannot create a folder in {out.parent} ({err.strerror or err})"
            ) from err

    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        _move_into_place(tmp, out, overwrite)
    except (OSError, InputError) as err:
        # The results are complete: keep them rather than lose a long run to a late conflict.
        raise InputError(
            f"output folder {out}: the results are complete in {tmp} but could not be moved into place "
            f"({err}); rename that folder yourself"
        ) from err


def _move_into_place(tmp: Path, out: Path, overwrite: bool) -> None:
    """Rename the finished ``tmp`` to ``out``, via a backup of an existing ``out``."""
    if not (out.exists() or out.is_symlink()):
        os.rename(tmp, out)
        return
    # Re-check: something may have been written to `out` while the results were being computed.
    prepare_output_dir(out, overwrite)
    backup = _sibling(out, "old")
    os.rename(out, backup)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(backup, out)
        raise
    if backup.is_dir() and not backup.is_symlink():
        shutil.rmtree(backup, ignore_errors=True)
    else:
        backup.unlink(missing_ok=True)


def atomic_replace(tmp_path: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Move the finished file ``tmp_path`` onto ``path`` in one step (``os.replace``).

    ``tmp_path`` is flushed to disk first, so ``path`` holds either its old content or the complete new
    one even after a crash. Both must be on the same file system (write ``tmp_path`` next to ``path``).
    """
    tmp_path, path = Path(tmp_path), Path(path)
    with open(tmp_path, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp_path, path)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: into a hidden sibling file, then :func:`atomic_replace`.

    If writing fails (or is interrupted) the sibling is removed and ``path`` keeps its old content.
    """
    path = Path(path)
    tmp = _sibling(path, "tmp")
    try:
        with open(tmp, "xb") as fh:
            fh.write(data)
        atomic_replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def default_output_dir(prefix: str = "bayes_rbfn_out", parent: str | os.PathLike[str] | None = None) -> Path:
    """A folder name that does not exist yet, e.g. ``./bayes_rbfn_out_20260131-142502``.

    Made of ``prefix``, the local date and time, and ``_2``, ``_3``, … if that name is taken. The folder
    is not created.

    Args:
        prefix: start of the folder name.
        parent: where the folder would go; the current working directory by default.

    Returns:
        The path, relative when ``parent`` is None (so messages show a short name).
    """
    base = Path(parent) if parent is not None else Path()
    stem = f"{prefix}_{datetime.now():%Y%m%d-%H%M%S}"
    candidate = base / stem
    counter = 1
    while candidate.exists() or candidate.is_symlink():
        counter += 1
        candidate = base / f"{stem}_{counter}"
    return candidate
