"""The day of a PowerAPI report entry: the block it is handed out in.

Entries (a report file, or a folder of them: ``joulehouse.powerapi.landing``) are grouped
per landing folder and UTC day of their first report (``joulehouse.landing_days``, key
``<landing name>/<YYYY-MM-DD>``), read from the first :data:`~.layout.HEAD_BYTES` of each
of the entry's report files, the bytes the landing scan reads to tell a report file
(:func:`file_start`): the earliest ``timestamp`` there, in every form the readers take
(epoch milliseconds, ISO with or without a zone, BSON dates, CSV digits), each as the
readers read it (``readers.utc_timestamps``: a zone-less ISO time in the source's
``timezone``; a power report's epoch milliseconds in ``epoch_zone``, PowerAPI 2.10.0's
local wall time). A value cut by the head's end is not read. A growing file only appends,
so its head, and its day, stay those of the day it started. An entry whose heads hold no
timestamp that parses (a broken file) is in the UTC day of its newest file's mtime
(``landing_days.entry_day``).
"""

from __future__ import annotations

import csv
import json
import re
from functools import partial
from pathlib import Path

import pandas as pd
import pyarrow as pa

from joulehouse.errors import InputError
from joulehouse.landing_days import StartDay
from joulehouse.powerapi import layout
from joulehouse.powerapi.readers import utc_timestamps

#: A JSON ``timestamp`` field and its whole value (a number, a string, or a BSON date
#: object one level deep), followed by what ends it (so that a value cut by the head's
#: end is not taken).
_JSON_TIMESTAMP = re.compile(
    rb'"timestamp"\s*:\s*(-?\d+(?:\.\d+)?|"[^"\\]*"|\{[^{}]*(?:\{[^{}]*\}[^{}]*)?\})(?=\s*[,}\]])')
#: A filedb report's (a Python repr) ``'timestamp'`` and its number or string value.
_REPR_TIMESTAMP = re.compile(rb"'timestamp'\s*:\s*(\d+|'[^'\\]*')(?=\s*[,}])")


def head_timestamps(head: bytes, encoding: str) -> list[object]:
    """The ``timestamp`` values whole in ``head`` (the first bytes of a report file of
    ``encoding``), as JSON would give them: ints, strings or BSON date objects."""
    if encoding == layout.JSON:
        values = []
        for match in _JSON_TIMESTAMP.finditer(head):
            try:
                values.append(json.loads(match.group(1)))
            except ValueError:
                continue
        return values
    if encoding == layout.FILEDB:
        return [int(value) if value[:1].isdigit() else value.decode("utf-8", "replace")[1:-1]
                for value in (m.group(1) for m in _REPR_TIMESTAMP.finditer(head))]
    if encoding == layout.CSV:
        rows = csv.reader(head.decode("utf-8", "replace").splitlines())
        header = next(rows, [])
        if "timestamp" not in header:
            return []
        column = header.index("timestamp")
        # a row cut by the head's end before its next field has no whole timestamp
        return [row[column] for row in rows if len(row) > column + 1 and row[column]]
    return []


def first_time(path: Path, values: list[object], timezone: str, epoch_zone: str | None
               ) -> pd.Timestamp | None:
    """The earliest of ``values`` (:func:`head_timestamps`) as UTC, each form read apart as
    the readers read it (``readers.utc_timestamps``); None when none parses."""
    groups: dict[str, list[object]] = {}
    for value in values:
        kind = ("digits" if isinstance(value, str) and value.isdigit() else
                type(value).__name__)
        groups.setdefault(kind, []).append(value)
    times = []
    for group in groups.values():
        try:
            parsed = utc_timestamps(path, pa.array(group), timezone, lambda row: None,
                                    epoch_zone)
        except (InputError, pa.ArrowException, ValueError, TypeError, OverflowError):
            continue
        times += [time for time in parsed if not pd.isna(time)]
    return min(times) if times else None


def file_start(path: Path, timezone: str, epoch_zone: str | None) -> pd.Timestamp | None:
    """The earliest report time in the head of the report file at ``path`` (UTC), or None
    (no report file, or no timestamp that parses there). HWPC reports' epoch milliseconds
    are true UTC (the readers apply ``epoch_zone`` to power reports only)."""
    with open(path, "rb") as handle:
        head = handle.read(layout.HEAD_BYTES)
    try:
        item = layout.classify_head(path, head)
    except InputError:
        return None
    if item.kind == layout.OTHER:
        return None
    return first_time(path, head_timestamps(head, item.encoding), timezone,
                      epoch_zone if item.kind == layout.POWER else None)


def entry_start_day(entry: Path, timezone: str, epoch_zone: str | None) -> str | None:
    """The UTC day (``YYYY-MM-DD``) of the earliest report time in the heads of the report
    entry at ``entry`` (a file, or each file of a folder), or None when none is there."""
    starts = [start for path in layout.report_paths(entry)
              if (start := file_start(path, timezone, epoch_zone)) is not None]
    return f"{min(starts):%Y-%m-%d}" if starts else None


def start_day(timezone: str, epoch_zone: str | None) -> StartDay:
    """The :data:`~joulehouse.landing_days.StartDay` of report entries whose zone-less ISO
    times are in ``timezone`` and whose power reports' epoch milliseconds in ``epoch_zone``
    (None: true UTC)."""
    return partial(entry_start_day, timezone=timezone, epoch_zone=epoch_zone)
