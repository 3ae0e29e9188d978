"""Files: the packaged data sets (:mod:`~bayes_rbfn.io.datasets`), the CSV reader and
:class:`~bayes_rbfn.io.reader.InputError` (:mod:`~bayes_rbfn.io.reader`), atomic output folders
(:mod:`~bayes_rbfn.io.output`). Imports nothing else of the package, and not JAX.
"""

__all__ = ["datasets", "output", "reader"]
