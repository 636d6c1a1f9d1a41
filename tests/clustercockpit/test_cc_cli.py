"""``joulehouse energy cc`` and ``joulehouse cc export-db`` as a user runs them: the rows on
the bundled archive, exit codes 0/1/2 and one error line (docs/cli.md)."""

from __future__ import annotations

import io
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from test_cli_conventions import joulehouse, one_error_line, stderr_on_a_terminal, tree

from joulehouse.clustercockpit.measure import energy_table, measure_jobs

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clustercockpit" / "archive"
EXPECTED = ("expected a ClusterCockpit job archive: version.txt and job folders "
            "<cluster>/<jobId/1000>/<jobId%1000>/<startTime> with meta.json and data.json(.gz)")
FRITZ_398764 = "fritz/398/764/1675954353"


@pytest.fixture
def archive(tmp_path) -> Path:
    """A writable copy of the bundled archive, to break."""
    return Path(shutil.copytree(EXAMPLE, tmp_path / "archive"))


def _csv(text: str) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""],
                       float_precision="round_trip")


def test_energy_rows_of_the_bundled_archive():
    result = joulehouse("energy", "cc", EXAMPLE)
    assert result.returncode == 0 and result.stderr == ""
    table = _csv(result.stdout)
    assert list(table.columns[:6]) == ["job", "cluster", "job_id", "start_time", "user",
                                       "project"]
    rows = table.set_index(["job", "metric"])
    assert list(rows.index) == [
        ("emmy/1403244/1608923076", "rapl_power"), ("fritz/398764/1675954353", "cpu_power"),
        ("fritz/398764/1675954353", "mem_power"), ("fritz/398955/1675956725", "cpu_power"),
        ("fritz/398955/1675956725", "mem_power"), ("taurus/20639587/1635856524", "cpu_power")]
    emmy = rows.loc[("emmy/1403244/1608923076", "rapl_power")]
    # the four hosts' trapezoids (nulls bridged), and cc-backend's 5.27 kWh
    assert emmy["energy_j"] == pytest.approx(4817792.7 + 4817350.2 + 4499451.3 + 4858465.8,
                                             abs=1e-6)
    assert (emmy["energy_cc_kwh"], emmy["covered_fraction"], emmy["hosts"]) == (5.27, 1.0, 4)
    assert (emmy["start_time"], emmy["user"], emmy["project"]) == (
        "2020-12-25 19:04:36+00:00", "emmyUser6", "no project")
    fritz = rows.loc[("fritz/398764/1675954353", "cpu_power")]
    assert (fritz["energy_j"], fritz["energy_cc_kwh"]) == (pytest.approx(31222.23), 0.01)
    taurus = rows.loc[("taurus/20639587/1635856524", "cpu_power")]
    assert taurus["energy_j"] == pytest.approx(50330.42, abs=0.01)
    assert taurus["scope"] == "socket" and taurus["job_id"] == 20639587
    # the same values as the core's table, to the last digit CSV keeps
    core = energy_table(measure_jobs(EXAMPLE, check_schema=False)[0])
    assert table["energy_j"].tolist() == core["energy_j"].tolist()
    assert table["energy_cc_kwh"].tolist() == core["energy_cc_kwh"].tolist()


def test_energy_of_the_real_emmy_jobs(emmy_archive):
    result = joulehouse("energy", "cc", emmy_archive)
    # 1404397's unbridged end gives no power fact, and says so: rows came out, exit 0
    assert result.returncode == 0 and result.stderr == (
        f"joulehouse: {emmy_archive / 'emmy/1404/397/1609300556'}: left out its power fact of "
        "rapl_power (32 host(s)): 2 unbridged gap(s), 250 s in all: covered 0.999 of the "
        "window, and a fact covers its whole window\n")
    rows = _csv(result.stdout).set_index("job")
    assert list(rows.index) == ["emmy/1403244/1608923076", "emmy/1404397/1609300556"]
    assert rows["hosts"].tolist() == [32, 32] and rows["metric"].unique().tolist() == [
        "rapl_power"]
    assert rows["energy_cc_kwh"].tolist() == [175.33, 174.83]
    kwh = rows["energy_j"] / 3.6e6
    assert kwh.tolist() == pytest.approx([175.27, 174.79], abs=0.005)
    assert (kwh / (rows["mean_x_duration_j"] / 3.6e6)).tolist() == pytest.approx([1, 1],
                                                                                  rel=0.01)
    # 1404397: two hosts miss their last sample, 125 s each left unbridged
    assert rows["gap_s"].tolist() == [0.0, 250.0]


