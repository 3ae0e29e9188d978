"""Atomic output folders (docs/output.md): refusal, overwrite, and nothing half-written after a failure."""

import errno
import json
import os

import pytest

from bayes_rbfn.io import output
from bayes_rbfn.io.output import (
    atomic_output_dir,
    atomic_replace,
    atomic_write_bytes,
    default_output_dir,
    prepare_output_dir,
)
from bayes_rbfn.io.reader import InputError


def snapshot(folder):
    """{relative path: bytes} of every file below ``folder`` but the output marker."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != output.MARKER
    }


def leftovers(parent):
    """Hidden temporary or backup entries left next to the output folder."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.fixture
def old_results(tmp_path):
    out = tmp_path / "results"
    (out / "plots").mkdir(parents=True)
    (out / "inference.nc").write_bytes(b"old inference")
    (out / "plots" / "trace.png").write_bytes(b"old plot")
    # an earlier run's result, its marker listing what it wrote: --overwrite may replace it
    marker = {"format": "bayes_rbfn.output", "files": ["inference.nc", "plots", "plots/trace.png"]}
    (out / output.MARKER).write_text(json.dumps(marker))
    return out


# --------------------------------------------------------------------------------------------------
# prepare_output_dir


def test_prepare_accepts_new_and_empty(tmp_path):
    prepare_output_dir(tmp_path / "new" / "deeper", overwrite=False)
    (tmp_path / "empty").mkdir()
    prepare_output_dir(tmp_path / "empty", overwrite=False)
    assert not (tmp_path / "new").exists()  # only checks, creates nothing


def test_prepare_refuses_non_empty_without_overwrite(old_results):
    with pytest.raises(InputError, match=r"results: exists and is not empty; use --overwrite"):
        prepare_output_dir(old_results, overwrite=False)
    prepare_output_dir(old_results, overwrite=True)


@pytest.mark.parametrize("overwrite", [False, True])
def test_prepare_refuses_a_file(tmp_path, overwrite):
    target = tmp_path / "results"
    target.write_text("not a folder")
    with pytest.raises(InputError, match=r"exists and is not a folder"):
        prepare_output_dir(target, overwrite=overwrite)


def test_prepare_refuses_a_file_as_parent(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match=r"afile is a file, not a folder"):
        prepare_output_dir(tmp_path / "afile" / "results", overwrite=False)


# --------------------------------------------------------------------------------------------------
# atomic_output_dir


def test_new_folder_appears_complete(tmp_path):
    out = tmp_path / "sub" / "results"
    with atomic_output_dir(out, overwrite=False) as tmp:
        assert tmp.parent == out.parent and tmp.name.startswith(".") and tmp.is_dir()
        assert not out.exists()
        (tmp / "inference.nc").write_bytes(b"new")
    assert snapshot(out) == {"inference.nc": b"new"}
    assert leftovers(out.parent) == []


def test_refuses_non_empty_before_yielding(old_results):
    before = snapshot(old_results)
    with pytest.raises(InputError, match="use --overwrite"):
        with atomic_output_dir(old_results, overwrite=False):
            pytest.fail("the body must not run")  # pragma: no cover
    assert snapshot(old_results) == before


def test_overwrite_replaces_the_whole_folder(old_results):
    with atomic_output_dir(old_results, overwrite=True) as tmp:
        (tmp / "inference.nc").write_bytes(b"new inference")
        # The old results stay in place until the new ones are complete.
        assert snapshot(old_results)["inference.nc"] == b"old inference"
    assert snapshot(old_results) == {"inference.nc": b"new inference"}  # old plots/ gone
    assert leftovers(old_results.parent) == []


def test_empty_existing_folder_is_filled(tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    with atomic_output_dir(out, overwrite=False) as tmp:
        (tmp / "summary.csv").write_text("a,b\n")
    assert snapshot(out) == {"summary.csv": b"a,b\n"}


@pytest.mark.parametrize(
    "error", [RuntimeError("sampling failed"), KeyboardInterrupt()], ids=["exception", "ctrl-c"]
)
def test_failure_leaves_nothing_for_a_new_folder(tmp_path, error):
    out = tmp_path / "results"
    with pytest.raises(type(error)):
        with atomic_output_dir(out, overwrite=False) as tmp:
            (tmp / "inference.nc").write_bytes(b"half")
            raise error
    assert not out.exists()
    assert not tmp.exists()
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "error", [RuntimeError("sampling failed"), KeyboardInterrupt()], ids=["exception", "ctrl-c"]
)
def test_failure_keeps_old_content_when_overwriting(old_results, error):
    before = snapshot(old_results)
    with pytest.raises(type(error)):
        with atomic_output_dir(old_results, overwrite=True) as tmp:
            (tmp / "inference.nc").write_bytes(b"half")
            raise error
    assert snapshot(old_results) == before
    assert leftovers(old_results.parent) == []


