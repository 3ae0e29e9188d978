"""Two processes against one on the same machine: the SoR log density and gradient on JAX's multi-process
runtime.

For each N, the value and gradient of the SoR log marginal likelihood (M = 64, 1-D inputs, the package's
streamed pass) are timed

* in one process with two CPU devices (``--xla_force_host_platform_device_count=2``, the data sharded over
  them: the single-host reference);
* in two processes of one CPU device each, joined by ``bayes_rbfn.runtime.initialize_distributed`` on
  localhost, each holding half of the data (the pass's sums meet in a Gloo all-reduce).

Both run the same number of threads on the same two cores, so the difference is the cost of the second
process: the collective over TCP and the coordination. Each timing is the minimum over ``--repeats``
calls after a warm-up call. The collective alone is timed too: a ``psum`` of the M×M + M sums the pass
exchanges, across the two processes.

::

    python benchmarks/distributed.py                 # N = 10⁵ and 10⁶
    python benchmarks/distributed.py --sizes 100000 --repeats 5

Writes ``benchmarks/results/distributed/distributed.md`` and ``.json``. Run nothing else on the machine
meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
M = 64


def worker(rank: int, processes: int, port: int, N: int, repeats: int, out: str) -> None:
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={2 // processes}"
    )
    from bayes_rbfn import runtime

    runtime.enable_x64()
    if processes > 1:
        runtime.initialize_distributed(f"localhost:{port}", processes, rank)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from bayes_rbfn.gp import streaming, woodbury_sums
    from bayes_rbfn.gp.kernels import SquaredExponential

    gen = np.random.default_rng(0)
    X_all = gen.uniform(0.0, 10.0, (N, 1))
    y_all = np.sin(X_all[:, 0]) + 0.3 * gen.standard_normal(N)
    mesh = streaming.data_mesh()
    n = N // processes
    if processes > 1:
        X = streaming.process_rows(X_all[rank * n : (rank + 1) * n], mesh)
        y = streaming.process_rows(y_all[rank * n : (rank + 1) * n], mesh)
    else:
        placed = streaming.shard_data({"X": jnp.asarray(X_all), "y": jnp.asarray(y_all)}, mesh)
        X, y = placed["X"], placed["y"]
    Z = jnp.asarray(np.linspace(0.1, 9.9, M)[:, None])

    def log_density(theta, X, y):
        kernel = SquaredExponential(theta[0], theta[1])
        return woodbury_sums.sor_factor(kernel, X, y, Z, theta[2], mesh=mesh).log_marginal_likelihood()

    value_and_grad = jax.jit(jax.value_and_grad(log_density))
    theta = jnp.asarray([1.3, 0.8, 0.35])
    jax.block_until_ready(value_and_grad(theta, X, y))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(value_and_grad(theta, X, y))
        times.append(time.perf_counter() - start)

    sums = jax.make_array_from_callback(
        (2, M * M + M), NamedSharding(mesh, P(streaming.DATA_AXIS)), lambda i: np.ones((1, M * M + M))
    )
    reduce = jax.jit(lambda a: jnp.sum(a, axis=0))
    jax.block_until_ready(reduce(sums))
    reduce_times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(reduce(sums))
        reduce_times.append(time.perf_counter() - start)
    if rank == 0:
        Path(out).write_text(json.dumps({"grad_s": min(times), "reduce_s": min(reduce_times)}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def measure(N: int, processes: int, repeats: int, folder: Path) -> dict:
    out = folder / f"n{N}_p{processes}.json"
    port = _free_port()
    argv = [sys.executable, __file__, "--worker"]
    procs = [
        subprocess.Popen([*argv, str(rank), str(processes), str(port), str(N), str(repeats), str(out)])
        for rank in range(processes)
    ]
    for proc in procs:
        if proc.wait(timeout=1800) != 0:
            raise RuntimeError(f"N = {N}, {processes} process(es): a worker exited {proc.returncode}")
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        rank, processes, port, N, repeats = (int(a) for a in sys.argv[2:7])
        worker(rank, processes, port, N, repeats, sys.argv[7])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default=str(HERE / "results" / "distributed"))
    args = ap.parse_args(argv)
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for N in args.sizes:
        one = measure(N, 1, args.repeats, folder)
        two = measure(N, 2, args.repeats, folder)
        rows.append({"N": N, "one_process": one, "two_processes": two})
        print(N, one, two, flush=True)
    for N in args.sizes:
        for p in (1, 2):
            (folder / f"n{N}_p{p}.json").unlink(missing_ok=True)
    record = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine()}
    (folder / "distributed.json").write_text(json.dumps({**record, "M": M, "rows": rows}, indent=1))
    lines = [
        f"# Two processes against one ({record['date']}, M = {M}, value + gradient of the SoR log density)",
        "",
        "| N | one process, 2 devices | two processes, 1 device each | overhead | all-reduce of M²+M sums |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        a, b = r["one_process"]["grad_s"], r["two_processes"]["grad_s"]
        lines.append(
            f"| {r['N']:,} | {1e3 * a:.1f} ms | {1e3 * b:.1f} ms | {b / a:.2f}× | "
            f"{1e3 * r['two_processes']['reduce_s']:.2f} ms (one process: "
            f"{1e3 * r['one_process']['reduce_s']:.2f} ms) |"
        )
    (folder / "distributed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
