"""Simulation-based calibration of ``sor`` and ``rbfn`` (issue 8; :mod:`bayes_rbfn.sbc`), and its output.

Reduced SBC, shared by every test of a model (one compiled program per model; ``noise_scale`` is traced, so
the wrong variant reuses it): R = 100 replications, n = 20, M = 5, 100 warmup + 100 draws of one NUTS
chain each, thinned by 5 → L = 20 draws, ranks in {0, …, 20}, χ² on 10 bins (≥ 10 expected counts per bin,
9 degrees of freedom). Ranked: ℓ, s², σ and the latent f at the two inputs of ``LATENT_INPUTS``. Fixed
seed (shifted by ``BAYES_RBFN_TEST_SEED``, see tests/stochastic.py); the thresholds hold under any seed.

Thresholds (stated once, here):

* **accept** — every quantity's p-value > ``ACCEPT_FAMILY / Q`` with ``ACCEPT_FAMILY = 1e-3``: a
  Bonferroni rule, so a correct sampler fails the test with probability ≤ 0.1% (Q = 5 here: p > 2e-4);
* **reject** — the noise's p-value < ``REJECT_P = 1e-6`` when the fitted noise is twice the simulated one
  (its posterior shifts by −log 2, several posterior standard deviations, so the truth ranks near
  the top: the observed p-values are ~1e-160).

Observed on the development machine (seed 0): accept, min p = 0.44 (``sor``) and 0.13 (``rbfn``); reject,
p(noise) ≈ 1e-164 for both. Timing: ~30 s compilation per model with a cold persistent cache, then
~6 s (``sor``) and ~9 s (``rbfn``) per run on 2 loaded cores.
"""

import functools
import json
import warnings

import numpy as np
import pytest
from stochastic import record, seed

from bayes_rbfn.io import InputError
from bayes_rbfn.sbc import (
    HYPERS,
    LATENT_INPUTS,
    MODELS,
    chi2_uniformity,
    plot_ecdf,
    quantity_names,
    run_sbc,
    statistics,
    write_sbc,
)

SETTINGS = dict(reps=100, n=20, num_inducing=5, draws=100, warmup=100, thin=5, seed=seed(0))
#: Family-wise false-alarm rate of the accept tests (Bonferroni over the Q quantities).
ACCEPT_FAMILY = 1e-3
#: The wrong variant must push the noise's p-value below this.
REJECT_P = 1e-6
#: At most this fraction of post-warmup transitions may diverge in a calibrated run.
MAX_DIVERGENT = 0.01


@functools.cache
def sbc(model: str, noise_scale: float = 1.0):
    return run_sbc(model=model, noise_scale=noise_scale, **SETTINGS)


@pytest.mark.stochastic
@pytest.mark.parametrize("model", ["sor", "rbfn"])
def test_sbc_accepts(model):
    """Well specified: ranks of ℓ, s², σ, f(0.3), f(0.75) are uniform — every p > 1e-3 / 5 (Bonferroni,
    family-wise false alarm ≤ 0.1%); ranks lie in {0, …, L}; fewer than 1% of transitions diverge."""
    r = sbc(model)
    record("sbc", model=model, min_p=r.min_pvalue, divergences=r.divergences)
    Q = len(HYPERS) + len(LATENT_INPUTS)
    assert r.params == quantity_names(model)
    assert r.ranks.shape == (SETTINGS["reps"], Q)
    assert r.ranks.min() >= 0 and r.ranks.max() <= SETTINGS["draws"] // SETTINGS["thin"]
    assert r.min_pvalue > ACCEPT_FAMILY / Q, (r.pvalues, r.chi2)
    assert r.divergences < MAX_DIVERGENT * SETTINGS["reps"] * SETTINGS["draws"], r.divergences


@pytest.mark.stochastic
@pytest.mark.parametrize("model", ["sor", "rbfn"])
def test_sbc_detects_doubled_noise(model):
    """Misspecified fit (fitted noise = 2 × simulated noise): the posterior of σ shifts by −log 2, the true
    σ ranks near the top (mean fractional rank > 0.75) and the χ² test rejects: p(noise) < 1e-6."""
    r = sbc(model, 2.0)
    assert r.pvalues["noise"] < REJECT_P, r.pvalues
    noise = r.ranks[:, r.params.index("noise")]
    assert np.mean(noise) > 0.75 * (r.num_ranks - 1)


