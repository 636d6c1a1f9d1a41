"""energy_facts kept per entry (joulehouse/entry_table.py): replace, remove, a failed
write, and the readers (read_table, DuckDB's views), on a path and on S3 (moto)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import deltalake
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from joulehouse import entry_table
from joulehouse.accounting.query import query
from joulehouse.facts import ENERGY_FACTS_COLUMNS
from joulehouse.warehouse import Warehouse

PROJECT = Path(__file__).resolve().parent.parent
FACTS = "energy_facts"
GPU = {"source": "gpu-benchmark"}
CC = {"source": "clustercockpit"}
START = pd.Timestamp("2025-03-01 10:00", tz="UTC")


def facts(scope: dict[str, str], entities: list[int], energy_j: float = 1000.0
          ) -> pd.DataFrame:
    """Two facts (gpu by counter and by power) an entity, energy ``energy_j`` + entity."""
    rows = [{"source": scope["source"], "entity": f"e{entity}", "component": "gpu",
             "window_start": START + pd.Timedelta(minutes=entity),
             "window_end": START + pd.Timedelta(minutes=entity, seconds=30),
             "duration_s": 30.0, "energy_j": energy_j + entity, "method": method}
            for entity in entities for method in ("counter", "power")]
    return pd.DataFrame(rows, columns=ENERGY_FACTS_COLUMNS)


def ordered(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["source", "entity", "method"], ignore_index=True)


def landings(tables: Warehouse) -> pd.DataFrame:
    """Two sources land, one entry is fixed, one removed, one re-landed after removal;
    the rows a rebuild from scratch of the final entries holds."""
    tables.write_entries(FACTS, facts(GPU, [1, 2, 3]), GPU)
    tables.write_entries(FACTS, facts(CC, [1, 2]), CC)
    tables.write_entries(FACTS, facts(GPU, [2], energy_j=5000.0), GPU)  # a fix
    tables.remove_entries(FACTS, GPU, ["e3"])
    tables.remove_entries(FACTS, CC, ["e1"])
    tables.write_entries(FACTS, facts(CC, [1, 4]), CC)  # e1 re-landed, e4 new
    return ordered(pd.concat([facts(GPU, [1]), facts(GPU, [2], energy_j=5000.0),
                              facts(CC, [1, 2, 4])], ignore_index=True))


@pytest.fixture
def store(empty_warehouse: Warehouse) -> Warehouse:
    """A warehouse on a path, then one on moto's S3 server."""
    return empty_warehouse


def test_entries_replaced_and_removed_equal_a_rebuild(store):
    tables = store
    expected = landings(tables)
    stored = tables.read_table(FACTS)
    assert len(stored) == 10
    pd.testing.assert_frame_equal(ordered(stored), expected)
    assert str(stored["window_start"].dtype) == "datetime64[ns, UTC]"
    delta = entry_table._open(tables, FACTS)  # Delta's own microseconds, no preview feature
    assert {field.name: str(field.type) for field in delta.schema().fields}[
        "window_start"] == 'PrimitiveType("timestamp")'
    assert "timestampNanos" not in (delta.protocol().reader_features or [])
    # the other source's rows were never touched by a write of one source
    assert sorted(stored.loc[stored["source"] == "gpu-benchmark", "entity"].unique()) == [
        "e1", "e2"]


def test_duckdb_views_read_the_current_version_only(store):
    tables = store
    landings(tables)
    # six writes left six data files: the two landings, the fix's and the two removals'
    # rewrites of a file, the re-landing's (its file of CC's e2 holds neither e1 nor
    # e4: not rewritten); the current version lists the last three
    stored = {info.path for info in tables.filesystem.get_file_info(
        pafs.FileSelector(tables.table_path(FACTS)))
        if info.path.rsplit("/", 1)[-1].startswith("part-")}
    listed = {info.path for info in tables.table_files()[FACTS]}
    assert len(stored) == 6 and len(listed) == 3 and listed < stored
    totals = query(tables, "SELECT source, count(*) AS n, sum(energy_j) AS energy_j "
                           "FROM energy_facts GROUP BY source ORDER BY source")
    assert totals["n"].tolist() == [6, 4]
    assert np.allclose(totals["energy_j"], [3 * 2000.0 + 2 * (1 + 2 + 4),
                                            2 * 1001.0 + 2 * 5002.0])
    one = query(tables, "SELECT energy_j FROM energy_facts WHERE entity = 'e2' AND "
                        "source = 'gpu-benchmark'")
    assert one["energy_j"].tolist() == [5002.0, 5002.0]


def failing_half_way(copies: int):
    """An ``entry_table._arrow`` whose reader yields the rows ``copies`` times, then fails."""
    def arrow(rows: pd.DataFrame) -> pa.RecordBatchReader:
        table = pa.Table.from_pandas(rows, preserve_index=False)

        def batches():
            for _ in range(copies):
                yield from table.to_batches()
            raise RuntimeError("the landing fails half-way")
        return pa.RecordBatchReader.from_batches(table.schema, batches())
    return arrow


def test_a_write_failing_half_way_leaves_the_table_as_it_was(store, monkeypatch):
    tables = store
    tables.write_entries(FACTS, facts(GPU, [1, 2]), GPU)
    before = ordered(tables.read_table(FACTS))
    monkeypatch.setattr(entry_table, "_arrow", failing_half_way(1))
    with pytest.raises(Exception, match="half-way"):
        tables.write_entries(FACTS, facts(GPU, [1, 2, 3], energy_j=9000.0), GPU)
    pd.testing.assert_frame_equal(ordered(tables.read_table(FACTS)), before)
    assert query(tables, "SELECT count(*) AS n FROM energy_facts")["n"].item() == 4


