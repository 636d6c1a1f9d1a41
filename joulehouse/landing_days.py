"""Entries of landing folders grouped per landing folder and UTC day: the blocks a source
hands them out in (GEOPM reports, TAU profile sets, PowerAPI report entries).

Key ``<landing name>/<YYYY-MM-DD>`` (:func:`day_key`): 1,000 entries a day are 3,650 days
in a decade, where one key per entry would be 3.65 M (docs/ARCHITECTURE.md, "Partitions
over a decade").

The day is the UTC date of the entry's own start, as its content says it (the source's
:data:`StartDay`, which reads a bounded head of one of its files): taken from the content,
not from when the entry landed, so landing everything again on a fresh instance gives
the same days. An entry with no start that can be read (a broken file; a start beyond
the head read) falls back to the UTC date of its newest file's mtime (:func:`entry_day`):
stable while its files are untouched, and such an entry fails its run anyway, in that
day, named with file and line. An entry that is fixed may so move to its start's day;
what is stored of it is kept per entry, whatever its day.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection
from datetime import UTC, datetime, timedelta
from pathlib import Path

from joulehouse.errors import InputError
from joulehouse.landing import Identify, LandedItem, find_landed

StartDay = Callable[[Path], "str | None"]
"""An entry's path -> the UTC day (``YYYY-MM-DD``) its content says it started, or None
when no start can be read there; may raise OSError (the entry unreadable, or gone)."""

#: How long before a day an entry of that day may have been written last (its newest
#: mtime), for :func:`entries_of_days` (an entry is written after it started; the margin
#: covers a time zone set wrong and clocks apart).
WRITTEN_BEFORE_MARGIN = timedelta(days=2)

_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def day_key(landing: str, day: str) -> str:
    """The partition key of ``day`` (``YYYY-MM-DD``) of landing folder ``landing``."""
    return f"{landing}/{day}"


def split_day_key(key: str) -> tuple[str, str]:
    """(landing name, ``YYYY-MM-DD``) of a day key; InputError naming the key when it is
    none (so only that partition fails)."""
    landing, _, day = key.rpartition("/")
    if not landing or not _DAY.fullmatch(day):
        raise InputError(key, "not a day key <landing name>/<YYYY-MM-DD>")
    return landing, day


def utc_day(seconds: float) -> str:
    """The UTC date (``YYYY-MM-DD``) of ``seconds`` since the epoch."""
    return f"{datetime.fromtimestamp(seconds, UTC):%Y-%m-%d}"


def lists_nothing(folder: str | os.PathLike[str], entry: str) -> InputError:
    """The error of a landing folder or data root read whole that lists nothing at all:
    an empty mount point (a file system not mounted) reads so, and its days must fail,
    naming it, rather than pass with no rows and forget the failures recorded of them."""
    return InputError(folder, f"lists no {entry} at all (a file system not mounted?): its "
                              "days are not read as empty")


def written_since(days: Collection[str]) -> float:
    """The earliest time (seconds since the epoch) an entry of any of ``days``
    (``YYYY-MM-DD``) may have been written last: the first day's start less
    :data:`WRITTEN_BEFORE_MARGIN`. An entry written before is none of theirs."""
    return (datetime.fromisoformat(min(days)).replace(tzinfo=UTC)
            - WRITTEN_BEFORE_MARGIN).timestamp()


def entry_day(path: Path, start_day: StartDay,
              mtime: float | Callable[[Path], float] | None = None) -> str:
    """The UTC day of the entry at ``path``: ``start_day(path)``; else (no start readable,
    or the entry unreadable now) the UTC day of ``mtime``, its newest file's mtime
    (seconds since the epoch, or a function of ``path`` giving it, called only then;
    default: ``path``'s own). OSError when the fallback cannot stat the entry (gone)."""
    try:
        day = start_day(path)
    except OSError:
        day = None
    if day is not None:
        return day
    if mtime is None:
        return utc_day(os.stat(path).st_mtime)
    return utc_day(mtime(path) if callable(mtime) else mtime)


def item_day_key(item: LandedItem, start_day: StartDay) -> str:
    """The day partition of a landed entry (:func:`entry_day` with its listed mtime, so an
    entry gone since it was listed is in the day of its last write, where its run names
    it)."""
    return day_key(item.landing, entry_day(item.path, start_day, item.mtime))


def entries_of_days(folder: str | os.PathLike[str], name: str, days: Collection[str],
                    identify: Identify, start_day: StartDay) -> dict[str, list[LandedItem]]:
    """Day -> every entry of the landing ``folder`` (named ``name``; entries as
    ``identify`` tells them) whose day it is, for each of ``days`` (``YYYY-MM-DD``), by key.

    One listing and one ``stat`` per file; an entry last written more than
    :data:`WRITTEN_BEFORE_MARGIN` before the earliest of ``days`` began is none of theirs:
    its start is not read (a file entry is not even identified); every other one's is,
    once; InputError (:func:`lists_nothing`) when the folder lists nothing. What a run
    over days with nothing handed out reads (a backfill, a materialization from the UI,
    the weekly re-validation)."""
    wanted = set(days)
    begins = written_since(wanted)

    listed: list[Path] = []

    def recent(path: Path) -> list[Path] | None:
        listed.append(path)
        if path.is_file() and path.stat().st_mtime < begins:
            return None
        return identify(path)

    found: dict[str, list[LandedItem]] = {day: [] for day in sorted(wanted)}
    for item in find_landed(folder, name, recent):
        if item.mtime >= begins:
            day = entry_day(item.path, start_day, item.mtime)
            if day in wanted:
                found[day].append(item)
    if not listed:
        raise lists_nothing(folder, "entry")
    return found
