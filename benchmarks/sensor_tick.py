"""Benchmark (b): sensor ticks over 100,000 repetitions.

Builds (once, reused) a tree of 100,000 repetitions with tiny files in
``benchmarks/.data/sensor-tree/`` (4 experiments x 25 benchmarks x 100 runs x
10 repetitions) and runs the data-root sensor against a temporary Dagster
instance, its ticks applied as the daemon would (``sensors/local.py``):

1. first registration: ticks until every repetition is registered (each
   reports at most ``max_repetitions_per_tick``); number of ticks, the
   slowest, the total, and the cost of one stored observation;
2. the steady-state tick that picks up 10 new repetitions in 10 run folders;
3. ticks of the rolling rescan: one 30 s after the last tick (its usual
   slice) and one after a long pause (a whole pass due; bounded);
4. the cursor size.

Reference: a naive full walk (``find_repetitions`` + ``is_complete`` on every
repetition). Run: ``.venv/bin/python benchmarks/sensor_tick.py [--cap N]``.
"""

import argparse
import shutil
import sys
import time
from pathlib import Path

import dagster as dg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from machine import describe, load_average

from definitions import build_definitions
from joulehouse.gpu.layout import find_repetitions, is_complete
from joulehouse.gpu.scan import ScanState
from resources import DataRoot, GpuBenchmarkSource, Warehouse
from sensors.gpu_repetitions import sensor_name
from sensors.local import tick

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


class Timed:
    """Counts the calls of ``instance.report_runless_asset_event`` and their seconds."""

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self.calls, self.seconds = 0, 0.0
        self.report = instance.report_runless_asset_event
        instance.report_runless_asset_event = self

    def __call__(self, event):
        started = time.perf_counter()
        self.report(event)
        self.seconds += time.perf_counter() - started
        self.calls += 1


def timed_tick(sensor, instance, resources, cursor):
    started = time.perf_counter()
    data = tick(sensor, instance, resources, cursor)
    return data, time.perf_counter() - started


def rewind(cursor: str, seconds: float) -> str:
    """The cursor as if its tick had been ``seconds`` earlier (the rescan credit grows)."""
    state = ScanState.from_json(cursor)
    state.last_tick -= seconds
    return state.to_json()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=int, default=GpuBenchmarkSource.model_fields[
        "max_repetitions_per_tick"].default, help="max_repetitions_per_tick")
    cap = parser.parse_args(argv).cap
    started = time.perf_counter()
    total = build_tree()
    print(f"tree: {total} repetitions in {TREE} ({time.perf_counter() - started:.1f} s); "
          f"load {load_average()}")
    for stale in TREE.glob("exp*/bench*/*W/new-*"):
        shutil.rmtree(stale)

    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(TREE), name="tree")],
                                quiet_period_s=QUIET_S, full_rescan_s=3600.0,
                                max_repetitions_per_tick=cap)
    with dg.instance_for_test() as instance:
        defs = build_definitions(source, Warehouse(root=str(DATA / "sensor-warehouse")))
        sensor = defs.resolve_sensor_def(sensor_name("tree"))
        resources = {"gpu_source": source}
        observations = Timed(instance)

        times, cursor = [], None
        while True:
            data, seconds = timed_tick(sensor, instance, resources, cursor)
            cursor = data.cursor
            if not data.run_requests:
                break
            assert len(data.run_requests) == 1, data.run_requests
            assert len(data.asset_events) <= cap
            times.append(seconds)
            if len(times) % 20 == 0:
                print(f"  {len(times)} ticks, {sum(times):.0f} s, load {load_average()}", flush=True)
        registered = len(instance.get_dynamic_partitions("gpu_repetitions"))
        assert registered == total, registered
        per_observation_ms = 1000 * observations.seconds / observations.calls
        print(f"first registration (cap {cap}): {len(times)} ticks, slowest {max(times):.2f} s, "
              f"median {sorted(times)[len(times) // 2]:.2f} s, total {sum(times):.0f} s; "
              f"{observations.calls} observations at {per_observation_ms:.1f} ms each; "
              f"load {load_average()}")

        idle, idle_s = timed_tick(sensor, instance, resources, cursor)
        stamp = time.strftime("%H%M%S")
        for n in range(NEW):
            write_repetition(TREE / f"exp{n % 4}" / f"bench{n}" / f"{100 + 7 * n}W" / f"new-{stamp}")
        time.sleep(QUIET_S + 0.1)
        data, tick_s = timed_tick(sensor, instance, resources, idle.cursor)
        assert len(data.run_requests) == 1, data.run_requests
        new_keys = [k for r in data.dynamic_partitions_requests for k in r.partition_keys]
        assert len(new_keys) == NEW, new_keys
        cursor_bytes = len(data.cursor)

        rescan, rescan_s = timed_tick(sensor, instance, resources, rewind(data.cursor, 30))
        assert rescan.run_requests == []
        _, pause_s = timed_tick(sensor, instance, resources, rewind(rescan.cursor, 86400))

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
