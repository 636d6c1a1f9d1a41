"""Benchmark (b): sensor ticks over 100,000 repetitions, and every source's first registration.

Builds (once, reused) a tree of 100,000 repetitions with tiny files in
``benchmarks/.data/sensor-tree/`` (4 experiments x 25 benchmarks x 100 runs x
10 repetitions) and runs the data-root sensor against a temporary Dagster
instance (``--storage sqlite``, the embedded default, or ``postgres``: a
throwaway PostgreSQL 15 server, as the tests start), its ticks applied as the
daemon would (``sensors/local.py``: events stored one by one, each key asked
for before it is added) and each run request created as the daemon creates
it (``create_run_for_job``, its planned events included):

1. the storage's costs, measured alone: one event as the daemon stores it,
   one in a batch (``store_event_batch``), one ``has_dynamic_partition`` (the
   daemon's check per key), one key in ``add_dynamic_partitions``, one run
   created over a range of 200 keys (per key: its planned events);
2. first registration: ticks until every repetition is handed out (into its day) and its
   run requested (``--ticks N``: the first N, the rest projected at their
   rate): each tick's partitions, its own seconds and those of creating its
   run, the slowest tick, the wall time at one tick per ``--interval`` s (a
   tick and its run creation longer than that delay the next), the cursor;
3. (GPU only) the steady-state tick that picks up 10 new repetitions in 10
   run folders; ticks of the rolling rescan: one 30 s after the last tick and
   one after a long pause (a whole pass due; bounded); the cursor size.

``--source cc|geopm|powerapi`` measures the first registration of the other
sources the same way: a ClusterCockpit archive of ``--entries`` jobs
(``clustercockpit_sensor.build``: 990 jobs per job-id block, tiny files), a
GEOPM or PowerAPI landing folder of ``--entries`` report files (copies of one
bundled example each, landing at 100 a second).

Reference: a naive full walk (``find_repetitions`` + ``is_complete`` on every
repetition). Run: ``.venv/bin/python benchmarks/sensor_tick.py [--source S]
[--storage sqlite|postgres] [--entries N] [--ticks N] [--cap N]``.
"""

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from backfill import storage_setting
from machine import describe, load_average
from postgres_server import throwaway_postgres

from assets.gpu import gpu_repetition_days, gpu_repetition_files
from definitions import EXAMPLE_GEOPM_REPORTS, EXAMPLE_POWERAPI, build_definitions
from joulehouse.gpu.layout import find_repetitions, is_complete
from joulehouse.gpu.scan import ScanState
from resources import (
    ClusterCockpitArchive,
    DataRoot,
    GeopmReportSource,
    GpuBenchmarkSource,
    PowerapiSource,
    Warehouse,
)
from sensors.clustercockpit import SENSOR_NAME as CC_SENSOR
from sensors.geopm import SENSOR_NAME as GEOPM_SENSOR
from sensors.gpu_repetitions import sensor_name
from sensors.local import tick
from sensors.partition_runs import RUN_KEY_TAG
from sensors.powerapi import SENSOR_NAME as POWERAPI_SENSOR
from sensors.tick_budget import _runless, paced, unpaced

DATA = Path(__file__).resolve().parent / ".data"
TREE = DATA / "sensor-tree"
SHAPE = (4, 25, 100, 10)  # experiments, benchmarks, runs, repetitions
NEW = 10
QUIET_S = 1.0
TIMESTAMPS = ("timestamp,event,data\n2020-11-16 13:49:17,experiment_begin,0\n"
              "2020-11-16 13:59:17,experiment_end,0\n")
GPU_POWER = ",timestamp,power\n0,2020-11-16 13:49:17,45000\n"


def write_repetition(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "timestamps.csv").write_text(TIMESTAMPS)
    (folder / "gpu-power.csv").write_text(GPU_POWER)


def build_tree() -> int:
    """The tree of SHAPE repetitions (built once; a marker file says it is complete)."""
    marker = TREE / ".complete"
    experiments, benchmarks, runs, reps = SHAPE
    if not marker.exists():
        shutil.rmtree(TREE, ignore_errors=True)
        for e in range(experiments):
            for b in range(benchmarks):
                for r in range(runs):
                    for i in range(reps):
                        write_repetition(TREE / f"exp{e}" / f"bench{b}" / f"{100 + r}W" / str(i))
        marker.touch()
    return experiments * benchmarks * runs * reps


