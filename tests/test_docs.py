"""The project's documentation is its own: the site (``mkdocs.yml``: the pages of ``docs/``, the API
reference from the docstrings, the rendered notebooks) builds with warnings as errors; no file cites a
document outside the repository, and every
reference to a page of ``docs/`` — a Markdown link, or a page and section in a docstring — names a
page that exists and a section heading on it (GitHub's anchors: the heading in lower case, punctuation
dropped, spaces as hyphens)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.split()
    if not listed:  # not a git checkout: walk the tree
        listed = [str(p.relative_to(ROOT)) for pattern in patterns for p in ROOT.rglob(pattern)]
    return [ROOT / p for p in listed if (ROOT / p).is_file()]


def _anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_anchor(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")}


SOURCES = _tracked("*.py", "*.md", "*.toml")


def test_no_file_cites_a_document_outside_the_repository():
    needle = "DESIGN" + " §"  # the design notes kept outside the repository (split: this file is a source)
    cited = [str(p.relative_to(ROOT)) for p in SOURCES if needle in p.read_text(errors="replace")]
    assert not cited, cited


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_every_docs_page_has_a_title(page):
    assert page.read_text().startswith("# ")


def test_references_to_docs_pages_resolve():
    reference = re.compile(r"docs/([\w\-]+\.md)(?:#([\w\-]+))?")
    broken = []
    for source in SOURCES:
        for match in reference.finditer(source.read_text(errors="replace")):
            page, anchor = DOCS / match.group(1), match.group(2)
            if not page.is_file() or (anchor and anchor not in _anchors(page)):
                broken.append(f"{source.relative_to(ROOT)}: {match.group(0)}")
    assert not broken, broken


def test_relative_markdown_links_resolve():
    link = re.compile(r"\]\(([^)#\s]+\.md)(?:#([\w\-]+))?\)")
    broken = []
    for source in (p for p in SOURCES if p.suffix == ".md"):
        for match in link.finditer(source.read_text()):
            if "://" in match.group(1):
                continue
            target = (source.parent / match.group(1)).resolve()
            anchor = match.group(2)
            if not target.is_file() or (anchor and anchor not in _anchors(target)):
                broken.append(f"{source.relative_to(ROOT)}: {match.group(0)}")
    assert not broken, broken


def test_site_builds_with_warnings_as_errors(tmp_path):
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    pages = ("index.html", "mathematics/index.html", "api/index.html", "notebooks/07_birthdays/index.html")
    for page in pages:
        assert (tmp_path / page).is_file(), page
    assert "SparseGP" in (tmp_path / "api" / "index.html").read_text()


# --------------------------------------------------------------------------------------------------
# The site is one whole: every module has its reference entry, every link of docs/ stays on the site, and
# the layers page is the package as it is.

MKDOCS = ROOT / "mkdocs.yml"
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"(?<!\!)\[[^\]\n]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension (mkdocs.yml) gives a heading."""
    from markdown.extensions.toc import slugify

    return slugify(re.sub(r"[`*]", "", heading).strip(), "-")


def heading_anchors(text: str) -> set[str]:
    """The anchors of a page's headings (outside code blocks)."""
    return {_slug(line.lstrip("#")) for line in FENCE.sub("", text).splitlines() if line.startswith("#")}


def nav_pages(nav: list) -> list[str]:
    """The page paths (relative to docs_dir) of an mkdocs ``nav``."""
    pages = []
    for entry in nav:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def site_pages() -> dict[str, set[str] | None]:
    """Page of the nav → its heading anchors (None for a notebook: its anchors are not checked)."""
    import yaml

    config = yaml.safe_load(MKDOCS.read_text())
    return {
        page: heading_anchors((DOCS / page).read_text()) if page.endswith(".md") else None
        for page in nav_pages(config["nav"])
    }


def off_site_links(page: str, text: str, pages: dict[str, set[str] | None]) -> list[str]:
    """The links of the page ``page`` (its path in docs_dir) that do not land on the site.

    A link lands when it names a page of the nav, relative to ``page``, or a heading's anchor on one (a bare
    ``#anchor`` on ``page`` itself). Links inside code are not links.
    """
    import posixpath

    bad = []
    for match in LINK.finditer(INLINE_CODE.sub("", FENCE.sub("", text))):
        target = match.group(1)
        path, _, anchor = target.partition("#")
        if re.match(r"^[a-z][a-z0-9+.-]*:", path):
            bad.append(f"{page}: {target} (off the site)")
            continue
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(page), path)) if path else page
        if resolved not in pages:
            bad.append(f"{page}: {target} (not a page of the site)")
        elif anchor and pages[resolved] is not None and anchor not in pages[resolved]:
            bad.append(f"{page}: {target} (no such heading)")
    return bad


def test_the_link_check_finds_links_off_the_site():
    pages = {"index.md": {"start"}, "cli.md": {"several-inputs"}, "notebooks/01_a.py": None}
    text = (
        "[a](cli.md) [b](cli.md#several-inputs) [c](#start) [d](notebooks/01_a.py) `[e](nope.md)`\n"
        "[f](../README.md) [g](missing.md) [h](cli.md#nope) [i](https://example.org) [j](#gone)\n"
        "```\n[k](hidden.md)\n```\n"
    )
    assert off_site_links("index.md", text, pages) == [
        "index.md: ../README.md (not a page of the site)",
        "index.md: missing.md (not a page of the site)",
        "index.md: cli.md#nope (no such heading)",
        "index.md: https://example.org (off the site)",
        "index.md: #gone (no such heading)",
    ]


