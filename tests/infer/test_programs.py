"""Compiled programs kept by their traced program (:mod:`bayes_rbfn.infer.programs`).

What it must do: a new closure that lowers to the same program reuses the compiled executable (no XLA
compilation, the same numbers), and a different program is never served in its place — different
constants (scalars, or arrays the printed jaxpr elides), static arguments, shapes, output structure or
backward rules each get their own, and programs that call back to the host are never kept. A refit of
the same shapes compiles nothing, and its draws equal those of a fit whose programs were compiled afresh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import compile_events

import bayes_rbfn as br
from bayes_rbfn.infer import programs


def _closure(c):
    """A new function object on every call: ``x ↦ sin(x)·c + x²``, with c a constant of the program."""
    c = jnp.asarray(c)
    return lambda x: jnp.sin(x) * c + x * x


X = jnp.linspace(0.0, 1.0, 7)


def test_a_new_closure_of_the_same_program_compiles_nothing():
    programs.clear_programs()
    first = programs.by_program(_closure(1.5))(X)
    with compile_events("/jax/core/compile/backend_compile") as events:
        again = programs.by_program(_closure(1.5))(X)
    assert events == []
    np.testing.assert_array_equal(again, first)
    np.testing.assert_allclose(first, np.sin(np.asarray(X)) * 1.5 + np.asarray(X) ** 2, rtol=1e-15)


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ("other-constant", lambda x: np.sin(x) * 2.5 + x * x),
        ("other-shape", lambda x: np.sin(x[:5]) * 1.5 + x[:5] ** 2),
        ("other-output-structure", lambda x: {"value": np.sin(x) * 1.5 + x * x}),
    ],
    ids=["other-constant", "other-shape", "other-output-structure"],
)
def test_a_different_program_is_never_served_for_another(variant, expected):
    programs.clear_programs()
    programs.by_program(_closure(1.5))(X)
    if variant == "other-constant":
        out = programs.by_program(_closure(2.5))(X)
    elif variant == "other-shape":
        out = programs.by_program(_closure(1.5))(X[:5])
    else:
        f = _closure(1.5)
        out = programs.by_program(lambda x: {"value": f(x)})(X)
    want = expected(np.asarray(X))
    if isinstance(want, dict):
        assert set(out) == {"value"}
        out, want = out["value"], want["value"]
    np.testing.assert_allclose(out, want, rtol=1e-15)


def _array_closure(c):
    """``x ↦ sin(x)·c`` with c an array constant (NumPy or JAX, as given): the printed jaxpr shows it only
    as a name."""
    return lambda x: jnp.sin(x) * c


@pytest.mark.parametrize("kind", ["numpy", "jax"], ids=["numpy-constant", "jax-constant"])
def test_array_constants_that_print_alike_are_other_programs(kind):
    """Closures over arrays of the same shape trace to the same jaxpr text: their values must part them."""
    programs.clear_programs()
    wrap = np.asarray if kind == "numpy" else jnp.asarray
    x = jnp.linspace(0.0, 1.0, 3)
    for c in ([1.0, 2.0, 3.0], [1.0, 2.0, 3.5], [1.0, 2.0, 3.0]):
        out = programs.by_program(_array_closure(wrap(c)))(x)
        np.testing.assert_allclose(out, np.sin(np.asarray(x)) * np.asarray(c), rtol=1e-15)
    assert len(programs._PROGRAMS) == 2  # the third closure is the first program again


def _custom_vjp_closure(scale):
    """``x ↦ Σ x²`` with a backward rule that returns ``scale`` times the true gradient; the forward pass is
    the same for every scale."""

    @jax.custom_vjp
    def f(x):
        return jnp.sum(x * x)

    def fwd(x):
        return f(x), x

    def bwd(x, g):
        return (scale * 2.0 * x * g,)

    f.defvjp(fwd, bwd)
    return f


def test_backward_rules_are_part_of_a_differentiated_program():
    programs.clear_programs()
    one = programs.by_program(jax.grad(_custom_vjp_closure(1.0)))(X)
    three = programs.by_program(jax.grad(_custom_vjp_closure(3.0)))(X)
    np.testing.assert_allclose(one, 2.0 * np.asarray(X), rtol=1e-15)
    np.testing.assert_allclose(three, 6.0 * np.asarray(X), rtol=1e-15)


def test_forward_passes_of_custom_rules_share_a_program():
    """Undifferentiated, the two closures run the same computation (the backward rule is not lowered): one
    compiled program."""
    programs.clear_programs()
    values = [programs.by_program(_custom_vjp_closure(s))(X) for s in (1.0, 3.0)]
    assert len(programs._PROGRAMS) == 1
    for v in values:
        np.testing.assert_allclose(v, np.sum(np.asarray(X) ** 2), rtol=1e-14)


def test_host_callbacks_are_never_served_from_the_kept_programs():
    """A host callback is named by neither the jaxpr nor the lowered text (which gives it an index): each
    closure's own callback must run. Keyed by the lowered text, the second closure ran the first's."""
    programs.clear_programs()

    def calling(factor):
        def callback(v):
            return np.asarray(v) * factor

        shape = jax.ShapeDtypeStruct(X.shape, X.dtype)
        return lambda x: jax.pure_callback(callback, shape, x)

    for factor in (2.0, 5.0):
        out = programs.by_program(calling(factor))(X)
        np.testing.assert_allclose(out, factor * np.asarray(X), rtol=1e-15)
    assert len(programs._PROGRAMS) == 0


def test_the_lowered_text_fallback_reuses_and_separates(monkeypatch):
    """Programs whose jaxpr cannot be the key (an object printed by address, another JAX's ``Traced``) are
    keyed by their lowered text: still reused by a new closure, still apart for another constant."""
    monkeypatch.setattr(programs, "_traced_key", lambda traced: None)
    programs.clear_programs()
    programs.by_program(_closure(1.5))(X)
    with compile_events("/jax/core/compile/backend_compile") as events:
        again = programs.by_program(_closure(1.5))(X)
    assert events == []
    other = programs.by_program(_closure(2.5))(X)
    np.testing.assert_allclose(again, np.sin(np.asarray(X)) * 1.5 + np.asarray(X) ** 2, rtol=1e-15)
    np.testing.assert_allclose(other, np.sin(np.asarray(X)) * 2.5 + np.asarray(X) ** 2, rtol=1e-15)
    assert len(programs._PROGRAMS) == 2


@jax.custom_batching.custom_vmap
def _total(x):
    return jnp.sum(x)


@_total.def_vmap
def _total_rule(axis_size, in_batched, x):
    return jnp.sum(x, axis=1), True


def test_a_custom_vmap_rule_printed_by_address_is_left_out_of_the_key():
    """``custom_vmap_call`` prints its batching rule by address, which lowering never reads (it lowers the
    printed ``call``): such a program is still keyed by its jaxpr, so a new closure tracing to it lowers and
    compiles nothing (fit's LOO, whose leave-block-out decision is a custom_vmap, was lowered again at every
    refit: 0.27 s at N = 1,000), and another constant is still another program."""

    def make(c):
        c = jnp.asarray(c)
        return lambda x: _total(x) * c + x

    programs.clear_programs()
    programs.by_program(make(1.5))(X)
    with compile_events() as events:
        again = programs.by_program(make(1.5))(X)
    assert [e for e in events if not e.endswith("jaxpr_trace_duration")] == []
    other = programs.by_program(make(2.5))(X)
    np.testing.assert_allclose(again, np.sum(X) * 1.5 + np.asarray(X), rtol=1e-15)
    np.testing.assert_allclose(other, np.sum(X) * 2.5 + np.asarray(X), rtol=1e-15)
    assert len(programs._PROGRAMS) == 2


def test_an_unused_argument_of_another_shape_is_another_program():
    """An argument the program does not use is pruned from its text, but the executable still checks its
    shape: a call with that argument in another shape must not be served the first executable (it was, and
    failed with a TypeError, when fit's post-processing met data of another N)."""
    programs.clear_programs()

    def ignores_second(x, unused):
        return jnp.sin(x) * 1.5 + x * x

    programs.by_program(ignores_second)(X, jnp.zeros((25, 1)))
    out = programs.by_program(ignores_second)(X, jnp.zeros((30, 1)))
    np.testing.assert_allclose(out, np.sin(X) * 1.5 + X * X, rtol=1e-15)


def test_static_arguments_are_part_of_the_program():
    programs.clear_programs()

    def power(x, n):
        return x**n

    f = programs.by_program(power, static_argnums=(1,))
    np.testing.assert_allclose(f(X, 2), np.asarray(X) ** 2, rtol=1e-15)
    np.testing.assert_allclose(f(X, 3), np.asarray(X) ** 3, rtol=1e-15)
    with compile_events("/jax/core/compile/backend_compile") as events:
        np.testing.assert_allclose(programs.by_program(power, static_argnums=(1,))(X, 3), np.asarray(X) ** 3)
    assert events == []


def test_only_the_last_programs_are_kept():
    programs.clear_programs()
    for k in range(programs.PROGRAMS_KEPT + 3):
        programs.by_program(_closure(float(k)))(X)
    assert len(programs._PROGRAMS) == programs.PROGRAMS_KEPT


def test_placed_arguments_go_through_plain_jit():
    """Arguments with a sharding other than the default device's are not looked up (a program's text does
    not name its devices): the call still computes the right thing."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    placed = jax.device_put(X, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data")))
    assert not programs._on_default_device(placed)
    programs.clear_programs()
    out = programs.by_program(_closure(1.5))(placed)
    assert len(programs._PROGRAMS) == 0  # nothing looked up or kept
    np.testing.assert_allclose(out, np.sin(X) * 1.5 + X * X, rtol=1e-15)


def test_calls_under_another_default_device_go_through_plain_jit():
    """Under ``jax.default_device`` nothing is looked up or kept (the device is not in the program text)."""
    programs.clear_programs()
    with jax.default_device(jax.devices()[0]):
        out = programs.by_program(_closure(1.5))(X)
    assert len(programs._PROGRAMS) == 0
    np.testing.assert_allclose(out, np.sin(X) * 1.5 + X * X, rtol=1e-15)


def _small_fit(seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 5.0, (40, 1))
    y = np.sin(X[:, 0]) + 0.2 * rng.standard_normal(40)
    Z = np.linspace(0.0, 5.0, 6)[:, None]
    return br.fit(
        "sor", X, y, Z=Z, chains=1, warmup=60, draws=60, seed=seed, progress=False, check_diagnostics=False
    )


def test_a_refit_of_the_same_shapes_compiles_nothing():
    """fit on new data of the same shapes (and a new seed): no XLA compilation at all (NUTS, its
    post-processing, the LOO log-likelihood, the replicates, the collapse check); and the draws are those
    of the same fit with every program compiled afresh."""
    _small_fit(1)
    with compile_events("/jax/core/compile/backend_compile") as events:
        again = _small_fit(2)
    assert events == []
    programs.clear_programs()
    jax.clear_caches()
    fresh = _small_fit(2)
    for group in ("posterior", "log_likelihood", "posterior_predictive"):
        for name, values in getattr(fresh, group).data_vars.items():
            np.testing.assert_array_equal(getattr(again, group)[name].values, values.values, err_msg=name)


#: Lowers each model's log density (prior draws and density in one traced program, nothing run eagerly)
#: and prints a digest of its text; then runs fit's NUTS loop (on a small model) with two chains, one per
#: device, and adds a digest of every program it compiled, as JAX dumps their text (``jax_dump_ir_to``;
#: a persistent-cache hit is dumped too). Run under two hash seeds: Python's set order of strings differs
#: there, and so do the memory addresses that an unnamed pmap axis prints.
_LOWERED_DIGESTS = """
import hashlib, json, pathlib, tempfile
import jax, numpy as np, numpyro, numpyro.distributions as dist
from numpyro.handlers import seed, trace
from numpyro.infer.util import log_density
from bayes_rbfn import build_model, runtime
from bayes_rbfn.infer.sampler import SamplerSettings, nuts_kernel, run_chains
runtime.enable_x64()
assert jax.device_count() == 2, jax.devices()
rng = np.random.default_rng(0)
X = np.sort(rng.uniform(0, 5, 24)); y = np.sin(X) + 0.1 * rng.standard_normal(24)
models = {"sor": {}, "exact": {}, "grouped": {"group": np.repeat([0, 1], 12)}}  # each distribution class
digests = {}
for name, options in models.items():
    problem = build_model(name, X, y, num_inducing=4, **options)
    def logp(key, problem=problem):
        sites = trace(seed(problem.model, key)).get_trace(*problem.prior_args)
        params = {k: s["value"] for k, s in sites.items() if s["type"] == "sample" and not s["is_observed"]}
        return log_density(problem.model, problem.prior_args, {}, params)[0]
    text = jax.jit(logp).lower(jax.random.PRNGKey(0)).as_text(debug_info=False)
    digests[name] = hashlib.sha256(text.encode()).hexdigest()
dump = pathlib.Path(tempfile.mkdtemp())
jax.config.update("jax_dump_ir_to", str(dump))
def location(y):  # a small model: the sampler's programs are what is checked here
    mu = numpyro.sample("mu", dist.Normal(0.0, 2.0))
    numpyro.sample("y", dist.Normal(mu, 1.0).expand([y.shape[0]]).to_event(1), obs=y)
settings = SamplerSettings(chains=2, chain_method="parallel", warmup=5, draws=5, progress=False)
run_chains(nuts_kernel(location, (y,), settings), (y,), settings)
for path in sorted(dump.iterdir()):
    digests[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
print(json.dumps(digests))
"""


def test_programs_lower_to_the_same_text_in_every_process():
    """JAX's persistent compilation cache (which a fresh process, e.g. each CLI run, reads) is keyed by the
    lowered text, which must not depend on the process.

    - A model's log density (one for each distribution class: SparseGP, ExactGP and the models'
      marginal) whatever the process's hash seed: NumPyro gathers a distribution's pytree fields through
      a set; before the classes sorted them, SoR's text differed under the seeds below (this test failed
      so), and every fresh process compiled its NUTS program anew.
    - Every program of fit's NUTS loop with chains run one per device: pmap's unnamed axis printed as
      ``<axis 0x7f…>``, a memory address; before the sampler named it (``CHAIN_AXIS``) this test failed,
      and every CLI fit with 2 chains compiled its two NUTS programs again (7.7 s of a 20.6 s fit)."""
    runs = []
    for hash_seed in ("1", "2"):
        env = {
            **os.environ,
            "PYTHONHASHSEED": hash_seed,
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2",
        }
        proc = subprocess.run(
            [sys.executable, "-c", _LOWERED_DIGESTS], env=env, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    pmapped = [name for name in runs[0] if name.endswith("jit__fun_compile.mlir")]  # pmap's programs
    assert len(pmapped) >= 2, sorted(runs[0])  # the chains' init and advance were dumped
    differ = sorted(name for name in runs[0] if runs[0][name] != runs[1].get(name))
    assert runs[0].keys() == runs[1].keys() and differ == [], differ