def test_a_first_write_failing_half_way_leaves_an_empty_table(tmp_path, monkeypatch):
    """delta-rs writes data files before the commit: those of a failed first write (ten
    batches of 4,000 rows, 1-byte target files) are listed by no version."""
    tables = Warehouse(tmp_path / "warehouse")
    monkeypatch.setattr(deltalake, "write_deltalake",
                        functools.partial(deltalake.write_deltalake, target_file_size=1))
    monkeypatch.setattr(entry_table, "_arrow", failing_half_way(10))
    with pytest.raises(Exception, match="half-way"):
        tables.write_entries(FACTS, facts(GPU, list(range(2000))), GPU)
    assert list((tmp_path / "warehouse" / FACTS).glob("part-*.parquet"))  # written, unlisted
    assert entry_table.is_entry_table(tables, FACTS)
    assert tables.read_table(FACTS).empty and tables.table_files() == {}
    monkeypatch.undo()
    tables.write_entries(FACTS, facts(GPU, [1]), GPU)
    pd.testing.assert_frame_equal(ordered(tables.read_table(FACTS)), facts(GPU, [1]))


def test_a_log_without_a_version_reads_as_an_empty_table(tmp_path):
    """A first write stopped while committing: ``_delta_log`` holds a staged commit only."""
    tables = Warehouse(tmp_path / "warehouse")
    log = tmp_path / "warehouse" / FACTS / entry_table.LOG
    log.mkdir(parents=True)
    (log / "_commit_0a1b.json.tmp").write_text("{}")
    assert tables.read_table(FACTS).empty and tables.table_files() == {}
    assert entry_table.compact(tables, FACTS) == {"added": 0, "merged": 0, "removed": 0}
    tables.remove_entries(FACTS, GPU, ["e1"])  # nothing stored: nothing to do
    tables.write_entries(FACTS, facts(GPU, [1, 2]), GPU)
    pd.testing.assert_frame_equal(ordered(tables.read_table(FACTS)), facts(GPU, [1, 2]))


def test_compact_merges_files_and_keeps_the_rows(tmp_path):
    tables = Warehouse(tmp_path / "warehouse")
    expected = landings(tables)
    figures = entry_table.compact(tables, FACTS)
    assert figures["added"] == 1 and figures["merged"] >= 2
    [merged] = entry_table.files(tables, FACTS)
    pd.testing.assert_frame_equal(ordered(tables.read_table(FACTS)), expected)
    column = pq.ParquetFile(merged.path).metadata.row_group(0).column(0)
    assert column.compression == "ZSTD"  # optimize's own default kept


def test_a_scopes_rows_are_counted_from_the_logs_statistics(tmp_path, monkeypatch):
    """Files of one source are counted by their statistics, none read; a compacted file
    of both sources is read; plain files before the first version are counted too."""
    plain = Warehouse(tmp_path / "plain")
    plain_facts(plain)
    assert [entry_table.count(plain, FACTS, scope) for scope in (GPU, CC)] == [4, 2]
    tables = Warehouse(tmp_path / "warehouse")
    counts = landings(tables)["source"].value_counts()
    read = []
    dataset = entry_table._dataset
    monkeypatch.setattr(entry_table, "_dataset", lambda *args: read.append(args) or dataset(*args))
    assert [entry_table.count(tables, FACTS, scope) for scope in (GPU, CC)] == [
        counts["gpu-benchmark"], counts["clustercockpit"]] == [4, 6]
    assert entry_table.count(tables, FACTS, {"source": "geopm"}) == 0
    assert not read
    entry_table.compact(tables, FACTS)
    assert [entry_table.count(tables, FACTS, scope) for scope in (GPU, CC)] == [4, 6]
    assert len(read) == 2


def age_the_log(folder, hours: float) -> None:
    """Move the log's removals ``hours`` back in time (the versions stay as they are)."""
    for commit in (folder / entry_table.LOG).glob("*.json"):
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        for action in actions:
            if "remove" in action:
                action["remove"]["deletionTimestamp"] -= int(hours * 3600 * 1000)
        commit.write_text("".join(json.dumps(action) + "\n" for action in actions))


def test_files_a_reader_listed_hours_ago_outlive_compact(tmp_path):
    """A reader listed the files before a fix that replaced them two hours ago: they are
    within the retention (7 days), so ``compact`` removes nothing and they still read;
    8 days later they are removed."""
    tables = Warehouse(tmp_path / "warehouse")
    tables.write_entries(FACTS, facts(GPU, [1, 2, 3]), GPU)
    listed = tables.table_files()[FACTS]
    tables.write_entries(FACTS, facts(GPU, [2], energy_j=5000.0), GPU)
    age_the_log(tmp_path / "warehouse" / FACTS, hours=2)
    figures = entry_table.compact(tables, FACTS)
    assert figures["removed"] == 0
    read = tables.dataset(listed).to_table().to_pandas()  # Delta's microseconds
    pd.testing.assert_frame_equal(ordered(read), facts(GPU, [1, 2, 3]), check_dtype=False)
    age_the_log(tmp_path / "warehouse" / FACTS, hours=8 * 24)  # past the retention
    assert entry_table.compact(tables, FACTS)["removed"] == len(listed) == 1
    assert not os.path.exists(listed[0].path)


def test_a_table_is_vacuumed_once_every_so_many_versions(tmp_path):
    """``vacuum_if_due``: not before ``every`` versions; then the files unlisted past the
    retention are removed and the version left kept in the table's properties, from which
    the next ``every`` count; the rows stay."""
    tables = Warehouse(tmp_path / "warehouse")
    tables.write_entries(FACTS, facts(GPU, [1, 2]), GPU)  # versions 0 (made), 1
    replaced = tables.table_files()[FACTS]
    tables.write_entries(FACTS, facts(GPU, [2], energy_j=5.0), GPU)  # 2: the file replaced
    age_the_log(tmp_path / "warehouse" / FACTS, hours=8 * 24)
    assert entry_table.vacuum_if_due(tables, FACTS, 3) is None
    tables.write_entries(FACTS, facts(GPU, [3]), GPU)  # 3
    assert entry_table.vacuum_if_due(tables, FACTS, 3) == 1
    assert not os.path.exists(replaced[0].path)
    delta = entry_table._open(tables, FACTS)  # vacuum start, end; the property
    assert delta.metadata().configuration[entry_table.VACUUMED] == str(delta.version() - 1)
    assert entry_table.vacuum_if_due(tables, FACTS, 3) is None
    pd.testing.assert_frame_equal(ordered(tables.read_table(FACTS)), ordered(pd.concat(
        [facts(GPU, [1]), facts(GPU, [2], energy_j=5.0), facts(GPU, [3])], ignore_index=True)))


