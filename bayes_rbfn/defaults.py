"""Defaults shared by the driver and the command line, in a module that imports nothing heavy.

The CLI builds its parser before JAX may load (XLA's options must be set first), so the constants both
layers need live here rather than in :mod:`bayes_rbfn.infer.fitting`.
"""

from __future__ import annotations

__all__ = ["DEFAULT_NUM_INDUCING", "INITS"]

#: Inducing inputs chosen when neither Z nor num_inducing is given (capped by the distinct inputs).
DEFAULT_NUM_INDUCING = 64

#: How NUTS starts (``fit(init=...)``): "median" — NumPyro's ``init_to_median`` and an identity mass
#: matrix; "map" — the posterior mode with a Laplace mass matrix
#: (:func:`bayes_rbfn.infer.sampler.laplace_start`).
INITS = ("median", "map")
