"""Issue 28's benchmark: what 10 newly landed entries of a source cost to bring into
``energy_facts`` and ``accounting_daily``, over a store of N entries already materialized,
for two N; and a fix of one failed entry.

For each source and history size, in a fresh Dagster instance (SQLite, the project's
batching storage) and a fresh warehouse on a path:

1. N entries are written the way the source's tool writes them (the soak's landers,
   ``benchmarks/soak_landers.py``; GPU repetitions by the generator), then brought in by
   the source's sensor and the runs it asks for, and the accounting (not timed);
2. ``--repeat`` times, 10 new entries land; after the quiet period (not timed: only
   waiting ages a file) the timed part is what the daemon would do: the sensor's tick,
   the runs it asks for, then the accounting step (``accounting_daily``,
   ``accounting_monthly``, ``carbon_per_fact``, ``cost_per_fact``), all in this process,
   in-process execution as the tests use it (``sensors/local.py``). Wall and CPU seconds
   (this process and its children) are recorded per repetition;
3. the fix: one bad entry lands and fails its run (not timed), is fixed in place, and
   the same timed part brings it in.

The entries: GPU, a repetition of a new run folder (10 s at the generator's rates);
ClusterCockpit, a job of one host, 11 samples (jobs ``BLOCK`` ids apart, so that each is
a block of its own: a landing of 10 jobs is a run over 10 blocks, the worst case);
GEOPM, the bundled one-host legacy report under a new host name; PowerAPI, a JSON-lines
file of 60 one-second power reports of a job's target.

Usage: ``.venv/bin/python benchmarks/incremental.py --quick [--sources gpu geopm]
[--json FILE]``; without ``--quick``, ``--history 1000 100000`` (the issue's sizes; the
seeding then takes hours). ``--json FILE`` writes ``{"<source>": {"<history>":
{"wall_s": [...], "cpu_s": [...]}, "<history>/fix": {...}}}``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import dagster as dg
from machine import describe, load_average
from soak_landers import GEOPM_BAD, AccountingLander, ClusterCockpitLander, GeopmLander

from assets.accounting import accounting
from definitions import build_definitions
from joulehouse.clustercockpit.generator import JobSpec, write_job
from joulehouse.clustercockpit.layout import job_folder
from joulehouse.gpu.generator import RepetitionSpec, write_data_root
from resources import (
    AccountingSettings,
    ClusterCockpitArchive,
    DataRoot,
    GeopmReportSource,
    GpuBenchmarkSource,
    PowerapiSource,
    Warehouse,
)
from sensors import clustercockpit as cc_sensor
from sensors import geopm as geopm_sensor
from sensors import powerapi as powerapi_sensor
from sensors.gpu_repetitions import JOB_NAME as GPU_JOB
from sensors.gpu_repetitions import sensor_name as gpu_sensor_name
from tests.dagster.source_runs import SourceRuns
from tests.dagster_sqlite import empty_instance

NEW = 10
QUIET_S = 0.5
#: Job ids of one ClusterCockpit entry from the next: a block each (cc_job_blocks: id // 1000).
BLOCK = 1000
ACCOUNTING_KEYS = [spec.key for spec in accounting.specs]


def cpu_s() -> float:
    """CPU seconds of this process and its ended children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass
class Source:
    """One source's folders, its writer of entries and its sensor and job."""

    name: str
    folder: Path
    write: Callable[[int, bool], None]  # entry index, bad
    fix: Callable[[int], None]  # entry index of a bad one, fixed in place
    sensor: str
    job: str
    resource_key: str
    resource: dg.ConfigurableResource
    partitions: str


def gpu(base: Path) -> Source:
    root = base / "lab"
    start = datetime.now(UTC) - timedelta(days=1)

    def write(index: int, bad: bool) -> None:
        spec = RepetitionSpec(duration_s=10.0, epochs=1, start_utc=(
            start + timedelta(seconds=20 * index)).strftime("%Y-%m-%d %H:%M:%S"))
        write_data_root(root, {"hist": {"bench": [f"r{index:07d}"]}}, repetitions=1,
                        base=spec, seed=index)
        if bad:
            power = root / "hist" / "bench" / f"r{index:07d}" / "0" / "gpu-power.csv"
            lines = power.read_text().splitlines(keepends=True)
            lines[5] = lines[5].split(",")[0] + ",not-a-row\n"
            power.write_text("".join(lines))

    def fix(index: int) -> None:
        shutil.rmtree(root / "hist" / "bench" / f"r{index:07d}")
        write(index, False)

    root.mkdir(parents=True)
    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(root))], quiet_period_s=QUIET_S,
                                full_rescan_s=None, max_repetitions_per_tick=1_000_000)
    return Source("gpu-benchmark", root, write, fix, gpu_sensor_name("lab"), GPU_JOB,
                  "gpu_source", source, "gpu_repetition_days")


