"""Report shapes from content, and reports found as landing entries."""

from __future__ import annotations

import os

from joulehouse.geopm.layout import file_shape, find_reports, report_shape
from tests.geopm.test_geopm_traps import LEGACY, REPORT_3X


def test_shape_from_content_not_version():
    assert report_shape(b"##### geopm 1.0.0 #####\nStart Time: x\n") == "legacy"
    # a legacy report without its version line still has 'Host:' lines
    assert report_shape(b"Start Time: x\nProfile: p\n\nHost: a\nRegion x (0x1):\n") == "legacy"
    # a YAML report whose version string says 1.x is YAML
    assert report_shape(b"GEOPM Version: 1.1.0\nHosts:\n  a:\n") == "yaml"
    assert report_shape(b'host: "n"\nsample-time-first: "t"\nmetrics:\n') == "session"
    assert report_shape(b"host: only one session key\n") is None
    assert report_shape(b"a: 1\n") is None


def test_find_reports(tmp_path, write_report):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "job1.report").write_text(REPORT_3X.lstrip("\n"))
    (landing / "job2.txt").write_text(LEGACY.lstrip("\n"))
    (landing / "notes.txt").write_text("not a report\n")
    (landing / ".hidden.report").write_text(REPORT_3X.lstrip("\n"))
    (landing / "folder").mkdir()
    found = find_reports(landing)
    assert [item.key for item in found] == ["landing/job1.report", "landing/job2.txt"]
    assert [file_shape(item.path) for item in found] == ["yaml", "legacy"]
    before = found[0].fingerprint
    os.utime(landing / "job1.report", ns=(1, 1))
    assert find_reports(landing, "site")[0].key == "site/job1.report"
    assert find_reports(landing)[0].fingerprint != before