def test_a_folder_holding_a_nested_table_is_not_made_a_table(tmp_path):
    """Readers of the Delta table would not see it: the write is refused, nothing written."""
    tables = Warehouse(tmp_path / "warehouse")
    tables.write_table(f"{FACTS}/by_job", facts(GPU, [1]))
    stored = sorted((tmp_path / "warehouse" / FACTS).rglob("*"))
    with pytest.raises(FileExistsError, match=f"{FACTS}: .* already holds by_job"):
        tables.write_entries(FACTS, facts(GPU, [2]), GPU)
    assert sorted((tmp_path / "warehouse" / FACTS).rglob("*")) == stored
    assert not entry_table.is_entry_table(tables, FACTS)


def plain_facts(tables: Warehouse) -> pd.DataFrame:
    """energy_facts as the code before issue 28 wrote it, a plain file per source (a GEOPM
    window's end 0.4 µs past a microsecond, as a runtime in float seconds gives it); the
    rows, with that end rounded to the microsecond."""
    gpu, cc = facts(GPU, [1, 2]), facts(CC, [1])
    cc.loc[0, "window_end"] += pd.Timedelta(nanoseconds=400)
    tables.write_partition(FACTS, GPU["source"], gpu)
    tables.write_partition(FACTS, CC["source"], cc)
    assert (tables.read_table(FACTS)["window_end"].dt.nanosecond == 400).sum() == 1
    return ordered(pd.concat([gpu, entry_table.to_microseconds(cc)], ignore_index=True))


def test_plain_files_are_migrated_by_the_first_write(store):
    """A warehouse written before issue 28 (energy_facts/<source>.parquet): the first write
    of one source makes version 0 of every source's stored rows, then writes its entries;
    the plain files stay, read by nobody."""
    tables = store
    before = plain_facts(tables)
    tables.write_entries(FACTS, facts(GPU, [2, 3], energy_j=5000.0), GPU)
    assert entry_table._open(tables, FACTS).version() == 1
    expected = ordered(pd.concat([before[before["entity"] != "e2"].loc[
        lambda f: (f["source"] != GPU["source"]) | (f["entity"] == "e1")],
        facts(GPU, [2, 3], energy_j=5000.0)], ignore_index=True))
    pd.testing.assert_frame_equal(ordered(tables.read_table(FACTS)), expected)
    totals = query(tables, "SELECT count(*) AS n FROM energy_facts")
    assert totals["n"].item() == len(expected) == 8
    held = {info.base_name for info in tables.filesystem.get_file_info(
        pafs.FileSelector(tables.table_path(FACTS)))}
    assert {"gpu-benchmark.parquet", "clustercockpit.parquet"} <= held


def test_the_hidden_file_of_a_killed_plain_write_is_no_nested_table(tmp_path):
    """A plain write killed before its rename leaves ``.<name>.parquet.<random>.tmp``
    beside the plain files: hidden, it is neither read nor refused, and stays."""
    tables = Warehouse(tmp_path / "warehouse")
    before = plain_facts(tables)
    leftover = tmp_path / "warehouse" / FACTS / ".gpu-benchmark.parquet.k1ll3d.tmp"
    leftover.write_bytes(b"PAR1")
    tables.write_entries(FACTS, facts(GPU, [3]), GPU)
    pd.testing.assert_frame_equal(ordered(tables.read_table(FACTS)), ordered(
        pd.concat([before, facts(GPU, [3])], ignore_index=True)))
    assert leftover.read_bytes() == b"PAR1"


def test_a_migration_racing_a_first_write_keeps_that_writes_entries(tmp_path):
    """Writer B found no version, then writer A migrated and committed its entries:
    B's migration commits nothing and opens A's table."""
    tables = Warehouse(tmp_path / "warehouse")
    before = plain_facts(tables)
    tables.write_entries(FACTS, facts(GPU, [3]), GPU)  # writer A: versions 0 and 1
    delta = entry_table._migrate(tables, FACTS)  # writer B, late
    assert delta.version() == entry_table._open(tables, FACTS).version() == 1
    pd.testing.assert_frame_equal(ordered(tables.read_table(FACTS)), ordered(
        pd.concat([before, facts(GPU, [3])], ignore_index=True)))


def test_a_migration_failing_half_way_leaves_the_plain_files_read(tmp_path, monkeypatch):
    """Its data files are written before version 0, in a folder whose log exists: readers
    read the plain files alone, as before, and the next write migrates again."""
    tables = Warehouse(tmp_path / "warehouse")
    many = facts({"source": "powerapi"}, list(range(2000)))  # batches delta-rs writes out
    tables.write_partition(FACTS, "powerapi", many)
    before = ordered(pd.concat([plain_facts(tables), many], ignore_index=True))
    monkeypatch.setattr(deltalake, "write_deltalake",
                        functools.partial(deltalake.write_deltalake, target_file_size=1))
    monkeypatch.setattr(entry_table, "_arrow", failing_half_way(10))
    with pytest.raises(Exception, match="half-way"):
        tables.write_entries(FACTS, facts(GPU, [3]), GPU)
    assert list((tmp_path / "warehouse" / FACTS).glob("part-*.parquet"))  # written, unlisted
    assert entry_table.is_entry_table(tables, FACTS)
    read = ordered(tables.read_table(FACTS))
    pd.testing.assert_frame_equal(read.drop(columns="window_end"),
                                  before.drop(columns="window_end"))
    assert [info.base_name for info in tables.table_files()[FACTS]] == [
        "clustercockpit.parquet", "gpu-benchmark.parquet", "powerapi.parquet"]
    monkeypatch.undo()
    tables.write_entries(FACTS, facts(GPU, [3]), GPU)
    pd.testing.assert_frame_equal(ordered(tables.read_table(FACTS)), ordered(
        pd.concat([before, facts(GPU, [3])], ignore_index=True)))


