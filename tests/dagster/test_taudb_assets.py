"""TAUdb in Dagster: profile sets in landing days, GPU runs as trials, the landing sensor."""

import os
import re
import shutil
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from assets import GPU_ASSETS, gpu_pipeline
from assets.gpu import GpuHandOut
from assets.taudb import (
    LOADS_CHECK,
    TAUDB_ASSETS,
    TauHandOut,
    tau_profile_days,
    tau_profile_files,
    tau_profile_trials,
)
from definitions import build_definitions
from joulehouse import landing as landing_module
from joulehouse.gpu.layout import find_repetitions
from joulehouse.taudb.landing import read_profile_set
from joulehouse.taudb.loader import list_trials
from resources import DataRoot, GpuBenchmarkSource, PowerapiSource, StepWorkers, Warehouse
from resources.taudb import TaudbResource, TauProfileSource
from sensors.gpu_repetitions import JOB_NAME, sensor_name
from sensors.local import launch_in_process, tick
from sensors.partition_runs import RANGE_END, RANGE_START, RETRY_OF_TAG, RUN_KEY_TAG
from sensors.tau_profiles import JOB_NAME as TAU_JOB
from sensors.tau_profiles import SENSOR_NAME as TAU_SENSOR
from sensors.tau_profiles import tau_profile_sensor
from tests.dagster.conftest import QUIET_S, settle
from tests.dagster.source_runs import SourceRuns

#: Plots drawn as deployed (tests/dagster/conftest.py): no test here looks at a plot.
pytestmark = pytest.mark.usefixtures("plots_as_deployed")
PROJECT_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_SET = PROJECT_ROOT / "examples" / "tau-profiles" / "tau2_wrap_mpi2"
EXAMPLE_GPU_DATA = PROJECT_ROOT / "examples" / "gpu-data"
TRIALS = dg.AssetKey("taudb_trials")
FRAMES = dg.AssetKey("gpu_validated_frames")
ENERGY = dg.AssetKey("gpu_repetition_energy")
#: The example set's day partition: its first thread's Starting Timestamp, 1275601397098061
#: us, is 2010-06-03 21:43:17 UTC; and a day after it, of a variant set.
DAY = "landing/2010-06-03"
NEXT_DAY = "landing/2010-06-04"
_STARTING = re.compile(r"(<name>Starting Timestamp</name><value>)(\d+)")


@pytest.fixture
def taudb(tmp_path: Path) -> TaudbResource:
    return TaudbResource(url=f"sqlite:///{tmp_path}/taudb.sqlite")


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    """A landing folder ``landing`` holding a copy of the bundled profile set."""
    folder = tmp_path / "landing"
    shutil.copytree(EXAMPLE_SET, folder / EXAMPLE_SET.name)
    return folder


def _trials(taudb: TaudbResource) -> list[dict]:
    with taudb.open() as db:
        return list_trials(db)


def test_the_taudb_assets_join_the_gpu_definitions(taudb, landing, tmp_path):
    defs = dg.Definitions(
        assets=[*GPU_ASSETS, *TAUDB_ASSETS], sensors=[tau_profile_sensor],
        resources={"gpu_source": GpuBenchmarkSource(data_roots=[DataRoot(path=str(tmp_path))]),
                   "warehouse": Warehouse(root=str(tmp_path / "warehouse")), "taudb": taudb,
                   "tau_profiles": TauProfileSource(landing_folders=[str(landing)]),
                   "powerapi_source": PowerapiSource(landing_folders=[str(tmp_path)]),
                   "workers": StepWorkers(max_workers=1)})
    dg.Definitions.validate_loadable(defs)
    assert defs.resolve_assets_def(TRIALS).automation_conditions_by_key[TRIALS] is not None


# --- TAU profile sets: the sensor, the days, one run -----------------------------------------

