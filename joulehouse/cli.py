"""The ``joulehouse`` command: read and load data without Dagster.

Each command group lives in its own module under ``joulehouse.commands`` and
registers its sub-commands here.
"""

from __future__ import annotations

import argparse
import sys

from joulehouse.commands import energy, taudb
from joulehouse.errors import InputError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="joulehouse", description=__doc__.splitlines()[0])
    groups = parser.add_subparsers(dest="group", required=True)
    energy.register(groups)
    taudb.register(groups)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args) or 0
    except InputError as err:
        print(f"joulehouse: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
