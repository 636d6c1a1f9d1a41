"""The GPU pipeline materialized in-process: many repetitions per day partition, one bad
repetition."""

import base64
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from unittest import mock

import dagster as dg
import pandas as pd
import pytest

from assets.blocks import FAILED_ENTRIES
from assets.gpu import ENERGY_TABLE, SETTING_TABLE, VALID_CHECK, GpuHandOut, gpu_repetition_days
from definitions import build_definitions
from joulehouse.gpu.generator import write_data_root
from joulehouse.gpu.store import TABLE as FRAMES_TABLE
from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import list_trials
from joulehouse.warehouse import partition_file_name
from resources import DataRoot, GpuBenchmarkSource, StepWorkers, Warehouse
from sensors.gpu_repetitions import JOB_NAME, sensor_name
from sensors.local import launch_in_process, tick
from sensors.partition_runs import RANGE_END, RANGE_START
from tests.dagster.conftest import (
    DAY,
    QUIET_S,
    REPETITIONS,
    RUNS,
    SMALL,
    lab_data_root,
    lab_source,
    repetition_keys,
    settle,
)
from tests.dagster_sqlite import BATCHING, DAGSTER_SQLITE, empty_instance

BAD = "lab/power-limit/bert/250W/0"
ENERGY = dg.AssetKey("gpu_repetition_energy")
FRAMES = dg.AssetKey("gpu_validated_frames")


def materialized(instance: dg.DagsterInstance, run_id: str, key: dg.AssetKey) -> set[str]:
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
    return {r.event_log_entry.dagster_event.partition for r in records
            if r.event_log_entry.dagster_event.asset_key == key}


def materialize_first_run(defs, sensor, instance, source) -> dg.RunRequest:
    """Every repetition registered and materialized in one run."""
    data = tick(sensor, instance, {"gpu_source": source})
    assert len(data.run_requests) == 1
    result = launch_in_process(defs.resolve_job_def(JOB_NAME), instance, data.run_requests[0])
    assert result.success
    return data.run_requests[0]


@pytest.fixture
def first_run(defs, sensor, instance, source):
    """The first run, for a test that changes what it stored."""
    return materialize_first_run(defs, sensor, instance, source)


@dataclass(frozen=True)
class Stored:
    """The first run over the conftest's data root (``data_root``, ``instance`` and
    ``warehouse`` made as there), for the tests that only read what it stored (or change
    a copy)."""

    data_root: Path
    instance: dg.DagsterInstance
    warehouse: Warehouse


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Iterator[Stored]:
    """The first run made once for the tests that only read it (each run costs seconds)."""
    tmp = tmp_path_factory.mktemp("first-run")
    data_root = lab_data_root(tmp)
    source = lab_source(data_root)
    warehouse = Warehouse(root=str(tmp / "warehouse"))
    defs = build_definitions(source, warehouse)
    with empty_instance(BATCHING) as instance:
        materialize_first_run(defs, defs.resolve_sensor_def(sensor_name("lab")), instance,
                              source)
        with mock.patch.dict(os.environ):  # the batch size the instance set, for its run
            os.environ.pop("DAGSTER_EVENT_BATCH_SIZE")  # only: not for the other tests' runs
            yield Stored(data_root, instance, warehouse)


def test_one_run_materializes_every_asset_of_every_partition(stored):
    """The six repetitions, all started on one UTC day, are one partition, their day; what
    is stored stays per repetition."""
    instance, warehouse, data_root = stored.instance, stored.warehouse, stored.data_root
    assert instance.get_dynamic_partitions("gpu_repetition_days") == [DAY]
    keys = set(repetition_keys(data_root))
    assert len(keys) == 6
    assert instance.get_runs_count() == 1
    run_id = instance.get_runs()[0].run_id
    assert materialized(instance, run_id, FRAMES) == {DAY}
    assert materialized(instance, run_id, ENERGY) == {DAY}
    for asset in ("gpu_setting_energy", "gpu_benchmark_energy", "energy_facts/gpu"):
        assert materialized(instance, run_id, dg.AssetKey.from_user_string(asset)) == {None}
    day = instance.get_latest_materialization_event(ENERGY).asset_materialization.metadata
    assert day["repetitions"].value == 6 and set(day["repetition_keys"].value) == keys
    tables = warehouse.tables()
    assert set(tables.partition_keys(ENERGY_TABLE)) == keys
    settings = tables.read_table(SETTING_TABLE)
    assert sorted(settings["run"]) == ["150W", "200W", "250W"]
    assert (settings["repetitions"] == 2).all()


