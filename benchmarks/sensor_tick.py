"""Benchmark (b): one sensor tick over 100,000 repetitions, 10 of them new.

Builds (once, reused) a tree of 100,000 repetitions with tiny files in
``benchmarks/.data/sensor-tree/`` (4 experiments x 25 benchmarks x 100 runs x
10 repetitions), registers them all as partitions of a temporary Dagster
instance, lets the sensor take its first (full) tick, then adds 10 new
repetitions in 10 different run folders and times the steady-state tick that
picks them up. As the reference it times a naive full walk
(``find_repetitions`` + ``is_complete`` on every repetition).

Run: ``.venv/bin/python benchmarks/sensor_tick.py``.
"""

import argparse
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import dagster as dg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from definitions import build_definitions
from joulehouse.gpu.layout import find_repetitions, is_complete
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


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return (f"{os.cpu_count()} CPUs ({model}); Python {platform.python_version()}, "
            f"dagster {dg.__version__}")


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


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    started = time.perf_counter()
    total = build_tree()
    print(f"tree: {total} repetitions in {TREE} ({time.perf_counter() - started:.1f} s)")
    for stale in TREE.glob("exp*/bench*/*W/new-*"):
        shutil.rmtree(stale)

    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(TREE), name="tree")],
                                quiet_period_s=QUIET_S, full_rescan_s=None)
    with dg.instance_for_test() as instance:
        defs = build_definitions(source, Warehouse(root=str(DATA / "sensor-warehouse")))
        sensor = defs.resolve_sensor_def(sensor_name("tree"))
        resources = {"gpu_source": source}

        started = time.perf_counter()
        first = tick(sensor, instance, resources)
        first_s = time.perf_counter() - started
        registered = len(instance.get_dynamic_partitions("gpu_repetitions"))
        print(f"first tick (full scan, registers {registered} partitions): {first_s:.2f} s, "
              f"{len(first.run_requests)} run request(s)")

        idle = tick(sensor, instance, resources, first.cursor)
        started = time.perf_counter()
        idle = tick(sensor, instance, resources, idle.cursor)
        idle_s = time.perf_counter() - started

        stamp = time.strftime("%H%M%S")
        for n in range(NEW):
            write_repetition(TREE / f"exp{n % 4}" / f"bench{n}" / f"{100 + 7 * n}W" / f"new-{stamp}")
        time.sleep(QUIET_S + 0.1)
        started = time.perf_counter()
        data = tick(sensor, instance, resources, idle.cursor)
        tick_s = time.perf_counter() - started
        assert len(data.run_requests) == 1, data.run_requests
        new_keys = [k for r in data.dynamic_partitions_requests for k in r.partition_keys]
        assert len(new_keys) == NEW, new_keys
        cursor_kib = len(data.cursor) / 1024

    started = time.perf_counter()
    complete = sum(is_complete(ref.path) for ref in find_repetitions(TREE))
    naive_s = time.perf_counter() - started
    assert complete == total + NEW
    for stale in TREE.glob("exp*/bench*/*W/new-*"):
        shutil.rmtree(stale)

    print(f"tick with nothing new: {idle_s:.2f} s")
    print(f"tick with {NEW} new repetitions: {tick_s:.2f} s, {len(data.run_requests)} run "
          f"request(s) (limit 5 s); cursor {cursor_kib:.0f} KiB")
    print(f"naive full walk (find_repetitions + is_complete): {naive_s:.2f} s "
          f"= {naive_s / tick_s:.1f}x the tick")
    print(f"machine: {machine()}")
    if tick_s > 5.0:
        raise SystemExit(f"tick took {tick_s:.2f} s > 5 s")


if __name__ == "__main__":
    main()
