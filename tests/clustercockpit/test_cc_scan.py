"""The incremental scan of a job archive (Dagster-free): new, reused, out-of-order,
incomplete, replaced, rewritten, linked-out and stray folders; recheck; the cursor size.
Small tmp archives of tiny synthetic jobs keep these fast."""

import gzip
import os
import shutil
import time
from pathlib import Path

import pytest

from joulehouse import treescan
from joulehouse.clustercockpit import layout
from joulehouse.clustercockpit import scan as scan_module
from joulehouse.clustercockpit.generator import JobSpec, write_archive_files, write_job
from joulehouse.clustercockpit.layout import JobRef
from joulehouse.clustercockpit.scan import ScanState, scan

LATER = 10**10  # a clock far past every file's last change: everything is quiet
START = 1_700_000_000


def add(root: Path, job_id: int, start: int = START, cluster: str = "c1", **kw) -> str:
    """Write a tiny complete job; its key ``cluster/jobId/startTime``."""
    write_job(root, JobSpec(cluster=cluster, job_id=job_id, start_time=start, hosts=1,
                            samples=3, **kw))
    return f"{cluster}/{job_id}/{start}"


def tick(root: Path, state: ScanState, **kw):
    """One scan (quiet after 1 s, cap 100, clock LATER, incomplete jobs never handed out,
    unless given) from a cursor round-trip, as a sensor does."""
    kw = {"quiet_s": 1, "max_jobs": 100, "now": LATER, "incomplete_after_s": None, **kw}
    return scan(root, ScanState.from_json(state.to_json()), **kw)


def keys(result) -> list[str]:
    return sorted(job.ref.key for job in result.ready)


@pytest.fixture
def archive(tmp_path) -> Path:
    root = tmp_path / "archive"
    write_archive_files(root, ["c1", "c2"])
    return root


def test_new_jobs_in_new_and_existing_blocks(archive):
    first = [add(archive, 1000), add(archive, 1001), add(archive, 2999, cluster="c2")]
    result = tick(archive, ScanState())
    assert keys(result) == sorted(first)
    assert result.pending == result.deferred == result.unlisted == 0 and result.errors == []
    job = result.ready[0]
    assert job.ref == JobRef(archive, "c1", 1000, START)
    assert job.fingerprint == layout.fingerprint(job.ref.path)
    assert sorted(result.state.blocks) == ["c1/1", "c2/2"]
    assert ScanState.from_json(result.state.to_json()).blocks == result.state.blocks
    assert tick(archive, result.state).ready == []
    later = [add(archive, 1002), add(archive, 7005), add(archive, 3000, cluster="c2")]
    again = tick(archive, result.state)
    assert keys(again) == sorted(later)
    assert sorted(again.state.blocks) == ["c1/1", "c1/7", "c2/2", "c2/3"]


def test_a_job_id_reused_with_another_start_time_is_two_jobs(archive):
    both = [add(archive, 1000, START), add(archive, 1000, START + 86_400)]
    result = tick(archive, ScanState())
    assert keys(result) == sorted(both)
    # reused later in an old block: only the <jobId%1000> folder changes, not the block;
    # the rolling rescan finds it (or the next listing of its block)
    third = add(archive, 1000, START + 2 * 86_400)
    assert tick(archive, result.state, full_rescan_s=None).ready == []
    rescan = tick(archive, result.state, full_rescan_s=0)
    assert keys(rescan) == [third] and rescan.rescanned == 1


def test_jobs_landing_out_of_start_time_order(archive):
    reported = tick(archive, ScanState(), now=None, quiet_s=0)  # empty archive: a real tick
    add(archive, 1500, START + 5000)
    newer = tick(archive, reported.state, quiet_s=0, now=time.time() + 1)
    assert keys(newer) == [f"c1/1500/{START + 5000}"]
    late = [add(archive, 1499, START), add(archive, 1500, START - 3600),
            add(archive, 900, START - 7200)]  # earlier starts, ids below, an older block
    found = tick(archive, newer.state, quiet_s=0, now=time.time() + 1)
    assert keys(found) == sorted(late)


