"""Bad input: each case an InputError naming the file and the place; other jobs still read."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from joulehouse.clustercockpit.jobs import read_jobs
from joulehouse.clustercockpit.layout import JobRef, find_jobs
from joulehouse.clustercockpit.measure import measure_jobs
from joulehouse.clustercockpit.readers import read_cluster, read_meta, read_samples, read_version
from joulehouse.errors import InputError

FRITZ = ("fritz", 398764, 1675954353)


def fritz(root) -> JobRef:
    return JobRef(root, *FRITZ)


def read(ref: JobRef):
    meta = read_meta(ref)
    return read_samples(ref, meta, read_cluster(ref.root, ref.cluster))


def edit_data(ref: JobRef, change) -> None:
    path = ref.path / "data.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def raises(call, path, message, *, line=None, field=None) -> InputError:
    with pytest.raises(InputError) as caught:
        call()
    error = caught.value
    assert error.path == str(path)
    assert error.line == line and error.field == field
    assert message in str(error)
    return error


def test_truncated_meta_json_names_its_line(writable_archive):
    ref = fritz(writable_archive)
    ref.meta_path.write_text('{"jobId": 398764,\n "user": "k1')
    raises(lambda: read_meta(ref), ref.meta_path, "invalid JSON", line=2)


def test_truncated_data_json(writable_archive):
    ref = fritz(writable_archive)
    path = ref.path / "data.json"
    path.write_bytes(path.read_bytes()[:30000])
    raises(lambda: read(ref), path, "truncated or invalid")


def test_truncated_gzip_preferred_over_data_json(writable_archive):
    ref = fritz(writable_archive)
    raw = (ref.path / "data.json").read_bytes()
    packed = gzip.compress(raw)
    (ref.path / "data.json.gz").write_bytes(packed[: len(packed) // 2])
    assert ref.data_path() == ref.path / "data.json.gz"  # .gz first, as cc-backend
    raises(lambda: read(ref), ref.path / "data.json.gz", "truncated or invalid")


def test_gzip_read_when_both_exist(writable_archive):
    ref = fritz(writable_archive)
    raw = json.loads((ref.path / "data.json").read_text())
    raw["cpu_power"]["node"]["series"][0]["data"] = [1.0, 2.0, 3.0]
    (ref.path / "data.json.gz").write_bytes(gzip.compress(json.dumps(raw).encode()))
    samples = read(ref)
    power = samples[(samples["metric"] == "cpu_power") & (samples["scope"] == "node")]
    assert power["value"].tolist() == [1.0, 2.0, 3.0]


def test_data_without_meta_and_the_reverse(writable_archive):
    ref = fritz(writable_archive)
    ref.meta_path.unlink()
    raises(lambda: read_meta(ref), ref.meta_path, "missing (the folder has data.json")
    other = JobRef(writable_archive, "fritz", 398955, 1675956725)
    (other.path / "data.json").unlink()
    meta = read_meta(other)
    raises(lambda: read_samples(other, meta), other.path / "data.json", "meta.json only")


@pytest.mark.parametrize(("field", "value"), [("jobId", 398765), ("startTime", 1675954354),
                                              ("cluster", "emmy")])
def test_folder_name_does_not_match_meta(writable_archive, field, value):
    ref = fritz(writable_archive)
    meta = json.loads(ref.meta_path.read_text())
    meta[field] = value
    ref.meta_path.write_text(json.dumps(meta))
    raises(lambda: read_meta(ref), ref.meta_path, "does not match the folder's", field=field)


def test_unknown_unit_prefix(writable_archive):
    ref = fritz(writable_archive)
    edit_data(ref, lambda d: d["mem_bw"]["node"]["unit"].update(prefix="Q"))
    raises(lambda: read(ref), ref.path / "data.json", "unknown unit prefix 'Q'",
           field="mem_bw.node.unit")


def test_power_metric_in_another_unit(writable_archive):
    ref = fritz(writable_archive)
    edit_data(ref, lambda d: d["cpu_power"]["node"]["unit"].update(base="B/s"))
    raises(lambda: read(ref), ref.path / "data.json", "must be in W",
           field="cpu_power.node.unit")


def test_series_of_different_lengths(writable_archive):
    ref = fritz(writable_archive)
    edit_data(ref, lambda d: d["cpu_power"]["socket"]["series"][1]["data"].pop())
    raises(lambda: read(ref), ref.path / "data.json", "2 samples where series[0] has 3",
           field="cpu_power.socket.series[1].data")


@pytest.mark.parametrize("value", [-5.0, 1e6])
def test_negative_or_absurd_power(writable_archive, value):
    ref = fritz(writable_archive)
    edit_data(ref, lambda d: d["mem_power"]["node"]["series"][0]["data"].__setitem__(1, value))
    raises(lambda: read(ref), ref.path / "data.json", f"power {value!r} W outside",
           field="mem_power.node.series[0].data[1]")


@pytest.mark.parametrize("value", ["12.5", True, [1.0], {"v": 1.0}])
def test_sample_that_is_not_a_number_or_null(writable_archive, value):
    """numpy would turn "12.5" into 12.5 and true into 1.0: the reader refuses them."""
    ref = fritz(writable_archive)
    edit_data(ref, lambda d: d["mem_bw"]["node"]["series"][0]["data"].__setitem__(2, value))
    raises(lambda: read(ref), ref.path / "data.json",
           f"expected a number or null, found {value!r}",
           field="mem_bw.node.series[0].data[2]")


def test_series_data_that_is_not_a_list(writable_archive):
    ref = fritz(writable_archive)
    edit_data(ref, lambda d: d["mem_bw"]["node"]["series"][0].__setitem__("data", "1,2"))
    raises(lambda: read(ref), ref.path / "data.json", "expected a list of numbers or null",
           field="mem_bw.node.series[0].data")


def test_job_id_reused_with_another_start_time_is_two_jobs(writable_archive):
    ref = fritz(writable_archive)
    again = JobRef(writable_archive, "fritz", 398764, 1675990000)
    shutil.copytree(ref.path, again.path)
    meta = json.loads(again.meta_path.read_text())
    meta["startTime"] = again.start_time
    again.meta_path.write_text(json.dumps(meta))
    jobs = read_jobs(writable_archive).jobs
    reused = jobs[jobs["job_id"] == 398764]
    assert reused["start_time"].tolist() == [1675954353, 1675990000]


def test_symlink_outside_the_root_refused(writable_archive, tmp_path):
    """A job folder linked outside the archive is that job's error; the others are read."""
    outside = tmp_path / "elsewhere"
    shutil.copytree(fritz(writable_archive).path, outside)
    link = writable_archive / "fritz" / "398" / "764" / "1675999999"
    link.symlink_to(outside, target_is_directory=True)
    linked = JobRef(writable_archive, "fritz", 398764, 1675999999)
    assert linked in list(find_jobs(writable_archive))  # listed; its reading refuses it
    with pytest.raises(InputError, match="leads outside the archive root") as caught:
        read_meta(linked)
    assert caught.value.path == str(link)
    table = read_jobs(writable_archive)
    assert table.jobs["job"].tolist() == ["fritz/398764/1675954353", "fritz/398955/1675956725",
                                          "taurus/20639587/1635856524"]
    (error,) = table.errors
    assert error.path == str(link) and "leads outside the archive root" in error.reason
    measured, errors = measure_jobs(writable_archive, check_schema=False)
    assert [m.ref.key for m in measured] == table.jobs["job"].tolist()
    assert [e.path for e in errors] == [str(link)]


