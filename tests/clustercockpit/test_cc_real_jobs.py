"""Every real job of the peer data read; the emmy energy check; cc_jobs and its SQLite export."""

from __future__ import annotations

import json
import shutil
import sqlite3

import numpy as np
import pandas as pd
import pytest

from joulehouse.clustercockpit.aggregate import metric_stats, rollup
from joulehouse.clustercockpit.conformance import DataConformance, meta_warnings
from joulehouse.clustercockpit.energy import (
    cc_energy_kwh,
    energy_facts_rows,
    host_energy,
    job_energy,
    series_slices,
)
from joulehouse.clustercockpit.export import export_db
from joulehouse.clustercockpit.jobs import CC_BACKEND_COLUMNS, read_jobs
from joulehouse.clustercockpit.layout import JobRef, find_jobs
from joulehouse.clustercockpit.readers import read_cluster, read_meta, read_samples, read_version
from joulehouse.clustercockpit.schemas import SAMPLES_SCHEMA
from joulehouse.validation import validate

#: job key -> (series, samples per node-scope series, null samples, metrics), counted
#: with json.load over the files
REAL_JOBS = {
    "emmy/1403244/1608923076": (288, 1441, 37989, 9),
    "emmy/1404397/1609300556": (288, 1442, 39114, 9),
    "fritz/398764/1675954353": (529, 3, 0, 19),
    "fritz/398955/1675956725": (529, 5, 0, 19),
    "taurus/20639587/1635856524": (22, 11, 0, 8),
}


def _jobs(emmy_archive, assembled_archive):
    return [*find_jobs(emmy_archive), *find_jobs(assembled_archive)]


def test_every_real_job_read(emmy_archive, assembled_archive):
    refs = _jobs(emmy_archive, assembled_archive)
    assert sorted(ref.key for ref in refs) == sorted(REAL_JOBS)
    for ref in refs:
        meta = read_meta(ref)
        samples = validate(SAMPLES_SCHEMA, read_samples(ref, meta, read_cluster(
            ref.root, ref.cluster)), ref.key)
        series, length, nulls, metrics = REAL_JOBS[ref.key]
        assert samples["metric"].nunique() == metrics
        assert int(samples["value"].isna().sum()) == nulls
        first = samples.iloc[0]
        assert first["time"] == pd.Timestamp(ref.start_time, unit="s", tz="UTC")
        assert len(series_slices(samples)) == series
        node = samples[samples["scope"] == "node"]
        assert set(node.groupby(["metric", "host"], observed=True).size()) == {length}


def test_units_to_si_and_timesteps(assembled_archive):
    ref = JobRef(assembled_archive, "fritz", 398764, 1675954353)
    samples = read_samples(ref, read_meta(ref))
    mem_bw = samples[(samples["metric"] == "mem_bw") & (samples["scope"] == "node")]
    assert mem_bw["unit"].unique().tolist() == ["B/s"]
    raw = json.loads(ref.data_path().read_text())["mem_bw"]["node"]["series"][0]["data"]
    np.testing.assert_allclose(mem_bw["value"], np.array(raw) * 1e9)  # GB/s -> B/s
    taurus = JobRef(assembled_archive, "taurus", 20639587, 1635856524)
    samples = read_samples(taurus, read_meta(taurus))
    step = samples.groupby("metric", observed=True)["time"].apply(
        lambda t: (t.iloc[1] - t.iloc[0]).total_seconds())
    assert step["cpu_used"] == 30 and step["cpu_power"] == 60  # timesteps differ per metric


def test_archive_versions_and_shared(cc_data, assembled_archive):
    v2 = cc_data / "cc-backend-v1.4.4-archive-v2"
    assert read_version(v2) == 2
    (ref,) = find_jobs(v2)
    meta = read_meta(ref)
    assert meta["shared"] == "none" and "exclusive" not in meta  # exclusive 1 -> none
    taurus = read_meta(JobRef(assembled_archive, "taurus", 20639587, 1635856524))
    assert taurus["shared"] == "multi_user"  # exclusive 0


def test_emmy_energy_agrees_with_mean_times_duration(emmy_archive):
    expected_kwh = {"emmy/1403244/1608923076": 175.33, "emmy/1404397/1609300556": 174.83}
    for ref in find_jobs(emmy_archive):
        meta = read_meta(ref)
        cluster = read_cluster(emmy_archive, "emmy")
        samples = read_samples(ref, meta, cluster, metrics={"rapl_power"})
        per_host = host_energy(meta, samples, cluster)
        assert len(per_host) == 32 and set(per_host["scope"]) == {"node"}
        (row,) = job_energy(meta, per_host).itertuples()
        assert row.metric == "rapl_power" and row.hosts == 32
        assert row.energy_j == pytest.approx(row.mean_x_duration_j, rel=0.01)
        assert 170 < row.energy_j / 3.6e6 < 180  # about 175 kWh
        avg = meta["statistics"]["rapl_power"]["avg"]
        formula = round(avg * meta["numNodes"] * meta["duration"] / 3.6e6, 2)
        assert row.energy_cc_kwh == formula == expected_kwh[ref.key]
        assert row.covered_fraction > 0.999


