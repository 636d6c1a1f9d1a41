"""``joulehouse read geopm`` and ``joulehouse energy geopm``: GEOPM reports without Dagster.

A REPORT is a report file of any shape (legacy 1.x text, 2.x/3.x YAML,
``geopmsession --report-out``) or a folder holding reports side by side, as
they land (each report keyed ``<folder name>/<file name>``, as its Dagster
partition is; a report given as a file is keyed by its file name).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from joulehouse.commands.conventions import (
    BAD_INPUT,
    OK,
    CommandError,
    Progress,
    add_command,
    input_path,
    something_read,
    source_commands,
    timezone_name,
    write_table,
)
from joulehouse.errors import InputError
from joulehouse.geopm.energy import HOST_ENERGY_COLUMNS, host_energy
from joulehouse.geopm.layout import find_reports
from joulehouse.geopm.readers import Report, read_report

EXAMPLES = "examples/geopm"
EXAMPLE_REPORT = f"{EXAMPLES}/fm_stream_dgemm_2host.yaml.report"
#: What a REPORT argument is, for errors about the path given.
EXPECTED = ("a GEOPM report (legacy 1.x text, 2.x/3.x YAML or geopmsession report) "
            "or a folder of them")


@dataclass(frozen=True)
class ReportPath:
    """A report to read: its key (the ``report`` column) and its file."""

    key: str
    path: Path


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``read geopm`` and ``energy geopm`` to the ``joulehouse`` command."""
    _register_read(source_commands(
        subparsers, "read", help="a source's files as validated frames",
        description="Read a source's files into their validated frames (SI units, UTC), "
        "without Dagster.", examples=[f"joulehouse read geopm {EXAMPLES} --out frames"]))
    _register_energy(source_commands(
        subparsers, "energy", help="energy tables",
        description="Energy tables of a source, computed without Dagster.",
        examples=[f"joulehouse energy geopm {EXAMPLES}"]))


def _register_read(sources: argparse._SubParsersAction) -> None:
    """Add ``read geopm`` to the ``read`` group's sources."""
    parser = add_command(
        sources, "geopm", help="GEOPM reports into their frames",
        description="Read each REPORT into its frames (header, totals, regions, signals,\n"
        "session; docs/geopm.md) and write them as DIR/<report>/<frame>.csv (or\n"
        ".parquet), one folder per report, printed as it is written. A bad report\n"
        "is reported on stderr, nothing is written for it, and the others are still\n"
        "written (exit code 1).",
        examples=[f"joulehouse read geopm {EXAMPLES} --out frames",
                  f"joulehouse read geopm {EXAMPLE_REPORT} --format parquet --out frames"],
        handler=read_geopm)
    _report_arguments(parser)
    parser.add_argument("--out", type=Path, default=Path("."), metavar="DIR",
                        help="folder of the per-report folders (default: the current folder; "
                        "created when missing)")


def _register_energy(sources: argparse._SubParsersAction) -> None:
    """Add ``energy geopm`` to the ``energy`` group's sources."""
    parser = add_command(
        sources, "geopm", help="energy per report, host and region of GEOPM reports",
        description="Write one row per report, host and region, and per report, host and\n"
        "totals section (Application, Epoch, Unmarked Totals), of every REPORT:\n"
        "times and energies as written, power_w = package energy / sync-runtime.\n"
        "A bad report is reported on stderr and the others still go out (exit code 1).",
        examples=[f"joulehouse energy geopm {EXAMPLES} > energy.csv",
                  (f"joulehouse energy geopm {EXAMPLE_REPORT} --format parquet "
                   "--out energy.parquet")],
        handler=energy_geopm)
    _report_arguments(parser)
    parser.add_argument("--out", type=Path, metavar="FILE", help="output file (default: stdout)")


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", type=Path, nargs="+", metavar="REPORT",
                        help="a report file or a folder of reports")
    parser.add_argument("--format", choices=["csv", "parquet"], default="csv")
    parser.add_argument("--timezone", type=timezone_name, default="UTC",
                        help="IANA zone of a Start Time written without one (default UTC)")


def report_paths(paths: list[Path]) -> list[ReportPath]:
    """The reports the REPORT arguments name, all checked before any is read.

    A file is a report keyed by its name (its content is checked when read);
    a folder gives the reports directly in it (files whose first bytes are a
    GEOPM report), keyed ``<folder name>/<file name>``. A missing or empty path,
    a folder without reports, or two reports of the same key is a CommandError.
    """
    found: list[ReportPath] = []
    for path in paths:
        input_path(path, EXPECTED)
        if path.is_dir():
            items = find_reports(path)
            if not items:
                raise CommandError(f"{path}: no GEOPM reports in this folder; expected {EXPECTED}")
            found += [ReportPath(item.key, item.path) for item in items]
        else:
            found.append(ReportPath(path.name, path))
    seen: dict[str, Path] = {}
    for report in found:
        if report.key in seen:
            raise CommandError(f"{report.path}: a second report keyed {report.key!r} (the first "
                               f"is {seen[report.key]}): give one of them")
        seen[report.key] = report.path
    return found


def _read_each(reports: list[ReportPath], args: argparse.Namespace, bad: list[str]
               ) -> Iterator[tuple[ReportPath, Report, Progress]]:
    """Each report that reads, in order, under one progress display (and the display, to
    print on); a bad one is reported on stderr and its error appended to ``bad``."""
    with Progress(reports, unit="report", quiet=args.quiet) as shown:
        for report in shown:
            try:
                read = read_report(report.path, report=report.key, timezone=args.timezone)
            except InputError as err:
                bad.append(str(err))
                shown.report(str(err))
                continue
            yield report, read, shown


def read_geopm(args: argparse.Namespace) -> int:
    """Handler of ``joulehouse read geopm``; returns the exit code."""
    reports = report_paths(args.reports)
    for report in reports:  # an output folder that cannot be made fails before any work
        folder = args.out / report.key
        blocked = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()),
                       None)
        if blocked is not None:
            raise CommandError(f"{folder}: cannot write: {blocked} is a file, not a folder")
    bad: list[str] = []
    for report, read, shown in _read_each(reports, args, bad):
        folder = args.out / report.key
        _write_frames(read, folder, args.format)
        shown.print(str(folder))
    return BAD_INPUT if bad else OK


def _write_frames(report: Report, folder: Path, fmt: str) -> None:
    """``report``'s five frames as ``folder/<frame>.<fmt>``, the folder made when missing."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CommandError(f"{folder}: cannot write: {err.strerror or err}") from err
    for name, frame in report.frames().items():
        write_table(frame, fmt, folder / f"{name}.{fmt}")


def energy_geopm(args: argparse.Namespace) -> int:
    """Handler of ``joulehouse energy geopm``; returns the exit code."""
    reports = report_paths(args.reports)
    bad: list[str] = []
    tables = [host_energy(read) for _, read, _ in _read_each(reports, args, bad)]
    something_read(len(tables), len(bad), "report")
    table = (pd.concat(tables, ignore_index=True) if tables
             else pd.DataFrame(columns=HOST_ENERGY_COLUMNS))
    write_table(table, args.format, args.out)
    return BAD_INPUT if bad else OK
