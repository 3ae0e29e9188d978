"""Planning a fit or a comparison from a data set.

The general defaults, and those of a packaged data set read from its record in the data layer
(:func:`~bayes_rbfn.io.datasets.dataset_defaults`); the choice of model, mean and inducing inputs, the
prediction grid, group selection and the train/test split.

Pure NumPy on a :class:`~bayes_rbfn.io.datasets.Dataset`; nothing is sampled, printed or written. Errors are
``ValueError`` whose message starts with the argument at fault (``"num_inducing 80 is more than ..."``), for
the command line to name its option (:func:`bayes_rbfn.cli.options.option_error`).
"""

from __future__ import annotations

import numpy as np

from bayes_rbfn.io.datasets import Dataset, DatasetDefaults, dataset_defaults

__all__ = [
    "DEFAULT_EXTEND",
    "DEFAULT_GROUPED_MODEL",
    "DEFAULT_KERNEL",
    "DEFAULT_MAX_TREE_DEPTH",
    "DEFAULT_MODEL",
    "GRID_POINTS",
    "GROUP_GRID_POINTS",
    "INTERVALS",
    "MIN_ROWS",
    "check_data_scales",
    "choose_inducing",
    "default_kernel",
    "default_max_tree_depth",
    "default_mean",
    "default_model",
    "keep_groups",
    "packaged_defaults",
    "pool_groups",
    "prediction_grid",
    "prediction_inputs",
    "train_test_split",
]

#: Fewest rows a data set may have.
MIN_ROWS = 3


#: The general defaults of a fit; a packaged data set's own (:func:`packaged_defaults`) replace them.
DEFAULT_MODEL = "sor"


DEFAULT_GROUPED_MODEL = "grouped"


DEFAULT_KERNEL = "se"


DEFAULT_MAX_TREE_DEPTH = 10


DEFAULT_EXTEND = 0.1


#: Prediction inputs on the grid of a one-input fit, and per group for grouped data.
GRID_POINTS = 1000


GROUP_GRID_POINTS = (25, 200)


#: Central intervals of y* in the plots and predictions.csv.
INTERVALS = (0.5, 0.95)


def keep_groups(data: Dataset, max_groups: int | None) -> Dataset:
    """At most ``max_groups`` groups, evenly spread over the group codes (sorted labels)."""
    if max_groups is None or data.group is None or data.num_groups <= max_groups:
        return data
    picks = np.unique(np.round(np.linspace(0, data.num_groups - 1, max_groups)).astype(int))
    keep = np.isin(data.group, picks)
    recode = np.full(data.num_groups, -1)
    recode[picks] = np.arange(picks.size)
    assert data.group_names is not None
    note = (
        f"Kept {picks.size} of {data.num_groups} groups evenly spread over the sorted labels (--max-groups)."
    )
    return Dataset(
        name=data.name,
        X=data.X[keep],
        y=data.y[keep],
        x_names=data.x_names,
        y_name=data.y_name,
        description=data.description,
        group=recode[data.group[keep]],
        group_names=tuple(data.group_names[i] for i in picks),
        dropped=data.dropped,
        notes=(data.notes + " " + note).strip(),
        likelihood=data.likelihood,
    )


def prediction_grid(lo: float, hi: float, extend: float) -> np.ndarray:
    """(GRID_POINTS, 1) inputs from ``lo`` to ``extend`` × (hi − lo) past ``hi``: one input's prediction grid.

    Args:
        lo: the smallest input.
        hi: the largest input.
        extend: how far past ``hi`` to reach, as a fraction of the range.

    Returns:
        The grid, as a column.

    Raises:
        ValueError: naming x_pred_extend, when the grid's end is past what float64 carries through the model.
    """
    return np.linspace(lo, _grid_end(lo, hi, extend), GRID_POINTS)[:, None]


