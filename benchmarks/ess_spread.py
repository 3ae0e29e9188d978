"""ESS spread of the sor fits of tests/infer/test_mcmc.py over seed offsets and XLA instruction sets.

A fixed seed is not a fixed chain across machines (tests/stochastic.py), so the ESS floor that
``assert_converged`` asserts on those fits has to hold over the spread that seeds and rounding give, not
at one seed. This script runs exactly the fits the test module checks against that floor, with the test
module's data and settings, for several values of ``BAYES_RBFN_TEST_SEED`` (which shifts the data's seed
too, so each offset is another data set):

* ``median``: ``full_fits``'s sor fit (``fit("sor")``, prior-median start, 700 warm-up iterations, seed 2);
* ``map``: ``map_start_fit`` (``init="map"``, 300 warm-up iterations, seed 4);
* ``user``: ``user_sparse_gp_fit`` (NumPyro's ``MCMC`` on a model ending in ``br.SparseGP``, 700 warm-up
  iterations, seed 9),

and records the bulk, folded (the two ``assert_converged`` checks) and tail ESS of ℓ, s² and σ, and the
divergences. Each instruction set runs in its own Python process, since XLA reads ``XLA_FLAGS`` once at
start-up: ``native`` (XLA's default for this CPU) and ``SSE4_2`` (``--xla_cpu_max_isa=SSE4_2``, the
rounding of an older processor). The sampler defaults to the test module's ``SOR_SAMPLER``; the options
override it, to measure a candidate before changing the tests. Appends one JSON line per (ISA, offset,
fit) to ``--out`` and prints the table of what it holds; ``--table`` only prints it.

    python benchmarks/ess_spread.py --offsets 0-11 --out /tmp/ess.jsonl
    # the test module's settings before SOR_SAMPLER: 2 chains × 1,000 draws, target_accept 0.8, sequential
    python benchmarks/ess_spread.py --chains 2 --draws 1000 --target-accept 0.8 \\
        --user-chain-method sequential --out /tmp/ess_before.jsonl
    python benchmarks/ess_spread.py --table benchmarks/results/ess_spread/ess_spread.jsonl

(about 20 s per fit on 2 cores, so 12 offsets × 2 ISAs × 3 fits take some 25 minutes). Results of
24 Nov 2026: ``benchmarks/results/ess_spread/ess_spread.md`` and ``.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ISAS = {"native": None, "SSE4_2": "--xla_cpu_max_isa=SSE4_2"}
FITS = ("median", "map", "user")
NAMES = ("lengthscale", "variance", "noise")
#: The seed base and warm-up of the three fits in tests/infer/test_mcmc.py.
TEST_FITS = {"median": (2, 700), "map": (4, 300), "user": (9, 700)}
#: The test module's ``SOR_SAMPLER`` (and the user fit's ``chain_method``): the defaults of the options.
TEST_SAMPLER = {"chains": 6, "draws": 1000, "target_accept": 0.9, "user_chain_method": "vectorized"}
Z8 = np.linspace(0.2, 4.8, 8)


def _data(offset: int, n: int = 40, base: int = 3):
    """tests/infer/test_mcmc.py's ``_data()`` under ``BAYES_RBFN_TEST_SEED=offset``."""
    gen = np.random.default_rng(base + offset)
    X = np.sort(gen.uniform(0.0, 5.0, n))
    y = np.sin(2.0 * X) + 0.5 * X / 5 + 0.2 * gen.standard_normal(n)
    return X, y


def _run_fit(
    kind: str,
    offset: int,
    chains: int,
    draws: int,
    warmup: int,
    chain_method: str,
    target_accept: float,
):
    import arviz as az
    import jax

    import bayes_rbfn as br

    base = TEST_FITS[kind][0]
    X, y = _data(offset)
    if kind in ("median", "map"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", br.ConvergenceWarning)
            return br.fit(
                "sor",
                X,
                y,
                Z=Z8,
                chains=chains,
                draws=draws,
                warmup=warmup,
                seed=base + offset,
                init=kind,
                target_accept=target_accept,
                X_pred=np.array([-1.0, 0.5, 2.5, 4.5, 6.0, 9.0]),
                progress=False,
            )
    import numpyro
    from numpyro.infer import MCMC, NUTS

    from bayes_rbfn.gp.kernels import SquaredExponential
    from bayes_rbfn.models.families import data_scales, get_family

    priors = get_family("se").default_priors(data_scales(X[:, None], y))
    mean = float(np.mean(y))

    def model(X, Z, y=None):
        ell = numpyro.sample("lengthscale", priors["lengthscale"])
        s2 = numpyro.sample("variance", priors["variance"])
        noise = numpyro.sample("noise", priors["noise"])
        kernel = SquaredExponential(lengthscale=ell, variance=s2)
        numpyro.sample("y", br.SparseGP(kernel, X, Z, noise, mean=mean), obs=y)

    mcmc = MCMC(
        NUTS(model, target_accept_prob=target_accept),
        num_warmup=warmup,
        num_samples=draws,
        num_chains=chains,
        chain_method=chain_method,
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(base + offset), X[:, None], Z8[:, None], y=y)
    return az.from_numpyro(mcmc)


def _worker(args) -> None:
    from bayes_rbfn import runtime

    runtime.enable_x64()
    runtime.limit_blas_threads()
    import arviz as az

    for offset in args.offsets:
        for kind in args.fits:
            chains, draws, warmup = args.chains, args.draws, args.warmup or TEST_FITS[kind][1]
            start = time.perf_counter()
            idata = _run_fit(kind, offset, chains, draws, warmup, args.user_chain_method, args.target_accept)
            seconds = time.perf_counter() - start
            row = {"isa": args.isa, "offset": offset, "fit": kind, "chains": chains, "draws": draws}
            row.update(warmup=warmup, target_accept=args.target_accept, seconds=round(seconds, 1))
            row["user_chain_method"] = args.user_chain_method
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for name in NAMES:
                    x = np.asarray(idata.posterior[name].values, dtype=float)
                    for method in ("bulk", "folded", "tail"):
                        row[f"{name}_{method}"] = round(float(az.ess(x, method=method)), 1)
            row["divergences"] = int(idata.sample_stats["diverging"].values.sum())
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)