def test_compact_removes_only_the_unlisted_data_files_of_failed_writes(tmp_path):
    """Files no version ever listed, 30 days old: a ``part-*.parquet`` of a failed write
    goes; a foreign file and a nested folder's stay."""
    tables = Warehouse(tmp_path / "warehouse")
    expected = landings(tables)
    folder = tmp_path / "warehouse" / FACTS
    (folder / "nested").mkdir()
    kept = [folder / "legacy.parquet", folder / "nested" / "part-00000-x.parquet"]
    failed = folder / "part-00000-failed-c000.snappy.parquet"
    month_ago = (pd.Timestamp.now() - pd.Timedelta(days=30)).timestamp()
    for path in [*kept, failed]:
        path.write_bytes(b"PAR1")
        os.utime(path, (month_ago, month_ago))
    figures = entry_table.compact(tables, FACTS)
    assert not failed.exists() and all(path.exists() for path in kept)
    assert figures["removed"] == 1
    pd.testing.assert_frame_equal(ordered(tables.read_table(FACTS)), expected)


def test_the_predicate_quotes_names_and_values():
    assert entry_table.predicate({"Source": "o'brien"}, "entity", ["b\\c", "a'b", "a'b"]) == (
        """"Source" = 'o''brien' AND "entity" IN ('a''b', 'b\\c')""")


def test_entries_with_quotes_backslashes_and_odd_names_are_replaced_and_removed(tmp_path):
    """Column names with a capital and a space (unquoted, DataFusion reads ``job id``
    as ``job``), entries with a quote and a backslash: fixed and removed like any other."""
    tables, scope = Warehouse(tmp_path / "warehouse"), {"Source": "o'brien"}

    def rows(entities: list[str], value: float) -> pd.DataFrame:
        return pd.DataFrame({"Source": "o'brien", "job id": entities,
                             "value": [value] * len(entities)})

    names = ["o'brien", "back\\slash", "e1"]
    tables.write_entries("by_name", rows(names, 1.0), scope, column="job id")
    tables.write_entries("by_name", rows(["o'brien"], 2.0), scope, column="job id")
    tables.remove_entries("by_name", scope, ["back\\slash"], column="job id")
    stored = tables.read_table("by_name").sort_values("job id", ignore_index=True)
    pd.testing.assert_frame_equal(stored, pd.DataFrame(
        {"Source": "o'brien", "job id": ["e1", "o'brien"], "value": [1.0, 2.0]}))


@pytest.mark.parametrize("entity", [None, np.nan])
def test_null_entries_and_an_empty_scope_are_refused(tmp_path, entity):
    tables = Warehouse(tmp_path / "warehouse")
    with pytest.raises(ValueError, match=f"{FACTS}: .*not null"):
        tables.write_entries(FACTS, facts(GPU, [1]).assign(entity=["e1", entity]), GPU)
    with pytest.raises(ValueError, match=f"{FACTS}: .*not null"):
        tables.remove_entries(FACTS, GPU, [entity])
    with pytest.raises(ValueError, match=f"{FACTS}: .*without a scope"):
        tables.write_entries(FACTS, facts(GPU, [1]), {})
    assert not entry_table.is_entry_table(tables, FACTS)


def test_s3_versions_are_published_by_conditional_puts(object_store, s3_warehouse):
    """Every commit is a put-if-absent (``If-None-Match: *``): refused outright where the
    store's conditional put is disabled, made with the warehouse's own options."""
    tables = Warehouse(s3_warehouse, object_store.store)
    assert tables.delta_options()["AWS_CONDITIONAL_PUT"] == "etag"
    tables.write_entries(FACTS, facts(GPU, [1]), GPU)
    disabled = {**tables.delta_options(), "AWS_CONDITIONAL_PUT": "disabled"}
    with pytest.raises(Exception, match="PutMode::Create. when conditional put is disabled"):
        deltalake.write_deltalake(entry_table._uri(tables, FACTS), pa.Table.from_pandas(
            facts(GPU, [2])), mode="append", storage_options=disabled)
    tables.write_entries(FACTS, facts(GPU, [2]), GPU)
    assert sorted(tables.read_table(FACTS)["entity"].unique()) == ["e1", "e2"]


def test_nullable_dtypes_and_timestamps_come_back_as_written(store):
    """Int64 and boolean with nulls, naive and UTC timestamps (microseconds): read back
    equal, dtypes included, after a fix; a time finer than a microsecond is refused."""
    tables = store

    def rows(entities: list[str], count: int) -> pd.DataFrame:
        return pd.DataFrame({
            "source": "gpu-benchmark", "entity": entities,
            "count": pd.array([count, None][:len(entities)], dtype="Int64"),
            "valid": pd.array([True, None][:len(entities)], dtype="boolean"),
            "local_start": pd.to_datetime(["2025-03-01 10:00:00.000001"] * len(entities)),
            "window_start": [START + pd.Timedelta(microseconds=7)] * len(entities)})

    tables.write_entries("figures", rows(["e1", "e2"], 1), GPU)
    tables.write_entries("figures", rows(["e2", "e4"], 2), GPU)  # a fix, e4's nulls
    stored = tables.read_table("figures").sort_values("entity", ignore_index=True)
    expected = pd.concat([rows(["e1", "e2"], 1).iloc[:1], rows(["e2", "e4"], 2)],
                         ignore_index=True)
    assert expected["count"].isna().sum() == expected["valid"].isna().sum() == 1
    pd.testing.assert_frame_equal(stored, expected)
    finer = rows(["e3"], 3).assign(window_start=START + pd.Timedelta(nanoseconds=500))
    with pytest.raises(ValueError, match="figures: window_start of row 0 .* finer than a "
                                         "microsecond"):
        tables.write_entries("figures", finer, GPU)
    assert sorted(tables.read_table("figures")["entity"]) == ["e1", "e2", "e4"]


