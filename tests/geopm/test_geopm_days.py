"""The day of a GEOPM report (its block): from its own start, in every shape, or its mtime."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from joulehouse.geopm.days import day_of_head, report_day, start_day
from joulehouse.geopm.layout import HEAD_BYTES, identify_report
from joulehouse.geopm.readers import read_report
from joulehouse.landing_days import entries_of_days

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "geopm"

#: Each peer report's day, copied by hand from its Start Time (the session report: its
#: sample-time-first 2024-08-14T18:23:58-0700 is 01:23 UTC the next day).
PEER_DAYS = {
    "endeavor_geopm-1.0.0dev189_efficient_2host.legacy.report": "2019-09-26",
    "geopm-1.1.0dev429_nekbone_frequency_map_4host.legacy.report": "2020-08-17",
    "geopm-1.1.0dev429_nekbone_frequency_map_4host.yaml-converted.report": "2020-08-17",
    "geopmsession-doc-example_3.x.session-report.yaml": "2024-08-15",
    "papi-iogroup-readme_geopm-1.1.0_geopmbench_1host.legacy.report": "2020-04-01",
    "pyagent-tutorial_geopm-2.0.0rc2dev112_stress-monitor_1host.yaml.report": "2022-08-11",
    "testio_geopm-1.0.0dev30_fm_stream_dgemm_2host.yaml.report": "2019-05-30",
}


@pytest.mark.parametrize("name", sorted(PEER_DAYS))
def test_the_day_of_every_shape_is_its_start_in_utc_as_the_reader_reads_it(peer_data, name):
    path = peer_data / "geopm" / name
    assert report_day(path, "UTC") == PEER_DAYS[name]
    report = read_report(path, timezone="UTC")
    assert f"{report.header['start_time'].iloc[0]:%Y-%m-%d}" == PEER_DAYS[name]


def test_a_start_time_without_zone_is_read_in_the_timezone(peer_data):
    """20:01:41 on 17 August 2020 at Los Angeles (UTC-7) is 03:01 UTC on the 18th; a start
    with its own offset (the session report) keeps its day."""
    folder = peer_data / "geopm"
    assert report_day(folder / "geopm-1.1.0dev429_nekbone_frequency_map_4host.legacy.report",
                      "America/Los_Angeles") == "2020-08-18"
    assert report_day(folder / "geopmsession-doc-example_3.x.session-report.yaml",
                      "Asia/Tokyo") == "2024-08-15"


def test_the_day_is_read_from_the_head_alone():
    head = (EXAMPLES / "geopmbench_1host.legacy.report").read_bytes()[:HEAD_BYTES]
    assert day_of_head(head, Path("x"), "UTC") == "2020-04-01"
    assert day_of_head(b"GEOPM Version: 2.0\nStart Time: 'Thu May 30 14:38:17 2019'\n",
                       Path("x"), "UTC") == "2019-05-30"  # quoted, as YAML may write it
    assert day_of_head(b"GEOPM Version: 2.0\nStart Time: yesterday\n", Path("x"), "UTC") is None


def test_a_report_without_a_start_time_falls_back_to_its_mtime_day(tmp_path):
    path = tmp_path / "bad.report"
    path.write_text("##### geopm 1.1.0 #####\nHost: a\nRegion r (0x1):\n")
    os.utime(path, (0, datetime(2023, 3, 4, 23, 59, tzinfo=UTC).timestamp()))
    assert report_day(path, "UTC") == "2023-03-04"


def test_the_reports_of_days_are_listed_by_their_start_not_their_file_name(tmp_path):
    folder = tmp_path / "landing"
    folder.mkdir()
    for name in ("geopmbench_1host.legacy.report", "fm_stream_dgemm_2host.yaml.report"):
        shutil.copy(EXAMPLES / name, folder / name)
    shutil.copy(EXAMPLES / "geopmbench_1host.legacy.report", folder / "copy.txt")
    (folder / "notes.txt").write_text("not a report\n")
    old = folder / "old.report"  # last written a year before its day: not opened
    shutil.copy(EXAMPLES / "geopmbench_1host.legacy.report", old)
    os.utime(old, (0, datetime(2019, 4, 1, tzinfo=UTC).timestamp()))
    found = entries_of_days(folder, "landing", ["2020-04-01", "2021-01-01"], identify_report,
                            start_day("UTC"))
    assert {day: [item.key for item in items] for day, items in found.items()} == {
        "2020-04-01": ["landing/copy.txt", "landing/geopmbench_1host.legacy.report"],
        "2021-01-01": []}
