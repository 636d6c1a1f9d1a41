"""``joulehouse taudb``: create a TAUdb database, load trials into it, list them.

URLs in SQLAlchemy's form: ``sqlite:///path/to/taudb.sqlite`` or
``postgresql://user@host:port/db``; a PostgreSQL password comes from the URL
or libpq's environment (``PGPASSWORD``, ``~/.pgpass``), never from an option.
Only ``init`` and ``load`` create or change anything; ``list`` opens the
database read-only and needs its TAUdb schema.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from joulehouse.commands.conventions import (
    OK,
    CommandError,
    Progress,
    add_command,
    input_path,
    open_taudb,
    report_left_out,
)
from joulehouse.commands.powerapi import machine_targets
from joulehouse.errors import InputError
from joulehouse.leftout import LeftOut
from joulehouse.taudb.connect import TaudbDatabase, masked_url
from joulehouse.taudb.loader import list_trials, load_trial
from joulehouse.taudb.read import EXPECTED, read_trials
from joulehouse.taudb.schema import build_indexes, create_schema

URL_HELP = "sqlite:///FILE or postgresql://USER@HOST:PORT/DB"
DB = "sqlite:///taudb.sqlite"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``taudb`` command group and its ``init``, ``load`` and ``list`` commands."""
    group = add_command(subparsers, "taudb", help="TAUdb: the TAU performance database",
                        description=__doc__.split("\n\n")[0].replace("``", ""),
                        examples=[f"joulehouse taudb init {DB}",
                                  f"joulehouse taudb load {DB} profiles/",
                                  f"joulehouse taudb list {DB}"])
    commands = group.add_subparsers(dest="command", required=True)

    def command(name: str, handler, help: str, description: str,
                examples: list[str]) -> argparse.ArgumentParser:
        parser = add_command(commands, name, help=help, description=description,
                             examples=examples, handler=handler)
        parser.add_argument("url", metavar="URL", help=URL_HELP)
        parser.add_argument("--schema", help="PostgreSQL schema holding the tables "
                            "(default: the role's search_path)")
        return parser

    command("init", _init, "create the TAUdb schema unless present, and Joulehouse's indexes",
            "Create the TAUdb schema (TAU's own DDL) unless present; a SQLite file\n"
            "and its folder are created when missing. Joulehouse's own indexes are\n"
            "built where missing (run it after upgrading a large TAUdb); one that\n"
            "cannot be built is an error (exit 2) naming it, its table, why and what\n"
            "to do.",
            [f"joulehouse taudb init {DB}",
             "joulehouse taudb init postgresql://me@dbhost:5432/perf --schema taudb"])
    load = command("load", _load, "load trials: folders of TAU profiles, .ppk files, GPU "
                   "benchmark run folders, GEOPM reports, ClusterCockpit job folders or PowerAPI\n"
                   "reports",
                   "Load each PATH as one trial (replacing the trial of the same source;\n"
                   "PowerAPI report files or folders: one trial per sensor and day),\n"
                   "creating the database and its schema when missing. Every PATH must exist\n"
                   "and hold something, or nothing is loaded (exit 2); a PATH that cannot\n"
                   "be read is reported and the others are still loaded (exit 1). What a\n"
                   "trial leaves out of its source (TAU text profiles: timer lines with 0\n"
                   "calls, user events with 0 samples, skipped by rule) is said on stderr.",
                   [f"joulehouse taudb load {DB} examples/tau-profiles/tau2_wrap_mpi2 app.ppk",
                    (f"joulehouse taudb load {DB} examples/gpu-data/power-limit/bert/250W "
                     "--name bert-250W"),
                    (f"joulehouse taudb load {DB} "
                     "examples/clustercockpit/archive/emmy/1403/244/1608923076"),
                    f"joulehouse taudb load {DB} examples/powerapi",
                    f"joulehouse taudb load {DB} examples/geopm/*.report"])
    load.add_argument("paths", type=Path, metavar="PATH", nargs="+", help="a trial source")
    load.add_argument("--name", help="trial name (one PATH only; default: the folder or file name)")
    command("list", _list, "list the trials (read-only)",
            "List the trials, tab-separated: id, name, data source, threads, source.\n"
            "Read-only: a database that is missing or has no TAUdb schema is an error.",
            [f"joulehouse taudb list {DB}",
             "PGPASSWORD=... joulehouse taudb list postgresql://me@dbhost:5432/perf"])


def _init(args: argparse.Namespace) -> int:
    with open_taudb(args.url, args.schema, create=True) as db:
        created = create_schema(db)
        failure = build_indexes(db)
    print("created the TAUdb schema" if created else "the TAUdb schema is already there")
    if failure is not None:
        raise CommandError(f"{masked_url(args.url)}: {failure.describe()}")
    return OK


def _load(args: argparse.Namespace) -> int:
    if args.name is not None and len(args.paths) > 1:
        args.command_parser.error("--name needs exactly one PATH")
    paths = [input_path(path, EXPECTED.removeprefix("expected ")) for path in args.paths]
    targets = machine_targets(None)  # PowerAPI's, from the setting
    failed, loaded, left_out = 0, 0, []
    with open_taudb(args.url, args.schema, create=True) as db, \
            Progress(paths, unit="trial", quiet=args.quiet) as shown:
        for path in shown:
            try:
                loaded += _load_path(db, path, args.name, shown, targets, left_out)
            except InputError as err:
                failed += 1
                shown.report(str(err))
    return report_left_out(left_out, loaded, failed)


def _load_path(db: TaudbDatabase, path: Path, name: str | None, shown: Progress,
               powerapi_targets: tuple[str, ...], left_out: list[LeftOut]) -> int:
    """Load the trials of one PATH, each printed as loaded, and add what each left out of
    its source to ``left_out``; returns how many were loaded. A trial the loader refuses
    raises :class:`InputError` (the trials before it stay loaded)."""
    trials = read_trials(path, powerapi_targets=powerapi_targets)
    if name is not None and len(trials) > 1:
        raise InputError(path, f"--name names one trial; this holds {len(trials)}")
    for trial in trials:
        if name is not None:
            trial.name = name
        trial_id = load_trial(db, trial)
        left_out += trial.left_out
        shown.print(f"trial {trial_id}: {trial.name} ({len(trial.threads)} threads) "
                    f"from {path}")
    return len(trials)


def _list(args: argparse.Namespace) -> int:
    with open_taudb(args.url, args.schema, create=False) as db:
        trials = list_trials(db)
    print("id\tname\tdata_source\tthreads\tsource")
    for trial in trials:
        print(f"{trial['id']}\t{trial['name']}\t{trial['data_source']}\t"
              f"{trial['total_threads']}\t{trial['source_key'] or ''}")
    return OK
