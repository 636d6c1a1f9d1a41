"""The ClusterCockpit Dagster layer: job-id blocks, one run over many, a bad job alone."""

import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

import assets.clustercockpit as cc_assets
from assets.clustercockpit import (
    BLOCK_JOURNAL,
    BLOCK_TABLE,
    CONFORMANCE_CHECK,
    JOB_ENERGY_TABLE,
    JOBS_TABLE,
    LANDED_TABLE,
    LOADS_CHECK,
    READ_CHECK,
    ROLLUP_TABLE,
    cc_block_tables,
    cc_energy_facts,
    cc_job_blocks,
    cc_job_energy,
    cc_job_trials,
    cc_jobs,
    cc_rollup,
)
from assets.reporting import REREAD_ALL, REREAD_TAG
from definitions import EXAMPLE_CC_ARCHIVE, build_definitions
from joulehouse import entry_table
from joulehouse.clustercockpit import blocks
from joulehouse.clustercockpit import tables as kept_tables
from joulehouse.clustercockpit.aggregate import ROLLUP_KEYS, rollup
from joulehouse.clustercockpit.energy import energy_facts_rows
from joulehouse.clustercockpit.generator import (
    JobSpec,
    cluster_config,
    write_archive_files,
    write_job,
)
from joulehouse.clustercockpit.layout import find_jobs
from joulehouse.errors import InputError
from joulehouse.leftout import stored_left_out
from joulehouse.partition_group import stage
from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import list_trials
from joulehouse.warehouse import Warehouse as Tables
from resources import ClusterCockpitArchive, DataRoot, GpuBenchmarkSource, Warehouse
from sensors.clustercockpit import JOB_NAME, JOBS_METADATA, SENSOR_NAME
from sensors.partition_runs import (
    NO_RETRY_TAG,
    RANGE_END,
    RANGE_START,
    RETRY_OF_TAG,
    RUN_KEY_TAG,
)
from tests.dagster.conftest import QUIET_S, settle
from tests.dagster.source_runs import FirstRun, Saved, SourceRuns, instance_in
from tests.test_left_out_sources import MISSING_HOST_PART, archive_with_a_missing_host

BLOCKS = ["emmy/1403", "fritz/398", "taurus/20639"]
# energy_j per job and metric, as `joulehouse energy cc` gives them (tests/clustercockpit)
ENERGY_J = {("emmy/1403244/1608923076", "rapl_power"): 4817792.7 + 4817350.2 + 4499451.3
            + 4858465.8,
            ("fritz/398764/1675954353", "cpu_power"): 31222.23,
            ("taurus/20639587/1635856524", "cpu_power"): 50330.42}
FRITZ = ["fritz/398764/1675954353", "fritz/398955/1675956725"]
FACT_ORDER = ["entity", "component", "method"]


#: Plots drawn as deployed (tests/dagster/conftest.py): no test here looks at a later run's.
pytestmark = pytest.mark.usefixtures("plots_as_deployed")


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """A copy of the bundled archive (4 real jobs in 3 blocks)."""
    root = tmp_path / "archive"
    shutil.copytree(EXAMPLE_CC_ARCHIVE, root)
    return root


class Pipeline(SourceRuns):
    """The definitions over one archive: register blocks, run the ClusterCockpit job."""

    def __init__(self, instance, archive: Path, tmp_path: Path, **settings):
        self.archive = archive
        self.source = ClusterCockpitArchive(
            archive_roots=[str(archive)], **{"quiet_period_s": QUIET_S, "full_rescan_s": None,
                                             **settings})
        self.warehouse = tmp_path / "warehouse"
        defs = build_definitions(
            GpuBenchmarkSource(data_roots=[DataRoot(path=str(archive))]),
            Warehouse(root=str(self.warehouse)), cc_archive=self.source)
        super().__init__(instance, defs, SENSOR_NAME, JOB_NAME, "cc_archive", self.source,
                         cc_job_blocks)
        self.tables = Tables(self.warehouse)

    def run(self, keys: list[str]) -> dg.ExecuteInProcessResult:
        """Register ``keys`` (in order, after those registered) and run them in one run."""
        known = set(self.partitions())
        self.instance.add_dynamic_partitions(cc_job_blocks.name,
                                             [key for key in keys if key not in known])
        return self.launch(dg.RunRequest(tags={RANGE_START: keys[0], RANGE_END: keys[-1]}))

    def trials(self) -> dict[str, int]:
        with TaudbDatabase(f"sqlite:///{self.warehouse}/taudb.sqlite") as db:
            return {trial["name"]: trial["id"] for trial in list_trials(db)}


@pytest.fixture
def pipeline(instance, archive, tmp_path) -> Pipeline:
    return Pipeline(instance, archive, tmp_path)


@pytest.fixture(scope="module")
def ran_once(tmp_path_factory) -> FirstRun:
    """A copy of the bundled archive and one run over its blocks, which succeeds, as
    :func:`pipeline` would make them: once per module."""
    base = tmp_path_factory.mktemp("cc")
    with instance_in(Saved.storage(base)) as instance:
        shutil.copytree(EXAMPLE_CC_ARCHIVE, base / "root" / "archive")
        result = Pipeline(instance, base / "root" / "archive", base / "root").run(BLOCKS)
        assert result.success
    return FirstRun(Saved.save(base, None), result)


@pytest.fixture
def ran(ran_once: FirstRun, tmp_path) -> Iterator[Pipeline]:
    """:func:`pipeline` after one run over the bundled archive's blocks (:func:`ran_once`,
    put back for this test; its archive ``ran.archive``)."""
    with ran_once.saved.restored_source(tmp_path, lambda instance, root: Pipeline(
            instance, root / "archive", root)) as pipeline:
        yield pipeline


def _latest(instance, asset: dg.AssetKey, partition: str | None = None):
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset,
                              asset_partitions=[partition] if partition else None), limit=1)
    return records.records[0].asset_materialization


def _checks(result, name: str) -> dict[str, dg.AssetCheckEvaluation]:
    return {c.partition: c for c in result.get_asset_check_evaluations() if c.check_name == name}


def _failure(result) -> str:
    [failure] = [e for e in result.all_events if e.is_step_failure]
    return failure.step_failure_data.user_failure_data.description


