"""The sections of ``benchmarks/run.py``, one module each.

Every module holds, for its section:

- ``NAME``: the section's name on the command line (``--sections``) and its key in ``results.json``;
- ``FULL`` and ``QUICK``: its sizes at full scale and at ``--quick`` scale;
- ``TARGETS`` (where the section has a target): the bound its figure is held to in the report;
- ``run(cfg, ...)``: the measurement, run in a worker process of its own (``run.py --worker NAME``),
  returning a JSON-serialisable dict;
- ``targets(r, report)`` and/or ``tables(r, report)``: its part of ``results.md`` and ``results.csv``,
  from its own result ``r``: rows of the targets table (``report.rows``), markdown lines of its own
  table (returned by ``tables``), and the figures of ``results.csv`` (``report.add_csv``).

The shared helpers (data, timing, NUTS runs and their diagnostics, number formatting, the ``Report`` the
report functions add to) are in :mod:`common`. Only the standard library is imported at module level:
JAX and NumPy are imported inside the functions, after the worker's :func:`common._setup` has configured
them (float64, BLAS threads, the compilation cache).
"""
