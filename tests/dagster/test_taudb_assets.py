"""TAUdb in Dagster: profile sets as partitions, GPU runs as trials, the landing sensor."""

import os
import shutil
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from assets import GPU_ASSETS, gpu_pipeline
from assets.taudb import (
    LOADS_CHECK,
    TAUDB_ASSETS,
    tau_profile_sets,
    tau_profile_trials,
)
from definitions import build_definitions
from joulehouse.gpu.layout import find_repetitions
from joulehouse.taudb.loader import list_trials
from resources import DataRoot, GpuBenchmarkSource, PowerapiSource, StepWorkers, Warehouse
from resources.taudb import TaudbResource, TauProfileSource
from sensors.gpu_repetitions import JOB_NAME, sensor_name
from sensors.local import launch_in_process, tick
from sensors.partition_runs import RANGE_END, RANGE_START
from sensors.tau_profiles import tau_profile_sensor
from tests.dagster.conftest import QUIET_S, settle

PROJECT_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_SET = PROJECT_ROOT / "examples" / "tau-profiles" / "tau2_wrap_mpi2"
EXAMPLE_GPU_DATA = PROJECT_ROOT / "examples" / "gpu-data"
TRIALS = dg.AssetKey("taudb_trials")
FRAMES = dg.AssetKey("gpu_validated_frames")
ENERGY = dg.AssetKey("gpu_repetition_energy")


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


# --- TAU profile sets ------------------------------------------------------------------------

def test_profile_sets_load_in_one_run_and_a_bad_set_fails_alone(instance, taudb, landing,
                                                                peer_data, tmp_path):
    broken = landing / "broken"
    broken.mkdir()
    lines = (EXAMPLE_SET / "profile.0.0.0").read_text().splitlines(keepends=True)
    (broken / "profile.0.0.0").write_text("".join(lines[:5]))  # cut inside the timer lines
    keys = ["landing/broken", "landing/tau2_wrap_mpi2"]
    instance.add_dynamic_partitions(tau_profile_sets.name, keys)

    result = dg.materialize(
        [tau_profile_trials], instance=instance, raise_on_error=False,
        resources={"taudb": taudb, "tau_profiles": TauProfileSource(landing_folders=[str(landing)]),
                   "warehouse": Warehouse(root=str(tmp_path / "warehouse")),  # left_out
                   "workers": StepWorkers(max_workers=2, partitions_per_worker=1)},  # from a worker
        tags={RANGE_START: keys[0], RANGE_END: keys[1]})

    assert not result.success and len(instance.get_runs()) == 1
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_failure_data.user_failure_data.description.startswith(
        "1 of 2 partition(s) failed:\nlanding/broken: ")
    checks = {c.partition: c for c in result.get_asset_check_evaluations()}
    assert {key: c.passed for key, c in checks.items()} == {
        "landing/broken": False, "landing/tau2_wrap_mpi2": True}
    check = checks["landing/broken"]
    assert check.check_name == LOADS_CHECK
    assert check.metadata["file"].value == str(broken / "profile.0.0.0")
    assert check.metadata["line"].value == 6
    assert "truncated" in check.metadata["error"].value
    status = instance.get_status_by_partition(dg.AssetKey("tau_profile_trials"), keys,
                                              tau_profile_sets)
    assert status == {"landing/broken": dg.AssetPartitionStatus.FAILED,
                      "landing/tau2_wrap_mpi2": dg.AssetPartitionStatus.MATERIALIZED}
    [trial] = _trials(taudb)  # the good set only: nothing of the bad one
    assert trial["source_key"] == str(landing / EXAMPLE_SET.name)
    [materialization] = result.asset_materializations_for_node("tau_profile_trials")
    assert materialization.partition == "landing/tau2_wrap_mpi2"
    assert materialization.metadata["taudb/trial_id"].value == trial["id"]
    golden = pd.read_csv(peer_data / "tau" / "taudb-golden" / "trial12_tau2_wrap_mpi2" /
                         "threads.csv")
    with taudb.open() as db:
        threads = db.query("SELECT node_rank, context_rank, thread_rank, thread_index "
                           "FROM thread WHERE trial = ?", (trial["id"],))
        assert sorted(threads) == sorted(map(tuple, golden.to_numpy().tolist()))
        assert db.query("SELECT count(*) FROM thread")[0][0] == len(golden) == 9


