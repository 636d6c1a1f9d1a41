"""GPU repetitions in day partitions (``gpu_repetition_days``): a run processes the
repetitions handed out alone, a day named by none is read whole, a bad repetition keeps its
day failed and rechecked until fixed, a fix into another day clears the old one, and a run
without partitions keeps the tables in line with the tree."""

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from assets.gpu import (
    ENERGY_TABLE,
    SETTING_TABLE,
    VALID_CHECK,
    GpuHandOut,
    energy_facts,
    gpu_benchmark_energy,
    gpu_repetition_days,
    gpu_repetition_energy,
    gpu_repetition_files,
    gpu_setting_energy,
    gpu_validated_frames,
)
from definitions import build_definitions
from joulehouse.gpu import aggregate
from joulehouse.gpu.store import TABLE as FRAMES_TABLE
from joulehouse.warehouse import partition_file_name
from resources import Warehouse
from sensors.gpu_repetitions import JOB_NAME, sensor_name
from tests.dagster.conftest import (
    DAY,
    lab_data_root,
    lab_source,
    repetition_keys,
    settle,
    write_started_on,
)
from tests.dagster.source_runs import Saved, SourceRuns, instance_in

BAD = "lab/power-limit/bert/250W/0"
NEW = "lab/power-limit/bert/150W/5"
OTHER_DAY = "lab/2021-02-03"


class Pipeline(SourceRuns):
    """The GPU sensor of root ``lab`` and its job over one instance and warehouse."""

    def __init__(self, instance, source, warehouse):
        self.data_root = Path(source.data_roots[0].path)
        super().__init__(instance, build_definitions(source, warehouse), sensor_name("lab"),
                         JOB_NAME, "gpu_source", source, gpu_repetition_days)
        self.tables = warehouse.tables()

    def run_whole(self, **kwargs) -> dg.ExecuteInProcessResult:
        """The job executed as a backfill or the UI does: no repetition named."""
        return self.defs.resolve_job_def(JOB_NAME).execute_in_process(
            instance=self.instance, raise_on_error=False, **kwargs)


#: Plots drawn as deployed (tests/dagster/conftest.py): no test here looks at a later run's.
pytestmark = pytest.mark.usefixtures("plots_as_deployed")


@pytest.fixture
def pipeline(instance, source, warehouse) -> Pipeline:
    return Pipeline(instance, source, warehouse)


def _in(instance, root: Path) -> Pipeline:
    """:func:`pipeline` over the data root ``root / "lab"`` and warehouse ``root /
    "warehouse"``."""
    return Pipeline(instance, lab_source(root / "lab"), Warehouse(root=str(root / "warehouse")))


@pytest.fixture(scope="module")
def ran_once(tmp_path_factory) -> Saved:
    """The generated data root and the run of the sensor's first tick over it, which
    succeeds, as :func:`pipeline` would make them: once per module."""
    base = tmp_path_factory.mktemp("gpu")
    with instance_in(Saved.storage(base)) as instance:
        lab_data_root(base / "root")
        pipeline = _in(instance, base / "root")
        [first] = pipeline.tick().run_requests
        assert pipeline.launch(first).success
    return Saved.save(base, pipeline.cursor)


@pytest.fixture
def ran(ran_once: Saved, tmp_path) -> Iterator[Pipeline]:
    """:func:`pipeline` after the run of its first tick over the generated data root
    (:func:`ran_once`, put back for this test; its data root ``ran.data_root``). The tests
    of a failed first run make their own: a failed day's repetition put back (a copy, a
    new ctime) can be handed out again with the day."""
    with ran_once.restored_source(tmp_path, _in) as pipeline:
        yield pipeline


def stored_in(pipeline: Pipeline, day: str) -> list[str]:
    """The repetitions the latest run stored in ``day`` (its validated frames' metadata)."""
    record = pipeline.instance.fetch_materializations(dg.AssetRecordsFilter(
        asset_key=gpu_validated_frames.key, asset_partitions=[day]), limit=1).records[0]
    return record.asset_materialization.metadata["repetition_keys"].value


