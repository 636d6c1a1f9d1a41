"""The data-root sensor on a generated data root, its ticks applied as the daemon would: the
repetitions handed out in their days (``gpu_repetition_days``), named in the run config."""

import os
import shutil
import time
from pathlib import Path

import dagster as dg

from assets.gpu import GpuHandOut, gpu_repetition_days
from definitions import build_definitions
from joulehouse.gpu.layout import fingerprint
from joulehouse.gpu.scan import ScanState, scan
from resources import GpuBenchmarkSource
from sensors.gpu_repetitions import sensor_name
from sensors.local import tick
from sensors.partition_runs import (
    NO_RETRY_TAG,
    RANGE_END,
    RANGE_START,
    RETRY_OF_TAG,
    RUN_KEY_TAG,
)
from sensors.tick_budget import Pace, paced
from tests.dagster.conftest import DAY, REPETITIONS, RUNS, settle, write_started_on

ALL_KEYS = sorted(f"lab/{e}/{b}/{r}/{i}" for e, bs in RUNS.items() for b, rs in bs.items()
                  for r in rs for i in range(REPETITIONS))


class Ticker:
    """Ticks one sensor, carrying the cursor from tick to tick."""

    def __init__(self, sensor, instance, source):
        self.sensor, self.instance, self.source = sensor, instance, source
        self.cursor = None

    def __call__(self):
        data = tick(self.sensor, self.instance, {"gpu_source": self.source}, self.cursor)
        self.cursor = data.cursor
        return data

    def partitions(self) -> list[str]:
        return list(self.instance.get_dynamic_partitions(gpu_repetition_days.name))


def covered(ticker: Ticker, request: dg.RunRequest) -> list[str]:
    """The repetitions ``request`` hands out, sorted, after checking that its range covers
    exactly the days naming them."""
    order = ticker.partitions()
    start, end = request.tags[RANGE_START], request.tags[RANGE_END]
    assert order[order.index(start):order.index(end) + 1] == sorted(GpuHandOut.named_in(request.run_config))
    return sorted(key for keys in GpuHandOut.named_in(request.run_config).values() for key in keys)


def copy_repetition(root: Path, source_key: str, target_key: str) -> Path:
    target = root / target_key
    shutil.copytree(root / source_key, target)
    return target


def replace_repetition(root: Path, key: str) -> None:
    """Fix a repetition the safe way: write the new version beside it, rename it into place."""
    fixed = copy_repetition(root, key, str(Path(key).with_name(".fixing")))
    (fixed / "system_info.json").write_text('{"device": "fixed"}')
    shutil.rmtree(root / key)
    os.rename(fixed, root / key)


def test_first_tick_registers_every_repetition_and_asks_for_one_run(sensor, instance, source):
    ticker = Ticker(sensor, instance, source)
    data = ticker()
    assert ticker.partitions() == [DAY]  # every generated repetition starts that day
    assert len(data.run_requests) == 1
    request = data.run_requests[0]
    assert request.job_name == "gpu_energy_job"
    assert covered(ticker, request) == ALL_KEYS
    assert request.run_key.startswith("lab:")
    [event] = data.asset_events  # the day's hand-out, naming its repetitions
    assert event.partition == DAY and len(event.tags["dagster/data_version"]) == 20
    listed = event.metadata["repetitions"].value
    assert sorted(listed) == ALL_KEYS and all(len(v) == 16 for v in listed.values())
    assert event.metadata["run_key"].value == request.run_key
    # the raw files read as there (materialized outside Dagster), not as missing data
    files = dg.AssetKey("gpu_repetition_files")
    assert sorted(instance.get_materialized_partitions(files)) == [DAY]
    assert instance.get_latest_data_version_record(
        files, is_source=False, partition_key=DAY).asset_materialization.tags[
        "dagster/data_version"] == event.tags["dagster/data_version"]


def test_second_tick_with_nothing_new_asks_for_nothing(sensor, instance, source):
    ticker = Ticker(sensor, instance, source)
    ticker()
    data = ticker()
    assert data.run_requests == []
    assert data.dynamic_partitions_requests == []
    assert "nothing new" in data.skip_message
    assert ticker.partitions() == [DAY]


def test_copied_repetition_is_picked_up_once_quiet(sensor, instance, source, data_root):
    ticker = Ticker(sensor, instance, source)
    ticker()
    copy_repetition(data_root, "power-limit/bert/150W/0", "power-limit/bert/150W/7")
    assert ticker().run_requests == []  # still within the quiet period
    settle()
    data = ticker()
    assert len(data.run_requests) == 1
    assert covered(ticker, data.run_requests[0]) == ["lab/power-limit/bert/150W/7"]
    assert ticker.partitions() == [DAY]


