"""The accounting's tables compacted and vacuumed by its own steps (``compaction.py``): their
files stay few, every merged file holds a source's consecutive days (entities), the rows
stay the same to the bit, the incremental updates after a compaction or a vacuum still
equal the accounting from scratch and see no change, and a failed merge changes nothing."""

import collections
import dataclasses

import deltalake
import numpy as np
import pandas as pd
import pytest

from joulehouse import entry_table, filestats
from joulehouse.accounting import compaction, generator, incremental, kept
from joulehouse.accounting.schemas import FACT_COLUMNS, ROLLUP_KEYS
from joulehouse.warehouse import Warehouse
from tests.accounting.test_incremental import (
    SOURCES,
    accounted,
    assert_as_from_scratch,
    inputs,
    land,
    pool,
)
from tests.accounting.test_kept import UPDATES, build
from tests.test_entry_table import age_the_log

#: Small files of a source above which its files are merged, in these tests.
ABOVE = 3
KEYS = {incremental.DAILY_TABLE: ["calendar", "source", "day", *ROLLUP_KEYS],
        incremental.MONTHLY_TABLE: ["calendar", "source", "month", *ROLLUP_KEYS],
        incremental.CARBON_TABLE: FACT_COLUMNS, incremental.COST_TABLE: FACT_COLUMNS,
        incremental.kept_months.MEMBERS_TABLE: incremental.kept_months.COLUMNS}


def stored(store: Warehouse) -> dict[str, pd.DataFrame]:
    """The accounting's tables as stored, each sorted by its keys."""
    return {table: store.read_table(table).sort_values(keys, ignore_index=True)
            for table, keys in KEYS.items()}


def file_counts(store: Warehouse, tables) -> dict[str, int]:
    return {table: len(entry_table.files(store, table)) for table in tables}


def test_the_tables_files_stay_few_and_equal_a_rebuild_after_random_landings(tmp_path,
                                                                                monkeypatch):
    """10 runs, each landing two new entities (of two sources: a file of both), every
    fifth a fix moving an entity's facts by days and a removal: merged once over ABOVE
    small files of a source, twice each, the per-fact tables hold at most 6 files after
    any run, where they would hold 9 (in general at most 4 sources x (ABOVE + 1) and one
    of several), every table at most 6, and every table equals the accounting from scratch
    after compactions (after each fix); the hidden state stays 1 file."""
    monkeypatch.setattr(compaction, "COMPACT_ABOVE", ABOVE)
    rng = np.random.default_rng(28)
    store = Warehouse(tmp_path / "warehouse")
    facts = pool(52, seed=3)
    entities = list(facts["entity"].unique())
    land(store, facts[facts["entity"].isin(entities[:32])])
    given = inputs(tmp_path, base=350.0, price=1.0)
    incremental.update(store, given)
    merged, most = collections.Counter(), collections.Counter()
    for run in range(10):
        fresh = entities[32 + 2 * run: 34 + 2 * run]
        rows, removed = facts[facts["entity"].isin(fresh)], {}
        if run % 5 == 4:
            now = store.read_table("energy_facts")
            fixed, gone = rng.choice(sorted(set(now["entity"]) - set(fresh)), 2, replace=False)
            moved = now[now["entity"] == fixed]
            days = pd.Timedelta(days=int(rng.integers(1, 6)))
            rows = pd.concat([rows, moved.assign(window_start=moved["window_start"] + days,
                                                 window_end=moved["window_end"] + days,
                                                 energy_j=moved["energy_j"] * 1.5)])
            removed = {now.loc[now["entity"] == gone, "source"].iloc[0]: [gone]}
        land(store, rows, removed)
        assert incremental.update(store, given).whole == ""
        done = compaction.compact_if_due(store, compaction.ACCOUNTING)
        merged.update(table for table, figures in done.items() if figures.get("merged"))
        most |= collections.Counter(file_counts(store, compaction.ACCOUNTING))
        if run % 5 == 4:
            assert_as_from_scratch(store, given)
    assert merged[incremental.CARBON_TABLE] == merged[incremental.COST_TABLE] == 2
    assert most[incremental.CARBON_TABLE] == most[incremental.COST_TABLE] == 6
    assert max(most.values()) <= 6 < len(SOURCES) * (ABOVE + 1) + 1
    # inputs, replaced in place (no cc_jobs: no jobs' digests)
    assert len(store.files(incremental.STATE_TABLE)) == 1