def break_power(data_root: Path, key: str) -> bytes:
    """Line 11 of ``key``'s gpu-power.csv made a bad row; returns the file as it was."""
    path = data_root / key.removeprefix("lab/") / "gpu-power.csv"
    original = path.read_bytes()
    lines = original.decode().splitlines(keepends=True)
    lines[10] = lines[10].split(",")[0] + ",not-a-row\n"
    path.write_text("".join(lines))
    return original


def assert_tables_rebuilt(pipeline: Pipeline, keys: list[str]) -> None:
    """The per-setting table and the facts equal those computed from scratch from the stored
    energy of ``keys``."""
    settings = aggregate.setting_table(pipeline.tables.read_partitions(ENERGY_TABLE, keys))
    pd.testing.assert_frame_equal(pipeline.tables.read_table(SETTING_TABLE).sort_values(
        aggregate.SETTING_KEY, ignore_index=True), settings)
    facts = pipeline.tables.read_table("energy_facts")
    assert set(facts["entity"]) == set(keys)


def assert_fixed_alone(pipeline: Pipeline, data_root: Path, original: bytes) -> None:
    """:data:`BAD` fixed in place (its gpu-power.csv as ``original``) is handed out alone at
    the next tick after its quiet period, its day passes, the tables equal a rebuild from
    scratch, and nothing more is asked for."""
    (data_root / BAD.removeprefix("lab/") / "gpu-power.csv").write_bytes(original)
    settle()
    [fixed] = pipeline.tick().run_requests
    assert GpuHandOut.named_in(fixed.run_config) == {DAY: [BAD]}
    assert pipeline.launch(fixed).success
    for asset in (gpu_validated_frames.key, gpu_repetition_energy.key):
        assert pipeline.status(asset) == {DAY: dg.AssetPartitionStatus.MATERIALIZED}
    assert_tables_rebuilt(pipeline, repetition_keys(data_root))
    assert pipeline.tick().run_requests == []


def test_a_day_named_by_no_hand_out_is_read_whole(pipeline, data_root):
    """A run over a day its config does not name (a backfill, the UI, the weekly
    re-validation) processes every complete repetition of the root whose day it is, and
    only those."""
    for seed, repetition in enumerate(sorted((data_root / "power-limit/resnet/200W").iterdir())):
        write_started_on(repetition, "2021-02-03", seed)
    settle()
    [first] = pipeline.tick().run_requests
    assert sorted(GpuHandOut.named_in(first.run_config)) == [DAY, OTHER_DAY]
    assert pipeline.launch(first).success
    result = pipeline.run_whole(partition_key=OTHER_DAY)
    assert result.success
    assert stored_in(pipeline, OTHER_DAY) == ["lab/power-limit/resnet/200W/0",
                                              "lab/power-limit/resnet/200W/1"]
    pipeline.instance.add_dynamic_partitions(gpu_repetition_days.name, ["lab/2021-02-05"])
    empty = pipeline.run_whole(partition_key="lab/2021-02-05")
    assert empty.success and stored_in(pipeline, "lab/2021-02-05") == []


@contextmanager
def counted_reads(pipeline: Pipeline) -> Iterator[tuple[list, list]]:
    """Within: the days whose FAILED status is read (``BlockHandOuts.failed_blocks``, a
    query per built asset over the root's days), and each read of the repetition files'
    records (``fetch_materializations``/``fetch_observations``) with its partitions."""
    from sensors.blocks import BlockHandOuts

    status_reads: list[list[str]] = []
    reads: list[tuple[str, tuple]] = []
    failed_blocks = BlockHandOuts.failed_blocks

    def counted(name: str):
        read = getattr(pipeline.instance, name)

        def fetch(records_filter, *args, **kwargs):
            if records_filter.asset_key == gpu_repetition_files.key:
                reads.append((name, tuple(records_filter.asset_partitions or ())))
            return read(records_filter, *args, **kwargs)
        return fetch

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BlockHandOuts, "failed_blocks", lambda self, instance, registered: (
            status_reads.append(list(registered)) or failed_blocks(self, instance, registered)))
        for name in ("fetch_materializations", "fetch_observations"):
            patch.setattr(pipeline.instance, name, counted(name))
        yield status_reads, reads


