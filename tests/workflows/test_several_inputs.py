"""The defaults of a fit with several inputs: the model chosen from N, M chosen from N and D, and a model
that does not depend on the units of any input column.

* ``default_model``: a CSV file with several inputs gets the exact GP up to EXACT_MAX_POINTS rows, VFE
  past them; one input, packaged data sets, grouped data
  and non-Gaussian likelihoods keep their own defaults.
* ``default_num_inducing``: with several inputs M is the largest multiple of 32 with N·M² within the
  budget, clamped to [64, 256] and by the distinct inputs (on an accelerator a larger budget, up to
  512); one input and the rbfn model (whose weights NUTS samples) keep 64.
* Units: multiplying an input column by c changes nothing but that lengthscale's units — with the
  default priors (scaled by each column's range) and the default inducing inputs (k-means on columns
  scaled by their spread), the log joint density at the correspondingly scaled lengthscale differs by
  exactly the Jacobian −log c, compared in float64 at three points of the parameter space.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close
from numpyro.infer.util import log_density

import bayes_rbfn
from bayes_rbfn.defaults import (
    ACCELERATOR_INDUCING_WORK,
    ACCELERATOR_MAX_NUM_INDUCING,
    DEFAULT_NUM_INDUCING,
    EXACT_MAX_POINTS,
    INDUCING_WORK,
    MAX_NUM_INDUCING,
    SEVERAL_INPUTS_MODEL,
    default_num_inducing,
)
from bayes_rbfn.infer import fitting
from bayes_rbfn.workflows.planning import default_model


@pytest.mark.parametrize(
    ("dataset", "gaussian", "grouped", "N", "D", "expected"),
    [
        ("", True, False, 300, 6, "exact"),
        ("", True, False, EXACT_MAX_POINTS, 2, "exact"),
        ("", True, False, EXACT_MAX_POINTS + 1, 2, SEVERAL_INPUTS_MODEL),
        ("", True, False, 9000, 4, SEVERAL_INPUTS_MODEL),
        ("", True, False, 100, 1, "sor"),
        ("co2", True, False, 2000, 1, "dtc"),
        ("", False, False, 100, 3, "rbfn"),
        ("", True, True, 100, 3, "grouped"),
    ],
    ids=["small", "at-limit", "past-limit", "large", "one-input", "packaged", "counts", "grouped"],
)
def test_default_model_follows_n_and_d(dataset, gaussian, grouped, N, D, expected):
    chosen = default_model(dataset, marginalisable=gaussian, grouped=grouped, n_points=N, n_inputs=D)
    assert chosen == expected


BUDGETS = {
    "cpu": (False, INDUCING_WORK, MAX_NUM_INDUCING),
    "accelerator": (True, ACCELERATOR_INDUCING_WORK, ACCELERATOR_MAX_NUM_INDUCING),
}


@pytest.mark.parametrize("device", BUDGETS)
@pytest.mark.parametrize("N", [260, 400, 691, 927, 2000, 5000, 8611, 10**5, 10**6])
def test_default_num_inducing_is_the_largest_multiple_of_32_within_the_budget(N, device):
    accelerator, work, ceiling = BUDGETS[device]
    M = default_num_inducing(N, 8, accelerator=accelerator)
    if M == N:  # capped by the rows themselves
        assert N < ceiling and N * N**2 <= work
        return
    assert M % 32 == 0 and DEFAULT_NUM_INDUCING <= M <= ceiling
    if DEFAULT_NUM_INDUCING < M:
        assert N * M**2 <= work
    if M < ceiling:
        assert N * (M + 32) ** 2 > work


def test_default_num_inducing_on_an_accelerator_gives_the_benchmarks_choice():
    assert default_num_inducing(8611, 4, accelerator=True) == 512
    assert default_num_inducing(7373, 8, accelerator=True) == 512
    assert default_num_inducing(10**5, 8, accelerator=True) == 128
    assert default_num_inducing(500, 1, accelerator=True) == DEFAULT_NUM_INDUCING
    assert default_num_inducing(300, 5, accelerator=True) == 300


def test_default_num_inducing_of_one_input_of_the_rbfn_and_of_few_points():
    assert default_num_inducing(500, 1) == DEFAULT_NUM_INDUCING
    assert default_num_inducing(500, 5, samples_weights=True) == DEFAULT_NUM_INDUCING
    assert default_num_inducing(927, 8) == 128
    assert default_num_inducing(50, 3) == 50
    assert default_num_inducing(120, 3) == 120
    assert default_num_inducing(400, 3, distinct=40) == 40
    X = np.random.default_rng(0).normal(size=(927, 8))
    assert fitting.default_num_inducing(X) == 128


@pytest.mark.parametrize("model", ["vfe", "exact"])
def test_the_model_does_not_depend_on_an_input_columns_units(model):
    rng = np.random.default_rng(4)
    X = np.column_stack([rng.uniform(0.0, 1.0, 150), rng.normal(size=150), rng.uniform(-3, 3, 150)])
    y = np.sin(3.0 * X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=150)
    c = np.array([1e3, 1.0, 1e-2])
    options = {} if model == "exact" else {"num_inducing": 20}
    base = bayes_rbfn.build_model(model, X, y, **options)
    scaled = bayes_rbfn.build_model(model, X * c, y, **options)
    if model != "exact":
        assert_close(np.asarray(scaled.Z), np.asarray(base.Z) * c)
    jacobian = -np.sum(np.log(c))
    for lengthscale in ([0.3, 1.0, 2.0], [0.05, 4.0, 0.7], [1.5, 0.2, 6.0]):
        values = {"lengthscale": np.asarray(lengthscale), "variance": 0.8, "noise": 0.2}
        at_base, _ = log_density(base.model, base.args, {}, values)
        at_scaled, _ = log_density(
            scaled.model, scaled.args, {}, {**values, "lengthscale": values["lengthscale"] * c}
        )
        assert_close(float(at_scaled), float(at_base) + jacobian, rtol=1e-9)