def test_folder_above_jobs_symlinked_outside_is_reported_not_entered(writable_archive, tmp_path):
    outside = tmp_path / "elsewhere"
    shutil.copytree(writable_archive / "fritz" / "398" / "955", outside)
    link = writable_archive / "fritz" / "398" / "956"
    link.symlink_to(outside, target_is_directory=True)
    with pytest.raises(InputError, match="leads outside the archive root") as caught:
        list(find_jobs(writable_archive))
    assert caught.value.path == str(link)
    errors: list[InputError] = []
    assert [ref.key for ref in find_jobs(writable_archive, errors=errors)] == [
        "fritz/398764/1675954353", "fritz/398955/1675956725", "taurus/20639587/1635856524"]
    assert [error.path for error in errors] == [str(link)]
    table = read_jobs(writable_archive)
    assert len(table.jobs) == 3 and [error.path for error in table.errors] == [str(link)]


def test_bad_job_left_out_and_reported(writable_archive):
    ref = fritz(writable_archive)
    ref.meta_path.write_text("{")
    table = read_jobs(writable_archive)
    assert table.jobs["job"].tolist() == ["fritz/398955/1675956725",
                                          "taurus/20639587/1635856524"]
    (error,) = table.errors
    assert error.path == str(ref.meta_path)


def test_unsupported_archive_version(writable_archive):
    (writable_archive / "version.txt").write_text("4\n")
    raises(lambda: read_version(writable_archive), writable_archive / "version.txt",
           "unsupported archive version '4'", line=1)


def test_meta_json_symlinked_outside_the_root_refused(writable_archive, tmp_path):
    ref = fritz(writable_archive)
    outside = tmp_path / "meta.json"
    outside.write_bytes(ref.meta_path.read_bytes())
    ref.meta_path.unlink()
    ref.meta_path.symlink_to(outside)
    with pytest.raises(InputError, match="leads outside the archive root") as caught:
        read_meta(ref)
    assert caught.value.path == str(ref.meta_path)
    inner = writable_archive / "fritz" / "meta-copy.json"
    inner.write_bytes(outside.read_bytes())
    ref.meta_path.unlink()
    ref.meta_path.symlink_to(inner)  # a link inside the archive is fine
    assert read_meta(ref)["jobId"] == 398764


def test_broken_cluster_json_reported_by_read_jobs_and_measure_jobs(writable_archive):
    """A bad cluster.json is reported once by both; its cluster's jobs are still read with
    the known power metric names."""
    path = writable_archive / "fritz" / "cluster.json"
    path.write_text("{")
    table = read_jobs(writable_archive)
    assert len(table.jobs) == 3
    (error,) = table.errors
    assert (error.path, error.line) == (str(path), 1) and "invalid JSON" in error.reason
    measured, errors = measure_jobs(writable_archive, check_schema=False)
    assert len(measured) == 3 and [(e.path, e.line) for e in errors] == [(str(path), 1)]
