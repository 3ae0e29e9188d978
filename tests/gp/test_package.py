"""``bayes_rbfn.gp`` gives its modules on attribute access (PEP 562), as ``bayes_rbfn`` gives its
subpackages: ``import bayes_rbfn.gp`` then ``bayes_rbfn.gp.inducing`` works, and loads only the module
asked for. Run in a fresh interpreter, since this one has imported every module already."""

from __future__ import annotations

import subprocess
import sys

import pytest

FRESH_IMPORT = """
import sys
import bayes_rbfn.gp as gp

assert "bayes_rbfn.gp.inducing" not in sys.modules, "imported before it was asked for"
assert callable(gp.inducing.select_inducing)
assert "bayes_rbfn.gp.inducing" in sys.modules
assert "bayes_rbfn.gp.blr" not in sys.modules, "a module that was not asked for was imported"
assert set(gp.__all__) <= set(dir(gp))
for name in gp.__all__:
    assert getattr(gp, name) is sys.modules[f"bayes_rbfn.gp.{name}"]
try:
    gp.no_such_module
except AttributeError as err:
    assert "no_such_module" in str(err)
else:
    raise AssertionError("an unknown name did not raise AttributeError")
"""


def test_gp_modules_import_on_attribute_access():
    done = subprocess.run([sys.executable, "-c", FRESH_IMPORT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_gp_unknown_attribute_raises_attribute_error():
    import bayes_rbfn.gp as gp

    with pytest.raises(AttributeError, match="no_such_module"):
        _ = gp.no_such_module
    assert not hasattr(gp, "no_such_module")
