"""Synthetic ClusterCockpit jobs with an exact energy (tests, benchmarks, demo).

Each host's ``cpu_power`` (node scope, W) ramps linearly, ``a + b * t``, so
the trapezoid of its samples is exact; the job lasts ``(samples - 1) x
timestep`` seconds, so no window edge is extrapolated. Isolated ``null``
samples (never the first or last) are bridged linearly, also exactly.
``mem_bw`` (socket scope, GB/s, two sockets per host) rides along to
exercise the units and the scope choice. Files are written as cc-backend
writes them (archive v3 meta.json; data.json, or data.json.gz when asked).
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from joulehouse.clustercockpit.layout import CLUSTER_FILE, VERSION_FILE, job_folder


@dataclass(frozen=True)
class JobSpec:
    """One synthetic job: identity, size, sampling and the power ramp per host (W, W/s)."""

    cluster: str = "testcluster"
    job_id: int = 1_234_567
    start_time: int = 1_700_000_000
    hosts: int = 2
    samples: int = 61
    timestep_s: int = 60
    base_power_w: float = 200.0
    ramp_w_per_s: float = 0.01
    null_every: int = 0  # every n-th inner sample of each host null (0: none)
    user: str = "user1"
    project: str = "project1"
    partition: str = "batch"
    gzip: bool = False


@dataclass(frozen=True)
class JobTruth:
    """What a synthetic job's files must give: energy (J) and the cc-backend figure (kWh)."""

    key: str
    duration_s: int
    energy_j: float
    energy_cc_kwh: float


def cluster_config(name: str) -> dict:
    """A minimal cluster.json marking ``cpu_power`` as power (archive v2+)."""
    return {"name": name, "metricConfig": [
        {"name": "cpu_power", "unit": {"base": "W"}, "scope": "node", "aggregation": "sum",
         "timestep": 60, "energy": "power"},
        {"name": "mem_bw", "unit": {"base": "B/s", "prefix": "G"}, "scope": "socket",
         "aggregation": "sum", "timestep": 60}],
        "subClusters": [{"name": "main", "nodes": "n[0001-9999]"}]}


def write_archive_files(root: str | os.PathLike[str], clusters: list[str]) -> None:
    """version.txt (3) and each cluster's cluster.json."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / VERSION_FILE).write_text("3\n")
    for name in clusters:
        (root / name).mkdir(exist_ok=True)
        (root / name / CLUSTER_FILE).write_text(json.dumps(cluster_config(name)))


def write_job(root: str | os.PathLike[str], spec: JobSpec) -> JobTruth:
    """Write one job folder under ``root``; returns its exact energy."""
    folder = job_folder(root, spec.cluster, spec.job_id, spec.start_time)
    folder.mkdir(parents=True, exist_ok=True)
    duration = (spec.samples - 1) * spec.timestep_s
    t = np.arange(spec.samples, dtype="float64") * spec.timestep_s
    hosts = [f"n{index + 1:04d}" for index in range(spec.hosts)]
    power_series, bw_series, energy, averages = [], [], 0.0, []
    for index, host in enumerate(hosts):
        base = spec.base_power_w + 10.0 * index
        values: list[float | None] = [round(v, 6) for v in base + spec.ramp_w_per_s * t]
        energy += base * duration + spec.ramp_w_per_s * duration**2 / 2
        present = np.array(values, dtype="float64")
        averages.append(float(present.mean()))
        if spec.null_every:
            for position in range(spec.null_every, spec.samples - 1, spec.null_every):
                values[position] = None
        power_series.append({"hostname": host, "statistics": {
            "min": min(v for v in values if v is not None),
            "avg": averages[-1], "max": max(v for v in values if v is not None)},
            "data": values})
        for socket in (0, 1):
            bw_series.append({"hostname": host, "id": str(socket),
                              "data": [1.5 + socket] * spec.samples})
    data = {
        "cpu_power": {"node": {"unit": {"base": "W"}, "timestep": spec.timestep_s,
                               "series": power_series}},
        "mem_bw": {"socket": {"unit": {"base": "B/s", "prefix": "G"},
                              "timestep": spec.timestep_s, "series": bw_series}},
    }
    average = float(np.mean(averages))
    meta = {
        "jobId": spec.job_id, "user": spec.user, "project": spec.project,
        "cluster": spec.cluster, "subCluster": "main", "partition": spec.partition,
        "arrayJobId": 0, "numNodes": spec.hosts, "numHwthreads": 2 * spec.hosts,
        "shared": "none", "monitoringStatus": 1, "smt": 1, "jobState": "completed",
        "submitTime": spec.start_time - 100, "startTime": spec.start_time,
        "duration": duration, "walltime": 2 * duration,
        "resources": [{"hostname": host} for host in hosts],
        "metaData": {"jobName": f"synthetic-{spec.job_id}"}, "tags": [],
        "statistics": {"cpu_power": {"unit": {"base": "W"}, "avg": average,
                                     "min": 0.0, "max": 0.0}},
    }
    raw = json.dumps(data, separators=(",", ":")).encode()
    (folder / "meta.json").write_text(json.dumps(meta, separators=(",", ":")))
    if spec.gzip:
        (folder / "data.json.gz").write_bytes(gzip.compress(raw, 6))
    else:
        (folder / "data.json").write_bytes(raw)
    cc = average * spec.hosts * duration / 3.6e6
    return JobTruth(f"{spec.cluster}/{spec.job_id}/{spec.start_time}", duration, energy,
                    float(np.floor(cc * 100 + 0.5) / 100))
