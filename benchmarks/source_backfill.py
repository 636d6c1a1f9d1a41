"""Benchmark: a GEOPM or PowerAPI backfill through Dagster against its CLI (issue 11).

Generates (once, reused) a landing folder of ``--reports`` N entries under
``benchmarks/.data/<source>-backfill-<N>/<source>/`` from the bundled examples,
each entry distinct (so no report counts twice):

- GEOPM: report files ``r<i>.report``, the two bundled reports in turn (a 1.x
  text report of 1 host, a 2.x YAML report of 2 hosts x 13 regions), each
  report's host names prefixed ``r<i>-``;
- PowerAPI: folders ``s<i>/`` holding the bundled SmartWatts HWPC reports
  (``hwpc.jsonl``, 10 ticks) and power reports (``power.jsonl``), their sensor
  named ``sensor<i>``.

Times the source's CLI over the folder first (``joulehouse energy geopm`` /
``joulehouse energy powerapi``, Parquet out), then, as ``backfill.py`` does
for the GPU (its ``backfilled``): registers the source's dynamic partitions of the N
entries (the keys its sensor gives: PowerAPI ``<landing name>/<entry>``, GEOPM
``<landing name>/<YYYY-MM-DD>``, the reports' days: two here) in a
fresh DAGSTER_HOME on SQLite or, with ``--storage postgres``, a throwaway
PostgreSQL server, starts ``dagster dev`` with ``DAGSTER_EVENT_BATCH_SIZE``
set, and launches the backfill of every asset of the source's job over those
partitions through GraphQL (``launchPartitionBackfill``, as the UI does).
Reports the runs created (issue 11's limit: 10), submission to completion
against the CLI, each run's timeline and time in its step per partition, where
the step's time went (from the run's event log: per asset, the work before its
first event, then its events), and whether the energy rows are the CLI's
(GEOPM: ``geopm_host_energy`` over every partition; PowerAPI:
``powerapi_window_energy``).

Run: ``.venv/bin/python benchmarks/source_backfill.py --source geopm|powerapi
[--reports 500] [--storage sqlite|postgres] [--timeout S]``.
"""

import argparse
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pandas as pd
from dagster._core.execution.backfill import BulkActionStatus

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from backfill import (
    DATA,
    EVENTS,
    MAX_RUNS,
    STEP_END,
    backfilled,
    cli_seconds,
    load_summary,
    run_report,
    step_seconds,
)
from machine import describe

from assets.geopm import HOST_TABLE, geopm_days, geopm_host_energy
from assets.powerapi import WINDOW_TABLE, powerapi_days, powerapi_report_energy
from definitions import EXAMPLE_GEOPM_REPORTS, EXAMPLE_POWERAPI, defs
from joulehouse.geopm.days import start_day as geopm_start_day
from joulehouse.geopm.layout import identify_report
from joulehouse.landing import Identify
from joulehouse.landing_days import StartDay, day_key, entry_day
from joulehouse.powerapi.days import start_day as powerapi_start_day
from joulehouse.powerapi.landing import report_entry_files
from joulehouse.warehouse import Warehouse as Tables
from sensors.geopm import JOB_NAME as GEOPM_JOB
from sensors.powerapi import JOB_NAME as POWERAPI_JOB

#: What a step's events are, by type, in the breakdown of its time.
EVENT_KINDS = {EVENTS.ASSET_MATERIALIZATION: "materializations",
               EVENTS.ASSET_CHECK_EVALUATION: "check evaluations"}


def geopm_landing(folder: Path, reports: int) -> None:
    """``reports`` GEOPM report files in ``folder``: the two bundled reports in turn, the
    host names of report ``i`` prefixed ``r<i>-`` (every report distinct)."""
    examples = [(EXAMPLE_GEOPM_REPORTS / name).read_text() for name in
                ("geopmbench_1host.legacy.report", "fm_stream_dgemm_2host.yaml.report")]
    for index in range(reports):
        text = examples[index % 2].replace("mcfly", f"r{index:05d}-mcfly")
        (folder / f"r{index:05d}.report").write_text(text)


