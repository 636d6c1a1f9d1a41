"""``joulehouse energy gpu DATA_ROOT``: the per-repetition energy table of a data root."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from joulehouse.errors import InputError
from joulehouse.gpu.energy import REPETITION_ENERGY_COLUMNS, repetition_energy
from joulehouse.gpu.layout import find_repetitions, is_complete, is_root_name, root_name
from joulehouse.gpu.readers import EXTERNAL_POWER_UNITS, read_repetition
from joulehouse.gpu.schemas import REPETITION_ENERGY_SCHEMA
from joulehouse.timeutil import check_timezone
from joulehouse.validation import validate


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``energy gpu`` to the ``joulehouse`` command."""
    energy = subparsers.add_parser("energy", help="energy tables")
    sources = energy.add_subparsers(dest="source", required=True)
    gpu = sources.add_parser(
        "gpu",
        help="per-repetition energy of GPU benchmark runs",
        description="Write the per-repetition energy table (experiment windows) of every "
        "complete repetition under DATA_ROOT. Incomplete repetitions are skipped; a bad "
        "one is reported on stderr and the others still go out (exit code 1).",
    )
    gpu.add_argument("data_root", type=Path, metavar="DATA_ROOT")
    gpu.add_argument("--format", choices=["csv", "parquet"], default="csv")
    gpu.add_argument("--out", type=Path, metavar="FILE", help="output file (default: stdout)")
    gpu.add_argument("--timezone", type=_timezone, default="UTC",
                     help="IANA zone of the naive timestamps (default UTC)")
    gpu.add_argument("--external-power-unit", choices=sorted(EXTERNAL_POWER_UNITS), default="mW",
                     help="unit of power-external.csv channels (default mW)")
    gpu.add_argument("--max-gap", type=float, default=5.0, metavar="SECONDS",
                     help="longest gap between samples that is bridged (default 5 s)")
    gpu.add_argument("--root-name", type=_root_name, metavar="NAME",
                     help="the data_root column, e.g. the name the root has in Dagster "
                     "(default: the folder's name)")
    gpu.set_defaults(handler=energy_gpu)


def _timezone(name: str) -> str:
    try:
        return check_timezone(name)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _root_name(name: str) -> str:
    if not is_root_name(name):
        raise argparse.ArgumentTypeError(f"a data root name is non-empty, without '/': {name!r}")
    return name


def energy_gpu(args: argparse.Namespace) -> int:
    """Handler of ``joulehouse energy gpu``; returns the exit code."""
    if not args.data_root.is_dir():
        raise InputError(args.data_root, "not a directory")
    frames, failed = [], 0
    name = root_name(args.data_root) if args.root_name is None else args.root_name
    for ref in find_repetitions(args.data_root):
        if not is_complete(ref.path):
            print(f"joulehouse: skipped {ref.key}: incomplete (no experiment_end yet)",
                  file=sys.stderr)
            continue
        try:
            rep = read_repetition(ref, timezone=args.timezone,
                                  external_power_unit=args.external_power_unit)
            energy = repetition_energy(rep, data_root=name, max_gap_s=args.max_gap)
        except InputError as err:
            failed += 1
            print(f"joulehouse: {ref.key}: {err}", file=sys.stderr)
            continue
        frames.append(energy[energy["phase"] == "experiment"])
    table = (validate(REPETITION_ENERGY_SCHEMA, pd.concat(frames, ignore_index=True),
                      args.data_root)
             if frames else pd.DataFrame(columns=REPETITION_ENERGY_COLUMNS))
    if args.format == "parquet":
        table.to_parquet(args.out if args.out else sys.stdout.buffer, index=False)
    else:
        table.to_csv(args.out if args.out else sys.stdout, index=False)
    return 1 if failed else 0