def storage_costs(instance: dg.DagsterInstance, defs: dg.Definitions, n: int = 200) -> str:
    """The storage's cost of each thing a tick hands out, in ms, measured alone (on an
    instance of its own: what it stores stays)."""
    keys = [f"costs/e/b/{100 + i % 100}W/{i}" for i in range(3 * n)]

    def event(key: str) -> dg.AssetMaterialization:
        return dg.AssetMaterialization(gpu_repetition_files.key, partition=key,
                                       tags={"dagster/data_version": "0123456789abcdef"},
                                       metadata={"run_key": "costs:0123456789abcdef0123"})

    def per_item(action, items) -> float:
        started = time.perf_counter()
        action(items)
        return 1000 * (time.perf_counter() - started) / len(items)

    def each(function):
        return lambda items: [function(item) for item in items]

    add = per_item(lambda ks: instance.add_dynamic_partitions("costs", ks), keys[:n])
    check = per_item(each(lambda k: instance.has_dynamic_partition("costs", k)), keys[:n])
    alone = per_item(each(instance.report_runless_asset_event), [event(k) for k in keys[:n]])
    batch = per_item(lambda es: instance.event_log_storage.store_event_batch(
        [_runless(e, time.time()) for e in es]), [event(k) for k in keys[n:2 * n]])
    range_keys = [f"costs/r/{i}" for i in range(n)]
    instance.add_dynamic_partitions(gpu_repetition_days.name, range_keys)
    job = defs.resolve_job_def("gpu_energy_job")
    started = time.perf_counter()
    run = instance.create_run_for_job(job, tags={
        "dagster/asset_partition_range_start": range_keys[0],
        "dagster/asset_partition_range_end": range_keys[-1]})
    run_ms = 1000 * (time.perf_counter() - started) / n
    planned = len(instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
        limit=10 * n).records)
    assert run.tags["dagster/asset_partition_range_end"] == range_keys[-1]
    return (f"one event as the daemon stores it {alone:.2f} ms, in a batch {batch:.2f} ms; "
            f"has_dynamic_partition {check:.2f} ms a key; add_dynamic_partitions {add:.3f} ms "
            f"a key; a run over {n} keys created in {run_ms:.1f} ms a key ({planned} planned "
            "events stored one by one)")


def timed_tick(sensor, instance, resources, cursor, defs=None):
    """One tick applied as the daemon would: (its data, the seconds of the tick, of creating
    its runs). Runs are created only with ``defs``."""
    started = time.perf_counter()
    data = tick(sensor, instance, resources, cursor)
    ticked = time.perf_counter()
    if defs is not None:
        for request in data.run_requests:
            instance.create_run_for_job(defs.resolve_job_def(request.job_name),
                                        tags={**request.tags, RUN_KEY_TAG: request.run_key})
    return data, ticked - started, time.perf_counter() - ticked


def entries_of(request: dg.RunRequest) -> int:
    """The entries ``request`` hands out: those its run config names per day (GPU
    repetitions, GEOPM reports, TAU sets), else its partitions (one entry or block each)."""
    named = [keys for op in request.run_config.get("ops", {}).values()
             for field in op.get("config", {}).values() if isinstance(field, dict)
             for keys in field.values()]
    return sum(map(len, named)) if named else int(request.tags["joulehouse/partitions"])


def first_registration(sensor, instance, resources, defs, partitions: str, expected: int,
                       interval_s: float, max_ticks: int | None) -> tuple[str, str]:
    """Tick from an empty cursor until nothing is left (or ``max_ticks``: the rest
    projected at the rate so far); (what it took, the last cursor). ``expected``: the
    entries to hand out (:func:`entries_of`)."""
    ticks, runs, sizes, counts, cursor = [], [], [], [], None
    started = time.perf_counter()
    while max_ticks is None or len(ticks) < max_ticks:
        data, tick_s, run_s = timed_tick(sensor, instance, resources, cursor, defs)
        cursor = data.cursor
        sizes.append(len(cursor))
        if not data.run_requests:
            break
        assert len(data.run_requests) == 1, data.run_requests
        ticks.append(tick_s)
        runs.append(run_s)
        counts.append(entries_of(data.run_requests[0]))
        print(f"  tick {len(ticks)}: {counts[-1]:,} entries in "
              f"{data.run_requests[0].tags['joulehouse/partitions']} partition(s), tick "
              f"{tick_s:.1f} s, run created in {run_s:.1f} s; load {load_average()}", flush=True)
    wall = time.perf_counter() - started
    registered = len(instance.get_dynamic_partitions(partitions))
    handed = min(sum(counts), expected)  # a CC block handed out again: more ticks
    cycles = sum(max(interval_s, t + r) for t, r in zip(ticks, runs, strict=True))
    text = (f"{handed:,} of {expected:,} entries handed out in {len(ticks)} ticks "
            f"({sum(counts):,} in all), {registered:,} partitions registered, one run each: "
            f"slowest tick {max(ticks):.2f} s (median {statistics.median(ticks):.2f} s), ticks "
            f"{sum(ticks):.0f} s and run creation {sum(runs):.0f} s "
            f"({1000 * sum(runs) / handed:.1f} ms an entry) in all, "
            f"{wall:.0f} s of wall time back to back; at one tick per {interval_s:g} s: "
            f"{cycles:.0f} s; cursor at most {max(sizes):,} bytes, {sizes[-1]:,} at the end")
    if handed < expected:
        text += (f"; the whole {expected:,} at that rate: "
                 f"{cycles * expected / handed / 60:.0f} min")
    return text, cursor