def test_incomplete_jobs_are_pending_until_complete_and_quiet(archive):
    good = add(archive, 1000)
    broken = {
        "no meta": add(archive, 1001), "no data": add(archive, 1002),
        "truncated json": add(archive, 1003), "truncated gz": add(archive, 1004, gzip=True),
    }
    paths = {name: JobRef(archive, "c1", int(k.split("/")[1]), START).path
             for name, k in broken.items()}
    saved = {name: {f.name: f.read_bytes() for f in p.iterdir()} for name, p in paths.items()}
    (paths["no meta"] / "meta.json").unlink()
    (paths["no data"] / "data.json").unlink()
    data = paths["truncated json"] / "data.json"
    data.write_bytes(data.read_bytes()[:-10])
    packed = paths["truncated gz"] / "data.json.gz"
    packed.write_bytes(packed.read_bytes()[:-8])  # the gzip trailer (CRC, size) is cut
    first = tick(archive, ScanState())
    assert keys(first) == [good] and first.pending == 4 and first.deferred == 0
    assert tick(archive, first.state).pending == 4
    for name, files in saved.items():  # completed
        for file, content in files.items():
            (paths[name] / file).write_bytes(content)
    now = time.time()
    quiet = tick(archive, first.state, quiet_s=60, now=now)
    assert quiet.ready == [] and quiet.pending == 4  # complete, not quiet yet
    done = tick(archive, quiet.state, quiet_s=60, now=now + 61)
    assert keys(done) == sorted(broken.values()) and done.pending == 0


def test_a_job_still_being_written_waits_for_the_quiet_period(archive):
    key = add(archive, 1000)
    now = time.time()
    assert tick(archive, ScanState(), quiet_s=30, now=now).pending == 1
    assert keys(tick(archive, ScanState(), quiet_s=30, now=now + 31)) == [key]


def replace_data_by_gz(ref: JobRef) -> None:
    """What cc-backend's compression does: data.json.gz written, data.json removed."""
    raw = (ref.path / "data.json").read_bytes()
    (ref.path / "data.json.gz").write_bytes(gzip.compress(raw))
    (ref.path / "data.json").unlink()


def rewrite_meta(ref: JobRef) -> None:
    """Tags added later: meta.json written anew through a temporary file."""
    text = ref.meta_path.read_text().replace('"tags":[]', '"tags":[{"name":"x","type":"y"}]')
    (ref.path / "meta.json.tmp").write_text(text)
    os.replace(ref.path / "meta.json.tmp", ref.meta_path)


@pytest.mark.parametrize("change", [replace_data_by_gz, rewrite_meta])
def test_a_reported_job_replaced_or_rewritten_is_reported_again(archive, change):
    add(archive, 1000), add(archive, 1001)
    now = time.time() + 10
    first = tick(archive, ScanState(), now=now)
    ref, other = (job.ref for job in first.ready)
    reported_with = first.ready[0].fingerprint
    change(ref)
    # watched: found at the next tick after its quiet period, its block not listed
    again = tick(archive, first.state, now=time.time() + 10, full_rescan_s=None)
    assert keys(again) == [ref.key] and again.rescanned == 0
    assert again.ready[0].fingerprint == layout.fingerprint(ref.path) != reported_with
    assert tick(archive, again.state, now=time.time() + 20).ready == []
    # after the watch, only the rolling rescan finds a change
    later = time.time() + 2 * 3600
    change = (rewrite_meta if change is replace_data_by_gz else replace_data_by_gz)
    change(other)
    assert tick(archive, again.state, now=later, full_rescan_s=None).ready == []
    found = tick(archive, again.state, now=later, full_rescan_s=3600)
    assert keys(found) == [other.key] and found.rescanned == 1


def test_only_the_last_reported_jobs_are_watched(archive):
    first = add(archive, 1000, START)
    reported = tick(archive, ScanState(), max_watched=1, now=time.time() + 5)
    second = add(archive, 1001, START)
    now = time.time() + 10
    watched = tick(archive, reported.state, max_watched=1, now=now)
    assert keys(watched) == [second] and list(watched.state.watched) == [
        "c1/1/001/1700000000"]
    for key in (first, second):
        rewrite_meta(JobRef(archive, "c1", int(key.split("/")[1]), START))
    again = tick(archive, watched.state, max_watched=1, now=now + 10)
    assert keys(again) == [second]  # the first is left to the rolling rescan


