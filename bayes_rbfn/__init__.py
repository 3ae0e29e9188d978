"""bayes_rbfn: fully Bayesian RBF networks and their equivalent Subset-of-Regressors Gaussian process.

An RBF network f(x) = k(x, Z) α with the prior α ~ N(0, K_uu⁻¹) on its weights is exactly the
SoR Gaussian process with covariance k(x, Z) K_uu⁻¹ k(Z, x'). This package samples the kernel
hyperparameters with NUTS and computes the posterior predictive analytically per draw.

Importing the package does not change JAX's global configuration (in particular not ``jax_enable_x64``);
call ``numpyro.enable_x64()`` yourself for float64, as the CLI and the tests do.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any


def _end_the_program_on_signals() -> None:
    """In ``python -m bayes_rbfn`` and the ``bayes-rbfn`` script: SIGINT and SIGTERM end it with one line.

    The imports below take seconds; a signal then would otherwise print a traceback from them. Nothing is
    written before :func:`bayes_rbfn.cli.main` runs, which installs its own handlers. While ``-m`` imports
    the package, ``sys.argv[0]`` is ``"-m"``; the script's name is ``bayes-rbfn``. Any other program that
    imports the package keeps its handlers.

    The program also silences XLA's C++ log lines (``TF_CPP_MIN_LOG_LEVEL``, unless set): one per
    persistent-cache hit would bury the progress and the report, and the level is read when jaxlib loads,
    which the import of numpyro below does.
    """
    import os
    import signal
    import sys

    first = sys.argv[0] if sys.argv else ""
    words = list(getattr(sys, "orig_argv", []))
    module = words[words.index("-m") + 1] if "-m" in words[:-1] else ""
    as_module = first == "-m" and (module == __name__ or f"-m{__name__}" in words)
    as_script = os.path.splitext(os.path.basename(first))[0] in ("bayes-rbfn", "bayes-rbfn-script")
    if not (as_module or as_script):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

    def end(signum: int, frame: Any) -> None:
        word = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
        os.write(2, f"bayes-rbfn: error: {word}; nothing was written\n".encode())
        os._exit(128 + signum)

    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, end)
    except ValueError:  # not the main thread: leave the signals alone
        pass


_end_the_program_on_signals()

# numpyro whole, before any module of the package imports ``numpyro.distributions`` or arviz: arviz 1.x
# (arviz-base) puts a lazily loaded ``numpyro`` into ``sys.modules`` when a program imports arviz first, and
# ``import numpyro.distributions`` would then meet a half-initialised package (bayes_rbfn.io.arviz_compat).
import numpyro  # noqa: E402, F401  (after the handlers above)

__version__ = "0.1.0"
__all__ = [
    "ConvergenceWarning",
    "ExactGP",
    "Float32Warning",
    "SamplerSettings",
    "SparseGP",
    "__version__",
    "build_model",
    "conditional",
    "fit",
    "kernel_family",
    "kernels",
    "linalg",
    "loo_log_likelihood",
    "loo_pit",
    "loo_r2",
    "posterior_replicates",
    "predict",
    "predict_model",
    "predict_rbfn",
    "prior_predictive",
    "rbfn",
    "score",
]

if TYPE_CHECKING:
    from bayes_rbfn.gp import conditional, kernels, linalg
    from bayes_rbfn.infer.diagnostics import ConvergenceWarning
    from bayes_rbfn.infer.fitting import Float32Warning, build_model, fit, prior_predictive
    from bayes_rbfn.infer.loo import loo_log_likelihood, loo_pit, loo_r2
    from bayes_rbfn.infer.predictive import predict, predict_model
    from bayes_rbfn.infer.replicates import posterior_replicates
    from bayes_rbfn.infer.sampler import SamplerSettings
    from bayes_rbfn.infer.scores import score
    from bayes_rbfn.models.distributions import ExactGP, SparseGP
    from bayes_rbfn.models.families import kernel_family
    from bayes_rbfn.models.layers import predict_rbfn, rbfn

# Imported on first use (PEP 562), so that ``import bayes_rbfn.cli`` does not load JAX: the command line
# sets its process options (XLA's log level, the host device count) before JAX starts.
_LAZY = {
    "conditional": ("bayes_rbfn.gp.conditional", None),
    "kernels": ("bayes_rbfn.gp.kernels", None),
    "linalg": ("bayes_rbfn.gp.linalg", None),
    "fit": ("bayes_rbfn.infer.fitting", "fit"),
    "build_model": ("bayes_rbfn.infer.fitting", "build_model"),
    "prior_predictive": ("bayes_rbfn.infer.fitting", "prior_predictive"),
    "loo_log_likelihood": ("bayes_rbfn.infer.loo", "loo_log_likelihood"),
    "predict": ("bayes_rbfn.infer.predictive", "predict"),
    "predict_model": ("bayes_rbfn.infer.predictive", "predict_model"),
    "loo_pit": ("bayes_rbfn.infer.loo", "loo_pit"),
    "loo_r2": ("bayes_rbfn.infer.loo", "loo_r2"),
    "posterior_replicates": ("bayes_rbfn.infer.replicates", "posterior_replicates"),
    "score": ("bayes_rbfn.infer.scores", "score"),
    "SamplerSettings": ("bayes_rbfn.infer.sampler", "SamplerSettings"),
    "ConvergenceWarning": ("bayes_rbfn.infer.diagnostics", "ConvergenceWarning"),
    "Float32Warning": ("bayes_rbfn.infer.fitting", "Float32Warning"),
    "SparseGP": ("bayes_rbfn.models.distributions", "SparseGP"),
    "ExactGP": ("bayes_rbfn.models.distributions", "ExactGP"),
    "rbfn": ("bayes_rbfn.models.layers", "rbfn"),
    "kernel_family": ("bayes_rbfn.models.families", "kernel_family"),
    "predict_rbfn": ("bayes_rbfn.models.layers", "predict_rbfn"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        # Any other subpackage (``bayes_rbfn.gp``, ``bayes_rbfn.infer``, …) on first use too, as an eagerly
        # importing package would have it.
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
        raise AttributeError(f"module 'bayes_rbfn' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
