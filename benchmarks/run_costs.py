"""Where the time of one GPU pipeline run goes, per repetition and per asset (issue 11).

Runs ``gpu_energy_job`` in-process over N generated repetitions (the trees of
``backfill.py``, built once under ``benchmarks/.data/``) in one run, as the
sensor asks for it (their days, the repetitions named in the run config), on a SQLite
instance and on PostgreSQL (a throwaway server, ``tests/postgres_server.py``),
and times, with the same clock:

- each event kind the instance stores (``store_event`` / ``store_event_batch``
  of its event log storage: count, seconds, mean serialized size), and all of
  the event handling around it (``DagsterInstance.handle_new_event``);
- each asset's own work in the step (``assets.pipeline``'s calls: read,
  validate and store the frames; the energy; the tables; the trials) and,
  inside it, every Parquet file written (``joulehouse.warehouse``);
- the step from its STEP_START to its end, and the run from its creation.

With ``--workers N`` the per-repetition work runs in N processes
(``resources.workers.StepWorkers``): the file writes then happen in the
workers and are not counted here.

The instance's storage is deploy/'s (``resources/instance_storage.py``: batches written
as one, connections kept); ``--stock-storage`` takes Dagster's own instead.

Run: ``.venv/bin/python benchmarks/run_costs.py [--repetitions 500] [--storage sqlite
postgres] [--workers 1] [--batch-size 0] [--stock-storage]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from dagster._serdes import serialize_value

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from backfill import DATA, days_of, repetition_keys, storage_setting, tree
from machine import describe, load_average
from postgres_server import missing_requirement, throwaway_postgres

import assets.gpu
import assets.pipeline
import joulehouse.warehouse
from assets.gpu import GpuHandOut
from definitions import build_definitions
from resources import DataRoot, GpuBenchmarkSource, StepWorkers, Warehouse
from sensors.gpu_repetitions import JOB_NAME
from sensors.partition_runs import RANGE_END, RANGE_START

#: The asset work of the step: (the module calling it, its name there) -> the asset.
WORK = {(assets.gpu, "validate_frames"): "gpu_validated_frames",
        (assets.gpu, "compute_energy"): "gpu_repetition_energy",
        (assets.gpu, "frames_and_energy"):
            "gpu_validated_frames and gpu_repetition_energy (tasks of up to 16)",
        (assets.pipeline, "setting_energy"): "gpu_setting_energy",
        (assets.pipeline, "benchmark_energy"): "gpu_benchmark_energy",
        (assets.pipeline, "facts"): "energy_facts/gpu",
        (assets.pipeline, "load_gpu_trials"): "taudb_trials"}
EVENTS = dg.DagsterEventType


class Clock:
    """Seconds and counts by label, and mean sizes of events."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.count: dict[str, int] = defaultdict(int)
        self.size: dict[str, int] = defaultdict(int)

    def add(self, label: str, seconds: float, count: int = 1, size: int = 0) -> None:
        self.seconds[label] += seconds
        self.count[label] += count
        self.size[label] += size


def event_label(entry) -> str:
    """``<event kind> <asset or check>`` of an event log entry."""
    event = entry.dagster_event
    if event is None:
        return "log message"
    kind = event.event_type_value.lower()
    if event.event_type == EVENTS.ASSET_CHECK_EVALUATION:
        data = event.event_specific_data
        return f"{kind} {data.asset_key.to_user_string()}:{data.check_name}"
    if event.event_type == EVENTS.ASSET_CHECK_EVALUATION_PLANNED:
        data = event.event_specific_data
        return f"{kind} {data.asset_key.to_user_string()}:{data.check_name}"
    if event.asset_key is not None:
        return f"{kind} {event.asset_key.to_user_string()}"
    return "other events (step, run, handled output ...)"


@contextmanager
def timed(clock: Clock, instance: dg.DagsterInstance):
    """Time the instance's event storage, its event handling, the step's asset work and
    the Parquet writes while the block runs."""
    storage = instance.event_log_storage
    store_event, store_batch = storage.store_event, storage.store_event_batch
    handle = instance.handle_new_event
    write = joulehouse.warehouse._write_atomically
    work = {place: getattr(*place) for place in WORK}

    batching = []  # a batch being stored: its events one at a time are counted in it

    def stored(entry):
        started = time.perf_counter()
        store_event(entry)
        if not batching:
            clock.add(f"store: {event_label(entry)}", time.perf_counter() - started,
                      size=len(serialize_value(entry)))

    def stored_batch(entries):
        started = time.perf_counter()
        batching.append(entries)
        try:
            store_batch(entries)
        finally:
            batching.pop()
        kinds = ", ".join(sorted({event_label(entry) for entry in entries}))
        clock.add(f"store (batches): {kinds}", time.perf_counter() - started,
                  count=len(entries), size=sum(len(serialize_value(e)) for e in entries))

    def handled(entry, **kwargs):
        started = time.perf_counter()
        handle(entry, **kwargs)
        clock.add("handle_new_event (all events)", time.perf_counter() - started)

    def written(path, table):
        started = time.perf_counter()
        write(path, table)
        clock.add("Parquet file written", time.perf_counter() - started)

    def timing(name):
        def call(*args, **kwargs):
            started = time.perf_counter()
            try:
                return work[name](*args, **kwargs)
            finally:
                clock.add(f"work: {WORK[name]}", time.perf_counter() - started)
        return call

    storage.store_event, storage.store_event_batch = stored, stored_batch
    instance.handle_new_event = handled
    joulehouse.warehouse._write_atomically = written
    for place in WORK:
        setattr(*place, timing(place))
    try:
        yield
    finally:
        storage.store_event, storage.store_event_batch = store_event, store_batch
        del instance.handle_new_event
        joulehouse.warehouse._write_atomically = write
        for (module, name), function in work.items():
            setattr(module, name, function)


