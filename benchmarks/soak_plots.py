"""The soak's plots over time, from what a run wrote (``benchmarks/soak.py --out DIR``).

- ``DIR/freshness.png``: per fact source and over all of them, the p50 and p95 delay (s)
  from an entry's last byte to its entity in ``accounting_daily`` (with carbon and cost),
  per :data:`BIN_MIN`-minute bin of landing time;
- ``DIR/memory.png``: resident memory (MiB) of the daemon, the webserver and the code server
  over the run (``timeseries.csv``).

Written by every run; ``.venv/bin/python benchmarks/soak_plots.py DIR`` draws them again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

PROJECT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(PROJECT), str(PROJECT / "tests"), str(PROJECT / "benchmarks")]

from soak_record import FACT_SOURCES, SERVICES

from joulehouse.plots import Series, lines_png

#: The bins of landing time the delays are summarised over (minutes).
BIN_MIN = 2.0


def freshness_series(landed: pd.DataFrame) -> list[Series]:
    """p95 per source and p50 and p95 over the fact sources, of landing -> accounting (s),
    per bin of landing time (x: minutes since the first landing)."""
    good = landed[(landed["expected"] == "ok") & landed["source"].isin(FACT_SOURCES)].copy()
    start = good["landed_at"].min()
    good["bin"] = ((good["landed_at"] - start).dt.total_seconds() // (60 * BIN_MIN)) * BIN_MIN
    good["delay_s"] = (good["in_accounting_at"] - good["landed_at"]).dt.total_seconds()

    def quantile(frame: pd.DataFrame, q: float, label: str) -> Series:
        by_bin = frame.groupby("bin")["delay_s"].quantile(q)
        return Series(label, by_bin.index.to_numpy() + BIN_MIN / 2, by_bin.to_numpy())

    return ([quantile(good[good["source"] == source], 0.95, f"{source} p95")
             for source in FACT_SOURCES if (good["source"] == source).any()]
            + [quantile(good, 0.5, "all p50"), quantile(good, 0.95, "all p95")])


def memory_series(timeseries: pd.DataFrame) -> list[Series]:
    """Resident memory (MiB) of each service over minutes of the run."""
    minutes = timeseries["t_s"].to_numpy() / 60
    return [Series(name, minutes, timeseries[f"{name}_rss_mb"].to_numpy(dtype=float))
            for name in SERVICES if f"{name}_rss_mb" in timeseries]


def write(out: Path) -> list[Path]:
    """``out/freshness.png`` and ``out/memory.png`` from ``out``'s ``landed.csv`` and
    ``timeseries.csv``."""
    landed = pd.read_csv(out / "landed.csv", parse_dates=["landed_at", "in_accounting_at"])
    timeseries = pd.read_csv(out / "timeseries.csv")
    freshness = out / "freshness.png"
    freshness.write_bytes(lines_png(
        freshness_series(landed),
        title=f"Landing -> accounting_daily per {BIN_MIN:g}-minute bin of landing",
        x_label="minutes since the landing started", y_label="delay (s)"))
    memory = out / "memory.png"
    memory.write_bytes(lines_png(
        memory_series(timeseries), title="Resident memory of the stack's services",
        x_label="minutes since the landing started", y_label="RSS (MiB)"))
    return [freshness, memory]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, metavar="DIR")
    for path in write(parser.parse_args(argv).out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
