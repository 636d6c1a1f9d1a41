"""The ``joulehouse`` command: read and load data without Dagster.

Each command group lives in its own module under ``joulehouse.commands`` and
registers its sub-commands here; what they share (paths, progress, output,
databases, exit codes) is in ``joulehouse.commands.conventions``.
"""

from __future__ import annotations

import argparse
import sys

from joulehouse import __version__
from joulehouse.commands import (
    clustercockpit,
    collect,
    energy,
    geopm,
    powerapi,
    report,
    sql,
    taudb,
)
from joulehouse.commands.conventions import PROG, run

EPILOG = f"""examples:
  $ {PROG} energy gpu /lustre/gpu-bench > energy.csv
  $ {PROG} taudb load sqlite:///taudb.sqlite profiles/ run.ppk
  $ {PROG} taudb list postgresql://me@dbhost:5432/taudb

exit codes: 0 all good; 1 some inputs bad (each reported on stderr, the rest
written); 2 usage or environment error (path missing or empty, database
unreachable or without the TAUdb schema); 130 interrupted; 141 the output
pipe was closed (e.g. by head)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0],
                                     epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    groups = parser.add_subparsers(dest="group", required=True)
    energy.register(groups)
    taudb.register(groups)
    geopm.register(groups)
    clustercockpit.register(groups)
    powerapi.register(groups)
    collect.register(groups)
    sql.register(groups)
    report.register(groups)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
