"""Write the fit that tests/io/test_arviz_compat.py reads back under both ArviZ lines.

Run it once under each line, from the repository root:

    python tests/data/make_cross_line_fits.py                      # arviz 0.x: fit_arviz0.nc
    /path/to/py313-venv/bin/python tests/data/make_cross_line_fits.py   # arviz 1.x: fit_arviz1.nc

A small SoR fit (squared-exponential kernel, 5 fixed inducing inputs, 2 chains of 25 draws), written as the
CLI writes ``inference.nc`` (bayes_rbfn.io.netcdf.write_inference_data).
"""

from pathlib import Path

import numpyro

numpyro.enable_x64()

import numpy as np  # noqa: E402

import bayes_rbfn as br  # noqa: E402
from bayes_rbfn.io.arviz_compat import ARVIZ_1  # noqa: E402
from bayes_rbfn.io.netcdf import write_inference_data  # noqa: E402

x = np.linspace(0.0, 6.0, 30)
y = np.sin(x) + 0.1 * np.cos(7 * x)
idata = br.fit(
    "sor",
    x,
    y,
    Z=np.linspace(0.3, 5.7, 5),
    X_pred=np.linspace(0.0, 6.0, 8),
    chains=2,
    draws=25,
    warmup=150,
    seed=0,
    progress=False,
    check_diagnostics=False,
)
path = Path(__file__).resolve().parent / f"fit_arviz{int(ARVIZ_1)}.nc"
write_inference_data(idata, path)
print(path, path.stat().st_size, "bytes")
