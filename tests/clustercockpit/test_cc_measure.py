"""measure_jobs: every job measured from one read, a bad job left out and reported."""

from __future__ import annotations

from dataclasses import replace

from joulehouse.clustercockpit.aggregate import rollup
from joulehouse.clustercockpit.energy import energy_facts_rows
from joulehouse.clustercockpit.jobs import read_jobs
from joulehouse.clustercockpit.measure import check_measurements, energy_table, measure_jobs


def test_measure_every_job(assembled_archive):
    measured, errors = measure_jobs(assembled_archive)
    assert errors == []
    assert [m.ref.key for m in measured] == [
        "fritz/398764/1675954353", "fritz/398955/1675956725", "taurus/20639587/1635856524"]
    table = energy_table(measured)
    assert list(zip(table["job_id"], table["metric"], strict=True)) == [
        (398764, "cpu_power"), (398764, "mem_power"), (398955, "cpu_power"),
        (398955, "mem_power"), (20639587, "cpu_power")]
    assert {"cluster", "job_id", "start_time", "user", "project", "metric", "energy_j",
            "covered_fraction", "energy_cc_kwh"} <= set(table.columns)
    taurus = measured[2]
    assert {(w.path, w.message) for w in taurus.warnings} >= {
        ("/", "'shared' is a required property")}
    assert len(taurus.stats) == 16  # 8 metrics x 2 hosts
    assert rollup(read_jobs(assembled_archive).jobs, table)["jobs"].sum() == 3


def test_bad_job_left_out(writable_archive):
    path = writable_archive / "fritz/398/955/1675956725/data.json"
    path.write_bytes(path.read_bytes()[:1000])
    measured, errors = measure_jobs(writable_archive, check_schema=False)
    assert [m.ref.job_id for m in measured] == [398764, 20639587]
    (error,) = errors
    assert error.path == str(path) and "truncated or invalid" in str(error)


def test_tables_checked_together_a_bad_job_fails_alone(assembled_archive):
    measured, _ = measure_jobs(assembled_archive, check_schema=False)
    good, bad = check_measurements(measured)
    assert bad == [] and [m.ref.key for m in good] == [m.ref.key for m in measured]
    assert all(g.host_energy is m.host_energy for g, m in zip(good, measured, strict=True))
    broken = replace(measured[1], host_energy=measured[1].host_energy.assign(gap_s=-1.0))
    good, bad = check_measurements([measured[0], broken, measured[2]])
    assert [m.ref.key for m in good] == [measured[0].ref.key, measured[2].ref.key]
    ((job, error),) = bad
    assert job is broken
    assert error.path == "cc_host_energy" and error.field == "gap_s" and "line 2" in str(error)


def test_empty_archive_gives_typed_empty_tables(tmp_path):
    (tmp_path / "version.txt").write_text("1\n")
    jobs = read_jobs(tmp_path).jobs
    measured, errors = measure_jobs(tmp_path)
    table = energy_table(measured)
    assert (len(jobs), measured, errors, len(table)) == (0, [], [], 0)
    assert str(table["start_time"].dtype) == "datetime64[ns, UTC]"
    assert str(jobs["start_time_utc"].dtype) == "datetime64[ns, UTC]"
    assert len(rollup(jobs, table)) == 0
    assert len(energy_facts_rows(table)) == 0
