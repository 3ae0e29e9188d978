"""Programs kept by their traced text: a refit neither lowers nor loads what an earlier fit compiled.

``fit`` builds its NUTS kernel, its post-processing and its diagnostics around closures made for that fit
(the model bound to its data, a new NumPyro kernel), and ``jax.jit`` keys its cache on the function
object: every fit would trace, lower and compile them again, or, with JAX's persistent cache, trace, lower
and load them.
:func:`by_program` traces the function and looks the compiled executable up by the traced program: the
jaxpr's text, the values of its constants and of every array-valued literal or parameter in it, and the
trace's other parameters. Equal keys are the same computation, whatever closure produced them, so this
cache cannot serve a program for the wrong model, settings or constants; a hit skips lowering and loading.

The jaxpr prints what lowering reads, with exceptions the key covers by other means: a literal or
parameter holding an array prints as ``[...]`` (its bytes are hashed); ``custom_jvp_call`` /
``custom_vjp_call`` print their rules by name only (lowering reads only their ``call_jaxpr``, which is
printed); ``custom_vmap_call`` prints its rule by address (lowering reads only its ``call``, which is
printed, so the address is left out of the key). A program whose text names any other object by its
address is keyed by its lowered text. A program with effects or any other callable parameter (a host
callback) is not kept at all: it goes through plain ``jax.jit``. Neither text names the callback (the
lowered one gives it an index), so a program keyed by either would run the first closure's callback.

The last :data:`PROGRAMS_KEPT` programs are kept. Only arguments on the default device are served from it:
sharded or explicitly placed arguments, and calls under ``jax.default_device``, go through plain
``jax.jit`` (a program's text does not name its devices).
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend import random as jax_random

try:
    from jax.extend.core import ClosedJaxpr, Jaxpr, Literal
except ImportError:  # JAX before these reached jax.extend
    from jax.core import ClosedJaxpr, Jaxpr, Literal

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
            compiled = self._seen[signature] = _compiled(self._jitted.trace(*args), treedef, avals)
        if compiled is _NOT_KEPT:
            return self._jitted(*args)
        return compiled(*dynamic)


#: What :func:`_compiled` returns for a program no key can identify (see the module docstring).
_NOT_KEPT = object()


def _compiled(traced: Any, treedef: Any, avals: tuple) -> Any:
    """The kept executable of ``traced``'s program; :data:`_NOT_KEPT` for one with effects or host callbacks.

    When none is kept yet, the program is lowered and compiled, and the executable kept.

    The key holds the arguments' shapes and dtypes besides the program: an argument the program does not
    use is pruned from it, but the executable still checks its shape when called.
    """
    program, lowered = _traced_key(traced), None
    if program is _NOT_KEPT:
        return _NOT_KEPT
    if program is None:  # the jaxpr's text names an object by its address: key by the lowered text
        lowered = traced.lower()
        program = ("lowered", hashlib.sha256(lowered.as_text(debug_info=False).encode()).hexdigest())
    key = (program, str(treedef), str(traced.out_tree), avals)
    compiled = _PROGRAMS.get(key)
    if compiled is None:
        compiled = (lowered or traced.lower()).compile()
        _PROGRAMS[key] = compiled
        while len(_PROGRAMS) > PROGRAMS_KEPT:
            _PROGRAMS.popitem(last=False)
    else:
        _PROGRAMS.move_to_end(key)
    return compiled


#: Primitives whose callable parameters lowering never reads: it lowers their ``call_jaxpr`` (printed)
#: or, for ``custom_vmap_call``, their ``call`` (printed; its ``rule`` prints with an address).
_RULES_NOT_LOWERED = frozenset({"custom_jvp_call", "custom_vjp_call", "custom_vmap_call"})
_RULES_PRINTED_BY_ADDRESS = frozenset({"custom_vmap_call"})

#: How such a rule prints (``rule=<function name at 0x7f…>``), and any memory address left in a text.
_RULE_BY_ADDRESS = re.compile(r"\brule=<[^<>]* at 0x[0-9a-f]+>")
_ADDRESS = re.compile(r"\b0x[0-9a-f]{6,}\b")

#: JAX's own PRNG implementations: tuples of functions, printed by their (distinct) names.
_JAX_PRNG_IMPLS = (jax_random.threefry_prng_impl, jax_random.rbg_prng_impl, jax_random.unsafe_rbg_prng_impl)


def _traced_key(traced: Any) -> tuple | object | None:
    """("traced", digest) of the traced program (see the module docstring), None, or :data:`_NOT_KEPT`.

    None when its text names an object by address (then the lowered text is the key); :data:`_NOT_KEPT`
    when lowering reads something neither text shows (effects, a host callback).
    """
    closed = traced.jaxpr
    if closed.effects:
        return _NOT_KEPT
    trace_params, hoisted = getattr(traced, "_params", None), getattr(traced, "_consts", None)
    if trace_params is None or hoisted is None:  # another JAX's Traced: fall back on the lowered text
        return None
    arrays: list[Any] = [*closed.consts, *hoisted]
    found: set[str] = set()
    _collect_arrays(closed.jaxpr, arrays, found)
    if "callable" in found:
        return _NOT_KEPT
    text = str(closed.jaxpr)
    if "address" in found:
        text = _RULE_BY_ADDRESS.sub("rule=<not lowered>", text)
    if _ADDRESS.search(text):
        return None
    digest = hashlib.sha256(text.encode())
    params = {k: v for k, v in trace_params.items() if k != "jaxpr"}
    digest.update(repr(sorted((k, str(v)) for k, v in params.items())).encode())
    for a in arrays:
        a = np.asarray(a)
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(np.ascontiguousarray(a).tobytes())
    return ("traced", digest.hexdigest())


def _collect_arrays(jaxpr: Any, arrays: list, found: set[str]) -> None:
    """Append to ``arrays``, in a fixed order, every array the printed ``jaxpr`` elides.

    Those are non-scalar literals, array-valued parameters and the constants of nested closed jaxprs. Adds
    "callable" to ``found`` for a callable parameter lowering may read, "address" for a rule printed by its
    address.
    """
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            if isinstance(v, Literal) and np.shape(v.val):
                arrays.append(v.val)
        name = eqn.primitive.name
        if name in _RULES_PRINTED_BY_ADDRESS:
            found.add("address")
        for value in eqn.params.values():
            _collect_param(value, arrays, found, name in _RULES_NOT_LOWERED)


def _collect_param(value: Any, arrays: list, found: set[str], rules_not_lowered: bool) -> None:
    if any(value is impl for impl in _JAX_PRNG_IMPLS) or isinstance(
        value, (jax.sharding.Mesh, jax.sharding.AbstractMesh)
    ):
        return  # printed by a name that fixes it, or in full (a mesh is callable only as a context)
    if isinstance(value, ClosedJaxpr):
        arrays.extend(value.consts)
        _collect_arrays(value.jaxpr, arrays, found)
    elif isinstance(value, Jaxpr):
        _collect_arrays(value, arrays, found)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _collect_param(v, arrays, found, rules_not_lowered)
    elif isinstance(value, (np.ndarray, jax.Array)):
        arrays.append(value)
    elif callable(value) and not rules_not_lowered:
        found.add("callable")


def by_program(fn: Callable, static_argnums: Sequence[int] = ()) -> Callable:
    """``jax.jit(fn, static_argnums=...)``, except that the executable is looked up by the traced program.

    See the module docstring: a new closure that traces to the same program reuses the compiled
    executable.

    Each call traces once per new argument signature (shapes, dtypes, pytree and static values) of the
    returned callable; calls with a signature seen before go straight to the executable.
    """
    return _ByProgram(fn, static_argnums)
