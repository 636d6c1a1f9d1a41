"""``cc_jobs``: one row per job from meta.json, with the columns of cc-backend's job table.

The columns are those of cc-backend's SQLite ``job`` table at DB version 11
(``id`` left to the database), then ours (``job`` key, UTC times, node-hours,
archive version); see :data:`~joulehouse.clustercockpit.schemas.CC_JOBS_SCHEMA`.
Only meta.json is read (data.json is not opened), so building the table
scales with the number of jobs, not their samples. A job that cannot be read
is left out and its InputError returned beside the table.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from joulehouse.clustercockpit.energy import cc_energy_kwh
from joulehouse.clustercockpit.layout import JobRef
from joulehouse.clustercockpit.readers import ClusterConfig, each_job, read_meta, read_version
from joulehouse.clustercockpit.schemas import CC_JOBS_SCHEMA
from joulehouse.errors import InputError
from joulehouse.timeutil import epoch_ns_to_utc
from joulehouse.validation import validate

CC_JOBS_COLUMNS = list(CC_JOBS_SCHEMA.columns)
#: cc-backend's own columns of the job table (DB version 11), without ``id``.
CC_BACKEND_COLUMNS = CC_JOBS_COLUMNS[1:CC_JOBS_COLUMNS.index("start_time_utc")]
#: Older spellings of job states (cc-backend's migration 04).
_STATE_ALIASES = {"canceled": "cancelled"}


@dataclass(frozen=True)
class JobsTable:
    """``cc_jobs`` rows of the jobs read, and an InputError for each job left out (and each
    missing or bad cluster.json)."""

    jobs: pd.DataFrame
    errors: list[InputError]


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def job_row(ref: JobRef, meta: dict[str, Any], cluster: ClusterConfig,
            version: int) -> dict[str, Any]:
    """One ``cc_jobs`` row (without the UTC columns, added per table) from a read meta.json.

    ``energy`` is meta.json's when it has one (archive v3), else cc-backend's
    formula summed over the job's power metrics in meta.json's statistics.
    """
    energy = meta.get("energy")
    if not isinstance(energy, int | float) or isinstance(energy, bool):
        stats = meta.get("statistics") or {}
        energy = round(sum(cc_energy_kwh(stat.get("avg", 0.0), meta["numNodes"],
                                         meta["duration"])
                           for name, stat in stats.items()
                           if isinstance(stat, dict) and cluster.energy_kind(name) == "power"), 2)
    state = meta.get("jobState", "completed")
    return {
        "job": ref.key,
        "job_id": meta["jobId"],
        "cluster": meta["cluster"],
        "subcluster": meta.get("subCluster") or "",
        "submit_time": int(meta.get("submitTime") or 0),
        "start_time": meta["startTime"],
        "hpc_user": meta.get("user") or "",
        "project": meta.get("project") or "",
        "cluster_partition": meta.get("partition"),
        "array_job_id": meta.get("arrayJobId"),
        "duration": meta["duration"],
        "walltime": int(meta.get("walltime") or 0),
        "job_state": _STATE_ALIASES.get(state, state),
        "meta_data": _json_text(meta.get("metaData")),
        "resources": _json_text(meta.get("resources") or []),
        "num_nodes": meta["numNodes"],
        "num_hwthreads": meta.get("numHwthreads"),
        "num_acc": meta.get("numAcc"),
        "smt": int(meta.get("smt", 1)),
        "shared": meta.get("shared", "none"),
        "monitoring_status": int(meta.get("monitoringStatus", 1)),
        "energy": float(energy),
        "energy_footprint": _json_text(meta.get("energyFootprint")),
        "footprint": _json_text(meta.get("footprint")),
    }


def jobs_frame(rows: list[dict[str, Any]], version: int | list[int]) -> pd.DataFrame:
    """The validated ``cc_jobs`` frame of rows made by :func:`job_row`."""
    frame = pd.DataFrame(rows, columns=["job", *CC_BACKEND_COLUMNS])
    for name in ("job_id", "submit_time", "start_time", "duration", "walltime", "num_nodes",
                 "smt", "monitoring_status"):
        frame[name] = frame[name].astype("int64")
    for name in ("array_job_id", "num_hwthreads", "num_acc"):
        frame[name] = frame[name].astype("Int64")
    frame["energy"] = frame["energy"].astype("float64")
    for name in ("cluster_partition", "meta_data", "energy_footprint", "footprint"):
        frame[name] = frame[name].astype(object)
    start_ns = frame["start_time"].to_numpy() * 1_000_000_000
    duration = frame["duration"].to_numpy()
    frame["start_time_utc"] = epoch_ns_to_utc(start_ns)
    frame["end_time_utc"] = epoch_ns_to_utc(start_ns + duration * 1_000_000_000)
    frame["node_hours"] = frame["num_nodes"].to_numpy() * duration / 3600.0
    frame["archive_version"] = np.broadcast_to(np.asarray(version, dtype="int64"), len(frame))
    return validate(CC_JOBS_SCHEMA, frame, "cc_jobs")


def read_jobs(root: str | os.PathLike[str], refs: Iterable[JobRef] | None = None) -> JobsTable:
    """``cc_jobs`` of the archive at ``root``: every job, or the jobs ``refs``.

    Each cluster.json is read once (a missing or bad one leaves only the
    default power metrics known, its InputError in ``errors``). A job whose meta.json is missing, unparseable or
    does not match its folder is left out, its InputError in ``errors``, as
    is a folder linked outside the root (:func:`~.layout.find_jobs`).
    """
    root = Path(root)
    version = read_version(root)
    rows, errors = [], []
    for ref, cluster in each_job(root, refs, errors):
        try:
            rows.append(job_row(ref, read_meta(ref), cluster, version))
        except InputError as err:
            errors.append(err)
    return JobsTable(jobs_frame(rows, version), errors)
