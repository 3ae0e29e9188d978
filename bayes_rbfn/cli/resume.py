"""The resume protocol of ``bayes-rbfn fit``: the checkpoint folder ``OUT.partial`` next to the output
folder, the run record (the command line, so ``--resume`` reruns the very same options), and what Ctrl-C
keeps. The sampler's own checkpoint files (state and draws) are :mod:`bayes_rbfn.infer.checkpoint`'s.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from bayes_rbfn.cli.common import PROG, Interrupted, UserError, build_parser, package_version

__all__ = [
    "PARTIAL_SUFFIX",
    "RUN_FORMAT",
    "RUN_RECORD",
    "interrupted",
    "partial_dir",
    "resume_args",
    "start_partial",
]


#: Suffix of the checkpoint folder next to the output folder, and the record of the run kept in it.
PARTIAL_SUFFIX = ".partial"


RUN_RECORD = "run.json"


RUN_FORMAT = "bayes_rbfn.fit-run"


def partial_dir(out: Path) -> Path:
    """The checkpoint folder of the output folder ``out``: ``out.partial`` next to it."""
    out = Path(out)
    return out.with_name(out.name + PARTIAL_SUFFIX)


def start_partial(partial: Path, args: argparse.Namespace, out: Path) -> None:
    """Refuse a leftover checkpoint (unless --overwrite) and record the run's options for --resume."""
    from bayes_rbfn.io.output import atomic_write_bytes

    if partial.exists() or partial.is_symlink():
        if not args.overwrite:
            raise UserError(
                f"{partial} holds an interrupted run for this output folder: continue it with "
                f"'{PROG} fit --resume {partial.with_name(partial.name[: -len(PARTIAL_SUFFIX)])}', "
                "or add --overwrite to start afresh"
            )
        if partial.is_dir() and not partial.is_symlink():
            shutil.rmtree(partial)
        else:
            partial.unlink()
    partial.mkdir(parents=True)
    record = {
        "format": RUN_FORMAT,
        "version": 1,
        "argv": list(args.argv),
        "out": str(Path(out).absolute()),
        "package": package_version(),
    }
    atomic_write_bytes(partial / RUN_RECORD, json.dumps(record, indent=1).encode("utf-8"))


def interrupted(partial: Path, out: Path, resuming: bool) -> BaseException:
    """The exception to raise after Ctrl-C during sampling: keep a checkpoint that holds draws."""
    from bayes_rbfn.infer.checkpoint import CheckpointError, read_checkpoint

    try:
        info = read_checkpoint(partial / "sampler")
    except CheckpointError:
        info = None
    if info is None or info.iterations_done == 0:
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
        out = Path(record["out"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(
            f"--resume {folder}: {partial / RUN_RECORD} is corrupt ({err}); nothing was changed"
        ) from None
    from bayes_rbfn.infer.checkpoint import CheckpointError, read_checkpoint

    try:
        read_checkpoint(partial / "sampler")
    except CheckpointError as err:
        raise UserError(f"--resume {folder}: cannot continue: {err}; nothing was changed") from None
    saved = build_parser().parse_args(argv)
    if saved.command != "fit" or saved.resume is not None:
        raise UserError(f"--resume {folder}: {partial / RUN_RECORD} is not a record of '{PROG} fit'")
    saved.quiet = saved.quiet or args.quiet
    saved.argv = argv
    if partial_dir(out).absolute() != partial.absolute():
        raise UserError(f"--resume {folder}: {partial} does not belong to the output folder {out}")
    if out.exists() and any(out.iterdir()) and not saved.overwrite:
        raise UserError(f"--resume {folder}: the output folder {out} exists and is not empty")
    saved.out = out
    return partial, saved


def _fit_defaults() -> dict:
    """Every ``fit`` option at its default (to detect options given together with --resume)."""
    return vars(build_parser().parse_args(["fit"]))
