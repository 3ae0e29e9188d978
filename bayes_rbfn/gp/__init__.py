"""The mathematics: pure JAX, no ``numpyro.sample``, no files, no printing.

Kernels (:mod:`~bayes_rbfn.gp.kernels`), the one jitter policy and Woodbury solver
(:mod:`~bayes_rbfn.gp.linalg`), input checks (:mod:`~bayes_rbfn.gp.validation`), the streamed O(NM²)
passes of the SoR family: their chunks, fixed-order sums and sharding (:mod:`~bayes_rbfn.gp.streaming`),
the Woodbury sums with their reverse pass and the factor (:mod:`~bayes_rbfn.gp.woodbury_sums`), the LOO
conditionals (:mod:`~bayes_rbfn.gp.block_loo`) and the predictive moments (:mod:`~bayes_rbfn.gp.moments`);
the exact and SoR/RBFN conditionals (:mod:`~bayes_rbfn.gp.conditional`), DTC/FITC/VFE and the prior
variance lost (:mod:`~bayes_rbfn.gp.sparse`), Bayesian linear regression and bases (:mod:`~bayes_rbfn.gp.blr`,
:mod:`~bayes_rbfn.gp.basis`), kernel interpolation (:mod:`~bayes_rbfn.gp.interpolation`) and the choice of
inducing inputs (:mod:`~bayes_rbfn.gp.inducing`). Imports nothing else of the package.

Each module is imported on first access (PEP 562), so ``bayes_rbfn.gp.inducing`` works after a plain
``import bayes_rbfn.gp`` without loading JAX for the modules that are not used.
"""

import importlib
from typing import Any

__all__ = [
    "basis",
    "block_loo",
    "blr",
    "conditional",
    "inducing",
    "interpolation",
    "kernels",
    "linalg",
    "moments",
    "sparse",
    "streaming",
    "validation",
    "woodbury_sums",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{name}")
    globals()[name] = module
    return module


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
