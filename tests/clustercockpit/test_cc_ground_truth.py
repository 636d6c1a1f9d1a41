"""Synthetic jobs with an exact energy: integration, bridging, counters, completeness."""

from __future__ import annotations

import gzip
import json
import os

import pandas as pd
import pytest

from joulehouse.clustercockpit.aggregate import metric_stats
from joulehouse.clustercockpit.energy import energy_facts_rows, host_energy, job_energy
from joulehouse.clustercockpit.generator import JobSpec, write_archive_files, write_job
from joulehouse.clustercockpit.jobs import read_jobs
from joulehouse.clustercockpit.layout import JobRef, find_jobs, fingerprint, is_complete
from joulehouse.clustercockpit.readers import read_cluster, read_meta, read_samples


def energy_of(root, spec: JobSpec, **kw):
    ref = JobRef(root, spec.cluster, spec.job_id, spec.start_time)
    meta = read_meta(ref)
    cluster = read_cluster(root, spec.cluster)
    samples = read_samples(ref, meta, cluster)
    return job_energy(meta, host_energy(meta, samples, cluster, **kw)), samples, meta


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("null_every", [0, 5])
def test_exact_energy(tmp_path, packed, null_every):
    write_archive_files(tmp_path, ["testcluster"])
    spec = JobSpec(hosts=3, samples=121, null_every=null_every, gzip=packed)
    truth = write_job(tmp_path, spec)
    energy, samples, _ = energy_of(tmp_path, spec)
    (row,) = energy.itertuples()
    assert row.metric == "cpu_power" and row.hosts == 3 and row.scope == "node"
    assert row.energy_j == pytest.approx(truth.energy_j, rel=1e-12)
    assert row.gap_count == 0 and row.covered_fraction == 1.0
    assert row.energy_cc_kwh == truth.energy_cc_kwh
    nulls = 3 * len(range(5, 120, 5)) if null_every else 0
    assert int(samples["value"].isna().sum()) == nulls
    bandwidth = samples[samples["metric"] == "mem_bw"]
    assert sorted(bandwidth["value"].unique()) == [1.5e9, 2.5e9]  # GB/s -> B/s
    assert set(bandwidth["unit"]) == {"B/s"}


def test_long_gap_not_bridged(tmp_path):
    write_archive_files(tmp_path, ["testcluster"])
    spec = JobSpec(hosts=1, samples=61, null_every=0)
    write_job(tmp_path, spec)
    ref = JobRef(tmp_path, spec.cluster, spec.job_id, spec.start_time)
    path = ref.data_path()
    data = json.loads(path.read_text())
    series = data["cpu_power"]["node"]["series"][0]["data"]
    series[10:13] = [None, None, None]  # samples 10-12 missing: 9 -> 13 is 240 s
    path.write_text(json.dumps(data))
    energy, _, meta = energy_of(tmp_path, spec)
    assert energy["gap_count"].item() == 1
    assert energy["gap_s"].item() == 240.0
    assert energy["covered_fraction"].item() == pytest.approx(1 - 240 / meta["duration"])
    base, ramp = spec.base_power_w, spec.ramp_w_per_s
    missing = base * 240 + ramp * (780**2 - 540**2) / 2  # the ramp from 540 s to 780 s
    total = base * 3600 + ramp * 3600**2 / 2
    assert energy["energy_j"].item() == pytest.approx(total - missing, rel=1e-12)
    assert energy_facts_rows(energy)["method"].tolist() == ["cc-backend"]  # no partial fact
    bridged, _, _ = energy_of(tmp_path, spec, max_missing=3)
    assert bridged["gap_count"].item() == 0
    assert bridged["energy_j"].item() == pytest.approx(total, rel=1e-12)  # linear: exact


