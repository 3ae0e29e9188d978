"""Compiled programs kept by the program itself, so that a refit of the same shapes compiles nothing.

``fit`` builds its NUTS kernel, its post-processing and its diagnostics around closures made for that fit
(the model bound to its data, a new NumPyro kernel), and ``jax.jit`` keys its cache on the function
object: every fit would trace and compile them again (~4 s for NUTS on 2 CPU cores at N = 1,000), even for
data of the same shapes and the same settings. :func:`by_program` instead lowers the function (tracing,
~0.1–0.5 s) and looks the compiled executable up by the lowered program's text, without source locations:
equal texts are the same computation, whatever closure produced them, so this cache cannot serve a program
for the wrong model, settings or constants.

The last :data:`PROGRAMS_KEPT` programs are kept. Only arguments on the default device are served from it:
sharded or explicitly placed arguments, and calls under ``jax.default_device``, go through plain
``jax.jit`` (a program's text does not name its devices).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

__all__ = ["PROGRAMS_KEPT", "by_program", "clear_programs"]

#: Compiled programs kept (least recently used dropped first).
PROGRAMS_KEPT = 16

_PROGRAMS: OrderedDict[tuple, Any] = OrderedDict()


def clear_programs() -> None:
    """Forget every kept program."""
    _PROGRAMS.clear()


def _on_default_device(leaf: Any) -> bool:
    sharding = getattr(leaf, "sharding", None)
    if sharding is None:
        return True  # NumPy arrays and Python scalars are placed on the default device
    single = isinstance(sharding, jax.sharding.SingleDeviceSharding)
    return single and sharding.device_set == {jax.devices()[0]}


class _ByProgram:
    """``jax.jit(fn, static_argnums)`` whose compiled executables are shared through :data:`_PROGRAMS`."""

    def __init__(self, fn: Callable, static_argnums: Sequence[int]) -> None:
        self._jitted = jax.jit(fn, static_argnums=tuple(static_argnums))
        self._static = frozenset(static_argnums)
        self._seen: dict[tuple, Any] = {}

    def __call__(self, *args: Any) -> Any:
        dynamic = tuple(a for i, a in enumerate(args) if i not in self._static)
        leaves, treedef = jax.tree_util.tree_flatten(dynamic)
        if jax.config.jax_default_device is not None or not all(_on_default_device(x) for x in leaves):
            return self._jitted(*args)
        avals = tuple((np.shape(x), jax.numpy.result_type(x), getattr(x, "weak_type", False)) for x in leaves)
        signature = (tuple(args[i] for i in sorted(self._static)), treedef, avals)
        compiled = self._seen.get(signature)
        if compiled is None:
            compiled = self._seen[signature] = _compiled(self._jitted.lower(*args), avals)
        return compiled(*dynamic)


def _compiled(lowered: Any, avals: tuple) -> Any:
    """The kept executable of ``lowered``'s program, compiling (and keeping) it when there is none.

    The key holds the arguments' shapes and dtypes besides the text: an argument the program does not use
    is pruned from the text, but the executable still checks its shape when called.
    """
    text = lowered.as_text(debug_info=False)
    key = (hashlib.sha256(text.encode()).hexdigest(), str(lowered.in_tree), str(lowered.out_tree), avals)
    compiled = _PROGRAMS.get(key)
    if compiled is None:
        compiled = lowered.compile()
        _PROGRAMS[key] = compiled
        while len(_PROGRAMS) > PROGRAMS_KEPT:
            _PROGRAMS.popitem(last=False)
    else:
        _PROGRAMS.move_to_end(key)
    return compiled


def by_program(fn: Callable, static_argnums: Sequence[int] = ()) -> Callable:
    """``jax.jit(fn, static_argnums=...)``, except that the compiled executable is looked up by the lowered
    program's text (see the module docstring): a new closure that lowers to the same program reuses it.

    Each call lowers once per new argument signature (shapes, dtypes, pytree and static values) of the
    returned callable; calls with a signature seen before go straight to the executable.
    """
    return _ByProgram(fn, static_argnums)
