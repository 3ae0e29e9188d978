"""Inference: returns data, never prints.

The NUTS driver and :func:`~bayes_rbfn.infer.fitting.fit` (:mod:`~bayes_rbfn.infer.fitting`), checkpoint files
(:mod:`~bayes_rbfn.infer.checkpoint`), the InferenceData schema both ways (:mod:`~bayes_rbfn.infer.schema`),
the analytic posterior predictive (:mod:`~bayes_rbfn.infer.predictive`), posterior predictive
replicates that condition on the data (:mod:`~bayes_rbfn.infer.replicates`), LOO-PIT
(:mod:`~bayes_rbfn.infer.loo`), scores
(:mod:`~bayes_rbfn.infer.scores`), diagnostics (:mod:`~bayes_rbfn.infer.diagnostics`) and the
variance-collapse check (:mod:`~bayes_rbfn.infer.collapse`). Imports :mod:`bayes_rbfn.gp`,
:mod:`bayes_rbfn.models` and :mod:`bayes_rbfn.io` only.
"""

__all__ = [
    "checkpoint",
    "collapse",
    "diagnostics",
    "fitting",
    "loo",
    "predictive",
    "replicates",
    "schema",
    "scores",
]
