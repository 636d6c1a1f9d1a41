"""Job-id blocks: listing one block folder, reading it whole or only its new and changed
jobs, keeping a failed job's rows."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

import joulehouse
from joulehouse.clustercockpit import blocks
from joulehouse.clustercockpit.blocks import (
    FILES,
    FRAMES,
    READER_DATA,
    READER_SOURCES,
    READER_VERSION,
    BlockRead,
    keep_stored,
    left_out_of,
    parse_block_key,
    read_block,
    stored_fingerprints,
    unchanged_block,
    unchanged_violations,
)
from joulehouse.clustercockpit.generator import JobSpec, write_archive_files, write_job
from joulehouse.clustercockpit.layout import find_jobs
from joulehouse.errors import InputError
from joulehouse.warehouse import Warehouse


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """Jobs 1234567 and 1234999 (block 1234, the second with two start times), 1235000
    (block 1235); exact energies from the generator."""
    root = tmp_path / "archive"
    write_archive_files(root, ["testcluster"])
    for job_id, start in ((1_234_567, 1_700_000_000), (1_234_999, 1_700_000_000),
                          (1_234_999, 1_600_000_000), (1_235_000, 1_700_000_000)):
        write_job(root, JobSpec(job_id=job_id, start_time=start))
    return root


def test_a_block_lists_only_its_own_folder_in_any_start_order(archive):
    refs = list(find_jobs(archive, "testcluster", block=1234))
    assert [ref.key for ref in refs] == ["testcluster/1234567/1700000000",
                                         "testcluster/1234999/1600000000",
                                         "testcluster/1234999/1700000000"]
    assert {ref.block for ref in refs} == {"testcluster/1234"}
    assert list(find_jobs(archive, "testcluster", block=9)) == []


def test_a_block_folder_linked_outside_the_archive_is_refused(archive, tmp_path):
    outside = tmp_path / "elsewhere"
    (archive / "testcluster" / "1235").rename(outside)
    (archive / "testcluster" / "1235").symlink_to(outside)
    errors: list[InputError] = []
    assert list(find_jobs(archive, "testcluster", block=1235, errors=errors)) == []
    [error] = errors
    assert "leads outside the archive root" in str(error)
    with pytest.raises(InputError, match="leads outside the archive root"):
        list(find_jobs(archive, "testcluster", block=1235))


def test_a_block_is_read_whole_and_a_failed_job_keeps_its_stored_rows(archive):
    read = read_block(archive, "testcluster/1234", check_schema=False)
    assert read.listed == 3 and not read.failed
    assert {name: len(frame) for name, frame in read.frames.items()} == {
        "jobs": 3, "host_energy": 6, "job_energy": 3, "metric_stats": 12}
    truth = write_job(archive, JobSpec(job_id=1_234_567))  # rewritten as it was
    energy = read.frames["job_energy"].set_index("job")["energy_j"]
    assert energy[truth.key] == pytest.approx(truth.energy_j, rel=1e-12)

    (archive / "testcluster/1234/567/1700000000/data.json").write_text('{"cpu_power": ')
    again = read_block(archive, "testcluster/1234", check_schema=False)
    assert list(again.failed) == [truth.key]
    assert "truncated or invalid" in str(again.failed[truth.key])
    kept = keep_stored(again, read.frames)
    assert sorted(kept["jobs"]["job"]) == sorted(read.frames["jobs"]["job"])
    assert kept["job_energy"].set_index("job")["energy_j"][truth.key] == energy[truth.key]
    nothing = keep_stored(again, None)  # nothing stored: nothing to keep
    assert all(nothing[name] is again.frames[name] for name in FRAMES)
    assert list(nothing[FILES]["job"]) == list(again.frames["jobs"]["job"])


def test_block_keys(archive):
    assert parse_block_key("testcluster/1234") == ("testcluster", 1234)
    ref = next(iter(find_jobs(archive, "testcluster")))  # JobRef.block formats the key
    assert parse_block_key(ref.block) == ("testcluster", ref.job_id // 1000)
    for bad in ("testcluster", "testcluster/12a", "a/b/1"):
        with pytest.raises(ValueError, match="not a job-id block key"):
            parse_block_key(bad)
    with pytest.raises(InputError, match="no such job-id block folder"):
        read_block(archive, "testcluster/77")


BLOCK = "testcluster/1234"


def _job(archive: Path, number: int, **spec) -> str:
    """Job ``1234000 + number`` of block 1234 (one host, 11 samples: quick to read)."""
    return write_job(archive, JobSpec(job_id=1_234_000 + number, start_time=1_700_000_000,
                                      hosts=1, samples=11, **spec)).key


class Store:
    """A block's frames stored as the Dagster layer stores them (one Parquet partition per
    frame) and read back."""

    def __init__(self, root: Path, key: str = BLOCK):
        self.tables, self.key = Warehouse(root), key

    def put(self, frames: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
        for name, frame in frames.items():
            self.tables.write_partition(f"blocks/{name}", self.key, frame)
        return self.get()

    def get(self) -> dict[str, pd.DataFrame]:
        return {name: self.tables.read_partitions(f"blocks/{name}", [self.key])
                for name in (*FRAMES, FILES)
                if self.tables.has_partition(f"blocks/{name}", self.key)}


def _landed(store: Store, archive: Path, **options) -> tuple[BlockRead, dict[str, pd.DataFrame]]:
    """A run over the block: its new and changed jobs read, the frames stored."""
    stored = store.get()
    read = read_block(archive, store.key, known=stored_fingerprints(stored), **options)
    return read, store.put(keep_stored(read, stored))


def _assert_whole(archive: Path, tmp_path: Path, stored: dict[str, pd.DataFrame],
                  key: str = BLOCK, **options) -> None:
    """``stored`` equals, frame by frame, what a read of every job stores, and so do the
    left-out records derived from it."""
    whole = read_block(archive, key, **options)
    assert whole.whole and not whole.unchanged and not whole.failed
    expected = Store(tmp_path / "whole", key).put(keep_stored(whole, None))
    assert set(stored) == set(expected) == {*FRAMES, FILES}
    for name in expected:
        pd.testing.assert_frame_equal(stored[name], expected[name], obj=name)
    assert left_out_of(stored, archive) == [
        record for measured in whole.measured for record in measured.left_out()]


@pytest.fixture
def block(tmp_path) -> tuple[Path, Store]:
    """Block 1234 of 6 jobs, read whole once and stored."""
    archive = tmp_path / "incremental"
    write_archive_files(archive, ["testcluster"])
    for number in range(0, 12, 2):
        _job(archive, number)
    store = Store(tmp_path / "warehouse")
    read, _ = _landed(store, archive)
    assert read.whole and len(read.measured) == 6  # nothing stored: every job read
    return archive, store


def test_a_block_reads_only_its_new_jobs_and_stores_what_a_whole_read_gives(block, tmp_path):
    archive, store = block
    new = [_job(archive, number) for number in (1, 7, 15)]  # between and after the others
    read, stored = _landed(store, archive)
    assert not read.whole and not read.failed
    assert sorted(m.ref.key for m in read.measured) == sorted(new)  # exactly the new jobs
    assert len(read.unchanged) == 6 and read.listed == 9 and read.stored == 9
    _assert_whole(archive, tmp_path, stored)
    again, _ = _landed(store, archive)  # nothing new: nothing read, the frames as they were
    assert again.measured == [] and len(again.unchanged) == 9
    for name, frame in store.get().items():
        pd.testing.assert_frame_equal(frame, stored[name], obj=name)


def test_a_rewritten_job_is_read_again_and_replaced_a_removed_one_dropped(block, tmp_path):
    archive, store = block
    changed = _job(archive, 4, user="someone-else")  # meta.json and data rewritten
    shutil.rmtree(archive / "testcluster/1234/008")
    read, stored = _landed(store, archive)
    assert [m.ref.key for m in read.measured] == [changed] and len(read.unchanged) == 4
    users = stored["jobs"].set_index("job")["hpc_user"]
    assert users[changed] == "someone-else" and "testcluster/1234008/1700000000" not in users
    _assert_whole(archive, tmp_path, stored)

    meta = archive / "testcluster/1234/006/1700000000/meta.json"
    meta.write_text(meta.read_text())  # tags rewritten by cc-backend: same content, new mtime
    read, stored = _landed(store, archive)
    assert [m.ref.key for m in read.measured] == ["testcluster/1234006/1700000000"]
    _assert_whole(archive, tmp_path, stored)


def test_a_job_failing_its_re_read_keeps_its_stored_rows_until_it_reads(block, tmp_path):
    archive, store = block
    before = store.get()
    bad = "testcluster/1234002/1700000000"
    data = archive / "testcluster/1234/002/1700000000/data.json"
    good = data.read_bytes()
    data.write_text('{"cpu_power": ')
    read, stored = _landed(store, archive)
    assert list(read.failed) == [bad] and read.measured == [] and read.stored == 5
    for name in FRAMES:  # the failed job's rows kept: the frames as they were
        pd.testing.assert_frame_equal(stored[name], before[name], obj=name)
    files = stored[FILES].set_index("job")["fingerprint"]
    assert files[bad] == before[FILES].set_index("job")["fingerprint"][bad]  # the old one
    again, _ = _landed(store, archive)  # still bad: read again, still failing
    assert list(again.failed) == [bad] and len(again.unchanged) == 5
    data.write_bytes(good)  # fixed: read again, and stored
    fixed, stored = _landed(store, archive)
    assert [m.ref.key for m in fixed.measured] == [bad] and not fixed.failed
    _assert_whole(archive, tmp_path, stored)


def test_a_block_stored_without_fingerprints_is_read_whole_once(block, tmp_path):
    archive, store = block
    for path in (store.tables.table_dir(f"blocks/{FILES}")).iterdir():
        path.unlink()  # as stored before the fingerprints were kept
    assert FILES not in store.get() and stored_fingerprints(store.get()) is None
    _job(archive, 3)
    read, stored = _landed(store, archive)
    assert read.whole and len(read.measured) == 7 and not read.unchanged
    _assert_whole(archive, tmp_path, stored)
    then, _ = _landed(store, archive)  # stored with them now
    assert then.measured == [] and len(then.unchanged) == 7


def test_a_whole_re_read_and_a_changed_input_read_every_job(block, monkeypatch):
    """known=None (the weekly re-validation, an operator's re-read) reads every job; so
    does a changed cluster.json, setting or reader version: each is in every job's
    fingerprint. A bad cluster.json reads the block whole, as a read before fingerprints."""
    archive, store = block
    whole = read_block(archive, BLOCK, known=None)
    assert whole.whole and len(whole.measured) == 6
    read, _ = _landed(store, archive, max_missing=2)
    assert len(read.measured) == 6 and not read.unchanged and not read.whole
    read, _ = _landed(store, archive, max_missing=2, check_schema=False)
    assert len(read.measured) == 6
    config = archive / "testcluster/cluster.json"
    config.write_text(config.read_text())  # rewritten: new mtime
    read, _ = _landed(store, archive, max_missing=2, check_schema=False)
    assert len(read.measured) == 6
    read, _ = _landed(store, archive, max_missing=2, check_schema=False)
    assert read.measured == []

    # the reading code changed (its digest), or its manual version was bumped
    monkeypatch.setattr(blocks, "reader_version", lambda: "other code")
    read, _ = _landed(store, archive, max_missing=2, check_schema=False)
    assert len(read.measured) == 6
    monkeypatch.undo()
    monkeypatch.setattr(blocks, "READER_VERSION", READER_VERSION + 1)
    blocks.reader_version.cache_clear()
    try:
        read, _ = _landed(store, archive, max_missing=2, check_schema=False)
    finally:
        monkeypatch.undo()
        blocks.reader_version.cache_clear()
    assert len(read.measured) == 6

    config.write_text("{")
    read = read_block(archive, BLOCK, known=stored_fingerprints(store.get()),
                      max_missing=2, check_schema=False)
    assert read.whole and len(read.measured) == 6 and str(config) in read.failed


def test_the_schema_violations_of_unchanged_jobs_are_kept(block):
    archive, store = block
    stored = store.get()
    counts = stored[FILES].set_index("job")["violations"]
    _job(archive, 1)
    read, frames = _landed(store, archive)
    assert len(read.unchanged) == 6
    assert unchanged_violations(read, frames) == {
        job: count for job, count in counts.items() if count > 0}
    assert {w.job for w in read.warnings} <= {"testcluster/1234001/1700000000"}


def test_a_job_folder_leading_outside_is_read_and_fails(block, tmp_path):
    """A job whose fingerprint cannot be taken (its folder linked outside the root) is read,
    never taken as unchanged: it fails as it does in a whole read."""
    archive, store = block
    folder = archive / "testcluster/1234/004/1700000000"
    outside = tmp_path / "elsewhere"
    folder.rename(outside)
    folder.symlink_to(outside)
    read, stored = _landed(store, archive)
    assert list(read.failed) == ["testcluster/1234004/1700000000"]
    assert "leads outside the archive root" in str(read.failed["testcluster/1234004/1700000000"])
    assert read.measured == [] and len(read.unchanged) == 5
    assert "testcluster/1234004/1700000000" in set(stored["jobs"]["job"])  # its rows kept


def test_block_zero_stores_its_jobs_in_path_order_as_a_whole_read_does(tmp_path):
    """In block 0 the folders' order (005, 007, 010, 100) is not the job keys' string order
    (0/10, 0/100, 0/5, 0/7): a job landing between others is stored where a whole read
    puts it."""
    archive = tmp_path / "zero"
    write_archive_files(archive, ["testcluster"])

    def job(job_id: int) -> str:
        return write_job(archive, JobSpec(job_id=job_id, start_time=1_700_000_000, hosts=1,
                                          samples=11)).key

    store = Store(tmp_path / "warehouse", "testcluster/0")
    for job_id in (5, 10, 100):
        job(job_id)
    _landed(store, archive)
    landed = job(7)
    read, stored = _landed(store, archive)
    assert [m.ref.key for m in read.measured] == [landed] and len(read.unchanged) == 3
    order = ["testcluster/5/1700000000", "testcluster/7/1700000000",
             "testcluster/10/1700000000", "testcluster/100/1700000000"]
    assert list(stored["jobs"]["job"]) == order != sorted(order)
    _assert_whole(archive, tmp_path, stored, "testcluster/0")


def test_a_job_rewritten_during_its_read_is_read_again_by_the_next_run(block, tmp_path,
                                                                       monkeypatch):
    """Its fingerprint is taken before the read: a rewrite between the two (cc-backend
    retagging the job while it is read) leaves the stored fingerprint older than the files,
    so the next run reads it again and stores what they hold now."""
    archive, store = block
    new = _job(archive, 3)
    folder = archive / "testcluster/1234/003/1700000000"
    measure_job = blocks.measure_job

    def rewritten_first(ref, *args, **kwargs):
        measured = measure_job(ref, *args, **kwargs)  # read as it was
        if ref.key == new:
            _job(archive, 3, user="retagged")  # then rewritten, before the frames are stored
            stat = (folder / "meta.json").stat()
            os.utime(folder / "meta.json", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        return measured

    monkeypatch.setattr(blocks, "measure_job", rewritten_first)
    read, stored = _landed(store, archive)
    assert [m.ref.key for m in read.measured] == [new]
    assert stored["jobs"].set_index("job").at[new, "hpc_user"] == "user1"  # the old content
    monkeypatch.undo()
    again, stored = _landed(store, archive)
    assert [m.ref.key for m in again.measured] == [new]  # read again
    assert stored["jobs"].set_index("job").at[new, "hpc_user"] == "retagged"
    _assert_whole(archive, tmp_path, stored)


def test_a_changed_archive_version_reads_every_job(block, tmp_path):
    archive, store = block
    version = archive / "version.txt"
    assert version.read_text().strip() == "3"
    version.write_text("2\n")
    read, stored = _landed(store, archive)
    assert len(read.measured) == 6 and not read.unchanged
    assert set(stored["jobs"]["archive_version"]) == {2}
    _assert_whole(archive, tmp_path, stored)


def _missing_host(archive: Path, number: int) -> str:
    """Job ``1234000 + number`` with a second host in meta.json's resources and no series of
    it in data.json: its energy facts are left out (host NaN)."""
    key = _job(archive, number)
    meta_path = archive / f"testcluster/1234/{number:03d}/1700000000/meta.json"
    meta = json.loads(meta_path.read_text())
    meta["resources"].append({"hostname": "missing-host"})
    meta["numNodes"] = len(meta["resources"])
    meta_path.write_text(json.dumps(meta))
    return key


def test_the_left_out_records_of_unchanged_and_failed_jobs_come_from_their_stored_rows(
        tmp_path):
    """The records of every stored job derive from its stored energy rows, as a read of it
    gives them: an unchanged job's, a new job's, and a job failing its re-read (its stored
    rows kept) keep theirs."""
    archive = tmp_path / "leftout"
    write_archive_files(archive, ["testcluster"])
    store = Store(tmp_path / "warehouse")
    unchanged = _missing_host(archive, 2)
    _job(archive, 4)
    read, stored = _landed(store, archive)
    first = [record for m in read.measured for record in m.left_out()]
    assert [record.input for record in first] == [
        str(archive / "testcluster/1234/002/1700000000")] and unchanged
    assert left_out_of(stored, archive) == first

    new = _missing_host(archive, 1)
    read, stored = _landed(store, archive)
    assert [m.ref.key for m in read.measured] == [new] and len(read.unchanged) == 2
    _assert_whole(archive, tmp_path, stored)
    assert len(left_out_of(stored, archive)) == 2

    data = archive / "testcluster/1234/002/1700000000/data.json"
    data.write_text('{"cpu_power": ')  # fails its re-read: its stored rows and records kept
    read, failed = _landed(store, archive)
    assert list(read.failed) == [unchanged]
    assert left_out_of(failed, archive) == left_out_of(stored, archive)


def test_a_block_whose_read_changed_nothing_is_told_unchanged(block):
    archive, store = block
    read = read_block(archive, BLOCK, known=stored_fingerprints(store.get()))
    assert unchanged_block(read, store.get())
    assert not unchanged_block(read_block(archive, BLOCK), store.get())  # read whole
    shutil.rmtree(archive / "testcluster/1234/008")  # a job removed
    read = read_block(archive, BLOCK, known=stored_fingerprints(store.get()))
    assert read.measured == [] and not unchanged_block(read, store.get())


def test_a_read_for_the_trials_alone_tells_the_same_jobs_unchanged(block):
    """validate_schemas=False (the trials-only run) takes the fingerprints with check_schema
    all the same: nothing read again, and the jobs read not validated."""
    archive, store = block
    _job(archive, 1)
    read = read_block(archive, BLOCK, known=stored_fingerprints(store.get()),
                      validate_schemas=False)
    assert len(read.unchanged) == 6 and len(read.measured) == 1 and read.warnings == []
    checked = read_block(archive, BLOCK, known=stored_fingerprints(store.get()))
    assert checked.fingerprints == read.fingerprints
    assert checked.trial_fingerprints == read.trial_fingerprints


def test_the_trial_fingerprint_carries_the_reader_version(block, monkeypatch):
    archive, _ = block
    before = read_block(archive, BLOCK).trial_fingerprints
    assert len(before) == 6
    monkeypatch.setattr(blocks, "reader_version", lambda: "other code")
    after = read_block(archive, BLOCK).trial_fingerprints
    assert set(after) == set(before) and not set(after.values()) & set(before.values())


#: Modules of the joulehouse package that importing blocks.py loads but that decide nothing
#: of what is stored for a job: the package markers, digest.py (the fingerprints' digest),
#: errors.py, leftout.py (the LeftOut record type: the records are derived from the stored
#: rows at each run, ``blocks.left_out_of``), and what energy.py imports to derive the
#: facts at each landing (facts, facts_entries, entry_sync, entry_table, warehouse).
NOT_READER = {"joulehouse/__init__.py", "joulehouse/clustercockpit/__init__.py",
              "joulehouse/digest.py", "joulehouse/errors.py", "joulehouse/leftout.py",
              "joulehouse/facts.py", "joulehouse/facts_entries.py", "joulehouse/warehouse.py",
              "joulehouse/entry_sync.py", "joulehouse/entry_table.py"}


def test_every_module_reading_a_block_imports_is_a_reader_source():
    """Every module of the package that importing blocks.py loads is in READER_SOURCES or
    named as deciding nothing stored (a new import must be placed)."""
    code = ("import sys, joulehouse.clustercockpit.blocks; "
            "print('\\n'.join(sorted(m.__file__ for n, m in sys.modules.items() "
            "if n.startswith('joulehouse') and getattr(m, '__file__', None))))")
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                            text=True).stdout.split()
    package = Path(joulehouse.__file__).parent
    imported = {Path(path).relative_to(package.parent).as_posix() for path in loaded}
    listed = {f"joulehouse/{name}" for name in READER_SOURCES}
    assert imported - NOT_READER == listed


@pytest.fixture
def package(tmp_path, monkeypatch) -> Path:
    """A copy of the reader's files of the joulehouse package, which reader_version()
    digests instead of the installed package's."""
    installed = Path(joulehouse.__file__).parent
    copy = tmp_path / "package"
    for name in READER_SOURCES:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(installed / name, copy / name)
    shutil.copytree(installed / READER_DATA, copy / READER_DATA,
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(blocks, "resources", SimpleNamespace(files=lambda name: copy))
    blocks.reader_version.cache_clear()
    yield copy
    monkeypatch.undo()
    blocks.reader_version.cache_clear()


def test_a_changed_reader_source_reads_every_job_again(block, package, monkeypatch):
    """The reader version digests READER_SOURCES and the bundled JSON schemas, LF line ends,
    with READER_VERSION: one source file changed (a docstring too) reads every job of a
    block again; a CRLF checkout or a stray file beside the schemas changes nothing."""
    archive, store = block
    installed = Path(joulehouse.__file__).parent
    version = blocks.reader_version()
    blocks.reader_version.cache_clear()
    monkeypatch.setattr(blocks, "resources", SimpleNamespace(files=lambda name: installed))
    assert blocks.reader_version() == version  # the copy digests as the package
    monkeypatch.setattr(blocks, "resources", SimpleNamespace(files=lambda name: package))

    def version_now() -> str:
        blocks.reader_version.cache_clear()
        return blocks.reader_version()

    energy = package / "clustercockpit/energy.py"
    energy.write_bytes(energy.read_bytes().replace(b"\n", b"\r\n"))  # a CRLF checkout
    (package / READER_DATA / "README.txt").write_text("notes")  # not package data
    (package / READER_DATA / "v3" / "job-meta.schema.json~").write_text("{}")
    assert version_now() == version
    read = read_block(archive, BLOCK, known=stored_fingerprints(store.get()))
    assert read.measured == [] and len(read.unchanged) == 6

    schema = package / READER_DATA / "v3" / "job-meta.schema.json"
    schema.write_bytes(schema.read_bytes() + b"\n")
    changed = version_now()
    assert changed != version
    energy.write_bytes(energy.read_bytes() + b"# a comment\n")
    assert version_now() not in {version, changed}
    read, _ = _landed(store, archive)
    assert len(read.measured) == 6 and not read.unchanged  # every job read again
    monkeypatch.setattr(blocks, "READER_VERSION", READER_VERSION + 1)
    assert version_now().startswith(f"{READER_VERSION + 1}-")


def test_a_missing_reader_source_is_named(package):
    """An install without the .py sources (bytecode alone): the reader version cannot be
    taken, and the error names the missing file."""
    (package / "clustercockpit/units.py").unlink()
    with pytest.raises(InputError, match=r"clustercockpit/units\.py: a source of the "
                       "ClusterCockpit reader is missing"):
        blocks.reader_version()
