"""``joulehouse taudb``: create a TAUdb database, load trials into it, list them.

URLs in SQLAlchemy's form: ``sqlite:///path/to/taudb.sqlite`` or
``postgresql://user@host:port/db``; a PostgreSQL password comes from the URL
or libpq's environment (``PGPASSWORD``, ``~/.pgpass``), never from an option.
"""

from __future__ import annotations

import argparse

from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import list_trials, load_trial
from joulehouse.taudb.read import read_trial_source
from joulehouse.taudb.schema import ensure_schema


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``taudb`` command group and its ``init``, ``load`` and ``list`` commands."""
    group = subparsers.add_parser("taudb", help="TAUdb: the TAU performance database")
    commands = group.add_subparsers(dest="command", required=True)

    def command(name: str, handler, help: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help)
        parser.add_argument("url", metavar="URL", help="sqlite:///FILE or postgresql://USER@HOST:PORT/DB")
        parser.add_argument("--schema", help="PostgreSQL schema holding the tables (default: public)")
        parser.set_defaults(handler=handler)
        return parser

    command("init", _init, "create the TAUdb schema unless present")
    load = command("load", _load, "load trials: folders of TAU profiles, .ppk files or GPU "
                   "benchmark run folders")
    load.add_argument("paths", metavar="PATH", nargs="+", help="a trial source")
    load.add_argument("--name", help="trial name (one PATH only; default: the folder or file name)")
    command("list", _list, "list the trials")


def _init(args: argparse.Namespace) -> int:
    with TaudbDatabase(args.url, args.schema) as db:
        created = ensure_schema(db)
    print("created the TAUdb schema" if created else "the TAUdb schema is already there")
    return 0


def _load(args: argparse.Namespace) -> int:
    if args.name is not None and len(args.paths) > 1:
        raise SystemExit("joulehouse taudb load: --name needs exactly one PATH")
    with TaudbDatabase(args.url, args.schema) as db:
        for path in args.paths:
            trial = read_trial_source(path)
            if args.name is not None:
                trial.name = args.name
            trial_id = load_trial(db, trial)
            print(f"trial {trial_id}: {trial.name} ({len(trial.threads)} threads) from {path}")
    return 0


def _list(args: argparse.Namespace) -> int:
    with TaudbDatabase(args.url, args.schema) as db:
        trials = list_trials(db)
    print("id\tname\tdata_source\tthreads\tsource")
    for trial in trials:
        print(f"{trial['id']}\t{trial['name']}\t{trial['data_source']}\t"
              f"{trial['total_threads']}\t{trial['source_key'] or ''}")
    return 0
