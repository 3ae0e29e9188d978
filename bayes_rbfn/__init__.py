"""bayes_rbfn: fully Bayesian RBF networks and their equivalent Subset-of-Regressors Gaussian process.

An RBF network f(x) = k(x, Z) α with the prior α ~ N(0, K_uu⁻¹) on its weights is exactly the
SoR Gaussian process with covariance k(x, Z) K_uu⁻¹ k(Z, x'). This package samples the kernel
hyperparameters with NUTS and computes the posterior predictive analytically per draw.

Importing the package does not change JAX's global configuration (in particular not ``jax_enable_x64``);
call ``numpyro.enable_x64()`` yourself for float64, as the CLI and the tests do.
"""

from bayes_rbfn import conditional, kernels, linalg
from bayes_rbfn.inference import fit
from bayes_rbfn.predictive import predict

__version__ = "0.1.0"
__all__ = ["__version__", "conditional", "fit", "kernels", "linalg", "predict"]
