"""Writing InferenceData to a netCDF file so that a full disk is an ordinary ``OSError``.

ArviZ writes netCDF through xarray's h5netcdf engine, that is HDF5 through h5py. When the disk fills while
HDF5 writes a file, h5py raises ``RuntimeError`` or ``OSError`` with the system's errno only inside its
message ("errno = 28, error message = 'No space left on device'"), its finalisers print tracebacks, and HDF5
keeps objects of a file it could not close: when the process exits, HDF5's own clean-up crashes in
``H5D_close`` (SIGSEGV, "free(): invalid pointer"). Closing such a file from Python, or even asking its name,
crashed as well. So HDF5 never writes to the disk here: :func:`write_inference_data` has it write the file
into memory, and writes the finished bytes with plain file I/O, whose failure is an ``OSError`` that leaves
HDF5 untouched.
"""

from __future__ import annotations

import io
import os
from typing import Any

__all__ = ["write_inference_data"]


def write_inference_data(idata: Any, path: str | os.PathLike[str]) -> None:
    """Write the InferenceData ``idata`` to the netCDF file ``path``: the file ArviZ's ``to_netcdf`` writes.

    Its attributes at the root, a netCDF group per ArviZ group, every numeric variable zlib-compressed;
    built in memory first (memory of the file's size, for a moment) and then written out.

    Raises:
        OSError: ``path`` could not be written (its ``filename`` is ``path``).
    """
    import xarray as xr

    from bayes_rbfn.io.arviz_compat import group_dataset, groups

    memory = io.BytesIO()
    mode = "w"
    if idata.attrs:
        xr.Dataset(attrs=idata.attrs).to_netcdf(memory, mode=mode, engine="h5netcdf", group="/")
        mode = "a"
    for group in groups(idata):
        data = group_dataset(idata, group)
        encoding = {
            name: {"zlib": True} for name, values in data.variables.items() if _compressible(values.dtype)
        }
        data.to_netcdf(memory, mode=mode, engine="h5netcdf", group=group, encoding=encoding)
        mode = "a"
    if mode == "w":  # nothing to write: an empty netCDF file
        xr.Dataset().to_netcdf(memory, mode=mode, engine="h5netcdf")
    try:
        with open(path, "wb") as disk:
            disk.write(memory.getbuffer())
    except OSError as err:
        if err.filename is not None:
            raise
        raise OSError(err.errno, err.strerror, os.fspath(path)) from err


def _compressible(dtype: Any) -> bool:
    """Whether ArviZ compresses a variable of this dtype: booleans, numbers, byte strings, records of them."""
    if dtype.kind == "V" and dtype.fields:
        return all(_compressible(item) for item, _ in dtype.fields.values())
    return dtype.kind in "biufcS"