def test_isolated_nulls_bridged_long_gaps_reported(emmy_archive):
    ref = JobRef(emmy_archive, "emmy", 1404397, 1609300556)
    meta = read_meta(ref)
    cluster = read_cluster(emmy_archive, "emmy")
    samples = read_samples(ref, meta, cluster, metrics={"rapl_power"})
    bridged = job_energy(meta, host_energy(meta, samples, cluster))
    # hosts e0348 and e0908 miss their last sample (at 86460 s): from their last one
    # (86400 s) to the job's end (86525 s) is 125 s, over the 120 s limit: not bridged
    assert bridged["gap_count"].item() == 2 and bridged["gap_s"].item() == pytest.approx(250.0)
    per_host = host_energy(meta, samples, cluster)
    gaps = per_host[per_host["gap_count"] > 0]
    assert gaps["host"].tolist() == ["e0348", "e0908"] and gaps["gap_s"].tolist() == [125.0] * 2
    strict = job_energy(meta, host_energy(meta, samples, cluster, max_missing=0))
    nulls = int(samples["value"].isna().sum())
    assert strict["gap_count"].item() >= nulls // 2
    assert strict["covered_fraction"].item() < bridged["covered_fraction"].item()
    loose = job_energy(meta, host_energy(meta, samples, cluster, max_missing=3))
    assert loose["gap_count"].item() == 0 and loose["covered_fraction"].item() == 1.0


def test_cc_formula_rounds_like_go():
    assert cc_energy_kwh(228.07, 32, 86486) == 175.33
    assert cc_energy_kwh(150.018, 1, 177) == 0.01
    assert cc_energy_kwh(10.0, 1, 9) == 0.0  # small jobs round to 0
    assert cc_energy_kwh(1000.0, 1, 18) == 0.01  # 0.005 kWh: half away from zero


def test_fritz_node_scope_chosen_over_sockets(assembled_archive):
    ref = JobRef(assembled_archive, "fritz", 398955, 1675956725)
    meta = read_meta(ref)
    cluster = read_cluster(assembled_archive, "fritz")
    samples = read_samples(ref, meta, cluster)
    energy = job_energy(meta, host_energy(meta, samples, cluster))
    assert energy["metric"].tolist() == ["cpu_power", "mem_power"]
    assert energy["scope"].tolist() == ["node", "node"]
    node = samples[(samples["metric"] == "cpu_power") & (samples["scope"] == "node")]
    seconds = (node["time"] - node["time"].iloc[0]).dt.total_seconds().to_numpy()
    values = node["value"].to_numpy()
    trapezoid = float(np.sum((values[1:] + values[:-1]) / 2 * np.diff(seconds)))
    tail = (meta["duration"] - seconds[-1]) * values[-1]  # last sample held to the end
    assert energy["energy_j"].iloc[0] == pytest.approx(trapezoid + tail)
    assert energy["energy_cc_kwh"].tolist() == [0.03, 0.0]
    facts = energy_facts_rows(energy)
    assert sorted(zip(facts["component"], facts["method"], strict=True)) == [
        ("cpu", "cc-backend"), ("cpu", "power"), ("dram", "power")]
    assert facts.loc[facts["method"] == "cc-backend", "energy_j"].item() == 0.03 * 3.6e6


def test_taurus_socket_energy_summed_per_host(assembled_archive):
    ref = JobRef(assembled_archive, "taurus", 20639587, 1635856524)
    meta = read_meta(ref)
    cluster = read_cluster(assembled_archive, "taurus")
    per_host = host_energy(meta, read_samples(ref, meta, cluster), cluster)
    assert per_host["host"].tolist() == ["taurusi6489", "taurusi6490"]
    assert per_host["scope"].tolist() == ["socket", "socket"]
    assert per_host["energy_j"].sum() == pytest.approx(50330.42, abs=0.01)


def test_metric_stats_match_meta_statistics(assembled_archive):
    ref = JobRef(assembled_archive, "fritz", 398764, 1675954353)
    meta = read_meta(ref)
    stats = metric_stats(meta, read_samples(ref, meta)).set_index("metric")
    power = stats.loc["cpu_power"]
    assert (power["min"], power["max"]) == (93.67, 261.59)
    assert power["mean"] == pytest.approx(meta["statistics"]["cpu_power"]["avg"], abs=0.01)
    # samples 94.79, 93.67, 261.59 W at 0, 60, 120 s, the last held to 177 s
    expected = ((94.79 + 93.67) / 2 * 60 + (93.67 + 261.59) / 2 * 60 + 261.59 * 57) / 177
    assert power["time_weighted_mean"] == pytest.approx(expected, rel=1e-12)
    assert power["sum_squares"] == pytest.approx(94.79**2 + 93.67**2 + 261.59**2, rel=1e-12)
    assert power["unit"] == "W" and stats.loc["mem_bw", "unit"] == "B/s"


