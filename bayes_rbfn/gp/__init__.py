"""The mathematics: pure JAX, no ``numpyro.sample``, no files, no printing.

Kernels (:mod:`~bayes_rbfn.gp.kernels`), the one jitter policy and Woodbury solver
(:mod:`~bayes_rbfn.gp.linalg`), input checks (:mod:`~bayes_rbfn.gp.validation`), the one streamed
O(NM²) pass of the SoR family (:mod:`~bayes_rbfn.gp.parallel`), the exact and SoR/RBFN conditionals
(:mod:`~bayes_rbfn.gp.conditional`), DTC/FITC/VFE and the prior variance lost
(:mod:`~bayes_rbfn.gp.sparse`), Bayesian linear regression and bases (:mod:`~bayes_rbfn.gp.blr`,
:mod:`~bayes_rbfn.gp.basis`), kernel interpolation (:mod:`~bayes_rbfn.gp.interpolation`) and the choice of
inducing inputs (:mod:`~bayes_rbfn.gp.inducing`). Imports nothing else of the package.
"""

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
