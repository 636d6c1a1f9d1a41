"""Job-id blocks: listing one block folder, reading it whole, keeping a failed job's rows."""

from pathlib import Path

import pytest

from joulehouse.clustercockpit.blocks import keep_stored, parse_block_key, read_block
from joulehouse.clustercockpit.generator import JobSpec, write_archive_files, write_job
from joulehouse.clustercockpit.layout import find_jobs
from joulehouse.errors import InputError


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
    assert keep_stored(again, None) is again.frames  # nothing stored: nothing to keep


def test_block_keys(archive):
    assert parse_block_key("testcluster/1234") == ("testcluster", 1234)
    ref = next(iter(find_jobs(archive, "testcluster")))  # JobRef.block formats the key
    assert parse_block_key(ref.block) == ("testcluster", ref.job_id // 1000)
    for bad in ("testcluster", "testcluster/12a", "a/b/1"):
        with pytest.raises(ValueError, match="not a job-id block key"):
            parse_block_key(bad)
    with pytest.raises(InputError, match="no such job-id block folder"):
        read_block(archive, "testcluster/77")
