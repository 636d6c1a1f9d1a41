"""Readers of PowerAPI reports into validated frames (schemas in :mod:`.schemas`).

- :func:`iter_hwpc` / :func:`read_hwpc`: HWPC reports (JSON in every form
  PowerAPI writes, hwpc-sensor CSV) as counters in long form, one row per
  (report, group, socket, cpu, event), streamed a block at a time;
- :func:`rapl_energy`: the RAPL rows of counters as J per tick and socket;
- :func:`read_power`: power reports (2.10.0 and main CSV, JSON, JSON lines,
  filedb) with ``power_w`` and their metadata.

Units are SI at the reader: RAPL values are in units of 2^-32 J (not µJ as
the documentation says) and each is the energy of its tick, not a running
total. Timestamps become tz-aware UTC: epoch milliseconds, ISO strings with
a zone, BSON dates (``{"$date": ...}``) as UTC; ISO strings without a zone
in ``timezone`` (default UTC). Bad input raises InputError naming the file,
the line and the field.
"""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
from pandas.api.types import union_categoricals

from joulehouse.errors import InputError
from joulehouse.powerapi import layout, schemas
from joulehouse.powerapi.jsonblocks import DEFAULT_BLOCK_BYTES, find_line_end, iter_json_blocks
from joulehouse.timeutil import TimestampError, check_timezone, epoch_ns_to_utc, localize
from joulehouse.validation import validate

#: One RAPL unit in J (hwpc-sensor reports RAPL energy in 2^-32 J).
RAPL_UNIT_J = 2.0**-32
RAPL_EVENT_PREFIX = "RAPL_ENERGY_"
#: Largest counter value a 64-bit hardware counter can hold; above is absurd.
MAX_COUNTER = 2.0**64
#: Power report metadata kept as columns; the rest goes to ``metadata`` as JSON.
POWER_METADATA = ("scope", "socket", "formula", "ratio")
_CATEGORIES = ("sensor", "target", "group", "event")


@dataclass
class HwpcBlock:
    """Counters of one block of a file; ``end``: byte offset after its last complete report."""

    counters: pd.DataFrame
    end: int
    complete: bool


@dataclass
class _Columns:
    """The counters of a block as arrays, before they become one frame (fewer copies)."""

    timestamp_ns: np.ndarray
    sensor: pd.Categorical
    target: pd.Categorical
    group: pd.Categorical
    socket: np.ndarray
    cpu: np.ndarray
    event: pd.Categorical
    value: np.ndarray


@dataclass
class _Cells:
    """The present (not NaN) cells of a reports x columns matrix, report by report.

    ``values[i]`` is in column ``columns[i]``; report ``r`` has ``counts[r]``
    cells, in column order. The order is that of the reports in the file, so
    the counters of a file do not depend on where its blocks are cut.
    """

    values: np.ndarray
    columns: np.ndarray
    counts: np.ndarray

    @classmethod
    def of(cls, matrix: np.ndarray) -> _Cells:
        present = ~np.isnan(matrix)
        flat = np.flatnonzero(present)
        return cls(matrix.reshape(-1)[flat], flat % max(matrix.shape[1], 1),
                   np.count_nonzero(present, axis=1))

    def per_report(self, array: np.ndarray) -> np.ndarray:
        """A value per report, repeated for each of its cells."""
        return np.repeat(array, self.counts)

    def report(self, cell: int) -> int:
        """The report of the cell-th value (0-based; error paths only)."""
        return int(np.searchsorted(np.cumsum(self.counts), cell, side="right"))


def read_hwpc(path: str | os.PathLike[str], *, timezone: str = "UTC",
              groups: Collection[str] | None = None) -> pd.DataFrame:
    """All counters of one HWPC file (JSON or CSV); a last report cut short is left out."""
    return read_hwpc_part(path, timezone=timezone, groups=groups)[0]


def read_hwpc_part(path: str | os.PathLike[str], *, timezone: str = "UTC",
                   groups: Collection[str] | None = None, start: int = 0,
                   stop: int | None = None) -> tuple[pd.DataFrame, int]:
    """The counters of the complete reports between bytes ``start`` (0, or the ``end`` of
    an earlier read) and ``stop`` (None: the file's end), and the byte after the last of
    them (``start`` when there is none), where the next read of a growing file starts."""
    parts, end = [], start
    for columns, end, _ in _iter_columns(Path(path), timezone, groups, start, stop,
                                         DEFAULT_BLOCK_BYTES):
        if columns is not None:
            parts.append(columns)
    return _frame(parts, path), end


