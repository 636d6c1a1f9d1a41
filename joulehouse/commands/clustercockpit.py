"""``joulehouse energy cc ARCHIVE`` and ``joulehouse cc export-db ARCHIVE DB.sqlite``:
a ClusterCockpit job archive without Dagster (docs/clustercockpit.md)."""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

from joulehouse.clustercockpit.export import export_db
from joulehouse.clustercockpit.jobs import read_jobs
from joulehouse.clustercockpit.layout import LEVELS, JobRef, archive_level, find_jobs
from joulehouse.clustercockpit.measure import energy_table, measure_jobs
from joulehouse.clustercockpit.readers import read_version
from joulehouse.commands.conventions import (
    BAD_INPUT,
    OK,
    CommandError,
    Progress,
    add_command,
    input_path,
    report_left_out,
    something_read,
    source_commands,
    write_table,
)
from joulehouse.errors import InputError

EXAMPLE_ARCHIVE = "examples/clustercockpit/archive"
#: What an archive holds, for errors about the path given.
EXPECTED_ARCHIVE = ("a ClusterCockpit job archive: version.txt and job folders "
                    "<cluster>/<jobId/1000>/<jobId%1000>/<startTime> with meta.json and "
                    "data.json(.gz)")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``energy cc`` to the ``energy`` group, and the ``cc`` group with ``export-db``."""
    energy = add_command(
        source_commands(subparsers, "energy", help="energy tables",
                        description="Energy tables of a source, computed without Dagster.",
                        examples=[f"joulehouse energy cc {EXAMPLE_ARCHIVE}"]), "cc",
        help="per-job energy of a ClusterCockpit job archive",
        description="Write one row per job and energy metric of every job under ARCHIVE:\n"
        "the integrated energy (energy_j, J) with its covered fraction, and cc-backend's\n"
        "own figure (energy_cc_kwh, average power x nodes x duration rounded to 0.01 kWh).\n"
        "A job that cannot be read is reported on stderr and the others still go out\n"
        "(exit code 1); when no job can be read, nothing is written (exit code 2). A job\n"
        "metric that gives no energy_facts row (a host without samples, unbridged gaps)\n"
        "is said on stderr ('left out').",
        examples=[f"joulehouse energy cc {EXAMPLE_ARCHIVE} > energy.csv",
                  "joulehouse energy cc /lustre/job-archive --format parquet --out energy.parquet"],
        handler=energy_cc)
    energy.add_argument("archive", type=Path, metavar="ARCHIVE")
    energy.add_argument("--format", choices=["csv", "parquet"], default="csv")
    energy.add_argument("--out", type=Path, metavar="FILE", help="output file (default: stdout)")
    energy.add_argument("--max-missing", type=_count, default=1, metavar="N",
                        help="null samples in a row still bridged linearly; longer gaps are "
                        "reported, not bridged (default 1)")

    group = add_command(subparsers, "cc", help="ClusterCockpit job archives",
                        description="ClusterCockpit job archives, without Dagster.",
                        examples=[f"joulehouse cc export-db {EXAMPLE_ARCHIVE} job.db"])
    commands = group.add_subparsers(dest="command", required=True)
    export = add_command(
        commands, "export-db", help="the job table as a cc-backend SQLite database",
        description="Write one row per job of ARCHIVE (meta.json) into a new SQLite database\n"
        "built by cc-backend's own migrations (DB version 11), which a ClusterCockpit\n"
        "installation can open. DB is replaced atomically. A job that cannot be read is\n"
        "reported on stderr and the others are still written (exit code 1); when no job\n"
        "can be read, DB is left untouched (exit code 2).",
        examples=[f"joulehouse cc export-db {EXAMPLE_ARCHIVE} job.db",
                  "joulehouse cc export-db /lustre/job-archive /srv/cc-backend/var/job.db"],
        handler=export_db_command)
    export.add_argument("archive", type=Path, metavar="ARCHIVE")
    export.add_argument("database", type=Path, metavar="DB",
                        help="the SQLite file to write (replaced when present)")


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a whole number >= 0: {text!r}")
    return int(text)


def archive_jobs(path: Path) -> tuple[list[JobRef], list[InputError]]:
    """The job folders of the archive ``path``, listed, and the folders that could not be
    entered (linked outside the archive); CommandError when ``path`` is no archive (saying
    which folder to give for a folder inside one), is one of a version not known
    (version.txt) or holds no job."""
    archive = input_path(path, EXPECTED_ARCHIVE, folder=True)
    found = archive_level(archive)
    if found is None:
        raise CommandError(f"{archive}: no version.txt; expected {EXPECTED_ARCHIVE}")
    level, root = found
    if level > 0:
        raise CommandError(f"{archive}: a {LEVELS[level]} folder of an archive; give the "
                           f"archive root, {root}")
    try:
        read_version(archive)
    except InputError as err:
        raise CommandError(f"{err}; not a ClusterCockpit archive of a known version") from err
    unlisted: list[InputError] = []
    refs = list(find_jobs(archive, errors=unlisted))
    if not refs and not unlisted:
        raise CommandError(f"{archive}: no job folders; expected {EXPECTED_ARCHIVE}")
    return refs, unlisted


def energy_cc(args: argparse.Namespace) -> int:
    """Handler of ``joulehouse energy cc``; returns the exit code."""
    refs, unlisted = archive_jobs(args.archive)
    with Progress(refs, unit="job", quiet=args.quiet) as shown:
        measured, errors = measure_jobs(args.archive, shown, check_schema=False,
                                        max_missing=args.max_missing)
        errors = unlisted + errors
        _report(shown, errors)
    something_read(len(measured), len(errors), "job")
    table = energy_table(measured)
    write_table(table, args.format, args.out)
    return report_left_out([record for m in measured for record in m.left_out()], len(table),
                           len(errors))


def export_db_command(args: argparse.Namespace) -> int:
    """Handler of ``joulehouse cc export-db``; returns the exit code."""
    refs, unlisted = archive_jobs(args.archive)
    with Progress(refs, unit="job", quiet=args.quiet) as shown:
        table = read_jobs(args.archive, shown)
        errors = unlisted + table.errors
        _report(shown, errors)
    something_read(len(table.jobs), len(errors), "job")
    try:
        written = export_db(args.archive, args.database, jobs=table.jobs)
    except (sqlite3.Error, OSError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise CommandError(f"{args.database}: cannot write: {reason}") from err
    print(f"{written} jobs written to {args.database}")
    return BAD_INPUT if errors else OK


def _report(shown: Progress, errors: list[InputError]) -> None:
    for error in errors:
        shown.report(str(error))