def test_a_bad_repetition_keeps_its_day_failed_and_is_rechecked_until_fixed_alone(
        pipeline, data_root):
    """A bad repetition fails its day naming file and line, the day's others stored; each
    later hand-out of the day lists it again with the new ones, so the day stays failed;
    fixed in place, it is handed out alone and the day passes.

    The tick handing out the day again reads the FAILED days' status once, for the recheck
    and the moved failures alike; and the failed day's latest hand-out and outcome record
    once, though its recheck, its entries not known good, its next hand-out and the
    cancelled runs' check all ask for them (``sensors.blocks.TickRecords``)."""
    original = break_power(data_root, BAD)
    settle()
    [first] = pipeline.tick().run_requests
    result = pipeline.launch(first)
    assert not result.success
    [check] = [c for c in result.get_asset_check_evaluations()
               if c.check_name == VALID_CHECK]
    gpu_power = data_root / BAD.removeprefix("lab/") / "gpu-power.csv"
    assert (check.partition, check.passed) == (DAY, False)
    assert (check.metadata["file"].value, check.metadata["line"].value) == (str(gpu_power), 11)
    assert set(pipeline.tables.partition_keys(ENERGY_TABLE)) == set(
        repetition_keys(data_root)) - {BAD}

    shutil.copytree(data_root / "power-limit/bert/150W/0", data_root / NEW.removeprefix("lab/"))
    settle()
    with counted_reads(pipeline) as (status_reads, reads):
        [request] = pipeline.tick().run_requests
    assert GpuHandOut.named_in(request.run_config) == {DAY: [NEW, BAD]}
    # the FAILED days' status, and the failed day's latest records, read once this tick
    assert status_reads == [[DAY]]
    assert sorted(reads) == [("fetch_materializations", (DAY,)),
                             ("fetch_observations", (DAY,))]
    assert not pipeline.launch(request).success
    assert pipeline.status(gpu_validated_frames.key) == {DAY: dg.AssetPartitionStatus.FAILED}
    assert pipeline.tables.has_partition(ENERGY_TABLE, NEW)

    assert_fixed_alone(pipeline, data_root, original)


def test_a_bad_repetition_fixed_into_another_day_clears_its_old_day(pipeline, data_root):
    """A bad repetition fixed so that it starts on another day is handed out in that day, and
    its old day, still FAILED, is handed out in the same run with its other failed
    repetitions (none), so it passes without it."""
    break_power(data_root, BAD)
    settle()
    assert not pipeline.launch(pipeline.tick().run_requests[0]).success
    write_started_on(data_root / BAD.removeprefix("lab/"), "2021-02-03")
    settle()
    [request] = pipeline.tick().run_requests
    assert GpuHandOut.named_in(request.run_config) == {DAY: [], OTHER_DAY: [BAD]}
    assert pipeline.launch(request).success
    assert pipeline.status(gpu_validated_frames.key) == {
        DAY: dg.AssetPartitionStatus.MATERIALIZED,
        OTHER_DAY: dg.AssetPartitionStatus.MATERIALIZED}
    assert stored_in(pipeline, OTHER_DAY) == [BAD]