def test_a_day_a_landing_leaves_few_files_each_of_consecutive_days(tmp_path, monkeypatch):
    """A GPU repetition lands a day for 8 days (a new day a run: a daily file more each),
    across the month's end: merged once over ABOVE, accounting_daily holds at most 3 files
    (8 without), each of one source's consecutive days; a fix of one day then reads
    energy_facts for that day's fact alone, and the tables equal a rebuild."""
    monkeypatch.setattr(compaction, "COMPACT_ABOVE", ABOVE)
    store = Warehouse(tmp_path / "warehouse")
    given = inputs(tmp_path, base=350.0, price=1.0)

    def day(number: int) -> pd.DataFrame:
        start = pd.Timestamp("2024-01-28 11:00") + pd.Timedelta(days=number)
        return entry_table.to_microseconds(generator.facts(
            1, str(start), "1h", seed=number, sources=("gpu-benchmark",))).assign(
            entity=f"r/day/{number:02d}")

    most = 0
    for number in range(8):  # 28 January to 4 February
        land(store, day(number))
        incremental.update(store, given)
        compaction.compact_if_due(store, compaction.ACCOUNTING)
        most = max(most, len(entry_table.files(store, incremental.DAILY_TABLE)))
    assert most == 3
    for info in entry_table.files(store, incremental.DAILY_TABLE):
        days = pd.read_parquet(info.path, filesystem=store.filesystem)["day"].unique()
        assert (days.max() - days.min()).days + 1 == len(days)  # consecutive
    land(store, day(5).assign(energy_j=lambda f: f["energy_j"] * 2))  # 2 February
    updated = incremental.update(store, given)
    assert (updated.whole, updated.changed, updated.facts_read) == ("", 1, 1)
    assert_as_from_scratch(store, given)


def test_a_months_days_are_read_from_its_files_alone_after_merges(tmp_path, monkeypatch):
    """Daily rows at scale (two sources, 1,000 rows a source and day, a file each, 40 days
    from 1 January) merged in the daily layout at 128 KiB files until none is due: each
    file holds one source's consecutive days, and the files that may hold one source's
    February (``filestats.holding``, as a landing lists them) hold under 1.4 times its
    rows; an ``optimize.compact`` makes one file of both sources' every day."""
    monkeypatch.setattr(compaction, "COMPACT_ABOVE", ABOVE)
    store = Warehouse(tmp_path)
    rng = np.random.default_rng(1)
    table = incremental.DAILY_TABLE
    for number in range(40):
        for source in ("geopm", "gpu-benchmark"):
            entry_table.replace_where(store, table, pd.DataFrame({
                "source": source, "day": pd.Timestamp("2024-01-01") + pd.Timedelta(days=number),
                "calendar": np.repeat(["Europe/Berlin", "UTC"], 500),
                "user": [f"u{n}" for n in range(500)] * 2,
                "energy_j": rng.uniform(0, 1e6, 1000)}), "", incremental.FILE_BYTES)
    layout = dataclasses.replace(compaction.LAYOUTS[table], file_bytes=2**17)
    merges = 0
    while compaction.merged(store, layout):
        merges += 1
    assert merges >= 4 and len(entry_table.files(store, table)) <= 16
    for info in entry_table.files(store, table):
        rows = pd.read_parquet(info.path)
        days = rows["day"].unique()
        assert rows["source"].nunique() == 1 and (days.max() - days.min()).days + 1 == len(days)
    february = pd.date_range("2024-02-01", "2024-02-09")
    stats = entry_table.file_stats(store, table)
    listed = filestats.holding(store, table, {"source": ["geopm"], "day": february})
    read = stats.loc[stats["path"].isin({f.path.rsplit("/", 1)[-1] for f in listed}),
                     "num_records"].sum()
    assert len(february) * 1000 <= read < 1.4 * len(february) * 1000
    entry_table.compact(store, table)
    assert len(filestats.holding(store, table, {"source": ["geopm"], "day": february})) == 1
    assert entry_table.file_stats(store, table)["num_records"].sum() == 80_000