def test_parquet_out_holds_the_cores_table(tmp_path):
    out = tmp_path / "energy.parquet"
    result = joulehouse("energy", "cc", EXAMPLE, "--format", "parquet", "--out", out, "--quiet")
    assert result.returncode == 0 and result.stdout == result.stderr == ""
    core = energy_table(measure_jobs(EXAMPLE, check_schema=False)[0])
    pd.testing.assert_frame_equal(pd.read_parquet(out), core)


def test_max_missing_leaves_longer_runs_of_nulls_as_gaps():
    bridged = _csv(joulehouse("energy", "cc", EXAMPLE).stdout).set_index("metric")
    strict = joulehouse("energy", "cc", EXAMPLE, "--max-missing", "0")
    assert strict.returncode == 0
    strict = _csv(strict.stdout).set_index("metric")
    # emmy's rapl_power misses samples: with none bridged they are gaps, not energy
    assert bridged.loc["rapl_power", "gap_count"] == 0
    assert strict.loc["rapl_power", "gap_count"] > 0
    assert strict.loc["rapl_power", "covered_fraction"] < 1.0
    assert strict.loc["rapl_power", "energy_j"] < bridged.loc["rapl_power", "energy_j"]
    result = joulehouse("energy", "cc", EXAMPLE, "--max-missing", "-1")
    assert result.returncode == 2 and "--max-missing: a whole number >= 0: '-1'" in result.stderr


def test_paths_that_are_no_archive_say_what_to_give(tmp_path):
    result = joulehouse("energy", "cc", tmp_path / "typo")
    assert one_error_line(result) == f"{tmp_path / 'typo'}: no such file or folder; {EXPECTED}"
    (tmp_path / "empty").mkdir()
    result = joulehouse("cc", "export-db", tmp_path / "empty", tmp_path / "job.db")
    assert one_error_line(result) == f"{tmp_path / 'empty'}: empty folder; {EXPECTED}"
    result = joulehouse("energy", "cc", EXAMPLE.parent)
    assert one_error_line(result) == f"{EXAMPLE.parent}: no version.txt; {EXPECTED}"
    result = joulehouse("cc", "export-db", EXAMPLE / "emmy", tmp_path / "job.db")
    assert one_error_line(result) == (f"{EXAMPLE / 'emmy'}: a cluster folder of an archive; "
                                      f"give the archive root, {EXAMPLE}")
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "version.txt").write_text("3\n")
    result = joulehouse("energy", "cc", tmp_path / "bare")
    assert one_error_line(result) == f"{tmp_path / 'bare'}: no job folders; {EXPECTED}"
    assert result.stdout == "" and not (tmp_path / "job.db").exists()


def test_a_bad_job_is_reported_and_the_others_go_out(archive):
    data = archive / FRITZ_398764 / "data.json"
    data.write_bytes(data.read_bytes()[:-40])
    result = joulehouse("energy", "cc", archive)
    assert result.returncode == 1
    line = one_error_line(result, 1)
    assert line == (f"{data}: truncated or invalid (IncompleteJSONError: parse error: "
                    "premature EOF), after metric 'nfs4_write'")
    assert _csv(result.stdout)["job"].unique().tolist() == [
        "emmy/1403244/1608923076", "fritz/398955/1675956725", "taurus/20639587/1635856524"]