class Pipeline(SourceRuns):
    """The definitions over one TAU landing folder: tick the profile sensor, run what it asks
    (the sets' work in the step's own process)."""

    def __init__(self, instance, landing: Path, tmp_path: Path, taudb: TaudbResource):
        source = TauProfileSource(landing_folders=[str(landing)], quiet_period_s=QUIET_S)
        defs = build_definitions(
            GpuBenchmarkSource(data_roots=[DataRoot(path=str(landing))]),
            Warehouse(root=str(tmp_path / "warehouse")), taudb=taudb, tau_profiles=source,
            workers=StepWorkers(max_workers=1))
        super().__init__(instance, defs, TAU_SENSOR, TAU_JOB, "tau_profiles", source,
                         tau_profile_days)

    def whole_day(self, *days: str) -> dg.ExecuteInProcessResult:
        """A run over ``days`` that names no set (as the UI's or a backfill's)."""
        job = self.defs.resolve_job_def(TAU_JOB)
        return job.execute_in_process(instance=self.instance, raise_on_error=False,
                                      tags={RANGE_START: days[0], RANGE_END: days[-1]})


@pytest.fixture
def pipeline(instance, landing, tmp_path, taudb) -> Pipeline:
    return Pipeline(instance, landing, tmp_path, taudb)


def copy_set(path: Path, day_offset: int = 0) -> Path:
    """A copy of the bundled set at ``path``, its threads started ``day_offset`` days later."""
    shutil.copytree(EXAMPLE_SET, path)
    for profile in path.iterdir():
        text = profile.read_text()
        profile.write_text(_STARTING.sub(lambda match: f"{match.group(1)}"
                                         f"{int(match.group(2)) + day_offset * 86_400_000_000}",
                                         text))
    return path


def cut(path: Path) -> Path:
    """A copy of the bundled set at ``path`` whose rank 0 is cut inside its timer lines (its
    metadata, so its day, kept): the set fails at line 6."""
    shutil.copytree(EXAMPLE_SET, path)
    lines = (EXAMPLE_SET / "profile.0.0.0").read_text().splitlines(keepends=True)
    (path / "profile.0.0.0").write_text("".join(lines[:5]))
    return path


def _observed(result) -> dict[str, list[str]]:
    """Day -> the sets it failed, as the run recorded them (``tau_profile_files``)."""
    return {event.partition: event.metadata["failed_entries"].value
            for event in (e.asset_observation_data.asset_observation for e in result.all_events
                          if e.is_asset_observation)
            if event.asset_key == tau_profile_files.key}


def _latest(instance, day: str) -> dg.AssetMaterialization:
    return instance.fetch_materializations(dg.AssetRecordsFilter(
        asset_key=tau_profile_trials.key, asset_partitions=[day]), limit=1
    ).records[0].asset_materialization


