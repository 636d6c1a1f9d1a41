"""JSON report files as blocks of Arrow tables, streamed, with their line numbers.

PowerAPI writes JSON reports one per line (JSON lines, MongoDB exports), as
one array (``[...]``, mongoexport ``--jsonArray``), as ``{"reports": [...]}``
(PowerAPI's test files) or pretty-printed. Every form is parsed by Arrow's
JSON reader, a block of about ``block_bytes`` at a time from a memory map,
so a day of reports never sits in memory as Python objects:

- JSON lines go to Arrow as they are (no copy);
- any other form is rewritten per block into JSON lines by a vectorised scan
  (numpy: string and nesting depth per byte) that finds each report object.

A last report cut short (a file still being written) is left out and the
block says so (``complete`` False); ``end`` is the byte offset after the last
complete report, where a later read of the growing file starts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from joulehouse.errors import InputError

DEFAULT_BLOCK_BYTES = 32 << 20
#: Bytes that may follow the last report of a complete file: blanks, separators and the
#: closing brackets of an array or a wrapping object.
CLOSING = b" \t\r\n,]}"
_SAMPLE_BYTES = 1 << 18
_ROW = re.compile(r"in row (\d+)")
#: Arrow's type inference failing on valid JSON: a field of two JSON types in one block.
_TYPE_CHANGE = re.compile(r"Column\((/[^)]*)\) changed from (\w+) to (\w+) in row (\d+)")
_WRAPPER = re.compile(rb'^\s*\{\s*"[^"]*"\s*:\s*\[')
_OPEN, _CLOSE, _QUOTE, _BACKSLASH = (ord("{"), ord("[")), (ord("}"), ord("]")), 34, 92
_NEWLINE, _SPACE = 10, 32


@dataclass
class JsonBlock:
    """Reports of one block: ``table`` (one row per report), ``end`` and ``complete``.

    ``line(row)`` is the 1-based line where the row's report starts; it reads
    the file, so call it while the block's iterator is still open.
    """

    table: pa.Table
    end: int
    complete: bool
    locate: Callable[[int], int]

    def line(self, row: int) -> int:
        return self.locate(row)


def iter_json_blocks(path: Path, *, start: int = 0, stop: int | None = None,
                     block_bytes: int = DEFAULT_BLOCK_BYTES) -> Iterator[JsonBlock]:
    """Blocks of report objects from byte ``start`` on (0, or a previous block's ``end``),
    up to byte ``stop`` (None: the file's end; what follows is taken as not written yet)."""
    if path.stat().st_size == 0:
        raise InputError(path, "empty file")
    buffer = pa.memory_map(str(path)).read_buffer()  # zero-copy slices, paged in by the OS
    if stop is not None:
        buffer = buffer.slice(0, stop)
    data = np.frombuffer(buffer, dtype=np.uint8)
    head = bytes(data[start:start + 4096]).lstrip()
    if start == 0 and head[:1] not in (b"{", b"["):
        raise InputError(path, "not JSON: expected '[' or '{'", line=1)
    if start == 0 and (head[:1] == b"[" or _WRAPPER.match(head)):
        yield from _scanned(path, buffer, data, start, 1 if head[:1] == b"[" else 2, block_bytes)
    elif _one_object_per_line(data, start):
        yield from _lines(path, buffer, data, start, block_bytes)
    else:
        yield from _scanned(path, buffer, data, start, 0, block_bytes)


def find_line_end(data: np.ndarray, start: int, stop: int, backwards: bool = False) -> int:
    """Offset of the first (or last) line end in ``data[start:stop]``, -1 if none."""
    step = 1 << 16
    ranges = ((max(start, end - step), end) for end in range(stop, start, -step)) if backwards \
        else ((low, min(stop, low + step)) for low in range(start, stop, step))
    for low, high in ranges:
        window = bytes(data[low:high])
        found = window.rfind(b"\n") if backwards else window.find(b"\n")
        if found >= 0:
            return low + found
    return -1


def one_report_per_line(path: Path) -> bool:
    """Whether the file is JSON lines (its first line is one whole JSON object), so that it
    can be read on from any line end."""
    return _one_object_per_line(np.frombuffer(pa.memory_map(str(path)).read_buffer(),
                                              dtype=np.uint8), 0)


def _one_object_per_line(data: np.ndarray, start: int) -> bool:
    end = find_line_end(data, start, len(data))
    try:
        return isinstance(json.loads(bytes(data[start:end if end >= 0 else len(data)])), dict)
    except ValueError:
        return False


def _read(path: Path, buffer: pa.Buffer, locate: Callable[[int], int]) -> pa.Table:
    """Parse JSON lines; the types are inferred from a sample first (about twice as fast).

    Fields the sample lacks are still inferred; a value whose type differs
    from the sample's (an integer field holding a float later) makes Arrow
    infer the whole block again. Arrow infers one JSON type per field: a
    ``timestamp`` given as epoch milliseconds in some reports and as text in
    others (each form is read) is read with every one as text
    (:func:`_timestamps_as_text`); another field of two types is an InputError
    that says so, rather than "not valid JSON".
    """
    options = pj.ReadOptions(block_size=max(1 << 20, min(buffer.size + 1, 16 << 20)))
    try:
        if buffer.size > 2 * _SAMPLE_BYTES:
            sample = bytes(buffer[:_SAMPLE_BYTES])
            sample_end = sample.rfind(b"\n") + 1
            if sample_end:
                schema = pj.read_json(pa.BufferReader(buffer.slice(0, sample_end))).schema
                try:
                    return pj.read_json(pa.BufferReader(buffer), read_options=options,
                                        parse_options=pj.ParseOptions(
                                            explicit_schema=schema,
                                            unexpected_field_behavior="infer"))
                except pa.ArrowInvalid:
                    pass  # another type than the sample's, or bad JSON: infer everything
        return pj.read_json(pa.BufferReader(buffer), read_options=options)
    except pa.ArrowInvalid as err:
        changed = _TYPE_CHANGE.search(str(err))
        if changed and changed[1] == "/timestamp" and {changed[2], changed[3]} == {
                "number", "string"}:
            return _read(path, _timestamps_as_text(path, buffer, locate), locate)
        if changed:
            field = changed[1].strip("/").replace("/", ".")
            raise InputError(path, f"a {changed[3]} here where an earlier report has a "
                             f"{changed[2]}: valid JSON, but a field must keep one type in a "
                             "file (Arrow's type inference)", line=locate(int(changed[4])),
                             field=field) from None
        match = _ROW.search(str(err))
        line = locate(int(match[1])) if match else None
        raise InputError(path, f"not valid JSON: {str(err).splitlines()[0]}", line=line) from None


def _timestamps_as_text(path: Path, buffer: pa.Buffer, locate: Callable[[int], int]
                        ) -> pa.Buffer:
    """JSON lines with every numeric ``timestamp`` written as its digits in a string (the
    other fields as they were); one report a line, blank lines kept. A line that is not
    JSON is an InputError naming it (``locate``: the line of the row-th non-blank line).
    Python-speed: only for a block whose timestamps mix epoch milliseconds and text."""
    lines, row = [], 0
    for text in bytes(buffer).split(b"\n"):
        try:
            report = json.loads(text) if text.strip() else None
        except ValueError as err:
            raise InputError(path, f"not valid JSON: {err}", line=locate(row)) from None
        row += bool(text.strip())
        if isinstance(report, dict) and isinstance(report.get("timestamp"), int | float):
            value = report["timestamp"]
            report["timestamp"] = str(int(value)) if value == int(value) else repr(value)
            text = json.dumps(report).encode()
        lines.append(text)
    return pa.py_buffer(b"\n".join(lines))


def _lines(path: Path, buffer: pa.Buffer, data: np.ndarray, start: int, block_bytes: int):
    """JSON lines: blocks end at a line end; a last line that is not JSON yet is left out."""
    size = len(data)
    while start < size:
        stop = min(start + block_bytes, size)
        cut = find_line_end(data, start, stop, backwards=True) + 1 if stop < size else size
        if cut <= start:  # a line longer than a block
            cut = find_line_end(data, stop, size) + 1 or size
        complete = True
        if cut == size and data[size - 1] != _NEWLINE:
            last = find_line_end(data, start, size, backwards=True) + 1 or start
            try:
                json.loads(bytes(data[last:size]))
            except ValueError:
                complete, cut = False, last
        locate = _line_locator(data, start, cut)
        table = _read(path, buffer.slice(start, cut - start), locate) if cut > start else (
            pa.table({}))
        yield JsonBlock(table, cut, complete, locate)
        start = cut
        if not complete:
            return


def _line_locator(data: np.ndarray, start: int, cut: int) -> Callable[[int], int]:
    """Line of the row-th non-blank line of ``data[start:cut]`` (computed when asked)."""
    def locate(row: int) -> int:
        line = int(np.count_nonzero(data[:start] == _NEWLINE)) + 1
        lines = bytes(data[start:cut]).split(b"\n")
        filled = [offset for offset, text in enumerate(lines) if text.strip()]
        return line + filled[min(row, len(filled) - 1)] if filled else line
    return locate


def _scanned(path: Path, buffer: pa.Buffer, data: np.ndarray, start: int, depth: int,
             block_bytes: int):
    """Arrays, wrapped arrays and pretty-printed objects, rewritten to JSON lines per block."""
    size, line, initial = len(data), 1, 0
    while start < size:
        stop = min(start + block_bytes, size)
        chunk = data[start:stop]
        rewritten, starts, ends = _rewrite(chunk, depth, initial)
        if not len(ends) and stop < size:
            block_bytes *= 2
            continue
        cut = start + (int(ends[-1]) + 1 if len(ends) else 0)
        rest = bytes(data[cut:size]).strip(CLOSING) if stop == size else b""
        complete = not rest
        newlines = np.cumsum(chunk == _NEWLINE, dtype=np.int64)
        lines = line + newlines[starts] - (chunk[starts] == _NEWLINE)

        def locate(row: int, lines: np.ndarray = lines, line: int = line) -> int:
            return int(lines[min(row, len(lines) - 1)]) if len(lines) else line
        table = (_read(path, pa.py_buffer(rewritten)[: int(ends[-1]) + 2], locate)
                 if len(ends) else pa.table({}))
        yield JsonBlock(table, cut, complete, locate)
        line += int(newlines[cut - start - 1]) if cut > start else 0
        start, initial = cut, depth
        if stop == size or not complete:
            return


def _rewrite(chunk: np.ndarray, depth: int, initial: int):
    """(JSON lines bytes, start and end offsets) of the complete objects at ``depth`` in chunk.

    ``initial`` is the nesting depth before the chunk's first byte (0 at the
    file's start, ``depth`` between two objects). Outside those objects every
    byte becomes a space; inside, line ends become spaces; after each object
    comes a line end.
    """
    quote = chunk == _QUOTE
    backslashes = np.flatnonzero(chunk == _BACKSLASH)
    if len(backslashes):  # an escaped quote does not end a string
        escaped, skip = np.zeros(len(chunk), bool), -1
        for position in backslashes.tolist():
            if position != skip and position + 1 < len(chunk):
                escaped[position + 1], skip = True, position + 1
        quote &= ~escaped
    outside = (np.cumsum(quote, dtype=np.int32) & 1) == 0
    opens = outside & ((chunk == _OPEN[0]) | (chunk == _OPEN[1]))
    closes = outside & ((chunk == _CLOSE[0]) | (chunk == _CLOSE[1]))
    level = initial + np.cumsum(opens.astype(np.int32) - closes, dtype=np.int32)
    starts = np.flatnonzero(opens & (chunk == _OPEN[0]) & (level == depth + 1))
    ends = np.flatnonzero(closes & (chunk == _CLOSE[0]) & (level == depth))
    between = level <= depth
    between[ends] = False
    out = np.empty(len(chunk) + 1, dtype=np.uint8)
    out[:-1] = chunk
    out[:-1][between | (outside & ((chunk == _NEWLINE) | (chunk == 13)))] = _SPACE
    out[ends + 1] = _NEWLINE
    return out.tobytes(), starts[: len(ends)], ends
