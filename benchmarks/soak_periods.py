"""The freshness of a soak's landed entries per period of its landing, from ``DIR/landed.csv``.

``.venv/bin/python benchmarks/soak_periods.py DIR [--minutes 20]``: for the good entries of
the sources that have facts (``soak_record.FACT_SOURCES``), per ``--minutes`` of the landing
(from its first landed entry) and over all of it, the count and the p50 / p95 / p99 seconds
from landing to ``energy_facts`` and to ``accounting_daily`` (``soak_record.percentiles``):
the per-period rows of benchmarks/README.md's soak tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

PROJECT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(PROJECT), str(PROJECT / "tests"), str(PROJECT / "benchmarks")]

from soak_record import FACT_SOURCES, percentiles

TIMES = ["landed_at", "in_facts_at", "in_accounting_at"]


def periods(landed: pd.DataFrame, minutes: float) -> list[tuple[str, int, dict, dict]]:
    """(period, good entries, to-facts percentiles, to-accounting percentiles) per period
    of ``minutes``, then over the whole landing ('all')."""
    good = landed[(landed["expected"] == "ok") & landed["source"].isin(FACT_SOURCES)]
    since = (good["landed_at"] - landed["landed_at"].min()).dt.total_seconds() / 60
    rows = []
    bounds = [(f"{lo:g}-{lo + minutes:g}", (since >= lo) & (since < lo + minutes))
              for lo in range(0, int(since.max() // minutes + 1) * int(minutes), int(minutes))]
    for name, chosen in [*bounds, ("all", since >= 0)]:
        part = good[chosen]
        rows.append((name, len(part),
                     *(percentiles((part[column] - part["landed_at"]).dt.total_seconds()
                                   .dropna().tolist())
                       for column in ("in_facts_at", "in_accounting_at"))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the soak's --out folder")
    parser.add_argument("--minutes", type=float, default=20.0)
    args = parser.parse_args()
    landed = pd.read_csv(args.out / "landed.csv", parse_dates=TIMES)
    print("| minutes | good entries | -> energy_facts p50 / p95 / p99 | "
          "-> accounting_daily p50 / p95 / p99 |")
    for name, count, facts, accounting in periods(landed, args.minutes):
        print(f"| {name} | {count:,} | " + " | ".join(
            f"{f['p50_s']:.0f} / {f['p95_s']:.0f} / {f['p99_s']:.0f} s"
            for f in (facts, accounting)) + " |")


if __name__ == "__main__":
    main()
