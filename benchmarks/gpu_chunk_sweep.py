"""Value + gradient time of the SoR log density against the streamed pass's chunk size (how the GPU default
of :func:`bayes_rbfn.gp.streaming.chunk_size_for` was chosen).

    python benchmarks/gpu_chunk_sweep.py cuda 1000000      # JAX platform, N
"""

import os
import statistics
import sys
import time

os.environ["JAX_PLATFORMS"] = sys.argv[1] if len(sys.argv) > 1 else "cuda"
import jax
import jax.numpy as jnp
import numpy as np

from bayes_rbfn import runtime
from bayes_rbfn.models import ModelConfig
from bayes_rbfn.models import sor as sor_model
from bayes_rbfn.models.families import FAMILIES

runtime.enable_x64()
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
rng = np.random.default_rng(0)
X = rng.uniform(0.0, 10.0, (N, 1))
y = np.sin(1.3 * X[:, 0]) + 0.3 * rng.standard_normal(N)
params = {"lengthscale": jnp.asarray(1.0), "variance": jnp.asarray(1.0), "noise": jnp.asarray(0.3)}
for M in (64, 256):
    Z = np.quantile(X[:, 0], (np.arange(M) + 0.5) / M)[:, None]
    data = {"X": jnp.asarray(X), "y": jnp.asarray(y), "Z": jnp.asarray(Z), "y_offset": jnp.asarray(y.mean())}
    for chunk in (None, 1 << 14, 1 << 16, 1 << 18, N):
        config = ModelConfig(family=FAMILIES["se"], priors={}, chunk_size=chunk)
        grad = jax.jit(jax.value_and_grad(lambda p, d, c=config: sor_model.log_density(p, d, c)))
        jax.block_until_ready(grad(params, data))
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            jax.block_until_ready(grad(params, data))
            times.append(time.perf_counter() - t0)
        print(
            f"M={M} chunk={chunk}: min {min(times) * 1e3:.2f} ms, "
            f"median {statistics.median(times) * 1e3:.2f} ms",
            flush=True,
        )
