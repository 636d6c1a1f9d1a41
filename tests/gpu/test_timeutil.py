"""Naive local ISO timestamps and µs epochs to UTC."""

import pandas as pd
import pytest
from pytz.exceptions import InvalidTimeError

from joulehouse import timeutil
from joulehouse.timeutil import (
    TimestampError,
    check_timezone,
    epoch_us_to_utc,
    localize,
    parse_local_iso,
)

#: Times enough for localize to probe the offsets rather than hand them to pandas.
ENOUGH_FOR_THE_SHORTCUT = timeutil._ONE_OFFSET_MIN_TIMES


def test_fraction_may_be_missing_when_microseconds_are_zero():
    parsed = parse_local_iso(["2020-11-16 13:49:17", "2020-11-16 13:49:17.123456"])
    assert list(parsed) == [
        pd.Timestamp("2020-11-16 13:49:17", tz="UTC"),
        pd.Timestamp("2020-11-16 13:49:17.123456", tz="UTC"),
    ]
    assert str(parsed.dtype) == "datetime64[ns, UTC]"


def test_local_zone_converted_to_utc_in_winter_and_summer():
    parsed = parse_local_iso(["2020-11-16 13:49:17", "2020-07-01 12:00:00.5"], "Europe/Berlin")
    assert parsed[0] == pd.Timestamp("2020-11-16 12:49:17", tz="UTC")  # CET, +1 h
    assert parsed[1] == pd.Timestamp("2020-07-01 10:00:00.5", tz="UTC")  # CEST, +2 h


def test_ambiguous_hour_at_end_of_daylight_saving_resolved_from_order():
    local = ["2020-10-25 02:30:00", "2020-10-25 02:59:00", "2020-10-25 02:10:00",
             "2020-10-25 02:40:00"]
    parsed = parse_local_iso(local, "Europe/Berlin")
    assert list(parsed.strftime("%H:%M")) == ["00:30", "00:59", "01:10", "01:40"]


def test_a_time_the_clock_skipped_is_refused():
    with pytest.raises(TimestampError, match="not valid in Europe/Berlin"):
        parse_local_iso(["2020-03-29 01:59:00", "2020-03-29 02:30:00"], "Europe/Berlin")


def test_bad_values_are_named_by_row():
    with pytest.raises(TimestampError) as caught:
        parse_local_iso(["2020-11-16 13:49:17", "yesterday", "2020-11-16 13:49:18"])
    assert caught.value.positions == [1]


def test_unknown_zone_rejected():
    for name in ("Mars/Olympus", "localtime", "+01:00", ""):  # no zone pandas localises with
        with pytest.raises(ValueError, match="unknown time zone"):
            check_timezone(name)
    assert check_timezone("America/New_York") == "America/New_York"


def test_epoch_microseconds_are_utc():
    parsed = epoch_us_to_utc([1605530957123456])
    assert parsed[0] == pd.Timestamp("2020-11-16 12:49:17.123456", tz="UTC")


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe",
                                  "Asia/Kolkata"])
def test_localize_agrees_with_pandas_around_every_clock_change(zone):
    """The one-offset shortcut gives pandas' answer (or pandas' refusal) at and near the changes."""
    hours = pd.date_range("2020-01-01", "2021-01-01", freq="h", tz=zone)
    offsets = pd.Series([hour.utcoffset() for hour in hours])
    changes = hours[(offsets != offsets.shift()).to_numpy()][1:]  # first hour of each new offset
    assert len(changes) == (0 if zone == "Asia/Kolkata" else 2)
    starts = [pd.Timestamp("2020-06-01 12:00")]
    for change in changes:
        wall = change.tz_localize(None)
        starts += [wall + pd.Timedelta(minutes=m) for m in (-150, -61, -30, -1, 0, 1, 29, 61)]
    compared = refused = 0
    for start in starts:
        for span in (pd.Timedelta(minutes=45), pd.Timedelta(hours=3), pd.Timedelta(hours=23)):
            naive = pd.date_range(start, start + span, periods=ENOUGH_FOR_THE_SHORTCUT)
            try:
                expected = naive.tz_localize(zone, ambiguous="infer").tz_convert("UTC")
            except (ValueError, InvalidTimeError):  # skipped or not inferable: so must localize
                with pytest.raises(TimestampError):
                    localize(naive, zone)
                refused += 1
                continue
            assert localize(naive, zone).equals(expected), (start, span)
            compared += 1
    assert compared >= 3 and (refused > 0) == (zone != "Asia/Kolkata")


@pytest.mark.parametrize(("zone", "start"), [
    ("America/Vancouver", "2026-12-01 12:00"),  # zone databases of different ages disagree
    ("America/Bogota", "1992-05-02 12:00"),
    ("Africa/Casablanca", "2026-10-01 12:00"),
    ("Europe/Berlin", "2040-07-01 12:00"),  # past the rules some databases spell out
])
def test_localize_uses_the_rules_pandas_uses(zone, start):
    naive = pd.date_range(start, periods=ENOUGH_FOR_THE_SHORTCUT, freq="100ms")
    expected = naive.tz_localize(zone, ambiguous="infer").tz_convert("UTC")
    assert localize(naive, zone).equals(expected)


def test_times_beyond_what_utc_can_hold_are_refused():
    with pytest.raises(TimestampError):
        localize(pd.date_range(end="2262-04-11 20:00", periods=ENOUGH_FOR_THE_SHORTCUT,
                               freq="s"), "America/New_York")