def test_incomplete_repetition_waits_until_experiment_end(sensor, instance, source, data_root):
    ticker = Ticker(sensor, instance, source)
    ticker()
    folder = copy_repetition(data_root, "power-limit/resnet/200W/1", "power-limit/resnet/200W/2")
    timestamps = folder / "timestamps.csv"
    complete = timestamps.read_text()
    timestamps.write_text("".join(line for line in complete.splitlines(keepends=True)
                                  if "experiment_end" not in line))
    settle()
    for _ in range(2):
        data = ticker()
        assert data.run_requests == [] and "1 waiting for experiment_end" in data.skip_message
    assert ticker.partitions() == [DAY]
    timestamps.write_text(complete)
    settle()
    data = ticker()
    assert [covered(ticker, r) for r in data.run_requests] == [["lab/power-limit/resnet/200W/2"]]


def test_with_ready_when_complete_a_repetition_is_handed_out_inside_its_quiet_period(
        sensor, instance, source, data_root):
    """With a quiet period no repetition gets out of in the test, the complete ones are
    handed out at the first tick; one without experiment_end is not, until it has one."""
    folder = copy_repetition(data_root, "power-limit/resnet/200W/1", "power-limit/resnet/200W/2")
    timestamps = folder / "timestamps.csv"
    complete = timestamps.read_text()
    timestamps.write_text("".join(line for line in complete.splitlines(keepends=True)
                                  if "experiment_end" not in line))
    settings = {"data_roots": source.data_roots, "quiet_period_s": 600.0,
                "full_rescan_s": None}
    assert Ticker(sensor, instance, GpuBenchmarkSource(**settings))().run_requests == []
    copied = [root.model_copy(update={"ready_when_complete": False})
              for root in source.data_roots]  # a root's own setting wins
    assert Ticker(sensor, instance, GpuBenchmarkSource(
        **{**settings, "data_roots": copied}, ready_when_complete=True))().run_requests == []
    ticker = Ticker(sensor, instance, GpuBenchmarkSource(**settings, ready_when_complete=True))
    [request] = ticker().run_requests
    assert covered(ticker, request) == ALL_KEYS
    skipped = ticker()
    assert skipped.run_requests == []
    assert "1 waiting for experiment_end (0 quiet without" in skipped.skip_message
    assert "(and 0 inside the quiet period, not asked for experiment_end)" in (
        skipped.skip_message)
    timestamps.write_text(complete)
    [request] = ticker().run_requests
    assert covered(ticker, request) == ["lab/power-limit/resnet/200W/2"]


def test_fixed_repetition_is_picked_up_again_with_a_new_run_key(sensor, instance, source,
                                                                  data_root):
    ticker = Ticker(sensor, instance, source)
    first = ticker().run_requests[0]
    key = "power-limit/bert/250W/1"
    replace_repetition(data_root, key)
    settle()
    data = ticker()
    assert len(data.run_requests) == 1
    again = data.run_requests[0]
    # the cursor keeps one digest per run folder: its repetitions are all reported again
    assert covered(ticker, again) == ["lab/power-limit/bert/250W/0", f"lab/{key}"]
    [event] = data.asset_events
    assert sorted(event.metadata["repetitions"].value) == covered(ticker, again)
    assert again.run_key != first.run_key
    assert ticker.partitions() == [DAY]


def test_in_place_rewrite_is_found_by_the_full_rescan(sensor, instance, source, data_root,
                                                       warehouse):
    ticker = Ticker(sensor, instance, source)
    ticker()
    gpu_power = data_root / "power-limit/bert/150W/1/gpu-power.csv"
    gpu_power.write_text(gpu_power.read_text())  # same content, new mtime: in place
    settle()
    assert ticker().run_requests == []  # folder mtimes unchanged: not seen yet
    every_tick = GpuBenchmarkSource(data_roots=source.data_roots,
                                    quiet_period_s=source.quiet_period_s, full_rescan_s=0.0)
    rescanning = Ticker(build_definitions(every_tick, warehouse).resolve_sensor_def(sensor.name),
                        instance, every_tick)
    rescanning.cursor = ticker.cursor
    data = rescanning()
    assert [covered(rescanning, r) for r in data.run_requests] == [
        ["lab/power-limit/bert/150W/0", "lab/power-limit/bert/150W/1"]]


def test_changed_repetitions_far_apart_need_one_run_of_exactly_them(sensor, instance, source,
                                                                    data_root):
    ticker = Ticker(sensor, instance, source)
    ticker()
    copy_repetition(data_root, "power-limit/bert/150W/0", "power-limit/bert/150W/5")
    for key in ("power-limit/bert/150W/0", "power-limit/resnet/200W/1"):
        replace_repetition(data_root, key)
    settle()
    data = ticker()
    # the run folders' other repetitions too: the cursor keeps one digest per run folder
    ready = {"lab/power-limit/bert/150W/0", "lab/power-limit/bert/150W/1",
             "lab/power-limit/resnet/200W/0", "lab/power-limit/resnet/200W/1",
             "lab/power-limit/bert/150W/5"}
    [request] = data.run_requests
    assert set(covered(ticker, request)) == ready and request.tags["joulehouse/partitions"] == "1"
    assert ticker.partitions() == [DAY]