def test_a_partition_of_a_landing_folder_no_longer_configured_fails_alone(instance, taudb,
                                                                         landing, tmp_path):
    keys = ["gone/x", "landing/tau2_wrap_mpi2"]
    instance.add_dynamic_partitions(tau_profile_sets.name, keys)

    result = dg.materialize(
        [tau_profile_trials], instance=instance, raise_on_error=False,
        resources={"taudb": taudb, "tau_profiles": TauProfileSource(landing_folders=[str(landing)]),
                   "warehouse": Warehouse(root=str(tmp_path / "warehouse")),
                   "workers": StepWorkers(max_workers=1)},
        tags={RANGE_START: keys[0], RANGE_END: keys[1]})

    assert not result.success
    checks = {c.partition: c for c in result.get_asset_check_evaluations()}
    assert {key: c.passed for key, c in checks.items()} == {
        "gone/x": False, "landing/tau2_wrap_mpi2": True}
    assert checks["gone/x"].metadata["error"].value.startswith(
        "no landing folder named 'gone' is configured")
    [trial] = _trials(taudb)
    assert trial["source_key"] == str(landing / EXAMPLE_SET.name)


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

    changed = "gpu-data/power-limit/bert/200W/1"
    dg.materialize([gpu_pipeline], selection=[FRAMES, ENERGY], instance=instance,
                   partition_key=changed, resources=example_gpu)
    after = _load_gpu_trials(instance, example_gpu).metadata
    assert after["runs_loaded"].value == 1
    assert list(after["rows_loaded"].value) == ["gpu-data/power-limit/bert/200W"]
    ids = after["trial_ids"].value
    assert ids["gpu-data/power-limit/bert/200W"] != first["gpu-data/power-limit/bert/200W"]
    assert {k: v for k, v in ids.items() if "200W" not in k} == {
        k: v for k, v in first.items() if "200W" not in k}
    assert len(_trials(taudb)) == 4


# --- the landing sensor ----------------------------------------------------------------------

class Ticker:
    """Ticks the profile sensor, applying its partitions and carrying its cursor."""

    def __init__(self, instance, landing: Path):
        self.instance = instance
        self.resources = {"tau_profiles": TauProfileSource(landing_folders=[str(landing)],
                                                           quiet_period_s=QUIET_S)}
        self.cursor = None

    def __call__(self):
        data = tick(tau_profile_sensor, self.instance, self.resources, self.cursor)
        self.cursor = data.cursor
        return data

    def partitions(self) -> list[str]:
        return list(self.instance.get_dynamic_partitions(tau_profile_sets.name))


def test_sensor_adds_sets_once_and_asks_for_one_run(instance, landing):
    shutil.copytree(EXAMPLE_SET, landing / "second")
    settle()
    ticker = Ticker(instance, landing)
    data = ticker()
    assert ticker.partitions() == ["landing/second", "landing/tau2_wrap_mpi2"]
    [request] = data.run_requests
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == tuple(ticker.partitions())
    assert request.run_key.startswith("tau-profiles:")
    # the landed files read as there (materialized outside Dagster), not as missing data
    assert instance.get_materialized_partitions(dg.AssetKey("tau_profile_files")) == set(
        ticker.partitions())

    data = ticker()
    assert data.run_requests == [] and data.dynamic_partitions_requests == []
    assert "no new or changed profile set(s) ready (0 waiting for the" in data.skip_message


def test_sensor_waits_for_a_young_set_and_picks_up_a_fixed_one(instance, landing):
    ticker = Ticker(instance, landing)
    settle()
    first = ticker().run_requests[0]
    shutil.copytree(EXAMPLE_SET, landing / "young")
    data = ticker()
    assert data.run_requests == [] and "(1 waiting for the" in data.skip_message
    assert ticker.partitions() == ["landing/tau2_wrap_mpi2"]
    settle()
    [request] = ticker().run_requests
    assert request.tags[RANGE_START] == request.tags[RANGE_END] == "landing/young"

    profile = landing / EXAMPLE_SET.name / "profile.1.0.0"
    profile.write_bytes(profile.read_bytes() + b"\n")  # fixed in place
    os.utime(profile)
    assert ticker().run_requests == []  # quiet period again
    settle()
    [fixed] = ticker().run_requests
    assert fixed.tags[RANGE_START] == fixed.tags[RANGE_END] == "landing/tau2_wrap_mpi2"
    assert fixed.run_key not in (first.run_key, request.run_key)
    # moved to the end of the set, so that one run covers exactly it
    assert ticker.partitions() == ["landing/young", "landing/tau2_wrap_mpi2"]
