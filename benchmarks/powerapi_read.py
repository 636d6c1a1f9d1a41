"""Benchmark: 100,000 HWPC reports read into frames, against the powerapi package's readers.

Generates 25,000 ticks of the ten-tick SmartWatts fixture (``examples/powerapi``;
4 targets a tick: ``all`` with rapl + msr, three cgroups with core, 8 cpus)
into ``benchmarks/.data/powerapi/`` as JSON lines and as hwpc-sensor CSV
(``rapl.csv``, ``msr.csv``, ``core.csv``), then times, interleaved round by
round (best and median of ``--rounds`` after a warm-up call of each):

- Joulehouse: ``readers.read_hwpc`` (counters in long form, validated) plus
  ``readers.rapl_energy`` (RAPL J per tick and socket), for the JSON-lines
  file and for the three CSV files;
- for JSON, also Arrow's parse of the same blocks alone (``iter_json_blocks``),
  the floor under Joulehouse's time, and DuckDB's ``read_json`` of the file
  alone (types from a 200-report sample, objects as STRUCTs: the same shape),
  the floor had DuckDB been the parser (it is not: see benchmarks/README.md);
  with ``--decoders``, the parse alone by
  other maintained decoders where importable (not project dependencies:
  ``pip install --target DIR polars msgspec`` and ``PYTHONPATH=DIR``):
  polars' ``read_ndjson`` (to columns, as Arrow) and msgspec's
  ``decode_lines`` (to Python objects, before any flattening), to see
  whether one would lower that floor;
- powerapi 2.10.0 (in its own interpreter, ``--reference-python``, a
  throwaway venv: ``python -m venv /tmp/powerapi-ref-venv &&
  /tmp/powerapi-ref-venv/bin/pip install powerapi==2.10.0``): ``json.loads``
  + ``HWPCReport.from_json`` per line, and ``CsvDB(...).iter()`` over the
  three CSV files. It times itself and prints the seconds, so the start of
  its interpreter is not counted;
- with ``--baseline FILE``, also ``read_hwpc`` + ``rapl_energy`` of an earlier
  ``joulehouse/powerapi/readers.py`` (e.g. ``git show REV:joulehouse/powerapi/readers.py
  > /tmp/readers_before.py``), loaded as a module beside the current one: before
  and after in the same rounds;
- with ``--stages``, where Joulehouse's JSON time goes, stage by stage (best of
  the rounds, run after the comparison): Arrow's parse of the blocks, the blocks'
  counters as columns (timestamps, leaves, checks), the frame (concatenation and
  pandera validation), ``rapl_energy``.

Run: ``.venv/bin/python benchmarks/powerapi_read.py --reference-python
/tmp/powerapi-ref-venv/bin/python [--rounds N] [--decoders] [--baseline FILE] [--stages]``.
"""

from __future__ import annotations

import argparse
import csv
import gc
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pandas as pd
import pandera
import pyarrow
from machine import describe, load_average

from joulehouse.powerapi import readers
from joulehouse.powerapi.jsonblocks import iter_json_blocks

ROOT = Path(__file__).resolve().parent
FIXTURE = ROOT.parent / "examples" / "powerapi" / "smartwatts_timeline.jsonl"
DATA = ROOT / ".data" / "powerapi"
TICKS = 25_000
GROUP_FILES = ("rapl.csv", "msr.csv", "core.csv")

REFERENCE = r"""
import json, sys, time
from powerapi.report import HWPCReport
from powerapi.database.csv.csvdb import CsvDB
kind, *paths = sys.argv[1:]
start = time.perf_counter()
if kind == "json":
    with open(paths[0]) as file:
        count = sum(1 for line in file if HWPCReport.from_json(json.loads(line)))
else:
    db = CsvDB(HWPCReport, [], files=paths)
    db.connect()
    count = sum(1 for _ in db.iter(False))
print(time.perf_counter() - start, count)
"""


def generate() -> tuple[Path, list[Path]]:
    """The JSON-lines file and the CSV files of TICKS ticks (written once, then reused)."""
    lines_path, csv_paths = DATA / "hwpc.jsonl", [DATA / name for name in GROUP_FILES]
    if lines_path.exists() and all(path.exists() for path in csv_paths):
        return lines_path, csv_paths
    DATA.mkdir(parents=True, exist_ok=True)
    fixture = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    per_tick = [fixture[i:i + 4] for i in range(0, len(fixture), 4)]
    start = pd.Timestamp("2026-01-01T00:00:00")
    writers, files = {}, [path.open("w", newline="") for path in csv_paths]
    for path, file in zip(csv_paths, files, strict=True):
        writers[path.stem] = csv.writer(file, lineterminator="\n")
    with lines_path.open("w") as out:
        for tick in range(TICKS):
            stamp = start + pd.Timedelta(seconds=tick)
            iso, millis = stamp.isoformat(timespec="milliseconds"), stamp.value // 1_000_000
            for report in per_tick[tick % len(per_tick)]:
                out.write(json.dumps({**report, "timestamp": iso}) + "\n")
                for group, sockets in report["groups"].items():
                    events = sorted(next(iter(next(iter(sockets.values())).values())))
                    if tick == 0 and report is per_tick[0][0 if group == "core" else 1]:
                        writers[group].writerow(
                            ["timestamp", "sensor", "target", "socket", "cpu", *events])
                    for socket, cpus in sockets.items():
                        for cpu, values in cpus.items():
                            writers[group].writerow([millis, report["sensor"], report["target"],
                                                     socket, cpu, *(values[e] for e in events)])
    for file in files:
        file.close()
    return lines_path, csv_paths


