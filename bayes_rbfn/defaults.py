"""Defaults shared by the driver and the command line, in a module that imports nothing heavy.

The CLI builds its parser before JAX may load (XLA's options must be set first), so the constants both
layers need live here rather than in :mod:`bayes_rbfn.infer.fitting`.
"""

from __future__ import annotations

__all__ = [
    "ACCELERATOR_INDUCING_WORK",
    "ACCELERATOR_MAX_NUM_INDUCING",
    "DEFAULT_NUM_INDUCING",
    "DENSE_MASS_MAX_HYPERPARAMETERS",
    "DENSE_MASS_MAX_PARAMS",
    "EXACT_MAX_POINTS",
    "INDUCING_WORK",
    "INITS",
    "MAP_SEARCH_POINTS",
    "MAP_START_MIN_POINTS",
    "MAX_NUM_INDUCING",
    "MAX_TREE_DEPTH",
    "SEVERAL_INPUTS_MODEL",
    "default_num_inducing",
]

#: Inducing inputs chosen when neither Z nor num_inducing is given for one input (capped by the distinct
#: inputs), and the fewest :func:`default_num_inducing` gives for several.
DEFAULT_NUM_INDUCING = 64

#: With several inputs, M is the largest multiple of 32 whose O(N·M²) work per log-density gradient,
#: N·M², stays within this budget (the work of N = 927 points at M = 128), between
#: :data:`DEFAULT_NUM_INDUCING` and :data:`MAX_NUM_INDUCING`: more centres where the data are few, and
#: the floor where they are many (the work then grows with N alone). See :func:`default_num_inducing`.
INDUCING_WORK = 927 * 128**2

#: The most inducing inputs :func:`default_num_inducing` chooses.
MAX_NUM_INDUCING = 256

#: On an accelerator (a GPU), the same rule's budget: the work of N = 8,611 points at M = 512. A GPU runs
#: an O(N·M²) gradient of this size at about the cost of a small one (the step is bound by latency, not by
#: flops), and with several inputs the fit's quality grows with M (docs/cli.md, *Several inputs*).
ACCELERATOR_INDUCING_WORK = 8611 * 512**2

#: The most inducing inputs :func:`default_num_inducing` chooses on an accelerator.
ACCELERATOR_MAX_NUM_INDUCING = 512

#: With several inputs and a Gaussian likelihood, a CSV file of at most this many rows gets the exact GP
#: by default: its O(N³/3) Cholesky then costs no more than the sparse model's O(N·M²) budget
#: (:data:`INDUCING_WORK`; N ≤ 357), and nothing is approximated.
EXACT_MAX_POINTS = int((3 * INDUCING_WORK) ** (1 / 3))

#: The sparse model a CSV file with several inputs and more rows than :data:`EXACT_MAX_POINTS` gets.
SEVERAL_INPUTS_MODEL = "vfe"

#: How NUTS starts (``fit(init=...)``): "median" — NumPyro's ``init_to_median`` and an identity mass
#: matrix; "map" — the posterior mode with a Laplace mass matrix
#: (:func:`bayes_rbfn.infer.sampler.laplace_start`); "auto" (the default) — "map" from
#: :data:`MAP_START_MIN_POINTS` data points on, "median" below.
INITS = ("auto", "median", "map")

#: Data points from which ``init="auto"`` starts at the mode. The median start spends many warm-up
#: gradients on deep trees of small steps while the mass matrix is still the identity; the mode search
#: costs a compilation whose time does not grow with N. From this many points on the mode start saves more
#: than it costs, in wall time and in ESS/s; below, it gains little, and every chain starting at one point
#: leaves R̂ without dispersed starts, so the median start stays the default there (docs/library.md).
MAP_START_MIN_POINTS = 10_000

#: Data points of the first stage of the mode search on a large data set: from twice as many on, fit
#: searches the mode from both starts of :func:`bayes_rbfn.infer.sampler.laplace_start` on a random subset
#: of this size first, and from the lowest end on all the data after. The two starts cost each gradient
#: N/10⁴ times less there, so the search takes about as long as the median start alone on all the data,
#: and reaches the mode where that start alone can end in a local mode, from which a fit takes far longer
#: (docs/library.md).
MAP_SEARCH_POINTS = 10_000

#: The largest NUTS tree depth accepted (``fit(max_tree_depth=...)``, ``--max-tree-depth``): a tree of
#: depth d takes up to 2^d − 1 leapfrog steps, and NumPyro counts them in 32-bit integers, which hold
#: 2^30 but not 2^31.
MAX_TREE_DEPTH = 30


def default_num_inducing(
    n_points: int,
    n_inputs: int,
    distinct: int | None = None,
    *,
    samples_weights: bool = False,
    accelerator: bool = False,
) -> int:
    """The number of inducing inputs M when none is given.

    One input, or a model whose NUTS samples the M weights (``rbfn``): :data:`DEFAULT_NUM_INDUCING`.
    Several: the largest multiple of 32 with
    N·M² ≤ :data:`INDUCING_WORK`, within [:data:`DEFAULT_NUM_INDUCING`, :data:`MAX_NUM_INDUCING`] — a
    function of D inputs needs more centres to be covered than one of a single input, and the budget
    keeps the cost of a NUTS step of the O(N·M²) likelihood what it is at N ≈ 10³, M = 128. Never more
    than the distinct inputs. On an accelerator the budget and the ceiling are
    :data:`ACCELERATOR_INDUCING_WORK` and :data:`ACCELERATOR_MAX_NUM_INDUCING`.

    Args:
        n_points: N, the rows fitted.
        n_inputs: D, the input columns.
        distinct: the distinct input rows (default N).
        samples_weights: the model samples the weights α (each centre is then a sampled dimension).
        accelerator: JAX computes on an accelerator (a GPU), not the CPU.

    Returns:
        M ≥ 1.
    """
    M = DEFAULT_NUM_INDUCING
    if n_inputs > 1 and not samples_weights:
        work, ceiling = (
            (ACCELERATOR_INDUCING_WORK, ACCELERATOR_MAX_NUM_INDUCING)
            if accelerator
            else (INDUCING_WORK, MAX_NUM_INDUCING)
        )
        by_work = 32 * int((work / max(n_points, 1)) ** 0.5 // 32)
        M = min(ceiling, max(DEFAULT_NUM_INDUCING, by_work))
    return max(1, min(M, n_points if distinct is None else distinct))


#: ``dense_mass=None`` (the default, for ``fit`` and the command line alike) takes a dense mass matrix
#: when the model samples at most this many unconstrained values: a few hyperparameters, whose posterior
#: is correlated (lengthscale with variance) and whose dense estimate the warm-up affords (more ESS per
#: gradient than the diagonal one gives). Above it (the rbfn's
#: weights, the grouped model's per-group values) the mass matrix is diagonal.
DENSE_MASS_MAX_PARAMS = 10

#: ``dense_mass=None`` also takes a dense mass matrix for a model that samples hyperparameters alone (no
#: weights, no raw variables of a non-centred parameterisation), up to this many values: the D + 2 of an
#: ARD kernel on up to 22 inputs, or the co2 family's 9 with its noise and linear mean, whose posterior is
#: correlated across the components (a diagonal mass matrix takes more leapfrog steps per draw there).
DENSE_MASS_MAX_HYPERPARAMETERS = 24
