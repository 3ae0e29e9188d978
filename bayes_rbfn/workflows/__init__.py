"""Workflows composed of fits: model comparison and simulation-based calibration.

Model comparison is :mod:`~bayes_rbfn.workflows.compare`, simulation-based calibration
:mod:`~bayes_rbfn.workflows.sbc`. Returns data, never prints.
"""

__all__ = ["compare", "planning", "sbc"]