def test_cc_jobs_and_rollup(emmy_archive, assembled_archive):
    table = read_jobs(assembled_archive)
    assert table.errors == []
    jobs = table.jobs
    assert jobs["job"].tolist() == ["fritz/398764/1675954353", "fritz/398955/1675956725",
                                    "taurus/20639587/1635856524"]
    assert jobs["shared"].tolist() == ["none", "none", "multi_user"]
    assert jobs["energy"].tolist() == [0.01, 0.03, 0.01]
    assert jobs["node_hours"].tolist() == pytest.approx([177 / 3600, 260 / 3600, 2 * 310 / 3600])
    emmy = read_jobs(emmy_archive).jobs
    assert emmy["energy"].tolist() == [175.33, 174.83]
    energies = []
    for ref in find_jobs(emmy_archive):
        meta = read_meta(ref)
        cluster = read_cluster(emmy_archive, "emmy")
        samples = read_samples(ref, meta, cluster, metrics={"rapl_power"})
        energies.append(job_energy(meta, host_energy(meta, samples, cluster)))
    table = rollup(emmy, pd.concat(energies, ignore_index=True))
    assert table["day"].dt.strftime("%Y-%m-%d").tolist() == ["2020-12-25", "2020-12-30"]
    assert table["jobs"].tolist() == [1, 1]
    assert table["energy_cc_kwh"].tolist() == [175.33, 174.83]
    assert table["energy_j"].sum() == pytest.approx(sum(e["energy_j"].item() for e in energies))


def test_export_db_holds_cc_backends_schema(emmy_archive, assembled_archive, tmp_path):
    archive = tmp_path / "archive"
    shutil.copytree(assembled_archive, archive)
    shutil.copytree(emmy_archive / "emmy", archive / "emmy")
    db = tmp_path / "job.db"
    assert export_db(archive, db) == 5
    connection = sqlite3.connect(db)
    assert connection.execute("SELECT version, dirty FROM schema_migrations").fetchall() == [
        (11, 0)]
    columns = [row[1] for row in connection.execute("PRAGMA table_info(job)")]
    assert columns == ["id", *CC_BACKEND_COLUMNS]
    rows = connection.execute(
        "SELECT job_id, cluster, start_time, hpc_user, shared, energy FROM job "
        "ORDER BY cluster, job_id").fetchall()
    assert rows == [
        (1403244, "emmy", 1608923076, "emmyUser6", "none", 175.33),
        (1404397, "emmy", 1609300556, "emmyUser6", "none", 174.83),
        (398764, "fritz", 1675954353, "k106eb10", "none", 0.01),
        (398955, "fritz", 1675956725, "k106eb10", "none", 0.03),
        (20639587, "taurus", 1635856524, "s3804552", "multi_user", 0.01),
    ]
    assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):  # (job_id, cluster, start_time)
        connection.execute("INSERT INTO job (job_id, cluster, subcluster, start_time, hpc_user, "
                           "project, duration, walltime, job_state, resources, num_nodes, shared)"
                           " VALUES (398764, 'fritz', 'main', 1675954353, 'u', 'p', 1, 1, "
                           "'completed', '[]', 1, 'none')")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        connection.execute("INSERT INTO job (job_id, cluster, subcluster, start_time, hpc_user, "
                           "project, duration, walltime, job_state, resources, num_nodes, shared)"
                           " VALUES (1, 'fritz', 'main', 2, 'u', 'p', 1, 1, 'exploded', '[]', 1,"
                           " 'none')")
    connection.close()


def test_schema_violations_reported_not_enforced(emmy_archive, assembled_archive):
    ref = JobRef(assembled_archive, "taurus", 20639587, 1635856524)
    raw = json.loads(ref.meta_path.read_text())
    warnings = meta_warnings(ref.key, ref.meta_path, raw, 3)
    assert {(w.path, w.message) for w in warnings} >= {
        ("/", "'shared' is a required property"),
        ("/statistics", "'cpu_load' is a required property")}
    assert all(w.job == ref.key and w.file == "meta.json" for w in warnings)
    data = DataConformance(ref.key, ref.data_path(), 3)
    read_samples(ref, read_meta(ref), observe=data.observe)  # read all the same
    found = {(w.path, w.message) for w in data.warnings()}
    assert ("/cpu_power/socket/statisticsSeries", "None is not of type 'object'") in found
    emmy = JobRef(emmy_archive, "emmy", 1403244, 1608923076)
    data = DataConformance(emmy.key, emmy.data_path(), 3)
    read_samples(emmy, read_meta(emmy), observe=data.observe)
    paths = {w.path for w in data.warnings()}
    assert "/cpu_load/node/unit/base" in paths  # 'load' is outside the enum
    assert all(w.file == "data.json.gz" for w in data.warnings())
