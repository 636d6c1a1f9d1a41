"""The instance storages of deploy/ (resources/instance_storage.py) leave, from one batch
of asset events, what Dagster's own storages leave from the same events stored one by
one: the same event rows, asset rows, tags, partition statuses and check executions."""

import inspect
import os
import re
import sqlite3
import threading
import time
import uuid
from urllib.parse import urlparse

import dagster as dg
import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluation,
    AssetCheckEvaluationPlanned,
)
from dagster._core.definitions.partitions.subset.default import DefaultPartitionsSubset
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.event_api import EventLogEntry
from dagster._core.events import (
    AssetMaterializationPlannedData,
    AssetObservationData,
    DagsterEvent,
    DagsterEventType,
    StepMaterializationData,
)
from dagster._core.remote_origin import (
    RegisteredCodeLocationOrigin,
    RemoteInstigatorOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.scheduler.instigation import (
    InstigatorState,
    InstigatorStatus,
    SensorInstigatorData,
)
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage
from dagster._record import copy
from dagster_postgres import DagsterPostgresStorage

from resources import instance_storage
from resources.instance_storage import (
    SQLITE_CHUNK,
    BatchedPostgresEventLogStorage,
    BatchedSqliteEventLogStorage,
    BatchingPostgresStorage,
    BatchingSqliteStorage,
)
from tests.conftest import skip_or_fail
from tests.dagster_sqlite import empty_storage
from tests.postgres_server import missing_requirement, postgres_server

RUN = "f5b1c0de-0000-4000-8000-000000000001"
PARTITIONS = [f"lab/power-limit/bert/150W/{i}" for i in range(5)]
FRAMES = dg.AssetKey("gpu_validated_frames")
ENERGY = dg.AssetKey("gpu_repetition_energy")
TABLE = dg.AssetKey("gpu_setting_energy")
CHECK = dg.AssetCheckKey(FRAMES, "pandera_valid")
VERSION = "dagster/data_version"


def entry(event: DagsterEvent, run_id: str = RUN) -> EventLogEntry:
    return EventLogEntry(user_message="", level=10, job_name="gpu_energy_job", run_id=run_id,
                         error_info=None, timestamp=time.time(), step_key="gpu_pipeline",
                         dagster_event=event)


def planned(asset: dg.AssetKey, partition: str | None) -> EventLogEntry:
    return entry(DagsterEvent.build_asset_materialization_planned_event(
        "gpu_energy_job", "gpu_pipeline", AssetMaterializationPlannedData(asset, partition)))


def materialized(asset: dg.AssetKey, partition: str | None, version: str) -> EventLogEntry:
    return entry(DagsterEvent(
        DagsterEventType.ASSET_MATERIALIZATION.value, "gpu_energy_job", step_key="gpu_pipeline",
        event_specific_data=StepMaterializationData(dg.AssetMaterialization(
            asset, partition=partition, tags={VERSION: version}))))


def observed(asset: dg.AssetKey) -> EventLogEntry:
    return entry(DagsterEvent(
        DagsterEventType.ASSET_OBSERVATION.value, "gpu_energy_job", step_key="gpu_pipeline",
        event_specific_data=AssetObservationData(dg.AssetObservation(asset))))


def check_planned() -> EventLogEntry:
    return entry(DagsterEvent(
        DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED.value, "gpu_energy_job",
        step_key="gpu_pipeline", event_specific_data=AssetCheckEvaluationPlanned(
            asset_key=FRAMES, check_name=CHECK.name,
            partitions_subset=DefaultPartitionsSubset(set(PARTITIONS)))))


def check_evaluated(partition: str, passed: bool) -> EventLogEntry:
    return entry(DagsterEvent(
        DagsterEventType.ASSET_CHECK_EVALUATION.value, "gpu_energy_job",
        step_key="gpu_pipeline", event_specific_data=AssetCheckEvaluation(
            asset_key=FRAMES, check_name=CHECK.name, passed=passed, partition=partition,
            metadata={})))


def run_events() -> list[EventLogEntry]:
    """A run's planned events as Dagster writes them (both per-repetition assets per
    partition, the table, the check over the range), then what its step stores: the
    frames of all but the last partition (twice for the first), and an observation."""
    return [*(planned(asset, key) for asset in (ENERGY, FRAMES) for key in PARTITIONS),
            planned(TABLE, None), check_planned(),
            materialized(FRAMES, PARTITIONS[0], "a"),
            *(materialized(FRAMES, key, "b") for key in PARTITIONS[:4]),
            observed(TABLE)]


def summary(storage) -> dict:
    """What the UI and the sensors read back from the event log."""
    events = storage.event_log_storage
    records = events.get_records_for_run(RUN, limit=1000).records
    entries = {record.asset_entry.asset_key: record.asset_entry
               for record in events.get_asset_records([FRAMES, ENERGY, TABLE])}
    return {
        "rows": [(r.event_log_entry.dagster_event_type, r.event_log_entry.dagster_event.asset_key,
                  r.event_log_entry.dagster_event.partition) for r in records],
        "materialized": {asset: events.get_materialized_partitions(asset)
                         for asset in (FRAMES, ENERGY)},
        "planned, not materialized": {
            asset: sorted(events.get_latest_asset_partition_materialization_attempts_without_materializations(asset))
            for asset in (FRAMES, ENERGY)},
        "versions": events.get_latest_tags_by_partition(
            FRAMES, DagsterEventType.ASSET_MATERIALIZATION, [VERSION]),
        "last materialization": {
            asset: (entry.last_materialization.asset_materialization.partition
                    if entry.last_materialization else None, entry.last_run_id)
            for asset, entry in entries.items()},
        "observations": [record.partition_key for record in
                         events.fetch_observations(TABLE, limit=10).records],
        "materialization records": len(events.fetch_materializations(FRAMES, limit=100).records),
        "check executions": sorted(
            (record.partition, record.status, record.event.dagster_event_type,
             record.event.run_id) for record in
            events.get_asset_check_execution_history(CHECK, limit=100)),
    }


def expected() -> dict:
    """The summary of :func:`run_events`, stored by either storage."""
    return {
        "materialized": {FRAMES: set(PARTITIONS[:4]), ENERGY: set()},
        "planned, not materialized": {FRAMES: [PARTITIONS[4]], ENERGY: sorted(PARTITIONS)},
        "versions": {key: {VERSION: "b"} for key in PARTITIONS[:4]},
        "last materialization": {FRAMES: (PARTITIONS[3], RUN), ENERGY: (None, RUN),
                                 TABLE: (None, RUN)},
        "observations": [None],
        "materialization records": 5,
        "check executions": sorted(
            (key, AssetCheckExecutionRecordStatus.PLANNED,
             DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED, RUN) for key in PARTITIONS),
    }


def assert_same_as_one_by_one(dagster_storage, batching_storage, events) -> None:
    for event in events:
        dagster_storage.event_log_storage.store_event(event)
    batching_storage.event_log_storage.store_event_batch(events)
    one_by_one, batched = summary(dagster_storage), summary(batching_storage)
    assert batched == one_by_one
    assert [row[0] for row in batched.pop("rows")] == [e.dagster_event_type for e in events]
    assert batched == expected()


def test_sqlite_batch_leaves_what_single_events_leave(tmp_path):
    dagster_storage = DagsterSqliteStorage.from_local(empty_storage(tmp_path / "dagster"))
    batching_storage = BatchingSqliteStorage.from_local(empty_storage(tmp_path / "batching"))
    assert type(batching_storage.event_log_storage).__name__ == "BatchedSqliteEventLogStorage"
    assert_same_as_one_by_one(dagster_storage, batching_storage, run_events())


def test_sqlite_batch_over_several_chunks(tmp_path, monkeypatch):
    """A batch longer than a transaction's share: cut into chunks, same outcome."""
    monkeypatch.setattr("resources.instance_storage.SQLITE_CHUNK", 4)
    events = run_events()
    assert len(events) > 4 * 3 and SQLITE_CHUNK == 1000
    dagster_storage = DagsterSqliteStorage.from_local(empty_storage(tmp_path / "dagster"))
    batching_storage = BatchingSqliteStorage.from_local(empty_storage(tmp_path / "batching"))
    assert_same_as_one_by_one(dagster_storage, batching_storage, events)


def planned_check_rows(storage) -> dict[str, EventLogEntry]:
    """Each partition's planned check row, read back as the UI reads it: its event. The
    table holds those rows and no other."""
    records = storage.event_log_storage.get_asset_check_execution_history(CHECK, limit=100)
    with storage.event_log_storage.index_connection() as conn:
        stored = conn.execute(sa.select(sa.func.count()).select_from(
            AssetCheckExecutionsTable)).scalar_one()
    assert stored == len(records)
    rows = {record.partition: record.event for record in records}
    assert len(rows) == len(records)
    return rows


def test_planned_check_rows_carry_their_own_partition(tmp_path):
    dagster_storage = DagsterSqliteStorage.from_local(empty_storage(tmp_path / "dagster"))
    batching_storage = BatchingSqliteStorage.from_local(empty_storage(tmp_path / "batching"))
    assert_planned_rows_narrowed(dagster_storage, batching_storage)


def assert_planned_rows_narrowed(dagster_storage, batching) -> None:
    """Each row of a planned check keeps the event narrowed to its own partition (Dagster
    stores the run's whole subset in every row: quadratic in a run's partitions); the
    event is otherwise Dagster's, and the run's log keeps the whole subset."""
    events = run_events()
    for event in events:
        dagster_storage.event_log_storage.store_event(event)
    batching.event_log_storage.store_event_batch(events)
    theirs, ours = planned_check_rows(dagster_storage), planned_check_rows(batching)
    assert sorted(ours) == sorted(theirs) == PARTITIONS
    whole = check_planned().dagster_event.event_specific_data.partitions_subset
    for key in PARTITIONS:
        planned = ours[key].dagster_event.event_specific_data
        assert set(planned.partitions_subset.get_partition_keys()) == {key}
        assert theirs[key].dagster_event.event_specific_data.partitions_subset == whole
        assert ours[key]._replace(dagster_event=ours[key].dagster_event._replace(
            event_specific_data=copy(planned, partitions_subset=whole))) == theirs[key]
    logged = [record.event_log_entry for record in
              batching.event_log_storage.get_records_for_run(RUN, limit=1000).records
              if record.event_log_entry.dagster_event_type
              == DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED]
    assert [e.dagster_event.event_specific_data.partitions_subset for e in logged] == [whole]


@pytest.mark.parametrize("subset", [None, DefaultPartitionsSubset(set())],
                         ids=["unpartitioned", "empty subset"])
def test_planned_check_without_partitions_keeps_its_event(tmp_path, subset):
    """One row, no partition, the event as it is: what Dagster's own storage leaves."""
    event = entry(check_planned().dagster_event._replace(event_specific_data=copy(
        check_planned().dagster_event.event_specific_data, partitions_subset=subset)))
    dagster_storage = DagsterSqliteStorage.from_local(empty_storage(tmp_path / "dagster"))
    batching = BatchingSqliteStorage.from_local(empty_storage(tmp_path / "batching"))
    dagster_storage.event_log_storage.store_event(event)
    batching.event_log_storage.store_event_batch([event])
    assert planned_check_rows(batching) == planned_check_rows(dagster_storage) == {None: event}


def database(url: str, name: str) -> str:
    """A new database beside ``url``'s, as a psycopg2 URL."""
    server = urlparse(url)._replace(scheme="postgresql+psycopg2")
    engine = sa.create_engine(server.geturl(), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return server._replace(path=f"/{name}").geturl()


def test_postgres_planned_check_rows_carry_their_own_partition(postgres_url):
    dagster_storage = DagsterPostgresStorage(database(postgres_url, "planned_dagster"))
    batching_storage = BatchingPostgresStorage(database(postgres_url, "planned_batching"))
    try:
        assert_planned_rows_narrowed(dagster_storage, batching_storage)
    finally:
        dagster_storage.event_log_storage.dispose()
        batching_storage.event_log_storage.dispose()


def test_postgres_batch_leaves_what_single_events_leave(postgres_url):
    dagster_storage = DagsterPostgresStorage(database(postgres_url, "storage_dagster"))
    batching_storage = BatchingPostgresStorage(database(postgres_url, "storage_batching"))
    try:
        assert type(batching_storage.event_log_storage).__name__ == (
            "BatchedPostgresEventLogStorage")
        assert_same_as_one_by_one(dagster_storage, batching_storage, run_events())
    finally:
        dagster_storage.event_log_storage.dispose()
        batching_storage.event_log_storage.dispose()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_instances_load_the_batching_storages(kind, tmp_path, request):
    """``storage: custom`` as deploy/'s dagster.yaml files write it."""
    if kind == "sqlite":
        config = {"module": "resources.instance_storage", "class": "BatchingSqliteStorage",
                  "config": {"base_dir": str(tmp_path)}}
    else:
        url = urlparse(database(request.getfixturevalue("postgres_url"), "storage_config"))
        config = {"module": "resources.instance_storage", "class": "BatchingPostgresStorage",
                  "config": {"postgres_db": {
                      "hostname": url.hostname, "port": url.port, "db_name": url.path[1:],
                      "username": url.username, "password": "",
                      "scheme": "postgresql+psycopg2"}}}
    with dg.instance_for_test(temp_dir=str(tmp_path),
                              overrides={"storage": {"custom": config}}) as instance:
        assert type(instance.event_log_storage).__name__.startswith("Batched")
        instance.event_log_storage.store_event_batch(run_events())
        assert instance.get_materialized_partitions(FRAMES) == set(PARTITIONS[:4])


@pytest.mark.parametrize("again", [False, True], ids=["created", "opened-again"])
def test_sqlite_storage_sets_what_dagsters_own_storage_sets(tmp_path, again):
    """BatchingSqliteStorage builds its storages itself, in place of DagsterSqliteStorage's
    __init__ (private API): each attribute Dagster's own sets, ours sets too, to a storage
    of the same kind on the same folder, created or opened again without alembic's checks;
    an upgrade of Dagster that adds one fails here, not in production."""
    if again:
        BatchingSqliteStorage(str(tmp_path / "ours")).dispose()
        DagsterSqliteStorage.from_local(str(tmp_path / "theirs")).dispose()
    ours = BatchingSqliteStorage(str(tmp_path / "ours"))
    theirs = DagsterSqliteStorage.from_local(str(tmp_path / "theirs"))
    try:
        assert set(vars(ours)) == set(vars(theirs))
        for name, value in vars(theirs).items():
            assert isinstance(getattr(ours, name), type(value)), name
        assert ours.run_storage.alembic_version() == theirs.run_storage.alembic_version()
        assert (ours.schedule_storage.alembic_version()
                == theirs.schedule_storage.alembic_version())
    finally:
        ours.dispose()
        theirs.dispose()


def test_sqlite_storage_opened_again_asks_alembic_nothing(tmp_path, monkeypatch):
    """The SQLite storage opened again on its databases (by another instance of the process:
    a sensor's tick, a run) opens those at Dagster's head revision without asking alembic for
    that head (found once per process: alembic reads every migration script to tell), and
    reads and writes what the first one left."""
    first = BatchingSqliteStorage(str(tmp_path))
    first.event_log_storage.store_event_batch(run_events())
    first.dispose()
    head = instance_storage._alembic_head()
    lookups = []
    looked_up = ScriptDirectory.as_revision_number
    monkeypatch.setattr(ScriptDirectory, "as_revision_number",
                        lambda self, *args: lookups.append(args) or looked_up(self, *args))
    config = {"module": "resources.instance_storage", "class": "BatchingSqliteStorage",
              "config": {"base_dir": str(tmp_path)}}
    with dg.instance_for_test(temp_dir=str(tmp_path),
                              overrides={"storage": {"custom": config}}) as instance:
        assert instance.get_materialized_partitions(FRAMES) == set(PARTITIONS[:4])
        assert instance.get_runs_count() == 0 and instance.all_instigator_state() == []
        instance.event_log_storage.store_event_batch(run_events())
        assert instance.run_storage.alembic_version() == (head, head)
        assert instance.schedule_storage.alembic_version() == (head, head)
    assert lookups == [("head",)] * 2  # the two alembic_version() above, Dagster's own


def test_sqlite_index_connection_is_kept_and_other_processes_see_each_commit(tmp_path):
    """One engine of the index shard per process, across events; what it commits is seen
    at once by another storage on the same files (Dagster's own, as another process's
    webserver or daemon has), and a forked child stores through its own connection."""
    base = empty_storage(tmp_path / "home")
    writer = BatchingSqliteStorage.from_local(base).event_log_storage
    reader = DagsterSqliteStorage.from_local(base).event_log_storage
    events = run_events()
    writer.store_event(events[0])
    engine = writer._index_engine()
    for event in events[1:10]:
        writer.store_event(event)
    assert writer._index_engine() is engine
    assert sorted(reader.get_latest_asset_partition_materialization_attempts_without_materializations(
        ENERGY)) == sorted(PARTITIONS)
    child = os.fork()
    if child == 0:  # the child writes the frames' materializations, then leaves at once
        status = 1
        try:
            writer.store_event_batch(events[10:])
            status = 0
        finally:
            os._exit(status)
    assert os.waitpid(child, 0)[1] == 0
    writer.store_event(planned(TABLE, None))
    assert writer._index_engine() is engine
    assert reader.get_materialized_partitions(FRAMES) == set(PARTITIONS[:4])
    assert len(reader.get_records_for_run(RUN, limit=1000).records) == len(events) + 1


def test_postgres_pool_outlives_a_server_restart():
    """The kept connections are checked before use: after PostgreSQL restarts, the next
    events are stored on new ones, not lost on dead ones."""
    if reason := missing_requirement():
        skip_or_fail(reason)
    with postgres_server() as server:
        url = server.create_database("restart").replace("postgresql://", "postgresql+psycopg2://")
        storage = BatchingPostgresStorage(url)
        events = run_events()
        try:
            storage.event_log_storage.store_event_batch(events[:10])
            server.stop("immediate")
            server.start()
            storage.event_log_storage.store_event_batch(events[10:])
            assert summary(storage)["materialized"][FRAMES] == set(PARTITIONS[:4])
        finally:
            storage.event_log_storage.dispose()


def fail_once(monkeypatch, storage_class, method: str) -> list:
    """Make ``storage_class.method`` raise the first time it is called; the calls made."""
    original, calls = getattr(storage_class, method), []

    def flaky(self, *args, **kwargs):
        calls.append(method)
        if len(calls) == 1:
            raise OSError("disk I/O error")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(storage_class, method, flaky)
    return calls


def test_sqlite_index_failure_after_the_run_shard_stores_nothing_twice(tmp_path, monkeypatch):
    """The run shard holds the batch when its index write fails: the index writes are made
    event by event, nothing is raised (Dagster would store the whole batch again)."""
    calls = fail_once(monkeypatch, BatchedSqliteEventLogStorage, "_store_asset_event_tags")
    dagster_storage = DagsterSqliteStorage.from_local(empty_storage(tmp_path / "dagster"))
    batching_storage = BatchingSqliteStorage.from_local(empty_storage(tmp_path / "batching"))
    assert_same_as_one_by_one(dagster_storage, batching_storage, run_events())
    assert len(calls) > 1


def flaky_run_shard(monkeypatch, failing_call: int) -> list:
    """Make the SQLite storage's run-shard transaction fail at its ``failing_call``-th
    beginning (0-based), and only then; the runs of the transactions begun."""
    original, calls = BatchedSqliteEventLogStorage._run_shard, []

    def flaky(self, run_id):
        calls.append(run_id)
        if len(calls) - 1 == failing_call:
            raise OSError("database is locked")
        return original(self, run_id)

    monkeypatch.setattr(BatchedSqliteEventLogStorage, "_run_shard", flaky)
    return calls


@pytest.mark.parametrize("failing_chunk", [0, 2])
def test_sqlite_run_shard_failure_stores_each_event_once(tmp_path, monkeypatch, failing_chunk):
    """A chunk whose run-shard write fails: the first raises with nothing stored (Dagster
    then stores the batch one by one); a later one leaves the rest to Dagster's own
    store_event, the chunks before it stored once."""
    monkeypatch.setattr("resources.instance_storage.SQLITE_CHUNK", 4)
    events = run_events()
    batching_storage = BatchingSqliteStorage.from_local(empty_storage(tmp_path / "batching"))
    flaky_run_shard(monkeypatch, failing_chunk)
    if failing_chunk == 0:
        with pytest.raises(OSError, match="database is locked"):
            batching_storage.event_log_storage.store_event_batch(events)
        assert batching_storage.event_log_storage.get_records_for_run(RUN).records == []
        return
    batching_storage.event_log_storage.store_event_batch(events)
    one_by_one = DagsterSqliteStorage.from_local(empty_storage(tmp_path / "dagster"))
    for event in events:
        one_by_one.event_log_storage.store_event(event)
    assert summary(batching_storage) == summary(one_by_one)


def test_sqlite_failing_fallback_is_logged_never_raised(tmp_path, monkeypatch, caplog):
    """Once part of a batch is stored, a fallback that fails too is logged, not raised:
    raised, Dagster would store the whole batch again (a planned check's rows twice fail
    every evaluation of its run)."""
    monkeypatch.setattr("resources.instance_storage.SQLITE_CHUNK", 4)
    events = run_events()
    batching_storage = BatchingSqliteStorage.from_local(empty_storage(tmp_path / "batching"))
    flaky_run_shard(monkeypatch, 2)

    def broken(self, event):
        raise OSError("disk full")

    monkeypatch.setattr(SqliteEventLogStorage, "store_event", broken)
    batching_storage.event_log_storage.store_event_batch(events)
    stored = batching_storage.event_log_storage.get_records_for_run(RUN, limit=100).records
    assert [r.event_log_entry.dagster_event_type for r in stored] == [
        e.dagster_event_type for e in events[:8]]
    assert caplog.text.count("not stored") == len(events) - 8


def raise_after_first_call(monkeypatch, storage_class, method: str) -> None:
    """Make ``storage_class.method`` do its work, then raise, the first time only."""
    original, calls = getattr(storage_class, method), []

    def flaky(self, *args, **kwargs):
        calls.append(method)
        result = original(self, *args, **kwargs)
        if len(calls) == 1:
            raise OSError("disk I/O error")
        return result

    monkeypatch.setattr(storage_class, method, flaky)


def test_sqlite_check_rows_are_in_the_batch_transaction(tmp_path, monkeypatch):
    """A failure after the planned check's rows were written rolls them back with the rest
    of the index transaction: after the event-by-event retry, one row per partition."""
    raise_after_first_call(monkeypatch, BatchedSqliteEventLogStorage,
                           "_store_asset_check_evaluation_planned")
    dagster_storage = DagsterSqliteStorage.from_local(empty_storage(tmp_path / "dagster"))
    batching_storage = BatchingSqliteStorage.from_local(empty_storage(tmp_path / "batching"))
    assert_same_as_one_by_one(dagster_storage, batching_storage, run_events())


def test_postgres_check_rows_are_in_the_batch_transaction(postgres_url, monkeypatch):
    """The planned check's rows are written in the batch's one transaction: a failure after
    them leaves none."""
    raise_after_first_call(monkeypatch, BatchedPostgresEventLogStorage,
                           "_store_asset_check_evaluation_planned")
    storage = BatchingPostgresStorage(database(postgres_url, "storage_check_rows"))
    try:
        with pytest.raises(OSError, match="disk I/O error"):
            storage.event_log_storage.store_event_batch(run_events())
        assert storage.event_log_storage.get_asset_check_execution_history(
            CHECK, limit=100) == []
        assert storage.event_log_storage.get_records_for_run(RUN).records == []
    finally:
        storage.event_log_storage.dispose()


def test_postgres_batch_is_one_transaction(postgres_url, monkeypatch):
    """A failure in the middle of a PostgreSQL batch leaves nothing stored, so that
    Dagster's fallback (the events one by one) stores each once."""
    fail_once(monkeypatch, BatchedPostgresEventLogStorage, "_store_asset_event_tags")
    storage = BatchingPostgresStorage(database(postgres_url, "storage_failure"))
    try:
        with pytest.raises(OSError, match="disk I/O error"):
            storage.event_log_storage.store_event_batch(run_events())
        assert storage.event_log_storage.get_records_for_run(RUN).records == []
        assert storage.event_log_storage.get_materialized_partitions(FRAMES) == set()
        storage.event_log_storage.store_event_batch(run_events())
        assert summary(storage)["materialized"][FRAMES] == set(PARTITIONS[:4])
    finally:
        storage.event_log_storage.dispose()


def evaluations() -> list[EventLogEntry]:
    """The step's check evaluations, one per partition, the third failed."""
    return [check_evaluated(key, key != PARTITIONS[2]) for key in PARTITIONS]


def test_sqlite_check_evaluations_leave_what_dagster_leaves(tmp_path):
    """Check evaluations stored one by one (a step's, after the run's planned batch): each
    partition's check row as Dagster's own storage leaves it."""
    dagster_storage = DagsterSqliteStorage.from_local(empty_storage(tmp_path / "dagster"))
    batching = BatchingSqliteStorage.from_local(empty_storage(tmp_path / "batching"))
    for event in run_events() + evaluations():
        dagster_storage.event_log_storage.store_event(event)
    batching.event_log_storage.store_event_batch(run_events())
    for event in evaluations():
        batching.event_log_storage.store_event(event)
    stored = summary(batching)
    assert stored == summary(dagster_storage)
    status = AssetCheckExecutionRecordStatus
    assert stored["check executions"] == sorted(
        (key, status.FAILED if key == PARTITIONS[2] else status.SUCCEEDED,
         DagsterEventType.ASSET_CHECK_EVALUATION, RUN) for key in PARTITIONS)


def test_sqlite_check_evaluation_is_one_index_transaction(tmp_path, monkeypatch):
    """A check evaluation's copy in the index shard and its check row are written
    together: when the row's update fails, the index keeps no copy of the event."""
    batching = BatchingSqliteStorage.from_local(empty_storage(tmp_path / "batching"))
    events = batching.event_log_storage
    events.store_event_batch(run_events())

    def failing(self, event, event_id):
        raise OSError("disk I/O error")

    monkeypatch.setattr(BatchedSqliteEventLogStorage, "_update_asset_check_evaluation", failing)
    with pytest.raises(OSError, match="disk I/O error"):
        events.store_event(evaluations()[0])
    with events.index_connection() as conn:
        copies = conn.execute(sa.select(sa.func.count()).select_from(sa.table("event_logs")).where(
            sa.column("dagster_event_type") == DagsterEventType.ASSET_CHECK_EVALUATION.value)
        ).scalar()
    assert copies == 0
    assert {record.status for record in events.get_asset_check_execution_history(
        CHECK, limit=100)} == {AssetCheckExecutionRecordStatus.PLANNED}


def test_sqlite_run_shard_connection_is_kept_per_thread_and_run(tmp_path):
    """A thread's events of one run go over one kept connection of its shard; events of
    another run close it and keep that run's; another thread keeps its own."""
    events = BatchingSqliteStorage.from_local(empty_storage(tmp_path / "home")).event_log_storage
    first, other_run = "f5b1c0de-0000-4000-8000-000000000002", RUN
    events.store_event(entry(planned(TABLE, None).dagster_event, run_id=first))
    kept = dict(events._run_shards)
    events.store_event(entry(planned(FRAMES, PARTITIONS[0]).dagster_event, run_id=first))
    assert events._run_shards == kept and [run for run, _ in kept.values()] == [first]
    events.store_event(planned(FRAMES, PARTITIONS[1]))
    assert [run for run, _ in events._run_shards.values()] == [other_run]
    assert next(iter(kept.values()))[1].closed
    thread = threading.Thread(target=events.store_event, args=(planned(ENERGY, PARTITIONS[1]),))
    thread.start()
    thread.join()
    assert len(events._run_shards) == 2
    assert len(events.get_records_for_run(first).records) == 2
    assert len(events.get_records_for_run(RUN).records) == 2
    events.store_event(entry(planned(ENERGY, PARTITIONS[2]).dagster_event, run_id=first))
    assert [run for run, _ in events._run_shards.values()] == [first]  # the ended thread's closed
    events.dispose()
    assert events._run_shards == {}


def test_sqlite_run_logs_watched_see_every_event_while_a_reader_holds_the_shard(tmp_path):
    """The UI's live run logs (Dagster's own SQLite storage watching the run's shard file,
    as the webserver does) receive every event the kept connection stores, written in a
    burst while another connection holds a read snapshot of the shard (which keeps a
    checkpoint from changing the file)."""
    base = empty_storage(tmp_path / "home")
    writer = BatchingSqliteStorage.from_local(base).event_log_storage
    watcher = DagsterSqliteStorage.from_local(base).event_log_storage
    writer.store_event(planned(TABLE, None))  # the run's shard exists before it is watched
    received = []

    def callback(event, cursor):
        received.append(event.dagster_event.partition)

    reader = sqlite3.connect(writer.path_for_shard(RUN))
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM event_logs").fetchall()  # a snapshot, held
    watcher.watch(RUN, None, callback)
    try:
        for event in run_events()[:5]:
            writer.store_event(event)
        deadline = time.monotonic() + 10
        while len(received) < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert received == [None, *(e.dagster_event.partition for e in run_events()[:5])]
    finally:
        reader.close()
        watcher.end_watch(RUN, callback)
        watcher.dispose()
        writer.dispose()


def storage_config(kind: str, tmp_path, request, name: str) -> dict:
    """deploy/'s ``storage: custom`` of ``kind``: SQLite in a copy of an empty storage under
    ``tmp_path``, PostgreSQL in a new database ``name`` of the throwaway server."""
    if kind == "sqlite":
        return {"module": "resources.instance_storage", "class": "BatchingSqliteStorage",
                "config": {"base_dir": empty_storage(tmp_path / name)}}
    url = urlparse(database(request.getfixturevalue("postgres_url"), name))
    return {"module": "resources.instance_storage", "class": "BatchingPostgresStorage",
            "config": {"postgres_db": {
                "hostname": url.hostname, "port": url.port, "db_name": url.path[1:],
                "username": url.username, "password": "", "scheme": "postgresql+psycopg2"}}}


#: The statements of SQLAlchemy's schema reflection: PostgreSQL's catalog queries
#: (``get_table_names``, ``get_columns``, ``has_table``), SQLite's master table and pragmas.
REFLECTION = re.compile(r"pg_catalog\.|sqlite_master|PRAGMA \S*table_x?info", re.IGNORECASE)


def sensor_state(cursor: str) -> InstigatorState:
    origin = RemoteInstigatorOrigin(
        RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("joulehouse"), "__repository__"),
        "gpu_repetitions_sensor")
    return InstigatorState(origin, InstigatorType.SENSOR, InstigatorStatus.RUNNING,
                           SensorInstigatorData(cursor=cursor))


def one_tick(instance: dg.DagsterInstance, state: InstigatorState, i: int) -> None:
    """What a daemon and its runs do at a tick: the sensor's state read and its cursor
    written (``i``), an asset materialization stored, a run added, started and listed."""
    instance.get_instigator_state(state.instigator_origin_id, state.selector_id)
    instance.update_instigator_state(sensor_state(str(i)))
    instance.event_log_storage.store_event(
        materialized(FRAMES, PARTITIONS[i % len(PARTITIONS)], str(i)))
    instance.event_log_storage.can_write_asset_status_cache()
    run = instance.add_run(dg.DagsterRun(job_name="gpu_energy_job", run_id=str(uuid.uuid4())))
    instance.run_storage.handle_run_event(run.run_id, DagsterEvent(
        DagsterEventType.RUN_START.value, "gpu_energy_job"))
    instance.get_run_records(limit=5)


def reflection_queries(config: dict, tmp_path, n: int) -> int:
    """The reflection statements sent over creating an instance of ``config`` and doing,
    ``n`` times, what a daemon and its runs do: a sensor tick's state read and cursor
    written, an asset materialization stored, a run added, started and listed."""
    statements = []
    tmp_path.mkdir(parents=True, exist_ok=True)

    def count(conn, cursor, statement, *args) -> None:
        if REFLECTION.search(statement):
            statements.append(statement)

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", count)
    try:
        with dg.instance_for_test(temp_dir=str(tmp_path),
                                  overrides={"storage": {"custom": config}}) as instance:
            state = instance.add_instigator_state(sensor_state("0"))
            for i in range(n):
                one_tick(instance, state, i)
            assert instance.get_instigator_state(
                state.instigator_origin_id, state.selector_id).instigator_data.cursor == str(n - 1)
            assert len(instance.get_run_records()) == n
            return len(statements)
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", count)


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "asked-each-time"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_schema_reflection_does_not_grow_with_ticks_events_and_runs(kind, kept, tmp_path,
                                                                    request, monkeypatch):
    """The reflection queries of a sensor's ticks, asset events and runs are the instance's
    first ones only: 20 of each cost what one costs. Without the kept answers
    (``asked-each-time``) they grow with every tick, event and run: what the test sees."""
    if not kept:
        monkeypatch.setattr(instance_storage._KeptTrue, "_kept_true",
                            lambda self, key, ask, *args: ask(*args))
    # the first instance of the process also pays what a process pays once (the empty run
    # shard made, alembic's head read): left out
    warm, once, twenty = (
        reflection_queries(storage_config(kind, tmp_path / name, request,
                                          f"reflection_{kept}_{name}"), tmp_path / name, n)
        for name, n in (("warm", 1), ("once", 1), ("twenty", 20)))
    print(f"{kind}, kept={kept}: {warm} (first instance), {once} (n=1), {twenty} (n=20)")
    if kept:
        assert twenty == once
    else:
        assert twenty >= once + 19 * 6  # the instigators table, 2 columns, 3 run checks


def test_postgres_instances_of_a_process_share_its_connections(postgres_url, tmp_path):
    """A code server makes an instance for every sensor tick, and dagster-postgres a new
    connection for each statement of it: here the instances of a process share its pool,
    so that after the first instance (which creates the tables), five more, each doing a
    tick's work, open none. Dagster's own storage, its tables made, opens one per
    statement: five instances, at least 50 (what the test would see)."""
    url = urlparse(database(postgres_url, "shared_connections"))
    ours = {"custom": {"module": "resources.instance_storage",
                       "class": "BatchingPostgresStorage",
                       "config": {"postgres_db": {
                           "hostname": url.hostname, "port": url.port,
                           "db_name": url.path[1:], "username": url.username,
                           "password": "", "scheme": "postgresql+psycopg2"}}}}
    dagsters = {"postgres": {"postgres_url": database(postgres_url, "own_connections")}}
    opened = []

    def count(*args) -> None:
        opened.append(1)

    def connections(storage: dict, first: int, instances: int, kind: str) -> int:
        """The connections opened over ``instances`` instances, the i-th doing tick
        ``first + i``; each instance's storage of ``kind``, and every run and cursor of the
        ticks before it there."""
        before = len(opened)
        state = sensor_state("0")
        for i in range(first, first + instances):
            with dg.instance_for_test(temp_dir=str(tmp_path),
                                      overrides={"storage": storage}) as instance:
                assert type(instance.run_storage).__name__ == kind
                if i == 0:
                    instance.add_instigator_state(state)
                one_tick(instance, state, i)
                assert instance.get_instigator_state(
                    state.instigator_origin_id, state.selector_id
                ).instigator_data.cursor == str(i)
                assert len(instance.get_run_records()) == i + 1
        return len(opened) - before

    sa.event.listen(sa.pool.Pool, "connect", count)
    try:
        # the first creates the tables, over Dagster's own engine
        connections(ours, 0, 1, "KeptSchemaPostgresRunStorage")
        assert connections(ours, 1, 5, "KeptSchemaPostgresRunStorage") == 0
        connections(dagsters, 0, 1, "PostgresRunStorage")
        dagsters_own = connections(dagsters, 1, 5, "PostgresRunStorage")
        print(f"five instances, a tick each: 0 connections opened, Dagster's own {dagsters_own}")
        assert dagsters_own >= 5 * 10
    finally:
        sa.event.remove(sa.pool.Pool, "connect", count)


def test_postgres_storage_creates_a_missing_table_as_dagster_does(postgres_url):
    """Dagster's own creation is skipped only where every main table is there: a database
    whose instance_info table is gone gets it back, as dagster-postgres's run storage gives
    it back (``POSTGRES_MAIN_TABLES``, re-checked at each Dagster upgrade)."""
    url = database(postgres_url, "missing_table")
    BatchingPostgresStorage(url)
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        conn.execute(sa.text("DROP TABLE instance_info"))
    BatchingPostgresStorage(url)
    assert instance_storage.POSTGRES_MAIN_TABLES <= set(sa.inspect(engine).get_table_names())
    engine.dispose()


def test_false_schema_answer_is_asked_again(tmp_path):
    """A True answer is kept, a False one is not: a table created after a check said it was
    missing is seen at the next check, and a True answer stays (a table is never dropped
    while processes run; dropped here only to show the answer is not asked again)."""
    storage = BatchingSqliteStorage(empty_storage(tmp_path / "storage"))
    schedules = sqlite3.connect(tmp_path / "storage" / "schedules" / "schedules.db")
    try:
        schedules.execute("DROP TABLE secondary_indexes")
        schedules.commit()
        assert not storage.schedule_storage.has_secondary_index_table()
        schedules.execute("CREATE TABLE secondary_indexes (id INTEGER)")
        schedules.commit()
        assert storage.schedule_storage.has_secondary_index_table()
        schedules.execute("DROP TABLE secondary_indexes")
        schedules.commit()
        assert storage.schedule_storage.has_secondary_index_table()
    finally:
        schedules.close()
        storage.dispose()


def test_postgres_storage_sets_what_dagsters_own_storage_sets(postgres_url):
    """BatchingPostgresStorage builds its storages itself, in place of
    DagsterPostgresStorage's __init__ (private API): each attribute Dagster's own sets,
    ours sets too, to a storage of the same kind."""
    ours = BatchingPostgresStorage(database(postgres_url, "attributes_ours"))
    theirs = DagsterPostgresStorage(database(postgres_url, "attributes_theirs"))
    try:
        assert set(vars(ours)) == set(vars(theirs))
        for name, value in vars(theirs).items():
            assert isinstance(getattr(ours, name), type(value)), name
    finally:
        for storage in (ours, theirs):
            for part in (storage.run_storage, storage.event_log_storage,
                         storage.schedule_storage):
                part.dispose()


#: The mixins' methods that are Joulehouse's own, not overrides of Dagster's.
OWN_METHODS = {"_kept_true", "_held_index", "_open_index_connection", "_index_rows",
               "_use_process_engine", "_engine_of_this_process"}


@pytest.mark.parametrize("storage", [
    instance_storage.BatchedSqliteEventLogStorage, instance_storage.BatchedPostgresEventLogStorage,
    instance_storage.KeptSchemaSqliteRunStorage, instance_storage.KeptSchemaPostgresRunStorage,
    instance_storage.KeptSchemaSqliteScheduleStorage,
    instance_storage.KeptSchemaPostgresScheduleStorage])
def test_every_override_names_a_dagster_method_of_the_same_signature(storage):
    """A method Dagster renames or re-signs at an upgrade would be overridden no more, its
    schema check asked at each call again, and nothing else would fail: every method the
    mixins define but Joulehouse's own is Dagster's, of the same kind and signature."""
    mixins = [cls for cls in storage.__mro__
              if cls.__module__ == instance_storage.__name__ and cls is not storage]
    dagsters = next(cls for cls in storage.__mro__
                    if cls.__module__.startswith(("dagster.", "dagster_postgres.")))
    overrides = {name: member for mixin in mixins for name, member in vars(mixin).items()
                 if (callable(member) or isinstance(member, property))
                 and name not in OWN_METHODS and not name.startswith("__")}
    assert overrides
    for name, member in overrides.items():
        theirs = inspect.getattr_static(dagsters, name, None)
        assert theirs is not None, f"{dagsters.__name__} has no {name} any more"
        if isinstance(member, property):
            assert isinstance(theirs, property), name
        else:
            assert (inspect.signature(inspect.unwrap(member)).parameters.keys()
                    == inspect.signature(inspect.unwrap(theirs)).parameters.keys()), name
