"""energy_facts kept per entry (joulehouse/facts_entries.py): a run's owners' facts replaced,
their stale entities removed, a sync writing only what differs, and random sequences of
landings, fixes, re-landings and removals equal to a rebuild from scratch."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import pytest

from joulehouse import entry_table, facts_entries
from joulehouse.clustercockpit.energy import FACTS_OWNERSHIP as CC_OWNERSHIP
from joulehouse.facts import ENERGY_FACTS_COLUMNS
from joulehouse.gpu.energy import FACTS_OWNERSHIP as GPU_OWNERSHIP
from joulehouse.warehouse import Warehouse

TABLE = facts_entries.TABLE
START = pd.Timestamp("2025-03-01 10:00", tz="UTC")


def job_facts(jobs: dict[str, float], source: str = "clustercockpit") -> pd.DataFrame:
    """A node fact (method power) per job key -> energy (J), its window a job's own; the
    window end a start plus float seconds, 0.3 µs past a microsecond, as a source
    computes it."""
    rows = [{"source": source, "entity": job, "component": "node",
             "window_start": START + pd.Timedelta(minutes=zlib.crc32(job.encode()) % 10_000),
             "window_end": START + pd.Timedelta(minutes=zlib.crc32(job.encode()) % 10_000)
             + pd.to_timedelta(60.0000003, "s"),
             "duration_s": 60.0000003, "energy_j": energy, "method": "power"}
            for job, energy in sorted(jobs.items())]
    return pd.DataFrame(rows, columns=ENERGY_FACTS_COLUMNS)


def stored(tables: Warehouse, source: str = "clustercockpit") -> pd.DataFrame:
    facts = tables.read_table(TABLE)
    return facts[facts["source"] == source].sort_values("entity", ignore_index=True)


def expected(jobs: dict[str, float]) -> pd.DataFrame:
    return entry_table.to_microseconds(job_facts(jobs)).sort_values("entity", ignore_index=True)


def test_a_blocks_facts_are_replaced_and_its_stale_jobs_removed(tmp_path):
    tables = Warehouse(tmp_path)
    jobs = {"fritz/12000/1": 1.0, "fritz/12999/2": 2.0, "fritz/120/3": 3.0, "fritz/5/4": 4.0}
    facts_entries.replace_owned(tables, "clustercockpit", job_facts(jobs),
                                ["fritz/12", "fritz/0"], CC_OWNERSHIP)
    pd.testing.assert_frame_equal(stored(tables), expected(jobs))
    assert stored(tables)["window_end"].dt.nanosecond.eq(0).all()  # rounded, not refused

    # block fritz/12 read again: job 12999 gone, 12000 fixed; fritz/120 (block 0) untouched
    # although its key starts with the block's prefix
    again = {"fritz/12000/1": 10.0}
    written = facts_entries.replace_owned(tables, "clustercockpit", job_facts(again),
                                          ["fritz/12"], CC_OWNERSHIP)
    assert (written.entities, written.removed, written.rows) == (1, 1, 1)
    pd.testing.assert_frame_equal(stored(tables), expected(
        {"fritz/12000/1": 10.0, "fritz/120/3": 3.0, "fritz/5/4": 4.0}))

    # block 0 gives nothing now: both its jobs removed, whatever their number of digits
    written = facts_entries.replace_owned(tables, "clustercockpit", pd.DataFrame(),
                                          ["fritz/0"], CC_OWNERSHIP)
    assert (written.entities, written.removed) == (0, 2)
    pd.testing.assert_frame_equal(stored(tables), expected({"fritz/12000/1": 10.0}))


def test_rows_outside_the_owners_or_the_source_are_refused(tmp_path):
    tables = Warehouse(tmp_path)
    with pytest.raises(ValueError, match="no owner given owns: \\['fritz/13000/1'\\]"):
        facts_entries.replace_owned(tables, "clustercockpit", job_facts({"fritz/13000/1": 1.0}),
                                    ["fritz/12"], CC_OWNERSHIP)
    with pytest.raises(ValueError, match="rows of \\['geopm'\\] given as clustercockpit's"):
        facts_entries.sync(tables, "clustercockpit", job_facts({"a/1/1": 1.0}, "geopm"))
    assert tables.read_table(TABLE).empty


def test_a_sync_writes_only_the_entities_that_differ(tmp_path, monkeypatch):
    tables = Warehouse(tmp_path)
    jobs = {f"c/{n}/0": float(n) for n in range(1, 7)}
    first = facts_entries.sync(tables, "clustercockpit", job_facts(jobs))
    assert (first.entities, first.removed, first.rows) == (6, 0, 6)
    version = entry_table._open(tables, TABLE).version()
    same = facts_entries.sync(tables, "clustercockpit", job_facts(jobs))
    assert (same.entities, same.removed) == (0, 0)
    assert entry_table._open(tables, TABLE).version() == version  # nothing to commit

    changed = {**{k: v for k, v in jobs.items() if k != "c/2/0"}, "c/3/0": 30.0, "c/9/0": 9.0}
    written = facts_entries.sync(tables, "clustercockpit", job_facts(changed))
    assert (written.entities, written.removed, written.rows) == (2, 1, 2)  # c/3, c/9; c/2
    assert entry_table._open(tables, TABLE).version() == version + 1
    pd.testing.assert_frame_equal(stored(tables), expected(changed))

    monkeypatch.setattr(facts_entries, "WHOLE_ABOVE", 1)  # many changed: replaced whole
    written = facts_entries.sync(tables, "clustercockpit", job_facts({"c/1/0": 5.0, "c/4/0": 4.5}))
    assert written.whole and written.removed == 4  # c/3, c/5, c/6, c/9
    pd.testing.assert_frame_equal(stored(tables), expected({"c/1/0": 5.0, "c/4/0": 4.5}))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_landings_fixes_relandings_and_removals_equal_a_rebuild(tmp_path, seed):
    """Blocks of jobs landed, re-read with jobs fixed, added or gone, and blocks deleted
    (a sync without them), through both writes; another source's rows beside them; after
    each step the table equals the facts of what each block holds now."""
    rng = np.random.default_rng(seed)
    tables = Warehouse(tmp_path)
    gpu = {f"lab/exp/bench/run/{n}": 100.0 + n for n in range(3)}
    facts_entries.replace_owned(tables, "gpu-benchmark", job_facts(gpu, "gpu-benchmark"),
                                list(gpu), GPU_OWNERSHIP)
    blocks: dict[str, dict[str, float]] = {}
    for _ in range(25):
        step = rng.choice(["land", "land", "fix", "delete"])
        if step == "delete" and blocks:
            del blocks[rng.choice(sorted(blocks))]
            facts_entries.sync(tables, "clustercockpit", job_facts(
                {job: e for jobs in blocks.values() for job, e in jobs.items()}))
        else:
            block = f"c/{rng.integers(0, 4)}"
            number = int(block.split("/")[1])
            ids = rng.choice(1000, size=rng.integers(0, 4), replace=False) + number * 1000
            blocks[block] = {f"c/{job}/7": float(rng.integers(1, 10**6)) for job in ids}
            facts_entries.replace_owned(tables, "clustercockpit", job_facts(blocks[block]),
                                        [block], CC_OWNERSHIP)
        everything = {job: e for jobs in blocks.values() for job, e in jobs.items()}
        if everything:
            pd.testing.assert_frame_equal(stored(tables), expected(everything))
        else:
            assert stored(tables).empty
    pd.testing.assert_frame_equal(
        stored(tables, "gpu-benchmark"),
        entry_table.to_microseconds(job_facts(gpu, "gpu-benchmark")).sort_values(
            "entity", ignore_index=True))


def test_the_table_is_compacted_once_it_has_many_files(tmp_path, monkeypatch):
    tables = Warehouse(tmp_path)
    monkeypatch.setattr(facts_entries, "COMPACT_ABOVE", 2)
    jobs: dict[str, float] = {}
    for block in range(3):  # a file each
        landed = {f"c/{block * 1000 + n}/0": float(n + 1) for n in range(2)}
        jobs |= landed
        facts_entries.replace_owned(tables, "clustercockpit", job_facts(landed),
                                    [f"c/{block}"], CC_OWNERSHIP)
        due = facts_entries.compact_if_due(tables, "clustercockpit")
        assert (due is None) == (block < 2)
    assert due["merged"] == 3 and due["added"] == 1
    assert len(entry_table.files(tables, TABLE)) == 1
    pd.testing.assert_frame_equal(stored(tables), expected(jobs))


def test_the_first_write_after_an_upgrade_removes_the_owners_stale_entities(tmp_path):
    """energy_facts as written before it was kept per entry (a plain file per source):
    block c/12 re-read without job 12001 removes that job's stored facts, migrated by
    this very write."""
    tables = Warehouse(tmp_path)
    tables.write_partition(TABLE, "clustercockpit",
                           expected({"c/12000/0": 1.0, "c/12001/0": 2.0, "c/13000/0": 3.0}))
    written = facts_entries.replace_owned(tables, "clustercockpit",
                                          job_facts({"c/12000/0": 4.0}), ["c/12"], CC_OWNERSHIP)
    assert (written.entities, written.removed, written.rows) == (1, 1, 1)
    pd.testing.assert_frame_equal(stored(tables), expected({"c/12000/0": 4.0, "c/13000/0": 3.0}))


def test_a_write_refused_by_a_racing_commit_is_retried_from_the_stored_state(tmp_path,
                                                                             monkeypatch):
    """Another writer lands job 12002 of block c/12 and its commit wins: delta-rs refuses
    this write's (CommitFailedError); the retry looks the stored entities up again and
    removes that job too, as the block read now does not give it."""
    from deltalake.exceptions import CommitFailedError

    tables = Warehouse(tmp_path)
    facts_entries.replace_owned(tables, "clustercockpit", job_facts(
        {"c/12000/0": 1.0, "c/13000/0": 3.0}), ["c/12", "c/13"], CC_OWNERSHIP)
    write, raced = entry_table.write_entries, []

    def racing(*args, **kwargs):
        if not raced:
            raced.append(write(tables, TABLE, expected({"c/12002/0": 5.0}),
                               {"source": "clustercockpit"}))
            raise CommitFailedError("Transaction failed: a concurrent transaction wrote")
        return write(*args, **kwargs)

    monkeypatch.setattr(entry_table, "write_entries", racing)
    written = facts_entries.replace_owned(tables, "clustercockpit",
                                          job_facts({"c/12000/0": 4.0}), ["c/12"], CC_OWNERSHIP)
    assert raced and (written.entities, written.removed, written.rows) == (1, 1, 1)
    pd.testing.assert_frame_equal(stored(tables), expected({"c/12000/0": 4.0, "c/13000/0": 3.0}))

    monkeypatch.setattr(facts_entries, "COMMIT_TRIES", 1)  # no try left: the error stands
    raced.clear()
    with pytest.raises(CommitFailedError, match="concurrent"):
        facts_entries.sync(tables, "clustercockpit", job_facts({"c/12000/0": 6.0}))


def test_files_at_the_target_size_make_no_compaction_due(tmp_path, monkeypatch):
    """Files a compaction would not merge (at a source's small size, here 1 kB) do not
    count: three of them, over COMPACT_ABOVE, leave the table as it is."""
    tables = Warehouse(tmp_path)
    monkeypatch.setattr(facts_entries, "COMPACT_ABOVE", 2)
    monkeypatch.setattr(entry_table, "SCOPE_SMALL_BYTES", 1000)
    for block in range(3):
        facts_entries.replace_owned(tables, "clustercockpit", job_facts(
            {f"c/{block * 1000 + n}/0": 1.0 for n in range(2)}), [f"c/{block}"], CC_OWNERSHIP)
    sizes = [info.size for info in entry_table.files(tables, TABLE)]
    assert len(sizes) == 3 and min(sizes) >= 1000
    assert facts_entries.compact_if_due(tables, "clustercockpit") is None
    assert len(entry_table.files(tables, TABLE)) == 3


def _three_blocks_and_a_geopm_report(tables: Warehouse) -> None:
    for block in range(3):  # a file each
        facts_entries.replace_owned(tables, "clustercockpit", job_facts(
            {f"c/{block}000/0": float(block)}), [f"c/{block}"], CC_OWNERSHIP)
    facts_entries.sync(tables, "geopm", job_facts({"r/1": 7.0}, "geopm"))


def test_two_racing_delta_rs_optimizes_list_every_row_twice(tmp_path):
    """Why energy_facts is not compacted by ``optimize.compact`` (``entry_table.compact``)
    now that every source's step writes, and so compacts, it at once: two optimizes that
    read the same version both commit (delta-rs 1.6 lets removes marked
    ``dataChange=false`` pass against each other), and every row they merged is listed
    twice. (An optimize racing a write is refused either way round.) Should a delta-rs
    release refuse the second optimize, this test fails: optimize.compact is then safe
    for a table written at once again."""
    from deltalake import DeltaTable

    tables = Warehouse(tmp_path)
    _three_blocks_and_a_geopm_report(tables)
    first, second = (DeltaTable(tables.table_path(TABLE)) for _ in range(2))
    first.optimize.compact()
    second.optimize.compact()
    assert stored(tables)["entity"].tolist() == ["c/0000/0", "c/0000/0", "c/1000/0",
                                                 "c/1000/0", "c/2000/0", "c/2000/0"]


def _race_the_compaction(tables: Warehouse, monkeypatch, first) -> list:
    """The table of :func:`_three_blocks_and_a_geopm_report`, due for compaction; at the
    first compaction's commit, ``first()`` runs (and commits) before it. The list it
    returns gets ``first()``'s result once it ran."""
    import deltalake

    _three_blocks_and_a_geopm_report(tables)
    monkeypatch.setattr(facts_entries, "COMPACT_ABOVE", 1)
    write, raced = deltalake.write_deltalake, []

    def racing(table, data, **options):
        if isinstance(table, deltalake.DeltaTable) and not raced:  # the compaction's commit
            raced.append(None)
            raced[0] = first()
        return write(table, data, **options)

    monkeypatch.setattr(deltalake, "write_deltalake", racing)
    return raced


def test_two_racing_compactions_list_every_row_once(empty_warehouse, monkeypatch):
    """The same race between two of energy_facts' own compactions
    (``entry_table.compact_scope``): the second's commit is refused, its next try finds
    one file of the source, nothing to merge, and every row is listed once. On a path and
    on S3 (moto)."""
    tables = empty_warehouse
    raced = _race_the_compaction(tables, monkeypatch, lambda: facts_entries.compact_if_due(
        tables, "clustercockpit"))
    assert facts_entries.compact_if_due(tables, "clustercockpit") == {
        "added": 0, "merged": 0, "removed": 0}
    assert raced == [{"added": 1, "merged": 3, "removed": 0}]
    assert len(entry_table.files(tables, TABLE)) == 2  # and GEOPM's
    pd.testing.assert_frame_equal(stored(tables), expected(
        {"c/0000/0": 0.0, "c/1000/0": 1.0, "c/2000/0": 2.0}))


def test_a_compaction_raced_by_a_write_is_refused_and_tried_again(empty_warehouse, monkeypatch):
    """A source's write commits between the compaction's read and its commit, replacing a
    job in one of the files being merged: the compaction's commit is refused (as a write's
    would be), its next try reads the new state, and every row is listed once, the job
    with the write's energy. On a path and on S3 (moto)."""
    tables = empty_warehouse
    raced = _race_the_compaction(tables, monkeypatch, lambda: facts_entries.replace_owned(
        tables, "clustercockpit", job_facts({"c/1000/0": 10.0}), ["c/1"], CC_OWNERSHIP))
    figures = facts_entries.compact_if_due(tables, "clustercockpit")
    assert raced and figures["merged"] == 3 and figures["added"] == 1  # the race replaced one
    assert len(entry_table.files(tables, TABLE)) == 2  # GEOPM's file is not the source's
    pd.testing.assert_frame_equal(stored(tables), expected(
        {"c/0000/0": 0.0, "c/1000/0": 10.0, "c/2000/0": 2.0}))
    pd.testing.assert_frame_equal(stored(tables, "geopm"), entry_table.to_microseconds(
        job_facts({"r/1": 7.0}, "geopm")))


def test_a_compaction_refused_at_every_try_moves_no_row(tmp_path, monkeypatch):
    """Writers refuse the compaction at every try: it gives up (``refused``), and the
    table keeps its files and rows for a later write's compaction."""
    import deltalake
    from deltalake.exceptions import CommitFailedError

    tables = Warehouse(tmp_path)
    _three_blocks_and_a_geopm_report(tables)
    listed = [info.path for info in entry_table.files(tables, TABLE)]
    monkeypatch.setattr(facts_entries, "COMPACT_ABOVE", 1)
    monkeypatch.setattr(facts_entries, "COMMIT_TRIES", 2)

    def refused(table, data, **options):
        raise CommitFailedError("Transaction failed: a concurrent transaction wrote")

    monkeypatch.setattr(deltalake, "write_deltalake", refused)
    assert facts_entries.compact_if_due(tables, "clustercockpit") == {
        "added": 0, "merged": 0, "removed": 0, "refused": 1}
    assert [info.path for info in entry_table.files(tables, TABLE)] == listed


def test_writes_of_two_sources_at_once_both_commit_at_their_first_try(tmp_path, monkeypatch):
    """What each source's own pool relies on: a GEOPM write commits between a
    ClusterCockpit write's read and its commit, on files of its own; the ClusterCockpit
    write is not refused (one try), and both sources' rows are listed once."""
    import deltalake

    tables = Warehouse(tmp_path)
    _three_blocks_and_a_geopm_report(tables)
    write, tries = deltalake.write_deltalake, []

    def racing(table, data, **options):
        tries.append(options.get("predicate"))
        if len(tries) == 1:  # ClusterCockpit's, about to commit: GEOPM's comes first
            facts_entries.sync(tables, "geopm", job_facts({"r/1": 8.0, "r/2": 9.0}, "geopm"))
        return write(table, data, **options)

    monkeypatch.setattr(deltalake, "write_deltalake", racing)
    facts_entries.replace_owned(tables, "clustercockpit", job_facts({"c/1000/0": 10.0}),
                                ["c/1"], CC_OWNERSHIP)
    assert len(tries) == 2 and "clustercockpit" in tries[0] and "geopm" in tries[1]
    pd.testing.assert_frame_equal(stored(tables), expected(
        {"c/0000/0": 0.0, "c/1000/0": 10.0, "c/2000/0": 2.0}))
    pd.testing.assert_frame_equal(stored(tables, "geopm"), entry_table.to_microseconds(
        job_facts({"r/1": 8.0, "r/2": 9.0}, "geopm")))
