"""Growing report files read on from where the last read ended, stored as pieces.

A landed entry (one report file, or a folder of them) may keep growing: a
live hwpc-sensor or SmartWatts appends reports to its JSON-lines or CSV
files for days. Each read of an entry (:func:`read_new`) reads every
line-based file (JSON lines, MongoDB exports one report a line, CSV) from
the byte where its complete reports ended last time to its last complete
report, and :class:`ReportStore` stores what it found as a new *piece* of
the partition, beside the earlier ones: a stored piece is never rewritten,
and the partition's frames are all its pieces together.

How far each file was read is kept in the warehouse with the pieces (table
``<frames table>/progress``, one partition per entry; ``PROGRESS_SCHEMA``):
the byte after the last line end read (``read_to_byte``; a file read whole:
its size), the length of a last report read after it without a line end
(``tail_bytes``), a fingerprint of the bytes read (``prefix_digest``: their
length and their first and last 64 KiB; the middle of a prefix is not read
again), and whether it was read as line-based (``line_based``). The next
read checks the fingerprint first. A file truncated, rotated or rewritten (a
prefix that changed, or a file shorter than what was read), a file that is
not line-based (a JSON array, pretty-printed JSON, filedb) and changed, a
file line-based now and not when read (a JSON-lines file first seen inside
its first line, which is no JSON object yet), a last line read without a
line end that went on (see below), or a file gone makes the whole entry be
read again as a new *generation*, whose first piece replaces every earlier
piece (those stay on disk, unread). A rewrite that keeps the length, the
first and the last 64 KiB of the prefix read and changes only its middle is
not detected.

Where a read stops: while a file is still being written (changed within the
quiet period), at its last line end, since a last line without one may be
cut inside a value (a CSV number looks whole); once the file is quiet, the
readers' own rule (a last report cut short is left out, a whole one is read
even without a line end, so a writer that stopped there loses no report).
Such a last line is still not read past: ``read_to_byte`` stays at its
start and ``tail_bytes`` says it was read. If the file goes on with a line
end there, the next read starts after that line end; if it goes on with
anything else, the line was cut (``...,6028271`` of ``...,6028271234`` reads
as whole) and the entry is read whole again as a new generation, so no
value read from a cut line survives and no report is stored twice.

What the entry's files leave out as they are now (a last report cut short in a
quiet file, ``joulehouse/leftout.py``) is stored at each read in the table
``left_out``, partition ``powerapi/read/<key>``, in place of earlier records: a
file with a cut last report is never unchanged (it goes on after ``end``), so
each read reads its tail again and says it again, and once the report is
completed (or the file is still being written) it says nothing.

Reads of one partition must not run at once (two would store the same
reports twice): the Dagster step that calls this holds PowerAPI's pool
``joulehouse_tables_powerapi`` (limit 1), and reads at most what is new.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from joulehouse.leftout import store_left_out
from joulehouse.powerapi import layout, readers, schemas
from joulehouse.powerapi.energy import FACTS_SOURCE
from joulehouse.powerapi.jsonblocks import find_line_end, one_report_per_line
from joulehouse.powerapi.reports import Reports, combine, read_part
from joulehouse.validation import empty_frame, validate
from joulehouse.warehouse import Warehouse

#: The table (folder) of the stored frames, one sub-table per frame.
FRAMES_TABLE = "powerapi_validated_frames"
#: The frames stored per piece, by name, with their schemas.
FRAME_SCHEMAS = {"counters": schemas.COUNTERS_SCHEMA, "rapl_energy": schemas.RAPL_SCHEMA,
                 "power_reports": schemas.POWER_SCHEMA}
#: Bytes at each end of a prefix that its fingerprint reads.
DIGEST_SAMPLE_BYTES = 64 << 10


@dataclass(frozen=True)
class FileRead:
    """How far one file of an entry was read: ``read_to_byte`` (a line-based file: the byte
    after the last line end read; one read whole: its size), ``tail_bytes`` (a last report
    read after it without a line end, in a quiet file; 0: none), ``prefix_digest`` (of
    the bytes before :attr:`end`), and whether it was read as line-based (``line_based``;
    None: not known, progress stored before this was kept, so the entry is read whole
    again once)."""

    read_to_byte: int
    prefix_digest: str
    line_based: bool | None
    tail_bytes: int

    @property
    def end(self) -> int:
        """The byte after everything read: ``read_to_byte + tail_bytes``."""
        return self.read_to_byte + self.tail_bytes


@dataclass(frozen=True)
class Progress:
    """What is stored of one entry: its ``generation`` (0 at the first read, one more at
    each whole re-read), how many ``pieces`` that generation has, and how far each report
    file was read, by name relative to the entry's folder (``files``)."""

    generation: int
    pieces: int
    files: dict[str, FileRead] = field(default_factory=dict)

    def piece_keys(self, key: str) -> list[str]:
        """The stored pieces of partition ``key`` (warehouse partition keys)."""
        return [piece_key(key, self.generation, index) for index in range(self.pieces)]

    def frame(self) -> pd.DataFrame:
        """As stored: one ``PROGRESS_SCHEMA`` row per file."""
        names = sorted(self.files)
        return validate(schemas.PROGRESS_SCHEMA, pd.DataFrame({
            "file": pd.Series(names, dtype=object),
            "read_to_byte": pd.Series([self.files[n].read_to_byte for n in names],
                                      dtype="int64"),
            "prefix_digest": pd.Series([self.files[n].prefix_digest for n in names],
                                       dtype=object),
            "line_based": pd.Series([self.files[n].line_based for n in names], dtype=bool),
            "tail_bytes": pd.Series([self.files[n].tail_bytes for n in names], dtype="int64"),
            "generation": pd.Series([self.generation] * len(names), dtype="int64"),
            "pieces": pd.Series([self.pieces] * len(names), dtype="int64"),
        }), "progress")

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> Progress:
        """Back from :meth:`frame`'s rows (at least one)."""
        if "line_based" not in frame:  # stored before it was kept: read whole again once
            frame = frame.assign(line_based=None, tail_bytes=0)
        return cls(int(frame["generation"].iloc[0]), int(frame["pieces"].iloc[0]), {
            row.file: FileRead(int(row.read_to_byte), row.prefix_digest,
                               None if row.line_based is None else bool(row.line_based),
                               int(row.tail_bytes))
            for row in frame.itertuples()})


