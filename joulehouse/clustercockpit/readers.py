"""Readers for a ClusterCockpit archive: version.txt, cluster.json, meta.json, data.json(.gz).

Units are converted here, once, to SI base units (:mod:`.units`); times
become tz-aware UTC. ``data.json`` has no timestamps: sample ``i`` of a
series belongs to ``startTime + i * timestep``. It is streamed one metric at
a time (ijson's C parser, from the gzip stream when compressed), so a large
file is never held whole, neither as bytes nor as Python objects; ``null``
samples stay missing (NaN). Every bad input raises
:class:`~joulehouse.errors.InputError` naming the file and the place in it
(JSON line, or the field path such as ``rapl_power.node.series[3].data``).
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ijson
import numpy as np
import pandas as pd

from joulehouse.clustercockpit.layout import (
    CLUSTER_FILE,
    META_FILE,
    VERSION_FILE,
    JobRef,
    find_jobs,
    inside,
)
from joulehouse.clustercockpit.units import ENERGY_UNIT, POWER_UNIT, UnitError, to_si
from joulehouse.errors import InputError
from joulehouse.timeutil import epoch_ns_to_utc

ARCHIVE_VERSIONS = (1, 2, 3)
#: Power metrics of real archives whose cluster.json may not mark them (emmy has no rapl_power).
POWER_METRICS = ("rapl_power", "cpu_power", "mem_power", "acc_power", "core_power")
#: Scopes from the coarsest to the finest; ``accelerator`` is beside the CPU tree.
SCOPES = ("node", "socket", "memoryDomain", "core", "hwthread", "accelerator")
#: Largest plausible power of one series' sample (W): a node of eight accelerators.
MAX_SERIES_POWER_W = 20_000.0
#: cc-backend's old ``exclusive`` (archive v1, v2) -> v3's ``shared`` (its migration 09).
SHARED_BY_EXCLUSIVE = {0: "multi_user", 1: "none", 2: "single_user"}

SAMPLE_COLUMNS = ["job", "series", "metric", "scope", "host", "id", "time", "value", "unit"]


@dataclass(frozen=True)
class MetricConfig:
    """One metric of cluster.json: SI unit, scope, timestep (s), energy kind or None."""

    name: str
    unit: str
    scope: str | None
    timestep_s: float | None
    energy: str | None  # "power" | "energy" (cluster.json v2+), None when not marked


@dataclass(frozen=True)
class ClusterConfig:
    """A cluster.json: its name and metric configurations by name."""

    name: str
    metrics: dict[str, MetricConfig]

    def energy_kind(self, metric: str) -> str | None:
        """``"power"``, ``"energy"`` (a counter) or None for any other metric.

        cluster.json's ``energy`` mark decides; unmarked metrics named in
        POWER_METRICS are power (the emmy cluster.json lacks its rapl_power).
        """
        config = self.metrics.get(metric)
        if config is not None and config.energy in ("power", "energy"):
            return config.energy
        return "power" if metric in POWER_METRICS else None


def load_json(path: str | os.PathLike[str]) -> Any:
    """A whole (small) JSON file; InputError naming its line and column when invalid."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise InputError(path, "missing") from None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as err:
        raise InputError(path, f"invalid JSON: {err.msg} (column {err.colno})",
                         line=err.lineno) from None
    except UnicodeDecodeError as err:
        raise InputError(path, f"not UTF-8 text: {err}") from None


def read_version(root: str | os.PathLike[str]) -> int:
    """The archive version in ``root/version.txt`` (1, 2 or 3)."""
    path = Path(root) / VERSION_FILE
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        raise InputError(path, "missing: not a job archive root") from None
    if not text.isdigit() or int(text) not in ARCHIVE_VERSIONS:
        raise InputError(path, f"unsupported archive version {text!r} (expected one of "
                         f"{', '.join(map(str, ARCHIVE_VERSIONS))})", line=1)
    return int(text)