def rewind(cursor: str, seconds: float) -> str:
    """The cursor as if its tick had been ``seconds`` earlier (the rescan credit grows)."""
    own, pace = unpaced(cursor)
    state = ScanState.from_json(own)
    state.last_tick -= seconds
    return paced(state.to_json(), pace)


LANDING_RATE = 100  # report files landing per second in a generated landing folder


def landing(folder: Path, example: Path, entries: int) -> Path:
    """A landing folder of ``entries`` report files, each a copy of ``example`` landing at
    :data:`LANDING_RATE` a second (each its own change time, as reports landing one after
    the other have: the landing cursor keeps those of the last second)."""
    marker = folder / ".complete"
    if not marker.exists():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        started = time.monotonic()
        for index in range(entries):
            time.sleep(max(0.0, started + index / LANDING_RATE - time.monotonic()))
            shutil.copyfile(example, folder / f"r{index:07d}{example.suffix}")
        marker.touch()
    return folder


def other_source(name: str, entries: int) -> tuple[str, str, str, dg.ConfigurableResource]:
    """(sensor name, partitions, resource key, resource) of the ``name`` source over a
    generated archive or landing folder of ``entries`` (built once, reused)."""
    if name == "cc":
        import clustercockpit_sensor

        archive = DATA / f"cc-archive-{entries}"
        if not (archive.parent / f".{archive.name}.aged").exists():
            clustercockpit_sensor.build(archive, entries)
            clustercockpit_sensor.age_root(archive)
            (archive.parent / f".{archive.name}.aged").touch()
        return CC_SENSOR, "cc_job_blocks", "cc_archive", ClusterCockpitArchive(
            archive_roots=[str(archive)], quiet_period_s=QUIET_S, full_rescan_s=86_400.0)
    if name == "geopm":
        folder = landing(DATA / f"geopm-landing-{LANDING_RATE}-a-s-{entries}",
                         EXAMPLE_GEOPM_REPORTS / "geopmbench_1host.legacy.report", entries)
        return GEOPM_SENSOR, "geopm_days", "geopm_source", GeopmReportSource(
            landing_folders=[str(folder)], quiet_period_s=QUIET_S)
    folder = landing(DATA / f"powerapi-landing-{LANDING_RATE}-a-s-{entries}", EXAMPLE_POWERAPI / "power.jsonl",
                     entries)
    return POWERAPI_SENSOR, "powerapi_days", "powerapi_source", PowerapiSource(
        landing_folders=[str(folder)], quiet_period_s=QUIET_S)