def test_the_bundled_archive_materializes_in_one_run(ran, ran_once):
    """Every table, the metadata and the checks of one run over the bundled archive (the
    module's, :func:`ran_once`); its schema violations are warnings naming job and path
    (one run for both)."""
    pipeline = ran
    assert sorted({ref.block for ref in find_jobs(EXAMPLE_CC_ARCHIVE)}) == BLOCKS
    result = ran_once.result
    assert result.success  # the real jobs all violate the schemas, and are all read

    tables = pipeline.tables
    assert tables.partition_keys(f"{BLOCK_TABLE}/jobs") == BLOCKS
    jobs = tables.read_table(JOBS_TABLE)
    assert sorted(jobs["job"]) == ["emmy/1403244/1608923076", *FRITZ,
                                   "taurus/20639587/1635856524"]
    energy = tables.read_table(JOB_ENERGY_TABLE).set_index(["job", "metric"])
    assert len(energy) == 6  # emmy rapl, fritz cpu + mem x 2, taurus cpu
    for key, joules in ENERGY_J.items():
        assert energy.at[key, "energy_j"] == pytest.approx(joules, abs=0.5), key
    assert energy.at[("emmy/1403244/1608923076", "rapl_power"), "energy_cc_kwh"] == 5.27
    assert len(tables.read_partitions(f"{BLOCK_TABLE}/host_energy", ["emmy/1403"])) == 4
    assert len(tables.read_partitions(f"{BLOCK_TABLE}/metric_stats", ["fritz/398"])) > 0

    rollup = tables.read_table(ROLLUP_TABLE)
    assert rollup["jobs"].sum() == 4 and len(rollup) == 4  # the fritz jobs: two users
    assert rollup["energy_j"].sum() == pytest.approx(energy["energy_j"].sum())
    assert rollup["node_hours"].sum() == pytest.approx(jobs["node_hours"].sum())

    facts = tables.read_table("energy_facts")
    assert set(facts["source"]) == {"clustercockpit"}
    pd.testing.assert_frame_equal(  # a rebuild from scratch, at Delta's microseconds
        facts.sort_values(FACT_ORDER, ignore_index=True),
        entry_table.to_microseconds(energy_facts_rows(tables.read_table(JOB_ENERGY_TABLE))
                                    ).sort_values(FACT_ORDER, ignore_index=True))
    power = facts[facts["method"] == "power"].set_index("entity")
    assert power.loc["taurus/20639587/1635856524", "energy_j"] == pytest.approx(50330.42,
                                                                                abs=0.01)
    assert len(power) == 6 and (facts["method"] == "cc-backend").sum() == 4

    assert sorted(pipeline.trials()) == sorted(jobs["job"])  # one trial per job

    block = _latest(pipeline.instance, cc_block_tables.key, "fritz/398").metadata
    assert block["jobs"].value == 2
    assert block["start_time_span"].value == "2023-02-09 14:52 .. 2023-02-09 15:32 UTC"
    assert block["start_days"].value == ["2023-02-09"]
    assert block["energy_kwh"].value == pytest.approx(
        sum(energy.loc[job, "energy_j"].sum() for job in FRITZ) / 3.6e6)
    for asset, rows in ((cc_jobs, 4), (cc_job_energy, 6), (cc_rollup, 4)):
        metadata = _latest(pipeline.instance, asset.key).metadata
        assert metadata["dagster/row_count"].value == rows, asset.key
        assert all(c.description for c in metadata["dagster/column_schema"].value.columns)
    written = _latest(pipeline.instance, cc_energy_facts.key).metadata  # the run's blocks
    assert written["rows_written"].value == len(facts)
    assert written["entities_written"].value == 4
    assert all(c.description for c in written["dagster/column_schema"].value.columns)
    rollup_metadata = _latest(pipeline.instance, cc_rollup.key).metadata
    assert rollup_metadata["energy_per_day_plot"].value.startswith(
        "![energy per day and cluster](data:image/png;base64,")
    assert len(rollup_metadata["energy_per_day"].value.records) == 3  # days x clusters
    assert [r.data["block"] for r in _latest(pipeline.instance, cc_jobs.key).metadata[
        "run_blocks_span"].value.records] == BLOCKS

    assert {k: c.passed for k, c in _checks(result, READ_CHECK).items()} == dict.fromkeys(
        BLOCKS, True)
    assert {k: c.passed for k, c in _checks(result, LOADS_CHECK).items()} == dict.fromkeys(
        BLOCKS, True)

    # schema violations are warnings naming job and path
    checks = _checks(result, CONFORMANCE_CHECK)
    assert set(checks) == set(BLOCKS)
    fritz = checks["fritz/398"]
    assert not fritz.passed and fritz.severity == dg.AssetCheckSeverity.WARN
    assert fritz.metadata["jobs"].value == FRITZ
    assert ("fritz/398764/1675954353: meta.json: /statistics/vectorization_ratio/unit/base: "
            "'%' is not one of") in " ".join(fritz.metadata["violations"].value)


def test_facts_are_written_per_block_and_a_deleted_job_loses_them(pipeline, archive):
    """Each run writes its blocks' jobs' facts alone; a block read again without a job
    whose folder was deleted removes that job's facts; the table equals a rebuild from
    scratch after each run."""
    def facts() -> pd.DataFrame:
        return pipeline.tables.read_table("energy_facts").sort_values(
            FACT_ORDER, ignore_index=True)

    def rebuilt(blocks: list[str]) -> pd.DataFrame:
        energy = pipeline.tables.read_partitions(f"{BLOCK_TABLE}/job_energy", blocks)
        return entry_table.to_microseconds(energy_facts_rows(energy)).sort_values(
            FACT_ORDER, ignore_index=True)

    def assert_tables_rebuilt(blocks: list[str]) -> None:
        """cc_jobs, cc_job_energy and cc_rollup, kept per entry too, equal a rebuild."""
        jobs, energy = (pipeline.tables.read_partitions(f"{BLOCK_TABLE}/{name}", blocks)
                        for name in ("jobs", "job_energy"))
        for kept, rows, by in (
                (kept_tables.JOBS, jobs, ["job"]),
                (kept_tables.JOB_ENERGY, energy, ["job", "metric"]),
                (kept_tables.ROLLUP, rollup(jobs, energy), ROLLUP_KEYS)):
            pd.testing.assert_frame_equal(
                kept.ready(pipeline.tables.read_table(kept.table)).sort_values(
                    by, ignore_index=True),
                kept.ready(rows).sort_values(by, ignore_index=True), check_dtype=False)

    for done, block in enumerate(BLOCKS, start=1):
        assert pipeline.run([block]).success
        pd.testing.assert_frame_equal(facts(), rebuilt(BLOCKS[:done]))
        assert_tables_rebuilt(BLOCKS[:done])
        written = _latest(pipeline.instance, cc_energy_facts.key).metadata
        assert written["entities_written"].value == (2 if block == "fritz/398" else 1)
    assert set(facts()["entity"]) >= set(FRITZ)

    shutil.rmtree(archive / "fritz" / "398" / "955")  # FRITZ[1]'s job folder
    assert pipeline.run(["fritz/398"]).success
    written = _latest(pipeline.instance, cc_energy_facts.key).metadata
    assert (written["entities_written"].value, written["entities_removed"].value) == (1, 1)
    assert FRITZ[1] not in set(facts()["entity"])
    pd.testing.assert_frame_equal(facts(), rebuilt(BLOCKS))
    assert_tables_rebuilt(BLOCKS)
    jobs = _latest(pipeline.instance, cc_jobs.key).metadata
    assert (jobs["jobs_written"].value, jobs["jobs_removed"].value) == (1, 1)
    assert jobs["dagster/row_count"].value == len(pipeline.tables.read_table("cc_jobs"))

    # a block deleted from Dagster: the tables materialized alone (no partition, as the
    # daily rollups do) compare every stored block with the stored rows and drop its rows
    pipeline.instance.delete_dynamic_partition(cc_job_blocks.name, BLOCKS[2])
    alone = [cc_jobs.key, cc_job_energy.key, cc_rollup.key]
    assert dg.materialize([pipeline.defs.resolve_assets_def(cc_jobs.key)], selection=alone,
                          instance=pipeline.instance).success
    assert_tables_rebuilt(BLOCKS[:2])
    jobs = _latest(pipeline.instance, cc_jobs.key).metadata
    assert (jobs["jobs_written"].value, jobs["jobs_removed"].value) == (0, 1)