def test_rows_outside_the_scope_are_refused(tmp_path):
    tables = Warehouse(tmp_path / "warehouse")
    with pytest.raises(ValueError, match="outside the scope"):
        tables.write_entries(FACTS, facts(CC, [1]), GPU)
    assert not entry_table.is_entry_table(tables, FACTS)


def test_random_landings_fixes_and_removals_equal_a_rebuild(tmp_path):
    """20 seeded random steps over two sources (land new entries, fix, remove, re-land):
    the table equals the facts of the entries alive at the end, built from scratch."""
    tables, rng = Warehouse(tmp_path / "warehouse"), np.random.default_rng(1)
    alive: dict[tuple[str, int], float] = {}  # (source, entity) -> energy_j base
    steps = set()
    for _ in range(20):
        scope = (GPU, CC)[rng.integers(2)]
        source = scope["source"]
        mine = sorted(entity for src, entity in alive if src == source)
        step = rng.choice(["land", "fix", "remove"]) if mine else "land"
        steps.add(str(step))
        if step == "remove":
            gone = rng.choice(mine, size=min(len(mine), 2), replace=False).tolist()
            tables.remove_entries(FACTS, scope, [f"e{entity}" for entity in gone])
            for entity in gone:
                del alive[(source, entity)]
            continue
        entities = (rng.choice(mine, size=1).tolist() if step == "fix"
                    else rng.integers(0, 30, size=3).tolist())
        energy = float(rng.integers(1, 100) * 100)
        entities = sorted(set(entities))
        tables.write_entries(FACTS, facts(scope, entities, energy_j=energy), scope)
        alive.update({(source, entity): energy for entity in entities})
    expected = ordered(pd.concat([facts({"source": source}, [entity], energy_j=energy)
                                  for (source, entity), energy in alive.items()],
                                 ignore_index=True))
    assert steps == {"land", "fix", "remove"} and len(expected) == 2 * len(alive)
    pd.testing.assert_frame_equal(ordered(tables.read_table(FACTS)), expected)


def _commits(tables: Warehouse, table: str) -> int:
    return deltalake.DeltaTable(entry_table._uri(tables, table)).version()


def test_writes_over_the_predicate_limits_are_made_in_parts(tmp_path, monkeypatch):
    """More entries than ``IN_LIMIT`` are written in commits of at most that many, and
    more keys than the limits allow likewise: the tables equal one write of everything,
    and a lookup finds every entry left."""
    monkeypatch.setattr(entry_table, "IN_LIMIT", 3)
    monkeypatch.setattr(entry_table, "OR_LIMIT", 2)
    monkeypatch.setattr(entry_table, "IN_MAX", 9)
    monkeypatch.setattr(entry_table, "OR_MAX", 6)
    tables = Warehouse(tmp_path)
    tables.write_entries(FACTS, facts(GPU, [1, 2, 3, 4, 5, 6, 7]), GPU)
    assert _commits(tables, FACTS) == 3  # version 0 made, then 3 + 3 + 1 entries
    tables.write_entries(FACTS, facts(GPU, [2, 5], energy_j=7.0), GPU,
                         removed=["e1", "e3", "e6", "e7"])
    assert _commits(tables, FACTS) == 5  # 6 entries: 3 + 3
    pd.testing.assert_frame_equal(ordered(tables.read_table(FACTS)), ordered(pd.concat(
        [facts(GPU, [2, 5], energy_j=7.0), facts(GPU, [4])], ignore_index=True)))
    assert entry_table.stored_entries(tables, FACTS, GPU, ["e2", "e4", "e5", "e9"]) == {
        "e2", "e4", "e5"}

    keyed = pd.DataFrame({"root": ["a", "a", "b", "c"], "day": ["d1", "d2", "d1", "d1"],
                          "energy_j": [1.0, 2.0, 3.0, 4.0]})
    entry_table.replace_keys(tables, "keyed", keyed, keyed[["root", "day"]])
    assert _commits(tables, "keyed") == 2  # 3 groups over OR_LIMIT: parts of 2 keys
    entry_table.replace_keys(tables, "keyed", keyed.iloc[[1]].assign(energy_j=9.0),
                             keyed[["root", "day"]].iloc[[0, 1, 3]])
    assert tables.read_table("keyed").sort_values(["root", "day"]).values.tolist() == [
        ["a", "d2", 9.0], ["b", "d1", 3.0]]
    entry_table.keys_predicate(keyed[["root", "day"]])  # 3 terms: within OR_MAX (6)
    with pytest.raises(ValueError, match="over IN_MAX or OR_MAX"):
        entry_table.keys_predicate(pd.DataFrame({"root": list("abcdefg"), "day": "d1"}))

    # one group of 7 keys: pieces of 3, no two in one part; naive midnights compared as
    # the predicate prints them
    days = pd.DataFrame({"root": "a", "day": pd.date_range("2025-01-01", periods=7)})
    parts = list(entry_table.key_parts(days))
    assert [len(part) for part in parts] == [3, 3, 1]
    rows = days.assign(energy_j=1.0)
    keys = days.assign(day=days["day"].map(str))  # as write_keyed gives them
    split = list(entry_table.row_parts("daily", rows, keys))
    assert [(len(part), len(part_rows)) for part, part_rows in split] == [(3, 3), (3, 3), (1, 1)]
    assert pd.concat([part_rows for _, part_rows in split]).equals(rows)  # each row once
    entry_table.replace_keys(tables, "daily", rows, keys)
    entry_table.replace_keys(tables, "daily", rows.iloc[:2].assign(energy_j=2.0), keys)
    assert tables.read_table("daily")["energy_j"].tolist() == [2.0, 2.0]
    # in parts, a row whose key is among none is refused, as one write's delta-rs refuses
    with pytest.raises(ValueError, match="not among the keys"):
        entry_table.replace_keys(tables, "daily", rows.assign(root="b"), keys)
    with pytest.raises(ValueError, match="over IN_MAX"):
        entry_table.predicate(GPU, "entity", [f"e{n}" for n in range(10)])