def iter_hwpc(path: str | os.PathLike[str], *, timezone: str = "UTC",
              groups: Collection[str] | None = None, start: int = 0,
              block_bytes: int = DEFAULT_BLOCK_BYTES) -> Iterator[HwpcBlock]:
    """Counters block by block from byte ``start`` (a previous block's ``end``).

    ``groups``: the group names the sensor is configured with; another group
    is an InputError (None: any group). CSV files are one group each, named
    after the file (``rapl.csv`` or ``rapl``).
    """
    for columns, end, complete in _iter_columns(Path(path), timezone, groups, start, None,
                                                block_bytes):
        yield HwpcBlock(_frame([] if columns is None else [columns], path), end, complete)


def _iter_columns(path: Path, timezone: str, groups: Collection[str] | None, start: int,
                  stop: int | None, block_bytes: int
                  ) -> Iterator[tuple[_Columns | None, int, bool]]:
    check_timezone(timezone)
    item = layout.classify(path)
    if item.kind != layout.HWPC:
        raise InputError(path, f"not HWPC reports ({item.kind} {item.encoding}) {item.reason}")
    if item.encoding == layout.CSV:
        yield from _iter_hwpc_csv(path, timezone, groups, start, stop, block_bytes)
        return
    for block in iter_json_blocks(path, start=start, stop=stop, block_bytes=block_bytes):
        columns = _counters_from_json(path, block, timezone, groups) if (
            block.table.num_rows) else None
        yield columns, block.end, block.complete


