"""What the conditional posterior predictive replicates cost: ``fit("sor")`` wall time, before and after.

Runs ``fit("sor", X, y)`` with 2 chains of 500 warm-up and 500 kept draws (otherwise its defaults: M = 64
k-means inducing inputs, every draw replicated in ``posterior_predictive``) on simulated 1-D data at
N = 1,000 and 10,000, for two source trees: ``--before DIR`` (a checkout of the commit before the change,
whose replicates came from the marginal) and this checkout. Each (tree, N) runs in a fresh process that
fits three times: the first compiles; the second is what a refit costs; the third, with
``posterior_predictive=0``, isolates the replicates' share. The trees alternate, so a change of load hits
both::

    git worktree add /tmp/before <commit>
    python benchmarks/replicates_cost.py --before /tmp/before \
        --out benchmarks/results/replicates_cost/replicates_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time, warnings
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("ignore")
import numpyro
numpyro.enable_x64()
import numpy as np
import bayes_rbfn as br
import bayes_rbfn.models.sor
assert br.__file__.startswith(sys.argv[1]) and bayes_rbfn.models.sor.__file__.startswith(sys.argv[1])
N = int(sys.argv[2])
gen = np.random.default_rng(0)
X = np.sort(gen.uniform(0.0, 10.0, N))
y = np.sin(X) + 0.3 * np.cos(3.0 * X) + 0.2 * gen.standard_normal(N)
out = {}
settings = dict(chains=2, warmup=500, draws=500, seed=0, progress=False, check_diagnostics=False)
for label, extra in (("first", {}), ("second", {}), ("no_replicates", {"posterior_predictive": 0})):
    t = time.perf_counter()
    br.fit("sor", X, y, **settings, **extra)
    out[label] = time.perf_counter() - t
print(json.dumps(out))
"""


def installed_copy(tree: Path, into: Path) -> Path:
    """The package of ``tree`` laid out as installed (``models/`` inside ``bayes_rbfn/``), under ``into``."""
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(tree / "bayes_rbfn", into / "bayes_rbfn")
    shutil.copytree(tree / "models", into / "bayes_rbfn" / "models")
    return into


def run(tree: Path, N: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), str(N)], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="source tree of the commit before")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="replicates_cost_"))
    before = installed_copy(args.before.resolve(), scratch / "before")
    after = installed_copy(Path(__file__).resolve().parents[1], scratch / "after")
    rows = []
    for N in args.sizes:
        for name, tree in (("before", before), ("after", after)):
            result = run(tree, N)
            rows.append({"N": N, "tree": name, **result, "load_1min": os.getloadavg()[0]})
            print(json.dumps(rows[-1]), flush=True)
    report = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "rows": rows}
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
