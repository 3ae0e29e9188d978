"""Why the SoR pass is whitened: |log p − long-double log p| of three ways to compute the same log marginal.

At N points and M inducing inputs on [0, 10] (lengthscale 2, so K_uu is badly conditioned) and for each
noise level, the log marginal likelihood is computed in long double (a Cholesky and triangular solves
written out in NumPy) and compared with the library's streamed, whitened pass (the default), the same
summed before whitening (``fast=True``) and the earlier triangular solve on all N columns. Summing before
whitening is faster (see the ``floor`` section) but loses accuracy as cond(K_uu) grows and σ shrinks.
"""

from __future__ import annotations

from .common import _fmt, _trsm_sor_factor

NAME = "accuracy"
FULL = {"N": 20_000, "M": 128, "noises": [0.1, 0.01]}
QUICK = {"N": 3_000, "M": 64, "noises": [0.1, 0.01]}


def run(cfg):
    """|log p − long-double log p| of the streamed whitened path, the fast path and the TRSM path."""
    import jax.numpy as jnp
    import numpy as np

    from bayes_rbfn.gp import kernels, linalg, woodbury_sums

    ld = np.longdouble

    def chol(A):
        L = np.zeros_like(A)
        for j in range(A.shape[0]):
            L[j, j] = np.sqrt(A[j, j] - L[j, :j] @ L[j, :j])
            L[j + 1 :, j] = (A[j + 1 :, j] - L[j + 1 :, :j] @ L[j, :j]) / L[j, j]
        return L

    def solve(L, B):
        Xs = np.zeros_like(B)
        for i in range(L.shape[0]):
            Xs[i] = (B[i] - L[i, :i] @ Xs[:i]) / L[i, i]
        return Xs

    N, M = cfg["N"], cfg["M"]
    rows = []
    for noise in cfg["noises"]:
        rng = np.random.default_rng(1)
        X = np.sort(rng.uniform(0.0, 10.0, N))
        y = np.sin(X) + noise * rng.standard_normal(N)
        Z = np.linspace(0.0, 10.0, M)
        kernel = kernels.SquaredExponential(2.0, 1.0)
        Kuu, Kuf = np.asarray(kernel(Z, Z)), np.asarray(kernel(Z, X))
        jit_ = linalg.default_jitter(np.float64) * np.mean(np.diag(Kuu))
        A = solve(chol(Kuu.astype(ld) + ld(jit_) * np.eye(M, dtype=ld)), Kuf.astype(ld))
        s2 = ld(noise) ** 2
        LB = chol(np.eye(M, dtype=ld) + A @ A.T / s2)
        c = solve(LB, (A @ y.astype(ld))[:, None] / s2)[:, 0]
        yl = y.astype(ld)
        ref = -0.5 * (
            yl @ yl / s2
            - c @ c
            + N * np.log(s2)
            + 2 * np.sum(np.log(np.diag(LB)))
            + N * np.log(2 * np.pi * ld(1))
        )
        Xj, yj, Zj = jnp.asarray(X)[:, None], jnp.asarray(y), jnp.asarray(Z)[:, None]
        errs = {}
        for name, fast in (("streamed_whitened", False), ("streamed_fast", True)):
            value = woodbury_sums.sor_factor(kernel, Xj, yj, Zj, noise, fast=fast).log_marginal_likelihood()
            errs[name] = abs(float(value) - float(ref))
        value = _trsm_sor_factor(kernel, Xj, yj, Zj, noise).log_marginal_likelihood()
        errs["trsm_whitened"] = abs(float(value) - float(ref))
        cond = float(np.linalg.cond(Kuu + jit_ * np.eye(M)))
        rows.append(
            {
                "N": N,
                "M": M,
                "noise": noise,
                "lengthscale": 2.0,
                "cond_Kuu": cond,
                "log_p": float(ref),
                **errs,
            }
        )
    return {"rows": rows}


def tables(r, report):
    lines = [
        "## Why whitened: |log p − long-double log p|",
        "",
        "| N | M | σ | cond(K_uu + jitter) | log p | whitened, streamed (default) | triangular solve | summed before whitening |",  # noqa: E501
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in r["rows"]:
        lines.append(
            f"| {row['N']:,} | {row['M']} | {row['noise']} | {row['cond_Kuu']:.1e} | {row['log_p']:.1f} | "
            f"{_fmt(row['streamed_whitened'])} | {_fmt(row['trsm_whitened'])} | {_fmt(row['streamed_fast'])} |"  # noqa: E501
        )
        report.add_csv("accuracy", f"whitened_sigma{row['noise']}", row["streamed_whitened"])
        report.add_csv("accuracy", f"fast_sigma{row['noise']}", row["streamed_fast"])
    lines.append("")
    return lines
