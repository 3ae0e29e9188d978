"""Nothing is stuck onto an ArviZ object: its groups and their attributes are all it holds.

An attribute set on an InferenceData (or DataTree) object by ``setattr`` or ``obj.name = value`` is
invisible to its user, is not written by ``to_netcdf`` and is dropped by any operation that builds a new
object, so a fit in memory would behave differently from the same fit read back from its file. The scan
reads the package's source with ``ast`` (nothing is imported) and fails on any ``setattr`` call, or
attribute assignment, whose target is a name that holds an ArviZ object by the package's naming
(``idata``, ``tree``, ``dt`` and their ``_…`` variants). The behaviour that follows from it (a fit in memory
and read back from its file refuse and predict alike) is checked in tests/infer/test_predict_user_model.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "bayes_rbfn").rglob("*.py"), *(ROOT / "models").rglob("*.py")])
#: Names the package gives to an InferenceData or DataTree object.
ARVIZ_NAME = re.compile(r"^_?(idata|inference_data|tree|dt|datatree)(_\w+)?$|^\w+_idata$")
#: DataTree's own setters that change the data it holds (its children), not a hidden attribute.
DATA_SETTERS = {"children"}


def _target_name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def offences(source: str, filename: str) -> list[str]:
    """``file:line`` of every ``setattr`` or attribute assignment onto an ArviZ-named object in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            is_setattr = (isinstance(func, ast.Name) and func.id == "setattr") or (
                isinstance(func, ast.Attribute) and func.attr == "__setattr__"
            )
            name = _target_name(node.args[0])
            if is_setattr and name and ARVIZ_NAME.match(name):
                found.append(f"{filename}:{node.lineno} setattr({name}, …)")
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr not in DATA_SETTERS:
                name = _target_name(target.value)
                if name and ARVIZ_NAME.match(name):
                    found.append(f"{filename}:{node.lineno} {name}.{target.attr} = …")
    return found


def test_the_scan_finds_what_it_forbids():
    """The scan can fail: each form it forbids, written out, is found; the allowed forms are not."""
    bad = "setattr(idata, '_x', 1)\nidata._carried = {}\nobject.__setattr__(tree, 'a', 1)\nfit_idata.x += 1\n"
    assert len(offences(bad, "bad.py")) == 4
    good = "idata.posterior.attrs['a'] = 1\nidata.children = {}\nsetattr(saved, 'a', 1)\nidata['g'] = ds\n"
    assert offences(good, "good.py") == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_attribute_is_set_on_an_arviz_object(path):
    assert offences(path.read_text(), str(path.relative_to(ROOT))) == []