def one_run(instance: dg.DagsterInstance, root: Path, keys: list[str], workers: int,
            home: Path) -> tuple[Clock, float, float, bool]:
    """Run the GPU job over the repetitions ``keys`` once (their days, each naming its
    repetitions), timed; returns the clock, the run's and the step's seconds and whether
    the run succeeded."""
    days = days_of(keys, root)
    instance.add_dynamic_partitions("gpu_repetition_days", sorted(days))
    defs = build_definitions(
        GpuBenchmarkSource(data_roots=[DataRoot(path=str(root))]),
        Warehouse(root=str(home / "warehouse")),
        workers=StepWorkers(max_workers=workers, partitions_per_worker=1))  # N, however few
    job = defs.resolve_job_def(JOB_NAME)
    clock = Clock()
    started = time.perf_counter()
    with timed(clock, instance):
        result = job.execute_in_process(
            instance=instance, raise_on_error=False,
            tags={RANGE_START: min(days), RANGE_END: max(days)},
            run_config={**GpuHandOut.run_config_of(days),
                        "loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    elapsed = time.perf_counter() - started
    logs = instance.all_logs(result.run_id, of_type={EVENTS.STEP_START, EVENTS.STEP_SUCCESS,
                                                     EVENTS.STEP_FAILURE})
    step = logs[-1].timestamp - logs[0].timestamp
    return clock, elapsed, step, result.success


def report(clock: Clock, repetitions: int, elapsed: float, step: float) -> None:
    """Print the clock's figures, biggest first, with milliseconds per repetition."""
    print(f"  run {elapsed:.1f} s (in-process, from launch), step {step:.1f} s: "
          f"{1000 * step / repetitions:.1f} ms per repetition")
    print(f"  {'what':<72.72} {'count':>7} {'s':>7} {'ms/repetition':>13} {'ms each':>8} "
          f"{'bytes each':>10}")
    for label in sorted(clock.seconds, key=lambda name: -clock.seconds[name]):
        seconds, count = clock.seconds[label], clock.count[label]
        size = f"{clock.size[label] / count:.0f}" if clock.size[label] else ""
        print(f"  {label:<72.72} {count:>7} {seconds:>7.2f} {1000 * seconds / repetitions:>13.2f} "
              f"{1000 * seconds / count:>8.2f} {size:>10}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=500,
                        help="repetitions in the run (the first N of the tree; default 500)")
    parser.add_argument("--tree", type=int, default=2000,
                        help="repetitions of the generated tree (default 2000)")
    parser.add_argument("--storage", nargs="+", choices=["sqlite", "postgres"],
                        default=["sqlite", "postgres"])
    parser.add_argument("--workers", type=int, default=1,
                        help="processes for the per-repetition work (default 1: in-process)")
    parser.add_argument("--batch-size", type=int, default=0,
                        help="DAGSTER_EVENT_BATCH_SIZE for the run (default 0: off)")
    parser.add_argument("--stock-storage", action="store_true",
                        help="Dagster's own storage instead of deploy/'s batching storage "
                        "(resources/instance_storage.py)")
    args = parser.parse_args(argv)
    root = tree(args.tree)
    keys = repetition_keys(root)[:args.repetitions]
    os.environ["DAGSTER_EVENT_BATCH_SIZE"] = str(args.batch_size)
    kind = "Dagster's own" if args.stock_storage else "batching"
    print(f"{len(keys)} repetitions in one run, workers {args.workers}, "
          f"DAGSTER_EVENT_BATCH_SIZE={args.batch_size}, {kind} storage; load {load_average()}")
    for storage in args.storage:
        home = Path(tempfile.mkdtemp(prefix="run-costs-", dir=DATA))
        try:
            if storage == "postgres":
                if why := missing_requirement():
                    print(f"postgres: skipped, {why}")
                    continue
                with throwaway_postgres("run_costs") as url, dg.instance_for_test(
                        temp_dir=str(home), overrides={"storage": storage_setting(
                            home, url, args.stock_storage)}) as instance:
                    outcome = one_run(instance, root, keys, args.workers, home)
            else:
                with dg.instance_for_test(temp_dir=str(home), overrides={
                        "storage": storage_setting(home, None, args.stock_storage)}) as instance:
                    outcome = one_run(instance, root, keys, args.workers, home)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        clock, elapsed, step, success = outcome
        print(f"{storage}: run {'succeeded' if success else 'FAILED'}")
        report(clock, len(keys), elapsed, step)
    print(f"load {load_average()}; machine: {describe(dg)}")


if __name__ == "__main__":
    main()