def test_a_bad_set_fails_its_day_alone_and_is_picked_up_alone_once_fixed(
        pipeline, landing, taudb, peer_data):
    """One run over two days: a set cut short fails its day, naming file and line, while the
    day's good set and the other day load. A set landing in that day is handed out with
    the bad one, which fails the day again; fixed in place, the bad set is handed out by
    itself, and the day passes."""
    broken = cut(landing / "broken")
    copy_set(landing / "later", day_offset=1)
    settle()
    [request] = pipeline.tick().run_requests
    assert pipeline.partitions() == [DAY, NEXT_DAY]
    assert TauHandOut.named_in(request.run_config) == {DAY: ["landing/broken", "landing/tau2_wrap_mpi2"],
                                   NEXT_DAY: ["landing/later"]}
    result = pipeline.launch(request)

    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_failure_data.user_failure_data.description.startswith(
        f"1 of 2 partition(s) failed:\n{DAY}: ")
    checks = {c.partition: c for c in result.get_asset_check_evaluations()}
    assert {day: c.passed for day, c in checks.items()} == {DAY: False, NEXT_DAY: True}
    check = checks[DAY]
    assert check.check_name == LOADS_CHECK
    assert check.metadata["file"].value == str(broken / "profile.0.0.0")
    assert check.metadata["line"].value == 6
    assert "truncated" in check.metadata["error"].value
    assert f"(1 of 2 profile set(s) of day {DAY} failed, 1 done)" in check.description
    assert pipeline.status(tau_profile_trials.key) == {
        DAY: dg.AssetPartitionStatus.FAILED, NEXT_DAY: dg.AssetPartitionStatus.MATERIALIZED}
    assert _observed(result) == {DAY: ["landing/broken"], NEXT_DAY: []}
    trials = {trial["source_key"]: trial for trial in _trials(taudb)}  # nothing of the bad set
    assert set(trials) == {str(landing / EXAMPLE_SET.name), str(landing / "later")}
    wrap = trials[str(landing / EXAMPLE_SET.name)]
    golden = pd.read_csv(peer_data / "tau" / "taudb-golden" / "trial12_tau2_wrap_mpi2" /
                         "threads.csv")
    with taudb.open() as db:
        threads = db.query("SELECT node_rank, context_rank, thread_rank, thread_index "
                           "FROM thread WHERE trial = ?", (wrap["id"],))
        assert sorted(threads) == sorted(map(tuple, golden.to_numpy().tolist()))
    [materialization] = result.asset_materializations_for_node("tau_profile_trials")
    assert materialization.partition == NEXT_DAY
    assert materialization.metadata["trial_ids"].value == {
        "landing/later": trials[str(landing / "later")]["id"]}

    copy_set(landing / "beside")  # a landing beside the bad set: both handed out
    settle()
    [beside] = pipeline.tick().run_requests
    assert TauHandOut.named_in(beside.run_config) == {DAY: ["landing/beside", "landing/broken"]}
    assert not pipeline.launch(beside).success
    assert pipeline.status(tau_profile_trials.key)[DAY] == dg.AssetPartitionStatus.FAILED
    assert pipeline.tick().run_requests == []
    for profile in EXAMPLE_SET.iterdir():  # fixed in place
        shutil.copy(profile, broken / profile.name)
    os.utime(broken / "profile.0.0.0")
    settle()
    [fixed] = pipeline.tick().run_requests
    assert TauHandOut.named_in(fixed.run_config) == {DAY: ["landing/broken"]}
    assert pipeline.launch(fixed).success
    assert set(pipeline.status(tau_profile_trials.key).values()) == {
        dg.AssetPartitionStatus.MATERIALIZED}
    loaded = {trial["source_key"]: trial["id"] for trial in _trials(taudb)}
    assert len(loaded) == 4

    lines = (EXAMPLE_SET / "profile.0.0.0").read_text().splitlines(keepends=True)
    (landing / "beside" / "profile.0.0.0").write_text("".join(lines[:5]))  # re-landed cut
    settle()
    [recut] = pipeline.tick().run_requests
    assert TauHandOut.named_in(recut.run_config) == {DAY: ["landing/beside"]}
    assert not pipeline.launch(recut).success  # its earlier trial stays, unchanged
    assert {trial["source_key"]: trial["id"] for trial in _trials(taudb)} == loaded


def test_sets_of_one_day_landing_in_two_ticks_are_loaded_once_each(pipeline, landing, taudb):
    settle()
    [first] = pipeline.tick().run_requests
    assert pipeline.launch(first).success
    copy_set(landing / "a")
    copy_set(landing / "b")
    settle()
    [second] = pipeline.tick().run_requests
    assert second.tags[RANGE_START] == second.tags[RANGE_END] == DAY
    assert TauHandOut.named_in(second.run_config) == {DAY: ["landing/a", "landing/b"]}
    assert pipeline.launch(second).success
    metadata = _latest(pipeline.instance, DAY).metadata
    assert sorted(metadata["trial_ids"].value) == ["landing/a", "landing/b"]
    assert (metadata["sets_loaded"].value, metadata["sets_unchanged"].value) == (2, 0)
    assert sorted(trial["name"] for trial in _trials(taudb)) == ["a", "b", "tau2_wrap_mpi2"]
    assert pipeline.partitions() == [DAY]