def test_a_rerun_reloads_only_the_trials_of_changed_jobs_settings_or_cluster_json(ran):
    """A rerun (after the module's first run, :func:`ran`) reloads only the trials of
    changed jobs; the trials' energies depend on ``max_missing`` and cluster.json too:
    changing either reloads the trials it concerns; an unchanged rerun loads none (one
    pipeline for both)."""
    pipeline, archive = ran, ran.archive
    first = pipeline.trials()
    assert len(first) == 4
    assert pipeline.run(BLOCKS).success  # nothing changed: every trial kept, same ids
    assert pipeline.trials() == first

    meta = archive / "fritz" / "398" / "764" / "1675954353" / "meta.json"
    meta.write_text(meta.read_text())  # rewritten (tags): new mtime, new fingerprint
    assert pipeline.run(["fritz/398"]).success
    again = pipeline.trials()
    assert set(again) == set(first)
    assert {job for job in first if again[job] != first[job]} == {FRITZ[0]}

    wider = Pipeline(pipeline.instance, archive, archive.parent, max_missing=3)
    assert wider.run(BLOCKS).success
    second = wider.trials()
    assert set(second) == set(again) and not set(second.values()) & set(again.values())
    assert wider.run(BLOCKS).success
    assert wider.trials() == second  # the same setting again: nothing reloaded

    config = archive / "fritz" / "cluster.json"
    config.write_text(config.read_text())  # rewritten: new mtime, new fingerprint
    assert wider.run(BLOCKS).success
    third = wider.trials()
    assert {job for job in second if third[job] != second[job]} == set(FRITZ)


def _bad_job(archive: Path, job_id: int = 398_001, start: int = 1_675_900_000) -> Path:
    """A synthetic job in the fritz block 398 whose data.json.gz is cut short."""
    write_job(archive, JobSpec(cluster="fritz", job_id=job_id, start_time=start, gzip=True))
    folder = archive / "fritz" / "398" / f"{job_id % 1000:03d}" / str(start)
    data = folder / "data.json.gz"
    data.write_bytes(data.read_bytes()[:-20])
    return folder


def _other_block(archive: Path) -> str:
    """A second cluster with one good synthetic job: the block ``testcluster/1234``."""
    (archive / "testcluster").mkdir()
    (archive / "testcluster" / "cluster.json").write_text(
        json.dumps(cluster_config("testcluster")))
    write_job(archive, JobSpec())
    return "testcluster/1234"


def test_a_bad_job_fails_only_itself(pipeline, archive):
    folder = _bad_job(archive)
    other = _other_block(archive)
    keys = [*BLOCKS, other]
    result = pipeline.run(keys)

    assert not result.success
    assert _failure(result).startswith("1 of 4 partition(s) failed:\nfritz/398: ")
    check = _checks(result, READ_CHECK)["fritz/398"]
    assert not check.passed
    assert check.metadata["file"].value == str(folder / "data.json.gz")
    assert "truncated or invalid" in check.metadata["error"].value
    assert "1 of 3 job(s) of block fritz/398 failed, 2 done" in check.description
    assert all(_checks(result, READ_CHECK)[key].passed for key in keys if key != "fritz/398")
    assert pipeline.status(cc_block_tables.key) == {
        **dict.fromkeys(keys, dg.AssetPartitionStatus.MATERIALIZED),
        "fritz/398": dg.AssetPartitionStatus.FAILED}
    # the block's other jobs and the other blocks reached every table in the same run
    stored = pipeline.tables.read_partitions(f"{BLOCK_TABLE}/jobs", ["fritz/398"])
    assert sorted(stored["job"]) == FRITZ
    jobs = pipeline.tables.read_table(JOBS_TABLE)
    assert len(jobs) == 5 and "fritz/398001/1675900000" not in set(jobs["job"])
    assert "testcluster/1234567/1700000000" in set(
        pipeline.tables.read_table(JOB_ENERGY_TABLE)["job"])
    assert len(pipeline.trials()) == 5  # the bad job loads nothing


def test_a_stored_block_survives_a_failed_re_read(pipeline, archive):
    write_job(archive, JobSpec(cluster="fritz", job_id=398_001, start_time=1_675_900_000,
                               gzip=True))
    assert pipeline.run(BLOCKS).success
    energy = pipeline.tables.read_table(JOB_ENERGY_TABLE)
    before = energy[energy["job"] == "fritz/398001/1675900000"]["energy_j"].item()

    folder = _bad_job(archive)  # the same job rewritten, cut short
    result = pipeline.run(["fritz/398"])
    assert not result.success
    assert _failure(result).startswith(f"1 of 1 partition(s) failed:\nfritz/398: {folder}")
    stored = pipeline.tables.read_partitions(f"{BLOCK_TABLE}/job_energy", ["fritz/398"])
    assert stored[stored["job"] == "fritz/398001/1675900000"]["energy_j"].item() == before
    assert len(pipeline.tables.read_partitions(f"{BLOCK_TABLE}/jobs", ["fritz/398"])) == 3
    energy = pipeline.tables.read_table(JOB_ENERGY_TABLE)
    assert energy[energy["job"] == "fritz/398001/1675900000"]["energy_j"].item() == before
    assert len(pipeline.tables.read_table(JOBS_TABLE)) == 5


def test_a_failed_re_read_keeps_what_the_failed_job_left_out(instance, tmp_path):
    """The stored rows of a job that fails its re-read are kept, and so are its left-out
    records: its facts are still those of the earlier read, which left out what it said."""
    job = archive_with_a_missing_host(tmp_path / "archive")
    pipeline = Pipeline(instance, tmp_path / "archive", tmp_path)
    assert pipeline.run(["emmy/1403"]).success
    first = stored_left_out(pipeline.tables, "clustercockpit", "read", "emmy/1403")
    assert [(record.input, record.part) for record in first] == [(str(job), MISSING_HOST_PART)]

    data = job / "data.json.gz"
    data.write_bytes(data.read_bytes()[:-20])  # the job's re-read fails
    assert not pipeline.run(["emmy/1403"]).success
    assert stored_left_out(pipeline.tables, "clustercockpit", "read", "emmy/1403") == first