def test_metadata_has_row_counts_schema_and_plot(stored):
    instance = stored.instance
    energy = instance.get_latest_materialization_event(ENERGY).asset_materialization
    assert energy.metadata["dagster/row_count"].value > 0
    columns = {c.name: c.description
               for c in energy.metadata["dagster/column_schema"].value.columns}
    assert {"repetition", "duration_s", "gpu_energy_counter_j"} <= set(columns)
    assert columns["gpu_energy_counter_j"] == (
        "GPU energy from the total-energy counter, resets handled (J).")
    frames = instance.get_latest_materialization_event(FRAMES).asset_materialization.metadata
    described = {c.name: c.description for c in frames["dagster/column_schema"].value.columns}
    assert described["gpu_power.power_w"] == "GPU power draw (W)."
    assert described["external_power.d0c0_w"].endswith("(W).")  # a regex column
    facts = instance.get_latest_materialization_event(
        dg.AssetKey(["energy_facts", "gpu"])).asset_materialization.metadata
    described = {c.name: c.description for c in facts["dagster/column_schema"].value.columns}
    assert described["energy_j"] == "Energy over the whole window (J), never a mean power."
    setting = instance.get_latest_materialization_event(
        dg.AssetKey("gpu_setting_energy")).asset_materialization.metadata
    described = {c.name: c.description for c in setting["dagster/column_schema"].value.columns}
    assert "(J)" in described["gpu_energy_counter_j_mean"]
    assert described["gpu_mean_power_counter_w"].endswith("(W).")
    bench = instance.get_latest_materialization_event(
        dg.AssetKey("gpu_benchmark_energy")).asset_materialization
    plot = bench.metadata["energy_vs_time"].value
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)\)", plot)
    assert len(images) == 2  # bert and resnet, drawn by matplotlib
    assert all(base64.b64decode(image).startswith(b"\x89PNG\r\n\x1a\n") for image in images)
    shown = bench.metadata["settings"].value  # the plots' points, shown inline
    assert sorted(record.data["run"] for record in shown.records) == ["150W", "200W", "250W"]
    assert all(column.description for column in shown.schema.columns)
    assert bench.metadata["dagster/row_count"].value > 0


