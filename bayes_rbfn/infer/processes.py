"""A fit whose data are spread over processes: each process holds only its own rows of X and y.

In a run of several processes joined by :func:`bayes_rbfn.runtime.initialize_distributed` (one per host),
``fit(model, X_local, y_local, shard=True, X_pred=...)`` in every process fits the model to the rows of
all of them. What needs the whole data set is taken from small summaries exchanged between the processes
(:func:`multihost_utils.process_allgather <jax.experimental.multihost_utils.process_allgather>`):

* the number of rows, each column's range and mean, the mean and spread of y (the default priors' scales,
  the constant prior mean, the inputs' centre), so every process builds the same model;
* a subsample of every process's rows, the same in all of them, from which the inducing inputs are chosen
  (:func:`common_subsample`), unless they are given.

The rows themselves become one global array split along the mesh's data axis
(:func:`bayes_rbfn.gp.streaming.process_rows`): the O(NM²) pass, its reverse pass, the LOO pass and the
predictive moments sum over every process's devices inside XLA's collectives, in the fixed block order of
:mod:`bayes_rbfn.gp.streaming`, so a run of P processes computes the numbers of one process with as many
devices. NUTS then runs the same chain in every process (the same key, the same replicated potential).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import jax
import numpy as np

__all__ = [
    "DataSummary",
    "check_same",
    "common_subsample",
    "data_summary",
    "exact_mean",
    "gathered_digest",
    "spread_over_processes",
    "writes_files",
]


def writes_files() -> bool:
    """Whether this process writes the run's files: process 0 of a multi-process run (or the only one)."""
    return jax.process_index() == 0


def spread_over_processes(mesh: Any) -> bool:
    """Whether a fit on ``mesh`` takes process-local data: several processes, and the data sharded."""
    return mesh is not None and jax.process_count() > 1


def _gathered(value: Any) -> np.ndarray:
    """(processes, …): this process's ``value`` and every other's, in process order."""
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(np.asarray(value)))


#: Offset of the binary exponents float64 values take (``numpy.frexp``: 2^-1073 … 2^1024), and their count.
_EXPONENT_OFFSET, _EXPONENTS = 1074, 2099


def _exponent_sums(values: np.ndarray) -> np.ndarray:
    """(2, 2099) int64: the float64 ``values`` as integers, summed exactly per binary exponent.

    Each value is m · 2^(e − 53) with m = frexp mantissa · 2^53 an integer; m = 2^26 hi + lo with
    0 ≤ lo < 2^26 and |hi| < 2^27, so the per-exponent sums of hi and lo fit int64 for up to 2^36 values.
    """
    mantissa, exponent = np.frexp(np.asarray(values, dtype=np.float64).ravel())
    whole = (mantissa * 2.0**53).astype(np.int64)
    bins = exponent + _EXPONENT_OFFSET
    sums = np.zeros((2, _EXPONENTS), dtype=np.int64)
    np.add.at(sums[0], bins, whole >> 26)
    np.add.at(sums[1], bins, whole & ((1 << 26) - 1))
    return sums


def _exact_total(sums: np.ndarray) -> Fraction:
    """The exact sum the per-exponent integer sums of every process stand for."""
    hi, lo = sums[..., 0, :].sum(axis=0), sums[..., 1, :].sum(axis=0)
    total = Fraction(0)
    for b in np.flatnonzero((hi != 0) | (lo != 0)):
        total += Fraction((int(hi[b]) << 26) + int(lo[b])) * Fraction(2) ** (int(b) - _EXPONENT_OFFSET - 53)
    return total


def exact_mean(values: np.ndarray, count: int) -> float:
    """The mean of the values of every process, ``values`` being this process's, correctly rounded.

    The sum is exact whatever the order of the values or how they are split between processes, so a run
    of several processes and one process holding all the values get the same number.

    Args:
        values: this process's values (any shape; all are summed).
        count: the number of values of all processes.

    Returns:
        The float64 nearest the mean.
    """
    return float(_exact_total(_gathered(_exponent_sums(values))) / int(count))


