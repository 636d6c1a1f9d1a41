"""cc_jobs, cc_job_energy and cc_rollup kept per entry (joulehouse/clustercockpit/tables.py):
after a seeded random sequence of block landings, fixes, moved and deleted jobs and blocks
removed, the tables equal a rebuild from scratch, row for row."""

import random
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from joulehouse import entry_table
from joulehouse.clustercockpit import tables as kept
from joulehouse.clustercockpit.aggregate import (
    ROLLUP_KEYS,
    SUM_LIMIT,
    SUMS,
    group_sums,
    job_sums,
    rollup,
)
from joulehouse.clustercockpit.blocks import read_block
from joulehouse.clustercockpit.generator import JobSpec, write_archive_files, write_job
from joulehouse.clustercockpit.layout import job_folder
from joulehouse.warehouse import Warehouse
from tests.kept_stops import stop_at_commit

CLUSTERS = ["alpha", "beta"]
DAY_S = 86_400
START = 1_700_000_000
FRAMES = "frames"  # the blocks' stored frames, as cc_block_tables holds them


def frames_of(tables: Warehouse, keys: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (tables.read_partitions(f"{FRAMES}/jobs", keys),
            tables.read_partitions(f"{FRAMES}/job_energy", keys))


def store_block(tables: Warehouse, root, key: str) -> None:
    read = read_block(root, key, check_schema=False)
    assert not read.failed
    for name in ("jobs", "job_energy"):
        tables.write_partition(f"{FRAMES}/{name}", key, read.frames[name])


def ordered(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return frame.sort_values(by, ignore_index=True)


def assert_rebuilt(tables: Warehouse) -> None:
    """Each table (the rollup's kept sums too) equals what a rebuild from every stored block
    writes, to the bit."""
    keys = tables.partition_keys(f"{FRAMES}/jobs")
    jobs, energy = frames_of(tables, keys) if keys else (pd.DataFrame(), pd.DataFrame())
    assert_tables_hold(tables, jobs, energy)


def assert_tables_hold(tables: Warehouse, jobs: pd.DataFrame, energy: pd.DataFrame) -> None:
    """cc_jobs and cc_job_energy hold ``jobs`` and ``energy``, and the rollup and its sums
    are theirs from scratch, to the bit."""
    sums = group_sums(job_sums(jobs, energy)) if len(jobs) else pd.DataFrame()
    for table, rows, by in (
            (kept.JOBS, jobs, ["job"]), (kept.JOB_ENERGY, energy, ["job", "metric"]),
            (kept.ROLLUP, rollup(jobs, energy) if len(jobs) else pd.DataFrame(), ROLLUP_KEYS),
            (kept.ROLLUP_SUMS, sums, ROLLUP_KEYS)):
        rows = table.ready(rows)
        stored = table.stored(tables)
        assert len(stored) == len(rows), table.table
        if len(rows):
            pd.testing.assert_frame_equal(ordered(stored, by), ordered(rows, by),
                                          check_dtype=False, check_exact=True, obj=table.table)


def test_random_landings_fixes_and_removals_equal_a_rebuild(tmp_path, monkeypatch):
    """Landings, fixes, moves, regroupings (a job's user, project and partition changed
    under the same key), deletions and removals, some landings stopped at a random commit
    (their blocks landed again later): after each step the rollup and its sums are those of
    what cc_jobs and cc_job_energy hold, to the bit, and once every block is landed the
    tables equal a rebuild."""
    rng = random.Random(3)
    root, tables = tmp_path / "archive", Warehouse(tmp_path / "warehouse")
    write_archive_files(root, CLUSTERS)
    jobs: dict[tuple[str, int], JobSpec] = {}  # (cluster, job id) -> its spec on disk
    unlanded: set[str] = set()  # blocks stored whose landing was stopped

    def write(spec: JobSpec) -> str:
        old = jobs.get((spec.cluster, spec.job_id))
        if old is not None:
            shutil.rmtree(job_folder(root, old.cluster, old.job_id, old.start_time))
        jobs[(spec.cluster, spec.job_id)] = spec
        write_job(root, spec)
        return f"{spec.cluster}/{spec.job_id // 1000}"

    def spec(cluster: str, job_id: int) -> JobSpec:
        return JobSpec(cluster=cluster, job_id=job_id, hosts=1, samples=4,
                       start_time=START + rng.randrange(4) * DAY_S + rng.randrange(600),
                       base_power_w=rng.choice([100.0, 150.0, 200.0]),
                       user=rng.choice(["u1", "u2"]), project=rng.choice(["p1", "p2"]),
                       partition=rng.choice(["batch", "gpu"]))

    def change(action: str) -> set[str]:
        """The blocks ``action`` changed on disk."""
        touched: set[str] = set()
        if action == "land":  # new jobs in one or two blocks
            for _ in range(rng.randrange(1, 4)):
                cluster = rng.choice(CLUSTERS)
                touched.add(write(spec(cluster, rng.choice([1, 2, 3]) * 1000 + rng.randrange(5))))
        elif jobs and action in ("fix", "move", "regroup"):
            # same job, other energy (fix), day (move) or user, project and partition
            (cluster, job_id), old = rng.choice(sorted(jobs.items()))
            changed = spec(cluster, job_id)
            if action == "fix":
                changed = replace(old, base_power_w=old.base_power_w + 7.0)
            elif action == "regroup":
                changed = replace(old, user={"u1": "u2", "u2": "u1"}[old.user],
                                  project={"p1": "p2", "p2": "p1"}[old.project],
                                  partition={"batch": "gpu", "gpu": "batch"}[old.partition])
            touched.add(write(changed))
        elif jobs and action == "delete":  # a job folder deleted from a re-read block
            (cluster, job_id), old = rng.choice(sorted(jobs.items()))
            shutil.rmtree(job_folder(root, cluster, job_id, old.start_time))
            del jobs[(cluster, job_id)]
            touched.add(f"{cluster}/{job_id // 1000}")
        return touched

    def land(blocks: set[str]) -> None:
        for key in blocks:
            store_block(tables, root, key)
        kept.land(tables, sorted(blocks), lambda keys: frames_of(tables, keys))

    # each kind of change once or twice, each of a landing's commits stopped once
    actions = ["land", "fix", "move", "delete", "remove", "regroup", *["stop"] * 4, "land"]
    stops = [1, 2, 3, 4]
    rng.shuffle(actions)
    rng.shuffle(stops)
    for action in ["land", "land", *actions]:
        if action == "remove":  # a block removed (deleted from Dagster): the daily rebuild
            stored = tables.partition_keys(f"{FRAMES}/jobs")
            if stored:
                gone = rng.choice(stored)
                for name in ("jobs", "job_energy"):
                    tables.remove_partition(f"{FRAMES}/{name}", gone)
                for key in [k for k in jobs if f"{k[0]}/{k[1] // 1000}" == gone]:
                    shutil.rmtree(job_folder(root, key[0], key[1], jobs.pop(key).start_time))
            stored = tables.partition_keys(f"{FRAMES}/jobs")
            kept.rebuild(tables, *frames_of(tables, stored)) if stored else None
            unlanded.clear()
        elif action == "stop":  # a change landed, the landing stopped at one of its commits
            touched = change(rng.choice(["land", "fix", "move", "delete", "regroup"]))
            stop_at_commit(monkeypatch, stops.pop())
            with pytest.raises(RuntimeError):
                land(touched)
            monkeypatch.undo()
            unlanded |= touched
            continue
        else:
            touched = change(action)
            if unlanded and rng.random() < 0.5:
                touched, unlanded = touched | unlanded, set()
            land(touched)
        if unlanded:
            assert_tables_hold(tables, kept.JOBS.stored(tables), kept.JOB_ENERGY.stored(tables))
        else:
            assert_rebuilt(tables)
    land(unlanded)
    assert_rebuilt(tables)
    assert len(kept.JOBS.stored(tables)) >= 3


#: Job 1000 of block alpha/1, moved or deleted by the tests stopped between commits.
MOVED = JobSpec(cluster="alpha", job_id=1000, hosts=1, samples=4, start_time=START)


def two_blocks_landed(folder: Path, other_day: int) -> Path:
    """Into ``folder``: ``archive``, :data:`MOVED` and job 2000 (block alpha/2) on day
    ``other_day`` after it, and ``warehouse``, both blocks stored and landed."""
    root, tables = folder / "archive", Warehouse(folder / "warehouse")
    write_archive_files(root, CLUSTERS)
    for spec in (MOVED, replace(MOVED, job_id=2000, start_time=START + other_day * DAY_S)):
        write_job(root, spec)
        store_block(tables, root, f"alpha/{spec.job_id // 1000}")
    kept.land(tables, ["alpha/1", "alpha/2"], lambda keys: frames_of(tables, keys))
    return folder


@pytest.fixture(scope="module")
def same_day_landed(tmp_path_factory) -> Path:
    """:func:`two_blocks_landed` with both jobs on the same day, made once: copied by
    :func:`copy_of`."""
    return two_blocks_landed(tmp_path_factory.mktemp("same_day"), 0)


@pytest.fixture(scope="module")
def days_apart_landed(tmp_path_factory) -> Path:
    """:func:`two_blocks_landed` with job 2000 three days after :data:`MOVED`, made once."""
    return two_blocks_landed(tmp_path_factory.mktemp("days_apart"), 3)


def copy_of(landed: Path, tmp_path: Path) -> tuple[Path, Warehouse]:
    """A copy, this test's own, of the archive and warehouse of ``landed``."""
    for name in ("archive", "warehouse"):
        shutil.copytree(landed / name, tmp_path / name)
    return tmp_path / "archive", Warehouse(tmp_path / "warehouse")


@pytest.mark.parametrize("stop", [1, 2, 3, 4])
@pytest.mark.parametrize("change", ["move", "delete"])
def test_a_landing_stopped_between_its_commits_ends_as_a_rebuild_once_run_again(
        tmp_path, monkeypatch, same_day_landed, stop, change):
    """A block's only job on a day moved to another day or deleted, the landing stopped at
    its ``stop``-th commit: the next run over the block still recomputes the old day."""
    root, tables = copy_of(same_day_landed, tmp_path)  # two blocks' jobs, the same day
    moved = MOVED
    land = lambda: kept.land(tables, ["alpha/1"], lambda keys: frames_of(tables, keys))
    shutil.rmtree(job_folder(root, "alpha", 1000, START))
    if change == "move":
        write_job(root, replace(moved, start_time=START + 2 * DAY_S))
    store_block(tables, root, "alpha/1")
    stop_at_commit(monkeypatch, stop)
    with pytest.raises(RuntimeError):
        land()
    monkeypatch.undo()
    land()
    assert_rebuilt(tables)


def test_a_rebuild_migrates_tables_stored_the_old_way_and_writes_only_what_differs(tmp_path):
    root, tables = tmp_path / "archive", Warehouse(tmp_path / "warehouse")
    write_archive_files(root, CLUSTERS)
    for job_id in (1000, 1001, 2000):
        write_job(root, JobSpec(cluster="alpha", job_id=job_id, hosts=1, samples=4,
                                start_time=START + job_id))
    for key in ("alpha/1", "alpha/2"):
        store_block(tables, root, key)
    jobs, energy = frames_of(tables, ["alpha/1", "alpha/2"])
    # as the code before wrote them: one plain file per table, one job too many
    tables.write_table("cc_jobs", pd.concat([jobs, jobs.assign(job="alpha/1999/1")]))
    tables.write_table("cc_job_energy", energy)
    tables.write_table("cc_rollup", rollup(jobs, energy))
    landed = kept.rebuild(tables, jobs, energy)
    assert (landed.jobs.entities, landed.jobs.removed) == (0, 1)
    assert landed.job_energy.entities == 0 and landed.rollup.whole  # the rollup: see below
    assert entry_table.is_entry_table(tables, "cc_jobs")
    assert_rebuilt(tables)
    assert kept.JOBS.count(tables) == 3


def test_a_rollup_stored_the_old_way_is_replaced_whole_by_its_first_rebuild(tmp_path):
    """A plain cc_rollup (its days summed in another order) is not kept: the first run is a
    rebuild, which replaces it whole even where it compares equal, so that the next is not."""
    root, tables = tmp_path / "archive", Warehouse(tmp_path / "warehouse")
    write_archive_files(root, CLUSTERS)
    write_job(root, JobSpec(cluster="alpha", job_id=1000, hosts=1, samples=4, start_time=START))
    store_block(tables, root, "alpha/1")
    jobs, energy = frames_of(tables, ["alpha/1"])
    tables.write_table("cc_rollup", rollup(jobs, energy))
    assert not kept.is_kept(tables)
    assert kept.rebuild(tables, jobs, energy).rollup.whole
    assert kept.is_kept(tables)
    assert_rebuilt(tables)


@pytest.fixture(scope="module")
def one_job_landed(tmp_path_factory) -> Warehouse:
    """A warehouse with block beta/0 (one job) landed, made once: read, never written."""
    folder = tmp_path_factory.mktemp("one_job")
    root, tables = folder / "archive", Warehouse(folder / "warehouse")
    write_archive_files(root, CLUSTERS)
    write_job(root, JobSpec(cluster="beta", job_id=5, hosts=1, samples=4))
    store_block(tables, root, "beta/0")
    kept.land(tables, ["beta/0"], lambda keys: frames_of(tables, keys))
    return tables


@pytest.mark.parametrize("read", ["read_table", "files"])
def test_readers_read_the_kept_tables_as_before(one_job_landed, read):
    tables = one_job_landed
    if read == "read_table":
        assert tables.read_table("cc_jobs")["job"].tolist() == ["beta/5/1700000000"]
    else:
        assert len(tables.files("cc_rollup")) == 1


def test_a_landing_reads_its_blocks_jobs_and_the_days_sums_not_the_days_jobs(
        tmp_path, monkeypatch):
    """A job landing on a day that holds others: of cc_jobs and cc_job_energy the landing
    reads its block's stored rows alone (none: a new block), of the kept sums the day's
    groups; the rollup still equals a rebuild."""
    root, tables = tmp_path / "archive", Warehouse(tmp_path / "warehouse")
    write_archive_files(root, CLUSTERS)
    for job_id in (1000, 1001, 1002, 2000, 2001, 2002):
        write_job(root, JobSpec(cluster="alpha", job_id=job_id, hosts=1, samples=4,
                                start_time=START + job_id, user=f"u{job_id % 2}"))
    for key in ("alpha/1", "alpha/2"):
        store_block(tables, root, key)
    kept.land(tables, ["alpha/1", "alpha/2"], lambda keys: frames_of(tables, keys))
    write_job(root, JobSpec(cluster="alpha", job_id=3000, hosts=1, samples=4,
                            start_time=START + 3000))
    store_block(tables, root, "alpha/3")
    read: dict[str, int] = {}
    read_where = entry_table.read_where

    def counted(warehouse, table, *args, **kwargs):
        rows = read_where(warehouse, table, *args, **kwargs)
        read[table] = read.get(table, 0) + len(rows)
        return rows

    monkeypatch.setattr(entry_table, "read_where", counted)
    kept.land(tables, ["alpha/3"], lambda keys: frames_of(tables, keys))
    assert read == {"cc_jobs": 0, "cc_job_energy": 0, "_cc_rollup_sums": 2}  # u0's, u1's
    monkeypatch.undo()
    assert_rebuilt(tables)


@pytest.mark.parametrize("stop", [1, 2, 3, 4])
def test_a_rebuild_stopped_between_its_commits_leaves_every_day_to_the_next_landing(
        tmp_path, monkeypatch, days_apart_landed, stop):
    """A rebuild (a job moved to another day) stopped at its ``stop``-th commit: the next
    landing, over another block, recomputes every day's sums from cc_jobs as they are
    (the moved job's old day too), and once its block lands the tables equal a rebuild."""
    root, tables = copy_of(days_apart_landed, tmp_path)  # job 2000 three days after
    moved = MOVED
    shutil.rmtree(job_folder(root, "alpha", 1000, START))
    write_job(root, replace(moved, start_time=START + DAY_S))
    store_block(tables, root, "alpha/1")
    stop_at_commit(monkeypatch, stop)
    with pytest.raises(RuntimeError):
        kept.rebuild(tables, *frames_of(tables, ["alpha/1", "alpha/2"]))
    monkeypatch.undo()
    write_job(root, replace(moved, job_id=2001, start_time=START + 3 * DAY_S))
    store_block(tables, root, "alpha/2")
    kept.land(tables, ["alpha/2"], lambda keys: frames_of(tables, keys))
    assert_tables_hold(tables, kept.JOBS.stored(tables), kept.JOB_ENERGY.stored(tables))
    kept.land(tables, ["alpha/1"], lambda keys: frames_of(tables, keys))
    assert_rebuilt(tables)


def test_a_store_kept_before_the_sums_is_recomputed_whole_by_its_first_landing(tmp_path):
    """cc_rollup kept per entry by the code before the sums (its days summed in floating
    point, here one day off): the first landing finds no sums beside stored jobs and
    recomputes every day from cc_jobs, the days it does not touch too."""
    root, tables = tmp_path / "archive", Warehouse(tmp_path / "warehouse")
    write_archive_files(root, CLUSTERS)
    for job_id, day in ((1000, 0), (2000, 2)):
        write_job(root, JobSpec(cluster="alpha", job_id=job_id, hosts=1, samples=4,
                                start_time=START + day * DAY_S))
        store_block(tables, root, f"alpha/{job_id // 1000}")
    kept.land(tables, ["alpha/1", "alpha/2"], lambda keys: frames_of(tables, keys))
    stored = kept.ROLLUP.stored(tables)
    kept.ROLLUP.write(tables, stored.assign(energy_j=stored["energy_j"] + 1.0), [])
    shutil.rmtree(tables.table_path(kept.ROLLUP_SUMS.table))
    write_job(root, JobSpec(cluster="alpha", job_id=1001, hosts=1, samples=4,
                            start_time=START))
    store_block(tables, root, "alpha/1")
    kept.land(tables, ["alpha/1"], lambda keys: frames_of(tables, keys))
    assert_rebuilt(tables)


def test_a_landing_with_a_job_of_another_block_is_refused_before_any_write(tmp_path):
    """A block's rows holding a job of another block: refused before the sums, the rollup
    or the pending mark are written, the tables as they were."""
    root, tables = tmp_path / "archive", Warehouse(tmp_path / "warehouse")
    write_archive_files(root, CLUSTERS)
    for job_id in (1000, 2000):
        write_job(root, JobSpec(cluster="alpha", job_id=job_id, hosts=1, samples=4,
                                start_time=START + job_id))
        store_block(tables, root, f"alpha/{job_id // 1000}")
    kept.land(tables, ["alpha/1"], lambda keys: frames_of(tables, keys))
    before = {table.table: table.stored(tables) for table in
              (kept.JOBS, kept.JOB_ENERGY, kept.ROLLUP, kept.ROLLUP_SUMS)}
    with pytest.raises(ValueError, match=r"cc_jobs: rows of entries no owner given owns: "
                                         r"\['alpha/2000/1700002000'\]"):
        kept.land(tables, ["alpha/1"], lambda keys: frames_of(tables, ["alpha/1", "alpha/2"]))
    for table, rows in before.items():
        pd.testing.assert_frame_equal(entry_table.read(tables, table), rows, check_dtype=False)
    assert kept.Pending.read(tables) == kept.Pending()


def _sums(**changed: int) -> pd.DataFrame:
    """One group's sums on 2023-11-14: a job with energy, ``changed`` replacing some."""
    return pd.DataFrame([{"day": pd.Timestamp("2023-11-14", tz="UTC"), "cluster": "alpha",
                          "cluster_partition": "batch", "project": "p1", "hpc_user": "u1",
                          **dict.fromkeys(SUMS, 1), **changed}])


@pytest.mark.parametrize("changed", [{"energy_mj": -1}, {"jobs": 0}, {"jobs": 0, "node_ms": 0},
                                     {"jobs_with_energy": 2}])
def test_sums_no_jobs_have_are_refused_naming_the_day_and_group(changed):
    """A negative sum, a group without jobs but other sums, more jobs with energy than jobs:
    kept sums that are not those of the jobs stored, refused with a rebuild's how-to."""
    with pytest.raises(ValueError, match=r"day 2023-11-14, group .*\('alpha', 'batch', 'p1', "
                                         r"'u1'\) are no jobs' sums.*rebuild .*without "
                                         r"partitions"):
        group_sums(_sums(**changed))


def test_a_group_emptied_of_its_jobs_is_kept_as_zeros():
    assert group_sums(_sums(**dict.fromkeys(SUMS, 0)))[SUMS].to_numpy().tolist() == [[0] * 7]


def test_sums_and_values_over_the_kept_range_are_refused():
    """Two groups' energies that wrap int64 once summed, and a job's node-hours beyond the
    range (in node-ms), are refused rather than kept wrong."""
    rows = pd.concat([_sums(energy_mj=SUM_LIMIT - 1)] * 2, ignore_index=True)
    with pytest.raises(ValueError, match="a group's sum over the kept sums' range"):
        group_sums(rows)
    jobs = pd.DataFrame({"job": ["alpha/1/1"], "start_time_utc": [pd.Timestamp(0, tz="UTC")],
                         "cluster": ["alpha"], "cluster_partition": ["batch"],
                         "project": ["p1"], "hpc_user": ["u1"], "node_hours": [1.3e12]})
    energy = pd.DataFrame(columns=["job", "energy_j", "gap_s", "duration_s", "series",
                                   "energy_cc_kwh"])
    with pytest.raises(ValueError, match="a value of node_hours over the kept sums' range"):
        job_sums(jobs, energy)


def test_a_landing_after_older_code_wrote_cc_jobs_recomputes_every_day(tmp_path):
    """Code before the sums (a rollback) lands a block into cc_jobs and cc_job_energy
    without the sums: cc_jobs' version is no longer the stamped one, so the next landing
    here, over another block, recomputes every day's sums from cc_jobs."""
    root, tables = tmp_path / "archive", Warehouse(tmp_path / "warehouse")
    write_archive_files(root, CLUSTERS)
    for job_id in (1000, 2000, 3000):
        write_job(root, JobSpec(cluster="alpha", job_id=job_id, hosts=1, samples=4,
                                start_time=START + job_id))
        store_block(tables, root, f"alpha/{job_id // 1000}")
    kept.land(tables, ["alpha/1"], lambda keys: frames_of(tables, keys))
    jobs, energy = frames_of(tables, ["alpha/2"])  # as the older code lands alpha/2
    kept.JOBS.write(tables, kept.JOBS.ready(jobs), [])
    kept.JOB_ENERGY.write(tables, kept.JOB_ENERGY.ready(energy), [])
    kept.land(tables, ["alpha/3"], lambda keys: frames_of(tables, keys))
    assert kept.JOBS.count(tables) == 3
    assert_rebuilt(tables)


def test_a_landing_whose_read_sums_another_landing_changed_is_tried_again(
        tmp_path, monkeypatch):
    """Two landings of the same day and group interleaved: the second lands whole after
    the first read the day's sums; the first's commit of the sums is refused and it is
    tried again from its reads, so that the sums hold both blocks' jobs."""
    root, tables = tmp_path / "archive", Warehouse(tmp_path / "warehouse")
    write_archive_files(root, CLUSTERS)
    for job_id in (1000, 2000):
        write_job(root, JobSpec(cluster="alpha", job_id=job_id, hosts=1, samples=4,
                                start_time=START + job_id))
    store_block(tables, root, "alpha/1")
    kept.land(tables, ["alpha/1"], lambda keys: frames_of(tables, keys))
    store_block(tables, root, "alpha/2")
    write_job(root, JobSpec(cluster="alpha", job_id=1001, hosts=1, samples=4,
                            start_time=START + 1001))
    store_block(tables, root, "alpha/1")
    stored_sums, interleaved = kept._stored_sums, []

    def read_then_other_lands(warehouse, days):
        sums = stored_sums(warehouse, days)
        if not interleaved:
            interleaved.append(True)
            kept.land(tables, ["alpha/2"], lambda keys: frames_of(tables, keys))
        return sums

    monkeypatch.setattr(kept, "_stored_sums", read_then_other_lands)
    kept.land(tables, ["alpha/1"], lambda keys: frames_of(tables, keys))
    assert interleaved and kept.JOBS.count(tables) == 3
    assert_rebuilt(tables)
