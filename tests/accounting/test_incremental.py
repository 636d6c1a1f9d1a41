"""The accounting tables kept incrementally (``incremental.update``) equal ``account`` from
scratch, row for row, after a seeded random sequence of landings, rewrites, removals, a
compaction, users changed in cc_jobs, an intensity and a tariff change."""

import functools
import hashlib
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from joulehouse import entry_table
from joulehouse.accounting import generator, incremental, intensity, tariff
from joulehouse.accounting.accounts import account
from joulehouse.accounting.carbon import CarbonSettings
from joulehouse.accounting.cost import CostSettings
from joulehouse.accounting.schemas import FACT_COLUMNS, ROLLUP_KEYS
from joulehouse.warehouse import Warehouse

SOURCES = ("clustercockpit", "powerapi", "gpu-benchmark", "geopm")
BANDS = [("Mon-Fri", "00:00", "08:00", 0.10), ("Mon-Fri", "08:00", "24:00", 0.30),
         ('"Sat,Sun"', "00:00", "24:00", 0.05)]


def pool(n: int, seed: int) -> pd.DataFrame:
    """``n`` entities' facts from 25 Jan to 14 Feb 2024 (across a month's end, local and
    UTC), every fourth with a second method; times to the microsecond, as stored."""
    facts = generator.facts(n, "2024-01-25", "20D", seed=seed, sources=SOURCES)
    twice = facts.iloc[::4].assign(method="counter", energy_j=lambda f: f["energy_j"] * 0.9)
    return entry_table.to_microseconds(pd.concat([facts, twice], ignore_index=True))


def land(store: Warehouse, rows: pd.DataFrame, removed: dict[str, list[str]] | None = None):
    """Write ``rows`` per source (their entities replaced) and remove ``removed``."""
    removed = removed or {}
    for source in sorted({*rows["source"], *removed}):
        store.write_entries("energy_facts", rows[rows["source"] == source],
                            {"source": source}, removed=removed.get(source, []))


def jobs_of(entities: list[str], rng: np.random.Generator) -> pd.DataFrame:
    return pd.DataFrame({"job": entities,
                         "hpc_user": rng.choice(["alice", "bob", "carol"], len(entities)),
                         "project": rng.choice(["p1", "p2"], len(entities)),
                         "cluster_partition": rng.choice(["main", None], len(entities))})


def write_jobs(store: Warehouse, jobs: pd.DataFrame, kept: bool, removed=()) -> None:
    """``jobs`` in cc_jobs: kept per entry as ClusterCockpit's step keeps it (those jobs'
    rows replaced, ``removed``'s removed, in one commit), or as plain files (the table
    ``jobs`` less ``removed``, rewritten whole)."""
    if kept:
        entry_table.write_keyed(store, "cc_jobs", jobs, "job", removed=list(removed))
    else:
        store.write_table("cc_jobs", jobs[~jobs["job"].isin(list(removed))])


def inputs(folder, base: float, price: float) -> incremental.Inputs:
    """The inputs of an intensity of ``base`` g/kWh and tariffs of ``price`` times BANDS',
    written as files in a temporary folder (not ``folder``, kept for the callers) and read
    back once per ``base`` and ``price``: read-only, the one object is shared."""
    return _inputs(base, price)


@functools.cache
def _inputs(base: float, price: float) -> incremental.Inputs:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        generator.write_csv(generator.electricity_maps_frame(
            "DE", "Germany", "2024-01-20", "2024-02-10", base=base), folder / "intensity/de.csv")
        generator.write_tariff(folder / "tariffs/a.csv", "site-a", ("2024-01-01", "2024-02-12"),
                               [(*band[:3], band[3] * price) for band in BANDS])
        return incremental.Inputs(
            intensity=intensity.read_folder(folder / "intensity"),
            tariffs=tariff.read_folder(folder / "tariffs"),
            carbon=CarbonSettings(zones={"*": "DE"}, pue=1.2),
            cost=CostSettings(sites={"*": "site-a", "geopm": "none"}, pue=1.2),
            time_zone="Europe/Berlin")