def test_a_lookup_finds_the_entries_each_prefix_starts_reading_only_files_that_may_hold_one(
        tmp_path, monkeypatch):
    """``stored_entries``: nested prefixes, a prefix equal to an entry, one of no entry
    and an empty one; entries of two sources in one compacted file, and a file of each
    source's own, only the scope's found; a file whose statistics put it outside the
    scope or its entries outside every prefix is not read (the reader is handed only the
    others), with statistics cut short too (``STATISTICS_LENGTH``: still true bounds)."""
    monkeypatch.setattr(entry_table, "STATISTICS_LENGTH", 2)  # "e1".."e51" cut to 2
    tables = Warehouse(tmp_path)
    tables.write_entries(FACTS, facts(GPU, [1, 12, 123, 2, 30]), GPU)
    tables.write_entries(FACTS, facts(CC, [1, 12, 4]), CC)
    entry_table.compact(tables, FACTS)  # one file of both sources
    tables.write_entries(FACTS, facts(GPU, [5, 51]), GPU)  # a file of e5 and e51 only
    tables.write_entries(FACTS, facts(CC, [2, 3]), CC)  # clustercockpit's e2 and e3 only
    lookup = functools.partial(entry_table.stored_entries, tables, FACTS, GPU)
    assert lookup(["e1", "e12", "e30", "e9"]) == {"e1", "e12", "e123", "e30"}
    assert lookup(["e12"]) == {"e12", "e123"}
    assert lookup(["e4"]) == set()  # clustercockpit's only
    assert lookup([""]) == {"e1", "e12", "e123", "e2", "e30", "e5", "e51"}
    assert entry_table.stored_entries(tables, FACTS, CC, ["e1", "e3"]) == {"e1", "e12", "e3"}
    read = []
    dataset = entry_table._dataset
    monkeypatch.setattr(entry_table, "_dataset", lambda warehouse, delta, listed: (
        read.append(len(listed)) or dataset(warehouse, delta, listed)))
    assert lookup(["e2", "e3"]) == {"e2", "e30"}
    # the compacted file only: e5-e51's statistics hold no e2 or e3 entry ("e5".."e6" cut
    # to two characters, the maximum raised), clustercockpit's file no gpu-benchmark row
    assert read == [1]
    assert lookup(["e7", "e9"]) == set()
    assert read == [1]  # no file may hold one: none read
    assert lookup(["e6"]) == set()
    assert read == [1, 1]  # e5-e51's cut maximum, "e6", may hold one: read, none found


