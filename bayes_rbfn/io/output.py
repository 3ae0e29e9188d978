"""Atomic output folders and files: an interrupted or failed run leaves no half-written result.

See docs/output.md.

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
import errno
import fnmatch
import json
import os
import re
import secrets
import shutil
import socket
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path

from bayes_rbfn.io.reader import InputError

__all__ = [
    "MARKER",
    "InputError",
    "OutputInUse",
    "atomic_output_dir",
    "atomic_replace",
    "atomic_write_bytes",
    "default_output_dir",
    "foreign_entries",
    "free_space",
    "output_lock",
    "prepare_output_dir",
    "remove_leftovers",
]

#: The file written into every output folder, listing the files written there (its manifest);
#: ``--overwrite`` replaces only a folder that holds it and nothing but the files it lists.
MARKER = ".bayes-rbfn-output"

#: What the output folders of versions whose marker lists no files held (``fit``, ``compare``, ``sbc``).
_UNLISTED_RESULTS = (
    "inference.nc",
    "inference_*.nc",
    "summary.csv",
    "predictions.csv",
    "backtest.csv",
    "comparison.csv",
    "ranks.csv",
    "statistics.csv",
    "statistics.json",
    "report.txt",
    "trace.png",
    "rank.png",
    "predictive.png",
    "comparison.png",
    "ecdf.png",
)

#: File systems whose files are the kernel's, not the user's: never a place for results.
_SYSTEM_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))
_DEVICES = Path("/dev")

#: Characters that :func:`_sibling` adds to a name (``.NAME.tmp-1a2b3c4d``) and the ``.partial`` suffix.
_SIBLING_EXTRA = len("..partial.tmp-") + 8


class OutputInUse(InputError):
    """The output folder is locked by a live run."""


def prepare_output_dir(
    out: str | os.PathLike[str], overwrite: bool, protect: Sequence[str | os.PathLike[str]] = ()
) -> None:
    """Check that results may be written to the folder ``out``; nothing is created or changed.

    Accepted: ``out`` does not exist (its parent is created later), exists as an empty folder, or exists
    as a folder that an earlier run wrote and ``overwrite`` is True: it holds :data:`MARKER` and nothing
    but the files that marker lists (:func:`foreign_entries`). A symbolic link is followed: the checks
    are of the folder it points to, where the results will go.

    Args:
        out: the output folder.
        overwrite: whether an earlier run's results in ``out`` may be replaced.
        protect: files that must survive (the input data); ``out`` may not contain any of them. The current
            directory is always protected: ``out`` may be neither it nor one of its parents.

    Raises:
        InputError: ``out`` is the root of the file system, a file (or other non-folder); holds the
            current directory or a protected file; is non-empty without ``overwrite`` ("use --overwrite"),
            or with ``overwrite`` but holds an entry this program did not write (the message names it);
            lies in /proc, /sys or /dev (but for a tmpfs mounted below /dev, such as /dev/shm); has
            a name too long for the file system once the hidden sibling's suffix is added; or its nearest
            existing parent is a file or not writable ("permission denied", "read-only file system").
    """
    out = Path(out)
    resolved = _real(out)
    if resolved == resolved.parent:
        raise InputError(
            f"output folder {out}: it is the root of the file system, which is never replaced; choose a new "
            "folder for --out"
        )
    if _system_folder(resolved):
        raise InputError(f"output folder {out}: {resolved} is a system folder, not a place for results")
    cwd = Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        raise InputError(
            f"output folder {out}: it is the current directory{'' if resolved == cwd else ' or holds it'}, "
            "which is never replaced; choose a new folder for --out"
        )
    for path in protect:
        kept = Path(path).resolve()
        if resolved == kept or resolved in kept.parents:
            raise InputError(
                f"output folder {out}: it holds the input file {path}, which is never replaced; choose "
                "another --out"
            )
    longest = _name_max(_nearest_existing(resolved.parent)) - _SIBLING_EXTRA
    if len(os.fsencode(resolved.name)) > longest:
        raise InputError(
            f"output folder {out}: the name is too long ({len(os.fsencode(resolved.name))} bytes; with the "
            f"suffixes this program adds it must stay within {longest}); choose a shorter --out"
        )
    if resolved.exists() or resolved.is_symlink():
        if not resolved.is_dir():
            raise InputError(f"output folder {out}: exists and is not a folder; choose another --out")
        if any(resolved.iterdir()):
            if not overwrite:
                raise InputError(
                    f"output folder {out}: exists and is not empty; use --overwrite to replace an earlier "
                    "result of this program there, or choose another --out"
                )
            foreign = foreign_entries(resolved, limit=4)
            if foreign:
                shown = ", ".join(foreign[:3]) + (", …" if len(foreign) > 3 else "")
                raise InputError(
                    f"output folder {out}: holds {shown}, which this program did not write, so --overwrite "
                    "will not delete the folder; move what you keep out of it, or choose another --out"
                )
    parent = _nearest_existing(resolved.parent)
    if not parent.is_dir():
        raise InputError(f"output folder {out}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"output folder {out}: cannot write in {parent} ({_unwritable(parent)})")


def foreign_entries(out: str | os.PathLike[str], limit: int | None = None) -> list[str]:
    """The entries below the folder ``out`` that this program did not write there.

    An entry is this program's when the folder's :data:`MARKER` lists it (or a file below it); symbolic
    links are not followed. A marker of an older version, which lists no files, vouches for the result
    files those versions wrote, by name, at the top of the folder. Without a marker every entry is foreign.

    Args:
        out: an existing folder.
        limit: stop after this many entries (None: all of them).

    Returns:
        Paths relative to ``out``, '/'-separated, a folder's with a trailing '/' (its contents are not
        listed); folder by folder from the top, in each its files and then its folders, by name. Empty
        when ``out`` holds nothing but this program's files.
    """
    out = Path(out)
    listed = _listed(out)
    found: list[str] = []
    for top, folders, files in os.walk(out):
        folders.sort()
        rel = Path(top).relative_to(out)
        for name in sorted(files):
            path = (rel / name).as_posix()
            if path != MARKER and not _written(path, listed):
                found.append(path)
        for name in list(folders):
            path = (rel / name).as_posix()
            if (Path(top) / name).is_symlink():  # os.walk lists a link to a folder among the folders
                folders.remove(name)
                if not _written(path, listed):
                    found.append(path)
            elif not _written(path, listed):
                folders.remove(name)
                found.append(path + "/")
        if limit is not None and len(found) >= limit:
            return found[:limit]
    return found


def _listed(out: Path) -> set[str] | None:
    """The paths the marker of ``out`` lists, with every folder above them.

    None for a marker that lists none (an older version's); an empty set without a readable marker.
    """
    try:
        record = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return set() if not (out / MARKER).is_file() else None
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    listed = set(files)
    for path in files:
        listed.update(parent.as_posix() for parent in Path(path).parents if parent != Path("."))
    return listed


def _written(path: str, listed: set[str] | None) -> bool:
    if listed is None:
        return "/" not in path and any(fnmatch.fnmatchcase(path, name) for name in _UNLISTED_RESULTS)
    return path in listed


def _written_files(folder: Path) -> list[str]:
    """Every entry below ``folder`` but the marker, relative and '/'-separated, sorted (the manifest)."""
    entries = []
    for top, folders, files in os.walk(folder):
        rel = Path(top).relative_to(folder)
        entries += [(rel / name).as_posix() for name in (*folders, *files)]
    return sorted(e for e in entries if e != MARKER)


def _real(path: str | os.PathLike[str]) -> Path:
    """``path`` absolute with every symbolic link resolved (as far as it exists): where files really go."""
    return Path(os.path.realpath(os.path.abspath(path)))


def _system_folder(path: Path) -> bool:
    """Whether the absolute, resolved ``path`` lies in /proc, /sys or /dev (:data:`_SYSTEM_ROOTS`).

    A folder inside a tmpfs mounted below /dev (the shared-memory folder /dev/shm) is an ordinary place
    for scratch results, not a system folder; the mount point itself is.
    """
    root = next((r for r in _SYSTEM_ROOTS if path == r or r in path.parents), None)
    if root != _DEVICES:
        return root is not None
    mount = _mount_of(path)
    return mount is None or mount[1] != "tmpfs" or _DEVICES not in mount[0].parents or path == mount[0]


def _mount_of(path: Path) -> tuple[Path, str] | None:
    """(mount point, file system type) of the mount that holds the absolute ``path``.

    Read from /proc/self/mounts; None where that cannot be read (not Linux).
    """
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    found: tuple[Path, str] | None = None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        # The table writes a space, tab, newline or backslash in a mount point as an octal escape.
        point = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[1]))
        if (path == point or point in path.parents) and (
            found is None or len(point.parts) >= len(found[0].parts)
        ):
            found = (point, fields[2])
    return found


def _unwritable(folder: Path) -> str:
    """Why the folder ``folder`` cannot be written: on a read-only file system, or permission denied."""
    # access(2) fails with EROFS on a read-only mount, even for root, but os.access only says False.
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "read-only file system"
    except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
        pass
    return "permission denied"


def _reason(err: OSError) -> str:
    """The system's reason for ``err`` in a few lower-case words, e.g. "read-only file system"."""
    if err.errno == errno.EROFS:
        return "read-only file system"
    if err.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return str(err.strerror or err)


def _name_max(folder: Path) -> int:
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


def free_space(out: str | os.PathLike[str]) -> tuple[int | None, Path]:
    """(bytes free for a user, the existing folder measured) on the file system that ``out`` would be on."""
    where = _nearest_existing(Path(os.path.abspath(out)))
    try:
        return shutil.disk_usage(where).free, where
    except OSError:
        return None, where


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
def atomic_output_dir(
    out: str | os.PathLike[str], overwrite: bool, protect: Sequence[str | os.PathLike[str]] = ()
) -> Iterator[Path]:
    """Yield an empty temporary folder; on success it becomes ``out``, on failure it is removed.

    The temporary folder is a hidden sibling of ``out`` (same parent, so the final rename is atomic).
    When the ``with`` block completes, the folder is renamed to ``out``; if ``out`` already exists
    (empty, or non-empty with ``overwrite``) it is first renamed to a hidden backup, which is deleted
    only once the new folder is in place, and restored if that rename fails. If the block raises —
    including ``KeyboardInterrupt`` — the temporary folder is deleted, the exception propagates and
    ``out`` is exactly as it was: never a half-written result. If the finished folder cannot be moved
    into place (say ``out`` was filled by another program meanwhile), it is kept and the InputError
    names it, so a long run is not lost.

    The finished folder also gets :data:`MARKER`, listing every file written into it, which lets a later
    ``overwrite`` replace it as long as it holds nothing else. When ``out`` is a symbolic link, the folder
    it points to is the one written (the link stays).

    Args:
        out: the final output folder.
        overwrite: replace an existing ``out`` that an earlier run wrote.
        protect: files that ``out`` may not contain (see :func:`prepare_output_dir`).

    Yields:
        Path of the temporary folder to write every result file into.

    Raises:
        InputError: as :func:`prepare_output_dir`, or when the temporary folder cannot be created.
    """
    out = _real(out)
    prepare_output_dir(out, overwrite, protect)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"output folder {out}: cannot create {out.parent} ({_reason(err)})") from err
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
                f"output folder {out}: cannot create a folder in {out.parent} ({_reason(err)})"
            ) from err

    try:
        yield tmp
        marker = {
            "format": "bayes_rbfn.output",
            "version": 2,
            "written": datetime.now().isoformat(timespec="seconds"),
            # The manifest: what a later --overwrite may delete, relative so the folder can move.
            "files": _written_files(tmp),
        }
        (tmp / MARKER).write_text(json.dumps(marker) + "\n", encoding="utf-8")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        _move_into_place(tmp, out, overwrite, protect)
    except (OSError, InputError) as err:
        # The results are complete: keep them rather than lose a long run to a late conflict.
        raise InputError(
            f"output folder {out}: the results are complete in {tmp} but could not be moved into place "
            f"({err}); rename that folder yourself"
        ) from err


