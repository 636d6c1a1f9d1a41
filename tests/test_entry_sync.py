"""Tables kept per entry by one writer (joulehouse/entry_sync.py, entry_table.write_keyed and
read_where): without a scope, a write replaces and removes entries by their column alone."""

import pandas as pd
import pyarrow.compute as pc
import pytest

from joulehouse import entry_sync, entry_table
from joulehouse.warehouse import Warehouse

KEPT = entry_sync.Kept("jobs", ["job", "note", "energy_j"], entry="job")
#: Jobs ``<block>/<n>`` belong to their block.
BY_BLOCK = entry_sync.Ownership(prefix=lambda block: f"{block}/",
                                owner_of=lambda job: job.rsplit("/", 1)[0])


def rows(energies: dict[str, float], note: str | None = None) -> pd.DataFrame:
    return pd.DataFrame({"job": list(energies), "note": [note] * len(energies),
                         "energy_j": list(energies.values())})


def stored(tables: Warehouse) -> dict[str, float]:
    table = KEPT.stored(tables)
    return dict(zip(table["job"], table["energy_j"], strict=True))


def test_owners_rows_replaced_and_their_lost_entries_removed_without_a_scope(tmp_path):
    tables = Warehouse(tmp_path)
    # a first write whose text column holds no value: typed as text, not as Arrow's null
    entry_sync.replace_owned(tables, KEPT, rows({"a/1": 1.0, "a/2": 2.0, "b/1": 3.0}),
                             ["a", "b"], BY_BLOCK)
    written = entry_sync.replace_owned(tables, KEPT, rows({"a/1": 1.5}, note="fixed"), ["a"],
                                       BY_BLOCK)
    assert (written.entities, written.removed) == (1, 1)
    assert stored(tables) == {"a/1": 1.5, "b/1": 3.0}
    assert KEPT.count(tables) == 2
    assert entry_table.read_where(tables, "jobs", pc.field("energy_j") > 2)["job"].tolist() == [
        "b/1"]


def test_sync_writes_only_the_entries_that_differ(tmp_path):
    tables = Warehouse(tmp_path)
    first = entry_sync.sync(tables, KEPT, rows({"a/1": 1.0, "a/2": 2.0}), KEPT.stored(tables))
    assert (first.entities, first.removed) == (2, 0)
    version = entry_table._open(tables, "jobs").version()
    same = entry_sync.sync(tables, KEPT, KEPT.stored(tables), KEPT.stored(tables))
    assert (same.entities, same.removed) == (0, 0)
    assert entry_table._open(tables, "jobs").version() == version  # nothing committed
    changed = entry_sync.sync(tables, KEPT, rows({"a/1": 1.0, "c/1": 4.0}), KEPT.stored(tables))
    assert (changed.entities, changed.removed) == (1, 1)
    assert stored(tables) == {"a/1": 1.0, "c/1": 4.0}


def test_each_table_is_compacted_once_it_has_many_small_files(tmp_path, monkeypatch):
    tables = Warehouse(tmp_path)
    monkeypatch.setattr(entry_sync, "COMPACT_ABOVE", 2)
    for block in "abc":
        entry_sync.replace_owned(tables, KEPT, rows({f"{block}/1": 1.0}), [block], BY_BLOCK)
        done = entry_sync.compact_each(tables, [KEPT])
    assert list(done) == ["jobs"] and done["jobs"]["merged"] == 3
    assert len(entry_table.files(tables, "jobs")) == 1
    assert stored(tables) == {"a/1": 1.0, "b/1": 1.0, "c/1": 1.0}


def test_many_changed_entries_replace_an_unscoped_table_whole(tmp_path, monkeypatch):
    tables = Warehouse(tmp_path)
    entry_sync.sync(tables, KEPT, rows({"a/1": 1.0, "a/2": 2.0}), KEPT.stored(tables))
    monkeypatch.setattr(entry_sync, "WHOLE_ABOVE", 1)
    written = entry_sync.sync(tables, KEPT, rows({"b/1": 3.0}), KEPT.stored(tables))
    assert written.whole and (written.entities, written.removed) == (1, 2)
    assert stored(tables) == {"b/1": 3.0}


def test_a_null_entry_is_refused_before_anything_is_written(tmp_path):
    tables = Warehouse(tmp_path)
    entry_table.write_keyed(tables, "jobs", rows({"a/1": 1.0}), "job")
    for given, removed in ((rows({"a/2": 2.0}).assign(job=[None]), ()), (rows({}), [None])):
        with pytest.raises(ValueError, match="jobs: entries of job must not be null"):
            entry_table.write_keyed(tables, "jobs", given, "job", removed=removed)
    assert stored(tables) == {"a/1": 1.0}
