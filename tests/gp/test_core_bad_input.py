"""Bad input at the public entry points of :mod:`bayes_rbfn.gp.conditional` and the SoR family's marginal
likelihood and LOO conditionals of :mod:`bayes_rbfn.gp.sparse` (docs/mathematics.md#numerics: clear errors,
never NaN).

Every public entry point that takes the offending argument must raise ``ValueError`` whose message names
that argument: mismatched shapes, NaN/inf in X, y, Z or X_test, non-positive or non-finite noise and
kernel hyperparameters (also when a kernel rebuilt as a pytree bypasses the constructor's check),
duplicate inducing points, and more inducing points than distinct inputs. A kernel matrix that cannot be
factorised outside traced code raises :class:`bayes_rbfn.gp.linalg.FactorisationError` (a ``ValueError``).
"""

import inspect

import jax
import numpy as np
import pytest

from bayes_rbfn.gp import conditional, linalg, sparse
from bayes_rbfn.gp import kernels as K

ENTRY_POINTS = {
    "exact_gp": conditional.exact_gp,
    "sor": conditional.sor,
    "rbfn_weights": conditional.rbfn_weights,
    "nystrom_krr": conditional.nystrom_krr,
    "rbf_ridge": conditional.rbf_ridge,
    "log_marginal_likelihood": sparse.log_marginal_likelihood,
    "loo_log_density": sparse.loo_log_density,
}

#: The exact GP's marginal likelihood and LOO conditionals: the entry points above without Z.
EXACT_ENTRY_POINTS = {
    "log_marginal_likelihood": conditional.log_marginal_likelihood,
    "loo_log_density": conditional.loo_log_density,
}

# N = 40, M = 10, D = 2, S = 9 and the exponential kernel on purpose: the same shapes as the
# "2d-ard-exponential" problem of test_identities.py, so the compiled operations are shared.
_rng = np.random.default_rng(7)
_X = _rng.uniform(0.0, 1.0, size=(40, 2))
GOOD = {
    "kernel": K.Exponential([0.3, 0.5], 1.0),
    "X": _X,
    "y": np.sin(3 * _X[:, 0]) + 0.1 * _rng.standard_normal(40),
    "Z": _X[::4],
    "noise": 0.2,
    "X_test": _rng.uniform(0.0, 1.0, size=(9, 2)),
}


def _with(array, index, value):
    array = np.array(array, dtype=np.float64)
    array[index] = value
    return array