def test_a_symlink_leading_outside_is_reported_not_followed(archive, tmp_path):
    kept = [add(archive, 1000), add(archive, 3000)]
    outside = tmp_path / "outside"
    add(outside, 1001), add(outside, 2000)
    job_link = archive / "c1" / "1" / "001"
    job_link.symlink_to(outside / "c1" / "1" / "001", target_is_directory=True)
    block_link = archive / "c1" / "2"
    block_link.symlink_to(outside / "c1" / "2", target_is_directory=True)
    result = tick(archive, ScanState())
    assert keys(result) == sorted(kept)
    assert sorted(e.path for e in result.errors) == sorted([str(job_link), str(block_link)])
    assert all("leads outside the archive root" in e.reason for e in result.errors)
    inside = archive / "c1" / "1" / "002"  # a link within the root is followed
    inside.symlink_to(archive / "c1" / "3" / "000", target_is_directory=True)
    linked = tick(archive, result.state)
    assert keys(linked) == ["c1/1002/1700000000"]


def test_folders_that_are_not_job_folders_are_ignored(archive):
    key = add(archive, 1000)
    for stray in ["c1/notes", "c1/1/12/1700000000", "c1/1/abc/1700000000", "c1/1/000/x",
                  "c2/x1/000/1700000000"]:
        (archive / stray).mkdir(parents=True)
        shutil.copy(archive / "c1" / "1" / "000" / str(START) / "meta.json", archive / stray)
    (archive / "c1" / "1" / "000" / "README").write_text("not a job")
    result = tick(archive, ScanState())
    assert keys(result) == [key] and result.pending == 0 and result.errors == []
    assert sorted(result.state.blocks) == ["c1/1"]  # version.txt, cluster.json: files


def test_recheck_reports_a_failed_job_once_its_fingerprint_changed(archive):
    add(archive, 1000), add(archive, 1001)
    first = tick(archive, ScanState(), watch_s=0)
    failed = first.ready[0]
    recheck = {failed.ref.key: failed.fingerprint}
    assert tick(archive, first.state, recheck=recheck).ready == []
    rewrite_meta(failed.ref)
    fixed = tick(archive, first.state, recheck=recheck, now=time.time() + 10)
    assert keys(fixed) == [failed.ref.key] and fixed.pending == 0
    assert fixed.ready[0].fingerprint != failed.fingerprint


def test_over_the_cap_oldest_first_and_the_first_walk_spreads(archive):
    written = [add(archive, job_id) for job_id in range(1000, 1030)]
    written += [add(archive, job_id) for job_id in range(5000, 5010)]
    per_tick, state = [], ScanState()
    while True:
        result = tick(archive, state, max_jobs=8)
        state = result.state
        if not result.ready:
            break
        per_tick.append(keys(result))
    assert [len(t) for t in per_tick] == [8, 8, 8, 8, 8]
    assert sorted(k for t in per_tick for k in t) == sorted(written)
    assert result.pending == result.deferred == result.unlisted == 0


def test_the_cursor_keeps_no_name_per_job(archive, monkeypatch):
    def cursor_bytes(jobs_per_block: int) -> int:
        shutil.rmtree(archive / "c1", ignore_errors=True)
        for block in range(20):
            for job in range(jobs_per_block):
                add(archive, block * 1000 + job)
        # ... as on an archive whose jobs are older than the clock margin
        monkeypatch.setattr(treescan, "CLOCK_MARGIN_NS", 0)
        result = tick(archive, ScanState(), max_jobs=5000, watch_s=0)
        assert len(result.ready) == 20 * jobs_per_block and result.pending == 0
        return len(result.state.to_json())

    small, large = cursor_bytes(2), cursor_bytes(40)
    assert large < 40 * 20, large  # about 30 bytes per block, whatever its jobs
    assert large - small < 200, (small, large)


def test_an_unreadable_folder_is_reported_and_the_scan_goes_on(archive, monkeypatch):
    good, job, other = add(archive, 1000), add(archive, 1001), add(archive, 5000)
    denied = {JobRef(archive, "c1", 1001, START).path, archive / "c1" / "5"}
    real = os.scandir

    def scandir(path="."):  # what a 0700 folder of another user gives
        if Path(path) in denied:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    first = tick(archive, ScanState())
    assert keys(first) == [good] and first.pending == 1
    assert sorted(e.path for e in first.errors) == sorted(map(str, denied))
    assert all("Permission denied" in str(e) for e in first.errors)
    monkeypatch.setattr(os, "scandir", real)
    assert keys(tick(archive, first.state)) == sorted([job, other])