@pytest.mark.parametrize("lack", ["no series", "all null"])
def test_a_host_without_power_samples_is_a_whole_window_gap(tmp_path, lack):
    """A host of meta.json's resources whose cpu_power series is missing or all null adds
    no energy and a gap of the whole window; the job is not fully covered (no fact)."""
    write_archive_files(tmp_path, ["testcluster"])
    spec = JobSpec(hosts=4, samples=61)
    write_job(tmp_path, spec)
    ref = JobRef(tmp_path, spec.cluster, spec.job_id, spec.start_time)
    meta = read_meta(ref)
    cluster = read_cluster(tmp_path, spec.cluster)
    whole = host_energy(meta, read_samples(ref, meta, cluster), cluster).set_index("host")
    data = json.loads(ref.data_path().read_text())
    series = data["cpu_power"]["node"]["series"]
    lacking = series[-1]["hostname"]
    if lack == "no series":
        series.pop()
    else:
        series[-1]["data"] = [None] * len(series[-1]["data"])
    ref.data_path().write_text(json.dumps(data))
    per_host = host_energy(meta, read_samples(ref, meta, cluster), cluster).set_index("host")
    assert len(per_host) == 4
    row = per_host.loc[lacking]
    assert pd.isna(row["energy_j"]) and row["covered_fraction"] == 0.0
    assert (row["series"], row["gap_count"], row["gap_s"]) == (1, 1, meta["duration"])
    (job,) = job_energy(meta, per_host.reset_index()).itertuples()
    assert job.hosts == 3 and job.gap_count == 1 and job.covered_fraction == 0.75
    assert job.energy_j == pytest.approx(whole["energy_j"].drop(lacking).sum(), rel=1e-12)
    assert energy_facts_rows(job_energy(meta, per_host.reset_index()))["method"].tolist() == [
        "cc-backend"]


def test_energy_counter_metric(tmp_path):
    write_archive_files(tmp_path, ["testcluster"])
    spec = JobSpec(hosts=2, samples=5)
    write_job(tmp_path, spec)
    config = json.loads((tmp_path / "testcluster/cluster.json").read_text())
    config["metricConfig"].append({"name": "node_energy", "unit": {"base": "J", "prefix": "K"},
                                   "scope": "node", "timestep": 60, "energy": "energy"})
    (tmp_path / "testcluster/cluster.json").write_text(json.dumps(config))
    ref = JobRef(tmp_path, spec.cluster, spec.job_id, spec.start_time)
    data = json.loads(ref.data_path().read_text())
    data["node_energy"] = {"node": {"unit": {"base": "J", "prefix": "K"}, "timestep": 60,
                                    "series": [
        {"hostname": "n0001", "data": [100.0, 112.0, 124.0, 136.0, 148.0]},  # 12 kJ a step
        {"hostname": "n0002", "data": [5.0, 15.0, 2.0, 12.0, 22.0]}]}}  # a reset after 15
    ref.data_path().write_text(json.dumps(data))
    energy, _, _ = energy_of(tmp_path, spec)
    counter = energy.set_index("metric").loc["node_energy"]
    assert counter["kind"] == "energy" and counter["energy_cc_kwh"] == 0.0
    assert counter["energy_j"] == pytest.approx(48e3 + (10 + 2 + 10 + 10) * 1e3)
    facts = energy_facts_rows(energy.reset_index(drop=True))
    assert sorted(facts["method"]) == ["cc-backend", "counter", "power"]


def test_statistics_of_a_ramp(tmp_path):
    write_archive_files(tmp_path, ["testcluster"])
    spec = JobSpec(hosts=1, samples=61, null_every=4)
    write_job(tmp_path, spec)
    ref = JobRef(tmp_path, spec.cluster, spec.job_id, spec.start_time)
    meta = read_meta(ref)
    stats = metric_stats(meta, read_samples(ref, meta)).set_index("metric")
    power = stats.loc["cpu_power"]
    assert (power["min"], power["max"]) == (200.0, 200.0 + 0.01 * 3600)
    assert power["missing"] == len(range(4, 60, 4)) and power["samples"] == 61 - power["missing"]
    assert power["time_weighted_mean"] == pytest.approx(200.0 + 0.01 * 1800, rel=1e-12)
    sockets = stats.loc["mem_bw"]
    assert sockets["scope"] == "socket" and sockets["series"] == 2
    assert sockets["mean"] == pytest.approx(2.0e9)