def powerapi_landing(folder: Path, reports: int) -> None:
    """``reports`` PowerAPI entries in ``folder``: folders ``s<i>/`` of the bundled HWPC
    and power reports, their sensor named ``sensor<i>``."""
    hwpc = (EXAMPLE_POWERAPI / "smartwatts_timeline.jsonl").read_text()
    power = (EXAMPLE_POWERAPI / "power.jsonl").read_text()
    for index in range(reports):
        entry = folder / f"s{index:05d}"
        entry.mkdir()
        sensor = f'"sensor":"sensor{index:05d}"'
        (entry / "hwpc.jsonl").write_text(hwpc.replace('"sensor":"sensor_test"', sensor))
        (entry / "power.jsonl").write_text(power.replace('"sensor":"sensor_test"', sensor))


@dataclass(frozen=True)
class Source:
    """What the benchmark needs of one landing source."""

    name: str  # the CLI's ``joulehouse energy <name>`` and the landing folder's name
    write: Callable[[Path, int], None]  # writes N entries into a landing folder
    partitions: str
    job: str
    landing_env: str
    checked: dg.AssetKey  # a per-partition asset every partition must have materialized
    table: str  # the warehouse table holding the rows the CLI writes
    order: list[str]  # columns that order both tables' rows the same way
    keys: Callable[[Path], list[str]]  # the partition keys of a landing folder's entries

    def landing(self, reports: int) -> Path:
        """The landing folder of ``reports`` entries (written once; reused)."""
        folder = DATA / f"{self.name}-backfill-{reports}" / self.name
        marker = folder.parent / ".complete"
        if not marker.exists():
            shutil.rmtree(folder.parent, ignore_errors=True)
            folder.mkdir(parents=True)
            self.write(folder, reports)
            marker.touch()
        return folder


def day_keys(identify: Identify, start: StartDay) -> Callable[[Path], list[str]]:
    """A source's partitions of a landing folder: the days of its entries (those
    ``identify`` tells) as ``start`` dates them, else by mtime (``landing_days.entry_day``)."""
    return lambda folder: sorted({day_key(folder.name, entry_day(entry, start))
                                  for entry in folder.iterdir() if identify(entry)})


SOURCES = {
    "geopm": Source("geopm", geopm_landing, geopm_days.name, GEOPM_JOB,
                    "JOULEHOUSE_GEOPM_LANDING", geopm_host_energy.key, HOST_TABLE,
                    ["report", "host", "section", "region"],
                    day_keys(identify_report, geopm_start_day("UTC"))),
    "powerapi": Source("powerapi", powerapi_landing, powerapi_days.name, POWERAPI_JOB,
                       "JOULEHOUSE_POWERAPI_LANDING", powerapi_report_energy.key, WINDOW_TABLE,
                       ["sensor", "target", "component", "window_start", "method"],
                       day_keys(report_entry_files, powerapi_start_day("UTC", None))),
}


