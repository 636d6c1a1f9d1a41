"""The ``joulehouse`` command: read and load data without Dagster.

Each command group lives in its own module under ``joulehouse.commands`` and
registers its sub-commands here; what they share (paths, progress, output,
databases, exit codes) is in ``joulehouse.commands.conventions``. A command line
imports only the modules of the command it names (the others pull in pandera,
SQLAlchemy, matplotlib...), so ``joulehouse sql`` starts in a fraction of a
second; the top-level help imports them all to list every command.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from joulehouse import __version__
from joulehouse.commands.conventions import PROG, run

#: The modules registering command groups, in the order the help lists them.
MODULES = ("energy", "taudb", "geopm", "clustercockpit", "powerapi", "intensity", "collect",
           "sql", "report")
#: The modules registering each top-level command (``read`` and ``energy`` are shared by the
#: sources): only they are imported when a command line names it.
COMMAND_MODULES = {
    "energy": ("energy", "geopm", "clustercockpit", "powerapi"),
    "read": ("geopm", "powerapi", "intensity"),
    "cc": ("clustercockpit",),
    "taudb": ("taudb",),
    "collect": ("collect",),
    "sql": ("sql",),
    "report": ("report",),
}

EPILOG = f"""examples:
  $ {PROG} energy gpu /lustre/gpu-bench > energy.csv
  $ {PROG} taudb load sqlite:///taudb.sqlite profiles/ run.ppk
  $ {PROG} taudb list postgresql://me@dbhost:5432/taudb

exit codes: 0 all good; 1 some inputs bad (each reported on stderr, the rest
written); 2 usage or environment error (path missing or empty, database
unreachable or without the TAUdb schema); 130 interrupted; 141 the output
pipe was closed (e.g. by head)."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of the top-level ``command`` alone (a name of
    ``COMMAND_MODULES``)."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0],
                                     epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    groups = parser.add_subparsers(dest="group", required=True)
    for module in (MODULES if command is None else COMMAND_MODULES[command]):
        importlib.import_module(f"joulehouse.commands.{module}").register(groups)
    return parser


def named_command(argv: Sequence[str]) -> str | None:
    """The top-level command ``argv`` names (its first word not an option), if known."""
    first = next((word for word in argv if not word.startswith("-")), None)
    return first if first in COMMAND_MODULES else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return run(build_parser(named_command(argv)).parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
