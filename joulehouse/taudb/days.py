"""The day of a TAU profile set: the block of sets it is handed out in.

Sets are grouped per landing folder and UTC day of their own start
(``joulehouse.landing_days``, key ``<landing name>/<YYYY-MM-DD>``). TAU writes in every
profile's metadata ``Starting Timestamp``: when it began measuring that thread, in
microseconds since the epoch (the peer sets, 2009-2021, all have it; rank 0's
1351719366421416 of ``tau2_taudbc_openmp_2threads`` is its ``Local Time``
2012-10-31T14:36:06-07:00). The day of a set is that of its first thread (least node,
context, thread), read from the first :data:`HEAD_BYTES` of ONE file, never the whole
set (:func:`profile_set_start_day`):

- a folder of text profiles: the first thread's profile (of the first ``MULTI__``
  folder holding one, in name order), whose line 2 holds the metadata; TAU's runtime
  writes it sorted by name, so ``Starting Timestamp`` follows ``Command Line``, ``CWD``,
  ``Executable`` and the like (0.8-2.8 KiB into the peer profiles);
- a ``.ppk``: the trial's attributes, else its first thread's, in the metadata header
  the file starts with (``ppk.read_ppk_attributes``: 0.9-1.3 KiB into the peer files,
  decompressed).

A set whose head holds no ``Starting Timestamp`` that is a date (a profile cut or
broken, one written without it, a ``.ppk`` of format 1) is in the UTC day of its newest
file's mtime (``landing_days.entry_day``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from joulehouse.errors import InputError
from joulehouse.taudb.ppk import read_ppk_attributes
from joulehouse.taudb.profiles import identify_profile_set

#: Bytes read of one file of a set (a ``.ppk``: at most as many, decompressed).
HEAD_BYTES = 64 * 1024
STARTING_TIMESTAMP = "Starting Timestamp"

_STARTING = re.compile(rb"<name>\s*Starting Timestamp\s*</name>\s*<value>\s*(\d+)\s*</value>")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def timestamp_day(microseconds: str | bytes) -> str | None:
    """The UTC day (``YYYY-MM-DD``) of a TAU timestamp (microseconds since the epoch, as
    text), or None when it is no date."""
    try:
        return f"{_EPOCH + timedelta(microseconds=int(microseconds)):%Y-%m-%d}"
    except (ValueError, OverflowError):
        return None


def profile_set_start_day(path: Path) -> str | None:
    """The UTC day the profile set at ``path`` started (its first thread's ``Starting
    Timestamp``, from the head of one file), or None when none is there."""
    profile_set = identify_profile_set(path)
    if profile_set is None:
        return None
    kind, layout = profile_set
    if kind == "ppk":
        try:
            value = read_ppk_attributes(path, HEAD_BYTES).get(STARTING_TIMESTAMP)
        except InputError:
            return None
        return None if value is None else timestamp_day(value.strip())
    first = next(profile for _, files in layout for profile in files.values())
    with open(first, "rb") as handle:
        match = _STARTING.search(handle.read(HEAD_BYTES))
    return None if match is None else timestamp_day(match.group(1))
