"""``joulehouse read <source>``: a source's files read into their validated frames."""

from __future__ import annotations

import argparse

from joulehouse.commands import geopm
from joulehouse.commands.conventions import add_command


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``read`` group and its sources to the ``joulehouse`` command."""
    group = add_command(subparsers, "read", help="a source's files as validated frames",
                        description="Read a source's files into their validated frames "
                        "(SI units, UTC), without Dagster.",
                        examples=[f"joulehouse read geopm {geopm.EXAMPLES} --out frames"])
    sources = group.add_subparsers(dest="source", required=True)
    geopm.register_read(sources)