def test_every_page_is_in_the_nav():
    assert sorted(p.name for p in DOCS.glob("*.md")) == sorted(p for p in site_pages() if "/" not in p)


def test_every_link_of_the_docs_stays_on_the_site():
    pages = site_pages()
    bad = [
        problem
        for page in DOCS.glob("*.md")
        for problem in off_site_links(page.name, page.read_text(), pages)
    ]
    assert not bad, bad


def public_modules() -> set[str]:
    """Every module of the package and the collection that declares ``__all__``."""
    from test_architecture import MODULES

    def declares_all(path: Path) -> bool:
        return any(
            isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets)
            for node in ast.parse(path.read_text()).body
        )

    return {name for name, path in MODULES.items() if declares_all(path)}


def api_entries(text: str) -> set[str]:
    """The objects a page documents with mkdocstrings (``::: dotted.name`` lines)."""
    return set(re.findall(r"^::: ([\w.]+)\s*$", text, re.M))


def test_the_api_check_reads_entries():
    text = "# API\n\n::: bayes_rbfn.gp.kernels\n    options:\n      members: false\n\n`::: not.this`\n"
    assert api_entries(text) == {"bayes_rbfn.gp.kernels"}


def test_every_public_module_has_its_api_entry():
    entries, modules = api_entries((DOCS / "api.md").read_text()), public_modules()
    assert modules >= {"bayes_rbfn.models.distributions", "bayes_rbfn.infer.scores", "bayes_rbfn.gp.linalg"}
    assert sorted(modules - entries) == [], "modules without an entry in docs/api.md"
    assert sorted(entries - modules) == [], "entries of docs/api.md that are not public modules"


def _layer_of_path(path: str) -> str:
    """The layer of tests/test_architecture.py's MAY_IMPORT a path of the layers page's table names.

    ``bayes_rbfn/gp/`` → ``gp``; ``bayes_rbfn/plots.py`` → ``plots``; ``models/`` → ``models``; the
    package's own ``bayes_rbfn/__init__.py`` → ``""``.
    """
    if path == "bayes_rbfn/__init__.py":
        return ""
    name = path.removeprefix("bayes_rbfn/").rstrip("/").removesuffix(".py")
    assert "/" not in name, path
    return name


def layer_table(text: str) -> dict[str, set[str]]:
    """The layers page's table: layer → the layers its last column says it may import."""
    table = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| `") else []
        if len(cells) >= 2:
            first = re.match(r"`([^`]+)`", cells[0]).group(1)
            named = {"" if n == "bayes_rbfn" else n for n in re.findall(r"`([^`]+)`", cells[-1])}
            table[_layer_of_path(first)] = named
    return table


def tree_paths(text: str) -> set[str]:
    """The paths the layers page's tree names: folders as ``a/b/``, modules as ``a/b.py``."""
    block = text.split("## The tree", 1)[1]
    block = FENCE.search(block).group(0).splitlines()[1:-1]
    found, stack = set(), []
    for line in block:
        match = re.match(r"^( *)([A-Za-z_]\w*(?:\.py|/))(?:\s|$)", line)
        if match is None or len(match.group(1)) >= 20:
            continue
        depth = len(match.group(1)) // 2
        stack = [*stack[:depth], match.group(2)]
        found.add("".join(stack))
    return found


def package_paths() -> set[str]:
    """The source paths of every module of the package and the collection (a package as its folder)."""
    from test_architecture import MODULES

    paths = set()
    for path in MODULES.values():
        relative = path.relative_to(ROOT)
        paths.add(f"{relative.parent}/" if path.name == "__init__.py" else str(relative))
    return paths


def test_the_layers_checks_read_the_table_and_the_tree():
    text = (
        "| layer | holds | may import |\n|---|---|---|\n"
        "| `bayes_rbfn/gp/` | maths, `linalg` | nothing of the package |\n"
        "| `models/` (installed as `bayes_rbfn.models`) | models | `gp` |\n"
        "| `bayes_rbfn/__init__.py` | names | `gp`, `bayes_rbfn` |\n\n"
        "## The tree\n\n```\nbayes_rbfn/   the package\n  gp/         maths\n    kernels.py  kernels,\n"
        "                      other.py is a word here\n  runtime.py  settings\nmodels/\n  spec.py\n```\n"
    )
    assert layer_table(text) == {"gp": set(), "models": {"gp"}, "": {"gp", ""}}
    assert tree_paths(text) == {
        "bayes_rbfn/",
        "bayes_rbfn/gp/",
        "bayes_rbfn/gp/kernels.py",
        "bayes_rbfn/runtime.py",
        "models/",
        "models/spec.py",
    }


def test_the_layers_page_is_the_architecture_test():
    from test_architecture import MAY_IMPORT

    assert layer_table((DOCS / "layers.md").read_text()) == MAY_IMPORT


def test_the_layers_page_names_every_module_and_folder():
    named = {  # a package's line stands for its __init__.py, which may have a line of its own too
        p.removesuffix("__init__.py")
        for p in tree_paths((DOCS / "layers.md").read_text())
        if p.startswith(("bayes_rbfn/", "models/"))
    }
    actual = package_paths()
    assert {"bayes_rbfn/gp/", "models/", "bayes_rbfn/defaults.py", "bayes_rbfn/data/"} <= actual
    assert sorted(actual - named) == [], "modules and folders missing from docs/layers.md's tree"
    assert sorted(named - actual) == [], "docs/layers.md's tree names what is not there"
