"""Benchmark: rollups and carbon over N generated facts (default 10,000,000) in at most 30 s.

Generates N energy_facts rows (``joulehouse.accounting.generator.facts``: two sources,
four groups, windows of 1 s to 6 h over 90 days) and an hourly intensity series covering
them, then times ``joulehouse.accounting.accounts.account`` (attribution, day pieces in
the UTC and Europe/Berlin calendars, carbon per piece and per fact, daily and monthly
rollups), split into its stages, one calendar's pieces at a time as ``account`` does.
Prints the figures, the machine and the peak memory.

Run: ``.venv/bin/python benchmarks/accounting.py [--facts N]``.
"""

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from machine import describe, load_average

from joulehouse.accounting import carbon, entities, generator, intensity, rollups

START = "2022-01-01"
DAYS = 90
TIME_ZONE = "Europe/Berlin"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=10_000_000)
    args = parser.parse_args()
    print(describe(pd, np), f"load average before: {load_average()}", sep="\n")
    facts = generator.facts(args.facts, START, f"{DAYS}D", seed=0)
    with tempfile.TemporaryDirectory() as folder:
        end = (pd.Timestamp(START) + pd.Timedelta(days=DAYS + 1)).strftime("%Y-%m-%d")
        generator.write_csv(generator.electricity_maps_frame("DE", "Germany", START, end),
                            Path(folder) / "de.csv")
        table = intensity.read_folder(folder)
    settings = carbon.CarbonSettings(zones={"*": "DE"}, pue=1.2)
    stages = {}
    begin = time.perf_counter()

    def stage(name, call, *args, **kwargs):
        start = time.perf_counter()
        result = call(*args, **kwargs)
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - start
        return result

    attributed = stage("attribute", entities.attribute, facts)
    daily, monthly, pieces_count = [], [], 0
    for zone in sorted({rollups.UTC, TIME_ZONE}):  # as accounts.calendar_pieces
        pieces = stage("day pieces (UTC, Europe/Berlin)", rollups.day_pieces, attributed, zone)
        pieces["co2_g"] = stage("carbon of the pieces", carbon.co2_g, pieces, table, settings)
        daily.append(stage("daily rollup", rollups.rollup, pieces, "day"))
        monthly.append(stage("monthly rollup", rollups.rollup, pieces, "month"))
        pieces_count += len(pieces)
        del pieces
    daily, monthly = (stage("daily rollup", pd.concat, daily, ignore_index=True),
                      stage("monthly rollup", pd.concat, monthly, ignore_index=True))
    per_fact = stage("carbon per fact", carbon.carbon_per_fact, attributed, table, settings)
    total = time.perf_counter() - begin
    for name, seconds in stages.items():
        print(f"{name:32s} {seconds:7.2f} s")
    print(f"{'total':32s} {total:7.2f} s for {len(facts):,} facts ({pieces_count:,} day pieces; "
          f"{len(daily):,} daily, {len(monthly):,} monthly rows; "
          f"{per_fact['co2_g'].isna().sum()} facts without carbon); target 30 s")
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    print(f"peak memory (max RSS): {peak_gb:.1f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
