"""The command line, ``bayes-rbfn`` (also ``python -m bayes_rbfn``): the main job of docs/output.md.

The only layer of the package that prints: parsing, progress and reports, one module per subcommand
(:mod:`~bayes_rbfn.cli.fit`, :mod:`~bayes_rbfn.cli.compare`, :mod:`~bayes_rbfn.cli.sbc`,
:mod:`~bayes_rbfn.cli.datasets`), what they share (:mod:`~bayes_rbfn.cli.common`,
:mod:`~bayes_rbfn.cli.options`), the resume protocol of ``fit`` (:mod:`~bayes_rbfn.cli.resume`) and the
entry point (:mod:`~bayes_rbfn.cli.main`). The work itself is the library's: plans from
:mod:`bayes_rbfn.workflows.planning`, fits from :func:`bayes_rbfn.fit`, summaries from
:mod:`bayes_rbfn.infer`.

Subcommands live in one table, :data:`~bayes_rbfn.cli.common.COMMANDS`. Adding one takes a module with two
small functions, one adding its options to an :class:`argparse.ArgumentParser` and one running it, and its
import in :mod:`~bayes_rbfn.cli.main`::

    def _arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("runs", nargs="+", help="output folders of earlier fits")

    @command("summarise", help="summarise earlier fits", arguments=_arguments)
    def _run(args: argparse.Namespace, console: Console) -> int:
        configure_jax()  # when it computes with JAX
        ...
        return 0

Importing it does not load JAX: the entry point sets the process options (XLA's log level, the host device
count) before JAX starts.
"""

import os

# XLA's C++ log lines (one per persistent-cache hit) would bury the progress and the report. The level
# is read when jaxlib loads: the program sets it first thing (bayes_rbfn/__init__.py); this covers a
# caller that imported jaxlib-free parts of the package before the command line.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from bayes_rbfn.cli.common import COMMANDS, build_parser
from bayes_rbfn.cli.main import main

__all__ = ["COMMANDS", "build_parser", "main"]
