"""One process of the multi-process tests (tests/infer/test_distributed.py), run as a script.

    python distributed_worker.py TASK OUT PROCESS_ID NUM_PROCESSES PORT

With NUM_PROCESSES > 1 the process joins a run of that many through ``initialize_distributed`` (a
coordinator on localhost:PORT) and holds only its part of the data (rows PROCESS_ID·n … of the same
N points); with NUM_PROCESSES = 1 it holds all of them, on two CPU devices, as the single-process
reference. Process 0 (or the only one) writes what TASK computed to OUT (an .npz file).

Tasks: ``all`` (the SoR log density and its gradient, the LOO pass and the predictive moments at fixed
hyperparameters; then a short NUTS chain of ``fit("sor", shard=True)``), ``die`` (the same fit with a
checkpoint; process 1 exits once the first chunk is saved), ``resume`` (the same fit, continued from that
checkpoint). ``all`` ends with a fit given other prediction inputs in each process, which is refused.
"""

from __future__ import annotations

import os
import sys
import threading
import time

TASK, OUT, RANK, PROCESSES, PORT = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
N, M = 600, 12

if PROCESSES == 1:
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
else:
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=1"

from bayes_rbfn import runtime  # noqa: E402

runtime.enable_x64()
runtime.enable_compilation_cache()  # the suite's cache; initialize_distributed turns it off for PROCESSES > 1
if PROCESSES > 1:
    runtime.initialize_distributed(
        f"localhost:{PORT}",
        PROCESSES,
        RANK,
        heartbeat_timeout_seconds=10,
        initialization_timeout=120,
        shutdown_timeout_seconds=60,
    )

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import bayes_rbfn  # noqa: E402
from bayes_rbfn.gp import block_loo, moments, streaming, woodbury_sums  # noqa: E402
from bayes_rbfn.gp.kernels import SquaredExponential  # noqa: E402


def data():
    """The N points (all of them), and this process's rows."""
    gen = np.random.default_rng(3)
    X = np.sort(gen.uniform(0.0, 10.0, N))[:, None]
    y = np.sin(X[:, 0]) + 0.3 * gen.standard_normal(N)
    n = N // PROCESSES
    return X, y, X[RANK * n : (RANK + 1) * n], y[RANK * n : (RANK + 1) * n]


X_ALL, Y_ALL, X_MINE, Y_MINE = data()
Z = np.linspace(0.5, 9.5, M)[:, None]
X_TEST = np.linspace(-1.0, 11.0, 7)[:, None]
mesh = streaming.data_mesh()
assert mesh.devices.size == 2, mesh


def passes() -> dict:
    if PROCESSES > 1:
        X = streaming.process_rows(X_MINE, mesh)
        y = streaming.process_rows(Y_MINE, mesh)
    else:
        placed = streaming.shard_data({"X": jnp.asarray(X_ALL), "y": jnp.asarray(Y_ALL)}, mesh)
        X, y = placed["X"], placed["y"]

    def log_density(theta, X, y):  # the data as arguments: a program cannot close over a global array
        kernel = SquaredExponential(theta[0], theta[1])
        factor = woodbury_sums.sor_factor(kernel, X, y, jnp.asarray(Z), theta[2], mesh=mesh)
        return factor.log_marginal_likelihood()

    theta = jnp.asarray([1.3, 0.8, 0.35])
    value, grad = jax.jit(jax.value_and_grad(log_density))(theta, X, y)
    kernel = SquaredExponential(theta[0], theta[1])
    factor = woodbury_sums.sor_factor(kernel, X, y, jnp.asarray(Z), theta[2], mesh=mesh)
    loo = block_loo.sor_loo(factor, kernel, jnp.asarray(Z), X, y, theta[2] ** 2, mesh=mesh)
    mean, var = moments.sor_moments(factor, kernel, jnp.asarray(Z), jnp.asarray(X_TEST))
    return {
        "value": streaming.to_host(value),
        "grad": streaming.to_host(grad),
        "loo": streaming.to_host(loo),
        "mean": streaming.to_host(mean),
        "var": streaming.to_host(var),
    }


def fit(checkpoint: str | None = None, X_pred=X_TEST) -> dict:
    options = dict(
        Z=Z,
        X_pred=X_pred,
        shard=True,
        chains=1,
        warmup=30,
        draws=30,
        seed=4,
        progress=False,
        check_diagnostics=False,
        posterior_predictive=5,
    )
    if checkpoint is not None:
        options.update(checkpoint=checkpoint, checkpoint_every=10)
    X, y = (X_MINE, Y_MINE) if PROCESSES > 1 else (X_ALL, Y_ALL)
    idata = bayes_rbfn.fit("sor", X, y, **options)
    out = {f"posterior_{k}": v.values for k, v in idata.posterior.items()}
    out["log_likelihood"] = idata.log_likelihood["y"].values
    out["f_mean"] = idata.predictions["f_mean"].values
    out["y_rep"] = idata.posterior_predictive["y"].values
    out["observed"] = idata.observed_data["y"].values
    return out


folder = os.path.join(os.path.dirname(OUT), "checkpoint")
if TASK == "all":
    result = {**passes(), **fit()}
    try:  # prediction inputs that differ between the processes: refused, in every process
        fit(X_pred=X_TEST + RANK)
        result["differ"] = np.asarray("accepted")
    except ValueError as err:
        result["differ"] = np.asarray(str(err))
elif TASK == "resume":
    result = fit(checkpoint=folder)
elif TASK == "die":
    if RANK == 1:

        def stop_after_first_chunk() -> None:
            while not os.path.exists(os.path.join(folder, "checkpoint.json")):
                time.sleep(0.05)
            os._exit(3)

        threading.Thread(target=stop_after_first_chunk, daemon=True).start()
    result = fit(checkpoint=folder)
else:
    raise SystemExit(f"unknown task {TASK}")

if RANK == 0:
    np.savez(OUT, **result)
print("done", flush=True)
