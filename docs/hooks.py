"""MkDocs hook: the notebooks of ``notebooks/`` (jupytext scripts) join the site as pages, rendered by
mkdocs-jupyter, without a copy of them in ``docs/``."""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent


@event_priority(100)  # before mkdocs-jupyter, which turns them into pages
def on_files(files, config):
    for path in sorted((ROOT / "notebooks").glob("[0-9]*.py")):
        files.append(
            File(
                f"notebooks/{path.name}",
                src_dir=str(ROOT),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files
