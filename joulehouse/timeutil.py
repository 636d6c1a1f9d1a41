"""Timestamps: naive local ISO strings and µs epochs to tz-aware UTC.

Every timestamp inside Joulehouse is a tz-aware UTC ``datetime64[ns, UTC]``.
The real writers produce naive local strings such as
``2020-11-16 13:49:17.123456`` (fraction left out when the microseconds are
zero) and UTC microseconds since the epoch; both are converted here,
vectorised (Arrow's ISO-8601 parser, no per-row Python, no format inference).
"""

from __future__ import annotations

from collections.abc import Sequence
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pytz.exceptions import InvalidTimeError  # what pandas 2 raises for skipped/ambiguous times

UTC = "UTC"


class TimestampError(ValueError):
    """Values that are not timestamps; ``positions`` are their 0-based rows."""

    def __init__(self, message: str, positions: Sequence[int]) -> None:
        super().__init__(message)
        self.positions = list(positions)


def check_timezone(timezone: str) -> str:
    """Return ``timezone`` if it is an IANA zone name pandas knows, else raise ValueError."""
    try:
        ZoneInfo(timezone)  # a zone name, not an offset such as "+01:00"
        pd.Timestamp(0).tz_localize(timezone)  # and in the rules pandas localises with
    except (ZoneInfoNotFoundError, ValueError, LookupError) as err:
        raise ValueError(f"unknown time zone {timezone!r}") from err
    return timezone


def parse_local_iso(
    values: pa.Array | pa.ChunkedArray | Sequence[str], timezone: str = UTC
) -> pd.DatetimeIndex:
    """Parse naive ISO timestamps meant in ``timezone`` into a UTC DatetimeIndex.

    Accepts ``YYYY-MM-DD hh:mm:ss`` with or without a fraction of a second
    (``T`` or space between date and time), or naive Arrow timestamps (as
    pyarrow's CSV reader already parsed them). Local times that a daylight
    saving change makes ambiguous are resolved from the order of the values
    (they must be sorted); unparsable values raise TimestampError naming
    their rows.
    """
    strings = values if isinstance(values, pa.Array | pa.ChunkedArray) else pa.array(values)
    try:
        naive = strings if pa.types.is_timestamp(strings.type) else pc.cast(
            strings, pa.timestamp("us"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        parsed = pd.to_datetime(
            pd.Series(strings.to_pylist(), dtype=object), format="ISO8601", errors="coerce"
        )
        bad = np.flatnonzero(parsed.isna().to_numpy())
        raise TimestampError(f"not an ISO timestamp: {err}", bad) from err
    if naive.null_count:
        bad = np.flatnonzero(pc.is_null(naive).to_numpy(zero_copy_only=False))
        raise TimestampError("missing timestamp", bad)
    index = pd.DatetimeIndex(naive.to_numpy(zero_copy_only=False).astype("datetime64[ns]"))
    return localize(index, timezone)


def localize(naive: pd.DatetimeIndex, timezone: str = UTC) -> pd.DatetimeIndex:
    """Read naive wall-clock times as ``timezone`` and convert them to UTC."""
    check_timezone(timezone)
    if timezone == UTC:
        return naive.tz_localize(UTC)
    try:
        offset = _one_offset(naive, timezone)
        if offset is not None:  # no clock change among them: one subtraction
            return (naive - offset).tz_localize(UTC)
        local = naive.tz_localize(timezone, ambiguous="infer", nonexistent="raise")
    except (ValueError, OverflowError, pd.errors.OutOfBoundsDatetime, InvalidTimeError) as err:
        raise TimestampError(f"local times not valid in {timezone}: {err}", []) from err
    return local.tz_convert(UTC)


#: Longest span of naive times that :func:`_one_offset` vouches for.
_ONE_OFFSET_SPAN = pd.Timedelta(days=1)
#: Fewer times than this: pandas localises them faster than the offsets are probed.
_ONE_OFFSET_MIN_TIMES = 4096


def _one_offset(naive: pd.DatetimeIndex, timezone: str) -> pd.Timedelta | None:
    """The zone's UTC offset if it is the same for every time in ``naive``, else None.

    pandas localises the earliest and latest time (at most a day apart) and
    every hour between, each read both ways a repeated hour can be read, in
    the zone as pandas resolves ``timezone`` (the same rules as its
    localisation of the whole index): a clock change in between changes the
    offset at the next hour, and a time that is ambiguous has two offsets and
    a skipped one none. Zones change their clocks months apart, never twice
    within an hour.
    """
    if len(naive) < _ONE_OFFSET_MIN_TIMES or naive.hasnans:
        return None
    first, last = naive.min(), naive.max()
    if last - first > _ONE_OFFSET_SPAN:
        return None
    hours = int((last - first) / pd.Timedelta(hours=1))
    points = [first + pd.Timedelta(hours=hour) for hour in range(hours + 1)] + [last]
    try:
        offsets = {point.tz_localize(timezone, ambiguous=summer, nonexistent="raise").utcoffset()
                   for point in points for summer in (True, False)}
    except InvalidTimeError:  # a skipped time: pandas' localisation refuses it
        return None
    return pd.Timedelta(offsets.pop()) if len(offsets) == 1 else None


def epoch_us_to_utc(values: pa.Array | pa.ChunkedArray | np.ndarray) -> pd.DatetimeIndex:
    """Microseconds since 1970-01-01 UTC to a UTC DatetimeIndex (ns)."""
    return epoch_ns_to_utc(np.multiply(np.asarray(values, dtype="int64"), 1000))  # one copy


def epoch_ns_to_utc(nanos: np.ndarray) -> pd.DatetimeIndex:
    """Nanoseconds (int64) since 1970-01-01 UTC to a UTC DatetimeIndex, viewing ``nanos``."""
    return pd.DatetimeIndex(nanos.view("datetime64[ns]"), copy=False).tz_localize(UTC)


def seconds_since(times: pd.Series | pd.DatetimeIndex, origin: pd.Timestamp) -> np.ndarray:
    """Float seconds from ``origin`` (both UTC); precise to the ns for spans of days."""
    ns = np.asarray(times.values, dtype="datetime64[ns]").view("int64")  # UTC, no copy if ns
    return (ns - pd.Timestamp(origin).as_unit("ns").value) / 1e9