@dataclass
class Piece:
    """What one read of an entry found: the new ``reports``, the entry's ``progress`` after
    it, and whether it read the whole entry again (``whole``: a new generation)."""

    reports: Reports
    progress: Progress
    whole: bool

    @cached_property
    def frames(self) -> dict[str, pd.DataFrame]:
        """The frames stored per piece (``FRAME_SCHEMAS``), empty where it has none."""
        counters = self.reports.counters if self.reports.counters is not None else (
            readers.concat_counters([]))
        power = self.reports.power if self.reports.power is not None else empty_frame(
            schemas.POWER_SCHEMA)
        return {"counters": counters, "rapl_energy": readers.rapl_energy(counters),
                "power_reports": power}

    def is_new(self) -> bool:
        """Whether it is stored as a piece: the first of a generation, or new reports."""
        return self.whole or any(len(frame) for frame in self.frames.values())


def piece_key(key: str, generation: int, index: int) -> str:
    """The warehouse partition key of piece ``index`` of ``generation`` of partition ``key``."""
    return f"{key}@{generation}.{index}"


def prefix_digest(path: Path, end: int) -> str:
    """A fingerprint of the first ``end`` bytes of ``path``: their length and their first and
    last :data:`DIGEST_SAMPLE_BYTES` (the middle is not read)."""
    digest = hashlib.blake2b(str(end).encode(), digest_size=16)
    with path.open("rb") as file:
        digest.update(file.read(min(end, DIGEST_SAMPLE_BYTES)))
        tail = max(DIGEST_SAMPLE_BYTES, end - DIGEST_SAMPLE_BYTES)
        if tail < end:
            file.seek(tail)
            digest.update(file.read(end - tail))
    return digest.hexdigest()


