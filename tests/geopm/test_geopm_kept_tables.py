"""geopm_region_energy and geopm_report_energy kept per entry (joulehouse/geopm/tables.py):
a report given twice counts once under its first key, whether the copy lands before or
after the original and when the original is removed; after a seeded random sequence of
landings, re-landings and removals the tables equal a rebuild from scratch, row for row."""

import random

import pandas as pd
import pytest

from joulehouse.geopm import tables as kept
from joulehouse.geopm.store import FRAME_SCHEMAS, TABLE, distinct_reports, stored_frame_keys
from joulehouse.warehouse import Warehouse
from tests.geopm.test_geopm_given_twice import LEGACY, YAML, _store
from tests.kept_stops import stop_at_commit


def remove(tables: Warehouse, key: str) -> None:
    for name in FRAME_SCHEMAS:
        tables.remove_partition(f"{TABLE}/{name}", key)


def assert_rebuilt(tables: Warehouse) -> list[str]:
    """Each table equals what a rebuild from every stored report writes; the keys counted."""
    counted, _ = distinct_reports(tables, stored_frame_keys(tables))
    for table, rows in zip((kept.REGIONS, kept.REPORTS), kept.whole(tables, counted),
                           strict=True):
        by = [c for c in ("report", "region", "hash", "section") if c in table.columns]
        stored, rows = table.stored(tables), table.ready(rows)
        assert len(stored) == len(rows), table.table
        if len(rows):
            pd.testing.assert_frame_equal(
                stored.sort_values(by, ignore_index=True), rows.sort_values(by, ignore_index=True),
                check_dtype=False, obj=table.table)
    return sorted(set(kept.REPORTS.stored(tables)["report"]))


def land(tables: Warehouse, keys: list[str]) -> kept.Landed:
    stored = set(stored_frame_keys(tables))
    return kept.land(tables, keys, [key for key in keys if key in stored])


def test_a_copy_counts_once_under_the_first_key_landing_before_or_after_it(tmp_path):
    tables = Warehouse(tmp_path / "warehouse")
    _store(tables, "b/copy", YAML)  # the copy lands first: alone, it counts
    land(tables, ["b/copy"])
    assert assert_rebuilt(tables) == ["b/copy"]
    _store(tables, "a/yaml", YAML)  # the original, first in key order, lands after it
    landed = land(tables, ["a/yaml"])
    assert landed.twice == {"b/copy": "a/yaml"} and landed.reports.removed == 1
    assert assert_rebuilt(tables) == ["a/yaml"]
    _store(tables, "c/copy", YAML)  # a copy after the original: nothing of it counts
    landed = land(tables, ["c/copy"])
    assert landed.twice == {"b/copy": "a/yaml", "c/copy": "a/yaml"}
    assert assert_rebuilt(tables) == ["a/yaml"]
    remove(tables, "a/yaml")  # the original removed: the first copy counts again
    land(tables, ["a/yaml"])
    assert assert_rebuilt(tables) == ["b/copy"]


@pytest.mark.parametrize("stop", [1, 2, 3, "then"])
def test_a_landing_stopped_before_its_last_commit_ends_as_a_rebuild_once_run_again(
        tmp_path, monkeypatch, stop):
    """The first key of a content fixed to other content, the landing stopped at its
    ``stop``-th commit (or in ``then``, the facts' write): the next run over it still
    rewrites the copy's rows and gives it to ``then``, as it now counts."""
    tables = Warehouse(tmp_path / "warehouse")
    for key in ("a/yaml", "b/copy"):
        _store(tables, key, YAML)
    land(tables, ["a/yaml", "b/copy"])
    _store(tables, "a/yaml", LEGACY)
    def killed(landed: kept.Landed) -> None:
        raise RuntimeError("killed")

    stop_at_commit(monkeypatch, stop)
    with pytest.raises(RuntimeError):
        kept.land(tables, ["a/yaml"], ["a/yaml"], **({"then": killed} if stop == "then" else {}))
    monkeypatch.undo()
    owners = []
    kept.land(tables, ["a/yaml"], ["a/yaml"], then=lambda landed: owners.extend(landed.owners))
    assert assert_rebuilt(tables) == ["a/yaml", "b/copy"]
    assert owners == ["a/yaml", "b/copy"]


def test_random_landings_relandings_and_removals_equal_a_rebuild(tmp_path):
    rng = random.Random(28)
    tables = Warehouse(tmp_path / "warehouse")
    contents = [YAML, LEGACY]
    keys = ["a/one", "b/two", "c/three", "d/four"]
    for step in range(8):
        key = rng.choice(keys)
        if step and rng.random() < 0.3 and key in stored_frame_keys(tables):
            remove(tables, key)
        else:  # a landing, or a re-landing with other content
            _store(tables, key, rng.choice(contents))
        if rng.random() < 0.2:  # the daily rebuild
            kept.rebuild(tables, stored_frame_keys(tables))
        else:
            land(tables, [key])
        assert_rebuilt(tables)
