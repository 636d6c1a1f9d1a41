"""The day of a GEOPM report: the block of reports it is handed out in.

Reports are grouped per landing folder and UTC day of their own start
(``joulehouse.landing_days``, key ``<landing name>/<YYYY-MM-DD>``), read from the first
:data:`~.layout.HEAD_BYTES` the sensor reads anyway to tell a report
(:func:`day_of_head`): ``Start Time`` (1.x text and 2.x/3.x YAML reports: line 2, C's
asctime) or the earliest ``sample-time-first`` of a geopmsession report (ISO 8601 with
its offset); a time written without a zone is read in the source's ``timezone``, as
:func:`~.readers.read_report` reads it. A report whose head holds no start time that
parses (a broken report; a session report whose first document's ``sample-time-first``
lies beyond the head) is in the UTC day of its file's mtime (:func:`report_day`).
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

from joulehouse.errors import InputError
from joulehouse.geopm.layout import HEAD_BYTES
from joulehouse.geopm.readers import parse_start_time
from joulehouse.landing_days import StartDay, entry_day

_START = re.compile(rb"^(Start Time|sample-time-first):[ \t]*(.+?)[ \t]*\r?$", re.MULTILINE)


def day_of_head(head: bytes, path: Path, timezone: str) -> str | None:
    """The UTC day (``YYYY-MM-DD``) of the report whose first bytes are ``head``: its Start
    Time, or its earliest sample-time-first; None when none parses."""
    starts = []
    for match in _START.finditer(head):
        text = match.group(2).decode("utf-8", "replace").strip("'\"")
        try:
            start = parse_start_time(path, text, timezone)
        except InputError:
            continue
        if start is not None:
            starts.append(start)
    return f"{min(starts):%Y-%m-%d}" if starts else None


def report_start_day(path: Path, timezone: str) -> str | None:
    """The UTC day the report at ``path`` started (:func:`day_of_head` of its head), or
    None."""
    with open(path, "rb") as handle:
        return day_of_head(handle.read(HEAD_BYTES), path, timezone)


def start_day(timezone: str) -> StartDay:
    """The :data:`~joulehouse.landing_days.StartDay` of reports whose naive times are in
    ``timezone``."""
    return partial(report_start_day, timezone=timezone)


def report_day(path: Path, timezone: str) -> str:
    """The UTC day of the report at ``path``: its start's, else its file's mtime's."""
    return entry_day(path, start_day(timezone))