def test_a_day_with_nothing_handed_out_is_read_whole(pipeline, landing, taudb):
    """A run naming no set (the UI's, a backfill's, the weekly re-validation's) loads every
    set of its days in their landing folder, and only those; a day of a landing folder no
    longer configured fails alone."""
    copy_set(landing / "a")
    copy_set(landing / "other", day_offset=1)
    gone = "gone/2010-06-03"
    pipeline.instance.add_dynamic_partitions(tau_profile_days.name, [gone, DAY, NEXT_DAY])
    result = pipeline.whole_day(gone, DAY)
    assert not result.success
    checks = {c.partition: c for c in result.get_asset_check_evaluations()}
    assert {day: c.passed for day, c in checks.items()} == {gone: False, DAY: True}
    assert checks[gone].metadata["error"].value == (
        "no such TAU profile landing folder configured")
    metadata = _latest(pipeline.instance, DAY).metadata
    assert sorted(metadata["trial_ids"].value) == ["landing/a", "landing/tau2_wrap_mpi2"]
    assert sorted(trial["name"] for trial in _trials(taudb)) == ["a", "tau2_wrap_mpi2"]
    assert pipeline.whole_day(DAY).success  # again: current, nothing loaded
    metadata = _latest(pipeline.instance, DAY).metadata
    assert (metadata["sets_loaded"].value, metadata["sets_unchanged"].value) == (0, 2)


def test_a_cancelled_hand_out_is_asked_again_once(pipeline, landing):
    settle()
    [request] = pipeline.tick().run_requests

    def cancel(request: dg.RunRequest) -> None:
        run = pipeline.instance.create_run_for_job(
            pipeline.defs.resolve_job_def(TAU_JOB), run_config=request.run_config,
            tags={**request.tags, RUN_KEY_TAG: request.run_key})
        pipeline.instance.report_run_canceled(run)

    cancel(request)
    [retry] = pipeline.tick().run_requests
    assert TauHandOut.named_in(retry.run_config) == TauHandOut.named_in(request.run_config) == {DAY: ["landing/tau2_wrap_mpi2"]}
    assert retry.tags[RETRY_OF_TAG] == request.run_key
    cancel(retry)
    assert pipeline.tick().run_requests == []


def test_sensor_registers_days_once_and_waits_for_a_young_set(pipeline, landing):
    copy_set(landing / "second")
    settle()
    [request] = pipeline.tick().run_requests
    assert pipeline.partitions() == [DAY]
    assert request.tags[RANGE_START] == request.tags[RANGE_END] == DAY
    assert request.run_key.startswith("tau-profiles:")
    assert TauHandOut.named_in(request.run_config) == {DAY: ["landing/second", "landing/tau2_wrap_mpi2"]}
    # the landed files read as there (materialized outside Dagster), not as missing data
    assert pipeline.instance.get_materialized_partitions(tau_profile_files.key) == {DAY}
    data = pipeline.tick()
    assert data.run_requests == [] and data.dynamic_partitions_requests == []
    assert "no new or changed profile set(s) ready (0 waiting for the" in data.skip_message

    copy_set(landing / "young", day_offset=1)
    data = pipeline.tick()
    assert data.run_requests == [] and "(1 waiting for the" in data.skip_message
    settle()
    [young] = pipeline.tick().run_requests
    assert TauHandOut.named_in(young.run_config) == {NEXT_DAY: ["landing/young"]}
    assert pipeline.partitions() == [DAY, NEXT_DAY]


