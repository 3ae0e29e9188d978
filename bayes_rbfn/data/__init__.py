"""The data sets shipped with the package: CSV files and their provenance.

They are read by :mod:`bayes_rbfn.io.datasets`.
"""

__all__ = []