def test_failed_final_rename_restores_the_old_folder(old_results, monkeypatch):
    """If the last rename fails, the backup is put back and the finished results are kept aside."""
    before = snapshot(old_results)
    real_rename = os.rename

    def rename(src, dst):
        if ".tmp-" in os.fspath(src):
            raise OSError(28, "No space left on device")
        return real_rename(src, dst)

    monkeypatch.setattr(output.os, "rename", rename)
    with pytest.raises(InputError, match=r"results are complete in .*\.results\.tmp-.*No space left"):
        with atomic_output_dir(old_results, overwrite=True) as tmp:
            (tmp / "inference.nc").write_bytes(b"new")
    assert snapshot(old_results) == before
    assert snapshot(tmp) == {"inference.nc": b"new"}
    assert [p for p in leftovers(old_results.parent) if ".old-" in p] == []


def test_folder_filled_meanwhile_is_not_clobbered(tmp_path):
    out = tmp_path / "results"
    with pytest.raises(InputError, match=r"results are complete in .*use --overwrite"):
        with atomic_output_dir(out, overwrite=False) as tmp:
            (tmp / "inference.nc").write_bytes(b"mine")
            out.mkdir()
            (out / "theirs.txt").write_text("other program")
    assert snapshot(out) == {"theirs.txt": b"other program"}
    assert snapshot(tmp) == {"inference.nc": b"mine"}


def test_new_folder_has_ordinary_permissions(tmp_path):
    with atomic_output_dir(tmp_path / "results", overwrite=False) as tmp:
        (tmp / "a").write_text("x")
    reference = tmp_path / "reference"
    reference.mkdir()
    assert (tmp_path / "results").stat().st_mode == reference.stat().st_mode


# --------------------------------------------------------------------------------------------------
# --overwrite deletes only what the marker lists; links are followed; read-only file systems


def user_file(out):
    (out / "notes.txt").write_text("mine")


def user_folder(out):
    (out / "mydata").mkdir()
    (out / "mydata" / "a.csv").write_text("t,y\n")


def file_in_a_listed_folder(out):
    (out / "plots" / "mine.png").write_bytes(b"mine")


def user_link(out):
    (out / "link").symlink_to(out.parent)


def legacy_marker_and_user_file(out):
    (out / output.MARKER).write_text("{}")  # an older version's marker: it lists no files
    (out / "plots").rename(out / "my plots")


@pytest.mark.parametrize(
    ("add", "named"),
    [
        pytest.param(user_file, "notes.txt", id="file"),
        pytest.param(user_folder, "mydata/", id="folder"),
        pytest.param(file_in_a_listed_folder, "plots/mine.png", id="file-in-a-listed-folder"),
        pytest.param(user_link, "link", id="symlink"),
        pytest.param(legacy_marker_and_user_file, "my plots/", id="legacy-marker"),
    ],
)
def test_overwrite_refuses_a_folder_holding_what_its_marker_does_not_list(old_results, add, named):
    add(old_results)
    before = snapshot(old_results)
    with pytest.raises(InputError, match=rf"holds {named}, which this program did not write"):
        prepare_output_dir(old_results, overwrite=True)
    with pytest.raises(InputError, match="will not delete the folder"):
        with atomic_output_dir(old_results, overwrite=True):
            pytest.fail("the body must not run")  # pragma: no cover
    assert snapshot(old_results) == before
    assert leftovers(old_results.parent) == []


