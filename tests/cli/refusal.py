"""The refusal contract of the command line, shared by the bad-input tests: exit status 2, one line
``bayes-rbfn: error: …`` naming every needle, nothing on stdout, no traceback, and nothing written."""

from __future__ import annotations

from pathlib import Path

from bayes_rbfn import cli


def listing(folder: Path) -> dict[str, bytes | None]:
    """Every path below ``folder`` (hidden ones included) with its content (None for folders)."""
    return {str(p.relative_to(folder)): (read_bytes(p) if p.is_file() else None) for p in folder.rglob("*")}


def read_bytes(path: Path) -> bytes:
    with open(path, "rb") as fh:  # the builtin, which test_unreadable_file_simulated leaves alone
        return fh.read()


def refuse(argv, capsys, tmp_path: Path, *needles: str) -> str:
    """Run the CLI; assert exit status 2, a one-line message with every needle, nothing written."""
    before = listing(tmp_path)
    status = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert status == 2, captured.err
    assert "Traceback" not in captured.err
    errors = [line for line in captured.err.splitlines() if line.startswith("bayes-rbfn: error: ")]
    assert len(errors) == 1, captured.err
    for needle in needles:
        assert needle in errors[0], f"{needle!r} not in {errors[0]!r}"
    assert captured.out == ""
    assert listing(tmp_path) == before, "something was written"
    return errors[0]