def test_a_block_write_interrupted_after_its_commit_is_completed_by_the_next_run(ran):
    """A crash after a block's frames were staged and committed, before they were moved
    into place (after the module's first run, :func:`ran`): the next run (of another
    block) completes the write before reading."""
    pipeline = ran
    tables = pipeline.tables
    frames = {f"{BLOCK_TABLE}/{name}": tables.read_partitions(f"{BLOCK_TABLE}/{name}",
                                                              ["fritz/398"])
              for name in ("jobs", "host_energy", "job_energy", "metric_stats")}
    energy = frames[f"{BLOCK_TABLE}/job_energy"]
    frames[f"{BLOCK_TABLE}/job_energy"] = energy.assign(energy_j=energy["energy_j"] * 2)
    stage(tables, BLOCK_JOURNAL, "fritz/398", frames)  # then the crash
    assert pipeline.run(["taurus/20639"]).success
    assert tables.partition_keys(BLOCK_JOURNAL) == []
    stored = tables.read_table(JOB_ENERGY_TABLE).set_index(["job", "metric"])["energy_j"]
    assert stored[("fritz/398764/1675954353", "cpu_power")] == pytest.approx(
        2 * ENERGY_J[("fritz/398764/1675954353", "cpu_power")], abs=1.0)
    assert stored[("taurus/20639587/1635856524", "cpu_power")] == pytest.approx(
        ENERGY_J[("taurus/20639587/1635856524", "cpu_power")], abs=0.5)
    # the completed block's facts are written with its tables
    facts = tables.read_table("energy_facts")
    facts = facts[facts["entity"].str.startswith("fritz/")]
    pd.testing.assert_frame_equal(
        facts.sort_values(FACT_ORDER, ignore_index=True),
        entry_table.to_microseconds(energy_facts_rows(frames[f"{BLOCK_TABLE}/job_energy"]))
        .sort_values(FACT_ORDER, ignore_index=True), check_dtype=False)
    # a completed block deleted from Dagster meanwhile is not landed
    frames[f"{BLOCK_TABLE}/job_energy"] = energy
    stage(tables, BLOCK_JOURNAL, "fritz/398", frames)
    pipeline.instance.delete_dynamic_partition(cc_job_blocks.name, "fritz/398")
    assert pipeline.run(["taurus/20639"]).success
    assert kept_tables.JOB_ENERGY.stored(tables).set_index(["job", "metric"]).loc[
        ("fritz/398764/1675954353", "cpu_power"), "energy_j"] == stored[
        ("fritz/398764/1675954353", "cpu_power")]


def test_the_first_run_over_a_rollup_stored_the_old_way_rebuilds_it(ran):
    """cc_rollup as written before it was kept (a plain file, here one day off, after the
    module's first run, :func:`ran`): the first run, over another block, rebuilds it, the
    days it does not touch too."""
    pipeline = ran
    tables = pipeline.tables
    jobs, energy = (tables.read_partitions(f"{BLOCK_TABLE}/{name}", BLOCKS)
                    for name in ("jobs", "job_energy"))
    from_scratch = rollup(jobs, energy)
    shutil.rmtree(tables.table_path("cc_rollup"))
    tables.write_table("cc_rollup", from_scratch.assign(energy_j=from_scratch["energy_j"] + 1.0))
    assert pipeline.run(["taurus/20639"]).success
    stored = kept_tables.ROLLUP.stored(tables).sort_values(ROLLUP_KEYS, ignore_index=True)
    pd.testing.assert_frame_equal(
        stored, kept_tables.ROLLUP.ready(from_scratch).sort_values(ROLLUP_KEYS,
                                                                   ignore_index=True),
        check_dtype=False)


def test_a_missing_meta_json_and_a_renamed_folder_are_named(pipeline, archive):
    write_job(archive, JobSpec(cluster="fritz", job_id=398_002, start_time=1_675_900_000))
    (archive / "fritz/398/002/1675900000/meta.json").unlink()
    write_job(archive, JobSpec(cluster="fritz", job_id=398_003, start_time=1_675_900_000))
    (archive / "fritz/398/003/1675900000").rename(archive / "fritz/398/003/1675900001")
    result = pipeline.run(["fritz/398"])
    assert not result.success
    description = _checks(result, READ_CHECK)["fritz/398"].description
    assert f"{archive}/fritz/398/002/1675900000/meta.json: missing" in description
    assert f"{archive}/fritz/398/003/1675900001/meta.json: startTime: 1675900000 " \
           "does not match" in description
    assert "2 of 4 job(s) of block fritz/398 failed, 2 done" in description
    assert sorted(pipeline.tables.read_table(JOBS_TABLE)["job"]) == FRITZ


def test_the_archive_settings_come_from_the_environment(tmp_path, monkeypatch):
    default = ClusterCockpitArchive.from_env(tmp_path)
    assert (default.archive_roots, default.quiet_period_s, default.max_jobs_per_tick,
            default.full_rescan_s, default.max_missing, default.ready_when_complete) == (
        [str(tmp_path)], 60.0, 20_000, 3600.0, 1, False)
    first, second = tmp_path / "a", tmp_path / "b"
    (second / "emmy").mkdir(parents=True)
    monkeypatch.setenv("JOULEHOUSE_CC_ARCHIVE", f"{first}:{second}")
    monkeypatch.setenv("JOULEHOUSE_QUIET_PERIOD_S", "120")
    monkeypatch.setenv("JOULEHOUSE_FULL_RESCAN_S", "none")
    monkeypatch.setenv("JOULEHOUSE_CC_MAX_JOBS_PER_TICK", "100")
    monkeypatch.setenv("JOULEHOUSE_CC_MAX_MISSING", "3")
    monkeypatch.setenv("JOULEHOUSE_CC_CHECK_SCHEMA", "false")
    monkeypatch.setenv("JOULEHOUSE_CC_READY_WHEN_COMPLETE", "1")
    source = ClusterCockpitArchive.from_env(tmp_path)
    assert (source.archive_roots, source.quiet_period_s, source.full_rescan_s,
            source.max_jobs_per_tick, source.max_missing, source.check_schema,
            source.ready_when_complete) == (
        [str(first), str(second)], 120.0, None, 100, 3, False, True)
    assert source.resolve("emmy/1403") == second.resolve()
    with pytest.raises(InputError, match="fritz/398: cluster 'fritz' must be in exactly one "
                                         "archive root"):
        source.resolve("fritz/398")
    with pytest.raises(InputError, match="fritz/398/1: not a job-id block key"):
        source.resolve("fritz/398/1")


def test_a_bad_block_key_fails_only_its_block(pipeline, archive):
    """A key whose cluster folder is gone, and a malformed one, each fail their own block
    visibly; the blocks before and after them in the run are stored and reported."""
    shutil.rmtree(archive / "emmy")
    keys = ["emmy/1403", "fritz/398", "bad-key", "taurus/20639"]
    result = pipeline.run(keys)

    assert not result.success
    assert _failure(result).startswith("2 of 4 partition(s) failed:\nemmy/1403: emmy/1403: "
                                       "cluster 'emmy' must be in exactly one archive root")
    checks = _checks(result, READ_CHECK)
    assert {key: check.passed for key, check in checks.items()} == {
        "emmy/1403": False, "fritz/398": True, "bad-key": False, "taurus/20639": True}
    assert checks["bad-key"].metadata["file"].value == "bad-key"
    assert "not a job-id block key" in checks["bad-key"].metadata["error"].value
    assert pipeline.status(cc_block_tables.key) == {
        "emmy/1403": dg.AssetPartitionStatus.FAILED,
        "fritz/398": dg.AssetPartitionStatus.MATERIALIZED,
        "bad-key": dg.AssetPartitionStatus.FAILED,
        "taurus/20639": dg.AssetPartitionStatus.MATERIALIZED}
    assert sorted(pipeline.tables.read_table(JOBS_TABLE)["job"]) == [
        *FRITZ, "taurus/20639587/1635856524"]
    assert sorted(pipeline.trials()) == [*FRITZ, "taurus/20639587/1635856524"]



