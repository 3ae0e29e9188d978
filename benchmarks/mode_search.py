"""The mode search of fit's start at the mode (``init="auto"`` from 10⁴ points), two ways:

* ``median, all data``: the search before 26 Nov 2026 evening — both optimisers from the prior-median
  start on all the data;
* ``two starts, subset first``: fit's search now — from the prior median and from lengthscales 4× shorter
  (:data:`bayes_rbfn.infer.sampler.SHORT_START_FACTOR`) on a random 10⁴ of the data
  (:data:`bayes_rbfn.defaults.MAP_SEARCH_POINTS`), then on all of it from the lowest end.

For each seed (the seed of the prior-median start and of the subset), on the 3-D or 1-D data of
``benchmarks/ess_vs_numpyro.py`` (N points, M = 64 inducing inputs from ``select_inducing``; fit's default
priors), runs :func:`bayes_rbfn.infer.sampler.laplace_start` both ways, interleaved, and reports the
wall time (the value-and-gradient programs compiled before the first timed call), the calls of the
value and gradient, and where each ended: the potential there, σ and ℓ. The posterior's mode is the
lowest end over every run; an end more than 1 nat above it is a local mode.

    python benchmarks/mode_search.py [--N 100000] [--D 3] [--seeds 0-5] [--out DIR]

Writes ``<out>/mode_search_n<N>_d<D>.md`` (default ``benchmarks/results/mode_search/``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--N", type=int, default=100_000)
    ap.add_argument("--D", type=int, default=3)
    ap.add_argument("--seeds", default="0-5", help="a range a-b or a comma-separated list")
    ap.add_argument("--out", default=str(HERE / "results" / "mode_search"))
    args = ap.parse_args(argv)
    first, _, last = args.seeds.partition("-")
    seeds = list(range(int(first), int(last) + 1)) if last else [int(s) for s in args.seeds.split(",")]

    sys.path.insert(0, str(HERE))
    import ess_vs_numpyro as bench

    jax = bench.start_jax("cpu")
    import bayes_rbfn as br
    from bayes_rbfn.defaults import MAP_SEARCH_POINTS
    from bayes_rbfn.gp.inducing import select_inducing
    from bayes_rbfn.infer import programs, sampler

    X, y = bench.make_data(args.N, args.D)
    Z = np.asarray(select_inducing(X, 64, seed=0))
    problem = br.build_model("sor", X, y, Z=Z)
    calls = {"n": 0}
    by_program = programs.by_program

    def counted(fn):
        compiled = by_program(fn)

        def call(*a):
            calls["n"] += 1
            return compiled(*a)

        return call

    sampler.by_program = counted
    # compile the value-and-gradient programs of both sizes before the timed runs (one step: no mode)
    with contextlib.suppress(FloatingPointError):
        sampler.laplace_start(
            problem.model, problem.args, search_args=problem.subset_args(MAP_SEARCH_POINTS), maxiter=1
        )
    rows, ends = [], []
    load = os.getloadavg()[0]
    for seed in seeds:
        subset = problem.subset_args(MAP_SEARCH_POINTS, seed)
        ways = [("median, all data", None), ("two starts, subset first", subset)]
        for stages, search_args in ways if seed % 2 == 0 else ways[::-1]:
            calls["n"] = 0
            sampler.SHORT_START_SITE = "lengthscale" if search_args is not None else "(none: one start)"
            start = time.perf_counter()
            try:
                values, _ = sampler.laplace_start(problem.model, problem.args, seed, search_args=search_args)
            except FloatingPointError as err:
                rows.append((seed, stages, time.perf_counter() - start, calls["n"], None, str(err)))
                continue
            wall = time.perf_counter() - start
            u = {k: jax.numpy.log(v) for k, v in values.items()}
            from numpyro.infer.util import potential_energy

            pot = float(potential_energy(problem.model, problem.args, {}, u))
            rows.append((seed, stages, wall, calls["n"], pot, values))
            ends.append(pot)
            print(rows[-1][:5], file=sys.stderr, flush=True)
    lowest = min(ends)
    lines = [
        "# Mode search, the median start on all the data against two starts on a subset first: "
        f"N = {args.N:,}, D = {args.D}, M = 64 (`benchmarks/mode_search.py`)",
        "",
        "| seed | search | wall s | value-and-gradient calls | potential − lowest | σ | ℓ | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for seed, stages, wall, n, pot, values in rows:
        if pot is None:
            lines.append(f"| {seed} | {stages} | {wall:.1f} | {n} | | | | failed: {values} |")
            continue
        ls = np.round(np.atleast_1d(np.asarray(values["lengthscale"])), 2).tolist()
        verdict = "mode" if pot - lowest < 1.0 else "local mode"
        lines.append(
            f"| {seed} | {stages} | {wall:.1f} | {n} | {pot - lowest:.3g} | {float(values['noise']):.4f} | "
            f"{ls} | {verdict} |"
        )
    lines += [
        "",
        f"- {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, JAX {jax.__version__}, "
        f"{jax.devices()[0].device_kind}, {os.cpu_count()} cores; 1-minute load {load:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end. The programs were compiled before the first timed run; "
        "the order of the two alternates between seeds.",
        "- Calls: of the value and gradient (each optimiser's steps and the Hessian's central differences), "
        "in both stages together. The lowest end over every run is taken for the mode.",
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"mode_search_n{args.N}_d{args.D}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
