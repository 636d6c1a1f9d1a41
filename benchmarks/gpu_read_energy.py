"""Benchmark (a): read, validate and compute the energy of a one-hour repetition.

Generates one repetition of 3600 s (50 Hz power samples, ~7 Hz gpu-power and
power-external, naive Europe/Berlin timestamps) into ``benchmarks/.data/``,
then times both, interleaved (one call of each per round, so that a burst of
load from other processes hits both), best and median of 5 rounds after a
warm-up call:

- Joulehouse: ``read_repetition`` (pyarrow + pandera) + ``repetition_energy``;
- pandas' default ``pd.read_csv`` of the same CSV files plus the timestamp
  parsing they need (ISO strings localised to UTC, µs epochs to UTC).

Wall and CPU time (all threads of this process) are both reported: on a
loaded 2-CPU machine the parallel parsing helps less, and CPU time shows the
work itself. Run: ``.venv/bin/python benchmarks/gpu_read_energy.py [--rounds N]
[--breakdown]``; ``--breakdown`` also times each file's reader, the validation
shortcut against pandera alone, the local-time conversion and the energy.
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pandera
import pyarrow
from machine import describe, load_average

from joulehouse.gpu import schemas
from joulehouse.gpu.energy import repetition_energy
from joulehouse.gpu.generator import RepetitionSpec, write_repetition
from joulehouse.gpu.layout import RepetitionRef
from joulehouse.gpu.readers import (
    read_external_power,
    read_gpu_power,
    read_repetition,
    read_samples,
    read_timestamps,
)
from joulehouse.timeutil import localize
from joulehouse.validation import passes

DATA_ROOT = Path(__file__).resolve().parent / ".data" / "gpu-one-hour"
KEY = "power-limit/bert/250W/0"
SPEC = RepetitionSpec(duration_s=3600.0, epochs=30, gpu_power_interval_s=1 / 7,
                      external_interval_s=1 / 7, samples_hz=50.0)
TIMEZONE = "Europe/Berlin"
ROUNDS = 5


def best_of_interleaved(functions: dict, rounds: int = ROUNDS) -> dict[str, dict[str, float]]:
    """Shortest wall and CPU time (s) and median wall time of each function.

    One call of each per round, ``rounds`` rounds, after a warm-up call of each.
    """
    for function in functions.values():
        function()  # warm-up
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in functions}
    for _ in range(rounds):
        for name, function in functions.items():
            wall, cpu = time.perf_counter(), time.process_time()
            function()
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    return {name: {"wall": min(w for w, _ in runs), "cpu": min(c for _, c in runs),
                   "median": statistics.median(w for w, _ in runs)}
            for name, runs in times.items()}


def joulehouse_pipeline(ref: RepetitionRef) -> pd.DataFrame:
    return repetition_energy(read_repetition(ref, timezone=TIMEZONE))


def pandas_default(folder: Path) -> dict[str, pd.DataFrame]:
    """pandas' default read_csv of every CSV file, plus the timestamps made UTC."""
    frames = {}
    for path in sorted(folder.glob("*.csv")):
        frame = pd.read_csv(path)
        if path.name.endswith("_samples.csv"):
            frame["timestamp"] = pd.to_datetime(frame["timestamp"], unit="us", utc=True)
        else:
            local = pd.to_datetime(frame["timestamp"], format="ISO8601")
            frame["timestamp"] = local.dt.tz_localize(TIMEZONE, ambiguous="infer").dt.tz_convert(
                "UTC")
        frames[path.name] = frame
    return frames


def breakdown(ref: RepetitionRef, rounds: int) -> None:
    """Where one call's time goes, one thing at a time (best of ``rounds``, ms)."""
    def best_ms(function) -> float:
        return min(_timed(function) for _ in range(rounds)) * 1e3

    folder = ref.path
    samples = {path.name: (read_samples, schemas.SAMPLES_SCHEMA)
               for path in sorted(folder.glob("*_samples.csv"))}
    files = {
        "timestamps.csv": (lambda path: read_timestamps(path, TIMEZONE), schemas.TIMESTAMPS_SCHEMA),
        "gpu-power.csv": (lambda path: read_gpu_power(path, TIMEZONE), schemas.GPU_POWER_SCHEMA),
        "power-external.csv": (lambda path: read_external_power(path, TIMEZONE),
                               schemas.EXTERNAL_POWER_SCHEMA),
        **samples,
        "total_power_samples.csv": (read_samples, schemas.POWER_SAMPLES_SCHEMA),
    }
    print("per file (ms): read + build + validate | validation: shortcut vs pandera alone")
    for name, (read, schema) in files.items():
        frame = read(folder / name)
        whole, shortcut, alone = (best_ms(partial(read, folder / name)),
                                  best_ms(partial(passes, schema, frame)),
                                  best_ms(partial(schema.validate, frame, lazy=True, inplace=True)))
        print(f"  {name:32s} {whole:6.2f} | {shortcut:5.2f} vs {alone:5.2f}")
    naive = pd.date_range("2020-11-16 12:49", periods=25_000, freq="143ms")
    print(f"25k local times to UTC: {best_ms(lambda: localize(naive, TIMEZONE)):.2f} vs pandas "
          f"{best_ms(lambda: naive.tz_localize(TIMEZONE, ambiguous='infer')):.2f}")
    rep = read_repetition(ref, timezone=TIMEZONE)
    side_by_side = best_ms(lambda: read_repetition(ref, timezone=TIMEZONE))
    print(f"read_repetition (every file, side by side): {side_by_side:.2f}")
    print(f"repetition_energy: {best_ms(lambda: repetition_energy(rep)):.2f}")


def _timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="best of this many runs")
    parser.add_argument("--breakdown", action="store_true",
                        help="also time each file, validation and the energy on their own")
    args = parser.parse_args()
    rounds = args.rounds
    ref = RepetitionRef.from_key(DATA_ROOT, KEY)
    if not (ref.path / "timestamps.csv").exists():
        write_repetition(ref.path, SPEC, seed=1)
    print(f"machine: {describe(pd, pyarrow, pandera, np)}")
    for path in sorted(ref.path.glob("*.csv")):
        with open(path, "rb") as file:
            rows = sum(1 for _ in file) - 1
        print(f"  {path.name}: {rows} rows, {path.stat().st_size / 1e6:.1f} MB")
    print(f"load average before: {load_average()}")
    best = best_of_interleaved({"ours": lambda: joulehouse_pipeline(ref),
                                "baseline": lambda: pandas_default(ref.path)}, rounds)
    ours, baseline = best["ours"], best["baseline"]
    print(f"load average after: {load_average()}")
    for label, times in (("joulehouse read + validate + energy", ours),
                         ("pandas default read_csv + timestamps", baseline)):
        print(f"{label}: {times['wall']:.3f} s wall, {times['cpu']:.3f} s CPU (best of {rounds}); "
              f"median {times['median']:.3f} s wall")
    print(f"speed-up: {baseline['wall'] / ours['wall']:.1f}x wall, "
          f"{baseline['cpu'] / ours['cpu']:.1f}x CPU (best); "
          f"{baseline['median'] / ours['median']:.1f}x wall (median)")
    if args.breakdown:
        breakdown(ref, rounds)


if __name__ == "__main__":
    main()