def arrow_parse_only(paths: list[Path]) -> int:
    """The floor under ours for JSON: Arrow's parse of the blocks, nothing else."""
    return sum(block.table.num_rows for path in paths for block in iter_json_blocks(path))


def duckdb_parse_only(paths: list[Path]) -> int:
    """DuckDB's JSON reader on the file, to Arrow: what the parse would cost with it."""
    connection = duckdb.connect()
    return sum(connection.sql(
        f"SELECT * FROM read_json('{path}', format='newline_delimited', sample_size=200, "
        "map_inference_threshold=-1)").to_arrow_table().num_rows for path in paths)


def other_decoders() -> dict[str, Callable[[list[Path]], int]]:
    """The parse alone of the JSON-lines file by other decoders that are importable."""
    found: dict[str, Callable[[list[Path]], int]] = {}
    try:
        import polars
    except ImportError:
        pass
    else:
        found["polars parse only"] = lambda paths: sum(
            polars.read_ndjson(path).height for path in paths)
    try:
        import msgspec
    except ImportError:
        pass
    else:
        decoder = msgspec.json.Decoder()

        def msgspec_parse(paths: list[Path]) -> int:
            gc.disable()  # millions of small objects: no collections while they are made
            try:
                return sum(len(decoder.decode_lines(path.read_bytes())) for path in paths)
            finally:
                gc.enable()
        found["msgspec parse only"] = msgspec_parse
    return found


def ours(paths: list[Path], module=readers) -> int:
    counters = module.concat_counters([module.read_hwpc(path) for path in paths])
    module.rapl_energy(counters)
    return len(counters)


def baseline(path: str) -> Callable[[list[Path]], int]:
    """``ours`` with the readers module of another revision, loaded from ``path``."""
    spec = importlib.util.spec_from_file_location("readers_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return lambda paths: ours(paths, module)


def stages(path: Path, rounds: int) -> dict[str, float]:
    """Best seconds of each stage of ``read_hwpc`` + ``rapl_energy`` on a JSON file (the
    blocks are held at once here, where ``read_hwpc`` streams them)."""
    best: dict[str, float] = {}
    for _ in range(rounds):
        clock = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            best[name] = min(best.get(name, float("inf")), now - clock)
            clock = now
        blocks = list(iter_json_blocks(path))
        lap("parse (Arrow)")
        parts = [readers._counters_from_json(path, block, "UTC", None) for block in blocks]
        lap("columns")
        del blocks
        counters = readers._frame(parts, path)
        lap("frame + validation")
        readers.rapl_energy(counters)
        lap("rapl_energy")
    return best


def reference(python: str, kind: str, paths: list[Path]) -> tuple[float, int]:
    out = subprocess.run([python, "-c", REFERENCE, kind, *map(str, paths)], check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference-python", default="/tmp/powerapi-ref-venv/bin/python")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--decoders", action="store_true",
                        help="also time other JSON decoders' parse alone (where importable)")
    parser.add_argument("--stages", action="store_true",
                        help="also time the stages of the JSON read one by one")
    parser.add_argument("--baseline", metavar="FILE",
                        help="an earlier joulehouse/powerapi/readers.py to time beside ours")
    args = parser.parse_args(argv)
    before = {"joulehouse before": baseline(args.baseline)} if args.baseline else {}
    decoders = other_decoders() if args.decoders else {}
    lines_path, csv_paths = generate()
    print(describe(pd, pyarrow, pandera, extra=f"load {load_average()}"))
    for kind, paths in (("json", [lines_path]), ("csv", csv_paths)):
        mb = sum(path.stat().st_size for path in paths) / 1e6
        ours(paths)  # warm-up
        reference(args.reference_python, kind, paths)
        times: dict[str, list[float]] = {"joulehouse": [], "powerapi": []}
        extra = dict(before)
        if kind == "json":
            extra |= {"arrow parse only": arrow_parse_only,
                      "duckdb parse only": duckdb_parse_only, **decoders}
        for name, parse in extra.items():
            parse(paths)  # warm-up
        for name in extra:
            times[name] = []
        rows = reports = 0
        for _ in range(args.rounds):
            start = time.perf_counter()
            rows = ours(paths)
            times["joulehouse"].append(time.perf_counter() - start)
            seconds, reports = reference(args.reference_python, kind, paths)
            times["powerapi"].append(seconds)
            for name, parse in extra.items():
                start = time.perf_counter()
                parse(paths)
                times[name].append(time.perf_counter() - start)
        best = {name: min(values) for name, values in times.items()}
        median = {name: statistics.median(values) for name, values in times.items()}
        print(f"{kind}: {TICKS * 4} reports, {mb:.0f} MB; joulehouse {rows} counter rows, "
              f"powerapi {reports} reports")
        for name in times:
            print(f"  {name:18s} best {best[name]:.3f} s ({TICKS * 4 / best[name]:,.0f} "
                  f"reports/s), median {median[name]:.3f} s")
        print(f"  ratio (powerapi / joulehouse): best {best['powerapi'] / best['joulehouse']:.1f}x,"
              f" median {median['powerapi'] / median['joulehouse']:.1f}x")
    if args.stages:
        print("json stages (best of rounds):")
        for name, seconds in stages(lines_path, args.rounds).items():
            print(f"  {name:18s} {seconds:.3f} s")
    print(f"load after: {load_average()}")


if __name__ == "__main__":
    main()