def prediction_inputs(data: Dataset, extend: float) -> tuple[np.ndarray, np.ndarray | None]:
    """X_pred (and its group codes): a grid over the data for one input, else the training inputs.

    With one input a grid over the data reaching ``extend`` × range past the end (per group for grouped
    data); with several inputs the training inputs themselves.
    """
    X = data.X
    if X.shape[1] > 1:
        return X.copy(), None if data.group is None else data.group.copy()
    if data.group is None:
        return prediction_grid(float(X.min()), float(X.max()), extend), None
    per_group = int(np.clip(5000 // data.num_groups, *GROUP_GRID_POINTS))
    blocks, codes = [], []
    for g in range(data.num_groups):
        xg = X[data.group == g, 0]
        lo, hi = float(xg.min()), float(xg.max())
        blocks.append(np.linspace(lo, _grid_end(lo, hi, extend), per_group))
        codes.append(np.full(per_group, g, dtype=np.int64))
    return np.concatenate(blocks)[:, None], np.concatenate(codes)


def check_data_scales(data: Dataset) -> None:
    """Refuse input or target columns whose scale float64 cannot carry through the model, naming the column.

    A ValueError (:func:`bayes_rbfn.gp.validation.check_scale`).
    """
    from bayes_rbfn.gp.validation import INPUT_RELATIVE_SPREAD, INPUT_SCALES, TARGET_SCALES, check_scale

    for j, name in enumerate(data.x_names):
        check_scale(data.X[:, j], f"column {name!r}", INPUT_SCALES, relative_spread=INPUT_RELATIVE_SPREAD)
    check_scale(data.y, f"column {data.y_name!r}", TARGET_SCALES)


def _grid_end(lo: float, hi: float, extend: float) -> float:
    """The last prediction input, ``hi + extend × (hi − lo)``.

    ValueError naming x_pred_extend when it lies past the magnitudes float64 carries through the model
    (:data:`~bayes_rbfn.gp.validation.INPUT_SCALES`).
    """
    from bayes_rbfn.gp.validation import INPUT_SCALES

    with np.errstate(over="ignore", invalid="ignore"):
        end = hi + extend * (hi - lo)
    if not (np.isfinite(end) and abs(end) <= INPUT_SCALES[1]):
        raise ValueError(
            f"x_pred_extend {extend:g}: {extend:g} × the input range {hi - lo:g} reaches {end:g}, past the "
            f"magnitudes float64 carries through the model ({INPUT_SCALES[1]:g}); give a smaller fraction"
        )
    return end


def packaged_defaults(dataset: str) -> DatasetDefaults:
    """A packaged data set's own defaults (:func:`~bayes_rbfn.io.datasets.dataset_defaults`); none for "".

    Args:
        dataset: the packaged data set's name ("" for a user's file).
    """
    return dataset_defaults(dataset) if dataset else DatasetDefaults()


def default_kernel(dataset: str) -> str:
    """The kernel family a fit takes when none is named: the data set's own, else :data:`DEFAULT_KERNEL`."""
    return packaged_defaults(dataset).kernel or DEFAULT_KERNEL


def default_max_tree_depth(dataset: str) -> int:
    """NUTS' tree depth when none is given: the data set's own, else :data:`DEFAULT_MAX_TREE_DEPTH`."""
    return packaged_defaults(dataset).max_tree_depth or DEFAULT_MAX_TREE_DEPTH


def pool_groups(data: Dataset) -> Dataset:
    """The same data without their group codes (an ungrouped model fits all groups as one)."""
    return Dataset(
        name=data.name,
        X=data.X,
        y=data.y,
        x_names=data.x_names,
        y_name=data.y_name,
        description=data.description,
        X_test=data.X_test,
        dropped=data.dropped,
        notes=data.notes,
        likelihood=data.likelihood,
    )


def default_model(
    dataset: str, *, marginalisable: bool, grouped: bool, n_points: int = 0, n_inputs: int = 1
) -> str:
    """The model a fit takes when none is named.

    The weight-space ``rbfn`` for a likelihood that cannot be marginalised, the hierarchical one for grouped
    data, the data set's own for a packaged one; for a user's file with several inputs the exact GP up to
    :data:`~bayes_rbfn.defaults.EXACT_MAX_POINTS` rows and :data:`~bayes_rbfn.defaults.SEVERAL_INPUTS_MODEL`
    (VFE) past them; else :data:`DEFAULT_MODEL`.

    Args:
        dataset: the packaged data set's name ("" for a user's file).
        marginalisable: the likelihood is Gaussian (the GP marginal exists).
        grouped: the data carry group codes.
        n_points: N, the rows fitted.
        n_inputs: D, the input columns.
    """
    from bayes_rbfn.defaults import EXACT_MAX_POINTS, SEVERAL_INPUTS_MODEL

    if not marginalisable:
        return "rbfn"
    if grouped:
        return DEFAULT_GROUPED_MODEL
    if not dataset and n_inputs > 1:
        return "exact" if n_points <= EXACT_MAX_POINTS else SEVERAL_INPUTS_MODEL
    return packaged_defaults(dataset).model or DEFAULT_MODEL


def default_mean(dataset: str, *, takes_linear_mean: bool) -> str:
    """The prior mean a fit takes when none is named: the data set's own where the model takes it.

    Else ``"constant"``.
    """
    mean = packaged_defaults(dataset).mean or "constant"
    return "constant" if mean == "linear" and not takes_linear_mean else mean


def choose_inducing(
    X: np.ndarray,
    num_inducing: int | None,
    default: int | None,
    seed: int,
    *,
    samples_weights: bool = False,
    method: str = "kmeans",
    y: np.ndarray | None = None,
    kernel: str = DEFAULT_KERNEL,
    mean: str = "constant",
) -> np.ndarray:
    """M inducing inputs: k-means, or learned from there (:func:`bayes_rbfn.infer.inducing.inducing_inputs`).

    Args:
        X: (N, D) the inputs the model is fitted to.
        num_inducing: M as asked for, or None for min(``default``, distinct inputs).
        default: the default M (a data set's own), or None for
            :func:`bayes_rbfn.defaults.default_num_inducing` of N and D (and of the device: more on an
            accelerator).
        seed: k-means' seed.
        samples_weights: the model samples its weights (``rbfn``; see ``default_num_inducing``).
        method: ``"kmeans"``, ``"greedy"`` or ``"optimised"`` (the last two search the VFE bound of the
            ``kernel`` family under its default priors, with the prior ``mean`` taken off ``y``).
        y: (N,) the targets, for the learned methods.
        kernel: the kernel family's name, for the learned methods.
        mean: ``"constant"``, ``"zero"`` or ``"linear"``, for the learned methods.

    Returns:
        (M, D) inducing inputs Z.

    Raises:
        ValueError: ``num_inducing`` exceeds the distinct input values, or k-means cannot place M centres.
    """
    # Imported here: the command line imports this module before it has set JAX's process options.
    import jax

    from bayes_rbfn.defaults import default_num_inducing
    from bayes_rbfn.gp.validation import count_distinct_rows
    from bayes_rbfn.infer.inducing import inducing_inputs

    distinct = count_distinct_rows(X)
    if default is None:
        default = default_num_inducing(
            X.shape[0],
            X.shape[1],
            distinct,
            samples_weights=samples_weights,
            accelerator=jax.default_backend() != "cpu",
        )
    if num_inducing is not None and num_inducing > distinct:
        raise ValueError(
            f"num_inducing {num_inducing} is more than the {distinct} distinct input value(s) of the fitted "
            f"rows; choose at most {distinct}"
        )
    M = num_inducing if num_inducing is not None else min(default, distinct)
    try:
        Z, _ = inducing_inputs(
            X,
            y if y is not None else np.zeros(X.shape[0]),
            M,
            method=method,
            kernel=kernel,
            mean=mean,
            seed=seed,
        )
    except ValueError as err:
        raise ValueError(f"num_inducing: {err}") from err
    return np.asarray(Z)


def train_test_split(
    X: np.ndarray, test_fraction: float, *, split: str = "random", seed: int = 0
) -> tuple[np.ndarray, np.ndarray | None]:
    """Row indices (train, test) holding out ``test_fraction`` of the rows, sorted; test is None for 0.

    Args:
        X: (N, D) inputs.
        test_fraction: share of the rows held out, in [0, 1).
        split: ``"random"`` (chosen with ``seed``) or ``"time"`` (the last rows by the single input: a
            forecast).
        seed: the seed of a random split.

    Raises:
        ValueError: a time split of several inputs, a fraction that holds out no row, or fewer than
            :data:`MIN_ROWS` training rows.
    """
    N = X.shape[0]
    if split == "time":
        if X.shape[1] != 1:
            raise ValueError(f"split time: orders the rows by one input column; the data have {X.shape[1]}")
        order = np.argsort(X[:, 0], kind="stable")[::-1]  # order[:n_test] are the latest
    elif split == "random":
        order = np.random.default_rng(seed).permutation(N)
    else:
        raise ValueError(f"split: expected 'random' or 'time', got {split!r}")
    n_test = round(test_fraction * N)
    if test_fraction > 0 and n_test < 1:
        raise ValueError(f"test_fraction {test_fraction:g} of {N} rows holds out no row; raise it or use 0")
    if N - n_test < MIN_ROWS:
        raise ValueError(
            f"test_fraction {test_fraction:g} leaves {N - n_test} training rows of {N}; "
            f"at least {MIN_ROWS} are needed"
        )
    test = np.sort(order[:n_test]) if n_test else None
    return np.sort(order[n_test:]), test
