"""The freshness of a soak's landed entries per period of its landing, and its runs' waits.

``.venv/bin/python benchmarks/soak_periods.py DIR [--minutes 20]``, DIR a soak's ``--out``:

- from ``DIR/landed.csv``, for the good entries of the sources that have facts
  (``soak_record.FACT_SOURCES``), per ``--minutes`` of the landing (from its first landed
  entry) and over all of it, the count and the p50 / p95 / p99 seconds from landing to
  ``energy_facts`` and to ``accounting_daily`` (``soak_record.percentiles``);
- from ``DIR/summary.json``'s faults, per fault, the good entries landed from
  ``BEFORE_FAULT_S`` before it to its recovery (none after it if it never recovered: to the
  landing's end), their count and p95 / max seconds to ``accounting_daily``;
- from ``DIR/runs.csv``, per job (the automation's runs, ``__ASSET_JOB``, per the steps they
  ran, as their compute logs under ``DIR/stack/dagster_home/storage`` name them), the runs
  that started, and the p50 / p95 seconds from request to start and from start to end.

These are the per-period and per-job rows of benchmarks/README.md's soak tables.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd

PROJECT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(PROJECT), str(PROJECT / "tests"), str(PROJECT / "benchmarks")]

from soak_record import FACT_SOURCES, percentiles

TIMES = ["landed_at", "in_facts_at", "in_accounting_at"]
RUN_TIMES = ["created", "started", "ended"]
#: The automation's runs (``dg.AutomationCondition``): told apart by the steps they ran.
ASSET_JOB = "__ASSET_JOB"
#: The entries a fault can have held: those landed from this long before it (in flight
#: when it struck) to its recovery.
BEFORE_FAULT_S = 120
STEP_START = re.compile(r'STEP_START - Started execution of step "([^"]+)"')


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


def fault_windows(landed: pd.DataFrame, faults: list[dict]) -> list[tuple[str, int, dict]]:
    """(fault as ``name@ISO time``, good entries it could have held, their to-accounting
    percentiles) per fault of ``summary.json``: the entries of the sources with facts
    landed from ``BEFORE_FAULT_S`` before it to its recovery (``recovery_s`` None: to the
    last entry landed)."""
    good = landed[(landed["expected"] == "ok") & landed["source"].isin(FACT_SOURCES)]
    rows = []
    for fault in faults:
        at = pd.Timestamp(fault["at"])
        end = (good["landed_at"].max() if fault["recovery_s"] is None
               else at + pd.Timedelta(seconds=fault["recovery_s"]))
        part = good[(good["landed_at"] >= at - pd.Timedelta(seconds=BEFORE_FAULT_S))
                    & (good["landed_at"] <= end)]
        rows.append((f"{fault['name']}@{fault['at']}", len(part), percentiles(
            (part["in_accounting_at"] - part["landed_at"]).dt.total_seconds().dropna()
            .tolist())))
    return rows


def run_steps(storage: Path, run_id: str) -> str:
    """The steps that run ``run_id`` started, sorted and joined by ``+``, from its compute
    logs under ``storage`` (the instance's ``storage`` folder); '' if none is kept."""
    steps = {step for log in (storage / run_id / "compute_logs").glob("*.err")
             for step in STEP_START.findall(log.read_text(errors="replace"))}
    return "+".join(sorted(steps))


def run_phases(runs: pd.DataFrame, storage: Path | None = None
               ) -> list[tuple[str, int, dict, dict]]:
    """(job, runs started, request -> start percentiles, start -> end percentiles) per job
    of ``runs`` (``runs.csv``: ``run_id``, ``job``, ``created``, ``started``, ``ended``),
    the automation's runs per the steps they ran when ``storage`` is given; runs not started
    are left out, and runs not ended from the second figure."""
    started = runs.dropna(subset=["started"]).copy()
    started["name"] = started["job"]
    if storage is not None:
        automated = started["job"] == ASSET_JOB
        started.loc[automated, "name"] = [f"{ASSET_JOB} {run_steps(storage, run_id)}"
                                          for run_id in started.loc[automated, "run_id"]]
    rows = []
    for name, part in started.groupby("name", sort=True):
        rows.append((name, len(part),
                     percentiles((part["started"] - part["created"]).dt.total_seconds()
                                 .tolist()),
                     percentiles((part["ended"] - part["started"]).dt.total_seconds()
                                 .dropna().tolist())))
    return rows


def _figures(figures: dict, quantiles: tuple[int, ...]) -> str:
    if not figures["n"]:
        return "-"
    return " / ".join(f"{figures[f'p{q}_s']:.0f}" for q in quantiles) + " s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the soak's --out folder")
    parser.add_argument("--minutes", type=int, default=20)
    args = parser.parse_args()
    landed = pd.read_csv(args.out / "landed.csv", parse_dates=TIMES)
    print("| minutes | good entries | -> energy_facts p50 / p95 / p99 | "
          "-> accounting_daily p50 / p95 / p99 |")
    for name, count, facts, accounting in periods(landed, args.minutes):
        print(f"| {name} | {count:,} | {_figures(facts, (50, 95, 99))} | "
              f"{_figures(accounting, (50, 95, 99))} |")
    faults = json.loads((args.out / "summary.json").read_text())["faults"]
    if faults:
        print(f"\n| fault | good entries landed from {BEFORE_FAULT_S} s before it to its "
              "recovery | -> accounting_daily p95 / max |")
        for name, count, accounting in fault_windows(landed, faults):
            figures = (f"{accounting['p95_s']:.0f} / {accounting['max_s']:.0f} s"
                       if accounting["n"] else "-")
            print(f"| {name} | {count:,} | {figures} |")
    runs = pd.read_csv(args.out / "runs.csv", parse_dates=RUN_TIMES)
    storage = args.out / "stack" / "dagster_home" / "storage"
    print("\n| job (steps) | runs | request -> start p50 / p95 | in the run p50 / p95 |")
    for name, count, waited, ran in run_phases(runs, storage if storage.is_dir() else None):
        print(f"| {name} | {count} | {_figures(waited, (50, 95))} | "
              f"{_figures(ran, (50, 95))} |")


if __name__ == "__main__":
    main()
