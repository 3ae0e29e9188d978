"""The main job, ``bayes-rbfn fit`` with no arguments, timed as a newcomer runs it, at several seeds.

Each seed runs in a fresh process with JAX's persistent compilation cache pointed at an empty folder, so
every run pays its imports and its compilation, as a first run on a new machine does. Reported per seed:
the wall time of the whole process (``/usr/bin/time``-like, from outside), the sampling time the report
gives, r_hat, the bulk and tail ESS, the divergent transitions, the draws at the maximum tree depth and the
report's verdict. Writes ``<out>/main_job.md`` and ``.json`` (default ``benchmarks/results/main_job/``).
Run it alone on the machine: anything else running makes the times meaningless.

    python benchmarks/main_job.py [--seeds 0 1 2 3 4] [--out DIR] [-- extra fit options]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PATTERNS = {
    "r_hat": r"r_hat ≤ ([0-9.]+)",
    "bulk_ess": r"bulk ESS ≥ ([0-9]+)",
    "tail_ess": r"tail ESS ≥ ([0-9]+)",
    "divergent": r"([0-9]+) divergent transition",
}


def run_seed(seed: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as work:
        out, cache = Path(work) / "fit", Path(work) / "cache"
        env = {**os.environ, "BAYES_RBFN_CACHE_DIR": str(cache), "MPLBACKEND": "Agg"}
        argv = [sys.executable, "-m", "bayes_rbfn", "fit", "--seed", str(seed), "--out", str(out), *extra]
        start = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        report = proc.stdout + proc.stderr
    row: dict = {"seed": seed, "exit": proc.returncode, "wall_s": round(wall, 1)}
    for key, pattern in PATTERNS.items():
        match = re.search(pattern, report)
        row[key] = float(match.group(1)) if match else None
    depth = re.search(r"([0-9]+) of ([0-9]+) draws stopped at the maximum tree depth", report)
    row["at_max_depth"] = int(depth.group(1)) if depth else 0
    row["trusted"] = "the summaries can be trusted" in report
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "main_job")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="extra bayes-rbfn fit options (after --)")
    args = parser.parse_args(argv)
    extra = [a for a in args.extra if a != "--"]
    rows = []
    for seed in args.seeds:
        rows.append(run_seed(seed, extra))
        print(json.dumps(rows[-1]), flush=True)
    stamp = datetime.date.today().isoformat()
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "main_job.json").write_text(
        json.dumps({"date": stamp, "machine": machine, "rows": rows}, indent=1)
    )
    lines = [
        f"# The main job at seeds {', '.join(map(str, args.seeds))} ({stamp}, {machine})",
        "",
        "| seed | wall s | r_hat | bulk ESS | tail ESS | divergent | at max depth | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        verdict = "trust" if r["trusted"] else "do not trust"
        lines.append(
            f"| {r['seed']} | {r['wall_s']} | {r['r_hat']} | {r['bulk_ess']:.0f} | {r['tail_ess']:.0f} | "
            f"{r['divergent']:.0f} | {r['at_max_depth']} | {verdict} |"
        )
    (args.out / "main_job.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