def clustercockpit(base: Path) -> Source:
    archive = base / "archive"
    archive.mkdir()
    lander = ClusterCockpitLander(archive, 1.0, 0.0)
    start = int(time.time()) - 3600

    def spec(index: int, bad: bool) -> JobSpec:
        return JobSpec(cluster="soak", job_id=1_000_000 + index * BLOCK, start_time=start,
                       hosts=1, samples=lander.SAMPLES, timestep_s=lander.STEP_S, gzip=True,
                       base_power_w=-500.0 if bad else 200.0 + index % 50,
                       user=f"user{index % 7}", project=f"project{index % 3}")

    def write(index: int, bad: bool) -> None:
        write_job(archive, spec(index, bad))

    def fix(index: int) -> None:
        shutil.rmtree(job_folder(archive, "soak", spec(index, False).job_id, start))
        write(index, False)

    source = ClusterCockpitArchive(archive_roots=[str(archive)], quiet_period_s=QUIET_S,
                                   full_rescan_s=None, max_jobs_per_tick=1_000_000)
    return Source("clustercockpit", archive, write, fix, cc_sensor.SENSOR_NAME,
                  cc_sensor.JOB_NAME, "cc_archive", source, "cc_job_blocks")


def geopm(base: Path) -> Source:
    landing = base / "geopm"
    landing.mkdir()
    lander = GeopmLander(landing, 1.0, 0.0)

    def write(index: int, bad: bool) -> None:
        lander.write(index, bad)

    def fix(index: int) -> None:
        path = landing / f"soak{index:06d}.report"
        path.write_text(path.read_text().replace(GEOPM_BAD[1], GEOPM_BAD[0]))

    source = GeopmReportSource(landing_folders=[str(landing)], quiet_period_s=QUIET_S)
    return Source("geopm", landing, write, fix, geopm_sensor.SENSOR_NAME, geopm_sensor.JOB_NAME,
                  "geopm_source", source, "geopm_days")


def powerapi(base: Path) -> Source:
    landing = base / "powerapi"
    landing.mkdir()
    start = datetime.now(UTC) - timedelta(days=1)

    def lines(index: int, bad: bool) -> str:
        first = start + timedelta(minutes=index)
        return "".join(json.dumps({
            "timestamp": (first + timedelta(seconds=tick)).isoformat(), "sensor": f"node{index}",
            "target": "job", "metadata": {"scope": "cpu", "socket": 0},
            "power": -1.0 if bad and tick == 2 else 100.0}) + "\n" for tick in range(60))

    def write(index: int, bad: bool) -> None:
        (landing / f"power-{index:07d}.jsonl").write_text(lines(index, bad))

    def fix(index: int) -> None:
        write(index, False)

    source = PowerapiSource(landing_folders=[str(landing)], quiet_period_s=QUIET_S)
    return Source("powerapi", landing, write, fix, powerapi_sensor.SENSOR_NAME,
                  powerapi_sensor.JOB_NAME, "powerapi_source", source, "powerapi_days")


SOURCES = {"gpu": gpu, "clustercockpit": clustercockpit, "geopm": geopm, "powerapi": powerapi}


