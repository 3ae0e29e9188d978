"""The package's import graph, read from the source with ``ast`` (nothing is imported).

Proves: imports only run down the layers of docs/layers.md (``gp`` → ``models`` → ``infer`` → ``workflows`` →
``cli``; ``io`` beside ``gp``) — see :data:`MAY_IMPORT`; no import cycle between the modules of
``bayes_rbfn`` and ``bayes_rbfn.models`` (imports inside functions count: a lazy import only hides a cycle);
nothing whose name starts with ``_`` is imported from another module of the project, tests and benchmarks
included; every module and package declares ``__all__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Source folder → the dotted package it installs as (pyproject's package-dir).
PACKAGES = {ROOT / "bayes_rbfn": "bayes_rbfn", ROOT / "models": "bayes_rbfn.models"}


def package_modules() -> dict[str, Path]:
    modules = {}
    for folder, package in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


MODULES = package_modules()


def imported_project_modules(path: Path) -> set[str]:
    """The project modules ``path`` imports (``from pkg import mod`` counts as importing ``pkg.mod``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.ImportFrom) and node.module in MODULES:
            submodules = {f"{node.module}.{a.name}" for a in node.names} & MODULES.keys()
            found.update(submodules)
            if len(submodules) < len(node.names):  # names defined in node.module itself
                found.add(node.module)
    return found


def graph() -> dict[str, set[str]]:
    return {name: imported_project_modules(path) - {name} for name, path in MODULES.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


#: Layer → the layers its modules may import (besides their own). ``runtime`` (process options) and
#: ``defaults`` (constants) import nothing of the package; ``plots`` draws what ``infer`` computed.
MAY_IMPORT = {
    "runtime": set(),
    "defaults": set(),
    "io": set(),
    "data": set(),  # the packaged files
    "gp": set(),
    "models": {"gp"},
    "infer": {"gp", "models", "io", "runtime", "defaults"},
    "plots": {"infer"},  # draws the bands of infer.predictive
    "workflows": {"gp", "models", "infer", "io", "runtime", "defaults", "plots"},
    "cli": {"", "gp", "models", "infer", "workflows", "io", "runtime", "defaults", "plots"},
    "__main__": {"cli"},
    "": {"gp", "models", "infer"},  # the package's lazy public names
}


def layer(module: str) -> str:
    """``bayes_rbfn.gp.sparse`` → ``gp``; ``bayes_rbfn`` → ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} -> {target}"
        for module, targets in edges.items()
        for target in targets
        if layer(target) != layer(module) and layer(target) not in MAY_IMPORT[layer(module)]
    )


def test_every_module_is_in_a_layer():
    assert {layer(m) for m in MODULES} <= MAY_IMPORT.keys()


def test_the_layer_check_finds_an_upward_import():
    edges = {"bayes_rbfn.gp.sparse": {"bayes_rbfn.infer.fitting", "bayes_rbfn.gp.linalg"}}
    assert upward_imports(edges) == ["bayes_rbfn.gp.sparse -> bayes_rbfn.infer.fitting"]


def test_imports_only_run_down_the_layers():
    assert upward_imports(graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules():
    assert cycles(graph()) == []


def python_files() -> list[Path]:
    folders = [*PACKAGES, ROOT / "tests", ROOT / "benchmarks", ROOT / "notebooks"]
    return sorted(p for folder in folders for p in folder.rglob("*.py"))


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_private_is_imported_across_modules(path):
    private = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bayes_rbfn"):
            private += [
                f"{node.module}.{a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.endswith("__")  # dunders (__version__) are public
            ]
            private += [node.module] if any(p.startswith("_") for p in node.module.split(".")) else []
        elif isinstance(node, ast.Import):
            private += [
                a.name
                for a in node.names
                if a.name.startswith("bayes_rbfn") and any(p.startswith("_") for p in a.name.split("."))
            ]
    assert private == [], f"{path.name} imports private names: {private}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if not n.endswith("__main__")))
def test_every_module_declares_all(name):
    tree = ast.parse(MODULES[name].read_text())
    declared = any(
        isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets)
        for node in tree.body
    )
    assert declared, f"{name} has no __all__"


#: The one module of the package that imports arviz: the two ArviZ lines (0.x InferenceData, 1.x DataTree)
#: differ only there.
ARVIZ_MODULE = "bayes_rbfn.io.arviz_compat"


def arviz_importers(path: Path) -> bool:
    """Whether ``path`` imports arviz (or one of its parts: arviz_base, arviz_stats, arviz_plots)."""
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        if any(n.split(".")[0] in {"arviz", "arviz_base", "arviz_stats", "arviz_plots"} for n in names):
            return True
    return False


def test_the_arviz_check_finds_an_import(tmp_path):
    for text in ("import arviz as az\n", "def f():\n    from arviz_stats import loo\n"):
        (tmp_path / "m.py").write_text(text)
        assert arviz_importers(tmp_path / "m.py")
    (tmp_path / "m.py").write_text("import arvizish\n")
    assert not arviz_importers(tmp_path / "m.py")


def test_only_the_compat_module_imports_arviz():
    assert sorted(name for name, path in MODULES.items() if arviz_importers(path)) == [ARVIZ_MODULE]