def test_plot_ecdf_uses_arviz_bands_without_warnings(tmp_path):
    """The ECDF-difference plot passes fixed evaluation points to ``arviz.plot_ecdf`` (so the simultaneous
    bands are calibrated and ArviZ 0.23 raises no behaviour-change or calibration warning); one panel per
    quantity; the PNG is written."""
    r = sbc("sor")
    path = tmp_path / "ecdf.png"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = plot_ecdf(r, path)
    assert path.stat().st_size > 0
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == len(r.params)
    # the band is a filled region (PolyCollection) in every panel
    assert all(ax.collections for ax in visible)


def test_write_sbc_round_trip_and_refusal(tmp_path):
    """``write_sbc`` writes ranks.csv (header = quantity names, one row per replication), statistics.csv,
    statistics.json and ecdf.png; the ranks round-trip exactly; an existing non-empty folder is refused
    (InputError naming --overwrite) unless ``overwrite=True``; nothing is left behind next to it."""
    r = sbc("sor")
    out = tmp_path / "sbc_out"
    assert write_sbc(r, out) == out
    assert sorted(p.name for p in out.iterdir()) == [
        "ecdf.png",
        "ranks.csv",
        "statistics.csv",
        "statistics.json",
    ]

    header = (out / "ranks.csv").read_text().splitlines()[0].split(",")
    assert tuple(header) == r.params
    ranks = np.loadtxt(out / "ranks.csv", delimiter=",", skiprows=1, dtype=np.int64)
    np.testing.assert_array_equal(ranks, r.ranks)

    stats = json.loads((out / "statistics.json").read_text())
    assert stats == json.loads(json.dumps(statistics(r)))
    assert stats["settings"]["reps"] == SETTINGS["reps"] and stats["dof"] == r.bins - 1
    for name in r.params:
        assert stats["quantities"][name]["pvalue"] == pytest.approx(r.pvalues[name], rel=1e-12)
    rows = (out / "statistics.csv").read_text().splitlines()
    assert rows[0] == "quantity,chi2,dof,pvalue,mean_rank" and len(rows) == 1 + len(r.params)

    before = (out / "ranks.csv").read_bytes()
    with pytest.raises(InputError, match="overwrite"):
        write_sbc(r, out)
    assert (out / "ranks.csv").read_bytes() == before
    write_sbc(r, out, overwrite=True)
    assert (out / "ranks.csv").read_bytes() == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_chi2_uniformity_exact_expectations():
    """The χ² helper: perfectly uniform ranks give statistic 0 / p = 1, all-equal ranks p ≈ 0, and
    unequal bins (21 rank values into 4 bins) use exact expected counts."""
    ranks = np.repeat(np.arange(21), 10)
    stat, p = chi2_uniformity(ranks, 21, 4)
    assert stat == pytest.approx(0.0, abs=1e-12) and p == pytest.approx(1.0)
    stat, p = chi2_uniformity(np.zeros(210, int), 21, 7)
    assert p < 1e-30


def test_quantity_names():
    """Quantity names follow DESIGN §2 and the models' site names."""
    assert quantity_names("sor") == ("lengthscale", "variance", "noise", "f[0]", "f[1]")
    assert quantity_names("blr") == ("alpha", "beta", "f[0]", "f[1]")
    grouped = quantity_names("grouped", num_groups=2)
    assert grouped[:6] == tuple(f"{h}_{s}" for s in ("mu", "tau") for h in HYPERS)
    assert grouped[6:9] == ("lengthscale[0]", "variance[0]", "noise[0]")
    assert grouped[-1] == "f[1,1]" and len(grouped) == 6 + 2 * 3 + 2 * 2


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(model="nope"), "model: expected one of sor, rbfn, grouped, blr"),
        (dict(reps=0), "reps"),
        (dict(reps=2.5), "reps"),
        (dict(draws=-1), "draws"),
        (dict(warmup=True), "warmup"),
        (dict(num_groups=0), "num_groups"),
        (dict(draws=4, thin=5), "thin"),
        (dict(noise_scale=0.0), "noise_scale"),
        (dict(noise_scale=float("nan")), "noise_scale"),
        (dict(n=3, num_inducing=5), "num_inducing"),
        (dict(seed=-1), "seed"),
        (dict(bins=1), "bins"),
        (dict(target_accept=1.0), "target_accept"),
    ],
    ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v)),
)
def test_run_sbc_rejects_bad_arguments(kwargs, match):
    """Argument errors name the argument (and list the valid models); raised before any compilation."""
    with pytest.raises(ValueError, match=match):
        run_sbc(**kwargs)


def test_models_constant():
    """The models the CLI offers."""
    assert MODELS == ("sor", "rbfn", "grouped", "blr")
