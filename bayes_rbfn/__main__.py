"""``python -m bayes_rbfn``: the same command line as ``bayes-rbfn`` (see :mod:`bayes_rbfn.cli`)."""

from bayes_rbfn.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