def test_the_sensor_registers_blocks_asks_for_one_run_and_picks_up_new_jobs(pipeline, archive):
    settle()
    first = pipeline.tick()
    [request] = first.run_requests
    assert pipeline.partitions() == BLOCKS
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == (BLOCKS[0], BLOCKS[-1])
    landed = {event.partition: event.metadata[JOBS_METADATA].value
              for event in first.asset_events}
    assert sorted(landed["fritz/398"]) == FRITZ
    assert pipeline.launch(request).success
    assert len(pipeline.tables.read_table(JOBS_TABLE)) == 4
    assert pipeline.tick().run_requests == []

    # a job in a new block and one in an old block: one run over both blocks
    other = _other_block(archive)
    write_job(archive, JobSpec(cluster="fritz", job_id=398_001, start_time=1_675_900_000))
    assert pipeline.tick().run_requests == []  # inside their quiet period
    settle()
    [request] = pipeline.tick().run_requests
    assert pipeline.partitions() == ["emmy/1403", "taurus/20639", "fritz/398", other]
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == ("fritz/398", other)
    assert pipeline.launch(request).success
    assert len(pipeline.tables.read_table(JOBS_TABLE)) == 6


def test_the_sensor_rechecks_a_failed_job_until_fixed(pipeline, archive):
    write_job(archive, JobSpec(cluster="fritz", job_id=398_002, start_time=1_675_900_000))
    folder = archive / "fritz/398/002/1675900000"
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "startTime": 1_675_900_001}))
    settle()
    [request] = pipeline.tick().run_requests
    result = pipeline.launch(request)
    assert not result.success
    assert "startTime: 1675900001 does not match" in _checks(result, READ_CHECK)[
        "fritz/398"].description
    assert pipeline.tick().run_requests == []  # nothing changed
    (folder / "meta.json").write_text(json.dumps(meta))  # fixed in place
    settle()
    [fixed] = pipeline.tick().run_requests
    assert fixed.tags[RANGE_START] == fixed.tags[RANGE_END] == "fritz/398"
    assert pipeline.launch(fixed).success
    assert pipeline.status(cc_block_tables.key)["fritz/398"] == (
        dg.AssetPartitionStatus.MATERIALIZED)
    assert "fritz/398002/1675900000" in set(pipeline.tables.read_table(JOBS_TABLE)["job"])


def test_the_blocks_of_a_cancelled_run_are_asked_for_again(pipeline):
    settle()
    [request] = pipeline.tick().run_requests
    run = pipeline.instance.create_run_for_job(
        pipeline.defs.resolve_job_def(JOB_NAME), tags={**request.tags,
                                                       RUN_KEY_TAG: request.run_key})
    pipeline.instance.report_run_canceled(run)  # cancelled in the UI before it read anything
    assert dg.AssetPartitionStatus.FAILED not in pipeline.status(cc_block_tables.key).values()
    [again] = pipeline.tick().run_requests
    assert again.run_key != request.run_key  # the daemon never runs a run key twice
    assert (again.tags[RANGE_START], again.tags[RANGE_END]) == (BLOCKS[0], BLOCKS[-1])
    assert pipeline.launch(again).success
    assert len(pipeline.tables.read_table(JOBS_TABLE)) == 4
    assert pipeline.tick().run_requests == []


@pytest.mark.parametrize("retried", [True, False], ids=["retry cancelled", "no_retry"])
def test_a_cancel_is_undone_once_at_most(pipeline, retried):
    """A cancelled retry, or a run cancelled with the tag ``joulehouse/no_retry=true``, is
    not asked for again: its blocks wait for their jobs to change."""
    settle()
    [request] = pipeline.tick().run_requests
    no_retry = {} if retried else {NO_RETRY_TAG: "true"}
    pipeline.instance.report_run_canceled(pipeline.instance.create_run_for_job(
        pipeline.defs.resolve_job_def(JOB_NAME),
        tags={**request.tags, RUN_KEY_TAG: request.run_key, **no_retry}))
    if retried:
        [again] = pipeline.tick().run_requests
        assert again.tags[RETRY_OF_TAG] == request.run_key
        pipeline.instance.report_run_canceled(pipeline.instance.create_run_for_job(
            pipeline.defs.resolve_job_def(JOB_NAME),
            tags={**again.tags, RUN_KEY_TAG: again.run_key}))
    assert pipeline.tick().run_requests == []
    assert pipeline.tick().run_requests == []


def test_a_job_without_samples_is_stored_but_loads_no_trial(pipeline, archive):
    write_job(archive, JobSpec(cluster="fritz", job_id=398_004, start_time=1_675_900_000))
    folder = archive / "fritz/398/004/1675900000"
    (folder / "data.json").write_text("{}")  # no metric: no host to make a thread of
    result = pipeline.run(BLOCKS)
    assert not result.success
    assert _failure(result).startswith("1 of 3 partition(s) failed:\nfritz/398: ")
    assert all(check.passed for check in _checks(result, READ_CHECK).values())
    loads = _checks(result, LOADS_CHECK)
    assert not loads["fritz/398"].passed and loads["emmy/1403"].passed
    assert loads["fritz/398"].metadata["file"].value == str(folder)
    assert "no samples of any metric" in loads["fritz/398"].description
    assert "fritz/398004/1675900000" in set(pipeline.tables.read_table(JOBS_TABLE)["job"])
    assert sorted(pipeline.trials()) == sorted(  # the other jobs of the block loaded
        ["emmy/1403244/1608923076", *FRITZ, "taurus/20639587/1635856524"])
    assert pipeline.status(cc_block_tables.key)["fritz/398"] == (
        dg.AssetPartitionStatus.MATERIALIZED)