def test_a_compaction_and_a_vacuum_change_no_row_and_no_update_sees_a_change(tmp_path,
                                                                             monkeypatch):
    """A source's small files merged in each table (COMPACT_ABOVE 0; members: files of both
    kinds, their months' rows written after), then every file unlisted for 8 days
    vacuumed: the tables read the same to the bit, the next update changes nothing and is
    not whole (the state names energy_facts' files, never these), and a landing after it
    is accounted as from scratch."""
    store, facts, entities, given = accounted(tmp_path, landed=20)
    for entity in entities[20:25]:
        land(store, facts[facts["entity"] == entity])
        incremental.update(store, given)
    before, files = stored(store), file_counts(store, compaction.ACCOUNTING)
    monkeypatch.setattr(compaction, "COMPACT_ABOVE", 0)
    done = compaction.compact_if_due(store, compaction.ACCOUNTING)
    assert set(done) == set(compaction.ACCOUNTING)  # each merged a source's files
    assert done[incremental.CARBON_TABLE]["merged"] > 1
    assert file_counts(store, compaction.ACCOUNTING)[incremental.CARBON_TABLE] < files[
        incremental.CARBON_TABLE]
    for table, rows in stored(store).items():
        pd.testing.assert_frame_equal(rows, before[table], check_exact=True, obj=table)
    updated = incremental.update(store, given)  # the first after the merge: no change seen
    assert (updated.whole, updated.changed) == ("", 0)
    for table in compaction.ACCOUNTING:
        age_the_log(store.table_dir(table), hours=8 * 24)
    monkeypatch.setattr(compaction, "VACUUM_EVERY", 1)
    vacuumed = compaction.compact_if_due(store, compaction.ACCOUNTING)
    assert vacuumed[incremental.CARBON_TABLE]["removed"] == done[incremental.CARBON_TABLE][
        "merged"]  # the files its first merge replaced, unlisted 8 days
    for table, rows in stored(store).items():
        pd.testing.assert_frame_equal(rows, before[table], check_exact=True, obj=table)
    updated = incremental.update(store, given)
    assert (updated.whole, updated.changed, updated.removed) == ("", 0, 0)
    land(store, facts[facts["entity"].isin(entities[25:])])
    assert incremental.update(store, given).whole == ""
    assert_as_from_scratch(store, given)


def test_a_failed_merge_leaves_the_tables_as_they_were(tmp_path, monkeypatch):
    """The merge's overwrite fails (the store went away): every table reads as before, the
    next update sees no change, and the merge done again succeeds."""
    store = Warehouse(tmp_path / "warehouse")
    facts = pool(20, seed=9)
    entities = facts["entity"].unique()
    given = inputs(tmp_path, base=350.0, price=1.0)
    for part in np.array_split(entities, 4):
        land(store, facts[facts["entity"].isin(part)])
        incremental.update(store, given)
    before = stored(store)
    monkeypatch.setattr(compaction, "COMPACT_ABOVE", 0)
    write = deltalake.write_deltalake

    def refused(*args, **kwargs):
        raise OSError("the store went away")

    monkeypatch.setattr(deltalake, "write_deltalake", refused)
    with pytest.raises(OSError, match="went away"):
        compaction.compact_if_due(store, compaction.ACCOUNTING)
    monkeypatch.setattr(deltalake, "write_deltalake", write)
    for table, rows in stored(store).items():
        pd.testing.assert_frame_equal(rows, before[table], check_exact=True, obj=table)
    assert incremental.update(store, given).changed == 0
    assert compaction.compact_if_due(store, compaction.ACCOUNTING)
    assert_as_from_scratch(store, given)


KEPT_TABLES = [kept.TRUST_TABLE, kept.WASTE_TABLE, kept.WASTE_WEEKLY_TABLE, kept.QUALITY_TABLE]


def test_the_kept_tables_compacted_equal_their_whole_computation(tmp_path, monkeypatch):
    """trust_checks, waste, waste_weekly and fact_quality while a new GPU repetition and a
    new job land at each of 6 steps (the first as built; a file more a step and table),
    merged once over one small file of a source: equal to their computation from scratch
    at every step, merged, and their files at most 5 after any step (fact_quality: a file
    a source, and one new), where fact_quality would hold 10 and trust_checks 6."""
    monkeypatch.setattr(compaction, "COMPACT_ABOVE", 1)
    store = Warehouse(tmp_path / "warehouse")
    world, jobs = build(store, 28)
    merged, most = collections.Counter(), collections.Counter()
    for n in range(6):
        if n:
            world.gpu(100 + n)
            jobs.append(world.job(5000 + n))
            world.land()
        for update, check in UPDATES.values():
            update(store)
            done = compaction.compact_if_due(store, KEPT_TABLES)
            merged.update(table for table, figures in done.items() if figures.get("merged"))
            check(store)
        most |= collections.Counter(file_counts(store, KEPT_TABLES))
    assert {kept.TRUST_TABLE, kept.WASTE_TABLE, kept.QUALITY_TABLE} <= set(merged)
    assert max(most.values()) == most[kept.QUALITY_TABLE] == 5
