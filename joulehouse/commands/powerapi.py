"""``joulehouse read powerapi`` and ``joulehouse energy powerapi``: PowerAPI reports without Dagster.

Both take report files and folders of them (searched recursively), read every
HWPC and power report file with the core (``joulehouse.powerapi``) and skip,
saying why, the files that are not reports. The files are read together: a
sensor's HWPC reports and its formula's power reports may be in different
files, and a report given in two files (one data set in two forms) counts once.
What the files or the energy left out is said on stderr (docs/cli.md, "Left out").
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd

from joulehouse.commands.conventions import (
    CommandError,
    Progress,
    add_command,
    input_path,
    report_left_out,
    something_read,
    source_commands,
    timezone_name,
    write_table,
)
from joulehouse.errors import InputError
from joulehouse.powerapi import layout
from joulehouse.powerapi.energy import (
    MACHINE_TARGETS,
    MACHINE_TARGETS_ENV,
    sensor_input,
    target_names,
)
from joulehouse.powerapi.reports import Reports, combine, read_file

EXAMPLES = "examples/powerapi"
HWPC_EXAMPLE = f"{EXAMPLES}/smartwatts_timeline.jsonl"
POWER_EXAMPLE = f"{EXAMPLES}/power.jsonl"
#: What a PATH holds, for errors about the paths given.
EXPECTED = ("PowerAPI report files (hwpc-sensor's HWPC reports, a formula's power reports: "
            "JSON, JSON lines, CSV, MongoDB exports) or folders of them")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``read powerapi`` and ``energy powerapi`` to the ``joulehouse`` command."""
    read = source_commands(subparsers, "read", help="a source's validated frames",
                           description="Read a source's files into its validated frames, "
                           "without Dagster.",
                           examples=[f"joulehouse read powerapi {EXAMPLES} --out frames"])
    reader = add_command(
        read, "powerapi", help="PowerAPI reports as frames: counters, rapl_energy, "
        "power_reports",
        description="Read every PowerAPI report file under PATH... and write the frames\n"
        "to DIR: counters.<format> and rapl_energy.<format> (HWPC reports: counters in\n"
        "long form, RAPL energy in J per tick and socket), power_reports.<format>\n"
        "(power estimates in W). A file that cannot be read is reported on stderr and\n"
        "the others are still written (exit code 1).",
        examples=[f"joulehouse read powerapi {HWPC_EXAMPLE} {POWER_EXAMPLE} --out frames",
                  ("joulehouse read powerapi /var/log/powerapi --format parquet --out frames "
                   "--timezone Europe/Paris")],
        handler=read_powerapi)
    _inputs(reader)
    reader.add_argument("--out", type=Path, default=Path("."), metavar="DIR",
                        help="folder of the frame files, made when missing (default: the "
                        "current folder)")
    energy = source_commands(subparsers, "energy", help="energy tables",
                             description="Energy tables of a source, computed without Dagster.",
                             examples=[f"joulehouse energy powerapi {EXAMPLES}"])
    windows = add_command(
        energy, "powerapi",
        help="measured and estimated energy per PowerAPI target and time window",
        description="Write one row per sensor, target, component (cpu, dram) and window:\n"
        "energy_j by method 'measured' (RAPL energy of the machine-level target: 'all',\n"
        "'system' or --machine-targets, from the HWPC reports) or 'estimated' (power\n"
        "reports x their tick), and per window the measurement (measured_j), the sum of\n"
        "the cgroup estimates (estimated_total_j) and relative_error =\n"
        "(estimated_total_j - measured_j) / measured_j. Windows\n"
        "are aligned to multiples of --window and clipped to the time reports cover.\n"
        "A file that cannot be read is reported on stderr and the rows of the others\n"
        "still go out (exit code 1). What gives no row (a report cut short, RAPL energy\n"
        "of a target that is not machine-level, power reports of one timestamp) is said\n"
        "on stderr; exit code 1 when no row comes out at all.",
        examples=[f"joulehouse energy powerapi {HWPC_EXAMPLE} {POWER_EXAMPLE} > energy.csv",
                  f"joulehouse energy powerapi {EXAMPLES} --window 2s",
                  ("joulehouse energy powerapi /var/log/powerapi --format parquet "
                   "--out energy.parquet")],
        handler=energy_powerapi)
    _inputs(windows)
    windows.add_argument("--machine-targets", type=_targets, metavar="NAMES",
                         help="names of the machine-level target whose RAPL energy is "
                         f"measured, separated by commas (default: ${MACHINE_TARGETS_ENV}"
                         f" if set, else {','.join(MACHINE_TARGETS)})")
    windows.add_argument("--window", type=_window, default="1min",
                         help="window length, e.g. 1min, 10s, 1h (default 1min)")
    windows.add_argument("--out", type=Path, metavar="FILE", help="output file (default: stdout)")