def test_a_cursor_of_one_partition_per_set_is_not_taken(pipeline, landing):
    """Upgrading from one partition per set (tau_profile_sets): the sensor's cursor then (a
    landing state saying every set was handed out) is not taken, so every set present is
    handed out again, into its day."""
    settle()
    key = f"landing/{EXAMPLE_SET.name}"
    pipeline.cursor = landing_module.LandingState(seen={
        key: read_profile_set(landing / EXAMPLE_SET.name, key).fingerprint}).to_json()
    [request] = pipeline.tick().run_requests
    assert TauHandOut.named_in(request.run_config) == {DAY: [key]}


# --- GPU benchmark runs ----------------------------------------------------------------------

@pytest.fixture
def example_gpu(instance, tmp_path, taudb):
    """The bundled GPU data through the GPU pipeline (one run); the resources by key."""
    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(EXAMPLE_GPU_DATA))],
                                quiet_period_s=0, full_rescan_s=None)
    warehouse = Warehouse(root=str(tmp_path / "warehouse"))
    defs = build_definitions(source, warehouse)
    data = tick(defs.resolve_sensor_def(sensor_name("gpu-data")), instance,
                {"gpu_source": source})
    [request] = data.run_requests
    assert launch_in_process(defs.resolve_job_def(JOB_NAME), instance, request).success
    return {"gpu_source": source, "warehouse": warehouse, "taudb": taudb,
            "workers": StepWorkers(max_workers=1)}


def _load_gpu_trials(instance, resources) -> dg.AssetMaterialization:
    result = dg.materialize([gpu_pipeline], selection=[TRIALS], instance=instance,
                            resources=resources)
    [materialization] = result.asset_materializations_for_node("gpu_pipeline")
    return materialization


def test_taudb_trials_one_trial_per_run(instance, example_gpu, taudb):
    runs = {}
    for ref in find_repetitions(EXAMPLE_GPU_DATA):
        runs.setdefault(ref.path.parent, []).append(ref)
    metadata = _load_gpu_trials(instance, example_gpu).metadata
    trials = _trials(taudb)
    assert len(trials) == len(runs) == 4
    assert {t["source_key"] for t in trials} == {str(run.resolve()) for run in runs}
    assert {t["name"]: t["total_threads"] for t in trials} == {
        run.relative_to(EXAMPLE_GPU_DATA).as_posix(): len(refs) for run, refs in runs.items()}
    assert metadata["trial_ids"].value == {
        f"gpu-data/{t['name']}": t["id"] for t in trials}
    assert metadata["runs_loaded"].value == 4 and metadata["dagster/row_count"].value == 4
    rows = metadata["rows_loaded"].value["gpu-data/power-limit/bert/150W"]
    assert rows["threads"] == 2 and rows["timer_values"] > 0 and rows["counters"] > 0


def test_taudb_trials_reloads_only_the_run_whose_repetition_changed(instance, example_gpu,
                                                                      taudb):
    first = _load_gpu_trials(instance, example_gpu).metadata["trial_ids"].value
    again = _load_gpu_trials(instance, example_gpu).metadata
    assert again["runs_loaded"].value == 0 and again["trial_ids"].value == first

    changed, day = "gpu-data/power-limit/bert/200W/1", "gpu-data/2020-11-16"
    dg.materialize([gpu_pipeline], selection=[FRAMES, ENERGY], instance=instance,
                   partition_key=day, run_config=GpuHandOut.run_config_of({day: [changed]}),
                   resources=example_gpu)
    after = _load_gpu_trials(instance, example_gpu).metadata
    assert after["runs_loaded"].value == 1
    assert list(after["rows_loaded"].value) == ["gpu-data/power-limit/bert/200W"]
    ids = after["trial_ids"].value
    assert ids["gpu-data/power-limit/bert/200W"] != first["gpu-data/power-limit/bert/200W"]
    assert {k: v for k, v in ids.items() if "200W" not in k} == {
        k: v for k, v in first.items() if "200W" not in k}
    assert len(_trials(taudb)) == 4