def read_cluster(root: str | os.PathLike[str], cluster: str) -> ClusterConfig:
    """``root/<cluster>/cluster.json``: metric units in SI, scopes, energy kinds."""
    path = Path(root) / cluster / CLUSTER_FILE
    doc = load_json(inside(Path(root), path))
    configs = doc.get("metricConfig") if isinstance(doc, dict) else None
    if not isinstance(configs, list):
        raise InputError(path, "expected a list", field="metricConfig")
    metrics = {}
    for index, config in enumerate(configs):
        where = f"metricConfig[{index}]"
        if not isinstance(config, dict) or not isinstance(config.get("name"), str):
            raise InputError(path, "expected an object with a name", field=where)
        try:
            unit, _ = to_si(config.get("unit", {"base": ""}))
        except UnitError as err:
            raise InputError(path, str(err), field=f"{where}.unit") from None
        metrics[config["name"]] = MetricConfig(
            config["name"], unit, config.get("scope"), config.get("timestep"),
            config.get("energy"))
    return ClusterConfig(str(doc.get("name", cluster)), metrics)


def cluster_config(root: str | os.PathLike[str],
                   cluster: str) -> tuple[ClusterConfig, InputError | None]:
    """:func:`read_cluster`, and None; where cluster.json is missing or bad, a config knowing
    only the POWER_METRICS names, and its InputError (to report; the jobs are still read)."""
    try:
        return read_cluster(root, cluster), None
    except InputError as err:
        return ClusterConfig(cluster, {}), err


def each_job(root: str | os.PathLike[str], refs: Iterable[JobRef] | None,
             errors: list[InputError]) -> Iterator[tuple[JobRef, ClusterConfig]]:
    """Every job of the archive at ``root`` (or ``refs``) with its cluster's config, each
    cluster.json read once; the errors of folders that cannot be listed
    (:func:`~.layout.find_jobs`) and of missing or bad cluster.json files are appended to
    ``errors`` (the jobs are still given)."""
    clusters: dict[str, ClusterConfig] = {}
    for ref in find_jobs(root, errors=errors) if refs is None else refs:
        if ref.cluster not in clusters:
            clusters[ref.cluster], error = cluster_config(root, ref.cluster)
            if error is not None:
                errors.append(error)
        yield ref, clusters[ref.cluster]


_META_REQUIRED = {"jobId": int, "cluster": str, "startTime": int, "duration": int,
                  "numNodes": int}


def read_meta(ref: JobRef) -> dict[str, Any]:
    """A job's meta.json, checked against its folder and normalised to archive v3.

    The jobId, cluster and startTime must be the folder's (InputError naming
    the field otherwise); ``exclusive`` (v1, v2) becomes ``shared``.
    Missing meta.json beside a data file is an InputError naming meta.json.
    """
    path = ref.meta_path
    ref.check_inside(META_FILE)
    try:
        meta = load_json(path)
    except InputError as err:
        data = ref.data_path()
        if err.reason == "missing" and data is not None:
            raise InputError(path, f"missing (the folder has {data.name} without it)") from None
        raise
    if not isinstance(meta, dict):
        raise InputError(path, "expected a JSON object")
    for name, kind in _META_REQUIRED.items():
        value = meta.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise InputError(path, f"expected {kind.__name__}, found {value!r}", field=name)
    for name, expected in (("jobId", ref.job_id), ("cluster", ref.cluster),
                           ("startTime", ref.start_time)):
        if meta[name] != expected:
            raise InputError(path, f"{meta[name]!r} does not match the folder's {expected!r} "
                             f"({ref.path})", field=name)
    if meta["duration"] < 0 or meta["numNodes"] < 0:
        raise InputError(path, "negative", field="duration" if meta["duration"] < 0
                         else "numNodes")
    if "shared" not in meta and "exclusive" in meta:
        exclusive = meta.pop("exclusive")
        if exclusive not in SHARED_BY_EXCLUSIVE:
            raise InputError(path, f"expected 0, 1 or 2, found {exclusive!r}", field="exclusive")
        meta["shared"] = SHARED_BY_EXCLUSIVE[exclusive]
    return meta