def sorted_rows(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``table`` as stored (labels as str, times to the microsecond), sorted by ``keys``."""
    labels = {name: table[name].astype(str).astype(object) for name in table.columns
              if isinstance(table[name].dtype, pd.CategoricalDtype)}
    table = entry_table.to_microseconds(table.assign(**labels))
    return table.sort_values(keys, ignore_index=True)


TABLE_KEYS = {"accounting_daily": ["calendar", "day", *ROLLUP_KEYS],
              "accounting_monthly": ["calendar", "month", *ROLLUP_KEYS],
              "carbon_per_fact": FACT_COLUMNS, "cost_per_fact": FACT_COLUMNS}


def _digest(frame: pd.DataFrame) -> str:
    """SHA-256 of ``frame``'s columns, dtypes and rows, in their order."""
    rows = pd.util.hash_pandas_object(frame, index=False).to_numpy()
    return hashlib.sha256(repr([*frame.columns, *frame.dtypes]).encode() + rows.tobytes()
                          ).hexdigest()


_FROM_SCRATCH: dict[tuple[str, str, str], dict[str, pd.DataFrame]] = {}


def from_scratch(facts: pd.DataFrame, jobs: pd.DataFrame, given: incremental.Inputs
                 ) -> dict[str, pd.DataFrame]:
    """``account``'s tables of ``facts`` (in the order the accounting sums them), ``jobs``
    and ``given``, each sorted by its keys as :func:`sorted_rows` sorts it: computed once
    per digest of those inputs, which the same steps over copies of one store (the tests
    of a parameter) give again."""
    key = (_digest(facts), _digest(jobs), given.digest)
    if key not in _FROM_SCRATCH:
        expected = account(facts, given.intensity, given.carbon, given.time_zone, jobs,
                           tariffs=given.tariffs, cost_settings=given.cost)
        _FROM_SCRATCH[key] = {table: sorted_rows(rows, TABLE_KEYS[table]) for table, rows in zip(
            TABLE_KEYS, (expected.daily, expected.monthly, expected.carbon, expected.cost),
            strict=True)}
    return _FROM_SCRATCH[key]


def assert_as_from_scratch(store: Warehouse, given: incremental.Inputs) -> None:
    """The accounting tables stored equal ``account`` from scratch of the stored facts
    (in the order the accounting sums them) and cc_jobs (as read), row for row."""
    expected = from_scratch(incremental.canonical(store.read_table("energy_facts")),
                            store.read_table("cc_jobs"), given)
    for table, rows in expected.items():
        pd.testing.assert_frame_equal(sorted_rows(store.read_table(table), TABLE_KEYS[table]),
                                      rows, check_exact=True, obj=table)


@pytest.mark.parametrize("kept", [False, True], ids=["plain cc_jobs", "cc_jobs kept per entry"])
def test_incremental_accounting_equals_a_rebuild_after_random_changes(tmp_path, kept):
    rng = np.random.default_rng(28)
    store = Warehouse(tmp_path / "warehouse")
    facts = pool(100, seed=3)
    entities = facts["entity"].unique()
    landed = list(entities[:60])
    land(store, facts[facts["entity"].isin(landed)])
    cc = sorted(facts.loc[facts["source"] == "clustercockpit", "entity"].unique())
    write_jobs(store, jobs_of(cc, rng), kept)
    given = inputs(tmp_path, base=350.0, price=1.0)
    first = incremental.update(store, given)
    assert first.whole == "no accounting state stored (first run)"
    assert_as_from_scratch(store, given)

    for step in range(2):  # each lands, rewrites and removes; the second changes cc_jobs too
        fresh = entities[60 + 20 * step: 60 + 20 * (step + 1)]
        landed += list(fresh)
        stored = store.read_table("energy_facts")
        rewritten = rng.choice(sorted(stored["entity"].unique()), 4, replace=False)
        moved = stored[stored["entity"].isin(rewritten)].assign(  # a fix: other days, energy
            window_start=lambda f: f["window_start"] + pd.Timedelta(days=int(rng.integers(1, 9))),
            window_end=lambda f: f["window_end"] + pd.Timedelta(days=int(rng.integers(9, 11))),
            energy_j=lambda f: f["energy_j"] * 1.5)
        gone = stored[~stored["entity"].isin(rewritten)].drop_duplicates("entity").sample(
            3, random_state=step)
        land(store, pd.concat([facts[facts["entity"].isin(fresh)], moved]),
             gone.groupby("source")["entity"].apply(list).to_dict())
        if step == 1:  # two jobs change users; one job's row disappears
            jobs = store.read_table("cc_jobs")
            jobs.loc[jobs.index[:2], "hpc_user"] = "dave"
            write_jobs(store, jobs if not kept else jobs.iloc[:2], kept,
                       removed=[jobs["job"].iloc[-1]])
        updated = incremental.update(store, given)
        assert updated.whole == "" and updated.changed >= len(fresh)
        assert updated.removed == 3
        assert updated.jobs_changed == (3 if step == 1 else 0)
        assert_as_from_scratch(store, given)

    assert entry_table.compact(store, "energy_facts")["merged"] > 1
    if kept:  # its rows moved too: read back on both sides, none changed
        entry_table.replace_keys(store, "cc_jobs", store.read_table("cc_jobs"), None)
    unchanged = incremental.update(store, given)  # rows moved into new files: no change
    assert (unchanged.whole, unchanged.changed, unchanged.removed) == ("", 0, 0)
    assert unchanged.jobs_changed == 0
    assert unchanged.jobs_read == (len(cc) - 1 if kept else 0) * 2
    assert_as_from_scratch(store, given)

    for changed in (inputs(tmp_path, base=200.0, price=1.0),   # the intensity
                    inputs(tmp_path, base=200.0, price=2.0)):  # the tariffs
        updated = incremental.update(store, changed)
        assert updated.whole == "the intensity, the tariffs or the settings changed"
        assert_as_from_scratch(store, changed)


def test_a_failed_update_leaves_the_tables_and_the_next_finds_the_same_changes(tmp_path,
                                                                                monkeypatch):
    store = Warehouse(tmp_path / "warehouse")
    facts = pool(40, seed=5)
    land(store, facts.iloc[:30])
    given = inputs(tmp_path, base=350.0, price=1.0)
    incremental.update(store, given)
    before = store.read_table("accounting_daily")
    land(store, facts.iloc[30:])

    def refused(*args, **kwargs):
        raise OSError("the store went away")

    monkeypatch.setattr(incremental.entry_table, "replace_where", refused)
    with pytest.raises(OSError, match="went away"):
        incremental.update(store, given)
    monkeypatch.undo()
    pd.testing.assert_frame_equal(store.read_table("accounting_daily"), before)
    assert incremental.update(store, given).changed == facts.iloc[30:]["entity"].nunique()
    assert_as_from_scratch(store, given)


def die_at(monkeypatch, table: str) -> None:
    """``entry_table.replace_where`` raising at ``table``'s commit: the run dies there."""
    replace_where = entry_table.replace_where

    def dies(warehouse, name, *args, **kwargs):
        if name == table:
            raise OSError("the run died")
        replace_where(warehouse, name, *args, **kwargs)

    monkeypatch.setattr(incremental.entry_table, "replace_where", dies)


def copied(tmp_path, key: str, build) -> Warehouse:
    """``tmp_path``'s warehouse as ``build(warehouse)`` leaves it, built once per ``key`` in
    the session's temporary folder and copied (its files' times kept, as the states name
    them): the tests that start from the same store build it once."""
    built = tmp_path.parent / "built-stores" / key
    if not built.exists():
        built.parent.mkdir(exist_ok=True)
        shutil.rmtree(built.with_name(key + ".part"), ignore_errors=True)  # a failed build
        build(Warehouse(built.with_name(key + ".part")))
        built.with_name(key + ".part").rename(built)
    shutil.copytree(built, tmp_path / "warehouse")
    return Warehouse(tmp_path / "warehouse")


def accounted(tmp_path, landed: int = 30):
    """A store whose first ``landed`` of ``pool(40, seed=7)``'s entities are landed and
    accounted (intensity 350 g/kWh, price 1 per kWh): the store, the pool, its entities,
    the inputs. One pool for every test (its entities' sources, four in turn, are any
    seed's): a store per ``landed``, built once."""
    facts = pool(40, seed=7)
    entities = facts["entity"].unique()
    given = inputs(tmp_path, base=350.0, price=1.0)

    def build(store: Warehouse) -> None:
        land(store, facts[facts["entity"].isin(entities[:landed])])
        incremental.update(store, given)

    return copied(tmp_path, f"accounted-{landed}", build), facts, entities, given


def test_a_run_stopped_after_the_cost_commit_is_completed_by_the_next(tmp_path, monkeypatch):
    """New entities' cost committed, their carbon not (the run died): the next run finds
    them again and replaces their cost rather than appending it twice."""
    store, facts, entities, given = accounted(tmp_path)
    land(store, facts[facts["entity"].isin(entities[30:])])
    die_at(monkeypatch, incremental.CARBON_TABLE)
    with pytest.raises(OSError, match="died"):
        incremental.update(store, given)
    monkeypatch.undo()
    assert incremental.update(store, given).changed == len(entities[30:])
    assert_as_from_scratch(store, given)


def test_a_stopped_run_then_facts_gone_back_are_completed(tmp_path, monkeypatch):
    """A fix (other days, other energy) and a new entity land, the run dies at its carbon
    commit (roll-ups and cost written), and the facts go back to those the state consumed:
    carbon_per_fact holds them, so only the state's ``pending`` entities and days say
    what to rewrite. Then the same for a whole recompute (the intensity changed, then put
    back)."""
    store, facts, entities, given = accounted(tmp_path)
    old = store.read_table("energy_facts")
    fixed = old[old["entity"] == entities[0]]
    land(store, pd.concat([fixed.assign(window_start=fixed["window_start"] + pd.Timedelta(days=5),
                                        window_end=fixed["window_end"] + pd.Timedelta(days=5),
                                        energy_j=fixed["energy_j"] * 2),
                           facts[facts["entity"] == entities[35]]]))
    die_at(monkeypatch, incremental.CARBON_TABLE)
    with pytest.raises(OSError, match="died"):
        incremental.update(store, given)
    monkeypatch.undo()
    new = facts[facts["entity"] == entities[35]]
    land(store, fixed, {str(new["source"].iloc[0]): [str(entities[35])]})  # gone back
    assert incremental.update(store, given).whole == ""
    assert_as_from_scratch(store, given)
    die_at(monkeypatch, incremental.CARBON_TABLE)
    with pytest.raises(OSError, match="died"):
        incremental.update(store, inputs(tmp_path / "other", base=200.0, price=1.0))
    monkeypatch.undo()
    whole = incremental.update(store, given).whole
    assert_as_from_scratch(store, given)
    assert whole == "a run stopped during a whole recompute"


def test_recent_days_are_the_utc_days_of_the_latest_months_only(tmp_path):
    store = Warehouse(tmp_path / "warehouse")
    land(store, pool(20, seed=9))
    incremental.update(store, inputs(tmp_path, base=350.0, price=1.0))
    daily = store.read_table("accounting_daily")
    utc = daily[daily["calendar"] == "UTC"]
    assert 0 < (utc["day"] >= "2024-02-01").sum() < len(utc)  # February: not every day
    keys = ["day", *ROLLUP_KEYS]
    for months, since in ((1, "2024-02-01"), (2, "2024-01-01")):
        recent = incremental.recent_days(store, store.read_table("accounting_monthly"), months)
        pd.testing.assert_frame_equal(sorted_rows(recent, keys),
                                      sorted_rows(utc[utc["day"] >= since], keys),
                                      check_exact=True)


def state_inputs(store: Warehouse) -> dict:
    """The accounting state's rows of each kind but files, and which partitions it has."""
    rows = store.read_partitions(incremental.STATE_TABLE, ["inputs"])
    return {"jobs_mode": rows.loc[rows["kind"] == "jobs_mode", "value"].tolist(),
            "jobs_files": int((rows["kind"] == "jobs_file").sum()),
            "digests": store.has_partition(incremental.STATE_TABLE, incremental.JOB_DIGESTS)}


def cc_jobs_files(store: Warehouse) -> set[str]:
    return {info.path for info in entry_table.files(store, "cc_jobs")}


def test_jobs_kept_per_entry_are_read_and_their_attribution_changes_seen(tmp_path):
    """cc_jobs as ClusterCockpit's step keeps it (a Delta table, entries jobs): the state
    keeps its data files, no digest per job. A job's user changed, another's project, by
    a write of those jobs alone, recomputes exactly their entities (the new file's rows and
    the gone one's read, nothing else); a job removed from cc_jobs makes its facts
    unattributed; a job whose row is rewritten as it was changes nothing."""
    rng = np.random.default_rng(4)
    store = Warehouse(tmp_path / "warehouse")
    facts = pool(30, seed=11)
    land(store, facts)
    cc = sorted(facts.loc[facts["source"] == "clustercockpit", "entity"].unique())
    jobs = jobs_of(cc, rng)
    entry_table.write_keyed(store, "cc_jobs", jobs, "job")
    given = inputs(tmp_path, base=350.0, price=1.0)
    first = incremental.update(store, given)
    assert first.jobs_read == len(jobs)  # a whole recompute reads every job
    assert state_inputs(store) == {"jobs_mode": ["delta"], "jobs_files": 1, "digests": False}
    assert_as_from_scratch(store, given)

    entry_table.write_keyed(store, "cc_jobs", pd.concat([
        jobs.iloc[[0]].assign(hpc_user="dave"), jobs.iloc[[1]].assign(project="p9")]), "job")
    updated = incremental.update(store, given)
    assert (updated.whole, updated.changed, updated.jobs_changed) == ("", 2, 2)
    daily = store.read_table("accounting_daily")
    assert set(daily.loc[daily["user"] == "dave", "source"]) == {"clustercockpit"}
    assert "p9" in set(daily["project"])
    assert_as_from_scratch(store, given)

    entry_table.write_keyed(store, "cc_jobs", jobs.iloc[:0], "job", removed=[cc[2]])
    removed = incremental.update(store, given)
    assert (removed.whole, removed.changed, removed.removed, removed.jobs_changed) == (
        "", 1, 0, 1)
    def unattributed(daily):  # ClusterCockpit rows without a user
        return ((daily["source"] == "clustercockpit") & (daily["user"] == "")).sum()

    assert unattributed(daily) == 0 < unattributed(store.read_table("accounting_daily"))
    assert_as_from_scratch(store, given)

    entry_table.write_keyed(store, "cc_jobs", store.read_table("cc_jobs").iloc[[3]], "job")
    same = incremental.update(store, given)  # rewritten as it was
    assert (same.whole, same.changed, same.jobs_changed) == ("", 0, 0)
    assert_as_from_scratch(store, given)


@pytest.mark.parametrize("kept", [False, True], ids=["plain cc_jobs", "cc_jobs kept per entry"])
def test_a_job_of_two_rows_rewritten_in_reverse_order_is_attributed_as_a_rebuild(tmp_path, kept):
    """A job with two cc_jobs rows (users alice and bob): the same rows written again in
    the reverse order (as a compaction or a rewrite may leave them) change no attribution:
    the update equals a rebuild, whichever row comes first in the files."""
    store = Warehouse(tmp_path / "warehouse")
    facts = pool(30, seed=5)
    land(store, facts)
    cc = sorted(facts.loc[facts["source"] == "clustercockpit", "entity"].unique())
    jobs = jobs_of(cc, np.random.default_rng(5))
    twice = pd.concat([jobs.iloc[[0]].assign(hpc_user="bob"),
                       jobs.iloc[[0]].assign(hpc_user="alice")], ignore_index=True)
    write_jobs(store, pd.concat([twice, jobs.iloc[1:]], ignore_index=True), kept)
    given = inputs(tmp_path, base=350.0, price=1.0)
    incremental.update(store, given)
    assert_as_from_scratch(store, given)
    reverse = twice.iloc[::-1]
    if kept:
        entry_table.write_keyed(store, "cc_jobs", reverse, "job")
    else:
        write_jobs(store, pd.concat([reverse, jobs.iloc[1:]], ignore_index=True), kept)
    assert store.read_table("cc_jobs").query("job == @cc[0]")["hpc_user"].tolist() == [
        "alice", "bob"]  # the other row first now
    updated = incremental.update(store, given)
    assert (updated.whole, updated.jobs_changed) == ("", 0)
    assert_as_from_scratch(store, given)
    daily = store.read_table("accounting_daily")
    assert "alice" in set(daily["user"])


def test_a_landing_of_new_jobs_reads_their_cc_jobs_rows_not_every_job(tmp_path, monkeypatch):
    """2,000 ClusterCockpit jobs over 100 days, their cc_jobs in 4 files of 500 jobs; 10 new
    jobs land (facts on one day, their cc_jobs rows in a commit of their own): to find
    them the update reads the new file alone (its 10 rows), and to attribute the facts it
    recomputes the rows of their jobs only, by one filter on ``job`` (however small
    ``IN_LIMIT``: 7 here, a bound of deltalake's predicates only); the tables equal a
    rebuild."""
    store = Warehouse(tmp_path / "warehouse")
    facts = entry_table.to_microseconds(generator.facts(
        2000, "2024-01-01", "100D", seed=37, sources=("clustercockpit",)))
    land(store, facts)
    jobs = jobs_of(sorted(facts["entity"]), np.random.default_rng(8))
    for start in range(0, len(jobs), 500):
        entry_table.write_keyed(store, "cc_jobs", jobs.iloc[start:start + 500], "job")
    given = inputs(tmp_path, base=350.0, price=1.0)
    incremental.update(store, given)
    stored = cc_jobs_files(store)
    landed = facts.iloc[:10].assign(
        entity=[f"g0/new-{i}" for i in range(10)],
        window_start=[pd.Timestamp("2024-01-25 10:00", tz="UTC") + pd.Timedelta(minutes=9 * i)
                      for i in range(10)]).assign(
        window_end=lambda f: f["window_start"] + pd.Timedelta(hours=1), duration_s=3600.0)
    land(store, landed)
    entry_table.write_keyed(store, "cc_jobs", jobs_of(list(landed["entity"]),
                                                      np.random.default_rng(9)), "job")
    new = cc_jobs_files(store) - stored
    assert len(new) == 1 and stored <= cc_jobs_files(store)
    monkeypatch.setattr(entry_table, "IN_LIMIT", 7)
    read, read_files = [], entry_table.read_files

    def counted(warehouse, table, listed, where=None, columns=None):
        rows = read_files(warehouse, table, listed, where, columns)
        if table == "cc_jobs" and listed:
            read.append(({info.path for info in listed}, where, rows))
        return rows

    monkeypatch.setattr(incremental.entry_table, "read_files", counted)
    updated = incremental.update(store, given)
    monkeypatch.undo()
    assert (updated.whole, updated.changed, updated.jobs_changed) == ("", 10, 10)
    whole = [rows for paths, where, rows in read if where is None]
    assert [paths for paths, where, _ in read if where is None] == [new]  # the new file
    assert sum(map(len, whole)) == 10
    by_job = [rows for _, where, rows in read if where is not None]
    assert len(by_job) == 1 and len(by_job[0]) > 7  # one read, not parts of 7 jobs
    assert updated.jobs_read == sum(map(len, whole)) + sum(map(len, by_job))
    assert updated.jobs_read < len(jobs) / 10  # 2,010 stored
    assert_as_from_scratch(store, given)


def jobs_in_files(tmp_path, files: int):
    """400 ClusterCockpit jobs over 40 days, named in the order of their start (so that a
    day's jobs are a job range), their cc_jobs in ``files`` commits of sorted jobs
    (disjoint job ranges), accounted; then the facts of 10 jobs of the middle changed, and
    the first job's user: the store and the inputs."""
    store = Warehouse(tmp_path / "warehouse")
    facts = entry_table.to_microseconds(generator.facts(
        400, "2024-01-01", "40D", seed=41, sources=("clustercockpit",)))
    starts = facts.groupby("entity")["window_start"].min().sort_values(kind="stable")
    names = {entity: f"g0/{rank:05d}" for rank, entity in enumerate(starts.index)}
    facts = facts.assign(entity=facts["entity"].map(names))
    land(store, facts)
    jobs = jobs_of(sorted(facts["entity"].unique()), np.random.default_rng(3))
    size = len(jobs) // files
    for start in range(0, len(jobs), size):
        entry_table.write_keyed(store, "cc_jobs", jobs.iloc[start:start + size], "job")
    given = inputs(tmp_path, base=350.0, price=1.0)
    incremental.update(store, given)
    middle = facts[facts["entity"].isin(jobs["job"].iloc[200:210])]
    land(store, middle.assign(energy_j=middle["energy_j"] * 1.1))
    entry_table.write_keyed(store, "cc_jobs", jobs.iloc[:1].assign(hpc_user="erin"), "job")
    return store, given


def by_job_reads(monkeypatch):
    """The cc_jobs reads by a filter (their files' paths, the jobs the run asked
    ``filestats.may_hold`` about) of an update, recorded into the list returned."""
    reads, asked = [], []
    read_files, may_hold = entry_table.read_files, incremental.filestats.may_hold

    def counted(warehouse, table, listed, where=None, columns=None):
        if table == "cc_jobs" and where is not None:
            reads.append({info.path for info in listed})
        return read_files(warehouse, table, listed, where, columns)

    def recorded(stats, values):
        if "job" in values:
            asked.append(set(values["job"]))
        return may_hold(stats, values)

    monkeypatch.setattr(incremental.entry_table, "read_files", counted)
    monkeypatch.setattr(incremental.filestats, "may_hold", recorded)
    return reads, asked


def test_the_jobs_rows_are_read_from_the_files_whose_job_range_covers_them(tmp_path,
                                                                           monkeypatch):
    """cc_jobs in 8 files of disjoint job ranges: each by-job read of an update opens only
    the files whose [min, max] job range (from the files' rows) covers one of the jobs it
    asks for, fewer than all; the tables equal a rebuild."""
    store, given = jobs_in_files(tmp_path, files=8)
    ranges = {}
    for info in entry_table.files(store, "cc_jobs"):
        job = entry_table.read_files(store, "cc_jobs", [info], columns=["job"])["job"]
        ranges[info.path] = (job.min(), job.max())
    reads, asked = by_job_reads(monkeypatch)
    updated = incremental.update(store, given)
    monkeypatch.undo()
    assert (updated.whole, updated.jobs_changed, updated.changed) == ("", 1, 11)
    assert reads and len(reads) == len(asked)
    for opened, jobs in zip(reads, asked, strict=True):
        covering = {path for path, (low, high) in ranges.items()
                    if any(low <= job <= high for job in jobs)}
        assert opened == covering and len(opened) < len(ranges)
    assert_as_from_scratch(store, given)


def test_a_snapshot_file_the_current_version_no_longer_lists_is_read(tmp_path, monkeypatch):
    """cc_jobs compacted after the update took its snapshot (its files, by then no longer
    listed, have no statistics in the current version): the jobs' rows are still read from
    the snapshot's files, and the tables equal a rebuild."""
    store, given = jobs_in_files(tmp_path, files=4)
    snapshot = cc_jobs_files(store)
    named = incremental._Run.jobs_named

    def compacted_first(run, names):
        if not run.__dict__.get("compacted"):
            run.compacted = True
            entry_table.compact(store, "cc_jobs")
            assert not cc_jobs_files(store) & snapshot  # none listed now
        return named(run, names)

    monkeypatch.setattr(incremental._Run, "jobs_named", compacted_first)
    reads, _ = by_job_reads(monkeypatch)
    updated = incremental.update(store, given)
    monkeypatch.undo()
    assert updated.whole == "" and reads
    assert set().union(*reads) <= snapshot
    assert any(len(opened) > 0 for opened in reads)
    assert_as_from_scratch(store, given)


def test_a_landing_reads_the_facts_of_its_days_not_of_its_months(tmp_path, monkeypatch):
    """A month of a source's facts stored; one repetition lands on one day: energy_facts is
    read for that entity and for the facts overlapping its days (either calendar) only, the
    month's other facts are not, and the tables equal a rebuild."""
    store = Warehouse(tmp_path / "warehouse")
    facts = entry_table.to_microseconds(generator.facts(
        400, "2024-01-02", "28D", seed=13, sources=("gpu-benchmark",)))
    land(store, facts)
    given = inputs(tmp_path, base=350.0, price=1.0)
    incremental.update(store, given)
    landed = facts.iloc[[0]].assign(entity="root/exp/b/r/landed",
                                    window_start=pd.Timestamp("2024-01-15 10:00", tz="UTC"),
                                    window_end=pd.Timestamp("2024-01-15 11:00", tz="UTC"))
    land(store, landed)
    read = []
    read_files = entry_table.read_files

    def counted(warehouse, table, *args, **kwargs):
        rows = read_files(warehouse, table, *args, **kwargs)
        if table == "energy_facts":
            read.append(rows)
        return rows

    monkeypatch.setattr(incremental.entry_table, "read_files", counted)
    updated = incremental.update(store, given)
    monkeypatch.undo()
    assert (updated.whole, updated.changed, updated.days, updated.months) == ("", 1, 2, 2)
    rows = pd.concat([part for part in read if "window_start" in part.columns])
    # the local day of 15 January (Europe/Berlin) begins at 23:00 UTC on the 14th
    days = (rows["window_end"] >= pd.Timestamp("2024-01-14 23:00", tz="UTC")) & (
        rows["window_start"] <= pd.Timestamp("2024-01-16", tz="UTC"))
    assert (days | (rows["entity"] == "root/exp/b/r/landed")).all()
    stored = pd.concat([facts, landed])
    overlapping = ((stored["window_end"] >= pd.Timestamp("2024-01-14 23:00", tz="UTC"))
                   & (stored["window_start"] <= pd.Timestamp("2024-01-16", tz="UTC")))
    assert updated.facts_read == overlapping.sum()
    in_january = stored["window_start"] < pd.Timestamp("2024-02-01", tz="UTC")
    assert updated.facts_read < in_january.sum() / 10
    assert_as_from_scratch(store, given)


@pytest.mark.parametrize("table", [incremental.kept_months.MEMBERS_TABLE,
                                   incremental.DAILY_TABLE, incremental.MONTHLY_TABLE,
                                   incremental.COST_TABLE])
def test_a_run_stopped_at_any_commit_is_completed_by_the_next(tmp_path, monkeypatch, table):
    """A fix moving an entity across the month's end (UTC and local), a removal and a new
    entity; the run dies at ``table``'s commit (those before it written): the next run finds
    the same changes and the months' counts are not changed twice."""
    store, facts, entities, given = accounted(tmp_path)
    old = store.read_table("energy_facts")
    fixed = old[old["entity"] == entities[1]]
    gone = old[old["entity"] == entities[2]]
    moved = fixed.assign(window_start=pd.Timestamp("2024-01-31 22:30", tz="UTC"),
                         window_end=pd.Timestamp("2024-02-01 00:30", tz="UTC"))
    land(store, pd.concat([moved, facts[facts["entity"] == entities[35]]]),
         {str(gone["source"].iloc[0]): [str(entities[2])]})
    die_at(monkeypatch, table)
    with pytest.raises(OSError, match="died"):
        incremental.update(store, given)
    monkeypatch.undo()
    updated = incremental.update(store, given)
    assert (updated.whole, updated.changed, updated.removed) == ("", 2, 1)
    assert_as_from_scratch(store, given)
    again = incremental.update(store, given)
    assert (again.changed, again.removed) == (0, 0)


def test_a_store_without_the_months_members_is_recomputed_whole(tmp_path):
    """Tables written before the members were kept: the next run recomputes everything."""
    store = Warehouse(tmp_path / "warehouse")
    land(store, pool(20, seed=19))
    given = inputs(tmp_path, base=350.0, price=1.0)
    incremental.update(store, given)
    shutil.rmtree(store.table_path(incremental.kept_months.MEMBERS_TABLE))
    assert incremental.update(store, given).whole == "an accounting table is not kept per entry"
    assert_as_from_scratch(store, given)


def test_the_jobs_digests_are_read_and_written_only_when_cc_jobs_changed(tmp_path, monkeypatch):
    """The state's per-job digests (a row per job) cost nothing to a landing that leaves
    cc_jobs as it was; a change of cc_jobs reads and rewrites them."""
    rng = np.random.default_rng(6)
    store = Warehouse(tmp_path / "warehouse")
    facts = pool(30, seed=21)
    entities = facts["entity"].unique()
    land(store, facts[facts["entity"].isin(entities[:20])])
    cc = sorted(facts.loc[facts["source"] == "clustercockpit", "entity"].unique())
    store.write_table("cc_jobs", jobs_of(cc, rng))
    given = inputs(tmp_path, base=350.0, price=1.0)
    incremental.update(store, given)
    touched = []
    for name in ("read_partitions", "write_partition"):
        def recorded(table, key, *args, name=name, **kwargs):
            touched.append((name, key if isinstance(key, str) else tuple(key)))
            return getattr(Warehouse, name)(store, table, key, *args, **kwargs)
        monkeypatch.setattr(store, name, recorded)
    land(store, facts[facts["entity"].isin(entities[20:])])
    assert incremental.update(store, given).changed == len(entities[20:])
    assert not {("read_partitions", ("jobs",)), ("write_partition", "jobs")} & set(touched)
    store.write_table("cc_jobs", jobs_of(cc, rng))  # users drawn again
    assert incremental.update(store, given).changed > 0
    assert {("read_partitions", ("jobs",)), ("write_partition", "jobs")} <= set(touched)
    monkeypatch.undo()
    assert_as_from_scratch(store, given)


def test_a_landing_touching_more_days_than_one_predicate_names_is_recomputed_whole(
        tmp_path, monkeypatch):
    """The touched days of one (calendar, source) are named in one predicate: more than
    ``entry_table.IN_MAX`` (a decade and a half of days) recompute everything instead, which
    keys_predicate would refuse (the fact pool spans 20 days: IN_MAX 5 here)."""
    store, facts, entities, given = accounted(tmp_path, landed=20)
    land(store, facts[facts["entity"].isin(entities[20:])])
    monkeypatch.setattr(entry_table, "IN_MAX", 5)
    updated = incremental.update(store, given)
    assert updated.whole.endswith("days touched (over one predicate's 5 values a source)")
    assert_as_from_scratch(store, given)
    monkeypatch.undo()
    land(store, facts[facts["entity"] == entities[0]].assign(energy_j=1.0))  # one day or two
    assert incremental.update(store, given).whole == ""
    assert_as_from_scratch(store, given)


def test_more_changed_entities_than_one_predicate_names_are_written_in_parts(
        tmp_path, monkeypatch):
    """Ten entities landed, then ten removed, in parts of two a source (``IN_LIMIT`` 2; two
    or three entities a source: three parts): each is kept incrementally (no whole
    recompute), members and per-fact rows one commit per part, and equals a rebuild from
    scratch."""
    store, facts, entities, given = accounted(tmp_path, landed=20)
    monkeypatch.setattr(entry_table, "IN_LIMIT", 2)
    commits = []
    replace_where = entry_table.replace_where

    def counted(warehouse, table, *args, **kwargs):
        commits.append(table)
        replace_where(warehouse, table, *args, **kwargs)

    monkeypatch.setattr(incremental.entry_table, "replace_where", counted)
    land(store, facts[facts["entity"].isin(entities[20:30])])
    updated = incremental.update(store, given)
    assert (updated.whole, updated.changed) == ("", 10)

    def parts(landed: pd.DataFrame) -> int:  # at most 2 entities of a source each
        keys = landed[["source", "entity"]].astype(str).drop_duplicates()
        return len(list(entry_table.key_parts(keys)))

    assert commits.count(incremental.kept_months.MEMBERS_TABLE) == parts(
        facts[facts["entity"].isin(entities[20:30])]) > 1
    assert commits.count(incremental.COST_TABLE) == 1  # none stored: one append
    assert_as_from_scratch(store, given)
    gone = facts[facts["entity"].isin(entities[:10])].groupby("source")["entity"].unique()
    land(store, facts.iloc[:0], {source: list(map(str, names)) for source, names in gone.items()})
    commits.clear()
    updated = incremental.update(store, given)
    assert (updated.whole, updated.removed) == ("", 10)
    assert commits.count(incremental.CARBON_TABLE) == parts(
        facts[facts["entity"].isin(entities[:10])]) > 1
    assert_as_from_scratch(store, given)


@pytest.mark.parametrize("table", [incremental.kept_months.MEMBERS_TABLE,
                                   incremental.COST_TABLE, incremental.CARBON_TABLE])
def test_a_run_stopped_between_two_parts_is_completed_by_the_next(tmp_path, monkeypatch,
                                                                    table):
    """Ten entities' facts moved five days on (across the month's end), in parts of two a
    source (two or three entities a source: three parts): the run dies at
    ``table``'s second part (the first committed; for the members with the months' counts
    it gives), then the facts go back to those the state consumed, which carbon_per_fact
    (not reached, or reached in part) may hold: the next run rewrites the entities its
    ``Pending`` names, and a later landing in the same months keeps the counts right."""
    store, _, entities, given = accounted(tmp_path)
    monkeypatch.setattr(entry_table, "IN_LIMIT", 2)
    replace_where = entry_table.replace_where
    commits = []

    def dies(warehouse, name, *args, **kwargs):
        commits.append(name)
        if commits.count(table) == 2:
            raise OSError("the run died")
        replace_where(warehouse, name, *args, **kwargs)

    old = store.read_table("energy_facts")
    moved = old[old["entity"].isin(entities[:10])]
    monkeypatch.setattr(incremental.entry_table, "replace_where", dies)
    land(store, moved.assign(window_start=moved["window_start"] + pd.Timedelta(days=5),
                             window_end=moved["window_end"] + pd.Timedelta(days=5)))
    with pytest.raises(OSError, match="died"):
        incremental.update(store, given)
    monkeypatch.setattr(incremental.entry_table, "replace_where", replace_where)
    land(store, moved)  # back to the facts the state consumed
    assert (incremental.update(store, given).whole) == ""
    assert_as_from_scratch(store, given)
    fixed = old[old["entity"].isin(entities[:5])]
    land(store, fixed.assign(energy_j=3.0))
    assert incremental.update(store, given).changed == 5
    assert_as_from_scratch(store, given)


def kept_jobs_store(tmp_path, seed: int):
    """A store of ``pool(30, seed)``'s facts with its jobs in cc_jobs kept per entry,
    accounted: the store, its jobs, the inputs."""
    facts = pool(30, seed=seed)
    cc = sorted(facts.loc[facts["source"] == "clustercockpit", "entity"].unique())
    jobs = jobs_of(cc, np.random.default_rng(seed))
    given = inputs(tmp_path, base=350.0, price=1.0)

    def build(store: Warehouse) -> None:
        land(store, facts)
        entry_table.write_keyed(store, "cc_jobs", jobs, "job")
        incremental.update(store, given)

    return copied(tmp_path, f"kept-jobs-{seed}", build), jobs, given


def as_written_before(store: Warehouse) -> None:
    """The state as the code before cc_jobs' files were kept wrote it: its inputs without
    the jobs' mode and files, cc_jobs' version as ``Warehouse.files`` listed it, and a
    partition of every job's attribution digest."""
    state = incremental.STATE_TABLE
    rows = store.read_partitions(state, ["inputs"])
    version = ";".join(f"{info.path}:{info.size}:{info.mtime_ns}"
                       for info in store.files("cc_jobs"))
    rows = pd.concat([rows[rows["kind"].isin(["digest", "file"])],
                      pd.DataFrame([("jobs_version", "", version)], columns=rows.columns)],
                     ignore_index=True)
    digests = incremental._job_digests(store.read_table("cc_jobs"))
    store.write_partition(state, "jobs", pd.DataFrame(
        {"job": digests.index.to_numpy(object), "digest": digests.to_numpy(np.uint64)}))
    store.write_partition(state, "inputs", rows)


@pytest.mark.parametrize("since", ["unchanged", "a user changed"])
def test_a_state_written_before_is_compared_once_the_old_way(tmp_path, since):
    """A state of the code before (a digest per job): cc_jobs unchanged since, nothing is
    read of it; changed, every job's digest is compared once with the stored ones, as
    before. Then the state keeps cc_jobs' files, its digests removed, and a later change is
    found from the files new and gone."""
    store, jobs, given = kept_jobs_store(tmp_path, seed=41)
    as_written_before(store)
    assert state_inputs(store) == {"jobs_mode": [], "jobs_files": 0, "digests": True}
    if since != "unchanged":
        entry_table.write_keyed(store, "cc_jobs", jobs.iloc[[0]].assign(hpc_user="erin"), "job")
    updated = incremental.update(store, given)
    assert updated.whole == ""
    if since == "unchanged":
        assert (updated.changed, updated.jobs_changed, updated.jobs_read) == (0, 0, 0)
    else:
        assert (updated.changed, updated.jobs_changed) == (1, 1)
        assert updated.jobs_read >= len(jobs)  # compared whole
    assert state_inputs(store) == {"jobs_mode": ["delta"], "jobs_files": len(cc_jobs_files(store)),
                                   "digests": False}
    assert_as_from_scratch(store, given)
    entry_table.write_keyed(store, "cc_jobs", jobs.iloc[[1]].assign(project="p7"), "job")
    later = incremental.update(store, given)
    assert (later.whole, later.changed, later.jobs_changed) == ("", 1, 1)
    assert_as_from_scratch(store, given)


def test_a_run_stopped_before_the_old_digests_are_removed_is_completed(tmp_path, monkeypatch):
    """The first run over a state of the code before writes the new state, then dies
    removing the jobs' digests: the next run reads the new state (the digests unread), finds
    no job changed in cc_jobs, rewrites the changed job's entity ``Pending`` names and
    removes the digests."""
    store, jobs, given = kept_jobs_store(tmp_path, seed=43)
    as_written_before(store)
    entry_table.write_keyed(store, "cc_jobs", jobs.iloc[[0]].assign(hpc_user="erin"), "job")
    remove = Warehouse.remove_partition

    def dies(self, table, key):
        if key == incremental.JOB_DIGESTS:
            raise OSError("the run died")
        remove(self, table, key)

    monkeypatch.setattr(Warehouse, "remove_partition", dies)
    with pytest.raises(OSError, match="died"):
        incremental.update(store, given)
    monkeypatch.undo()
    assert state_inputs(store)["digests"] and state_inputs(store)["jobs_mode"] == ["delta"]
    again = incremental.update(store, given)  # rewrites the job Pending names, as it was
    assert (again.whole, again.changed, again.jobs_changed) == ("", 1, 0)
    assert not state_inputs(store)["digests"]
    assert not store.has_partition(incremental.STATE_TABLE, incremental.PENDING)
    assert_as_from_scratch(store, given)


@pytest.mark.parametrize(("table", "back"), [(incremental.kept_months.MEMBERS_TABLE, False),
                                             (incremental.CARBON_TABLE, True)])
def test_a_run_stopped_after_a_job_changed_is_completed_then_gone_back(tmp_path, monkeypatch,
                                                                          table, back):
    """A job's user changed in cc_jobs (kept per entry) and a new job with its facts; the
    run dies at ``table``'s commit. The next run finds the same jobs changed from cc_jobs'
    files; or (``back``), the user put back meanwhile (no change left in the files since
    the state), rewrites that job's entity from ``Pending``. Either way the tables equal a
    rebuild."""
    store, jobs, given = kept_jobs_store(tmp_path, seed=47)
    new = pool(30, seed=47).iloc[[0]].assign(entity="g1/new")
    land(store, new)
    entry_table.write_keyed(store, "cc_jobs", pd.concat([
        jobs.iloc[[0]].assign(hpc_user="frank"),
        jobs_of(["g1/new"], np.random.default_rng(1))]), "job")
    die_at(monkeypatch, table)
    with pytest.raises(OSError, match="died"):
        incremental.update(store, given)
    monkeypatch.undo()
    if back:
        entry_table.write_keyed(store, "cc_jobs", jobs.iloc[[0]], "job")
    updated = incremental.update(store, given)
    assert (updated.whole, updated.changed) == ("", 2)
    assert updated.jobs_changed == (1 if back else 2)  # g1/new; and the user, if changed
    assert_as_from_scratch(store, given)
    assert incremental.update(store, given).changed == 0


def test_cc_jobs_that_cannot_be_compared_by_their_files_are_recomputed_whole(tmp_path):
    """A cc_jobs data file last consumed, no longer listed and no longer stored (vacuumed):
    everything is recomputed; so too when cc_jobs is no longer kept per entry (plain
    files)."""
    store, jobs, given = kept_jobs_store(tmp_path, seed=53)
    consumed = cc_jobs_files(store)
    entry_table.replace_keys(store, "cc_jobs", jobs.assign(hpc_user="gina"), None)
    for path in consumed:
        Path(path).unlink()
    updated = incremental.update(store, given)
    assert updated.whole == "a data file of cc_jobs last consumed is no longer stored"
    assert_as_from_scratch(store, given)
    shutil.rmtree(store.table_path("cc_jobs"))
    store.write_table("cc_jobs", jobs)
    updated = incremental.update(store, given)
    assert updated.whole == "cc_jobs is no longer a table kept per entry"
    assert_as_from_scratch(store, given)
    assert state_inputs(store) == {"jobs_mode": ["plain"], "jobs_files": 0, "digests": True}
