"""Every ```python block of README.md and of the pages of docs/ runs.

The blocks of one page are executed in the order they appear, in one namespace, as a reader pasting them
into one Python session would: a block may use what an earlier block of its page defined. Each block is
compiled with its page as its file name and its own line numbers, so a traceback points at the page's
line. The blocks run as written, with the sizes the pages show. The ``bayes-rbfn`` command lines of the
shell blocks are parsed by the program's own parser (each option exists and takes the value shown);
tests/cli runs the commands.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from numpyro import handlers

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LIBRARY = ROOT / "docs" / "library.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """(first line number, source) of each ```python block of the page, in order."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in BLOCK.finditer(text)]


def run_blocks(page: Path) -> dict:
    """Run the page's blocks in order in one namespace; the namespace."""
    namespace: dict = {"__name__": "page"}
    for line, source in python_blocks(page):
        code = compile("\n" * (line - 1) + source, str(page), "exec")
        try:
            exec(code, namespace)
        except Exception as err:
            raise AssertionError(f"the {page.name} block at line {line} raised {type(err).__name__}") from err
    return namespace


def test_readme_and_library_pages_have_python_blocks():
    assert len(python_blocks(README)) >= 2
    assert len(python_blocks(LIBRARY)) >= 5


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if p not in (README, LIBRARY) and python_blocks(p)],
    ids=lambda p: p.name,
)
def test_other_pages_blocks_run(page):
    run_blocks(page)


def test_readme_blocks_run_in_order():
    namespace = run_blocks(README)
    assert namespace["pred"].mean.shape == namespace["data"].X_test.shape[:1]
    X = namespace["data"].X
    for name, site in [("gp_model", "y"), ("counts_model", "k")]:
        trace = handlers.trace(handlers.seed(namespace[name], 0)).get_trace(X, X[::10])
        assert trace[site]["value"].shape == (X.shape[0],), name


# The first fit is SoR on Snelson's test grid, which reaches past the data: its predictive variance
# collapses there, as SoR's does, and fit says so.
@pytest.mark.filterwarnings("ignore::bayes_rbfn.gp.sparse.VarianceCollapseWarning")
def test_library_page_blocks_run_in_order():
    namespace = run_blocks(LIBRARY)
    # What the blocks promise, besides running: the fit's predictive, the analytic layer, the RBFN model.
    assert namespace["pred"].mean.shape == namespace["data"].X_test.shape[:1]
    assert namespace["post"].mean.shape == (namespace["Xs"].shape[0],)
    X, counts = namespace["X"], namespace["counts"]
    assert namespace["replicates"].shape == (500, counts.shape[0])
    # The two models the page defines but does not run: each simulates its observed site.
    for name, site, args in [("model", "y", (X, X[::10])), ("count_model", "k", (X, X[::10]))]:
        trace = handlers.trace(handlers.seed(namespace[name], 0)).get_trace(*args)
        assert trace[site]["value"].shape == counts.shape, name


#: A fenced block without a language (or ``bash``), and the ``bayes-rbfn`` command lines in it, backslash
#: continuations joined.
SHELL_BLOCK = re.compile(r"^```(?:bash)?\n(.*?)^```", re.M | re.S)
COMMAND = re.compile(r"(?:^|\s)bayes-rbfn ((?:fit|compare|sbc|datasets)\b.*)")


def command_lines(page: Path) -> list[tuple[int, list[str]]]:
    """(line number, argv after ``bayes-rbfn``) of every ``bayes-rbfn`` command shown in a shell block."""
    import shlex

    text = page.read_text(encoding="utf-8")
    found = []
    for block in SHELL_BLOCK.finditer(text):
        start = text.count("\n", 0, block.start(1)) + 1
        joined = block.group(1).replace("\\\n", " ")
        for offset, line in enumerate(joined.splitlines()):
            command = COMMAND.search(line)
            if command is None or "--help" in line:
                continue
            words = shlex.split(line[command.start(1) :], comments=True)
            found.append((start + offset, [w for w in words if w != "&"]))
    return found


@pytest.mark.parametrize("page", [p for p in PAGES if command_lines(p)], ids=lambda p: p.name)
def test_shell_blocks_commands_parse(page):
    """Every ``bayes-rbfn`` command a page shows is one the program accepts (its options exist and take
    the values shown); tests/cli runs them."""
    from bayes_rbfn import cli

    parser = cli.build_parser()
    for line, argv in command_lines(page):
        try:
            parser.parse_args(argv)
        except (SystemExit, Exception) as err:
            raise AssertionError(
                f"{page.name}, line {line}: bayes-rbfn {' '.join(argv)} does not parse"
            ) from err
