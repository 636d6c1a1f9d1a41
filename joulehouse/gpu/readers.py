"""Readers for the files of one repetition, each returning a validated frame.

Units are converted here, once, and named in the columns: W, J, MHz, %, °C,
KiB/s; every timestamp becomes a tz-aware UTC ``time`` column. The unnamed
pandas index column the writer adds is dropped; unknown extra columns are
kept under a snake_case name, values untouched. Bad input raises
:class:`~joulehouse.errors.InputError` naming the file and the line (1-based,
header = line 1) and/or the field; a repetition whose ``timestamps.csv`` has
no ``experiment_end`` yet raises :class:`~joulehouse.errors.IncompleteInputError`.

CSV files are parsed by pyarrow with explicit column types (multi-threaded,
no per-row Python); the slow diagnosis of where a file is broken runs only
when pyarrow has refused it.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv

from joulehouse.errors import IncompleteInputError, InputError
from joulehouse.gpu import schemas
from joulehouse.gpu.layout import (
    END_EVENT,
    TIMESTAMPS_FILE,
    RepetitionRef,
    RunSettings,
    parse_settings,
)
from joulehouse.timeutil import TimestampError, check_timezone, epoch_us_to_utc, parse_local_iso
from joulehouse.validation import validate

GPU_POWER_FILE = "gpu-power.csv"
EXTERNAL_POWER_FILE = "power-external.csv"
SYSTEM_INFO_FILE = "system_info.json"
SAMPLES_SUFFIX = "_samples.csv"
POWER_SAMPLES = "total_power"

#: gpu-power.csv column -> (column name with unit, factor to that unit).
GPU_POWER_COLUMNS: dict[str, tuple[str, float]] = {
    "power": ("power_w", 1e-3),  # mW
    "total-energy": ("total_energy_j", 1e-3),  # mJ since the driver was loaded
    "enforced-power-limit": ("enforced_power_limit_w", 1e-3),  # mW
    "util-gpu": ("util_gpu_pct", 1.0),
    "util-mem": ("util_mem_pct", 1.0),  # % of time memory was read or written
    "clock-gpu": ("clock_sm_mhz", 1.0),
    "clock-mem": ("clock_mem_mhz", 1.0),
    "app-clock-gpu": ("app_clock_sm_mhz", 1.0),
    "app-clock-mem": ("app_clock_mem_mhz", 1.0),
    "power-state": ("power_state", 1.0),
    "tmp": ("temperature_c", 1.0),
    "pci-tx": ("pci_tx_kib_s", 1.0),  # KB/s, whatever the format document says
    "pci-rx": ("pci_rx_kib_s", 1.0),
}

#: Units ``power-external.csv`` may be written in -> factor to W.
EXTERNAL_POWER_UNITS = {"mW": 1e-3, "cW": 1e-2, "W": 1.0}

_CHANNEL = re.compile(r"^d\d+c\d+$")
_PANDAS_INDEX = re.compile(r"^(|Unnamed: \d+)$")
_ARROW_BAD_VALUE = re.compile(r"column #(\d+).*invalid value '(.*)'", re.DOTALL)
_FLOAT = pa.float64()
_LOCAL_TIME = pa.timestamp("us")  # pyarrow's ISO-8601 parser; the zone is added later


@dataclass
class Repetition:
    """The validated frames of one repetition (optional files: None / absent).

    ``samples`` maps the sampling type (``total_power``, ``gpu_utilization``
    ...) to its frame.
    """

    ref: RepetitionRef
    settings: RunSettings
    timestamps: pd.DataFrame
    gpu_power: pd.DataFrame
    external_power: pd.DataFrame | None = None
    samples: dict[str, pd.DataFrame] = field(default_factory=dict)
    system_info: dict[str, Any] | None = None

    @property
    def power_samples(self) -> pd.DataFrame | None:
        """The ~50 Hz ``total_power`` samples (``time``, ``power_w``), if collected."""
        return self.samples.get(POWER_SAMPLES)


def snake_case(name: str) -> str:
    """``util-gpu`` -> ``util_gpu``: lower case, runs of other characters to ``_``."""
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


def _header(path: Path, raw: bytes) -> list[str]:
    first = raw[: raw.find(b"\n")]
    try:
        return next(csv.reader([first.decode("utf-8").rstrip("\r")]))
    except UnicodeDecodeError:
        raise InputError(path, "header has bytes that are not UTF-8", line=1) from None


def _locate(path: Path, raw: bytes, header: list[str], err: Exception) -> InputError:
    """Find the line pyarrow refused (error path only: plain Python, line by line)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        line = raw.count(b"\n", 0, bad.start) + 1
        return InputError(path, f"bytes that are not UTF-8: {raw[bad.start:bad.end]!r}", line=line)
    for line, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if row and len(row) != len(header):
            return InputError(
                path, f"{len(row)} fields where the header has {len(header)} (cut short?)", line=line
            )
    if match := _ARROW_BAD_VALUE.search(str(err)):
        column, value = int(match[1]), match[2]
        for line, row in enumerate(csv.reader(io.StringIO(text)), start=1):
            if line > 1 and row and row[column] == value:
                return InputError(path, f"invalid value {value!r}", line=line, field=header[column])
    return InputError(path, f"not a readable CSV file: {err}")