def test_a_folder_linked_outside_the_archive_is_reported_and_the_others_go_out(archive,
                                                                             tmp_path):
    outside = Path(shutil.move(archive / "taurus" / "20639", tmp_path / "elsewhere"))
    (archive / "taurus" / "20639").symlink_to(outside)
    for command in (("energy", "cc", archive), ("cc", "export-db", archive, tmp_path / "j.db")):
        result = joulehouse(*command)
        assert result.returncode == 1, result.stderr
        assert "taurus/20639" in one_error_line(result, 1)
    assert _csv(joulehouse("energy", "cc", archive).stdout)["job"].unique().tolist() == [
        "emmy/1403244/1608923076", "fritz/398764/1675954353", "fritz/398955/1675956725"]
    assert len(_jobs(tmp_path / "j.db")) == 3

def test_progress_counts_jobs_on_a_terminal():
    code, shown, stdout = stderr_on_a_terminal("energy", "cc", EXAMPLE)
    assert code == 0 and len(stdout.splitlines()) == 7
    assert "0/4 [00:00<?, ?job/s]" in shown


# --- export-db ----------------------------------------------------------------------------------

def _jobs(database: Path) -> list[tuple]:
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT job_id, cluster, start_time, hpc_user, num_nodes, "
                                  "energy FROM job ORDER BY cluster, job_id").fetchall()
        version = connection.execute("SELECT version, dirty FROM schema_migrations").fetchall()
    connection.close()
    assert version == [(11, 0)]
    return rows


def test_export_db_writes_every_job(tmp_path):
    database = tmp_path / "job.db"
    result = joulehouse("cc", "export-db", EXAMPLE, database)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == f"4 jobs written to {database}\n"
    assert _jobs(database) == [
        (1403244, "emmy", 1608923076, "emmyUser6", 4, 5.27),
        (398764, "fritz", 1675954353, "k106eb10", 1, 0.01),
        (398955, "fritz", 1675956725, "k106eb10", 1, 0.03),
        (20639587, "taurus", 1635856524, "s3804552", 2, 0.01)]


def test_export_db_leaves_out_a_bad_job_only(archive, tmp_path):
    meta = archive / FRITZ_398764 / "meta.json"
    meta.write_text(meta.read_text().replace('"jobId":398764', '"jobId":398765'))
    database = tmp_path / "job.db"
    result = joulehouse("cc", "export-db", archive, database)
    assert result.returncode == 1
    assert one_error_line(result, 1).startswith(f"{meta}: jobId: ")
    assert result.stdout == f"3 jobs written to {database}\n"
    assert [row[0] for row in _jobs(database)] == [1403244, 398955, 20639587]


def test_export_db_into_a_missing_folder_is_an_error_naming_it(tmp_path):
    database = tmp_path / "no-such-folder" / "job.db"
    result = joulehouse("cc", "export-db", EXAMPLE, database)
    assert one_error_line(result) == f"{database}: cannot write: unable to open database file"
    assert result.stdout == "" and tree(tmp_path) == {}


# --- taudb load of job folders ------------------------------------------------------------------

def test_taudb_load_of_job_folders_loads_the_good_ones(tmp_path):
    url = f"sqlite:///{tmp_path}/taudb.sqlite"
    emmy, fritz = EXAMPLE / "emmy/1403/244/1608923076", EXAMPLE / FRITZ_398764
    result = joulehouse("taudb", "load", url, emmy, EXAMPLE / "taurus", fritz)
    assert result.returncode == 1
    assert one_error_line(result, 1) == (
        f"{EXAMPLE / 'taurus'}: a cluster folder of a ClusterCockpit job archive: a trial is "
        "one job, give its job folders (20639/587/1635856524)")
    assert result.stdout == (f"trial 1: emmy/1403244/1608923076 (4 threads) from {emmy}\n"
                             f"trial 2: fritz/398764/1675954353 (1 threads) from {fritz}\n")
    listed = joulehouse("taudb", "list", url)
    assert listed.stdout.splitlines()[1:] == [
        f"1\temmy/1403244/1608923076\t999\t4\t{emmy}",
        f"2\tfritz/398764/1675954353\t999\t1\t{fritz}"]
