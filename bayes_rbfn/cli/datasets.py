"""``bayes-rbfn datasets``: list the packaged data sets."""

from __future__ import annotations

import argparse

from bayes_rbfn.cli.common import PROG, Console, command
from bayes_rbfn.cli.options import dataset_descriptions
from bayes_rbfn.io.datasets import default_dataset

__all__ = []


def _datasets_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


@command(
    "datasets",
    help="list the packaged data sets",
    arguments=_datasets_arguments,
    description="List the data sets shipped with the package (use one with: bayes-rbfn fit --dataset NAME).",
)
def _run_datasets(args: argparse.Namespace, console: Console) -> int:
    del args
    listed = dataset_descriptions()
    width = max(map(len, listed))
    main_job = default_dataset()
    lines = [f"Packaged data sets (use one with: {PROG} fit --dataset NAME):"]
    for name, description in listed.items():
        default = "  [default]" if name == main_job else ""
        lines.append(f"  {name:<{width}}  {description}{default}")
    console.result("\n".join(lines))
    return 0