def test_a_write_of_25000_entries_and_a_lookup_of_4000_prefixes_keep_the_process_alive(
        tmp_path):
    """At the real limits, in a process of its own: deltalake 1.6.6 killed the process
    (SIGSEGV) parsing an IN list of about 20,000 entries or an OR of about 3,000 prefixes,
    as a GPU day of 6,000 repetitions asked for; a predicate at IN_MAX values, one at
    OR_MAX terms of two columns, and the accounting members' predicate at its largest, a
    part of IN_LIMIT entities of each of four sources (built with its IN lists one OR
    deeper, 10,000 killed the process after a soak history's landing of 10,000 jobs) are
    parsed."""
    script = f"""
import pandas as pd
from joulehouse import entry_table
from joulehouse.accounting import months
from joulehouse.warehouse import Warehouse
tables = Warehouse({str(tmp_path)!r})
rows = pd.DataFrame({{"source": "gpu-benchmark", "entity": [f"r/{{n:05d}}" for n in range(25000)],
                     "energy_j": 1.0}})
tables.write_entries("facts", rows, {{"source": "gpu-benchmark"}})
tables.write_entries("facts", rows.assign(energy_j=2.0), {{"source": "gpu-benchmark"}})
found = entry_table.stored_entries(tables, "facts", {{"source": "gpu-benchmark"}},
                                   [f"r/{{n:05d}}" for n in range(0, 25000, 6)])
# one predicate at IN_MAX values, and one of OR_MAX terms of two columns, as the
# accounting builds them
keys = rows[["source", "entity"]].iloc[:entry_table.IN_MAX]
entry_table.replace_where(tables, "facts", rows.iloc[:entry_table.IN_MAX].assign(energy_j=3.0),
                          entry_table.keys_predicate(keys))
terms = pd.DataFrame({{"source": [f"s{{n}}" for n in range(entry_table.OR_MAX)], "entity": "x"}})
entry_table.replace_where(tables, "facts", rows.iloc[:0], entry_table.keys_predicate(terms))
# the members' predicate of one part (entry_table.key_parts): IN_LIMIT entities a source
jobs = pd.DataFrame({{"kind": "member", "calendar": "utc", "month": "2026-01",
                     "entity": [f"soak/{{6900000 + n}}/1764460957" for n in range(entry_table.IN_LIMIT)]}})
jobs = pd.concat([jobs.assign(source=source) for source in
                  ("clustercockpit", "geopm", "gpu-benchmark", "powerapi")], ignore_index=True)
assert len(list(entry_table.key_parts(jobs[["source", "entity"]]))) == 1
entry_table.replace_where(tables, "members", jobs, None)
entry_table.replace_where(tables, "members", jobs.iloc[:1], months.kept_where(
    jobs[["calendar", "source", "month"]].drop_duplicates(), jobs[["source", "entity"]]))
print(len(tables.read_table("facts")), tables.read_table("facts").energy_j.sum(), len(found),
      len(tables.read_table("members")))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=False, cwd=PROJECT)
    assert done.returncode == 0, done.stderr[-2000:]
    energy_j = 3.0 * entry_table.IN_MAX + 2.0 * (25000 - entry_table.IN_MAX)  # 55,000 J
    assert done.stdout.split() == ["25000", str(energy_j), "4167", "1"]


def test_a_compaction_merges_one_sources_consecutive_small_files_within_its_budget():
    """``_range_to_merge`` from the log's statistics: the most consecutive small files of the
    source (by their lowest entity) whose range the table's files that may hold the source
    add up to at most the rewrite size; files of other sources are not merged, nor a mixed
    one whose rows of the source were not read (one holding the source's rows in the range
    is rewritten, so counted)."""
    files = [  # path, source min/max, entity min/max, bytes
        ("a", "cc", "cc", "c/10", "c/19", 10), ("b", "cc", "cc", "c/20", "c/29", 10),
        ("big", "cc", "cc", "c/30", "c/59", 90),  # small too, and overlapping c
        ("c", "cc", "cc", "c/40", "c/41", 10), ("d", "cc", "cc", "c/60", "c/69", 10),
        ("e", "cc", "cc", "c/70", "c/79", 10), ("f", "cc", "cc", "c/80", "c/89", 10),
        ("gpu", "gpu", "gpu", "c/10", "c/99", 10),  # another source's, same entities
        ("mixed", "cc", "gpu", "c/85", "c/86", 30),
        ("nostats", "cc", "cc", None, None, 5)]  # may hold any entity: always rewritten
    stats = pd.DataFrame(files, columns=["path", "min.source", "max.source", "low", "high",
                                         "size_bytes"])
    alone = (stats["min.source"] == "cc") & (stats["max.source"] == "cc")
    scoped = stats.assign(alone=alone, exact=alone, holds=(stats["min.source"] <= "cc")
                          & (stats["max.source"] >= "cc"))
    low, high, paths = entry_table._range_to_merge(scoped, 100, 100)
    # windows, each with nostats: a..b (25 B), d..f with mixed (65 B: 3 files, the most);
    # a..big, big..c and c..d would rewrite over 100 B
    assert (low, high, paths) == ("c/60", "c/89", {"d", "e", "f", "mixed", "nostats"})
    assert entry_table._range_to_merge(scoped, 100, 15) is None


def test_a_compactions_range_takes_in_whole_the_files_it_touches():
    """A window of two small files touching a larger one of the source alone is widened to
    that file's whole range (none of its rows is left out of the merged ones), and so to
    a third small file; a mixed file whose rows of the source were read is merged as
    theirs (its range theirs, not its statistics')."""
    files = [("a", "c/10", "c/12", 1, True), ("b", "c/11", "c/13", 1, True),
             ("wide", "c/05", "c/20", 50, True), ("z", "c/18", "c/19", 1, True),
             ("read", "c/30", "c/31", 1, True), ("read2", "c/32", "c/33", 1, True),
             ("far", "c/40", "c/41", 1, True)]
    scoped = pd.DataFrame(files, columns=["path", "low", "high", "size_bytes", "exact"]).assign(
        alone=[True, True, True, True, False, False, True], holds=True)
    assert entry_table._range_to_merge(scoped, 10, 53) == ("c/05", "c/20",
                                                            {"a", "b", "wide", "z"})
    assert entry_table._range_to_merge(scoped, 10, 50) == ("c/30", "c/41",
                                                            {"read", "read2", "far"})


DAYS = "days"


def day_rows(source: str, days: list[int]) -> pd.DataFrame:
    """Roll-up-like rows: per day of March 2025, two calendars, in the writer's order."""
    return pd.DataFrame([{"source": source, "day": pd.Timestamp(2025, 3, day),
                          "calendar": calendar, "energy_j": day + len(calendar) / 10}
                         for day in days for calendar in ("Europe/Berlin", "UTC")])


def test_an_ordered_merge_by_a_time_column_keeps_the_days_consecutive(tmp_path):
    """Days landed one file a (source, day), and one file of both sources (a run landing
    two): ``merge_scope`` of source a by ``day`` merges its small files, the one of both
    sources too (its rows of a read), into a file of a's days in order, b's rows of that
    file after them; b's own files untouched; every row as before, to the bit; files of
    ``target_file_bytes`` and the small size a quarter of it."""
    tables = Warehouse(tmp_path)
    for day in (3, 1, 2, 5):
        entry_table.replace_where(tables, DAYS, day_rows("a", [day]), "")
        entry_table.replace_where(tables, DAYS, day_rows("b", [day]), "")
    entry_table.replace_where(tables, DAYS, pd.concat([day_rows("a", [4]), day_rows("b", [4])]),
                              "")
    before = tables.read_table(DAYS)
    b_files = set(entry_table.file_stats(tables, DAYS).query("`min.source` == 'b'")["path"])
    assert entry_table.small_files_by(tables, DAYS, "source", {}, 2**16) == {"a": 5, "b": 5}
    assert entry_table.small_files_by(tables, DAYS, "source", {}, 1000) == {"a": 0, "b": 0}
    merged = entry_table.merge_scope(tables, DAYS, {"source": "a"}, "day",
                                     ["day", "calendar"], 2**16)
    assert merged == {"added": 1, "merged": 5}
    stats = entry_table.file_stats(tables, DAYS)
    assert b_files <= set(stats["path"]) and len(stats) == 5
    [path] = set(stats["path"]) - b_files
    rows = pd.read_parquet(tmp_path / DAYS / path)
    assert rows["source"].tolist() == ["a"] * 10 + ["b"] * 2
    assert rows["day"].dt.day.tolist()[:10] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert rows["calendar"].tolist()[:2] == ["Europe/Berlin", "UTC"]
    keys = ["source", "day", "calendar"]
    pd.testing.assert_frame_equal(tables.read_table(DAYS).sort_values(keys, ignore_index=True),
                                  before.sort_values(keys, ignore_index=True), check_exact=True)
    assert entry_table.merge_scope(tables, DAYS, {"source": "a"}, "day") is None  # one left


def test_long_keys_keep_whole_statistics_so_their_small_files_merge(tmp_path):
    """GPU-like keys sharing a prefix of 69 characters: deltalake's default cut its string
    statistics to 64, so every file spanned the same range and no merge window fit. Each
    file's log statistics are the whole keys, and the 8 small files merge."""
    tables = Warehouse(tmp_path)
    prefix = "lab/an-experiment-with-a-rather-long-name/benchmark-name-here/run-000"
    assert len(prefix) == 69
    for repetition in range(8):  # a file each
        tables.write_entries(FACTS, facts(GPU, [repetition]).assign(
            entity=f"{prefix}/{repetition}"), GPU)
    stats = entry_table.file_stats(tables, FACTS).sort_values("min.entity")
    assert stats["min.entity"].tolist() == [f"{prefix}/{n}" for n in range(8)]
    assert stats["max.entity"].tolist() == stats["min.entity"].tolist()
    assert entry_table.merge_scope(tables, FACTS, GPU, target_file_bytes=2**16) == {
        "added": 1, "merged": 8}
    [path] = entry_table.file_stats(tables, FACTS)["path"]  # compressed as by default
    column = pq.ParquetFile(tmp_path / FACTS / path).metadata.row_group(0).column(0)
    assert column.compression == "SNAPPY"


def test_a_sources_compaction_leaves_the_other_sources_files_alone(store):
    """GPU's 4 files merged into one of GPU's rows alone; ClusterCockpit's 4 untouched,
    every row kept. On a path and on S3 (moto)."""
    tables = store
    for entity in range(4):  # a file each
        tables.write_entries(FACTS, facts(GPU, [entity]), GPU)
        tables.write_entries(FACTS, facts(CC, [entity]), CC)
    before = set(entry_table.file_stats(tables, FACTS).query(
        "`min.source` == 'clustercockpit'")["path"])
    figures = entry_table.compact_scope(tables, FACTS, GPU)
    assert (figures["added"], figures["merged"]) == (1, 4)
    assert entry_table.small_files(tables, FACTS, GPU) == 1
    assert entry_table.small_files(tables, FACTS, CC) == 4
    stats = entry_table.file_stats(tables, FACTS)
    assert set(stats["min.source"]) == set(stats["max.source"]) == {"gpu-benchmark",
                                                                     "clustercockpit"}
    assert (stats["min.source"] == stats["max.source"]).all()  # every file one source's
    assert before <= set(stats["path"])  # ClusterCockpit's 4 files untouched
    pd.testing.assert_frame_equal(ordered(tables.read_table(FACTS)), ordered(pd.concat(
        [facts(GPU, [0, 1, 2, 3]), facts(CC, [0, 1, 2, 3])], ignore_index=True)))


def test_files_of_several_sources_in_a_compactions_range(tmp_path, monkeypatch):
    """Files an ``optimize`` of every source wrote (as compactions did before sources wrote
    at once). One of ClusterCockpit's and PowerAPI's rows, whose statistics span GPU
    ("clustercockpit".."powerapi") and GPU's entities e0..e2, holds none of GPU's: GPU's
    compaction of e10 and e11 counts its rows and leaves it alone. One holding GPU's e1 is
    rewritten by GPU's compaction of e0 and e2, and delta-rs writes its other rows into
    the merged file too: every row listed once, in a file of the three sources."""
    monkeypatch.setattr(entry_table, "SCOPE_SMALL_BYTES", 10**6)
    papi = {"source": "powerapi"}
    tables = Warehouse(tmp_path)
    tables.write_entries(FACTS, facts(CC, [0, 1, 2]), CC)
    tables.write_entries(FACTS, facts(papi, [0, 1, 2]), papi)
    entry_table.compact(tables, FACTS)  # one file of both sources
    [other] = entry_table.file_stats(tables, FACTS)["path"]
    for entity in (10, 11):  # "e10", "e11": within its entities e0..e2
        tables.write_entries(FACTS, facts(GPU, [entity]), GPU)
    stats = entry_table.file_stats(tables, FACTS)  # a budget for GPU's 2 files alone
    monkeypatch.setattr(entry_table, "REWRITE_BYTES",
                        int(stats.loc[stats["path"] != other, "size_bytes"].sum()))
    assert entry_table.compact_scope(tables, FACTS, GPU)["merged"] == 2  # GPU's 2 files
    assert other in set(entry_table.file_stats(tables, FACTS)["path"])
    monkeypatch.undo()
    monkeypatch.setattr(entry_table, "SCOPE_SMALL_BYTES", 10**6)

    tables.write_entries(FACTS, facts(GPU, [1]), GPU)
    entry_table.compact(tables, FACTS)  # one file of the three sources, GPU's e1 in it
    for entity in (0, 2):
        tables.write_entries(FACTS, facts(GPU, [entity]), GPU)
    assert entry_table.compact_scope(tables, FACTS, GPU) == {"added": 1, "merged": 3,
                                                             "removed": 0}
    stats = entry_table.file_stats(tables, FACTS)
    assert stats[["min.source", "max.source", "num_records"]].values.tolist() == [
        ["clustercockpit", "powerapi", 22]]
    pd.testing.assert_frame_equal(ordered(tables.read_table(FACTS)), ordered(pd.concat(
        [facts(GPU, [0, 1, 2, 10, 11]), facts(CC, [0, 1, 2]), facts(papi, [0, 1, 2])],
        ignore_index=True)))


def test_hidden_tables_kept_per_entry_are_no_readers_tables(tmp_path):
    """A step's hidden state kept per entry (``_accounting_members``) is not listed among
    the warehouse's tables, so ``joulehouse sql`` makes no view over it."""
    tables = Warehouse(tmp_path)
    tables.write_entries(FACTS, facts(GPU, [1]), GPU)
    tables.write_entries("_accounting_members", facts(GPU, [1]), GPU)
    assert set(tables.table_files()) == {FACTS}