def concat_counters(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Counters frames one after the other, categories merged (not turned to object); one
    frame is returned as it is (already validated, not copied)."""
    if len(frames) == 1:
        return frames[0]
    return _frame([_Columns(frame["timestamp"].values.view("int64"), *(
        frame[name].array if name in _CATEGORIES else frame[name].to_numpy()
        for name in schemas.COUNTERS_COLUMNS[1:])) for frame in frames])


def _frame(parts: list[_Columns], source: str | Path = "counters") -> pd.DataFrame:
    """One validated counters frame; a single part's arrays are its columns (not copied again)."""
    parts = [part for part in parts if len(part.value)]

    def joined(name: str, dtype: str) -> np.ndarray:
        arrays = [getattr(part, name) for part in parts]
        if len(arrays) < 2:
            return arrays[0] if arrays else np.empty(0, dtype)
        return np.concatenate(arrays)

    def category(name: str) -> pd.Categorical:
        values = [getattr(part, name) for part in parts]
        if len(values) < 2:
            return values[0] if values else pd.Categorical([])
        return union_categoricals(values)

    frame = pd.DataFrame({
        "timestamp": epoch_ns_to_utc(joined("timestamp_ns", "int64")),
        **{name: category(name) for name in ("sensor", "target", "group")},
        "socket": joined("socket", "int64"),
        "cpu": joined("cpu", "int64"),
        "event": category("event"),
        "value": joined("value", "float64"),
    }, copy=False)
    return validate(schemas.COUNTERS_SCHEMA, frame, source)


# --- timestamps ---------------------------------------------------------------------------


def utc_timestamps(path: Path, column: pa.ChunkedArray | pa.Array, timezone: str, locate,
                   epoch_zone: str | None = None) -> pd.DatetimeIndex:
    """A timestamp column in any known form as UTC; ``locate(row)`` gives a row's line.

    Integers (or integral floats) are epoch ms; ``{"$date": ...}`` is a BSON
    date (ISO with zone, epoch ms, or ``{"$numberLong": "..."}``); strings
    with a zone are read as such, strings without one in ``timezone``.
    ``epoch_zone``: the zone of the machine where PowerAPI 2.10.0 wrote epoch
    ms (it shifts them by that zone's offset); None when they are true UTC.
    """
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if column.null_count:
        raise InputError(path, "missing timestamp", line=locate(_first(pc.is_null(column))),
                         field="timestamp")
    kind = column.type
    if pa.types.is_struct(kind):
        names = [kind.field(i).name for i in range(kind.num_fields)]
        if names in (["$date"], ["$numberLong"]):
            return utc_timestamps(path, column.field(0), "UTC", locate, epoch_zone)
        raise InputError(path, f"a timestamp object with fields {names}", line=locate(0),
                         field="timestamp")
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        millis = column.to_numpy(zero_copy_only=False)
        if pa.types.is_floating(kind) and not np.all(millis == np.round(millis)):
            raise InputError(path, "epoch milliseconds with a fraction", field="timestamp",
                             line=locate(_first(millis != np.round(millis))))
        times = epoch_ns_to_utc(np.asarray(millis, dtype="int64") * 1_000_000)
        if epoch_zone is not None:  # PowerAPI 2.10.0 wrote local wall time as if it were UTC
            times = localize(times.tz_convert(epoch_zone).tz_localize(None), "UTC")
        return times
    if pa.types.is_timestamp(kind):  # Arrow parsed ISO strings without a fraction
        naive = pd.DatetimeIndex(column.to_numpy(zero_copy_only=False).astype("datetime64[ns]"))
        return _localize(path, naive, timezone, locate) if kind.tz is None else naive.tz_localize(
            "UTC")
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return _iso(path, column, timezone, locate, epoch_zone)
    raise InputError(path, f"timestamps of type {kind}", line=locate(0), field="timestamp")


def _iso(path: Path, strings: pa.Array, timezone: str, locate,
         epoch_zone: str | None) -> pd.DatetimeIndex:
    """Text timestamps: ISO strings, or digits (epoch ms), or both in one column (a file
    whose reports mix the forms: each part read as it would be alone)."""
    digits = pc.match_substring_regex(strings, r"^\d+$")
    if pc.all(digits).as_py():
        return utc_timestamps(path, pc.cast(strings, pa.int64()), timezone, locate, epoch_zone)
    if pc.any(digits).as_py():
        rows = np.flatnonzero(digits.to_numpy(zero_copy_only=False))
        others = np.flatnonzero(~digits.to_numpy(zero_copy_only=False))
        times = np.empty(len(strings), dtype="int64")
        times[rows] = _iso(path, strings.take(rows), timezone,
                           lambda row: locate(int(rows[row])), epoch_zone).asi8
        times[others] = _iso(path, strings.take(others), timezone,
                             lambda row: locate(int(others[row])), epoch_zone).asi8
        return epoch_ns_to_utc(times)
    zoned = pc.match_substring_regex(strings, r"(Z|[+-]\d\d:?\d\d)$")
    if pc.any(zoned).as_py() and not pc.all(zoned).as_py():
        raise InputError(path, "timestamps with and without a time zone in one file",
                         line=locate(_first(pc.invert(zoned))), field="timestamp")
    target = pa.timestamp("ns", "UTC") if pc.all(zoned).as_py() else pa.timestamp("ns")
    try:
        parsed = pc.cast(strings, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        bad = [row for row, value in enumerate(strings.to_pylist()) if not _is_iso(value, target)]
        raise InputError(path, f"not a timestamp in a known form: {strings[bad[0]].as_py()!r}",
                         line=locate(bad[0]), field="timestamp") from None
    naive = pd.DatetimeIndex(parsed.to_numpy(zero_copy_only=False).astype("datetime64[ns]"))
    return naive.tz_localize("UTC") if target.tz else _localize(path, naive, timezone, locate)


def _is_iso(value: str, target: pa.DataType) -> bool:
    try:
        pc.cast(pa.array([value]), target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


def _localize(path: Path, naive: pd.DatetimeIndex, timezone: str, locate) -> pd.DatetimeIndex:
    try:
        return localize(naive, timezone)
    except TimestampError as err:
        row = err.positions[0] if err.positions else 0
        raise InputError(path, str(err), line=locate(row), field="timestamp") from None


def _first(mask) -> int:
    values = mask.to_numpy(zero_copy_only=False) if hasattr(mask, "to_numpy") else mask
    return int(np.flatnonzero(np.asarray(values, dtype=bool))[0])


# --- HWPC JSON ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Leaf:
    group: str
    socket: int
    cpu: int
    event: str
    values: pa.Array  # integers or floats, null where a report lacks it

    @property
    def field(self) -> str:
        return f"groups.{self.group}.{self.socket}.{self.cpu}.{self.event}"


def _counters_from_json(path: Path, block, timezone: str,
                        groups: Collection[str] | None) -> _Columns | None:
    table = block.table
    for name in ("timestamp", "sensor", "target", "groups"):
        if name not in table.column_names:
            raise InputError(path, "report without this field", line=block.line(0), field=name)
        if table[name].null_count:
            raise InputError(path, "report without this field", field=name,
                             line=block.line(_first(pc.is_null(table[name]))))
    times = utc_timestamps(path, table["timestamp"], timezone, block.line)
    leaves = _leaves(path, table["groups"].combine_chunks(), block.line, groups)
    count = table.num_rows
    if not leaves:
        return None
    matrix = np.empty((count, len(leaves)))  # one row per report, NaN where a leaf is absent
    for column, leaf in enumerate(leaves):
        matrix[:, column] = leaf.values.to_numpy(zero_copy_only=False)
    cells = _Cells.of(matrix)
    columns = cells.columns
    _check_values(path, cells, _is_rapl([leaf.event for leaf in leaves]),
                  lambda i: leaves[columns[i]].field, block.line)
    return _counters_frame(path, times, table, cells, block.line, {
        "group": _leaf_codes(leaves, "group", columns),
        "socket": np.array([leaf.socket for leaf in leaves])[columns],
        "cpu": np.array([leaf.cpu for leaf in leaves])[columns],
        "event": _leaf_codes(leaves, "event", columns),
    })


def _leaves(path: Path, groups_array: pa.StructArray, locate,
            allowed: Collection[str] | None) -> list[_Leaf]:
    """Every (group, socket, cpu, event) column of a block's ``groups`` struct."""
    if not pa.types.is_struct(groups_array.type):
        raise InputError(path, f"groups is {groups_array.type}, not an object", line=locate(0),
                         field="groups")
    leaves = []
    for group, sockets in _children(path, groups_array, "groups", locate):
        if allowed is not None and group not in allowed:
            raise InputError(path, f"unknown group {group!r} (known: {sorted(allowed)})",
                             line=locate(_first(pc.is_valid(sockets))), field=f"groups.{group}")
        for socket, cpus in _children(path, sockets, f"groups.{group}", locate):
            for cpu, events in _children(path, cpus, f"groups.{group}.{socket}", locate):
                for event, values in _children(path, events, f"groups.{group}.{socket}.{cpu}",
                                               locate):
                    field = f"groups.{group}.{socket}.{cpu}.{event}"
                    if pa.types.is_null(values.type):
                        continue
                    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
                        raise InputError(path, f"counter value is {values.type}, not a number",
                                         line=locate(_first(pc.is_valid(values))), field=field)
                    leaves.append(_Leaf(group, _id(path, socket, field, locate),
                                        _id(path, cpu, field, locate), event,
                                        values))
    return leaves


def _children(path: Path, array: pa.Array, field: str, locate):
    """(name, child array) of a struct array, the parent's nulls carried into each child."""
    if not pa.types.is_struct(array.type):
        raise InputError(path, f"expected an object, found {array.type}",
                         line=locate(_first(pc.is_valid(array))), field=field)
    children = array.flatten()
    return [(array.type.field(i).name, children[i]) for i in range(array.type.num_fields)]


def _id(path: Path, text: str, field: str, locate) -> int:
    if not text.isdigit():
        raise InputError(path, f"socket and cpu ids are numbers, not {text!r}", line=locate(0),
                         field=field)
    return int(text)


def _leaf_codes(leaves: list[_Leaf], name: str, columns: np.ndarray) -> pd.Categorical:
    labels = [getattr(leaf, name) for leaf in leaves]
    categories = sorted(set(labels))
    codes = np.array([categories.index(label) for label in labels], dtype="int32")
    return pd.Categorical.from_codes(codes[columns], categories, validate=False)


def _check_values(path: Path, cells: _Cells, is_rapl: np.ndarray, field_of, locate) -> None:
    """Counters are finite, not negative and fit a 64-bit counter; a value in a RAPL column
    (``is_rapl``, per column) is at most ``schemas.MAX_RAPL_TICK_J`` in one tick.

    ``field_of(i)``: the field of the i-th value, for the error only.
    """
    values = cells.values
    if len(values) and not (values.min() >= 0 and values.max() < MAX_COUNTER):
        first = int(np.flatnonzero(~((values >= 0) & (values < MAX_COUNTER)))[0])
        what = "negative" if values[first] < 0 else "absurd (not a 64-bit counter)"
        raise InputError(path, f"{what} counter value {float(values[first])!r}",
                         line=locate(cells.report(first)), field=field_of(first))
    # x * 2^-32 > limit exactly when x > limit * 2^-32 (a power of two scales exactly)
    large = np.flatnonzero(values > schemas.MAX_RAPL_TICK_J / RAPL_UNIT_J)
    absurd = large[is_rapl[cells.columns[large]]]
    if len(absurd):
        first = int(absurd[0])
        raise InputError(path, f"absurd RAPL value {values[first]:.17g} "
                         f"({values[first] * RAPL_UNIT_J:.6g} J in one tick, more than "
                         f"{schemas.MAX_RAPL_TICK_J:g} J)",
                         line=locate(cells.report(first)), field=field_of(first))


def _is_rapl(events: list[str]) -> np.ndarray:
    """Per event name: a RAPL energy event."""
    return np.array([event.startswith(RAPL_EVENT_PREFIX) for event in events], dtype=bool)


def _categorical(path: Path, column: pa.ChunkedArray | pa.Array, cells: _Cells, locate,
                 is_target: bool = False) -> pd.Categorical:
    """A string column (one value per report), repeated for each of the report's cells, as a
    pandas Categorical (one pass in Arrow)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_string(column.type):
        raise InputError(path, f"{column.type}, not text", line=locate(0),
                         field="target" if is_target else "sensor")
    encoded = pc.dictionary_encode(column)
    categories = encoded.dictionary.to_pylist()
    if is_target:
        for code, target in enumerate(categories):
            if not layout.is_inside(target):
                layout.check_target(path, target, locate(_first(
                    encoded.indices.to_numpy(zero_copy_only=False) == code)))
    codes = cells.per_report(encoded.indices.to_numpy(zero_copy_only=False))
    return pd.Categorical.from_codes(codes, categories, validate=False)


def _counters_frame(path: Path, times: pd.DatetimeIndex, table: pa.Table, cells: _Cells,
                    locate, parts: dict) -> _Columns:
    """The block's columns: time, sensor and target per report, ``parts`` per cell."""
    return _Columns(
        timestamp_ns=cells.per_report(times.asi8),
        sensor=_categorical(path, table["sensor"], cells, locate),
        target=_categorical(path, table["target"], cells, locate, is_target=True),
        group=parts["group"], socket=parts["socket"], cpu=parts["cpu"], event=parts["event"],
        value=cells.values,
    )


# --- HWPC CSV -----------------------------------------------------------------------------


def _iter_hwpc_csv(path: Path, timezone: str, groups: Collection[str] | None, start: int,
                   stop: int | None, block_bytes: int
                   ) -> Iterator[tuple[_Columns | None, int, bool]]:
    """hwpc-sensor CSV, one group per file, parsed by pyarrow a block of lines at a time.

    Blocks are zero-copy slices of a memory map ending at a line end; a last
    line cut short (no line end, fields missing) is left out. Nothing before
    ``start`` but the header is read (line numbers are counted only for an error).
    """
    group = layout.csv_group(path)
    if groups is not None and group not in groups:
        raise InputError(path, f"unknown group {group!r} (known: {sorted(groups)})")
    buffer, data = _mapped(path, stop)
    header, end = _csv_extent(path, data)
    missing = [name for name in layout.HWPC_CSV_COLUMNS if name not in header]
    if missing:
        raise InputError(path, "missing column", line=1, field=missing[0])
    events = [name for name in header if name not in layout.HWPC_CSV_COLUMNS]
    if len(set(header)) != len(header):
        raise InputError(path, "a column appears twice", line=1)
    types = {"timestamp": pa.string(), "sensor": pa.string(), "target": pa.string(),
             "socket": pa.int64(), "cpu": pa.int64(), **dict.fromkeys(events, pa.float64())}
    start = max(start, _after_header(data))
    if start >= end:  # no complete line after the header (yet)
        yield None, start, end == len(data)
    while start < end:
        limit = min(start + block_bytes, end)
        cut = find_line_end(data, start, limit, backwards=True) + 1 if limit < end else end
        if cut <= start:
            cut = find_line_end(data, limit, end) + 1 or end
        yield (_csv_counters(path, buffer.slice(start, cut - start), header, types, events,
                             group, _line_of(data, start), timezone), cut, cut == len(data))
        start = cut


def _mapped(path: Path, stop: int | None) -> tuple[pa.Buffer, np.ndarray]:
    """The file memory-mapped up to byte ``stop`` (None: whole), as a buffer and as bytes."""
    buffer = pa.memory_map(str(path)).read_buffer()
    if stop is not None:
        buffer = buffer.slice(0, stop)
    return buffer, np.frombuffer(buffer, dtype=np.uint8)


def _after_header(data: np.ndarray) -> int:
    """The offset after a CSV file's header line (its end when it has no line end)."""
    end = find_line_end(data, 0, len(data))
    return end + 1 if end >= 0 else len(data)


def _line_of(data: np.ndarray, offset: int) -> Callable[[], int]:
    """The 1-based line starting at ``offset``, counted when asked (error paths only)."""
    return lambda: int(np.count_nonzero(data[:offset] == 10)) + 1


def _csv_counters(path: Path, chunk: pa.Buffer, header: list[str], types: dict, events: list[str],
                  group: str, first_line: Callable[[], int], timezone: str) -> _Columns:
    """Counters of a block of CSV lines (no header; its first line is ``first_line()``)."""
    try:
        table = pcsv.read_csv(pa.BufferReader(chunk), read_options=pcsv.ReadOptions(
            column_names=header, block_size=max(1 << 20, min(chunk.size + 1, 16 << 20))),
            convert_options=pcsv.ConvertOptions(column_types=types))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise _csv_error(path, chunk, header, first_line, err) from None

    def locate(row: int) -> int:
        return first_line() + row

    times = utc_timestamps(path, table["timestamp"], timezone, locate)
    matrix = np.column_stack([table[name].to_numpy() for name in events]) if events else (
        np.empty((table.num_rows, 0)))
    cells = _Cells.of(matrix)
    columns = cells.columns
    _check_values(path, cells, _is_rapl(events), lambda i: events[columns[i]], locate)
    return _counters_frame(path, times, table, cells, locate, {
        "group": pd.Categorical.from_codes(np.zeros(len(columns), "int8"), [group],
                                           validate=False),
        "socket": cells.per_report(table["socket"].to_numpy()),
        "cpu": cells.per_report(table["cpu"].to_numpy()),
        "event": pd.Categorical.from_codes(columns, events, validate=False),
    })


def _csv_error(path: Path, chunk: pa.Buffer, header: list[str], line_of: Callable[[], int],
               err: Exception) -> InputError:
    """The line and field pyarrow refused (error path only: line by line)."""
    first_line = line_of()
    for offset, text in enumerate(chunk.to_pybytes().decode("utf-8", "replace").splitlines()):
        fields = text.split(",")
        if len(fields) != len(header):
            return InputError(path, f"{len(fields)} fields where the header has {len(header)}",
                              line=first_line + offset)
        for name, value in zip(header, fields, strict=True):
            if name not in ("sensor", "target") and not _is_number(value):
                return InputError(path, f"not a number: {value!r}", line=first_line + offset,
                                  field=name)
    return InputError(path, f"not a readable CSV file: {err}", line=first_line)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _csv_extent(path: Path, data: np.ndarray | bytes) -> tuple[list[str], int]:
    """The header and the end of the last complete line (a line cut short is left out)."""
    data = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
    size = len(data)
    if not size or not bytes(data[:4096]).strip():
        raise InputError(path, "empty file")
    header_end = find_line_end(data, 0, size)
    header_end = size if header_end < 0 else header_end
    header = bytes(data[:header_end]).decode("utf-8", "replace").strip().split(",")
    if data[size - 1] == 10:
        return header, size
    last = find_line_end(data, 0, size, backwards=True) + 1
    tail = bytes(data[last:])
    complete = tail.count(b",") == len(header) - 1 and not tail.rstrip().endswith(b",")
    return header, size if complete else last


# --- RAPL ---------------------------------------------------------------------------------


def rapl_energy(counters: pd.DataFrame) -> pd.DataFrame:
    """RAPL energy per tick and socket in J from counters (any group with RAPL_ENERGY_ events).

    One cpu entry per socket and report: the lowest cpu id if a sensor
    reported several. ``domain`` is the lower-case event suffix (``pkg``,
    ``dram``, ``psys``, ...).
    """
    events = counters["event"]
    is_rapl = np.asarray(events.cat.categories.str.startswith(RAPL_EVENT_PREFIX), dtype=bool)
    rapl = counters.take(np.flatnonzero(is_rapl[events.cat.codes.to_numpy()]) if len(is_rapl)
                         else [])
    rapl = rapl.sort_values(["timestamp", "sensor", "target", "socket", "event", "cpu"],
                            kind="stable")
    rapl = rapl.drop_duplicates(["timestamp", "sensor", "target", "socket", "event"])

    def text(column: pd.Series, label=str) -> np.ndarray:
        """A categorical column as an object array of str, each category converted once."""
        labels = np.array([label(value) for value in column.cat.categories] + [None], object)
        return labels[column.cat.codes.to_numpy()]

    frame = pd.DataFrame({
        "timestamp": epoch_ns_to_utc(rapl["timestamp"].values.view("int64")),
        "sensor": text(rapl["sensor"]),
        "target": text(rapl["target"]),
        "socket": rapl["socket"].to_numpy(),
        "cpu": rapl["cpu"].to_numpy(),
        "domain": text(rapl["event"], lambda event: event.removeprefix(RAPL_EVENT_PREFIX).lower()),
        "energy_j": rapl["value"].to_numpy() * RAPL_UNIT_J,
    })
    return validate(schemas.RAPL_SCHEMA, frame, "rapl_energy")


# --- power reports ------------------------------------------------------------------------


def read_power(path: str | os.PathLike[str], *, timezone: str = "UTC",
               epoch_zone: str | None = None) -> pd.DataFrame:
    """Power reports of one file, any form PowerAPI writes, as POWER_SCHEMA's frame.

    ``epoch_zone``: see :func:`utc_timestamps` (PowerAPI 2.10.0's epoch ms
    written on a machine not set to UTC).
    """
    return read_power_part(path, timezone=timezone, epoch_zone=epoch_zone)[0]


def read_power_part(path: str | os.PathLike[str], *, timezone: str = "UTC",
                    epoch_zone: str | None = None, start: int = 0, stop: int | None = None
                    ) -> tuple[pd.DataFrame, int]:
    """The power reports between bytes ``start`` and ``stop`` (as :func:`read_hwpc_part`;
    CSV and JSON lines only from a ``start`` other than 0) and the byte after the last."""
    path = Path(path)
    check_timezone(timezone)
    item = layout.classify(path)
    if item.kind != layout.POWER:
        raise InputError(path, f"not power reports ({item.kind} {item.encoding}) {item.reason}")
    if item.encoding == layout.CSV:
        frame, end = _power_csv(path, timezone, epoch_zone, start, stop)
    elif item.encoding == layout.FILEDB:
        frame, end = _power_filedb(path, epoch_zone), path.stat().st_size
    else:
        parts, end = [], start
        for block in iter_json_blocks(path, start=start, stop=stop):
            end = block.end
            if block.table.num_rows:
                parts.append(_power_json(path, block, timezone, epoch_zone))
        frame = pd.concat(parts, ignore_index=True) if parts else _power_frame(
            path, pa.table({n: pa.array([], pa.string()) for n in ("sensor", "target")}),
            pd.DatetimeIndex([], tz="UTC"), np.empty(0), {}, lambda row: row + 1)
    return validate(schemas.POWER_SCHEMA, frame, path), end


def _power_csv(path: Path, timezone: str, epoch_zone: str | None, start: int,
               stop: int | None) -> tuple[pd.DataFrame, int]:
    buffer, data = _mapped(path, stop)
    header, end = _csv_extent(path, data)
    start = max(start, _after_header(data))
    types = {name: pa.string() for name in header}
    types["power"] = pa.float64()
    try:
        table = pcsv.read_csv(pa.BufferReader(buffer.slice(start, end - start)),
                              read_options=pcsv.ReadOptions(column_names=header),
                              convert_options=pcsv.ConvertOptions(column_types=types)
                              ) if end > start else pa.table(
            {name: pa.array([], kind) for name, kind in types.items()})
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise InputError(path, f"not a readable power report CSV file: {err}") from None
    line_of = _line_of(data, start)

    def locate(row: int) -> int:
        return line_of() + row

    times = utc_timestamps(path, table["timestamp"], timezone, locate, epoch_zone)
    metadata = {name: table[name].combine_chunks() for name in header
                if name not in layout.POWER_CSV_COLUMNS}
    if path.name == layout.POWER_REPORT_CSV:
        for sensor, target in set(zip(table["sensor"].to_pylist(), table["target"].to_pylist(),
                                      strict=True)):
            layout.check_target(path, target, 2)
            layout.check_power_report_folder(path, sensor, target)
    frame = _power_frame(path, table, times, table["power"].to_numpy(), metadata, locate)
    return frame, max(end, start)


def _power_filedb(path: Path, epoch_zone: str | None) -> pd.DataFrame:
    """PowerAPI's filedb output: a Python repr ``{'PowerReport': [{...}, ...]}``."""
    try:
        reports = ast.literal_eval(path.read_text())["PowerReport"]
    except (ValueError, SyntaxError, KeyError, TypeError) as err:
        raise InputError(path, f"not filedb output: {err}", line=1) from None
    table = pa.Table.from_pylist(reports)
    return _power_json(path, _Block(table), "UTC", epoch_zone)


@dataclass
class _Block:
    table: pa.Table

    @staticmethod
    def line(row: int) -> int:
        return 1


def _power_json(path: Path, block, timezone: str, epoch_zone: str | None) -> pd.DataFrame:
    table = block.table
    for name in ("timestamp", "sensor", "target", "power"):
        if name not in table.column_names or table[name].null_count:
            row = 0 if name not in table.column_names else _first(pc.is_null(table[name]))
            raise InputError(path, "report without this field", line=block.line(row), field=name)
    if not (pa.types.is_integer(table["power"].type) or pa.types.is_floating(table["power"].type)):
        raise InputError(path, f"power is {table['power'].type}, not a number",
                         line=block.line(0), field="power")
    times = utc_timestamps(path, table["timestamp"], timezone, block.line, epoch_zone)
    metadata = {}
    if "metadata" in table.column_names:
        meta = table["metadata"].combine_chunks()
        if pa.types.is_struct(meta.type):
            children = meta.flatten()
            metadata = {meta.type.field(i).name: children[i] for i in range(meta.type.num_fields)}
    return _power_frame(path, table, times, table["power"].to_numpy().astype("float64"),
                        metadata, block.line)


def _power_frame(path: Path, table: pa.Table, times: pd.DatetimeIndex, power: np.ndarray,
                 metadata: dict[str, pa.Array], locate) -> pd.DataFrame:
    count = len(power)
    bad = ~(power >= 0)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(path, f"negative or missing power {float(power[row])}", line=locate(row),
                         field="power")
    targets = table["target"].to_pylist()
    for row, target in enumerate(targets):
        if not isinstance(target, str):
            raise InputError(path, f"target is {target!r}, not text", line=locate(row),
                             field="target")
    for target in set(targets):
        if not layout.is_inside(target):
            layout.check_target(path, target, locate(targets.index(target)))

    def text(name: str) -> np.ndarray:
        if name not in metadata:
            return np.full(count, None, dtype=object)
        return np.array([None if v is None else str(v) for v in metadata[name].to_pylist()],
                        dtype=object)

    socket = pd.array(np.full(count, None, dtype=object), dtype="Int64")
    if "socket" in metadata:
        socket = pd.array(pc.cast(metadata["socket"], pa.int64()).to_pylist(), dtype="Int64")
    ratio = np.full(count, np.nan)
    if "ratio" in metadata:
        ratio = pc.cast(metadata["ratio"], pa.float64()).to_numpy(zero_copy_only=False)
    rest = [name for name in metadata if name not in POWER_METADATA]
    extra = [json.dumps({name: metadata[name][row].as_py() for name in rest}, sort_keys=True,
                        default=str) for row in range(count)] if rest else ["{}"] * count
    return pd.DataFrame({
        "timestamp": times,
        "sensor": np.array(table["sensor"].to_pylist(), dtype=object),
        "target": np.array(targets, dtype=object),
        "power_w": power,
        "scope": text("scope"),
        "socket": socket,
        "formula": text("formula"),
        "ratio": ratio,
        "metadata": np.array(extra, dtype=object),
    })
