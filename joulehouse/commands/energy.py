"""``joulehouse energy gpu DATA_ROOT``: the per-repetition energy table of a data root."""

from __future__ import annotations

import argparse
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
from joulehouse.gpu.energy import REPETITION_ENERGY_COLUMNS, left_out, repetition_energy
from joulehouse.gpu.layout import (
    find_repetitions,
    folder_level,
    is_complete,
    is_root_name,
    root_name,
)
from joulehouse.gpu.readers import EXTERNAL_POWER_UNITS, read_repetition
from joulehouse.gpu.schemas import REPETITION_ENERGY_SCHEMA
from joulehouse.validation import validate

EXAMPLE_ROOT = "examples/gpu-data"
#: What a data root holds, for errors about the path given.
EXPECTED_ROOT = ("a GPU benchmark data root: experiment/benchmark/run/repetition folders, "
                 "each with timestamps.csv")
#: Where a folder of a data root sits, for ``folder_level``'s answer.
_LEVELS_DOWN = {"repetition": 4, "run": 3, "benchmark": 2}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``energy gpu`` to the ``joulehouse`` command."""
    sources = source_commands(subparsers, "energy", help="energy tables",
                              description="Energy tables of a source, computed without Dagster.",
                              examples=[f"joulehouse energy gpu {EXAMPLE_ROOT}"])
    gpu = add_command(
        sources, "gpu",
        help="per-repetition energy of GPU benchmark runs",
        description="Write the per-repetition energy table (experiment windows) of every\n"
        "complete repetition under DATA_ROOT. Incomplete repetitions are skipped; a bad\n"
        "one is reported on stderr and the others still go out (exit code 1); when every\n"
        "one is bad, nothing is written (exit code 2). A method that gives no\n"
        "energy_facts row (its file missing, unbridged gaps) is said on stderr ('left out').",
        examples=[f"joulehouse energy gpu {EXAMPLE_ROOT} > energy.csv",
                  ("joulehouse energy gpu /lustre/gpu-bench --timezone Europe/Berlin "
                   "--format parquet --out energy.parquet")],
        handler=energy_gpu)
    gpu.add_argument("data_root", type=Path, metavar="DATA_ROOT")
    gpu.add_argument("--format", choices=["csv", "parquet"], default="csv")
    gpu.add_argument("--out", type=Path, metavar="FILE", help="output file (default: stdout)")
    gpu.add_argument("--timezone", type=timezone_name, default="UTC",
                     help="IANA zone of the naive timestamps (default UTC)")
    gpu.add_argument("--external-power-unit", choices=sorted(EXTERNAL_POWER_UNITS), default="mW",
                     help="unit of power-external.csv channels (default mW)")
    gpu.add_argument("--max-gap", type=float, default=5.0, metavar="SECONDS",
                     help="longest gap between samples that is bridged (default 5 s)")
    gpu.add_argument("--root-name", type=_root_name, metavar="NAME",
                     help="the data_root column, e.g. the name the root has in Dagster "
                     "(default: the folder's name)")


def _root_name(name: str) -> str:
    if not is_root_name(name):
        raise argparse.ArgumentTypeError(f"a data root name is non-empty, without '/': {name!r}")
    return name


def _level_hint(folder: Path) -> str:
    """`` (this is a run folder: give the data root, ROOT)`` for a folder inside a data root,
    naming the root only where there is one: enough folders above, and not the
    filesystem's root."""
    level = folder_level(folder)
    if level is None:
        return ""
    parents = folder.resolve().parents
    up = _LEVELS_DOWN[level] - 1
    if up >= len(parents) or parents[up] == Path(parents[up].anchor):
        return f" (this looks like a {level} folder, but no data root is above it)"
    return f" (this is a {level} folder: give the data root, {parents[up]})"


def energy_gpu(args: argparse.Namespace) -> int:
    """Handler of ``joulehouse energy gpu``; returns the exit code."""
    data_root = input_path(args.data_root, EXPECTED_ROOT, folder=True)
    refs = find_repetitions(data_root)
    if not refs:
        raise CommandError(f"{data_root}: no repetition folders; expected {EXPECTED_ROOT}"
                           f"{_level_hint(data_root)}")
    frames, failed, records = [], 0, []
    name = root_name(data_root) if args.root_name is None else args.root_name
    with Progress(refs, unit="repetition", quiet=args.quiet) as shown:
        for ref in shown:
            if not is_complete(ref.path):
                shown.report(f"skipped {ref.key}: incomplete (no experiment_end yet)")
                continue
            try:
                rep = read_repetition(ref, timezone=args.timezone,
                                      external_power_unit=args.external_power_unit)
                energy = repetition_energy(rep, data_root=name, max_gap_s=args.max_gap)
            except InputError as err:
                failed += 1
                shown.report(f"{ref.key}: {err}")
                continue
            frames.append(energy[energy["phase"] == "experiment"])
            records += left_out(energy, str(ref.path))
    something_read(len(frames), failed, "repetition")
    table = (validate(REPETITION_ENERGY_SCHEMA, pd.concat(frames, ignore_index=True), data_root)
             if frames else pd.DataFrame(columns=REPETITION_ENERGY_COLUMNS))
    write_table(table, args.format, args.out)
    return report_left_out(records, len(table), failed)
