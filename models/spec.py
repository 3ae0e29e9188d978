"""The two types every model of the collection is made of: :class:`ModelConfig` and :class:`ModelSpec`.

Kept apart from the registry in ``bayes_rbfn.models`` (which imports every model module) so that the model
modules import these types from below, not from the package that imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpyro.distributions as dist

from bayes_rbfn.models import layout
from bayes_rbfn.models.families import KernelFamily
from bayes_rbfn.models.likelihoods import LIKELIHOODS, Likelihood


@dataclass(frozen=True, eq=False)
class ModelConfig:
    """Static settings of a model: kernel family, priors, pinned values, hyperprior switch.

    Hashed by identity, so it can be a static argument of ``jax.jit``: the model functions jit their
    log densities with it, which turns NumPyro's eager model runs during initialisation into one
    compiled call instead of dozens of op-by-op compilations.
    """

    family: KernelFamily
    priors: Mapping[str, dist.Distribution]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    hyperprior: bool = False
    jitter: float | None = None
    #: Performance settings of the streamed O(NM²) pass of the SoR family
    #: (:mod:`bayes_rbfn.gp.woodbury_sums`): ``fast`` takes the sums before whitening (fewer flops,
    #: ill-conditioned; off by default), ``chunk_size`` is the number of data points per chunk (None:
    #: cache-sized), ``mesh`` a :class:`jax.sharding.Mesh` with a ``"data"`` axis to shard the pass over its
    #: devices, ``precision`` ``"float64"`` or ``"mixed"`` (kernel blocks and their products in float32, sums
    #: and factorisations in float64; accurate only for a well-conditioned K_uu:
    #: :mod:`bayes_rbfn.gp.woodbury_sums`).
    fast: bool = False
    chunk_size: int | None = None
    mesh: Any = None
    precision: str = "float64"
    #: How the LOO conditionals treat points the model interpolates (``exact`` of
    #: :func:`bayes_rbfn.gp.block_loo.sor_loo`); :func:`bayes_rbfn.infer.fitting.pointwise_loo` sets it.
    loo_exact: bool | str | None = None
    #: What ``log_likelihood`` returns per observation: ``"log_density"`` (the stored log-likelihood) or
    #: ``"pit"``, the same conditionals' CDFs at y_i (:func:`bayes_rbfn.infer.loo.loo_pit` sets it).
    loo_statistic: str = "log_density"
    #: The observation model (:mod:`bayes_rbfn.models.likelihoods`); only ``rbfn`` takes a non-Gaussian one.
    likelihood: Likelihood = LIKELIHOODS["gaussian"]
    #: The prior mean of f: ``"constant"`` (the number ``data["y_offset"]``), ``"linear"`` (sampled
    #: ``mean_intercept`` + (x − x̄)·``mean_slope``) or a callable of X added to ``data["y_offset"]``.
    mean: Any = "constant"


@dataclass(frozen=True)
class ModelSpec:
    """A model of the collection: NumPyro model + analytic per-draw predictive + LOO log-likelihood."""

    name: str
    model: Callable[..., None]
    predict: Callable[..., tuple[Any, Any]]
    log_likelihood: Callable[..., Any]
    uses_inducing: bool
    description: str
    grouped: bool = False
    #: For a model whose hyperparameters are not those of a kernel family (e.g. ``blr``'s α and β): the
    #: family (names, default priors) that :func:`bayes_rbfn.fit` uses instead of ``kernel=``.
    family: KernelFamily | None = None
    #: ``predict`` streams over its test points in bounded memory (e.g. ``sor``), so the drivers pass all
    #: of them in one call and the per-draw O(NM²) factor is computed once per draw, not once per batch.
    predict_streams: bool = False
    #: The likelihoods (:mod:`bayes_rbfn.models.likelihoods`) the model takes.
    likelihoods: tuple[str, ...] = ("gaussian",)
    #: Deterministic sites of size N per draw (e.g. the layer's latent f at X) that ``fit`` does not store
    #: in the posterior: the predictions group holds f at X_pred, and ``Predictive`` recomputes them.
    unstored_sites: tuple[str, ...] = ()
    #: The predictive's prior at a test point is the Nyström Q_** (sor, rbfn): it loses the prior variance
    #: far from the inducing inputs, and the drivers check and report where it does.
    variance_collapses: bool = False
    #: NUTS samples the M weights α themselves (rbfn), so the default M stays at
    #: :data:`bayes_rbfn.defaults.DEFAULT_NUM_INDUCING` with several inputs too
    #: (:func:`bayes_rbfn.defaults.default_num_inducing`).
    samples_weights: bool = False
    #: Its O(NM²) pass runs through the streamed passes (:mod:`bayes_rbfn.gp.streaming`), so
    #: ``fit(shard=...)`` can split the data over devices.
    shards_data: bool = False
    #: Its O(NM²) sums run through the streamed pass of :mod:`bayes_rbfn.gp.woodbury_sums`, so that
    #: ``fit(precision="mixed")`` applies to it (``ModelConfig.precision``).
    takes_precision: bool = False
    #: Lays the data out for the model: ``prepare(X, y, Z, *, y_offset, constant_mean, group, group_pred,
    #: X_pred) → (data, layout)``, the :class:`~bayes_rbfn.models.layout.Layout` being all the drivers
    #: read of it (the order of the observations, the predictive's extra inputs, what the fit stores).
    #: Default :func:`layout.flat_layout`.
    prepare: Callable[..., tuple[dict, layout.Layout]] = layout.flat_layout
    #: ``prepare``'s arguments besides X, y and Z that a stored fit gives back:
    #: ``read_layout(constant_data, predictions_constant_data) → dict`` (the grouped model's codes).
    read_layout: Callable[..., dict] = layout.no_layout
    #: ArviZ dims of a posterior site: ``site_dims(name, shape, sizes) → list | None``.
    site_dims: Callable[..., list[str] | None] = layout.site_dims
    #: Whether a posterior variable is a hyperparameter (summarised and reported): ``(name, dims) → bool``.
    is_hyperparameter: Callable[[str, tuple[str, ...]], bool] = layout.is_hyperparameter
    #: Inputs the predictive needs at each test point besides X_test, in ``predict``'s order after it
    #: (the grouped model's ``("group",)``: the group code of every test point).
    predictive_inputs: tuple[str, ...] = ()
    #: Its log density is a density of y, so data simulated from the prior are a draw of the model and
    #: simulation-based calibration applies (False for ``vfe``, whose bound is not a density).
    generative: bool = True
    #: Where the collection's listings put it (lower first; ties by name).
    rank: int = 100

    def check_likelihood(self, likelihood: str) -> None:
        """Raise a ``ValueError`` naming ``likelihood`` where the model does not take it.

        A model that marginalises its weights takes only the Gaussian likelihood, the weight-space ``rbfn``
        any.
        """
        if likelihood not in self.likelihoods:
            takes = " or ".join(map(repr, self.likelihoods))
            raise ValueError(
                f"likelihood: {likelihood!r} needs the weight-space model rbfn; the {self.name!r} model "
                f"marginalises its weights, which only the {takes} likelihood allows"
            )

    @property
    def takes_linear_mean(self) -> bool:
        """Whether the model takes ``mean="linear"``: not a grouped model nor one with its own family.

        A grouped model has its own constant offset per group; a model with its own family of
        hyperparameters (``blr``'s basis) carries its own trend.
        """
        return not self.grouped and self.family is None


__all__ = ["ModelConfig", "ModelSpec"]