def test_every_column_of_every_table_is_described(stored):
    """Each column schema the run reported describes every column, from a pandera schema."""
    instance = stored.instance
    records = instance.get_records_for_run(
        instance.get_runs()[0].run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
    schemas = {}
    for record in records:
        materialization = record.event_log_entry.dagster_event.event_specific_data.materialization
        if "dagster/column_schema" in materialization.metadata:
            schemas[materialization.asset_key.to_user_string()] = materialization.metadata[
                "dagster/column_schema"].value
    assert set(schemas) == {"gpu_validated_frames", "gpu_repetition_energy",
                            "gpu_setting_energy", "gpu_benchmark_energy", "energy_facts/gpu"}
    for asset, schema in schemas.items():
        undescribed = [c.name for c in schema.columns if not c.description]
        assert len(schema.columns) > 5 and not undescribed, (asset, undescribed)


@pytest.mark.usefixtures("plots_as_deployed")
@pytest.mark.parametrize("instance", [DAGSTER_SQLITE, BATCHING], indirect=True,
                         ids=["dagster-storage", "batching-storage"])
def test_bad_repetition_fails_alone_and_keeps_what_was_stored(
        first_run, instance, source, sensor, warehouse, data_root, capfd):
    """The run again, its per-repetition work in two worker processes however few the
    partitions: the bad repetition's input error crosses back whole (file and line)."""
    defs = build_definitions(source, warehouse,
                             workers=StepWorkers(max_workers=2, partitions_per_worker=1))
    tables = warehouse.tables()
    stored = tables.table_dir(f"{FRAMES_TABLE}/gpu_power") / partition_file_name(BAD)
    before = stored.read_bytes()
    gpu_power = data_root / BAD.removeprefix("lab/") / "gpu-power.csv"
    lines = gpu_power.read_text().splitlines(keepends=True)
    lines[10] = lines[10].split(",")[0] + ",not-a-row\n"  # line 11 of the file
    gpu_power.write_text("".join(lines))

    good_power = tables.table_dir(f"{FRAMES_TABLE}/gpu_power") / partition_file_name(
        "lab/power-limit/bert/250W/1")
    good_before = good_power.stat().st_mtime_ns
    request = dg.RunRequest(tags=first_run.tags)  # the same day, named by no config: whole
    result = launch_in_process(defs.resolve_job_def(JOB_NAME), instance, request)

    # The run fails, saying its day failed and why: the bad repetition, file and line ...
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.user_failure_data.description
    assert message.startswith(f"1 of 1 partition(s) failed:\n{DAY}: {gpu_power}:11: ")
    assert "(1 of 6 repetition(s) of day lab/2020-11-16 failed, 5 done)" in message
    # ... after every good repetition of the day went through every asset to the tables.
    assert materialized(instance, result.run_id, FRAMES) == set()
    assert materialized(instance, result.run_id, ENERGY) == set()
    for asset in ("gpu_setting_energy", "gpu_benchmark_energy", "energy_facts/gpu",
                  "taudb_trials"):
        assert materialized(instance, result.run_id, dg.AssetKey.from_user_string(asset)) == {None}, asset
    assert good_power.stat().st_mtime_ns > good_before  # a good repetition stored again
    # The day's own status is failed (as the UI reads).
    for asset in (FRAMES, ENERGY):
        status = instance.get_status_by_partition(asset, [DAY], gpu_repetition_days)
        assert status == {DAY: dg.AssetPartitionStatus.FAILED}
    # Its check result is scoped to its day and names the bad repetition's file and line.
    evaluations = {e.event_specific_data.partition: e.event_specific_data
                   for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
                   and e.event_specific_data.check_name == VALID_CHECK}
    bad = evaluations[DAY]
    assert set(evaluations) == {DAY} and not bad.passed
    assert bad.metadata["file"].value == str(gpu_power) and bad.metadata["line"].value == 11
    assert bad.description.startswith(f"{DAY}: {gpu_power}:11: ")
    # The run recorded the day's failed repetition, for the sensor's recheck.
    [outcome] = [e.asset_observation_data.asset_observation for e in result.all_events
                 if e.is_asset_observation]
    assert (outcome.partition, outcome.metadata[FAILED_ENTRIES].value) == (DAY, [BAD])
    assert stored.read_bytes() == before  # the bad one's stored frames are untouched
    # The tables keep the bad repetition's last good energy.
    assert BAD in set(tables.partition_keys(ENERGY_TABLE))
    # Every batch of events was stored as a batch (Dagster says so when it falls back).
    assert "Exception while storing event batch" not in capfd.readouterr().err


def test_stored_energy_matches_the_core(stored):
    from joulehouse.accounting.repetition import with_reading_figures
    from joulehouse.gpu.energy import repetition_energy
    from joulehouse.gpu.layout import RepetitionRef
    from joulehouse.gpu.readers import read_repetition
    from joulehouse.gpu.store import repetition_frames

    key = "power-limit/resnet/200W/1"
    energy = stored.warehouse.tables().read_partitions(ENERGY_TABLE, [f"lab/{key}"])
    rep = read_repetition(RepetitionRef.from_key(stored.data_root, key))
    direct = with_reading_figures(repetition_energy(rep), repetition_frames(rep))
    pd.testing.assert_frame_equal(energy, direct, check_dtype=False)


def test_two_data_roots_with_the_same_run_names_stay_apart(data_root, tmp_path, instance):
    other = tmp_path / "site-b"  # configured name "b": the tables use the name, not the folder
    write_data_root(other, RUNS, repetitions=3, base=replace(SMALL, duration_s=12.0), seed=50)
    settle()
    source = GpuBenchmarkSource(
        data_roots=[DataRoot(path=str(data_root)), DataRoot(path=str(other), name="b")],
        quiet_period_s=QUIET_S, full_rescan_s=None)
    warehouse = Warehouse(root=str(tmp_path / "two-roots"))
    defs = build_definitions(source, warehouse)
    for name in ("lab", "b"):
        data = tick(defs.resolve_sensor_def(sensor_name(name)), instance, {"gpu_source": source})
        [request] = data.run_requests
        assert launch_in_process(defs.resolve_job_def(JOB_NAME), instance, request).success

    tables = warehouse.tables()
    energy = tables.read_table(ENERGY_TABLE)
    keys = {*repetition_keys(data_root), *repetition_keys(other, "b")}
    assert len(keys) == 6 + 9
    assert sorted(instance.get_dynamic_partitions("gpu_repetition_days")) == [
        "b/2020-11-16", DAY]
    assert set(zip(energy["data_root"], energy["repetition"], strict=True)) == {
        tuple(key.split("/", 1)) for key in keys}
    settings = tables.read_table(SETTING_TABLE).set_index(["data_root", "run"])
    runs = ["150W", "200W", "250W"]
    assert sorted(settings.index) == [(root, run) for root in ("b", "lab") for run in runs]
    assert settings.loc["lab", "repetitions"].tolist() == [REPETITIONS] * 3
    assert settings.loc["b", "repetitions"].tolist() == [3] * 3
    experiment = energy[energy["phase"] == "experiment"]
    means = experiment.groupby(["data_root", "run"])["gpu_energy_j"].mean()
    pd.testing.assert_series_equal(settings["gpu_energy_j_mean"].sort_index(), means,
                                   check_names=False)
    assert (means["b"] > means["lab"]).all()  # 12 s against 8 s repetitions
    choices = tables.read_table("gpu_benchmark_energy")
    assert choices.groupby(["data_root", "benchmark"])["least_energy"].sum().tolist() == [1] * 4
    facts = tables.read_table("energy_facts")
    assert set(facts["entity"]) == keys
    bench = instance.get_latest_materialization_event(
        dg.AssetKey("gpu_benchmark_energy")).asset_materialization
    plot = bench.metadata["energy_vs_time"].value  # the benchmarks the last run (b) touched
    assert plot.count("data:image/png;base64,") == 2  # bert and resnet of b
    assert "### b / power-limit / bert" in plot
    alts = re.findall(r"!\[([^\]]*)\]\(data:", plot)  # one alt text per plot, its title
    assert sorted(alts) == [f"b / power-limit / {benchmark}" for benchmark in ("bert", "resnet")]
    assert bench.metadata["benchmarks_recomputed"].value == 2
    assert bench.metadata["dagster/row_count"].value == 6  # the table's rows, both roots
    with TaudbDatabase(f"sqlite:///{warehouse.root}/taudb.sqlite") as db:
        trials = list_trials(db)  # one per run folder: same names, distinct source keys
    assert sorted(t["source_key"] for t in trials) == sorted(
        str(root / experiment / benchmark / run) for root in (other, data_root)
        for experiment, benchmarks in RUNS.items()
        for benchmark, names in benchmarks.items() for run in names)


def test_energy_is_stored_with_its_code_version_and_its_readings_figures(stored):
    from assets.gpu import ENERGY_CODE_VERSION
    from joulehouse.accounting.repetition import stored_figures

    records = stored.instance.fetch_materializations(ENERGY, limit=100).records
    assert {r.partition_key for r in records} == {DAY}
    assert {r.asset_materialization.tags["dagster/code_version"] for r in records} == {
        ENERGY_CODE_VERSION}
    # what waste and fact_quality take instead of the frames: every repetition's
    energy = stored.warehouse.tables().read_table(ENERGY_TABLE)
    steps, judged = stored_figures(energy)
    keys = set(energy["data_root"] + "/" + energy["repetition"])
    assert {key for key, _ in steps} == keys and len(keys) == 6
    assert {key for key, _, _ in judged} == keys and len(judged) == 6  # experiment windows


@pytest.mark.usefixtures("plots_as_deployed")
def test_energy_stored_before_data_root_names_the_partitions_to_materialize_again(
        stored, instance, tmp_path):
    """One stored partition as code version 1 stored it, then all six (in a copy of the
    first run's warehouse): each time the tables over them fail, naming exactly those."""
    from assets import gpu_pipeline
    from assets.gpu import energy_facts, gpu_setting_energy
    from resources import TaudbResource

    warehouse = Warehouse(root=str(shutil.copytree(stored.warehouse.root,
                                                   tmp_path / "warehouse")))
    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(stored.data_root))],
                                quiet_period_s=QUIET_S, full_rescan_s=None)
    tables = warehouse.tables()
    every = tables.partition_keys(ENERGY_TABLE)
    done = 0
    for outdated in (1, 6):
        keys = every[:outdated]
        for key in keys[done:]:  # as code version 1 stored it: no data_root column
            old = tables.read_partitions(ENERGY_TABLE, [key]).drop(columns="data_root")
            tables.write_partition(ENERGY_TABLE, key, old)
        done = outdated
        for asset in (gpu_setting_energy, energy_facts):
            result = dg.materialize(
                [gpu_pipeline], selection=[asset.key], instance=instance, raise_on_error=False,
                resources={"gpu_source": source, "warehouse": warehouse,
                           "taudb": TaudbResource(url=f"sqlite:///{tmp_path}/taudb.sqlite"),
                           "workers": StepWorkers(max_workers=1)})
            assert not result.success, outdated
            [failure] = [e for e in result.all_events if e.is_step_failure]
            error = failure.step_failure_data.user_failure_data
            assert error.description.startswith(
                f"{outdated} stored partition(s) of gpu_repetition_energy have no data_root")
            assert ("Materialize gpu_repetition_energy again for them (a backfill"
                    in error.description)
            assert keys[0] in error.description
            assert error.metadata["partitions"].value == keys