def _table(paths: list[str]) -> str:
    """Markdown, one table per sampler setting: per offset and ISA, the lowest bulk / folded / tail ESS over
    (ℓ, s², σ) of each fit, and its divergences."""
    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines() if line.strip()]
    out = []
    settings = sorted({(r["chains"], r["draws"], r["target_accept"]) for r in rows}, reverse=True)
    for chains, draws, target_accept in settings:
        these = [
            r for r in rows if (r["chains"], r["draws"], r["target_accept"]) == (chains, draws, target_accept)
        ]
        out += [
            f"### {chains} chains × {draws} draws, target_accept {target_accept}",
            "",
            "lowest ESS over (ℓ, s², σ): bulk / folded / tail (divergences of "
            f"{chains * draws:,} transitions)",
            "",
            "| offset | ISA | " + " | ".join(FITS) + " |",
            "|---|---|" + "---|" * len(FITS),
        ]
        cells = {}
        for r in these:
            ess = [f"{min(r[f'{n}_{m}'] for n in NAMES):.0f}" for m in ("bulk", "folded", "tail")]
            cells[r["offset"], r["isa"], r["fit"]] = f"{' / '.join(ess)} ({r['divergences']})"
        for offset, isa in sorted(
            {(r["offset"], r["isa"]) for r in these}, key=lambda k: (k[0], k[1] != "native")
        ):
            line = [cells.get((offset, isa, fit), "—") for fit in FITS]
            out.append(f"| {offset} | {isa} | " + " | ".join(line) + " |")
        out.append("")
    return "\n".join(out)


def _offsets(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--offsets", type=_offsets, default=_offsets("0-11"), help="e.g. 0-11 or 0,3,7")
    ap.add_argument("--isas", default="native,SSE4_2", help=f"comma-separated, of {', '.join(ISAS)}")
    ap.add_argument("--fits", default=",".join(FITS), help=f"comma-separated, of {', '.join(FITS)}")
    ap.add_argument("--chains", type=int, default=TEST_SAMPLER["chains"])
    ap.add_argument("--draws", type=int, default=TEST_SAMPLER["draws"], help="draws per chain")
    ap.add_argument("--warmup", type=int, default=None, help="all three fits (default: the test's)")
    ap.add_argument("--target-accept", type=float, default=TEST_SAMPLER["target_accept"])
    ap.add_argument("--user-chain-method", default=TEST_SAMPLER["user_chain_method"], help="NumPyro's")
    ap.add_argument("--table", nargs="+", metavar="JSONL", help="print the table of these files and exit")
    ap.add_argument("--out", default="ess_spread.jsonl", help="JSON lines, appended to")
    ap.add_argument("--isa", help=argparse.SUPPRESS)  # set in the worker processes
    args = ap.parse_args(argv)
    args.fits = [f for f in args.fits.split(",") if f]
    if args.table:
        print(_table(args.table))
        return
    if args.isa is not None:
        _worker(args)
        return
    for isa in args.isas.split(","):
        env = dict(os.environ)
        env.pop("XLA_FLAGS", None)
        if ISAS[isa]:
            env["XLA_FLAGS"] = ISAS[isa]
        cmd = [sys.executable, __file__, "--isa", isa, "--out", args.out, "--fits", ",".join(args.fits)]
        cmd += ["--offsets", ",".join(map(str, args.offsets))]
        cmd += ["--chains", str(args.chains), "--draws", str(args.draws)]
        cmd += ["--target-accept", str(args.target_accept), "--user-chain-method", args.user_chain_method]
        if args.warmup:
            cmd += ["--warmup", str(args.warmup)]
        subprocess.run(cmd, env=env, check=True)
    print(_table([args.out]))


if __name__ == "__main__":
    main()
