"""Several tables' partitions of one key stored all or nothing (joulehouse.partition_group)."""

import os

import pandas as pd

from joulehouse.partition_group import STAGED, finish_pending, stage, write_together
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
    assert finish_pending(tables, JOURNAL) == []


def test_a_crash_before_the_journal_leaves_the_old_partitions(tmp_path):
    tables = Warehouse(tmp_path)
    write_together(tables, JOURNAL, KEY, _frames(1))
    for table, frame in _frames(2).items():  # staged, then the crash: no journal written
        tables.write_partition(f"{table}/{STAGED}", KEY, frame)
    assert finish_pending(tables, JOURNAL) == []
    assert _stored(tables) == {"block/jobs": [1, 1], "block/job_energy": [10.0]}
    write_together(tables, JOURNAL, KEY, _frames(3))  # the next try overwrites the staged
    assert _stored(tables) == {"block/jobs": [3, 3], "block/job_energy": [30.0]}


def test_a_crash_between_the_renames_is_completed_before_the_next_read(tmp_path):
    tables = Warehouse(tmp_path)
    write_together(tables, JOURNAL, KEY, _frames(1))
    stage(tables, JOURNAL, KEY, _frames(2))
    name = partition_file_name(KEY)  # the first rename done, then the crash
    os.replace(tmp_path / "block" / "jobs" / STAGED / name, tmp_path / "block" / "jobs" / name)
    assert _stored(tables) == {"block/jobs": [2, 2], "block/job_energy": [10.0]}  # mixed
    assert finish_pending(tables, JOURNAL) == [KEY]
    assert _stored(tables) == {"block/jobs": [2, 2], "block/job_energy": [20.0]}
    assert tables.partition_keys(JOURNAL) == []
