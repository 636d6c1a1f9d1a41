"""The day of a GPU benchmark repetition: the block of repetitions it is handed out in.

Repetitions are grouped per data root and UTC day of their own start
(``joulehouse.landing_days``, key ``<root name>/<YYYY-MM-DD>``): the ``experiment_begin``
event of the repetition's ``timestamps.csv`` (seed 000: the writer's first event; a naive
local time, read in the data root's ``timezone`` as ``readers.read_timestamps`` reads it),
found in the file's first :data:`HEAD_BYTES`. A repetition whose head holds no
``experiment_begin`` that parses (a broken file) is in the UTC day of its newest file's
mtime (``landing_days.entry_day``), where its run names it with file and line.

A data root's tree holds every day: :func:`repetitions_of_days` reads the repetitions of
given days (what a run over a day none of its hand-outs names reads).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from functools import partial
from pathlib import Path

from joulehouse.errors import InputError
from joulehouse.gpu.layout import TIMESTAMPS_FILE, find_repetitions, is_complete
from joulehouse.landing_days import StartDay, day_key, entry_day, lists_nothing, written_since
from joulehouse.timeutil import TimestampError, parse_local_iso

#: Bytes of ``timestamps.csv`` read for its ``experiment_begin`` (its first event: line 2).
HEAD_BYTES = 4096
BEGIN_EVENT = "experiment_begin"


def day_of_head(head: bytes, timezone: str) -> str | None:
    """The UTC day (``YYYY-MM-DD``) of the earliest ``experiment_begin`` among the complete
    lines of ``head`` (the first bytes of a ``timestamps.csv``: ``index,timestamp,event,
    data``, the header first), read in ``timezone``; None when none parses."""
    lines = head.split(b"\n")
    if len(head) == HEAD_BYTES:
        lines = lines[:-1]  # the last line may be cut
    columns = lines[0].decode("utf-8", "replace").strip().split(",") if lines else []
    if "timestamp" not in columns or "event" not in columns:
        return None
    at, event = columns.index("timestamp"), columns.index("event")
    begins = []
    for line in lines[1:]:
        fields = line.decode("utf-8", "replace").strip().split(",")
        if len(fields) > max(at, event) and fields[event].strip() == BEGIN_EVENT:
            begins.append(fields[at].strip())
    try:
        starts = parse_local_iso(begins, timezone) if begins else None
    except TimestampError:
        return None
    return None if starts is None else f"{starts.min():%Y-%m-%d}"


def repetition_start_day(path: Path, timezone: str) -> str | None:
    """The UTC day the repetition folder ``path`` started (:func:`day_of_head` of its
    ``timestamps.csv``), or None; OSError when it has no ``timestamps.csv``."""
    with open(path / TIMESTAMPS_FILE, "rb") as handle:
        return day_of_head(handle.read(HEAD_BYTES), timezone)


def start_day(timezone: str) -> StartDay:
    """The :data:`~joulehouse.landing_days.StartDay` of repetitions whose naive times are in
    ``timezone``."""
    return partial(repetition_start_day, timezone=timezone)


def newest_mtime(path: Path) -> float:
    """The newest mtime (seconds since the epoch) of the files of repetition folder
    ``path``, or the folder's own when it holds none."""
    with os.scandir(path) as entries:
        times = [entry.stat().st_mtime for entry in entries if entry.is_file()]
    return max(times, default=os.stat(path).st_mtime)


def repetition_day(path: Path, timezone: str) -> str:
    """The UTC day of the repetition folder ``path``: its start's (one head read), else
    its newest file's mtime's (a listing and a stat per file, only then); OSError when
    the folder is gone."""
    return entry_day(path, start_day(timezone), newest_mtime)


def repetition_day_key(root_name: str, path: Path, timezone: str) -> str:
    """The day partition key (``<root name>/<YYYY-MM-DD>``) of the repetition folder
    ``path`` of data root ``root_name`` (:func:`repetition_day`); OSError when it is gone."""
    return day_key(root_name, repetition_day(path, timezone))


def repetitions_of_days(data_root: str | os.PathLike[str], days: Collection[str],
                        timezone: str) -> dict[str, list[str]]:
    """Day -> the keys (``experiment/benchmark/run/repetition``) of every complete
    repetition of ``data_root`` whose day it is, for each of ``days`` (``YYYY-MM-DD``).

    One listing of the tree, one ``stat`` per file; a repetition last written more than
    :data:`~joulehouse.landing_days.WRITTEN_BEFORE_MARGIN` before the earliest of ``days``
    began is none of theirs, unread; every other complete one's head is read once. A
    folder that vanishes during the walk (removed, or renamed hidden) is skipped;
    InputError when the root itself cannot be listed, or lists no repetition at all
    (``landing_days.lists_nothing``)."""
    wanted = set(days)
    begins = written_since(wanted)
    found: dict[str, list[str]] = {day: [] for day in sorted(wanted)}
    try:
        refs = find_repetitions(data_root)
    except OSError as err:
        raise InputError(data_root, f"cannot be listed ({err})") from err
    if not refs:
        raise lists_nothing(data_root, "repetition")
    for ref in refs:
        try:
            mtime = newest_mtime(ref.path)
        except OSError:  # removed since the listing
            continue
        if mtime < begins or not is_complete(ref.path):
            continue
        day = entry_day(ref.path, start_day(timezone), mtime)
        if day in wanted:
            found[day].append(ref.key)
    return found