def _open_data(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def iter_metrics(path: str | os.PathLike[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(metric, {scope: metric data}) of a data.json(.gz), one metric at a time.

    Truncated or invalid JSON and a truncated gzip stream raise InputError
    naming the file and the metric being read.
    """
    path = Path(path)
    metric = None
    try:
        with _open_data(path) as handle:
            for metric, scopes in ijson.kvitems(handle, "", use_float=True):
                if not isinstance(scopes, dict):
                    raise InputError(path, "expected an object {scope: data}", field=metric)
                yield metric, scopes
    except (ijson.JSONError, EOFError, zlib.error, gzip.BadGzipFile, OSError,
            UnicodeDecodeError) as err:
        where = f"after metric {metric!r}" if metric else "before the first metric"
        # yajl's message goes on with lines pointing into the text: its first line says it
        reason = (str(err).strip().splitlines() or [""])[0]
        raise InputError(path, f"truncated or invalid ({type(err).__name__}: {reason}), "
                         f"{where}") from None


class _SeriesBuffer:
    """Series of one job collected as arrays, turned into the long frame once."""

    def __init__(self) -> None:
        self.labels: list[tuple[str, str, str, str | None, str]] = []
        self.values: list[np.ndarray] = []
        self.times: list[np.ndarray] = []

    def add(self, label, values: np.ndarray, times_ns: np.ndarray) -> None:
        self.labels.append(label)
        self.values.append(values)
        self.times.append(times_ns)

    def frame(self, job: str) -> pd.DataFrame:
        lengths = np.array([len(v) for v in self.values], dtype="int64")
        columns: dict[str, Any] = {
            "job": pd.Categorical.from_codes(np.zeros(int(lengths.sum()), "int8"), [job]),
            "series": np.repeat(np.arange(len(lengths), dtype="int32"), lengths)}
        for position, name in enumerate(("metric", "scope", "host", "id")):
            labels = [label[position] for label in self.labels]
            categories = sorted({v for v in labels if v is not None})
            lookup = {v: i for i, v in enumerate(categories)} | {None: -1}
            codes = np.repeat(np.array([lookup[v] for v in labels], dtype="int32"), lengths)
            columns[name] = pd.Categorical.from_codes(codes, categories)
        empty = np.empty(0)
        columns["time"] = epoch_ns_to_utc(np.concatenate(self.times) if self.times
                                          else empty.astype("int64"))
        columns["value"] = np.concatenate(self.values) if self.values else empty
        units = [label[4] for label in self.labels]
        categories = sorted(set(units))
        lookup = {v: i for i, v in enumerate(categories)}
        columns["unit"] = pd.Categorical.from_codes(
            np.repeat(np.array([lookup[u] for u in units], dtype="int32"), lengths), categories)
        return pd.DataFrame(columns, columns=SAMPLE_COLUMNS)


def read_samples(
    ref: JobRef,
    meta: dict[str, Any],
    cluster: ClusterConfig | None = None,
    *,
    metrics: Collection[str] | None = None,
    observe: Callable[[str, dict[str, Any]], None] | None = None,
) -> pd.DataFrame:
    """The long frame of a job's samples: one row per sample of every series.

    Columns SAMPLE_COLUMNS: ``job`` (``cluster/jobId/startTime``), ``series``
    (the series' position in the file: real files repeat a (host, id) within
    a scope, e.g. fritz's two sockets both ``id "0"``), ``metric``,
    ``scope``, ``host``, ``id`` (socket, core, accelerator; missing for node
    scope), ``time`` (UTC: startTime + i x timestep), ``value`` (float, in
    SI ``unit``; NaN where the file has null). Rows are grouped by series
    in file order. ``metrics`` limits the metrics converted (all are
    parsed); ``observe(metric, scopes)`` sees each metric's raw object
    first (schema validation). Power samples (cluster's energy kind) must
    lie in [0, MAX_SERIES_POWER_W] W; the series of one metric and scope
    must have the same length.
    """
    path = ref.data_path()
    if path is None:
        raise InputError(ref.path / "data.json", "missing (the job folder has meta.json only)")
    ref.check_inside(path.name)
    cluster = cluster or ClusterConfig(ref.cluster, {})
    start_ns = int(meta["startTime"]) * 1_000_000_000
    buffer = _SeriesBuffer()
    for metric, scopes in iter_metrics(path):
        if observe is not None:
            observe(metric, scopes)
        if metrics is not None and metric not in metrics:
            continue
        kind = cluster.energy_kind(metric)
        for scope, data in scopes.items():
            _add_scope(buffer, path, metric, scope, data, kind, start_ns)
    return buffer.frame(ref.key)


def _add_scope(buffer: _SeriesBuffer, path: Path, metric: str, scope: str, data: Any,
               kind: str | None, start_ns: int) -> None:
    """Convert one metric's scope object and add its series to ``buffer``."""
    where = f"{metric}.{scope}"
    if not isinstance(data, dict):
        raise InputError(path, "expected an object", field=where)
    try:
        unit, factor = to_si(data.get("unit"))
    except UnitError as err:
        raise InputError(path, str(err), field=f"{where}.unit") from None
    expected = {"power": POWER_UNIT, "energy": ENERGY_UNIT}.get(kind)
    if expected and unit != expected:
        raise InputError(path, f"a {kind} metric must be in {expected}, found {unit!r}",
                         field=f"{where}.unit")
    timestep = data.get("timestep")
    if isinstance(timestep, bool) or not isinstance(timestep, int | float) or timestep <= 0:
        raise InputError(path, f"expected a positive number of seconds, found {timestep!r}",
                         field=f"{where}.timestep")
    series = data.get("series")
    if not isinstance(series, list):
        raise InputError(path, "expected a list", field=f"{where}.series")
    step_ns = round(timestep * 1e9)
    length = None
    for index, item in enumerate(series):
        place = f"{where}.series[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("hostname"), str):
            raise InputError(path, "expected an object with a hostname", field=place)
        values = _samples(path, item.get("data"), f"{place}.data")
        if length is not None and len(values) != length:
            raise InputError(path, f"{len(values)} samples where series[0] has {length}",
                             field=f"{place}.data")
        length = len(values)
        if factor != 1.0:
            values *= factor
        if kind == "power":
            _check_power(path, values, f"{place}.data")
        series_id = item.get("id")
        buffer.add((metric, scope, item["hostname"], None if series_id is None
                    else str(series_id), unit), values,
                   start_ns + np.arange(len(values), dtype="int64") * step_ns)


def _samples(path: Path, data: Any, field: str) -> np.ndarray:
    """A series' ``data`` as float64 (NaN for null); InputError naming ``data[j]`` for an
    item that is not a number or null (numpy would take "12.5" and true as numbers).

    The parser gives numbers as float or int: one pass over the items' types
    (about 20 ms per million samples) finds anything else.
    """
    if not isinstance(data, list):
        raise InputError(path, f"expected a list of numbers or null, found {type(data).__name__}",
                         field=field)
    if not _SAMPLE_TYPES.issuperset(map(type, data)):
        index = next(j for j, value in enumerate(data) if type(value) not in _SAMPLE_TYPES)
        raise InputError(path, f"expected a number or null, found {data[index]!r}",
                         field=f"{field}[{index}]")
    return np.array(data, dtype="float64")


#: Python types of a sample the parser gives (bool is not int here: true is refused).
_SAMPLE_TYPES = frozenset({float, int, type(None)})


def _check_power(path: Path, values: np.ndarray, field: str) -> None:
    """Refuse negative or absurd power samples, naming the first one."""
    bad = np.flatnonzero((values < 0) | (values > MAX_SERIES_POWER_W))
    if len(bad):
        raise InputError(path, f"power {float(values[bad[0]])!r} W outside [0, {MAX_SERIES_POWER_W:g}] "
                         f"W ({len(bad)} samples)", field=f"{field}[{bad[0]}]")