def test_with_ready_when_complete_the_sensor_hands_out_a_complete_job_inside_its_quiet_period(
        instance, archive, tmp_path):
    """With a quiet period no job gets out of in the test, the copied archive's jobs are
    handed out at the first tick, and a job whose data.json.gz lacks its end is not, until
    it is whole."""
    write_job(archive, JobSpec(cluster="fritz", job_id=398_003, start_time=1_675_900_000,
                               gzip=True))
    data = archive / "fritz/398/003/1675900000/data.json.gz"
    whole = data.read_bytes()
    data.write_bytes(whole[:len(whole) // 2])
    waiting = Pipeline(instance, archive, tmp_path, quiet_period_s=600.0)
    assert waiting.tick().run_requests == []
    pipeline = Pipeline(instance, archive, tmp_path, quiet_period_s=600.0,
                        ready_when_complete=True)
    first = pipeline.tick()
    [request] = first.run_requests
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == (BLOCKS[0], BLOCKS[-1])
    assert sorted(job for event in first.asset_events
                  for job in event.metadata[JOBS_METADATA].value) == sorted(
        ["emmy/1403244/1608923076", *FRITZ, "taurus/20639587/1635856524"])
    skipped = pipeline.tick().skip_message
    assert "1 job(s) waiting to be complete (0 quiet but incomplete" in skipped
    assert "(and 0 inside the quiet period, not asked whether complete)" in skipped
    data.write_bytes(whole)
    [whole_now] = pipeline.tick().asset_events
    assert whole_now.partition == "fritz/398"
    assert sorted(whole_now.metadata[JOBS_METADATA].value) == ["fritz/398003/1675900000"]


def test_the_cap_spreads_ready_jobs_over_ticks_and_roots(instance, archive, tmp_path):
    other = tmp_path / "other"
    write_archive_files(other, ["testcluster"])
    for job_id in (1_234_001, 1_234_002):
        write_job(other, JobSpec(job_id=job_id))
    pipeline = Pipeline(instance, archive, tmp_path)
    pipeline.source = ClusterCockpitArchive(archive_roots=[str(archive), str(other)],
                                            quiet_period_s=QUIET_S, max_jobs_per_tick=3)
    settle()
    handed = []
    for _ in range(3):
        data = pipeline.tick()
        handed.append(sorted(job for event in data.asset_events
                             for job in event.metadata[JOBS_METADATA].value))
    assert [len(jobs) for jobs in handed] == [3, 3, 0]
    assert sorted(handed[0] + handed[1]) == sorted(
        ["emmy/1403244/1608923076", *FRITZ, "taurus/20639587/1635856524",
         "testcluster/1234001/1700000000", "testcluster/1234002/1700000000"])
    assert pipeline.partitions()[-1] == "testcluster/1234"


def test_a_job_copied_with_its_mtimes_ahead_does_not_hide_the_jobs_after_it(pipeline,
                                                                            archive):
    """A job copied in with its mtimes an hour ahead (``cp -p`` from a node whose clock runs
    ahead) is quiet by its ctimes, and does not carry the scan's watermark an hour ahead:
    a job landing next in another existing block is still found at the next tick."""
    settle()
    [_] = pipeline.tick().run_requests
    assert pipeline.tick().run_requests == []
    ahead = archive / "emmy/1403/998/1608923076"
    shutil.copytree(archive / "emmy/1403/244/1608923076", ahead)
    later = time.time() + 3600
    for path in [*ahead.rglob("*"), ahead]:
        os.utime(path, (later, later))
    settle()
    [first] = pipeline.tick().run_requests
    assert first.tags[RANGE_START] == first.tags[RANGE_END] == "emmy/1403"
    write_job(archive, JobSpec(cluster="taurus", job_id=20_639_001, start_time=1_635_856_000))
    settle()
    [second] = pipeline.tick().run_requests
    assert second.tags[RANGE_START] == second.tags[RANGE_END] == "taurus/20639"


SYNTHETIC = "testcluster/1234"


def _synthetic_job(archive: Path, number: int) -> str:
    """Job ``1234000 + number`` of block testcluster/1234 (one host, 11 samples)."""
    return write_job(archive, JobSpec(job_id=1_234_000 + number, start_time=1_700_000_000,
                                      hosts=1, samples=11)).key


def _trial_names(pipeline: Pipeline) -> list[str]:
    """Every trial's name (a job key), duplicates included."""
    with TaudbDatabase(f"sqlite:///{pipeline.warehouse}/taudb.sqlite") as db:
        return sorted(trial["name"] for trial in list_trials(db))


def _read_counts(pipeline: Pipeline, result, key: str = SYNTHETIC, *, passed: bool = True
                 ) -> tuple[int, int, bool]:
    """The block's (jobs_attempted, jobs_unchanged, read_whole), as its materialization and
    its check jobs_read say them."""
    block = _latest(pipeline.instance, cc_block_tables.key, key).metadata
    check = _checks(result, READ_CHECK)[key]
    assert check.passed == passed
    names = ("jobs_attempted", "jobs_unchanged", "read_whole", "block_written")
    assert [check.metadata[name].value for name in names] == [
        block[name].value for name in names]
    return tuple(block[name].value for name in names[:3])


def _assert_same_tables(pipeline: Pipeline, scratch: Pipeline) -> None:
    """The block's frames and the tables over the blocks (cc_jobs, cc_job_energy, cc_rollup,
    energy_facts) of ``pipeline`` equal those of ``scratch``."""
    for name in ("jobs", "host_energy", "job_energy", "metric_stats", "files"):
        table = f"{BLOCK_TABLE}/{name}"
        pd.testing.assert_frame_equal(pipeline.tables.read_partitions(table, [SYNTHETIC]),
                                      scratch.tables.read_partitions(table, [SYNTHETIC]),
                                      obj=name)
    for table, by in ((JOBS_TABLE, ["job"]), (JOB_ENERGY_TABLE, ["job", "metric"]),
                      (ROLLUP_TABLE, ROLLUP_KEYS), ("energy_facts", FACT_ORDER)):
        pd.testing.assert_frame_equal(
            pipeline.tables.read_table(table).sort_values(by, ignore_index=True),
            scratch.tables.read_table(table).sort_values(by, ignore_index=True), obj=table)


def test_a_landing_reads_only_the_new_and_changed_jobs_of_its_block(instance, tmp_path):
    """Two runs over a block with jobs added (and one rewritten) between them: the second
    reads those alone, says so (metadata, check), stores what a run from scratch stores in
    every table, and leaves one trial per job, the unchanged jobs' kept; the weekly
    re-validation's run and an operator's, tagged joulehouse/reread=all, read every job
    again."""
    archive = tmp_path / "synthetic"
    write_archive_files(archive, ["testcluster"])
    for number in (0, 2, 4, 6):
        _synthetic_job(archive, number)
    pipeline = Pipeline(instance, archive, tmp_path / "incremental")
    result = pipeline.run([SYNTHETIC])
    assert result.success and _read_counts(pipeline, result) == (4, 0, True)
    first = pipeline.trials()

    new = [_synthetic_job(archive, number) for number in (1, 9)]
    meta = archive / "testcluster/1234/002/1700000000/meta.json"
    meta.write_text(meta.read_text())  # tags rewritten: read again
    result = pipeline.run([SYNTHETIC])
    assert result.success and _read_counts(pipeline, result) == (3, 3, False)
    block = _latest(pipeline.instance, cc_block_tables.key, SYNTHETIC).metadata
    assert block["jobs"].value == 6
    conformance = _checks(result, CONFORMANCE_CHECK)[SYNTHETIC]
    assert conformance.metadata["jobs_read"].value == 3
    assert conformance.metadata["jobs_unchanged"].value == 3
    second = pipeline.trials()
    assert _trial_names(pipeline) == sorted(second) == sorted(
        [*first, *new])  # one trial per job: none lost, no duplicate
    rewritten = "testcluster/1234002/1700000000"
    assert {job for job in first if second[job] != first[job]} == {rewritten}

    scratch = Pipeline(instance, archive, tmp_path / "scratch")
    from_scratch = scratch.run([SYNTHETIC])
    assert from_scratch.success
    _assert_same_tables(pipeline, scratch)
    assert _checks(from_scratch, CONFORMANCE_CHECK)[SYNTHETIC].metadata["jobs"].value == (
        conformance.metadata["jobs"].value)  # the unchanged jobs' violations kept

    schedule = pipeline.defs.resolve_schedule_def("weekly_revalidation_cc_job_blocks")
    with dg.build_schedule_context(instance=instance) as context:
        [weekly] = schedule.evaluate_tick(context).run_requests
    assert weekly.tags[REREAD_TAG] == REREAD_ALL
    for request in (weekly, dg.RunRequest(tags={  # the weekly re-validation; an operator's
            RANGE_START: SYNTHETIC, RANGE_END: SYNTHETIC, REREAD_TAG: REREAD_ALL})):
        reread = pipeline.launch(request)
        assert reread.success and _read_counts(pipeline, reread) == (6, 0, True)
        assert pipeline.trials() == second  # nothing changed: the trials kept
        _assert_same_tables(pipeline, scratch)


def test_an_unchanged_job_without_its_trial_is_loaded(instance, tmp_path):
    """The block's tables stored in a run without the trials: the next run, which reads
    only a new job, loads the trials of the unchanged jobs too (read for them alone)."""
    archive = tmp_path / "synthetic"
    write_archive_files(archive, ["testcluster"])
    jobs = [_synthetic_job(archive, number) for number in (0, 2)]
    pipeline = Pipeline(instance, archive, tmp_path)
    pipeline.instance.add_dynamic_partitions(cc_job_blocks.name, [SYNTHETIC])
    tags = {RANGE_START: SYNTHETIC, RANGE_END: SYNTHETIC}
    assert pipeline.launch(dg.RunRequest(tags=tags, asset_selection=[cc_block_tables.key])
                           ).success
    assert _trial_names(pipeline) == []
    jobs.append(_synthetic_job(archive, 5))
    result = pipeline.run([SYNTHETIC])
    assert result.success and _read_counts(pipeline, result) == (1, 2, False)
    assert _trial_names(pipeline) == sorted(jobs)
    assert _checks(result, LOADS_CHECK)[SYNTHETIC].passed


def _left_out(pipeline: Pipeline, key: str) -> list:
    return stored_left_out(pipeline.tables, "clustercockpit", "read", key)


def test_a_run_cut_off_after_the_block_write_loses_no_left_out_record(instance, tmp_path,
                                                                      monkeypatch):
    """The block's frames and fingerprints are written, then the run ends before the
    left-out records are (a crash, a failing write): the next run finds every job unchanged
    and still stores the records a whole read gives (derived from the stored energy rows),
    and its check says them (WARN)."""
    job = archive_with_a_missing_host(tmp_path / "archive")
    pipeline = Pipeline(instance, tmp_path / "archive", tmp_path / "cut")

    def cut_off(*args, **kwargs):
        raise dg.Failure("cut off after the block's write", allow_retries=False)

    monkeypatch.setattr(cc_assets, "store_left_out", cut_off)
    assert not pipeline.run(["emmy/1403"]).success
    assert pipeline.tables.has_partition(f"{BLOCK_TABLE}/files", "emmy/1403")  # written
    assert _left_out(pipeline, "emmy/1403") == []
    monkeypatch.undo()

    result = pipeline.run(["emmy/1403"])
    assert result.success
    assert _read_counts(pipeline, result, "emmy/1403", passed=False) == (0, 1, False)
    check = _checks(result, READ_CHECK)["emmy/1403"]
    assert check.severity == dg.AssetCheckSeverity.WARN
    assert [(record.input, record.part) for record in _left_out(pipeline, "emmy/1403")] == [
        (str(job), MISSING_HOST_PART)]
    scratch = Pipeline(instance, tmp_path / "archive", tmp_path / "scratch")
    assert scratch.run(["emmy/1403"]).success
    assert _left_out(pipeline, "emmy/1403") == _left_out(scratch, "emmy/1403")


def test_a_rerun_that_changes_nothing_writes_nothing_once_the_block_is_landed(
        synthetic, tmp_path, monkeypatch):
    """Nothing read, nothing failed, nothing removed: the block's frames, its left-out
    records and the tables over the blocks are not written again (a stat pass and a read),
    its check still says what it leaves out. A run cut off after the block's write, before
    its jobs were landed in the tables, is not taken for one: the next run lands them."""
    pipeline, archive = synthetic, synthetic.archive
    landed = pipeline.tables.partition_path(LANDED_TABLE, SYNTHETIC)
    frames = [pipeline.tables.partition_path(f"{BLOCK_TABLE}/{name}", SYNTHETIC)
              for name in ("jobs", "files", "metric_stats")]

    def stamps() -> list[int]:
        return [os.stat(path).st_mtime_ns for path in [*frames, landed]]

    before, jobs_before = stamps(), _latest(pipeline.instance, cc_jobs.key)
    result = pipeline.run([SYNTHETIC])
    assert result.success and _read_counts(pipeline, result) == (0, 2, False)
    assert _latest(pipeline.instance, cc_block_tables.key, SYNTHETIC).metadata[
        "block_written"].value is False
    assert stamps() == before  # nothing written
    assert _latest(pipeline.instance, cc_jobs.key) == jobs_before  # not landed again

    new = _synthetic_job(archive, 5)

    def cut_off(*args, **kwargs):
        raise dg.Failure("cut off before the landing", allow_retries=False)

    monkeypatch.setattr(cc_assets.kept_tables, "land", cut_off)
    assert not pipeline.run([SYNTHETIC]).success  # the block written, its jobs not landed
    monkeypatch.undo()
    assert new not in set(pipeline.tables.read_table(JOBS_TABLE)["job"])
    result = pipeline.run([SYNTHETIC])
    assert result.success and _read_counts(pipeline, result) == (0, 3, False)
    assert new in set(pipeline.tables.read_table(JOBS_TABLE)["job"])  # landed now
    scratch = Pipeline(pipeline.instance, archive, tmp_path / "scratch")
    assert scratch.run([SYNTHETIC]).success
    _assert_same_tables(pipeline, scratch)


def _energy_of(pipeline: Pipeline) -> tuple[pd.Series, pd.Series]:
    """The energy per job and metric of block SYNTHETIC as stored (its frame) and as
    landed (cc_job_energy)."""
    frame = pipeline.tables.read_partitions(f"{BLOCK_TABLE}/job_energy", [SYNTHETIC])
    table = pipeline.tables.read_table(JOB_ENERGY_TABLE)
    return tuple(rows.set_index(["job", "metric"])["energy_j"].sort_index()
                 for rows in (frame, table))


def _doubled(monkeypatch) -> None:
    """What a read gives changes without any fingerprint changing (a new numpy or pandas
    without a READER_VERSION bump, a file rewritten keeping its size and mtime): the
    energies read doubled."""
    read = blocks.measure_job

    def doubled(*args, **kwargs):
        measured = read(*args, **kwargs)
        return replace(measured, **{name: getattr(measured, name).assign(
            energy_j=getattr(measured, name)["energy_j"] * 2)
            for name in ("job_energy", "host_energy")})

    monkeypatch.setattr(blocks, "measure_job", doubled)


def _synthetic_in(instance, root: Path) -> Pipeline:
    """:func:`synthetic`'s pipeline over the archive ``root / "synthetic"``."""
    return Pipeline(instance, root / "synthetic", root / "warehouse")


@pytest.fixture(scope="module")
def synthetic_once(tmp_path_factory) -> Saved:
    """Block SYNTHETIC (two jobs) stored and landed by one run: once per module."""
    base = tmp_path_factory.mktemp("synthetic")
    with instance_in(Saved.storage(base)) as instance:
        write_archive_files(base / "root" / "synthetic", ["testcluster"])
        pipeline = _synthetic_in(instance, base / "root")
        for number in (0, 2):
            _synthetic_job(pipeline.archive, number)
        assert pipeline.run([SYNTHETIC]).success
        assert pipeline.tables.has_partition(LANDED_TABLE, SYNTHETIC)
    return Saved.save(base, None)


@pytest.fixture
def synthetic(synthetic_once: Saved, tmp_path) -> Iterator[Pipeline]:
    """A pipeline whose block SYNTHETIC (two jobs) is stored and landed
    (:func:`synthetic_once`, put back for this test; its archive ``synthetic.archive``)."""
    with synthetic_once.restored_source(tmp_path, _synthetic_in) as pipeline:
        yield pipeline


SYNTHETIC_TAGS = {RANGE_START: SYNTHETIC, RANGE_END: SYNTHETIC}


def test_a_block_rewritten_with_other_rows_and_not_landed_is_landed_by_its_next_run(
        synthetic, monkeypatch):
    """A re-read (joulehouse/reread=all) rewrites the block's frames with other rows but
    the same fingerprints, so the same ``files`` digest, in a run that does not land them
    (cc_block_tables alone): the write dropped the block's landed mark, and the next run,
    with nothing changed, lands it."""
    pipeline = synthetic
    _doubled(monkeypatch)
    assert pipeline.launch(dg.RunRequest(tags={**SYNTHETIC_TAGS, REREAD_TAG: REREAD_ALL},
                                         asset_selection=[cc_block_tables.key])).success
    monkeypatch.undo()
    frame, table = _energy_of(pipeline)
    assert (frame == 2 * table).all()  # written, not landed
    assert not pipeline.tables.has_partition(LANDED_TABLE, SYNTHETIC)
    result = pipeline.run([SYNTHETIC])
    assert result.success and _read_counts(pipeline, result) == (0, 2, False)
    frame, table = _energy_of(pipeline)
    pd.testing.assert_series_equal(frame, table)
    assert pipeline.tables.has_partition(LANDED_TABLE, SYNTHETIC)


def test_a_block_write_completed_in_a_run_without_the_tables_is_landed_by_the_next(
        synthetic):
    """A block write with other rows (same fingerprints) staged and committed, then the
    crash; a run selecting only the trials completes it, landing nothing: the completion
    drops the block's landed mark, and the next run, with nothing changed, lands it."""
    pipeline = synthetic
    tables = pipeline.tables
    frames = {f"{BLOCK_TABLE}/{name}": tables.read_partitions(f"{BLOCK_TABLE}/{name}",
                                                              [SYNTHETIC])
              for name in ("jobs", "host_energy", "job_energy", "metric_stats", "files")}
    energy = frames[f"{BLOCK_TABLE}/job_energy"]
    frames[f"{BLOCK_TABLE}/job_energy"] = energy.assign(energy_j=energy["energy_j"] * 2)
    stage(tables, BLOCK_JOURNAL, SYNTHETIC, frames)  # then the crash
    assert pipeline.launch(dg.RunRequest(tags=SYNTHETIC_TAGS,
                                         asset_selection=[cc_job_trials.key])).success
    assert tables.partition_keys(BLOCK_JOURNAL) == []  # completed
    frame, table = _energy_of(pipeline)
    assert (frame == 2 * table).all()  # not landed
    result = pipeline.run([SYNTHETIC])
    assert result.success and _read_counts(pipeline, result) == (0, 2, False)
    frame, table = _energy_of(pipeline)
    pd.testing.assert_series_equal(frame, table)


def test_a_block_dropped_by_a_rebuild_and_registered_again_is_landed(synthetic):
    """A block deleted from Dagster (or moved: deleted, then registered again) while the
    tables are rebuilt (no partition) leaves them; registered again, its next run lands
    it, although nothing of it changed."""
    pipeline = synthetic
    other = write_job(pipeline.archive, JobSpec(
        job_id=1_235_000, start_time=1_700_000_000, hosts=1, samples=11)).key
    assert pipeline.run(["testcluster/1235"]).success
    pipeline.instance.delete_dynamic_partition(cc_job_blocks.name, SYNTHETIC)
    alone = [cc_jobs.key, cc_job_energy.key, cc_rollup.key]
    assert dg.materialize([pipeline.defs.resolve_assets_def(cc_jobs.key)], selection=alone,
                          instance=pipeline.instance).success
    assert set(pipeline.tables.read_table(JOBS_TABLE)["job"]) == {other}
    assert pipeline.tables.partition_keys(LANDED_TABLE) == ["testcluster/1235"]
    result = pipeline.run([SYNTHETIC])  # registered again
    assert result.success and _read_counts(pipeline, result) == (0, 2, False)
    assert len(set(pipeline.tables.read_table(JOBS_TABLE)["job"])) == 3
    frame, table = _energy_of(pipeline)
    pd.testing.assert_series_equal(frame, table.loc[frame.index])


def test_a_job_without_a_trial_fingerprint_is_loaded_at_every_run(synthetic, monkeypatch):
    """A job whose folder cannot be listed (mode --x: its files read by name) has no
    fingerprint: its trial is loaded by every run of its block, never taken for
    unchanged; the other jobs' trials are kept."""
    pipeline = synthetic
    unlisted = "testcluster/1234000/1700000000"
    scan = blocks._fingerprints
    monkeypatch.setattr(blocks, "_fingerprints",
                        lambda ref, inputs: None if ref.key == unlisted else scan(ref, inputs))
    first = pipeline.run([SYNTHETIC])
    assert first.success and _checks(first, LOADS_CHECK)[SYNTHETIC].passed
    loaded = pipeline.trials()
    second = pipeline.run([SYNTHETIC])
    assert second.success and _checks(second, LOADS_CHECK)[SYNTHETIC].passed
    again = pipeline.trials()
    assert {job for job in again if again[job] != loaded[job]} == {unlisted}
    assert _trial_names(pipeline) == sorted(loaded)  # one trial per job
