"""The documentation site's machinery, outside the pages.

* An MkDocs hook: the notebooks of ``notebooks/`` (jupytext scripts) join the site as pages, rendered by
  mkdocs-jupyter, without a copy of them in ``docs/``.
* A griffe extension (``mkdocs.yml``: the python handler's ``extensions``): the API reference names the
  model collection by its import path, ``bayes_rbfn.models``. pyproject's package-dir installs the
  top-level folder ``models/`` as that package, which griffe's search of the source tree cannot know: it
  finds ``bayes_rbfn/`` and its subfolders only. The extension loads ``models/`` as the submodule
  ``models`` of the package ``bayes_rbfn`` once griffe has loaded that package, so that
  ``::: bayes_rbfn.models.distributions`` resolves, imported (``force_inspection``) by that name.
* A second griffe extension: the reference leaves out the dunder data attributes that inspection finds on
  every module and class (``__doc__``, ``__module__``, ``__dataclass_fields__``, …), Python's bookkeeping
  rather than the API; dunder methods (``__call__``, ``__add__``) stay.
"""

from __future__ import annotations

from pathlib import Path

import griffe
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
#: The installed package name → its source folder, where it is not the package's own subfolder
#: (pyproject.toml's [tool.setuptools.package-dir]).
MAPPED = {"bayes_rbfn.models": ROOT / "models"}


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


class InstalledLayout(griffe.Extension):
    """Load each folder of :data:`MAPPED` as the submodule its installed name says."""

    def on_package(self, *, pkg, loader, **kwargs):
        for name, folder in MAPPED.items():
            parent, _, child = name.rpartition(".")
            if pkg.path != parent or child in pkg.members:
                continue
            # griffe has no public call that loads a folder under a given parent; this one loads the
            # package and, walking its folder, every submodule.
            module = loader._load_module(child, folder / "__init__.py", submodules=True, parent=pkg)
            pkg.set_member(child, module)


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _drop_dunder_attributes(obj) -> None:
    for name, member in list(obj.members.items()):
        if member.is_alias:
            continue
        if member.is_attribute and _is_dunder(name):
            obj.del_member(name)
        elif member.is_module or member.is_class:
            _drop_dunder_attributes(member)


class NoBookkeeping(griffe.Extension):
    """Remove the dunder attributes of every module and class of a loaded package (after InstalledLayout)."""

    def on_package(self, *, pkg, loader, **kwargs):
        _drop_dunder_attributes(pkg)
