"""Benchmark (c): a backfill of 1,000 repetitions in at most 5 runs.

Generates (once, reused) 1,000 short repetitions into
``benchmarks/.data/backfill/`` (2 experiments x 5 benchmarks x 10 settings x
10 repetitions), lets the data-root sensor register them in a fresh Dagster
instance and executes its run requests in-process: the whole pipeline (validated
frames, energy per repetition, per-setting and per-benchmark tables,
energy_facts). Counts the runs in the instance and times them.

Run: ``.venv/bin/python benchmarks/backfill.py``.
"""

import argparse
import shutil
import sys
import time
from pathlib import Path

import dagster as dg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.sensor_tick import machine
from definitions import build_definitions
from joulehouse.gpu.generator import RepetitionSpec, write_data_root
from resources import DataRoot, GpuBenchmarkSource, Warehouse
from sensors.gpu_repetitions import JOB_NAME, sensor_name
from sensors.local import launch_in_process, tick

DATA = Path(__file__).resolve().parent / ".data"
ROOT = DATA / "backfill"
RUNS = {experiment: {f"bench{b}": [f"{100 + 20 * s}W" for s in range(10)] for b in range(5)}
        for experiment in ("power-limit", "power-limit-2")}
REPETITIONS = 10
SPEC = RepetitionSpec(duration_s=5.0, epochs=1)
MAX_RUNS = 5


def build_root() -> None:
    marker = ROOT / ".complete"
    if not marker.exists():
        shutil.rmtree(ROOT, ignore_errors=True)
        write_data_root(ROOT, RUNS, repetitions=REPETITIONS, base=SPEC)
        marker.touch()


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    started = time.perf_counter()
    build_root()
    print(f"data root: {ROOT} ({time.perf_counter() - started:.1f} s)")
    warehouse = DATA / "backfill-warehouse"
    shutil.rmtree(warehouse, ignore_errors=True)
    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(ROOT))], quiet_period_s=0)
    defs = build_definitions(source, Warehouse(root=str(warehouse)))
    with dg.instance_for_test() as instance:
        data = tick(defs.resolve_sensor_def(sensor_name("backfill")), instance,
                    {"gpu_source": source})
        partitions = len(instance.get_dynamic_partitions("gpu_repetitions"))
        job = defs.resolve_job_def(JOB_NAME)
        started = time.perf_counter()
        results = [launch_in_process(job, instance, request, log_level="WARNING")
                   for request in data.run_requests]
        elapsed = time.perf_counter() - started
        runs = instance.get_runs_count()
        assert all(r.success for r in results), [r.run_id for r in results if not r.success]
        materialized = instance.get_materialized_partitions(dg.AssetKey("gpu_repetition_energy"))
    print(f"{partitions} partitions, {runs} run(s) (limit {MAX_RUNS}), {elapsed:.1f} s "
          f"in-process ({elapsed / partitions * 1000:.0f} ms per repetition); "
          f"gpu_repetition_energy materialized for {len(materialized)}")
    print(f"machine: {machine()}")
    if runs > MAX_RUNS or len(materialized) != partitions:
        raise SystemExit("backfill benchmark failed")


if __name__ == "__main__":
    main()