def _rebuilt(kernel, **leaves):
    """``kernel`` rebuilt from its pytree leaves with some replaced, skipping __init__ (as JAX does)."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(kernel)
    values = [np.asarray(leaves.get(jax.tree_util.keystr(path).lstrip("."), v)) for path, v in flat]
    return jax.tree_util.tree_unflatten(treedef, values)


_duplicated_X = _X[np.arange(40) % 3]  # 40 rows, only 3 distinct

# (id, overrides of GOOD, regex the message must match). Each case names the argument it breaks first.
BAD = [
    ("X-3d-array", {"X": _X[:, :, None]}, r"^X: expected shape"),
    ("X-no-rows", {"X": np.zeros((0, 2)), "y": np.zeros(0)}, r"^X: needs at least one row"),
    ("X-nan", {"X": _with(_X, (2, 1), np.nan)}, r"^X: contains 1 NaN or infinite"),
    ("X-inf", {"X": _with(_X, (5, 0), np.inf)}, r"^X: contains 1 NaN or infinite"),
    ("X-strings", {"X": np.array([["a", "b"]] * 40)}, r"^X: expected numbers"),
    ("y-too-short", {"y": GOOD["y"][:-1]}, r"^y: has 39 values but X has 40 rows"),
    ("y-two-columns", {"y": np.ones((40, 2))}, r"^y: expected shape \(N,\)"),
    ("y-nan", {"y": _with(GOOD["y"], 4, np.nan)}, r"^y: contains 1 NaN or infinite"),
    ("y-inf", {"y": _with(GOOD["y"], 0, -np.inf)}, r"^y: contains 1 NaN or infinite"),
    ("Z-wrong-dimension", {"Z": GOOD["Z"][:, :1]}, r"^Z: has 1 input dimension\(s\) but X has 2"),
    ("Z-nan", {"Z": _with(GOOD["Z"], (1, 1), np.nan)}, r"^Z: contains 1 NaN or infinite"),
    ("Z-inf", {"Z": _with(GOOD["Z"], (0, 0), np.inf)}, r"^Z: contains 1 NaN or infinite"),
    ("Z-duplicate-rows", {"Z": GOOD["Z"][[0, 1, 1, 2]]}, r"^Z: has 1 duplicate inducing point"),
    (
        "Z-more-than-distinct-inputs",
        {"X": _duplicated_X, "Z": _X[[0, 1, 2, 5]]},
        r"^Z: 4 inducing points is more than the 3 distinct input\(s\) in X",
    ),
    (
        "X_test-wrong-dimension",
        {"X_test": np.ones((3, 3))},
        r"^X_test: has 3 input dimension\(s\) but X has 2",
    ),
    ("X_test-nan", {"X_test": _with(GOOD["X_test"], (0, 0), np.nan)}, r"^X_test: contains 1 NaN or infinite"),
    ("noise-zero", {"noise": 0.0}, r"^noise: must be a finite positive number"),
    ("noise-negative", {"noise": -0.2}, r"^noise: must be a finite positive number"),
    ("noise-nan", {"noise": np.nan}, r"^noise: must be a finite positive number"),
    ("noise-inf", {"noise": np.inf}, r"^noise: must be a finite positive number"),
    ("noise-vector", {"noise": np.full(40, 0.2)}, r"^noise: expected a scalar"),
    (
        "kernel-not-a-kernel",
        {"kernel": lambda a, b: a @ b.T},
        r"^kernel: expected a bayes_rbfn.gp.kernels.Kernel",
    ),
    (
        "kernel-negative-variance",
        {"kernel": _rebuilt(GOOD["kernel"], variance=-1.0)},
        r"Exponential: variance must be positive",
    ),
    (
        "kernel-zero-lengthscale",
        {"kernel": _rebuilt(GOOD["kernel"], lengthscale=[0.3, 0.0])},
        r"Exponential: lengthscale must be positive",
    ),
    (
        "kernel-nan-lengthscale",
        {"kernel": _rebuilt(GOOD["kernel"], lengthscale=[np.nan, 0.5])},
        r"Exponential: lengthscale must be finite",
    ),
    (
        "kernel-lengthscale-wrong-size",
        {"kernel": K.SquaredExponential([0.4, 0.6, 0.5], 1.0)},
        r"SquaredExponential: lengthscale has shape \(3,\); expected a scalar or one value per input",
    ),
    (
        "kernel-composite-negative-period",
        {"kernel": GOOD["kernel"] * _rebuilt(K.Periodic(1.0, 1.0, 0.5), period=-0.5)},
        r"Periodic: period must be positive",
    ),
]


def _call(name, overrides, sparse=True):
    """Call an entry point with GOOD arguments, some overridden; without ``sparse`` its exact-GP form."""
    fn = ENTRY_POINTS[name] if sparse else EXACT_ENTRY_POINTS[name]
    args = {**GOOD, **overrides}
    return fn(**{p: args[p] for p in inspect.signature(fn).parameters if p in args})


def _applies(name, overrides):
    params = inspect.signature(ENTRY_POINTS[name]).parameters
    return all(arg in params for arg in overrides)


CASES = [
    pytest.param(entry, overrides, match, id=f"{entry}-{case}")
    for case, overrides, match in BAD
    for entry in ENTRY_POINTS
    if _applies(entry, overrides)
]


@pytest.mark.parametrize(("entry", "overrides", "match"), CASES)
def test_bad_input_raises_value_error_naming_the_argument(entry, overrides, match):
    with pytest.raises(ValueError, match=match):
        _call(entry, overrides)


@pytest.mark.parametrize("entry", ["log_marginal_likelihood", "loo_log_density"])
@pytest.mark.parametrize("case", ["X-nan", "y-too-short", "noise-zero", "kernel-negative-variance"])
def test_bad_input_exact_path(entry, case):
    """The exact GP's marginal likelihood and LOO conditionals (no Z) validate the same way."""
    _, overrides, match = next(b for b in BAD if b[0] == case)
    with pytest.raises(ValueError, match=match):
        _call(entry, overrides, sparse=False)


def test_good_input_is_accepted():
    """The GOOD arguments themselves are fine for every entry point (so the failures above are specific)."""
    for name in ENTRY_POINTS:
        result = _call(name, {})
        assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(result))


@pytest.mark.parametrize(
    "entry", ["sor", "rbfn_weights", "nystrom_krr", "log_marginal_likelihood", "loo_log_density"]
)
def test_failed_factorisation_raises_outside_jit(entry):
    """K_uu exactly singular (lengthscale 1e8 makes every entry 1.0; jitter=0.0): a clear FactorisationError,
    not NaN."""
    kernel = K.SquaredExponential(1e8, 1.0)
    fn = ENTRY_POINTS[entry]
    args = {**GOOD, "kernel": kernel, "jitter": 0.0}
    kwargs = {p: args[p] for p in inspect.signature(fn).parameters if p in args}
    with pytest.raises(
        linalg.FactorisationError, match=rf"^{entry}: a kernel matrix could not be factorised"
    ):
        fn(**kwargs)
    assert issubclass(linalg.FactorisationError, ValueError)


def test_hyperparameter_errors_at_construction_name_the_argument():
    with pytest.raises(ValueError, match="lengthscale"):
        K.Matern52(lengthscale=[1.0, -1.0])
    with pytest.raises(ValueError, match="variance"):
        K.Exponential(variance=0.0)
    with pytest.raises(ValueError, match="period"):
        K.Periodic(period=np.nan)


NOT_REAL = {
    "string": "a",
    "numeric-string": "0.5",
    "complex": 1 + 2j,
    "complex-array": np.array([0.3 + 0.1j, 0.5]),
    "bool": True,
    "object": object(),
}


@pytest.mark.parametrize("value", NOT_REAL.values(), ids=list(NOT_REAL))
@pytest.mark.parametrize("name", ["lengthscale", "variance"])
def test_hyperparameters_that_are_not_real_numbers_name_the_argument(name, value):
    """A string, complex, bool or object hyperparameter: ValueError naming it, at construction and when a
    kernel rebuilt as a pytree reaches an entry point."""
    with pytest.raises(ValueError, match=rf"SquaredExponential: {name} must be a real number"):
        K.SquaredExponential(**{name: value})
    with pytest.raises(ValueError, match=rf"Exponential: {name} must be a real number"):
        _call("sor", {"kernel": _rebuilt(GOOD["kernel"], **{name: value})})