def _inputs(parser: argparse.ArgumentParser) -> None:
    """PATH..., --format and the options of how timestamps are read."""
    parser.add_argument("paths", type=Path, nargs="+", metavar="PATH",
                        help="a report file or a folder of them")
    parser.add_argument("--format", choices=["csv", "parquet"], default="csv")
    parser.add_argument("--timezone", type=timezone_name, default="UTC",
                        help="IANA zone of ISO timestamps without one (default UTC)")
    parser.add_argument("--epoch-zone", type=timezone_name, metavar="TIMEZONE",
                        help="zone of the machine that wrote PowerAPI 2.10.0 power reports: "
                        "that version writes local wall time as epoch milliseconds "
                        "(default: none, the values are UTC)")


def _window(text: str) -> str:
    try:
        length = pd.Timedelta(text)
    except ValueError:
        length = None
    if length is None or length <= pd.Timedelta(0):
        raise argparse.ArgumentTypeError(f"not a positive time span: {text!r} (e.g. 1min, "
                                         "10s, 1h)")
    return text


def _targets(text: str) -> tuple[str, ...]:
    try:
        return target_names(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def machine_targets(given: tuple[str, ...] | None) -> tuple[str, ...]:
    """The machine-level target names: ``given`` (the option), else the setting's, else
    :data:`~joulehouse.powerapi.MACHINE_TARGETS`."""
    if given is not None:
        return given
    setting = os.environ.get(MACHINE_TARGETS_ENV, "").strip()
    if not setting:
        return MACHINE_TARGETS
    try:
        return target_names(setting)
    except ValueError as err:
        raise CommandError(f"${MACHINE_TARGETS_ENV}: {err}") from None


def read_powerapi(args: argparse.Namespace) -> int:
    """Handler of ``joulehouse read powerapi``; returns the exit code."""
    if args.out.exists() and not args.out.is_dir():
        raise CommandError(f"{args.out}: not a folder; expected the folder to write the "
                           "frames to")
    found, failed, _ = _read(args)
    frames = {"counters": found.counters, "rapl_energy": found.rapl(),
              "power_reports": found.power}
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CommandError(f"{args.out}: cannot make the folder: {err.strerror or err}") from err
    rows = 0
    for name, frame in frames.items():
        if frame is not None:
            out = args.out / f"{name}.{args.format}"
            write_table(frame, args.format, out)
            print(f"{out}: {len(frame)} rows")
            rows += len(frame)
    return report_left_out(found.left_out, rows, failed)


def energy_powerapi(args: argparse.Namespace) -> int:
    """Handler of ``joulehouse energy powerapi``; returns the exit code."""
    found, failed, sensor_files = _read(args)
    targets = machine_targets(args.machine_targets)
    table = found.window_energy(args.window, targets)
    write_table(table, args.format, args.out)
    return report_left_out(found.energy_left_out(targets, lambda sensor: ", ".join(
        map(str, sensor_files[sensor])) + f" ({sensor_input(sensor)})"), len(table), failed)


def _read(args: argparse.Namespace) -> tuple[Reports, int, dict[str, list[Path]]]:
    """The reports of every file under ``args.paths`` read together, how many files were
    bad (each reported), and each sensor's files. Files that are not reports are reported
    as skipped; when no file under the paths is one, a CommandError saying what was
    expected."""
    paths = [input_path(path, EXPECTED) for path in args.paths]
    files = layout.report_paths(*paths)
    parts, failed, sensor_files = [], 0, {}
    with Progress(files, unit="file", quiet=args.quiet) as shown:
        for path in shown:
            try:
                item = layout.classify(path)
                if item.kind == layout.OTHER:
                    shown.report(f"skipped {path}: {item.reason}")
                    continue
                part = read_file(item, timezone=args.timezone, epoch_zone=args.epoch_zone)
                parts.append(part)
                for frame in (part.counters, part.power):
                    for sensor in () if frame is None else frame["sensor"].unique():
                        sensor_files.setdefault(str(sensor), []).append(path)
            except InputError as err:
                failed += 1
                shown.report(str(err))
            except OSError as err:
                failed += 1
                shown.report(f"{path}: cannot read: {err.strerror or err}")
    if not parts and not failed:
        where = ", ".join(map(str, paths))
        raise CommandError(f"{where}: no HWPC or power report files; expected {EXPECTED}")
    something_read(len(parts), failed, "report file")
    return combine(parts), failed, sensor_files
