"""Naive local ISO timestamps and µs epochs to UTC."""

import pandas as pd
import pytest

from joulehouse.timeutil import (
    TimestampError,
    check_timezone,
    epoch_us_to_utc,
    parse_local_iso,
)


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


def test_bad_values_are_named_by_row():
    with pytest.raises(TimestampError) as caught:
        parse_local_iso(["2020-11-16 13:49:17", "yesterday", "2020-11-16 13:49:18"])
    assert caught.value.positions == [1]


def test_unknown_zone_rejected():
    with pytest.raises(ValueError, match="Mars/Olympus"):
        check_timezone("Mars/Olympus")
    assert check_timezone("America/New_York") == "America/New_York"


def test_epoch_microseconds_are_utc():
    parsed = epoch_us_to_utc([1605530957123456])
    assert parsed[0] == pd.Timestamp("2020-11-16 12:49:17.123456", tz="UTC")