def step_breakdown(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """Where a run's step time went, from its event log: its events in time order, cut into
    stretches of one asset's events; before each stretch, the gap since the last event
    (that asset's work: reading, computing, storing Parquet; and the storing of a batch of
    events written at once), then the stretch itself (its events, each written as it is
    logged, or queued for a batch). An event's timestamp is taken when it is logged."""
    entries = [entry for entry in instance.all_logs(run_id) if entry.dagster_event is not None]
    start = next((e.timestamp for e in entries if e.dagster_event_type == EVENTS.STEP_START),
                 None)
    if start is None:
        return ["    no step started"]
    end = next((e.timestamp for e in entries if e.dagster_event_type in STEP_END),
               entries[-1].timestamp)
    stretches: list[tuple[str, float, float, Counter]] = []
    for entry in entries:
        kind = EVENT_KINDS.get(entry.dagster_event_type)
        if kind is None:
            continue
        event = entry.dagster_event
        asset = (event.asset_check_evaluation_data.asset_key
                 if entry.dagster_event_type == EVENTS.ASSET_CHECK_EVALUATION
                 else event.asset_key).to_user_string()
        if stretches and stretches[-1][0] == asset:
            name, first, _, counts = stretches[-1]
            stretches[-1] = (name, first, entry.timestamp, counts)
        else:
            stretches.append((asset, entry.timestamp, entry.timestamp, Counter()))
        stretches[-1][3][kind] += 1
    lines, last = [], start
    for asset, first, final, counts in stretches:
        events = sum(counts.values())
        lines.append(f"    {asset}: {first - last:.1f} s before its first event, then "
                     f"{', '.join(f'{n} {kind}' for kind, n in counts.items())} in "
                     f"{final - first:.1f} s ({1000 * (final - first) / events:.1f} ms an event)")
        last = final
    lines.append(f"    after the last event to the step's end: {end - last:.1f} s")
    totals = Counter(e.dagster_event_type.value for e in entries)
    lines.append("    events of the run: " + ", ".join(
        f"{n} {kind}" for kind, n in totals.most_common()))
    return lines


def same_rows(source: Source, ours: pd.DataFrame, theirs: pd.DataFrame) -> str:
    """Whether the warehouse's rows are the CLI's: 'identical', or what differs."""
    if sorted(ours.columns) != sorted(theirs.columns):
        return f"DIFFERENT columns: {sorted(set(ours.columns) ^ set(theirs.columns))}"
    ours = ours[theirs.columns].sort_values(source.order, ignore_index=True)
    theirs = theirs.sort_values(source.order, ignore_index=True)
    try:
        pd.testing.assert_frame_equal(ours, theirs, check_exact=True)
    except AssertionError as err:
        return f"DIFFERENT: {str(err).splitlines()[0:3]}"
    return "identical"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=sorted(SOURCES), required=True)
    parser.add_argument("--reports", type=int, default=500,
                        help="landed entries, one partition each (default 500)")
    parser.add_argument("--storage", choices=["sqlite", "postgres"], default="sqlite",
                        help="the instance's storage (default sqlite)")
    parser.add_argument("--event-batch-size", type=int, default=1000,
                        help="DAGSTER_EVENT_BATCH_SIZE of the webserver, daemon and runs "
                        "(default 1000; 0: off)")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds to wait for the backfill (default 3600)")
    args = parser.parse_args(argv)
    source = SOURCES[args.source]
    folder = source.landing(args.reports)
    keys = source.keys(folder)
    entries = len(list(folder.iterdir()))
    selection = sorted(defs.resolve_job_def(source.job).asset_layer.selected_asset_keys)
    home = Path(tempfile.mkdtemp(prefix=f"{source.name}-backfill-home-", dir=DATA))
    cli_out = home / "cli-energy.parquet"
    cli, _ = cli_seconds("energy", source.name, str(folder), "--format", "parquet",
                      "--out", str(cli_out), "--quiet")
    print(f"joulehouse energy {source.name} over {entries} entries: {cli:.1f} s "
          f"({1000 * cli / entries:.0f} ms an entry)")
    warehouse = home / "warehouse"
    with backfilled(args.storage, home, source.partitions, keys, selection, {
            source.landing_env: str(folder), "JOULEHOUSE_WAREHOUSE": str(warehouse),
            "JOULEHOUSE_QUIET_PERIOD_S": "1",
            "DAGSTER_EVENT_BATCH_SIZE": str(args.event_batch_size)}, args.timeout) as done:
        instance, status, elapsed, records = (done.instance, done.status, done.elapsed_s,
                                              done.records)
        print(f"{source.name} on {args.storage}: status {status.value}: {len(records)} run(s) "
              f"(limit {MAX_RUNS}) in {elapsed:.1f} s from submission to completion: "
              f"{elapsed / cli:.1f} x the CLI's {cli:.1f} s; {done.other_runs()} other run(s)")
        for record in records:
            print(run_report(instance, record, done.submitted)[0])
            run = record.dagster_run
            if first := run.tags.get("dagster/asset_partition_range_start"):
                covered = keys.index(run.tags["dagster/asset_partition_range_end"]) \
                    - keys.index(first) + 1
                steps = step_seconds(instance, run.run_id)
                print(f"    in its step per partition ({covered} partitions of {entries} "
                      f"entries): {1000 * steps / covered:.0f} ms (the CLI: "
                      f"{1000 * cli / entries:.0f} ms an entry, process start included)")
            print("\n".join(step_breakdown(instance, run.run_id)))
        materialized = instance.get_materialized_partitions(source.checked)
        print(f"{source.checked.to_user_string()} materialized for {len(materialized)} of "
              f"{len(keys)}")
    ours = Tables(warehouse).read_table(source.table)
    theirs = pd.read_parquet(cli_out)
    same = same_rows(source, ours, theirs)
    print(f"energy rows: {len(ours)} in {source.table}, {len(theirs)} from the CLI: {same}")
    print(load_summary(done.loads))
    print(f"machine: {describe(dg, pd)}")
    if (status != BulkActionStatus.COMPLETED_SUCCESS or len(records) > MAX_RUNS
            or set(keys) - materialized or same != "identical"):
        raise SystemExit(f"source backfill benchmark failed; instance kept in {home}")
    # as backfill.py: a run the automation started (an "other run") may still write
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
