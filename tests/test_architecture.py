"""The package's import graph, read from the source with ``ast`` (nothing is imported).

The reader (:class:`ImportReader`) takes ``import``, ``from … import`` (relative ones resolved against the
module's own package: a package's ``__init__.py`` is its own), and ``importlib.import_module`` and
``__import__`` calls with a literal module name; a module named at run time fails the graph with its file
and line, unless it is one of the package's own forms the reader knows (:data:`RUN_TIME_IMPORTS`, a
package loading its children).

Proves: imports only run down the layers of docs/layers.md (``gp`` → ``models`` → ``infer`` → ``workflows`` →
``cli``; ``io`` beside ``gp``) — see :data:`MAY_IMPORT`; no import cycle between the modules of
``bayes_rbfn`` and ``bayes_rbfn.models`` (imports inside functions count: a lazy import only hides a cycle);
nothing whose name starts with ``_`` is imported from another module of the project, tests and benchmarks
included; every module and package declares ``__all__``.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Source folder → the dotted package it installs as (pyproject's package-dir).
PACKAGES = {ROOT / "bayes_rbfn": "bayes_rbfn", ROOT / "models": "bayes_rbfn.models"}


def package_modules(packages: dict[Path, str] = PACKAGES) -> dict[str, Path]:
    """Dotted module name → source file, for every ``.py`` file below the source folders of ``packages``."""
    modules = {}
    for folder, package in packages.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


MODULES = package_modules()


@dataclass(frozen=True)
class Imported:
    """One import the source makes, its module resolved to an absolute dotted name.

    ``names`` are the names taken from ``module`` (``from module import names``, ``__import__``'s
    ``fromlist``), empty for ``import module``. ``children`` marks a load of any direct child of ``module``
    chosen at run time (a package discovering its own modules).
    """

    module: str
    names: tuple[str, ...]
    line: int
    children: bool = False


def _lazy_table_modules(tree: ast.Module) -> set[str]:
    """The modules named in the package's ``_LAZY`` table (name → (module, attribute)), read literally."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets):
            return {module for module, _ in ast.literal_eval(node.value).values()}
    raise AssertionError("bayes_rbfn/__init__.py has no literal _LAZY table")


#: The imports of the package whose module is a variable, not a literal: (module, enclosing function, the
#: argument's source) → the modules it may load, read from the module's own source. Any other non-literal
#: argument makes the reader fail, naming the file and line.
RUN_TIME_IMPORTS = {("bayes_rbfn", "__getattr__", "module_name"): _lazy_table_modules}