@contextlib.contextmanager
def instance_on(storage: str, stock_storage: bool) -> Iterator[dg.DagsterInstance]:
    """A temporary instance on SQLite (the embedded default) or a throwaway PostgreSQL,
    with deploy/'s storage or Dagster's own (``backfill.storage_setting``)."""
    with tempfile.TemporaryDirectory(dir=DATA) as home:
        if storage == "sqlite":
            with dg.instance_for_test(temp_dir=home, overrides={
                    "storage": storage_setting(Path(home), None, stock_storage)}) as instance:
                yield instance
            return
        with throwaway_postgres("dagster") as url, dg.instance_for_test(
                temp_dir=home, overrides={
                    "storage": storage_setting(Path(home), url, stock_storage)}) as instance:
            yield instance


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=["gpu", "cc", "geopm", "powerapi"], default="gpu")
    parser.add_argument("--storage", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--entries", type=int, default=100_000,
                        help="jobs or report files of the other sources")
    parser.add_argument("--interval", type=float, default=30.0,
                        help="the sensors' minimum interval, s")
    parser.add_argument("--ticks", type=int,
                        help="stop the first registration after this many ticks (projected)")
    parser.add_argument("--cap", type=int, default=GpuBenchmarkSource.model_fields[
        "max_repetitions_per_tick"].default, help="max_repetitions_per_tick")
    parser.add_argument("--stock-storage", action="store_true",
                        help="Dagster's own storage instead of deploy/'s batching storage")
    parser.add_argument("--event-batch-size", type=int, default=1000,
                        help="DAGSTER_EVENT_BATCH_SIZE, as the daemon's (default 1000)")
    args = parser.parse_args(argv)
    os.environ["DAGSTER_EVENT_BATCH_SIZE"] = str(args.event_batch_size)
    kind = "Dagster's own" if args.stock_storage else "batching"
    print(f"machine: {describe(dg)}; storage {args.storage} ({kind}); "
          f"DAGSTER_EVENT_BATCH_SIZE={args.event_batch_size}; load {load_average()}", flush=True)
    warehouse = Warehouse(root=str(DATA / "sensor-warehouse"))
    if args.source != "gpu":
        sensor_of, partitions, key, resource = other_source(args.source, args.entries)
        defs = build_definitions(GpuBenchmarkSource(data_roots=[DataRoot(
            path=str(DATA), name="unused")]), warehouse, **{key: resource})
        with instance_on(args.storage, args.stock_storage) as scratch:
            print(f"costs: {storage_costs(scratch, defs)}", flush=True)
        with instance_on(args.storage, args.stock_storage) as instance:
            print(f"{args.source} first registration ({args.storage}): " + first_registration(
                defs.resolve_sensor_def(sensor_of), instance, {key: resource}, defs,
                partitions, -(-args.entries // 990) if args.source == "cc" else args.entries,
                args.interval, args.ticks)[0] + f"; load {load_average()}")
        return

    started = time.perf_counter()
    total = build_tree()
    print(f"tree: {total} repetitions in {TREE} ({time.perf_counter() - started:.1f} s)")
    for stale in TREE.glob("exp*/bench*/*W/new-*"):
        shutil.rmtree(stale)
    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(TREE), name="tree")],
                                quiet_period_s=QUIET_S, full_rescan_s=3600.0,
                                max_repetitions_per_tick=args.cap)
    defs = build_definitions(source, warehouse)
    with instance_on(args.storage, args.stock_storage) as scratch:
        print(f"costs: {storage_costs(scratch, defs)}", flush=True)
    with instance_on(args.storage, args.stock_storage) as instance:
        sensor = defs.resolve_sensor_def(sensor_name("tree"))
        resources = {"gpu_source": source}
        text, cursor = first_registration(sensor, instance, resources, defs,
                                          gpu_repetition_days.name, total, args.interval,
                                          args.ticks)
        print(f"gpu first registration ({args.storage}): {text}; load {load_average()}",
              flush=True)
        if args.ticks is not None:
            return

        idle, idle_s, _ = timed_tick(sensor, instance, resources, cursor)
        stamp = time.strftime("%H%M%S")
        for n in range(NEW):
            write_repetition(
                TREE / f"exp{n % 4}" / f"bench{n}" / f"{100 + 7 * n}W" / f"new-{stamp}")
        time.sleep(QUIET_S + 0.1)
        data, tick_s, _ = timed_tick(sensor, instance, resources, idle.cursor)
        [request] = data.run_requests
        assert entries_of(request) == NEW, request.run_config
        cursor_bytes = len(data.cursor)

        rescan, rescan_s, _ = timed_tick(sensor, instance, resources, rewind(data.cursor, 30))
        assert rescan.run_requests == []
        _, pause_s, _ = timed_tick(sensor, instance, resources, rewind(rescan.cursor, 86400))

    started = time.perf_counter()
    complete = sum(is_complete(ref.path) for ref in find_repetitions(TREE))
    naive_s = time.perf_counter() - started
    assert complete == total + NEW
    for stale in TREE.glob("exp*/bench*/*W/new-*"):
        shutil.rmtree(stale)

    print(f"tick with nothing new: {idle_s:.2f} s")
    print(f"tick with {NEW} new repetitions: {tick_s:.2f} s, {len(data.run_requests)} run "
          f"request(s) (limit 5 s)")
    print(f"rolling rescan tick, 30 s after the last: {rescan_s:.2f} s; "
          f"after a day's pause (slice bounded): {pause_s:.2f} s")
    print(f"cursor: {cursor_bytes} bytes ({cursor_bytes / 1024:.0f} KiB)")
    print(f"naive full walk (find_repetitions + is_complete): {naive_s:.2f} s "
          f"= {naive_s / tick_s:.1f}x the tick")
    print(f"machine: {describe(dg)}; load {load_average()}")
    if tick_s > 5.0:
        raise SystemExit(f"tick took {tick_s:.2f} s > 5 s")


if __name__ == "__main__":
    main()
