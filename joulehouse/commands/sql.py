"""``joulehouse sql "SELECT ..."``: a query over every table of the warehouse (DuckDB).

The tables are views over their Parquet files, read in place
(``joulehouse/accounting/query.py``); nothing is copied and nothing is written to the
warehouse. The result goes to standard output (or ``--out``) as CSV or Parquet.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import duckdb

from joulehouse.accounting.query import query, tables, view_name
from joulehouse.commands.conventions import OK, CommandError, add_command, input_path, write_table
from joulehouse.warehouse import S3_ENDPOINT_ENV, WAREHOUSE_ENV, is_url

EXPECTED = "a Joulehouse warehouse: a folder of table folders of Parquet files"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``sql`` to the ``joulehouse`` command."""
    parser = add_command(
        subparsers, "sql", help="SQL over the warehouse's tables (DuckDB)",
        description="Run QUERY (DuckDB SQL) over every table of the warehouse, each a view\n"
        "over its Parquet files (energy_facts, accounting_daily, carbon_per_fact ...;\n"
        "a nested table such as gpu_validated_frames/gpu_power is\n"
        "gpu_validated_frames.gpu_power). Nothing is copied or written there.\n"
        "--tables lists the views. Timestamps are UTC.",
        examples=[('joulehouse sql "SELECT source, sum(energy_kwh) FROM accounting_daily '
                  "WHERE calendar = 'UTC' GROUP BY source\""),
                  "joulehouse sql --tables --warehouse warehouse"],
        handler=sql)
    parser.add_argument("query", nargs="?", metavar="QUERY", help="a SELECT (DuckDB's SQL)")
    parser.add_argument("--warehouse", default=None, metavar="DIR|s3://BUCKET/PREFIX",
                        help=f"the warehouse folder, or its object-store URL (endpoint: "
                        f"${S3_ENDPOINT_ENV}, credentials: AWS_ACCESS_KEY_ID and "
                        f"AWS_SECRET_ACCESS_KEY) (default: ${WAREHOUSE_ENV}, else ./warehouse)")
    parser.add_argument("--tables", action="store_true", help="list the views and exit")
    parser.add_argument("--format", choices=("csv", "parquet"), default="csv",
                        help="output format (default: csv)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write here, not to stdout")


def sql(args: argparse.Namespace) -> int:
    root = args.warehouse or os.environ.get(WAREHOUSE_ENV) or "warehouse"
    if not is_url(root):
        input_path(Path(root), EXPECTED, folder=True)
    if args.tables:
        for table in tables(root):
            schema, view = view_name(table)
            print(f"{schema}.{view}" if schema else view)
        return OK
    if not args.query:
        args.command_parser.error("give a QUERY, or --tables")
    try:
        result = query(root, args.query)
    except (duckdb.Error, ValueError) as err:
        message = " ".join(str(err).split())
        raise CommandError(f"query failed: {message}") from err
    write_table(result, args.format, args.out)
    return OK