@pytest.mark.usefixtures("plots_as_deployed")
def test_repetitions_fixed_in_place_are_picked_up_next_tick_in_one_run(
        defs, sensor, instance, source, data_root, warehouse):
    """Two bad repetitions of the day in two run folders; the rolling rescan is off, so only
    the failed day's recheck of its failed repetitions can find their fix, and the run
    processes those two alone."""
    bad = ["lab/power-limit/bert/150W/0", "lab/power-limit/resnet/200W/1"]
    originals = {}
    for key in bad:
        path = data_root / key.removeprefix("lab/") / "gpu-power.csv"
        originals[path] = path.read_bytes()
        lines = originals[path].decode().splitlines(keepends=True)
        path.write_text("".join(lines[:20]) + lines[20][:7])  # cut mid-line: line 21
    settle()
    job = defs.resolve_job_def(JOB_NAME)
    data = tick(sensor, instance, {"gpu_source": source})
    [request] = data.run_requests
    result = launch_in_process(job, instance, request)
    assert not result.success
    status = instance.get_status_by_partition(FRAMES, [DAY], gpu_repetition_days)
    assert status == {DAY: dg.AssetPartitionStatus.FAILED}
    assert set(warehouse.tables().partition_keys(ENERGY_TABLE)) == set(
        repetition_keys(data_root)) - set(bad)
    assert materialized(instance, result.run_id, dg.AssetKey(["energy_facts", "gpu"])) == {None}

    for path, content in originals.items():  # fixed in place: same folders, same names
        path.write_bytes(content)
    idle = tick(sensor, instance, {"gpu_source": source}, data.cursor)
    assert idle.run_requests == []  # within the quiet period
    settle()
    fixed = tick(sensor, instance, {"gpu_source": source}, idle.cursor)
    [again] = fixed.run_requests  # one run, exactly the two fixed repetitions
    assert again.tags[RANGE_START] == again.tags[RANGE_END] == DAY
    assert GpuHandOut.named_in(again.run_config) == {DAY: bad}
    result = launch_in_process(job, instance, again)
    assert result.success
    status = instance.get_status_by_partition(FRAMES, [DAY], gpu_repetition_days)
    assert status == {DAY: dg.AssetPartitionStatus.MATERIALIZED}
    assert materialized(instance, result.run_id, ENERGY) == {DAY}
    day = instance.get_latest_materialization_event(ENERGY).asset_materialization.metadata
    assert day["repetition_keys"].value == bad
    assert set(warehouse.tables().partition_keys(ENERGY_TABLE)) == set(
        repetition_keys(data_root))
    # the trials of the two fixed repetitions' runs reloaded, no other run looked at
    [trials] = [r.asset_materialization.metadata for r in instance.get_records_for_run(
        result.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
        if r.event_log_entry.dagster_event.asset_key == dg.AssetKey("taudb_trials")]
    assert (trials["runs_loaded"].value, trials["runs_unchanged"].value) == (2, 0)
    assert tick(sensor, instance, {"gpu_source": source}, fixed.cursor).run_requests == []