def is_line_based(item: layout.ReportFile) -> bool:
    """Whether a report file can be read on from any line end: CSV, or JSON lines."""
    return item.encoding == layout.CSV or (
        item.encoding == layout.JSON and one_report_per_line(item.path))


def last_line_end(path: Path, start: int, stop: int | None = None) -> int:
    """The byte after the last line end between bytes ``start`` and ``stop`` (None: the
    file's end); ``start`` if none."""
    data = np.frombuffer(pa.memory_map(str(path)).read_buffer(), dtype=np.uint8)
    return find_line_end(data, start, len(data) if stop is None else stop,
                         backwards=True) + 1 or start


def after_tail(path: Path, end: int) -> int | None:
    """Where a file whose last line was read without a line end (``end``: the byte after
    it) is read on: after the line end that now follows it. None when the line went on
    instead: it was cut, maybe inside a number (``...,6028271`` of ``...,6028271234``)
    that read as whole, so the entry must be read whole again."""
    with path.open("rb") as file:
        file.seek(end)
        after = file.read(2)
    for line_end in (b"\n", b"\r\n"):
        if after.startswith(line_end):
            return end + len(line_end)
    return None


def read_new(entry: Path, previous: Progress | None, *, now: float, quiet_s: float,
             timezone: str = "UTC", epoch_zone: str | None = None) -> Piece:
    """The reports of ``entry`` not read yet (after ``previous``; None: never read).

    A file changed less than ``quiet_s`` seconds before ``now`` is still being
    written and is read to its last line end only; an empty one is not read yet. Raises the readers'
    InputError for bad content (nothing is stored then: the caller stores the piece).
    """
    files = {item.path.relative_to(entry.parent).as_posix(): item for item in (
        layout.classify(path) for path in layout.report_paths(entry)
        if path.stat().st_size)  # an empty file is not written yet
        if item.kind != layout.OTHER}
    line_based = {name: is_line_based(item) for name, item in files.items()}
    starts = None if previous is None else _starts(files, line_based, previous)
    whole = starts is None
    if whole:
        starts = dict.fromkeys(files, 0)
    parts, reads = [], {}
    for name, item in files.items():
        start = starts.get(name)
        if start is None:  # unchanged: nothing new
            reads[name] = previous.files[name]
            continue
        stat = item.path.stat()
        quiet = now - max(stat.st_mtime, stat.st_ctime) >= quiet_s
        stop = None if quiet or not line_based[name] else last_line_end(item.path, start)
        end = start
        if stop is None or stop > start:
            reports, end = read_part(item, timezone=timezone, epoch_zone=epoch_zone,
                                     start=start, stop=stop)
            if not quiet:  # still being written: a last report cut short is read later
                reports.left_out = []
            parts.append(reports)
        if not line_based[name]:  # read whole; changed at all, it is read whole again
            reads[name] = FileRead(stat.st_size, prefix_digest(item.path, stat.st_size),
                                   False, 0)
            continue
        line_end = last_line_end(item.path, start, end)  # before a last report without one
        reads[name] = FileRead(line_end, prefix_digest(item.path, end), True, end - line_end)
    reports = combine(parts)
    if whole:
        progress = Progress(0 if previous is None else previous.generation + 1, 1, reads)
        return Piece(reports, progress, True)
    piece = Piece(reports, Progress(previous.generation, previous.pieces, reads), False)
    if piece.is_new():
        piece.progress = Progress(previous.generation, previous.pieces + 1, reads)
    return piece