class Landing:
    """One source over one instance and warehouse: brings what landed in, as the daemon
    would, then the accounting."""

    def __init__(self, instance: dg.DagsterInstance, base: Path, source: Source) -> None:
        self.instance, self.source = instance, source
        empty, intensity, tariffs = base / "empty", base / "intensity", base / "tariffs"
        for folder in (empty, intensity, tariffs):
            folder.mkdir()
        # grid intensity and a tariff over the day before now to tomorrow: every fact has
        # carbon and cost, as at a centre
        AccountingLander(intensity, tariffs, 1.0).land()
        # every other source over an empty folder: its sensor is never ticked
        resources = {"gpu_source": GpuBenchmarkSource(data_roots=[DataRoot(path=str(empty))]),
                     "geopm_source": GeopmReportSource(landing_folders=[str(empty)]),
                     "powerapi_source": PowerapiSource(landing_folders=[str(empty)]),
                     "cc_archive": ClusterCockpitArchive(archive_roots=[str(empty)]),
                     source.resource_key: source.resource}
        self.defs = build_definitions(
            resources["gpu_source"], Warehouse(root=str(base / "warehouse")),
            geopm_source=resources["geopm_source"],
            powerapi_source=resources["powerapi_source"], cc_archive=resources["cc_archive"],
            accounting=AccountingSettings(intensity_landing=str(intensity),
                                          tariff_landing=str(tariffs),
                                          tariff_sites={"*": "hpc-centre"}))
        self.runs = SourceRuns(instance, self.defs, source.sensor, source.job,
                               source.resource_key, source.resource,
                               dg.DynamicPartitionsDefinition(name=source.partitions))
        self.accounting_job = self.defs.resolve_implicit_global_asset_job_def()

    def bring_in(self, expect_success: bool = True) -> None:
        """Tick until the sensor asks for nothing more, run each request, then the
        accounting."""
        while requests := self.runs.tick().run_requests:
            for request in requests:
                result = self.runs.launch(request)
                if result.success != expect_success:
                    raise SystemExit(f"{self.source.name}: a run "
                                     f"{'failed' if expect_success else 'succeeded'}")
        result = self.accounting_job.execute_in_process(
            instance=self.instance, asset_selection=ACCOUNTING_KEYS, raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
        if not result.success:
            raise SystemExit(f"{self.source.name}: the accounting failed")

    def timed(self, land: Callable[[], None]) -> tuple[float, float]:
        """``land()``, the quiet period, then :meth:`bring_in` timed: wall and CPU s."""
        land()
        time.sleep(QUIET_S + 0.1)
        wall, cpu = time.monotonic(), cpu_s()
        self.bring_in()
        return time.monotonic() - wall, cpu_s() - cpu


def measure(name: str, history: int, repeat: int) -> dict[str, dict[str, list[float]]]:
    """The landings' and the fix's times of source ``name`` over ``history`` entries."""
    with tempfile.TemporaryDirectory(prefix="joulehouse-incremental-") as tmp, \
            empty_instance() as instance:
        base = Path(tmp)
        source = SOURCES[name](base)
        landing = Landing(instance, base, source)
        started = time.monotonic()
        for index in range(history):
            source.write(index, False)
        time.sleep(QUIET_S + 0.1)
        landing.bring_in()
        print(f"  {name}: {history} entries seeded in {time.monotonic() - started:.0f} s",
              flush=True)
        times: dict[str, dict[str, list[float]]] = {str(history): {"wall_s": [], "cpu_s": []},
                                                    f"{history}/fix": {"wall_s": [], "cpu_s": []}}
        next_index = history
        for _ in range(repeat):
            first, next_index = next_index, next_index + NEW
            wall, cpu = landing.timed(lambda first=first: [
                source.write(index, False) for index in range(first, first + NEW)])
            times[str(history)]["wall_s"].append(round(wall, 3))
            times[str(history)]["cpu_s"].append(round(cpu, 3))
            print(f"  {name} over {history}: {NEW} new entries in {wall:.2f} s wall, "
                  f"{cpu:.2f} s CPU (load {load_average()})", flush=True)
        bad, next_index = next_index, next_index + 1
        source.write(bad, True)
        time.sleep(QUIET_S + 0.1)
        landing.bring_in(expect_success=False)
        wall, cpu = landing.timed(lambda: source.fix(bad))
        times[f"{history}/fix"] = {"wall_s": [round(wall, 3)], "cpu_s": [round(cpu, 3)]}
        print(f"  {name} over {history}: one failed entry fixed in {wall:.2f} s wall, "
              f"{cpu:.2f} s CPU", flush=True)
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="history sizes 50 and 500, two repetitions")
    parser.add_argument("--history", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sources", nargs="+", choices=sorted(SOURCES), default=sorted(SOURCES))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.history, args.repeat = [50, 500], 2
    print(describe(extra=f"load {load_average()}"))
    figures: dict[str, dict[str, dict[str, list[float]]]] = {}
    for name in args.sources:
        for history in args.history:
            figures.setdefault(name, {}).update(measure(name, history, args.repeat))
    for name, sizes in figures.items():
        small, large = (min(sizes[str(h)]["cpu_s"]) for h in (min(args.history),
                                                               max(args.history)))
        print(f"{name}: best CPU {small:.2f} s over {min(args.history)}, {large:.2f} s over "
              f"{max(args.history)}: {large / small:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