def test_a_job_left_incomplete_is_handed_out_once_quiet_for_incomplete_after_s(archive):
    key = add(archive, 1000, gzip=True)
    packed = JobRef(archive, "c1", 1000, START).path / "data.json.gz"
    packed.write_bytes(packed.read_bytes()[:-8])  # a copy that died: the trailer is cut
    changed = max(f.stat().st_mtime for f in packed.parent.iterdir())
    hour = scan(archive, ScanState(), quiet_s=1, max_jobs=1, now=changed + 60)
    assert hour.ready == [] and hour.pending == hour.incomplete == 1  # the default: 1 h
    late = scan(archive, hour.state, quiet_s=1, max_jobs=1, now=changed + 3601)
    assert keys(late) == [key] and late.pending == 0
    assert late.ready[0].fingerprint == layout.fingerprint(packed.parent)
    # reported as it is: not handed out again while unchanged
    assert scan(archive, late.state, quiet_s=1, max_jobs=1, now=changed + 7200).ready == []


def test_an_unmounted_archive_or_a_vanished_folder_keeps_the_state(archive, tmp_path):
    reported = tick(archive, ScanState())
    assert keys(reported) == [] and reported.errors == []
    jobs = [add(archive, 1000 + i * 50) for i in range(20)]
    reported = tick(archive, reported.state)
    assert keys(reported) == sorted(jobs)
    away = tmp_path / "away"
    archive.rename(away)  # unmounted: an empty mount point
    archive.mkdir()
    unmounted = tick(archive, reported.state)
    assert unmounted.ready == [] and unmounted.state == reported.state
    assert [e.path for e in unmounted.errors] == [str(archive)]
    assert "no version.txt" in str(unmounted.errors[0])
    archive.rmdir()
    assert tick(archive, reported.state).state == reported.state  # no mount point at all
    away.rename(archive)  # mounted again: nothing handed out again
    remounted = tick(archive, unmounted.state)
    assert remounted.ready == [] and remounted.errors == []
    # a cluster folder moved away and back within FORGET_AFTER_S: remembered
    (archive / "c1").rename(away)
    moved = tick(archive, remounted.state)
    assert moved.ready == [] and "c1/1" in moved.state.blocks
    assert moved.state.gone == {"c1": LATER}
    away.rename(archive / "c1")
    back = tick(archive, moved.state, now=LATER + 60)
    assert back.ready == [] and back.state.gone == {}
    # ... and forgotten once absent for that long: handed out again when it comes back
    (archive / "c1").rename(away)
    gone = tick(archive, back.state, now=LATER + 60 + treescan.FORGET_AFTER_S)
    assert "c1/1" in gone.state.blocks
    forgotten = tick(archive, gone.state, now=LATER + 60 + 2 * treescan.FORGET_AFTER_S)
    assert "c1/1" not in forgotten.state.blocks and forgotten.state.gone == {}
    away.rename(archive / "c1")
    assert keys(tick(archive, forgotten.state)) == sorted(jobs)


def test_a_folder_unreadable_for_over_an_hour_keeps_its_records(archive, monkeypatch):
    jobs = [add(archive, 1000 + i * 50, cluster=c) for i in range(5) for c in ("c1", "c2")]
    first = tick(archive, ScanState())
    assert keys(first) == sorted(jobs)
    bad, real = archive / "c2", Path.stat

    def stat(self, *args, **kw):  # what a failing disk or a stale NFS handle gives
        if self == bad or bad in self.parents:
            raise OSError(5, "Input/output error", str(self))
        return real(self, *args, **kw)

    monkeypatch.setattr(Path, "stat", stat)
    state = first.state
    for later in (60, 1800, 3700):  # more than FORGET_AFTER_S
        result = tick(archive, state, now=LATER + later)
        assert result.ready == [] and str(bad) in [e.path for e in result.errors]
        state = result.state
    assert "c2/1" in state.blocks and state.gone == {} and "c2" in state.stuck
    monkeypatch.setattr(Path, "stat", real)
    new = add(archive, 1400, cluster="c2")  # written while it could not be read
    back = tick(archive, state, now=LATER + 3800)
    assert keys(back) == [new] and back.errors == [] and back.state.stuck == {}
    assert tick(archive, back.state, now=LATER + 3900).ready == []
    later = add(archive, 9000, cluster="c2")
    assert keys(tick(archive, back.state, now=LATER + 4000)) == [later]