def test_a_cancelled_hand_out_into_a_failed_day_is_asked_again_once(pipeline, data_root):
    """The repetitions handed out to a CANCELED run are asked for again once though their
    day FAILED, with the day's failed repetition rechecked beside them."""
    from sensors.partition_runs import RETRY_OF_TAG

    break_power(data_root, BAD)
    settle()
    assert not pipeline.launch(pipeline.tick().run_requests[0]).success
    shutil.copytree(data_root / "power-limit/bert/150W/0", data_root / NEW.removeprefix("lab/"))
    settle()
    [request] = pipeline.tick().run_requests
    pipeline.cancel(request)
    [retry] = pipeline.tick().run_requests
    assert GpuHandOut.named_in(retry.run_config) == {DAY: [NEW, BAD]}
    assert retry.tags[RETRY_OF_TAG] == request.run_key
    assert not pipeline.launch(retry).success
    assert pipeline.tables.has_partition(ENERGY_TABLE, NEW)
    assert pipeline.tick().run_requests == []  # once


def test_a_repetition_gone_between_tick_and_run_fails_its_day_naming_it(pipeline, data_root):
    [request] = pipeline.tick().run_requests
    shutil.rmtree(data_root / BAD.removeprefix("lab/"))
    result = pipeline.launch(request)
    assert not result.success
    [check] = [c for c in result.get_asset_check_evaluations()
               if c.check_name == VALID_CHECK and not c.passed]
    assert check.partition == DAY
    assert check.metadata["file"].value == str(
        data_root / BAD.removeprefix("lab/") / "timestamps.csv")
    assert len(pipeline.tables.partition_keys(ENERGY_TABLE)) == 5


def test_a_run_without_partitions_drops_a_removed_repetition_but_not_an_unlistable_root(
        ran):
    """The tables over all repetitions (after the first run: :func:`ran`), materialized
    without partitions, keep the stored repetitions still in their root's tree: a removed
    repetition's rows and facts go; a root that cannot be listed, or lists nothing
    (unmounted), keeps all of its."""
    pipeline, data_root = ran, ran.data_root
    tables_only = [gpu_setting_energy.key, gpu_benchmark_energy.key, energy_facts.key]

    def facts() -> set[str]:
        assert pipeline.run_whole(asset_selection=tables_only).success
        return set(pipeline.tables.read_table("energy_facts")["entity"])

    every = set(repetition_keys(data_root))
    assert len(every) == 6
    unmounted = data_root.rename(data_root.with_name("unmounted"))
    assert facts() == every
    data_root.mkdir()  # a mount point with nothing mounted on it: an empty folder
    assert facts() == every
    data_root.rmdir()
    unmounted.rename(data_root)
    shutil.rmtree(data_root / BAD.removeprefix("lab/"))
    assert facts() == every - {BAD}
    assert_tables_rebuilt(pipeline, sorted(every - {BAD}))


def test_an_unmounted_root_during_a_run_over_named_repetitions_deletes_nothing_stored(ran):
    """A run over handed-out repetitions (after the first run: :func:`ran`) while their root
    is unmounted (an empty folder at its path) fails its load and keeps every stored row:
    the touched setting is not replaced by nothing, and the facts and benchmarks keep all
    entities."""
    pipeline, data_root = ran, ran.data_root
    every = repetition_keys(data_root)
    settings = pipeline.tables.read_table(SETTING_TABLE)
    benchmarks = pipeline.tables.read_table("gpu_benchmark_energy")
    shutil.copytree(data_root / "power-limit/bert/150W/0", data_root / NEW.removeprefix("lab/"))
    settle()
    [request] = pipeline.tick().run_requests
    assert GpuHandOut.named_in(request.run_config) == {DAY: [NEW]}
    data_root.rename(data_root.with_name("unmounted"))
    data_root.mkdir()  # a mount point with nothing mounted on it
    assert not pipeline.launch(request).success
    assert pipeline.tables.read_table(SETTING_TABLE).set_index("run").loc[
        "150W", "repetitions"] == 2
    pd.testing.assert_frame_equal(pipeline.tables.read_table(SETTING_TABLE), settings)
    pd.testing.assert_frame_equal(pipeline.tables.read_table("gpu_benchmark_energy"),
                                  benchmarks)
    assert set(pipeline.tables.read_table("energy_facts")["entity"]) == set(every)
    assert sorted(pipeline.tables.partition_keys(ENERGY_TABLE)) == sorted(every)