def test_cc_jobs_of_a_synthetic_archive(tmp_path):
    write_archive_files(tmp_path, ["alpha", "beta"])
    truths = [write_job(tmp_path, JobSpec(cluster=cluster, job_id=1000 + i,
                                          start_time=1_700_000_000 + 3600 * i, hosts=1 + i))
              for cluster in ("alpha", "beta") for i in range(3)]
    jobs = read_jobs(tmp_path).jobs
    assert jobs["job"].tolist() == [t.key for t in truths]
    assert jobs["energy"].tolist() == [t.energy_cc_kwh for t in truths]
    assert jobs["num_nodes"].tolist() == [1, 2, 3, 1, 2, 3]
    assert jobs["submit_time"].tolist() == [s - 100 for s in jobs["start_time"]]


def test_completeness_and_fingerprint(tmp_path):
    write_archive_files(tmp_path, ["testcluster"])
    spec = JobSpec(gzip=True)
    write_job(tmp_path, spec)
    (ref,) = find_jobs(tmp_path)
    assert is_complete(ref.path)
    before = fingerprint(ref.path)
    packed = (ref.path / "data.json.gz").read_bytes()
    (ref.path / "data.json.gz").write_bytes(packed[:-20])  # compression cut short
    assert not is_complete(ref.path)
    raw = gzip.decompress(packed)
    (ref.path / "data.json.gz").unlink()
    (ref.path / "data.json").write_bytes(raw[:-2])  # data.json cut short
    assert not is_complete(ref.path)
    (ref.path / "data.json").write_bytes(raw)
    assert is_complete(ref.path)
    after_replace = fingerprint(ref.path)
    assert after_replace != before  # data.json.gz replaced by data.json
    meta = json.loads(ref.meta_path.read_text())
    meta["tags"] = [{"type": "app", "name": "vasp"}]
    ref.meta_path.write_text(json.dumps(meta))
    os.utime(ref.meta_path, ns=(1, 1))
    assert fingerprint(ref.path) != after_replace  # meta.json rewritten later (tags)
    ref.meta_path.write_text('{"jobId": ')
    assert not is_complete(ref.path)
    ref.meta_path.unlink()
    assert not is_complete(ref.path)


def test_hosts_are_summed_per_metric_as_pandas_sums(tmp_path):
    """A job's energy, gaps and series are the sums over its hosts per metric, to the last
    bit of pandas' grouped sums (compensated for the gaps): ten hosts' 0.1 s of gap make
    1.0 s, where a plain running sum gives 0.9999999999999999."""
    write_archive_files(tmp_path, ["testcluster"])
    spec = JobSpec(hosts=10, samples=31)
    write_job(tmp_path, spec)
    ref = JobRef(tmp_path, spec.cluster, spec.job_id, spec.start_time)
    meta, cluster = read_meta(ref), read_cluster(tmp_path, spec.cluster)
    per_host = host_energy(meta, read_samples(ref, meta, cluster), cluster)
    per_host["gap_s"] = 0.1
    per_host.loc[3, "energy_j"] = float("nan")  # a host without energy: counted out
    (row,) = job_energy(meta, per_host).itertuples()
    assert sum([0.1] * 10) != 1.0 and row.gap_s == 1.0
    expected = per_host.groupby("metric").agg(
        gap_s=("gap_s", "sum"), series=("series", "sum"), energy_j=("energy_j", "sum"),
        hosts=("energy_j", "count")).loc["cpu_power"]
    assert (row.gap_s, row.series, row.hosts) == (expected.gap_s, 10, 9)
    assert row.energy_j == pytest.approx(expected.energy_j, rel=1e-15)
    assert row.covered_fraction == 1 - 1.0 / (10 * meta["duration"])