def test_a_block_that_cannot_be_listed_holds_the_watermark_for_an_hour_at_most(
        archive, monkeypatch):
    monkeypatch.setattr(treescan, "CLOCK_MARGIN_NS", 0)
    first = tick(archive, ScanState(), now=LATER)
    job = add(archive, 1000)  # the block c1/1 changes, then cannot be listed
    block, real = archive / "c1" / "1", os.scandir

    def scandir(path="."):  # what a 0700 folder of another user gives
        if Path(path) == block:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    held = block.stat().st_ctime_ns
    state, hour = first.state, treescan.FORGET_AFTER_S
    for i, later in enumerate((60, 600, hour - 1, hour + 60, hour + 600), start=2):
        new = add(archive, i * 1000)  # a new block elsewhere every tick
        result = tick(archive, state, now=LATER + later)
        assert keys(result) == [new] and [e.path for e in result.errors] == [str(block)]
        state = result.state
        newest = (archive / "c1" / str(i)).stat().st_ctime_ns
        if later < hour:
            assert state.since <= held
    assert state.since >= newest > held and state.stuck == {"c1/1": LATER + 60}
    assert len(state.recent) <= 2
    monkeypatch.setattr(os, "scandir", real)
    assert keys(tick(archive, state, now=LATER + hour + 660)) == [job]


#: A quiet period no job written by a test gets out of.
LONG_QUIET_S = 600.0


def early(**kw) -> dict:
    """A tick's settings with ``ready_when_complete`` at the clock's time (not LATER)."""
    return {"quiet_s": LONG_QUIET_S, "now": None, "ready_when_complete": True, **kw}


def test_with_ready_when_complete_a_job_completed_while_asked_is_handed_out_once(
        archive, monkeypatch):
    key = add(archive, 1000)
    meta = JobRef(archive, "c1", 1000, START).meta_path
    whole = meta.read_bytes()
    meta.write_bytes(whole[:-10])  # cc-backend still writing meta.json
    asked = []

    def completed_when_first_asked(path: Path) -> bool:  # meta.json ends in the gap
        if not asked:
            meta.write_bytes(whole)
        asked.append(path)
        return layout.is_complete(path)

    monkeypatch.setattr(scan_module, "is_complete", completed_when_first_asked)
    state, per_tick = ScanState(), []
    for _ in range(3):  # watched after its report
        result = tick(archive, state, **early())
        state = result.state
        per_tick.append([(job.ref.key, job.fingerprint) for job in result.ready])
    # complete, but not as probed before the ask: handed out at the next tick, as it is
    assert per_tick == [[], [(key, layout.fingerprint(meta.parent))], []]


def test_with_ready_when_complete_a_rechecked_job_still_waits_for_its_quiet_period(archive):
    add(archive, 1000)
    first = tick(archive, ScanState(), **early())
    failed = first.ready[0]
    recheck = {failed.ref.key: failed.fingerprint}
    rewrite_meta(failed.ref)  # fixed in place, complete at once (and watched)
    fixing = tick(archive, first.state, recheck=recheck, **early())
    assert fixing.ready == [] and fixing.pending == 0  # rechecked: not pending, not watched
    fixed = tick(archive, fixing.state, recheck=recheck,
                 **early(now=time.time() + LONG_QUIET_S + 1))
    assert keys(fixed) == [failed.ref.key]
    assert fixed.ready[0].fingerprint == layout.fingerprint(failed.ref.path)


@pytest.mark.parametrize("change", [replace_data_by_gz, rewrite_meta])
def test_with_ready_when_complete_a_watched_job_rewritten_is_handed_out_once_complete(
        archive, change):
    add(archive, 1000)
    first = tick(archive, ScanState(), **early())
    ref = first.ready[0].ref
    change(ref)  # inside its quiet period: handed out at the next tick all the same
    again = tick(archive, first.state, **early(full_rescan_s=None))
    assert keys(again) == [ref.key] and again.rescanned == 0
    assert again.ready[0].fingerprint == layout.fingerprint(ref.path)


@pytest.mark.parametrize("found_by", [
    {"full_rescan_s": None},  # watched: stat'ed every tick
    {"full_rescan_s": 0, "watch_s": 0},  # not watched: the rolling rescan, every tick here
])
def test_with_ready_when_complete_a_job_handed_out_early_then_rewritten_is_again_once(
        archive, found_by):
    key = add(archive, 1000)
    state, per_tick = ScanState(), []
    for index in range(4):
        if index == 1:
            rewrite_meta(JobRef(archive, "c1", 1000, START))  # tags, inside the quiet period
        result = tick(archive, state, **early(**found_by))
        state = result.state
        per_tick.append(keys(result))
    assert per_tick == [[key], [key], [], []]
