"""The day of a PowerAPI report entry (its block): its earliest report time in the heads of
its files, in every form the readers take and read as they read it, or its mtime."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from joulehouse.landing_days import entry_day
from joulehouse.powerapi import layout
from joulehouse.powerapi.days import entry_start_day, head_timestamps, start_day
from joulehouse.powerapi.reports import read_reports

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "powerapi"
#: 2021-01-13T23:30:00Z, half an hour before midnight UTC, as epoch milliseconds.
LATE_MS = 1_610_580_600_000


def power_line(timestamp, **fields) -> str:
    return json.dumps({"timestamp": timestamp, "sensor": "s", "target": "t",
                       "power": 1.0, **fields}) + "\n"


@pytest.mark.parametrize("entry", ["power.jsonl", "smartwatts_timeline.jsonl", "hwpc-csv"])
def test_the_bundled_entries_are_in_their_first_reports_day(entry):
    """Each bundled entry's day is that of its earliest report as the readers read it (JSON
    lines with zoned and zone-less ISO, a folder of hwpc-sensor CSV with epoch ms)."""
    reports = read_reports(layout.discover(EXAMPLES / entry))
    first = min(frame["timestamp"].min() for frame in (reports.counters, reports.power)
                if frame is not None and len(frame))
    assert entry_start_day(EXAMPLES / entry, "UTC", None) == f"{first:%Y-%m-%d}" == "2021-01-13"


@pytest.mark.parametrize("value", [
    LATE_MS, str(LATE_MS), "2021-01-13T23:30:00Z", "2021-01-14T00:30:00+01:00",
    {"$date": "2021-01-13T23:30:00Z"}, {"$date": LATE_MS},
    {"$date": {"$numberLong": str(LATE_MS)}}])
def test_every_timestamp_form_gives_the_utc_day(tmp_path, value):
    path = tmp_path / "power.jsonl"
    path.write_text(power_line(value) * 3)
    assert entry_start_day(path, "Europe/Paris", None) == "2021-01-13"


def test_a_zone_less_time_is_read_in_the_timezone(tmp_path):
    path = tmp_path / "power.jsonl"
    path.write_text(power_line("2021-01-14T00:30:00") * 3)
    assert entry_start_day(path, "UTC", None) == "2021-01-14"
    assert entry_start_day(path, "Europe/Paris", None) == "2021-01-13"  # 23:30 UTC


def test_the_epoch_zone_shifts_power_reports_only(tmp_path):
    """PowerAPI 2.10.0's power reports' epoch ms are shifted by the zone of the machine that
    wrote them (``epoch_zone``: 23:30 written in Europe/Paris is 00:30 UTC the next day);
    an hwpc-sensor CSV's are true UTC, as their readers read them."""
    power = tmp_path / "power.jsonl"
    power.write_text(power_line(LATE_MS) * 3)
    assert entry_start_day(power, "UTC", None) == "2021-01-13"
    assert entry_start_day(power, "UTC", "Europe/Paris") == "2021-01-14"
    rapl = tmp_path / "rapl.csv"
    rapl.write_text("timestamp,sensor,target,socket,cpu,RAPL_ENERGY_PKG\n"
                    f"{LATE_MS},s,all,0,0,1\n{LATE_MS + 1000},s,all,0,0,1\n")
    assert entry_start_day(rapl, "UTC", "Europe/Paris") == "2021-01-13"


def test_the_earliest_time_in_the_heads_of_a_folders_files(tmp_path):
    """Reports newest first, and a folder's files: the day of the earliest report."""
    folder = tmp_path / "sensor-target"
    folder.mkdir()
    (folder / "late.jsonl").write_text(power_line("2021-01-15T10:00:00Z"))
    (folder / "early.jsonl").write_text(power_line("2021-01-14T10:00:00Z")
                                        + power_line("2021-01-12T10:00:00Z"))
    (folder / "notes.md").write_text('"timestamp": 0,\n')  # not a report file: not read
    assert entry_start_day(folder, "UTC", None) == "2021-01-12"


def test_a_value_cut_by_the_heads_end_is_not_read():
    """A timestamp cut by the head's end would read as a date in 1970: it is left out."""
    assert head_timestamps(b'{"timestamp": 1610580600000, "sensor": "s"}\n{"timestamp": 16105',
                           layout.JSON) == [LATE_MS]
    assert head_timestamps(b"timestamp,sensor,target,power\n1610580600000,s,t,1\n16105",
                           layout.CSV) == [str(LATE_MS)]
    assert head_timestamps(b"{'PowerReport': [{'timestamp': 1610580600000, 'sensor': 's'}, "
                           b"{'timestamp': 161", layout.FILEDB) == [LATE_MS]


def test_a_growing_stream_stays_in_the_day_it_started(tmp_path):
    """Appending reports of later days, or a cut line, leaves the head, and the day, as they
    were."""
    path = tmp_path / "stream.jsonl"
    path.write_text(power_line("2021-01-13T23:59:59Z"))
    assert entry_start_day(path, "UTC", None) == "2021-01-13"
    with path.open("a") as file:
        file.write(power_line("2021-01-14T00:00:01Z") * 2000 + '{"timestamp": "2021-01-1')
    assert path.stat().st_size > layout.HEAD_BYTES
    assert entry_start_day(path, "UTC", None) == "2021-01-13"


def test_an_entry_without_a_readable_time_is_in_its_newest_files_mtime_day(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(power_line("not a time") * 2)
    assert entry_start_day(path, "UTC", None) is None
    mtime = datetime(2021, 3, 4, 12, tzinfo=UTC).timestamp()
    os.utime(path, (mtime, mtime))
    assert entry_day(path, start_day("UTC", None)) == "2021-03-04"
    folder = tmp_path / "csv"
    shutil.copytree(EXAMPLES / "hwpc-csv", folder)
    for file in folder.iterdir():
        file.write_text(file.read_text().splitlines()[0] + "\n")  # headers alone
    assert entry_start_day(folder, "UTC", None) is None
