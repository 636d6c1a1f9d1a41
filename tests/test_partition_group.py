"""Several tables' partitions of one key stored all or nothing (joulehouse.partition_group)."""

import os
import threading

import pandas as pd
import pyarrow.fs as pafs

from joulehouse.partition_group import (
    STAGED,
    _finish,
    _stage,
    _write,
    finish_pending,
    stage,
    write_together,
)
from joulehouse.warehouse import Warehouse, partition_file_name

JOURNAL = "block/pending_writes"
KEY = "fritz/398"


def _frames(version: int) -> dict[str, pd.DataFrame]:
    return {"block/jobs": pd.DataFrame({"job": ["a", "b"], "version": version}),
            "block/job_energy": pd.DataFrame({"job": ["a"], "energy_j": [10.0 * version]})}


def _stored(tables: Warehouse) -> dict[str, list]:
    return {table: tables.read_partitions(table, [KEY]).iloc[:, 1].tolist()
            for table in _frames(0)}


def test_a_write_stores_every_table_and_leaves_nothing_staged(tmp_path):
    tables = Warehouse(tmp_path)
    write_together(tables, JOURNAL, KEY, _frames(1))
    assert _stored(tables) == {"block/jobs": [1, 1], "block/job_energy": [10.0]}
    assert tables.partition_keys("block/jobs") == [KEY]
    assert tables.partition_keys(JOURNAL) == []
    assert not list((tmp_path / "block" / "jobs" / STAGED).iterdir())
    assert not list((tmp_path / JOURNAL).glob("*.lock"))  # no lock file of the write left
    assert finish_pending(tables, JOURNAL) == []


def test_a_crash_before_the_journal_leaves_the_old_partitions(tmp_path):
    tables = Warehouse(tmp_path)
    write_together(tables, JOURNAL, KEY, _frames(1))
    for table, frame in _frames(2).items():  # staged, then the crash: no journal written
        tables.write_partition(f"{table}/{STAGED}/0-crashed", KEY, frame)
    assert finish_pending(tables, JOURNAL) == []
    assert _stored(tables) == {"block/jobs": [1, 1], "block/job_energy": [10.0]}
    # the crashed write's staged files are no table of their own (no view in `joulehouse sql`)
    assert set(tables.table_files()) == {"block/jobs", "block/job_energy"}
    write_together(tables, JOURNAL, KEY, _frames(3))  # the next try stages afresh
    assert _stored(tables) == {"block/jobs": [3, 3], "block/job_energy": [30.0]}


def test_a_crash_between_the_renames_is_completed_before_the_next_read(tmp_path):
    tables = Warehouse(tmp_path)
    write_together(tables, JOURNAL, KEY, _frames(1))
    write_id = stage(tables, JOURNAL, KEY, _frames(2))
    name = partition_file_name(KEY)  # the first rename done, then the crash
    os.replace(tmp_path / "block" / "jobs" / STAGED / write_id / name,
               tmp_path / "block" / "jobs" / name)
    assert _stored(tables) == {"block/jobs": [2, 2], "block/job_energy": [10.0]}  # mixed
    assert finish_pending(tables, JOURNAL) == [KEY]
    assert _stored(tables) == {"block/jobs": [2, 2], "block/job_energy": [20.0]}
    assert tables.partition_keys(JOURNAL) == []


def test_a_write_in_progress_is_left_to_its_writer_and_writers_do_not_mix(tmp_path):
    tables = Warehouse(tmp_path)
    with _write(tables, JOURNAL) as first:  # committed, not yet finished: in progress
        _stage(tables, JOURNAL, first, KEY, _frames(1))
        assert finish_pending(tables, JOURNAL) == []  # another run's step: left alone
        assert tables.partition_keys("block/jobs") == []
        with _write(tables, JOURNAL) as second:  # a second writer of the same key
            _stage(tables, JOURNAL, second, KEY, _frames(2))
            assert _finish(tables, JOURNAL, first) == KEY  # each moves its own files
            assert _stored(tables) == {"block/jobs": [1, 1], "block/job_energy": [10.0]}
            assert _finish(tables, JOURNAL, second) == KEY
        assert _finish(tables, JOURNAL, first) is None  # finished already: no error
    assert _stored(tables) == {"block/jobs": [2, 2], "block/job_energy": [20.0]}
    assert tables.partition_keys(JOURNAL) == []
    assert not list((tmp_path / JOURNAL).glob("*.lock"))  # the writes' lock files gone


def test_writers_at_once_leave_every_table_from_one_write(tmp_path):
    tables = Warehouse(tmp_path)
    errors: list[BaseException] = []

    def writer(version: int) -> None:
        try:
            for _ in range(5):
                write_together(tables, JOURNAL, KEY, _frames(version))
                finish_pending(tables, JOURNAL)  # as each run does before reading
        except BaseException as error:  # noqa: BLE001 - reported by the assert below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(v,)) for v in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    stored = _stored(tables)
    version = stored["block/jobs"][0]
    assert stored == {"block/jobs": [version, version], "block/job_energy": [10.0 * version]}
    assert tables.partition_keys(JOURNAL) == []
    assert not list((tmp_path / "block" / "jobs" / STAGED).iterdir())


def test_a_journal_written_before_writes_had_ids_is_completed(tmp_path):
    tables = Warehouse(tmp_path)
    write_together(tables, JOURNAL, KEY, _frames(1))
    for table, frame in _frames(2).items():  # the former layout: one _staged folder, and
        tables.write_partition(f"{table}/{STAGED}", KEY, frame)  # a journal named by the key
    tables.write_partition(JOURNAL, KEY, pd.DataFrame({"table": list(_frames(2))}))
    assert finish_pending(tables, JOURNAL) == [KEY]
    assert _stored(tables) == {"block/jobs": [2, 2], "block/job_energy": [20.0]}
    assert tables.partition_keys(JOURNAL) == []
    assert not list((tmp_path / JOURNAL).glob("*.lock"))


def test_on_an_object_store_a_committed_write_is_finished_and_a_crash_before_it_is_not(
        object_store, s3_warehouse):
    tables = Warehouse(s3_warehouse, object_store.store)
    write_together(tables, JOURNAL, KEY, _frames(1))
    assert _stored(tables) == {"block/jobs": [1, 1], "block/job_energy": [10.0]}
    assert tables.partition_keys(JOURNAL) == []
    for table, frame in _frames(2).items():  # staged, then a crash before the journal
        tables.write_partition(f"{table}/{STAGED}/0-crashed", KEY, frame)
    assert finish_pending(tables, JOURNAL) == []
    assert _stored(tables) == {"block/jobs": [1, 1], "block/job_energy": [10.0]}
    write_id = stage(tables, JOURNAL, KEY, _frames(3))  # committed, then the crash after
    assert tables.move_partition(f"block/jobs/{STAGED}/{write_id}", "block/jobs", KEY)
    assert _stored(tables) == {"block/jobs": [3, 3], "block/job_energy": [10.0]}  # mixed
    assert finish_pending(tables, JOURNAL) == [KEY]  # the first move done: skipped
    assert _stored(tables) == {"block/jobs": [3, 3], "block/job_energy": [30.0]}
    assert tables.partition_keys(JOURNAL) == []
    assert _finish(tables, JOURNAL, write_id) is None
    objects = tables.filesystem.get_file_info(pafs.FileSelector(
        tables.table_path("block"), recursive=True))
    assert not [o.path for o in objects if write_id in o.path]  # no staged object nor folder
