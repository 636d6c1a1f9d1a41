"""``joulehouse report --user U [--month M] --out FILE``: an HTML accounting report.

One self-contained file (tables, plots as data URIs) from the warehouse's accounting
tables; see ``joulehouse/accounting/report.py``. Also ``--project P`` and ``--job KEY``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from joulehouse.commands.conventions import OK, CommandError, add_command, input_path
from joulehouse.commands.sql import EXPECTED, WAREHOUSE_ENV


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``report`` to the ``joulehouse`` command."""
    parser = add_command(
        subparsers, "report", help="an HTML energy report of a user, project or job",
        description="Write a self-contained HTML report (tables and plots) of a user's or a\n"
        "project's energy, CO2e, cost, waste and trust checks, in one UTC month\n"
        "(--month) or over all time, or of one job's facts in every method, from the\n"
        "warehouse's accounting tables (materialize them first).",
        examples=["joulehouse report --user k106eb10 --month 2023-02 --out k106eb10.html",
                  "joulehouse report --project clock-limit --out clock-limit.html",
                  "joulehouse report --job fritz/398764/1675954353 --out job.html"],
        handler=report)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--user", metavar="U", help="a user (ClusterCockpit's hpc_user)")
    which.add_argument("--project", metavar="P",
                       help="a project (ClusterCockpit), GPU experiment or GEOPM report")
    which.add_argument("--job", metavar="KEY", help="an energy_facts entity, e.g. a job key")
    parser.add_argument("--month", metavar="YYYY-MM", help="one UTC month (user, project)")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE",
                        help="the HTML file to write")
    parser.add_argument("--warehouse", type=Path, default=None, metavar="DIR",
                        help=f"the warehouse folder (default: ${WAREHOUSE_ENV}, else ./warehouse)")


def report(args: argparse.Namespace) -> int:
    # imported here: matplotlib and pandera are not part of every command's start-up
    from joulehouse.accounting.report import ReportError, Scope, render

    root = args.warehouse or Path(os.environ.get(WAREHOUSE_ENV) or "warehouse")
    input_path(root, EXPECTED, folder=True)
    if args.job is not None and args.month is not None:
        args.command_parser.error("--month is for --user and --project, not --job")
    try:
        scope = Scope(user=args.user, project=args.project, job=args.job, month=args.month)
    except ValueError as err:
        args.command_parser.error(str(err))
    try:
        text = render(root, scope)
    except ReportError as err:
        raise CommandError(f"{root}: {err}") from err
    try:
        args.out.write_text(text, encoding="utf-8")
    except OSError as err:
        raise CommandError(f"{args.out}: cannot write: {err.strerror or err}") from err
    return OK