def _starts(files: dict[str, layout.ReportFile], line_based: dict[str, bool],
            previous: Progress) -> dict[str, int | None] | None:
    """Where to read each file on from (None: unchanged), or None when the entry must be
    read whole again (a file gone, cut, rewritten, changed and not line-based, line-based
    now and not when read: a JSON-lines file first seen inside its first line, or a last
    line read without a line end that went on: :func:`after_tail`)."""
    if set(previous.files) - set(files):
        return None
    starts: dict[str, int | None] = {}
    for name, item in files.items():
        before = previous.files.get(name)
        if before is None:
            starts[name] = 0  # a new file of the entry
            continue
        size = item.path.stat().st_size
        if size < before.end or before.line_based != line_based[name] or (
                prefix_digest(item.path, before.end) != before.prefix_digest):
            return None
        if size == before.end:
            starts[name] = None  # unchanged: nothing new
        elif not line_based[name]:
            return None
        elif before.tail_bytes:
            starts[name] = after_tail(item.path, before.end)
            if starts[name] is None:
                return None
        else:
            starts[name] = before.read_to_byte
    return starts


class ReportStore:
    """The stored pieces of every entry, and how far each entry was read, in a warehouse."""

    def __init__(self, tables: Warehouse, table: str = FRAMES_TABLE) -> None:
        self.tables = tables
        self.table = table

    def _progress_table(self) -> str:
        return f"{self.table}/progress"

    def stored_keys(self) -> list[str]:
        """The partitions with something stored, sorted."""
        return self.tables.partition_keys(self._progress_table())

    def progress(self, key: str) -> Progress | None:
        """How far partition ``key`` was read (None: never stored)."""
        try:
            frame = self.tables.read_partitions(self._progress_table(), [key])
        except FileNotFoundError:
            return None
        return Progress.from_frame(frame)

    def read(self, name: str, keys: list[str],
             progress: dict[str, Progress] | None = None) -> pd.DataFrame:
        """The stored frame ``name`` (``FRAME_SCHEMAS``) of every piece of ``keys`` (stored
        ones) together, as stored (not validated again); ``progress``: theirs, where already
        read (:meth:`progress`)."""
        progress = progress or {key: self.progress(key) for key in keys}
        pieces = [piece for key in keys for piece in progress[key].piece_keys(key)]
        return self.tables.read_partitions(f"{self.table}/{name}", pieces) if pieces else (
            pd.DataFrame())

    def append(self, key: str, piece: Piece, now: float) -> dict[str, pd.DataFrame]:
        """Store ``piece`` (its frames as a new piece when :meth:`Piece.is_new`) and what it
        left out (recorded at ``now``, epoch s), then the progress: a failure before that
        leaves the frames stored as they were. Returns the
        frames stored (empty ones when the piece held nothing new). An entry with no file
        read (all still empty) stores nothing: what was stored before stays."""
        frames = piece.frames
        if not piece.progress.files:
            return frames
        if piece.is_new():
            stored = piece_key(key, piece.progress.generation, piece.progress.pieces - 1)
            for name, frame in frames.items():
                self.tables.write_partition(f"{self.table}/{name}", stored, frame)
        store_left_out(self.tables, FACTS_SOURCE, "read", key, piece.reports.left_out,
                       now=pd.Timestamp(now, unit="s", tz="UTC"))
        self.tables.write_partition(self._progress_table(), key, piece.progress.frame())
        return frames

    def ingest(self, key: str, entry: Path, *, now: float, quiet_s: float,
               timezone: str = "UTC", epoch_zone: str | None = None) -> Piece:
        """Read what is new in ``entry`` (:func:`read_new`) and store it as partition ``key``."""
        piece = read_new(entry, self.progress(key), now=now, quiet_s=quiet_s,
                         timezone=timezone, epoch_zone=epoch_zone)
        self.append(key, piece, now)
        return piece