class ImportReader(ast.NodeVisitor):
    """Collects what one source imports: ``import``, ``from … import`` (absolute and relative),
    ``importlib.import_module`` and ``__import__`` with a literal module name, anywhere in the file.

    Relative names resolve against the module's own package: the module itself for a package's
    ``__init__.py``, its parent otherwise. Two run-time forms are understood besides
    :data:`RUN_TIME_IMPORTS`: in a package's ``__init__.py``, ``import_module(f"{__name__}.{name}")`` inside
    the module's PEP 562 ``__getattr__(name)`` loads the child the caller asked for (the child imports the
    package first, not the other way round: no edge), and elsewhere loads any direct child of the package.
    """

    def __init__(self, tree: ast.Module, module: str | None, is_package: bool, file: str) -> None:
        self.tree, self.module, self.file = tree, module, file
        self.package = module if is_package or module is None else module.rpartition(".")[0]
        self.is_package = is_package
        self.found: list[Imported] = []
        self.problems: list[str] = []
        self.functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        # The names that call importlib.import_module / __import__ in this file.
        self.importlib_names, self.loaders = set(), {"__import__": "__import__"}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                self.importlib_names |= {a.asname or a.name for a in node.names if a.name == "importlib"}
            elif isinstance(node, ast.ImportFrom) and node.module == "importlib" and node.level == 0:
                for a in node.names:
                    if a.name in ("import_module", "__import__"):
                        self.loaders[a.asname or a.name] = a.name

    def problem(self, node: ast.AST, what: str) -> None:
        self.problems.append(f"{self.file}:{node.lineno}: {what}")

    def relative(self, node: ast.AST, level: int, name: str, package: str | None) -> str | None:
        """``name`` ``level`` packages up from ``package`` (level 1: ``package`` itself)."""
        if package is None:
            return None  # a file outside the package (tests, benchmarks): not a module of the project
        parts = package.split(".")
        if level > len(parts):
            self.problem(node, f"relative import beyond the top-level package {parts[0]!r}")
            return None
        return ".".join([*parts[: len(parts) - level + 1], *([name] if name else [])])

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node)
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        self.found += [Imported(a.name, (), node.lineno) for a in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        names = tuple(a.name for a in node.names)
        if node.level == 0:
            self.found.append(Imported(node.module or "", names, node.lineno))
        elif (module := self.relative(node, node.level, node.module or "", self.package)) is not None:
            self.found.append(Imported(module, names, node.lineno))

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            loader = func.attr if func.value.id in self.importlib_names else None
        else:
            loader = self.loaders.get(func.id) if isinstance(func, ast.Name) else None
        if loader == "import_module":
            self.import_module(node)
        elif loader == "__import__":
            self.dunder_import(node)

    def argument(self, node: ast.Call, position: int, keyword: str) -> ast.expr | None:
        if len(node.args) > position:
            return node.args[position]
        return next((k.value for k in node.keywords if k.arg == keyword), None)

    def import_module(self, node: ast.Call) -> None:
        name, package = self.argument(node, 0, "name"), self.argument(node, 1, "package")
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            self.run_time(node, name)
            return
        level = len(name.value) - len(name.value.lstrip("."))
        if level == 0:
            self.found.append(Imported(name.value, (), node.lineno))
            return
        own = {"__name__": self.module, "__package__": self.package}
        if isinstance(package, ast.Constant) and isinstance(package.value, str):
            base = package.value
        elif isinstance(package, ast.Name) and package.id in own:
            base = own[package.id]
        else:
            self.problem(node, "import_module of a relative name without a literal package")
            return
        if (module := self.relative(node, level, name.value[level:], base)) is not None:
            self.found.append(Imported(module, (), node.lineno))

    def dunder_import(self, node: ast.Call) -> None:
        name, fromlist = self.argument(node, 0, "name"), self.argument(node, 3, "fromlist")
        level = self.argument(node, 4, "level")
        try:
            names = tuple(ast.literal_eval(fromlist)) if fromlist is not None else ()
            depth = ast.literal_eval(level) if level is not None else 0
        except ValueError:
            self.problem(node, "__import__ with a non-literal fromlist or level")
            return
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            self.problem(node, f"__import__ of a module named at run time ({ast.unparse(name or node)})")
            return
        module = name.value if depth == 0 else self.relative(node, depth, name.value, self.package)
        if module is not None:
            self.found.append(Imported(module, names, node.lineno))

    def run_time(self, node: ast.Call, name: ast.expr | None) -> None:
        """``import_module`` of a non-literal name: one of the understood forms, or a problem."""
        source = ast.unparse(name) if name is not None else ""
        function = self.functions[-1].name if self.functions else ""
        if (self.module, function, source) in RUN_TIME_IMPORTS:
            for module in sorted(RUN_TIME_IMPORTS[self.module, function, source](self.tree)):
                self.found.append(Imported(module, (), node.lineno))
            return
        if self.is_package and self.module is not None and self.child_of_package(name):
            attribute = getattr(name.values[2].value, "id", None)
            outer = self.functions[0] if len(self.functions) == 1 else None
            if (
                outer is not None
                and outer.name == "__getattr__"
                and [a.arg for a in outer.args.args] == [attribute]
            ):
                return  # the submodule the caller asked for (PEP 562): the package's attribute, no edge
            self.found.append(Imported(self.module, (), node.lineno, children=True))
            return
        self.problem(node, f"import_module of a module named at run time ({source})")

    @staticmethod
    def child_of_package(name: ast.expr | None) -> bool:
        """Whether ``name`` is ``f"{__name__}.{<name or attribute>}"``."""
        if not (isinstance(name, ast.JoinedStr) and len(name.values) == 3):
            return False
        head, dot, tail = name.values
        plain = all(
            isinstance(v, ast.FormattedValue) and v.conversion == -1 and v.format_spec is None
            for v in (head, tail)
        )
        return (
            plain
            and isinstance(head.value, ast.Name)
            and head.value.id == "__name__"
            and isinstance(dot, ast.Constant)
            and dot.value == "."
            and isinstance(tail.value, ast.Name | ast.Attribute)
        )


def read_imports(
    source: str, module: str | None, is_package: bool = False, file: str = "<string>"
) -> tuple[list[Imported], list[str]]:
    """What ``source`` (the module ``module``, or None outside the package) imports, and the problems.

    Args:
        source: Python source text.
        module: its dotted module name (relative imports resolve against it), None for a file outside the
            package (its relative imports are skipped).
        is_package: whether the source is a package's ``__init__.py`` (its own package for relative names).
        file: the name the problems give.

    Returns:
        (imports, problems): each import with its module absolute; each problem as ``"file:line: what"``.
    """
    tree = ast.parse(source)
    reader = ImportReader(tree, module, is_package, file)
    reader.visit(tree)
    return reader.found, reader.problems


def read_module(module: str, path: Path) -> tuple[list[Imported], list[str]]:
    """:func:`read_imports` of the project module ``module`` at ``path``."""
    file = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    return read_imports(path.read_text(), module, path.name == "__init__.py", file)


def project_modules(imports: list[Imported], modules: Iterable[str]) -> set[str]:
    """The project modules ``imports`` load (``from pkg import mod`` counts as importing ``pkg.mod``)."""
    modules = set(modules)
    found = set()
    for imp in imports:
        if imp.children:
            found |= {m for m in modules if m.rpartition(".")[0] == imp.module}
        elif imp.names:
            submodules = {f"{imp.module}.{n}" for n in imp.names} & modules
            found |= submodules
            if len(submodules) < len(imp.names) and imp.module in modules:  # names defined in imp.module
                found.add(imp.module)
        elif imp.module in modules:
            found.add(imp.module)
    return found


def graph(modules: dict[str, Path] = MODULES) -> dict[str, set[str]]:
    """Module → the project modules it imports; fails on an import the reader cannot resolve."""
    edges, problems = {}, []
    for name, path in modules.items():
        imports, found = read_module(name, path)
        problems += found
        edges[name] = project_modules(imports, modules) - {name}
    assert problems == [], "imports whose module the reader cannot name:\n" + "\n".join(problems)
    return edges


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


#: A small module set for the reader's own tests.
SYNTHETIC = {
    "bayes_rbfn",
    "bayes_rbfn.gp",
    "bayes_rbfn.gp.kernels",
    "bayes_rbfn.gp.linalg",
    "bayes_rbfn.infer",
    "bayes_rbfn.infer.fitting",
    "bayes_rbfn.models",
    "bayes_rbfn.models.blr",
}


@pytest.mark.parametrize(
    ("source", "module", "is_package", "expected"),
    [
        ("from ..infer import fitting\n", "bayes_rbfn.gp.sparse", False, {"bayes_rbfn.infer.fitting"}),
        ("from . import linalg\n", "bayes_rbfn.gp.sparse", False, {"bayes_rbfn.gp.linalg"}),
        ("from .linalg import cholesky\n", "bayes_rbfn.gp.sparse", False, {"bayes_rbfn.gp.linalg"}),
        ("def f():\n    from .. import infer\n", "bayes_rbfn.gp.sparse", False, {"bayes_rbfn.infer"}),
        # A package's __init__.py is its own package.
        ("from . import kernels\n", "bayes_rbfn.gp", True, {"bayes_rbfn.gp.kernels"}),
        ("from .. import fit\n", "bayes_rbfn.gp", True, {"bayes_rbfn"}),
        # models/ installs as bayes_rbfn.models.
        ("from ..gp import kernels\n", "bayes_rbfn.models.blr", False, {"bayes_rbfn.gp.kernels"}),
        (
            "import importlib\nimportlib.import_module('bayes_rbfn.infer.fitting')\n",
            "bayes_rbfn.gp.sparse",
            False,
            {"bayes_rbfn.infer.fitting"},
        ),
        (
            "import importlib as il\ndef f():\n    return il.import_module(name='bayes_rbfn.gp.linalg')\n",
            "bayes_rbfn.gp.sparse",
            False,
            {"bayes_rbfn.gp.linalg"},
        ),
        (
            "from importlib import import_module as load\nload('bayes_rbfn.gp.linalg')\n",
            "bayes_rbfn.infer.fitting",
            False,
            {"bayes_rbfn.gp.linalg"},
        ),
        (
            "import importlib\nimportlib.import_module('..infer.fitting', package=__package__)\n",
            "bayes_rbfn.gp.sparse",
            False,
            {"bayes_rbfn.infer.fitting"},
        ),
        (
            "import importlib\nimportlib.import_module('.kernels', __name__)\n",
            "bayes_rbfn.gp",
            True,
            {"bayes_rbfn.gp.kernels"},
        ),
        (
            "import importlib\nimportlib.import_module('.linalg', 'bayes_rbfn.gp')\n",
            "bayes_rbfn.models.blr",
            False,
            {"bayes_rbfn.gp.linalg"},
        ),
        (
            "m = __import__('bayes_rbfn.infer.fitting')\n",
            "bayes_rbfn.gp.sparse",
            False,
            {"bayes_rbfn.infer.fitting"},
        ),
        (
            "m = __import__('bayes_rbfn.gp', fromlist=['kernels'])\n",
            "bayes_rbfn.models.blr",
            False,
            {"bayes_rbfn.gp.kernels"},
        ),
        (
            "m = __import__('infer', globals(), None, ['fitting'], 2)\n",
            "bayes_rbfn.gp.sparse",
            False,
            {"bayes_rbfn.infer.fitting"},
        ),
    ],
)
def test_the_reader_resolves_every_form_of_import(source, module, is_package, expected):
    imports, problems = read_imports(source, module, is_package)
    assert problems == []
    assert project_modules(imports, SYNTHETIC) == expected


@pytest.mark.parametrize(
    ("name", "package"),
    [(".linalg", "bayes_rbfn.gp"), ("..infer.fitting", "bayes_rbfn.gp"), ("...gp", "bayes_rbfn.models.x")],
)
def test_the_relative_resolution_agrees_with_importlib(name, package):
    source = f"import importlib\nimportlib.import_module({name!r}, {package!r})\n"
    imports, problems = read_imports(source, "bayes_rbfn.gp.sparse")
    assert problems == []
    assert [imp.module for imp in imports if imp.module != "importlib"] == [
        importlib.util.resolve_name(name, package)
    ]


def write_package(root: Path, files: dict[str, str]) -> dict[str, Path]:
    """Writes ``files`` (path below ``root`` → source) with an ``__init__.py`` in every folder; returns the
    modules of ``root/pkg`` (as ``bayes_rbfn``) and ``root/models`` (as ``bayes_rbfn.models``)."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in [root / "pkg", root / "models", *(root / n for n in files)]:
        for parent in [folder, *folder.parents]:
            if parent == root:
                break
            if parent.is_dir() and not (parent / "__init__.py").exists():
                (parent / "__init__.py").write_text("")
    return package_modules({root / "pkg": "bayes_rbfn", root / "models": "bayes_rbfn.models"})


def test_the_layer_check_finds_a_relative_upward_import(tmp_path):
    modules = write_package(
        tmp_path,
        {
            "pkg/gp/sparse.py": "from ..infer import fitting\n",
            "pkg/gp/linalg.py": "from . import sparse\n",
            "pkg/infer/fitting.py": "from ..gp.linalg import cholesky\n",
            "models/blr.py": "def f():\n    from ..infer.fitting import fit\n",
        },
    )
    assert upward_imports(graph(modules)) == [
        "bayes_rbfn.gp.sparse -> bayes_rbfn.infer.fitting",
        "bayes_rbfn.models.blr -> bayes_rbfn.infer.fitting",
    ]


def test_the_layer_check_finds_an_importlib_upward_import(tmp_path):
    modules = write_package(
        tmp_path,
        {
            "pkg/gp/a.py": "import importlib\ndef f():\n    importlib.import_module('bayes_rbfn.cli.x')",
            "pkg/gp/b.py": "import importlib\nimportlib.import_module('..workflows.y', package=__package__)",
            "pkg/gp/c.py": "m = __import__('bayes_rbfn.infer', fromlist=('fitting',))\n",
            "pkg/cli/x.py": "",
            "pkg/workflows/y.py": "",
            "pkg/infer/fitting.py": "",
        },
    )
    assert upward_imports(graph(modules)) == [
        "bayes_rbfn.gp.a -> bayes_rbfn.cli.x",
        "bayes_rbfn.gp.b -> bayes_rbfn.workflows.y",
        "bayes_rbfn.gp.c -> bayes_rbfn.infer.fitting",
    ]


def test_the_cycle_finder_finds_a_relative_cycle(tmp_path):
    modules = write_package(
        tmp_path,
        {
            "pkg/gp/a.py": "from . import b\n",
            "pkg/gp/b.py": "def f():\n    from .a import g\n",
            "pkg/gp/c.py": "import importlib\nimportlib.import_module('.d', package=__package__)\n",
            "pkg/gp/d.py": "from bayes_rbfn.gp import c\n",
            "pkg/gp/e.py": "from .a import g\n",
        },
    )
    assert cycles(graph(modules)) == [
        ["bayes_rbfn.gp.a", "bayes_rbfn.gp.b"],
        ["bayes_rbfn.gp.c", "bayes_rbfn.gp.d"],
    ]


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ("import importlib\n\ndef load(name):\n    return importlib.import_module(name)\n", 4),
        ("import importlib\nNAME = 'bayes_rbfn.gp'\nimportlib.import_module(NAME + '.kernels')\n", 3),
        ("def load(name):\n    return __import__(name)\n", 2),
        ("import importlib\nimportlib.import_module('.kernels')\n", 2),  # relative without a package
        ("from .... import x\n", 1),  # beyond the top-level package
        # The child-of-the-package form holds only in a package's __init__.py.
        (
            "from importlib import import_module as m\ndef __getattr__(name):\n    m(f'{__name__}.{name}')",
            3,
        ),
    ],
)
def test_an_unreadable_import_fails_naming_file_and_line(tmp_path, source, line):
    modules = write_package(tmp_path, {"pkg/gp/sparse.py": source})
    with pytest.raises(AssertionError, match=rf"pkg/gp/sparse\.py:{line}: "):
        graph(modules)


def test_the_reader_understands_a_package_loading_its_own_children(tmp_path):
    lazy = (
        "import importlib\ndef __getattr__(name):\n    return importlib.import_module(f'{__name__}.{name}')\n"
    )
    found = "import importlib\ndef load(mod):\n    return importlib.import_module(f'{__name__}.{mod.name}')\n"
    modules = write_package(
        tmp_path,
        {
            "pkg/gp/__init__.py": lazy,
            "pkg/gp/kernels.py": "",
            "models/__init__.py": found,
            "models/blr.py": "",
        },
    )
    edges = graph(modules)
    assert edges["bayes_rbfn.gp"] == set()  # the attribute the caller asked for: no edge
    assert edges["bayes_rbfn.models"] == {"bayes_rbfn.models.blr"}  # any child: every child


def test_the_package_reads_its_lazy_table():
    source = MODULES["bayes_rbfn"].read_text()
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "import_module(module_name)" in text)
    imports, problems = read_module("bayes_rbfn", MODULES["bayes_rbfn"])
    assert problems == []
    loaded = {imp.module for imp in imports if imp.line == line}
    assert "bayes_rbfn.infer.fitting" in loaded and "bayes_rbfn.models.layers" in loaded
    assert loaded <= MODULES.keys()
    assert graph()["bayes_rbfn.models"] >= {m for m in MODULES if m.rpartition(".")[0] == "bayes_rbfn.models"}


def python_files() -> list[Path]:
    folders = [*PACKAGES, ROOT / "tests", ROOT / "benchmarks", ROOT / "notebooks"]
    return sorted(p for folder in folders for p in folder.rglob("*.py"))


def private_imports(imports: list[Imported]) -> list[str]:
    """The private names (``_x``, not dunders) and private modules of the package among ``imports``."""
    private = []
    for imp in imports:
        if imp.module.startswith("bayes_rbfn"):
            private += [f"{imp.module}.{n}" for n in imp.names if n.startswith("_") and not n.endswith("__")]
            private += [imp.module] if any(p.startswith("_") for p in imp.module.split(".")) else []
    return private


#: Source file → its module name, for the files of the package (their relative imports resolve).
FILE_MODULES = {path: name for name, path in MODULES.items()}


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_private_is_imported_across_modules(path):
    imports, _ = read_imports(path.read_text(), FILE_MODULES.get(path), path.name == "__init__.py")
    private = private_imports(imports)
    assert private == [], f"{path.name} imports private names: {private}"


def test_the_private_check_reads_relative_and_importlib_imports():
    for text in (
        "from . import _helpers\n",
        "from .linalg import _jitter\n",
        "import importlib\nm = importlib.import_module('bayes_rbfn.gp._helpers')\n",
    ):
        imports, _ = read_imports(text, "bayes_rbfn.gp.sparse")
        assert private_imports(imports) != [], text
    imports, _ = read_imports("from .linalg import cholesky, __doc__\n", "bayes_rbfn.gp.sparse")
    assert private_imports(imports) == []


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
    imports, _ = read_imports(path.read_text(), None)
    return any(
        imp.module.split(".")[0] in {"arviz", "arviz_base", "arviz_stats", "arviz_plots"} for imp in imports
    )


def test_the_arviz_check_finds_an_import(tmp_path):
    for text in (
        "import arviz as az\n",
        "def f():\n    from arviz_stats import loo\n",
        "import importlib\naz = importlib.import_module('arviz_base')\n",
    ):
        (tmp_path / "m.py").write_text(text)
        assert arviz_importers(tmp_path / "m.py")
    (tmp_path / "m.py").write_text("import arvizish\n")
    assert not arviz_importers(tmp_path / "m.py")


def test_only_the_compat_module_imports_arviz():
    assert sorted(name for name, path in MODULES.items() if arviz_importers(path)) == [ARVIZ_MODULE]