def test_a_tree_larger_than_the_cap_registers_over_several_ticks(instance, source, warehouse):
    capped = GpuBenchmarkSource(data_roots=source.data_roots,
                                quiet_period_s=source.quiet_period_s, full_rescan_s=None,
                                max_repetitions_per_tick=4)
    ticker = Ticker(build_definitions(capped, warehouse).resolve_sensor_def(
        sensor_name("lab")), instance, capped)
    reported = []
    for expected in (4, 2):
        data = ticker()
        [event] = data.asset_events
        keys = sorted(event.metadata["repetitions"].value)
        assert len(keys) == expected and len(data.run_requests) == 1
        assert covered(ticker, data.run_requests[0]) == keys
        reported += keys
    last = ticker().skip_message
    assert "0 waiting for experiment_end" in last and "0 ready but left" in last
    assert sorted(reported) == ALL_KEYS  # nothing twice
    assert ticker.partitions() == [DAY]


def _cancel(instance: dg.DagsterInstance, defs: dg.Definitions, request: dg.RunRequest,
            **tags: str) -> None:
    """A run of ``request`` (with ``tags`` added) cancelled in the UI before it read
    anything: Dagster fails no partition of it."""
    run = instance.create_run_for_job(defs.resolve_job_def(request.job_name), tags={
        **request.tags, RUN_KEY_TAG: request.run_key, **tags})
    instance.report_run_canceled(run)


def test_the_repetitions_of_a_cancelled_run_are_asked_for_again_once(sensor, instance, source,
                                                                     defs):
    ticker = Ticker(sensor, instance, source)
    first = ticker().run_requests[0]
    _cancel(instance, defs, first)
    data = ticker()
    [again] = data.run_requests
    assert again.run_key != first.run_key  # the daemon never runs a run key twice
    assert again.tags[RETRY_OF_TAG] == first.run_key
    assert covered(ticker, again) == ALL_KEYS
    assert [e.partition for e in data.asset_events] == [DAY]
    # asked for again once: the new hand-out names the new run key, not a cancelled one
    assert ticker().run_requests == []
    _cancel(instance, defs, again)  # the retry cancelled too: the user means it
    assert ticker().run_requests == []


def test_a_run_cancelled_with_no_retry_is_not_asked_for_again(sensor, instance, source, defs):
    ticker = Ticker(sensor, instance, source)
    first = ticker().run_requests[0]
    _cancel(instance, defs, first, **{NO_RETRY_TAG: "true"})
    assert ticker().run_requests == []


def test_a_repetition_copied_with_its_mtimes_ahead_waits_the_quiet_period_only(
        sensor, instance, source, data_root):
    """A repetition copied in with its writer's mtimes an hour ahead (``cp -p`` from a node
    whose clock runs ahead): quiet by its ctimes, as a landed entry is (joulehouse/landing.py),
    so it is handed out after the quiet period, not an hour later."""
    ticker = Ticker(sensor, instance, source)
    ticker()
    target = copy_repetition(data_root, "power-limit/bert/150W/0", "power-limit/bert/150W/7")
    ahead = time.time() + 3600
    for path in [*target.iterdir(), target]:
        os.utime(path, (ahead, ahead))
    settle()
    [request] = ticker().run_requests
    assert covered(ticker, request) == ["lab/power-limit/bert/150W/7"]


def test_repetitions_are_handed_out_in_the_days_they_started(sensor, instance, source,
                                                            data_root):
    """Two repetitions copied in that started on other days register those days; one run
    names each repetition in its day, and the day's files materialization lists it with its
    fingerprint."""
    ticker = Ticker(sensor, instance, source)
    ticker()
    for key, day in (("power-limit/bert/150W/5", "2021-02-03"),
                     ("power-limit/resnet/200W/5", "2021-02-04")):
        write_started_on(data_root / key, day)
    settle()
    data = ticker()
    [request] = data.run_requests
    assert GpuHandOut.named_in(request.run_config) == {"lab/2021-02-03": ["lab/power-limit/bert/150W/5"],
                                   "lab/2021-02-04": ["lab/power-limit/resnet/200W/5"]}
    assert ticker.partitions() == [DAY, "lab/2021-02-03", "lab/2021-02-04"]
    listed = {e.partition: e.metadata["repetitions"].value for e in data.asset_events}
    assert listed == {
        "lab/2021-02-03": {"lab/power-limit/bert/150W/5": fingerprint(
            data_root / "power-limit/bert/150W/5")},
        "lab/2021-02-04": {"lab/power-limit/resnet/200W/5": fingerprint(
            data_root / "power-limit/resnet/200W/5")}}


def test_a_cursor_of_one_partition_per_repetition_is_not_taken(sensor, instance, source,
                                                               data_root):
    """Upgrading from one partition per repetition: the sensor's cursor then (the scan's
    state, saying every repetition was handed out) is not taken, so every repetition present
    is handed out again, into its day, once."""
    state = scan(data_root, ScanState(), quiet_s=0.0, full_rescan_s=None).state
    ticker = Ticker(sensor, instance, source)
    ticker.cursor = paced(state.to_json(), Pace())
    [request] = ticker().run_requests
    assert GpuHandOut.named_in(request.run_config) == {DAY: ALL_KEYS}
    assert ticker().run_requests == []
