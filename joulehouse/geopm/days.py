"""The day of a GEOPM report: the block of reports it is handed out in.

Reports are grouped per landing folder and UTC day, key ``<landing name>/<YYYY-MM-DD>``
(:func:`day_key`): 1,000 reports a day are 3,650 days in a decade, where one key per
report would be 3.65 M (docs/ARCHITECTURE.md, "Partitions over a decade").

The day is the UTC date of the report's own start, read from the first
:data:`~.layout.HEAD_BYTES` the sensor reads anyway to tell a report
(:func:`day_of_head`): ``Start Time`` (1.x text and 2.x/3.x YAML reports: line 2, C's
asctime) or the earliest ``sample-time-first`` of a geopmsession report (ISO 8601 with
its offset); a time written without a zone is read in the source's ``timezone``, as
:func:`~.readers.read_report` reads it. Taken from the content, not from when the report
landed, so landing everything again on a fresh instance gives the same days. A report
whose head holds no start time that parses (a broken report; a session report whose
first document's ``sample-time-first`` lies beyond the head) falls back to the UTC date
of its file's mtime (:func:`report_day`): stable while the file is untouched, and such a
report fails its run anyway, in that day, named with file and line. A report that is
fixed may so move to its start's day; its rows are kept per report, whatever its day.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from pathlib import Path

from joulehouse.errors import InputError
from joulehouse.geopm.layout import HEAD_BYTES, identify_report
from joulehouse.geopm.readers import parse_start_time
from joulehouse.landing import LandedItem, find_landed

_START = re.compile(rb"^(Start Time|sample-time-first):[ \t]*(.+?)[ \t]*\r?$", re.MULTILINE)
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")

#: How long before a day a report of that day may have been written last (its mtime),
#: for :func:`reports_of_day` (a report is written when its job ends, after its start;
#: the margin covers a ``timezone`` set wrong and clocks apart).
WRITTEN_BEFORE_MARGIN = timedelta(days=2)


def day_key(landing: str, day: str) -> str:
    """The partition key of ``day`` (``YYYY-MM-DD``) of landing folder ``landing``."""
    return f"{landing}/{day}"


def split_day_key(key: str) -> tuple[str, str]:
    """(landing name, ``YYYY-MM-DD``) of a day key; InputError naming the key when it is
    none (so only that partition fails)."""
    landing, _, day = key.rpartition("/")
    if not landing or not _DAY.fullmatch(day):
        raise InputError(key, "not a GEOPM day key <landing name>/<YYYY-MM-DD>")
    return landing, day


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


def report_day(path: Path, timezone: str) -> str:
    """The UTC day of the report at ``path``: :func:`day_of_head`, else its mtime's."""
    with open(path, "rb") as handle:
        head = handle.read(HEAD_BYTES)
    day = day_of_head(head, path, timezone)
    if day is not None:
        return day
    return f"{datetime.fromtimestamp(os.stat(path).st_mtime, UTC):%Y-%m-%d}"


def reports_of_days(folder: str | os.PathLike[str], name: str, days: Collection[str],
                    timezone: str) -> dict[str, list[LandedItem]]:
    """Day -> every report of the landing ``folder`` (named ``name``) whose day it is, for
    each of ``days`` (``YYYY-MM-DD``), by key.

    One listing and one ``stat`` per file; a file last written more than
    :data:`WRITTEN_BEFORE_MARGIN` before the earliest of ``days`` began is no report of
    them and is not opened; every other one has its head read once. What a run over days
    with nothing handed out reads (a backfill, a materialization from the UI)."""
    wanted = set(days)
    begins = datetime.fromisoformat(min(wanted)).replace(tzinfo=UTC) - WRITTEN_BEFORE_MARGIN
    day_of: dict[Path, str] = {}

    def of_days(path: Path) -> list[Path] | None:
        if not (path.is_file()
                and datetime.fromtimestamp(path.stat().st_mtime, UTC) >= begins
                and identify_report(path)):
            return None
        day_of[path] = report_day(path, timezone)
        return [path] if day_of[path] in wanted else None

    found: dict[str, list[LandedItem]] = {day: [] for day in sorted(wanted)}
    for item in find_landed(folder, name, of_days):
        found[day_of[item.path]].append(item)
    return found
