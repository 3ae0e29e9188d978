"""The mathematics: pure JAX, no ``numpyro.sample``, no files, no printing.

Kernels (:mod:`~bayes_rbfn.gp.kernels`), the one jitter policy and Woodbury solver
(:mod:`~bayes_rbfn.gp.linalg`), input checks (:mod:`~bayes_rbfn.gp.validation`), the one streamed
O(NM²) pass of the SoR family (:mod:`~bayes_rbfn.gp.parallel`), the exact and SoR/RBFN conditionals
(:mod:`~bayes_rbfn.gp.conditional`), DTC/FITC/VFE and the prior variance lost
(:mod:`~bayes_rbfn.gp.sparse`), Bayesian linear regression and bases (:mod:`~bayes_rbfn.gp.blr`,
:mod:`~bayes_rbfn.gp.basis`), kernel interpolation (:mod:`~bayes_rbfn.gp.interpolation`) and the choice of
inducing inputs (:mod:`~bayes_rbfn.gp.inducing`). Imports nothing else of the package.

Each module is imported on first access (PEP 562), so ``bayes_rbfn.gp.inducing`` works after a plain
``import bayes_rbfn.gp`` without loading JAX for the modules that are not used.
"""

import importlib
from typing import Any

__all__ = [
    "basis",
    "blr",
    "conditional",
    "inducing",
    "interpolation",
    "kernels",
    "linalg",
    "parallel",
    "sparse",
    "validation",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{name}")
    globals()[name] = module
    return module


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
