"""Benchmarks of the SoR fast path against its targets, and the sor/exact timing table.

One command (from the repository root):

    python benchmarks/run.py            # full scale, ~1.5 h on 2 CPU cores (N = 10⁶ chain: 15 min budget)
    python benchmarks/run.py --quick    # several minutes (mostly compiling): same sections, small sizes

It writes ``results.md`` (the tables of benchmarks/README.md), ``results.csv`` (every figure),
``results.json`` and ``scaling.png`` (log-log time per gradient against N with the linear reference) into
``--out`` (default ``benchmarks/results/run`` or ``benchmarks/results-quick``). ``--sections a,b`` runs some.

Each section runs in its own Python process, so each has a clean memory high-water mark, its own device
count (the sharded section asks XLA for two CPU devices) and a fresh view of the machine's load, which
is recorded with every section (other work on the machine slows everything down: compare ratios
measured in the same section, not absolute times across runs). Timings of compiled functions are the
minimum over interleaved repeats; NUTS rows separate compile time (tracing, lowering and XLA compilation,
from JAX's monitoring events) from sampling time.

The sections live in ``benchmarks/sections/``, one module each (what it measures and why in its
docstring, its sizes, its target, its ``run`` and its part of the report; the section ``issue3`` is
``sor_vs_exact.py``, ``compile`` is ``compilation.py``), with the helpers they share in
``sections/common.py``. This script is the driver: it runs each section in a worker process
(``--worker``, hidden), collects the results and writes the report.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sections import (
    accuracy,
    compilation,
    exact,
    floor,
    memory,
    million,
    predict,
    predict_devices,
    predict_mixed,
    scaling,
    sharded,
    sor_vs_exact,
)

# _config, _data, _grad_fn and _interleaved are unused here: benchmarks/mixed_precision.py imports them (and
# _setup) from run.
from sections.common import CompileClock, Report, _config, _data, _grad_fn, _interleaved, _setup  # noqa: F401

HERE = Path(__file__).resolve().parent
# In the order they run (the default of --sections).
MODULES = (
    floor,
    accuracy,
    scaling,
    sharded,
    sor_vs_exact,
    exact,
    predict,
    predict_devices,
    predict_mixed,
    compilation,
    memory,
    million,
)
BY_NAME = {m.NAME: m for m in MODULES}
SECTIONS = tuple(BY_NAME)
# The report: the targets table's rows in this order, then each section's own table in this order.
REPORT_TARGETS = (
    floor,
    scaling,
    million,
    memory,
    exact,
    predict,
    predict_devices,
    predict_mixed,
    compilation,
    sharded,
)
REPORT_TABLES = (sor_vs_exact, floor, accuracy, scaling)


# --------------------------------------------------------------------------------------------------
# Worker side: one section per process


def worker(section: str, scale: str, out: str, cache_dir: str | None) -> None:
    _setup(cache_dir)
    import jax

    module = BY_NAME[section]
    cfg = module.QUICK if scale == "quick" else module.FULL
    clock = CompileClock()
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    if section in ("floor", "accuracy", "scaling", "sharded"):
        result = module.run(cfg)
    elif section == "compile":
        result = module.run(cfg, clock, cache_dir)
    else:
        result = module.run(cfg, clock)
    result["_section_wall"] = time.perf_counter() - t0
    result["_load"] = [load0, os.getloadavg()[0]]
    result["_devices"] = jax.device_count()
    result["_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(out).write_text(json.dumps(result, indent=1, default=float))
    if section == "million":
        os._exit(0)  # a chain still sampling in its thread (budget exhausted) is abandoned, not awaited


# --------------------------------------------------------------------------------------------------
# Driver side: run the sections, then write the tables and the plot


def _run_section(section, scale, workdir, cache_dir, env_extra=None, tag=None):
    out = Path(workdir) / f"{tag or section}.json"
    env = dict(os.environ)
    env.update(env_extra or {})
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        section,
        "--scale",
        scale,
        "--json",
        str(out),
    ]
    if cache_dir:
        cmd += ["--cache-dir", cache_dir]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"_error": proc.stderr[-3000:], "_section_wall": time.perf_counter() - t0}
    return json.loads(out.read_text())


def _header(results: dict, scale: str) -> list[str]:
    lines = [f"# Benchmark results ({scale} scale)", ""]
    lines.append(
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
        f"Python {platform.python_version()}; float64 throughout. Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."  # noqa: E501
    )
    loads = [r["_load"] for r in results.values() if isinstance(r, dict) and "_load" in r]
    if loads:
        lo = min(min(l) for l in loads)
        hi = max(max(l) for l in loads)
        lines.append(
            f"1-minute load average during the sections: {lo:.1f}–{hi:.1f} on {os.cpu_count()} cores "
            "(other work was running; absolute times are inflated by it, ratios measured within one "
            "section much less so)."
        )
    lines.append("")
    return lines


def write_report(results: dict, outdir: Path, scale: str) -> None:
    report = Report(results, outdir)
    lines = _header(results, scale)
    for module in REPORT_TARGETS:
        r = results.get(module.NAME)
        if r and "_error" not in r:
            module.targets(r, report)
    lines += ["## The targets", "", "| target | measured | | notes |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in report.rows]
    lines.append("")
    for module in REPORT_TABLES:
        r = results.get(module.NAME)
        if r and "_error" not in r:
            lines += module.tables(r, report)
    errors = {k: v["_error"] for k, v in results.items() if isinstance(v, dict) and "_error" in v}
    if errors:
        lines += ["## Sections that failed", ""]
        lines += [
            f"- {k}: `{v.strip().splitlines()[-1] if v.strip() else 'error'}`" for k, v in errors.items()
        ]
    (outdir / "results.md").write_text("\n".join(lines) + "\n")
    with open(outdir / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["section", "name", "value", "unit"])
        w.writeheader()
        w.writerows(report.csv_rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: several minutes, mostly compiling")
    ap.add_argument("--out", default=None, help="output folder (default results/run or results-quick)")
    ap.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}"
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--scale", default="full", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    ap.add_argument(
        "--cache-dir", default=None, help="persistent compilation cache (default: a fresh temporary one)"
    )
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.scale, args.json, args.cache_dir)
    scale = "quick" if args.quick else "full"
    outdir = Path(args.out or (HERE / "results-quick" if args.quick else HERE / "results" / "run"))
    outdir.mkdir(parents=True, exist_ok=True)
    sections = [s for s in args.sections.split(",") if s]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections: {', '.join(sorted(unknown))}")
    results = {}
    previous = outdir / "results.json"
    if previous.exists() and set(sections) != set(SECTIONS):
        results = json.loads(previous.read_text())  # update some sections, keep the others
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache_dir or str(Path(tmp) / "jax-cache")
        for section in sections:
            t0 = time.perf_counter()
            env = {}
            if section in ("sharded", "predict_devices"):
                module = BY_NAME[section]
                cfg = module.QUICK if args.quick else module.FULL
                env = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={cfg['devices']}"}
            if section == "compile":
                ccache = str(Path(tmp) / "compile-cache")
                results[section] = _run_section(section, scale, tmp, ccache)
                results["compile_new_process"] = _run_section(section, scale, tmp, ccache, tag="compile2")
                for run in results["compile_new_process"].get("runs", []):
                    run["process"] = 2
            else:
                results[section] = _run_section(section, scale, tmp, cache, env)
            status = "failed" if "_error" in results[section] else "done"
            print(
                f"[{time.strftime('%H:%M:%S')}] {section}: {status} in {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
            previous.write_text(json.dumps(results, indent=1, default=float))
            write_report(results, outdir, scale)
    print(f"wrote {outdir / 'results.md'}, results.csv, scaling.png")


if __name__ == "__main__":
    main()
