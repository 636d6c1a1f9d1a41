"""``joulehouse read intensity PATH``: grid carbon intensity files without Dagster
(docs/accounting.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from joulehouse.accounting.intensity import read_file, read_folder
from joulehouse.commands.conventions import (
    add_command,
    input_path,
    report_left_out,
    source_commands,
    write_table,
)
from joulehouse.leftout import LeftOut

EXAMPLES = "examples/intensity"
#: What a path to read holds, for errors about it.
EXPECTED = ("an intensity file (an Electricity Maps export or OWID yearly figures, CSV) or a "
            "folder of them")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``read intensity`` to the ``read`` group."""
    parser = add_command(
        source_commands(subparsers, "read", help="a source's files as validated frames",
                        description="Read a source's files into their validated frames (SI "
                        "units, UTC), without Dagster.",
                        examples=[f"joulehouse read intensity {EXAMPLES}"]),
        "intensity", help="grid carbon intensity files into one table",
        description="Write the intensity table of PATH (a file, or every *.csv under a\n"
        "folder, as the carbon_intensity asset reads its landing folder): one row per\n"
        "zone, basis and interval, gCO2e/kWh, UTC. A row whose intensity cell is empty\n"
        "gives no interval and is said on stderr ('left out', per file, zone and basis);\n"
        "a bad file is an error naming file and line (exit code 1).",
        examples=[f"joulehouse read intensity {EXAMPLES} > intensity.csv",
                  ("joulehouse read intensity DE_2024_hourly.csv --format parquet "
                   "--out de.parquet")],
        handler=read_intensity)
    parser.add_argument("path", type=Path, metavar="PATH")
    parser.add_argument("--format", choices=["csv", "parquet"], default="csv")
    parser.add_argument("--out", type=Path, metavar="FILE", help="output file (default: stdout)")


def read_intensity(args: argparse.Namespace) -> int:
    """Handler of ``joulehouse read intensity``; returns the exit code (a bad file raises
    its InputError: exit 1, nothing written)."""
    path = input_path(args.path, EXPECTED)
    left_out: list[LeftOut] = []
    table = (read_folder if path.is_dir() else read_file)(path, left_out)
    write_table(table, args.format, args.out)
    return report_left_out(left_out, len(table), 0)