def test_a_run_cancelled_before_the_upgrade_makes_no_later_run_a_retry(pipeline, data_root):
    """A hand-out of the old per-repetition partitions (``gpu_repetitions``) whose run was
    cancelled before the upgrade is no hand-out of the days: the first run over the days
    is no retry, so when it is cancelled in turn it is asked for again, once."""
    # a gpu_repetitions key
    pipeline.cancelled_before_days(gpu_repetition_files.key, "lab/power-limit/bert/150W/0",
                                   "lab-old")
    request, retry = pipeline.cancelled_and_retried()
    assert GpuHandOut.named_in(request.run_config) == {DAY: repetition_keys(data_root)}
    assert GpuHandOut.named_in(retry.run_config) == {DAY: repetition_keys(data_root)}
    pipeline.cancel(retry)
    assert pipeline.tick().run_requests == []  # once


def test_a_repetition_landing_in_a_stored_day_is_processed_alone_then_a_failed_one_rechecked(
        ran):
    """A repetition copied into a day already stored (by the first run: :func:`ran`): the
    hand-out names it alone, the day's other repetitions are not read again, and the
    tables equal a rebuild from scratch.

    Then a repetition of an earlier hand-out broken in place, found by a whole-day run (the
    UI, the weekly re-validation) while the day's latest hand-out lists another one alone
    (the one landed), is rechecked at every tick: handed out again once quiet, then, fixed,
    alone, and the day passes, without waiting for the rolling rescan."""
    pipeline, data_root = ran, ran.data_root
    frames = pipeline.tables.table_dir(f"{FRAMES_TABLE}/gpu_power")
    before = {key: (frames / partition_file_name(key)).stat().st_mtime_ns
              for key in repetition_keys(data_root)}
    shutil.copytree(data_root / "power-limit/bert/150W/0", data_root / NEW.removeprefix("lab/"))
    settle()
    [second] = pipeline.tick().run_requests
    assert GpuHandOut.named_in(second.run_config) == {DAY: [NEW]}
    assert pipeline.launch(second).success
    assert stored_in(pipeline, DAY) == [NEW]
    assert {key: (frames / partition_file_name(key)).stat().st_mtime_ns
            for key in before} == before  # not read again
    settings = pipeline.tables.read_table(SETTING_TABLE).set_index("run")
    assert settings.loc["150W", "repetitions"] == 3
    assert_tables_rebuilt(pipeline, repetition_keys(data_root))

    original = break_power(data_root, BAD)
    assert not pipeline.run_whole(partition_key=DAY).success
    assert pipeline.status(gpu_validated_frames.key) == {DAY: dg.AssetPartitionStatus.FAILED}
    settle()
    [again] = pipeline.tick().run_requests  # changed since its hand-out: asked again
    assert GpuHandOut.named_in(again.run_config) == {DAY: [BAD]}
    assert not pipeline.launch(again).success
    settle()
    assert pipeline.tick().run_requests == []  # the same broken version: not again
    assert_fixed_alone(pipeline, data_root, original)


def test_a_repetition_gone_between_the_scan_and_its_day_is_not_handed_out(
        pipeline, data_root, monkeypatch):
    """A repetition removed after the tick's scan found it ready and before its day is
    read does not fail the tick: the others are handed out, it is not."""
    import sensors.gpu_repetitions as sensor

    scanned = sensor.scan

    def scan_then_remove(*args, **kwargs):
        result = scanned(*args, **kwargs)
        shutil.rmtree(data_root / BAD.removeprefix("lab/"))
        return result

    monkeypatch.setattr(sensor, "scan", scan_then_remove)
    [request] = pipeline.tick().run_requests
    handed = GpuHandOut.named_in(request.run_config)
    assert handed == {DAY: sorted(set(repetition_keys(data_root)) - {BAD})}
    assert len(handed[DAY]) == 5