def read_csv_table(
    path: Path, column_types: Callable[[list[str]], dict[str, pa.DataType]]
) -> pa.Table:
    """Parse a pandas-written CSV with pyarrow; drop its unnamed index column.

    ``column_types`` gets the header's names and returns the types to force.
    Raises InputError for an empty file, a last line cut short, bytes that
    are not UTF-8, a wrong number of fields and values of the wrong type.
    """
    raw = path.read_bytes()
    if not raw or raw.isspace():
        raise InputError(path, "empty file")
    if not raw.endswith(b"\n"):
        raise InputError(path, "last line is cut short (no line end)", line=raw.count(b"\n") + 1)
    header = _header(path, raw)
    names = [name for name in header if not _PANDAS_INDEX.match(name)]
    try:
        return pcsv.read_csv(
            pa.py_buffer(raw),
            convert_options=pcsv.ConvertOptions(
                column_types=column_types(names), include_columns=names
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise _locate(path, raw, header, err) from None


def _require(path: Path, table: pa.Table, *columns: str) -> None:
    for column in columns:
        if column not in table.column_names:
            raise InputError(path, "missing column", line=1, field=column)


def _local_time(path: Path, table: pa.Table, timezone: str) -> pd.DatetimeIndex:
    try:
        return parse_local_iso(table["timestamp"], timezone)
    except TimestampError as err:
        line = err.positions[0] + 2 if err.positions else None
        raise InputError(path, str(err), line=line, field="timestamp") from None


def _frame(
    path: Path, time: pd.DatetimeIndex, table: pa.Table, units: dict[str, tuple[str, float]]
) -> pd.DataFrame:
    """``time`` first, then known columns scaled and renamed, then the others as read.

    The known columns are written, scaled, straight into one float64 block
    (pandas' own layout, no per-column temporaries or consolidation copy).
    An other column whose snake_case name is already taken is an InputError.
    """
    known = [name for name in table.column_names if name in units]
    block = np.empty((len(known), table.num_rows))
    for name, row in zip(known, block, strict=True):
        start = 0
        for chunk in table[name].chunks:
            end = start + len(chunk)
            np.multiply(chunk.to_numpy(zero_copy_only=False), units[name][1], out=row[start:end])
            start = end
    frame = pd.DataFrame(block.T, columns=[units[name][0] for name in known], copy=False)
    frame.insert(0, "time", time)
    for name in table.column_names:
        if name != "timestamp" and name not in units:
            renamed = snake_case(name)
            if renamed in frame.columns:
                raise InputError(path, f"column would be kept as {renamed!r}, a name already "
                                 "taken", line=1, field=name)
            frame[renamed] = table[name].to_pandas()
    return frame


def read_system_info(path: Path) -> dict[str, Any]:
    """``system_info.json`` as a dict (device, driver, CUDA, NVML, packages ...)."""
    raw = path.read_bytes()
    if not raw.strip():
        raise InputError(path, "empty file")
    try:
        info = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as bad:
        line = raw.count(b"\n", 0, bad.start) + 1
        raise InputError(path, "bytes that are not UTF-8", line=line) from None
    except json.JSONDecodeError as bad:
        raise InputError(path, f"not JSON: {bad.msg}", line=bad.lineno) from None
    if not isinstance(info, dict):
        raise InputError(path, "not a JSON object")
    return info


def _timestamps_types(names: list[str]) -> dict[str, pa.DataType]:
    return {"timestamp": _LOCAL_TIME, "event": pa.string(), "data": pa.int64()}


def _timestamps_frame(path: Path, table: pa.Table, timezone: str) -> pd.DataFrame:
    _require(path, table, "timestamp", "event", "data")
    frame = _frame(path, _local_time(path, table, timezone), table, {})
    if not (frame["event"] == END_EVENT).any():
        raise IncompleteInputError(path, f"no {END_EVENT} event yet", field="event")
    return validate(schemas.TIMESTAMPS_SCHEMA, frame, path)


def _gpu_power_types(names: list[str]) -> dict[str, pa.DataType]:
    return {"timestamp": _LOCAL_TIME} | {n: _FLOAT for n in names if n in GPU_POWER_COLUMNS}


def _gpu_power_frame(path: Path, table: pa.Table, timezone: str) -> pd.DataFrame:
    _require(path, table, "timestamp", "power")
    frame = _frame(path, _local_time(path, table, timezone), table, GPU_POWER_COLUMNS)
    return validate(schemas.GPU_POWER_SCHEMA, frame, path)


def _external_types(names: list[str]) -> dict[str, pa.DataType]:
    return {"timestamp": _LOCAL_TIME} | {n: _FLOAT for n in names if _CHANNEL.match(n)}


def _external_frame(path: Path, table: pa.Table, timezone: str, unit: str) -> pd.DataFrame:
    factor = EXTERNAL_POWER_UNITS[unit]
    channels = [name for name in table.column_names if _CHANNEL.match(name)]
    _require(path, table, "timestamp", *(channels or ["d0c0"]))
    frame = _frame(
        path, _local_time(path, table, timezone), table, {c: (f"{c}_w", factor) for c in channels}
    )
    total = np.sum([frame[f"{c}_w"].to_numpy() for c in channels], axis=0)
    frame.insert(1, "external_power_w", total)
    return validate(schemas.EXTERNAL_POWER_SCHEMA, frame, path)


def _samples_types(names: list[str]) -> dict[str, pa.DataType]:
    return {"timestamp": pa.int64(), "value": _FLOAT}


def _samples_frame(path: Path, table: pa.Table) -> pd.DataFrame:
    _require(path, table, "timestamp", "value")
    if table["timestamp"].null_count:
        first = int(np.flatnonzero(table["timestamp"].is_null().to_numpy(zero_copy_only=False))[0])
        raise InputError(path, "missing timestamp", line=first + 2, field="timestamp")
    power = path.name == POWER_SAMPLES + SAMPLES_SUFFIX
    units = {"value": ("power_w", 1e-3) if power else ("value", 1.0)}
    frame = _frame(path, epoch_us_to_utc(table["timestamp"]), table, units)
    schema = schemas.POWER_SAMPLES_SCHEMA if power else schemas.SAMPLES_SCHEMA
    return validate(schema, frame, path)


def read_timestamps(path: Path, timezone: str = "UTC") -> pd.DataFrame:
    """``timestamps.csv`` -> ``time`` (UTC), ``event``, ``data`` (int).

    Raises IncompleteInputError while ``experiment_end`` is missing.
    """
    return _timestamps_frame(path, read_csv_table(path, _timestamps_types), timezone)


def read_gpu_power(path: Path, timezone: str = "UTC") -> pd.DataFrame:
    """``gpu-power.csv`` -> ``time`` (UTC), ``power_w``, ``total_energy_j`` ... (GPU_POWER_COLUMNS)."""
    return _gpu_power_frame(path, read_csv_table(path, _gpu_power_types), timezone)


def read_external_power(path: Path, timezone: str = "UTC", unit: str = "mW") -> pd.DataFrame:
    """``power-external.csv`` -> ``time`` (UTC), ``external_power_w`` (sum), ``d0c0_w`` ...

    ``unit`` is the unit the channels are written in: ``mW`` (the format
    document), ``cW`` (what the original analysis assumed) or ``W``.
    """
    return _external_frame(path, read_csv_table(path, _external_types), timezone, unit)


def read_samples(path: Path) -> pd.DataFrame:
    """``{type}_samples.csv`` -> ``time`` (UTC, from µs epoch) and ``value``.

    ``total_power_samples.csv`` (mW) gives ``power_w`` instead of ``value``.
    """
    return _samples_frame(path, read_csv_table(path, _samples_types))


def read_repetition(
    ref: RepetitionRef, *, timezone: str = "UTC", external_power_unit: str = "mW"
) -> Repetition:
    """Read and validate every file of one repetition.

    ``timestamps.csv`` and ``gpu-power.csv`` are required; the others are
    read when present. ``timezone`` is the IANA zone the naive timestamps
    were written in. Raises IncompleteInputError (before reading anything
    else) while ``experiment_end`` is missing.
    """
    check_timezone(timezone)
    if external_power_unit not in EXTERNAL_POWER_UNITS:
        raise ValueError(f"external power unit must be one of {sorted(EXTERNAL_POWER_UNITS)}")
    folder = ref.path
    if not (folder / TIMESTAMPS_FILE).is_file():
        raise IncompleteInputError(folder / TIMESTAMPS_FILE, "not written yet")
    gpu_power, external = folder / GPU_POWER_FILE, folder / EXTERNAL_POWER_FILE
    samples = sorted(folder.glob("*" + SAMPLES_SUFFIX))
    readers = {gpu_power: partial(read_gpu_power, timezone=timezone)}
    if external.is_file():
        readers[external] = partial(read_external_power, timezone=timezone, unit=external_power_unit)
    readers |= {path: read_samples for path in samples}
    # Each file is parsed (pyarrow, without the GIL) and its frame built in a
    # worker, so one file's frame is built while the others are parsed; the
    # largest file starts first, as it finishes last. Results are collected in
    # a fixed order so that the error raised (incomplete first) does not depend
    # on timing.
    present = sorted((path for path in readers if path.is_file()),
                     key=lambda path: -path.stat().st_size)
    with ThreadPoolExecutor(max_workers=len(readers)) as pool:
        futures = {path: pool.submit(readers[path], path) for path in present}
        timestamps = read_timestamps(folder / TIMESTAMPS_FILE, timezone)
        if gpu_power not in futures:
            raise InputError(gpu_power, "required file missing")
        frames = {path: futures[path].result() for path in readers if path in futures}
    info = folder / SYSTEM_INFO_FILE
    return Repetition(
        ref=ref,
        settings=parse_settings(ref.run, ref.experiment),
        timestamps=timestamps,
        gpu_power=frames[gpu_power],
        external_power=frames.get(external),
        samples={path.name.removesuffix(SAMPLES_SUFFIX): frames[path] for path in samples},
        system_info=read_system_info(info) if info.is_file() else None,
    )