@dataclass(frozen=True)
class DataSummary:
    """What the model needs of the whole data set, computed from every process's rows.

    Attributes:
        num_points: N, the rows of all processes.
        local_points: the rows of each process (equal).
        x_min: (D,) each input column's smallest value.
        x_max: (D,) each input column's largest value.
        x_mean: (D,) each input column's mean.
        y_mean: the mean of y.
        y_sd: the standard deviation of y.
    """

    num_points: int
    local_points: int
    x_min: np.ndarray
    x_max: np.ndarray
    x_mean: np.ndarray
    y_mean: float
    y_sd: float


def data_summary(X: np.ndarray, y: np.ndarray) -> DataSummary:
    """The :class:`DataSummary` of the rows of every process, from this process's rows.

    Means and the spread come from exactly rounded sums (:func:`exact_mean`), so they do not depend on
    how the rows are split between processes.

    Args:
        X: (n, D) this process's inputs.
        y: (n,) this process's targets.

    Returns:
        The summary of all processes' rows.

    Raises:
        ValueError: the processes hold different numbers of rows or of input columns.
    """
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    rows = _gathered(np.asarray([X.shape[0], X.shape[1]]))
    if np.any(rows[:, 1] != X.shape[1]):
        raise ValueError(f"X: the processes hold inputs of different widths: {rows[:, 1].tolist()} columns")
    if np.any(rows[:, 0] != X.shape[0]):
        raise ValueError(
            f"X: every process must hold the same number of rows (they hold {rows[:, 0].tolist()}); "
            "split the data into equal parts"
        )
    N = int(rows[:, 0].sum())
    ranges = _gathered(np.stack([X.min(axis=0), X.max(axis=0)]))
    y_mean = exact_mean(y, N)
    return DataSummary(
        num_points=N,
        local_points=X.shape[0],
        x_min=ranges[:, 0].min(axis=0),
        x_max=ranges[:, 1].max(axis=0),
        x_mean=np.asarray([exact_mean(X[:, d], N) for d in range(X.shape[1])]),
        y_mean=y_mean,
        y_sd=float(np.sqrt(exact_mean(np.square(y - y_mean), N))),
    )


def _digest(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return np.frombuffer(
        hashlib.sha256(str((a.dtype.str, a.shape)).encode() + a.tobytes()).digest(), np.uint8
    )


def gathered_digest(value: jax.Array) -> bytes:
    """A SHA-256 of a global array whose rows are spread over processes, each hashing only its own rows.

    Args:
        value: a global array (:func:`bayes_rbfn.gp.streaming.process_rows`).

    Returns:
        The digest of every process's digest, in process order: the same in every process.
    """
    shards = sorted(value.addressable_shards, key=lambda shard: shard.index[0].start or 0)
    mine = _digest(np.concatenate([np.asarray(shard.data) for shard in shards]))
    return hashlib.sha256(_gathered(mine).tobytes()).digest()


def check_same(value: Any, name: str) -> None:
    """Raise unless ``value`` is the same array in every process (the inputs every process must share).

    Args:
        value: an array.
        name: the argument it came from, for the message.

    Raises:
        ValueError: the processes hold different values.
    """
    digests = _gathered(_digest(np.asarray(value, dtype=np.float64)))
    if np.any(digests != digests[0]):
        raise ValueError(f"{name}: differs between the processes; give every process the same {name}")


def common_subsample(X: np.ndarray, size: int, seed: int) -> np.ndarray:
    """About ``size`` rows drawn from every process's rows, the same array in every process.

    Each process draws ⌈size / P⌉ of its rows (all of them if it has fewer) with a generator seeded by
    ``seed`` and its rank; the draws are gathered in process order.

    Args:
        X: (n, D) this process's inputs.
        size: the rows wanted in all.
        seed: the seed of the draw.

    Returns:
        (k · P, D) inputs, identical in every process.
    """
    X = np.asarray(X)
    per_process = min(X.shape[0], -(-int(size) // jax.process_count()))
    rng = np.random.default_rng([int(seed), jax.process_index()])
    mine = X[np.sort(rng.choice(X.shape[0], per_process, replace=False))]
    gathered = _gathered(mine)
    return gathered.reshape(-1, X.shape[1])