def _move_into_place(
    tmp: Path, out: Path, overwrite: bool, protect: Sequence[str | os.PathLike[str]]
) -> None:
    """Rename the finished ``tmp`` to ``out``, via a backup of an existing ``out``."""
    if not (out.exists() or out.is_symlink()):
        os.rename(tmp, out)
        return
    # Re-check: something may have been written to `out` while the results were being computed.
    prepare_output_dir(out, overwrite, protect)
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


@contextlib.contextmanager
def output_lock(out: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the lock of the output folder ``out`` (and of ``out.partial``) while the block runs.

    The lock is the hidden file ``.NAME.lock`` next to ``out``, locked with ``flock`` and holding the
    owner's pid and host. The operating system releases a ``flock`` when its process dies, however it
    dies, so a lock left by a killed run is stale by construction and is taken over; where ``flock`` is
    missing, a lock whose pid is gone on this host is stale. The file is removed when the block ends.

    The lock is keyed on the real path of ``out``: every symbolic link resolved, so two runs that name
    one folder by different paths (a link and its target) share one lock.

    Yields:
        The lock file's path.

    Raises:
        OutputInUse: a live run holds the lock (the message names its pid and start).
        InputError: the lock file cannot be created next to ``out`` (a system folder, a read-only one, …).
    """
    out = _real(out)
    lock = out.parent / f".{out.name}.lock"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"output folder {out}: cannot create {out.parent} ({_reason(err)})") from err
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise InputError(
                f"output folder {out}: cannot create a file in {out.parent} ({_reason(err)})"
            ) from err
        try:
            _acquire(fd, lock, out)
            # The holder before us may have removed the file between our open and our lock: then the lock
            # is on a deleted file and another run could create a new one. Lock the file that is there.
            if os.fstat(fd).st_ino != os.stat(lock).st_ino:
                raise FileNotFoundError
        except FileNotFoundError:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        break
    try:
        owner = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": datetime.now().isoformat("T", "seconds"),
        }
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(owner).encode("utf-8"))
        yield lock
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)


def _acquire(fd: int, lock: Path, out: Path) -> None:
    """Lock ``fd`` without waiting, or raise :class:`OutputInUse` naming the live owner."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock (Windows): a pid that is gone on this host is stale
        fcntl = None
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise InputError(f"output folder {out}: cannot lock {lock} ({_reason(err)})") from err
    owner = _lock_owner(lock)
    if fcntl is None and not _alive(owner):
        return
    who = (
        f"pid {owner.get('pid')} on {owner.get('host')}, since {owner.get('since')}"
        if owner
        else "another run"
    )
    raise OutputInUse(
        f"output folder {out}: in use by a live run ({who}); wait for it to finish, or choose another --out"
    )


def _lock_owner(lock: Path) -> dict:
    try:
        owner = json.loads(lock.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _alive(owner: dict) -> bool:
    pid = owner.get("pid")
    if not isinstance(pid, int) or owner.get("host") != socket.gethostname():
        return bool(owner)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers(
    out: str | os.PathLike[str], partial: str | os.PathLike[str] | None = None
) -> list[Path]:
    """Remove the hidden temporaries a killed run left next to ``out`` (and inside ``partial``).

    Call it only while holding :func:`output_lock`: then no live run is writing them. A backup
    ``.NAME.old-*`` of an earlier result is put back as ``out`` when ``out`` is missing (the run was
    killed between moving the old result aside and moving the new one in), else removed.

    Returns:
        The paths removed.
    """
    out = _real(out)
    removed: list[Path] = []
    if out.parent.is_dir():
        for path in sorted(out.parent.glob(f".{_glob_escape(out.name)}.old-*")):
            if not (out.exists() or out.is_symlink()) and path.is_dir():
                os.rename(path, out)
            else:
                _remove(path)
                removed.append(path)
        for path in out.parent.glob(f".{_glob_escape(out.name)}.tmp-*"):
            _remove(path)
            removed.append(path)
    for folder in () if partial is None else (Path(partial), Path(partial) / "sampler"):
        if folder.is_dir():
            for path in folder.glob(".*.tmp-*"):
                _remove(path)
                removed.append(path)
    return removed


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


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
