"""One argument order for every public entry point of the analytic layer and the distributions.

The shared arguments come in the order ``(kernel, X, y, Z, noise, X_test)``, each function taking the ones
it needs (the exact GP no Z, a distribution no y), and every option after them is keyword-only, so a call
written for one entry point reads the same for its neighbours and a positional call cannot bind an option.
"""

import inspect

import pytest

from bayes_rbfn.gp import conditional, sparse
from bayes_rbfn.models.distributions import ExactGP, SparseGP

#: The order of the arguments the entry points share.
ORDER = ("kernel", "X", "y", "Z", "noise", "X_test")

ENTRY_POINTS = {
    "conditional.exact_gp": conditional.exact_gp,
    "conditional.sor": conditional.sor,
    "conditional.rbfn_weights": conditional.rbfn_weights,
    "conditional.nystrom_krr": conditional.nystrom_krr,
    "conditional.rbf_ridge": conditional.rbf_ridge,
    "conditional.log_marginal_likelihood": conditional.log_marginal_likelihood,
    "conditional.loo_log_density": conditional.loo_log_density,
    "sparse.dtc": sparse.dtc,
    "sparse.fitc": sparse.fitc,
    "sparse.vfe": sparse.vfe,
    "sparse.log_marginal_likelihood": sparse.log_marginal_likelihood,
    "sparse.loo_log_density": sparse.loo_log_density,
    "SparseGP": SparseGP.__init__,
    "ExactGP": ExactGP.__init__,
}


def _problems(fn) -> list[str]:
    """What is wrong with ``fn``'s signature under the rule (empty when it follows it)."""
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    problems = [
        f"{p.name} is positional but not a shared argument" for p in positional if p.name not in ORDER
    ]
    problems += [f"{p.name} has a default but is positional" for p in positional if p.default is not p.empty]
    names = [p.name for p in positional if p.name in ORDER]
    if names != sorted(names, key=ORDER.index):
        problems.append(f"shared arguments in the order {names}, not {[n for n in ORDER if n in names]}")
    return problems


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_entry_point_follows_the_argument_order(name):
    assert _problems(ENTRY_POINTS[name]) == []


def test_every_entry_point_takes_kernel_first_and_noise_after_the_data():
    """The shared arguments each entry point takes, written out: a reordering shows here too."""
    taken = {
        name: tuple(p for p in inspect.signature(fn).parameters if p in ORDER)
        for name, fn in ENTRY_POINTS.items()
    }
    exact, sparse_fit, sparse_predict = (
        ("kernel", "X", "y", "noise"),
        ("kernel", "X", "y", "Z", "noise"),
        ORDER,
    )
    assert taken["conditional.exact_gp"] == (*exact, "X_test")
    assert taken["conditional.log_marginal_likelihood"] == taken["conditional.loo_log_density"] == exact
    assert taken["sparse.log_marginal_likelihood"] == taken["sparse.loo_log_density"] == sparse_fit
    assert taken["conditional.rbfn_weights"] == sparse_fit
    for name in ("conditional.sor", "conditional.nystrom_krr", "conditional.rbf_ridge"):
        assert taken[name] == sparse_predict
    for name in ("sparse.dtc", "sparse.fitc", "sparse.vfe"):
        assert taken[name] == sparse_predict
    assert taken["SparseGP"] == ("kernel", "X", "Z", "noise")
    assert taken["ExactGP"] == ("kernel", "X", "noise")


def test_the_check_rejects_a_reordered_or_positional_option_signature():
    """The rule can fail: noise before Z, or an option that a positional call could bind, is reported."""

    def noise_before_z(kernel, X, y, noise, Z):
        pass

    def positional_option(kernel, X, y, Z, noise, jitter=None):
        pass

    def follows(kernel, X, y, Z, noise, *, method="dtc"):
        pass

    assert any("order" in p for p in _problems(noise_before_z))
    assert any("jitter" in p for p in _problems(positional_option))
    assert _problems(follows) == []
