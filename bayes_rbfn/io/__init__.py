"""Files: the packaged data sets, the CSV reader and its InputError, atomic output folders.

The packaged data sets are :mod:`~bayes_rbfn.io.datasets`, the CSV reader and
:class:`~bayes_rbfn.io.reader.InputError` :mod:`~bayes_rbfn.io.reader`, the atomic output folders
:mod:`~bayes_rbfn.io.output`. Imports nothing else of the package, and not JAX.
"""

__all__ = ["datasets", "output", "reader"]