def test_the_marker_lists_what_was_written_and_a_moved_result_is_still_replaced(tmp_path):
    out = tmp_path / "results"
    with atomic_output_dir(out, overwrite=False) as tmp:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "a.txt").write_text("a")
        (tmp / "b.txt").write_text("b")
    marker = json.loads((out / output.MARKER).read_text())
    assert marker["files"] == ["b.txt", "sub", "sub/a.txt"]
    moved = tmp_path / "moved" / "results"
    moved.parent.mkdir()
    out.rename(moved)  # the manifest is relative: the folder is still this program's
    assert output.foreign_entries(moved) == []
    with atomic_output_dir(moved, overwrite=True) as tmp:
        (tmp / "c.txt").write_text("c")
    assert snapshot(moved) == {"c.txt": b"c"}


@pytest.mark.parametrize("target", ["missing", "empty", "earlier-result"])
def test_a_link_to_the_output_folder_writes_the_folder_it_points_to(tmp_path, target):
    real = tmp_path / "real"
    if target != "missing":
        real.mkdir()
    if target == "earlier-result":
        with atomic_output_dir(real, overwrite=False) as tmp:
            (tmp / "old.txt").write_text("old")
    link = tmp_path / "link"
    link.symlink_to(real)
    with atomic_output_dir(link, overwrite=target == "earlier-result") as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".real.tmp-")
        (tmp / "new.txt").write_text("new")
    assert link.is_symlink() and snapshot(real) == {"new.txt": b"new"}
    assert leftovers(tmp_path) == []


def test_a_link_and_its_target_share_one_lock(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    (tmp_path / "chain").symlink_to("link")
    with output.output_lock(tmp_path / "real") as lock:
        assert lock == tmp_path / ".real.lock"
        for other in ("link", "chain"):
            with pytest.raises(output.OutputInUse, match="in use by a live run"):
                with output.output_lock(tmp_path / other):
                    pass  # pragma: no cover


def read_only_at(monkeypatch, folder):
    """Make ``folder`` look like a read-only mount (a real one needs privileges the tests lack; as root,
    chmod does not stop writes): access(2) and statvfs(2) answer for it as the kernel would."""
    real_access, real_statvfs = os.access, os.statvfs

    def access(path, mode, *args, **kwargs):
        if os.fspath(path) == os.fspath(folder) and mode & os.W_OK:
            return False
        return real_access(path, mode, *args, **kwargs)

    def statvfs(path):
        result = real_statvfs(path)
        if os.fspath(path) != os.fspath(folder):
            return result
        return type("StatVfs", (), {"f_flag": result.f_flag | os.ST_RDONLY})()

    monkeypatch.setattr(output.os, "access", access)
    monkeypatch.setattr(output.os, "statvfs", statvfs)


def test_a_read_only_file_system_is_named_as_such(tmp_path, monkeypatch):
    read_only_at(monkeypatch, tmp_path)
    with pytest.raises(InputError, match=r"cannot write in .* \(read-only file system\)$"):
        prepare_output_dir(tmp_path / "results", overwrite=False)

    real_open = os.open

    def erofs(path, *args, **kwargs):  # creating the lock file, as on a read-only mount
        if os.fspath(path).endswith(".results.lock"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(output.os, "open", erofs)
    with pytest.raises(InputError, match=r"cannot create a file in .* \(read-only file system\)$"):
        with output.output_lock(tmp_path / "results"):
            pass  # pragma: no cover


# --------------------------------------------------------------------------------------------------
# Single files and default names


def test_atomic_write_bytes(tmp_path):
    path = tmp_path / "summary.csv"
    atomic_write_bytes(path, b"first")
    atomic_write_bytes(path, b"second")
    assert path.read_bytes() == b"second"
    assert leftovers(tmp_path) == []


def test_atomic_write_bytes_failure_keeps_old(tmp_path):
    path = tmp_path / "summary.csv"
    path.write_bytes(b"old")
    with pytest.raises(TypeError):
        atomic_write_bytes(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


def test_atomic_replace(tmp_path):
    tmp, path = tmp_path / ".x.tmp", tmp_path / "x"
    path.write_bytes(b"old")
    tmp.write_bytes(b"new")
    atomic_replace(tmp, path)
    assert path.read_bytes() == b"new" and not tmp.exists()


def test_default_output_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = default_output_dir()
    assert not first.is_absolute() and first.name.startswith("bayes_rbfn_out_") and not first.exists()
    first.mkdir()
    second = default_output_dir()
    assert second != first and not second.exists()
    assert default_output_dir("run", parent=tmp_path / "x").parent == tmp_path / "x"
