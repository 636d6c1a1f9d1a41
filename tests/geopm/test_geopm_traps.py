"""The traps of real GEOPM reports (../shared/notes/geopm.md), each read right."""

from __future__ import annotations

import json
import math

import pandas as pd
import yaml

from joulehouse.geopm.readers import read_report

REPORT_3X = r'''
GEOPM Version: 3.1.0
Start Time: 2024-08-14T18:23:58.545153-07:00
Profile: demo
Agent: monitor
Policy: DYNAMIC
Hosts:
  0012:
    Regions:
    -
      region: "say "hi" \now"
      hash: 0x0000abcd
      runtime (s): 2
      count: 1.5
      sync-runtime (s): 2
      package-energy (J): 1e+02
      dram-energy (J): 10
      power (W): 50
      CPU_ENERGY@package-0: nan
      CPU_ENERGY@package-1: -nan
      GPU_POWER@gpu-0: inf
    Application Totals:
      runtime (s): 4
      count: 0
      sync-runtime (s): 4
      package-energy (J): 200
      dram-energy (J): 20
      gpu-energy (J): 40
      power (W): 50
      geopmctl memory HWM (B): 1000
      geopmctl network BW (B/s): 0
'''


def test_3x_report_traps(write_report):
    report = read_report(write_report(REPORT_3X), report="r")
    region = report.regions.iloc[0]
    assert region["host"] == "0012"  # not the octal number 10
    assert region["region"] == 'say "hi" \\now'  # quotes and backslash kept literally
    assert region["hash"] == "0x0000abcd"
    assert region["count"] == 1.5
    assert region["package_energy_j"] == 100.0  # 1e+02
    values = report.signals.set_index("field")["value"]
    assert math.isnan(values["CPU_ENERGY@package-0"]) and math.isnan(
        values["CPU_ENERGY@package-1"])
    assert values["GPU_POWER@gpu-0"] == math.inf
    assert report.signals["domain"].tolist() == ["package", "package", "gpu"]
    # no Unmarked or Epoch Totals: only the application row
    assert report.totals[["host", "section"]].values.tolist() == [["0012", "application"]]
    totals = report.totals.iloc[0]
    assert totals["gpu_energy_j"] == 40.0
    assert totals["geopmctl_memory_hwm_b"] == 1000 * 1024
    header = report.header.iloc[0]
    assert header["start_time"] == pd.Timestamp("2024-08-15 01:23:58.545153Z")
    assert header["policy_json"] == "DYNAMIC"
    assert header["geopm_version"] == "3.1.0"


def test_empty_totals_are_left_out(write_report):
    text = REPORT_3X.replace("    Application Totals:",
                             "    Unmarked Totals: {}\n    Epoch Totals:\n    Application Totals:")
    report = read_report(write_report(text), report="r")
    assert report.totals["section"].tolist() == ["application"]


def test_start_time_without_zone_is_read_in_the_given_zone(write_report):
    text = REPORT_3X.replace("2024-08-14T18:23:58.545153-07:00", "Wed Jan 15 10:00:00 2020")
    utc = read_report(write_report(text), report="r").header["start_time"].iloc[0]
    berlin = read_report(write_report(text), report="r",
                         timezone="Europe/Berlin").header["start_time"].iloc[0]
    assert utc == pd.Timestamp("2020-01-15 10:00:00Z")
    assert berlin == pd.Timestamp("2020-01-15 09:00:00Z")


LEGACY = '''
##### geopm 1.0.0 #####
Start Time: Thu Sep 26 12:30:18 2019
Profile: p
Agent: monitor
Policy: {}

Host: a
Region x (0x00000000000000ab):
    runtime (sec): 1
    sync-runtime (sec): 1
    package-energy (joules): 10
    count: 1
Application Totals:
    runtime (sec): 2
    package-energy (joules): 20
    geopmctl memory HWM: 100 kB
    geopmctl network BW (B/sec): 0

Host: b
Region x (0x00000000000000ab):
    runtime (sec): 3
    sync-runtime (sec): 3
    package-energy (joules): 30
    count: 1
Application Totals:
    runtime (sec): 4
    package-energy (joules): 40
    geopmctl memory HWM: 200 kB
    geopmctl network BW (B/sec): 0
'''


def test_legacy_is_never_read_as_yaml(write_report):
    path = write_report(LEGACY)
    # the trap: YAML reads it without error, the hosts collapsed into the last one
    assert yaml.safe_load(path.read_text())["Host"] == "b"
    report = read_report(path, report="r")
    assert report.shape == "legacy"
    assert report.regions[["host", "package_energy_j"]].values.tolist() == [
        ["a", 10.0], ["b", 30.0]]
    assert report.regions["hash"].tolist() == ["0x000000ab"] * 2
    assert report.totals["geopmctl_memory_hwm_b"].tolist() == [102400.0, 204800.0]
    assert json.loads(report.header["policy_json"].iloc[0]) == {}
    assert report.header["geopm_version"].iloc[0] == "1.0.0"


def test_session_report_of_several_hosts(write_report):
    text = '''
    host: 0012
    sample-time-first: "2024-08-14T18:23:58.5-0700"
    sample-time-total: 10
    sample-count: 3
    sample-period-mean: 5
    sample-period-std: 0
    metrics:
      CPU_POWER:
        count: 3
        first: +inf
        last: -nan
        min: 1e+02
        max: 2e+02
        mean: 150
        std: 50
    ---
    host: n2
    sample-time-first: "2024-08-14T18:23:59-0700"
    metrics:
      CPU_POWER: {count: 1, first: 1, last: 1, min: 1, max: 1, mean: 1, std: 0}
    '''
    report = read_report(write_report(text), report="s")
    session = report.session
    assert report.shape == "session" and session["host"].tolist() == ["0012", "n2"]
    first = session.iloc[0]
    assert first["first_si"] == math.inf and math.isnan(first["last_si"])
    assert (first["min_si"], first["max_si"]) == (100.0, 200.0)
    assert math.isnan(session.iloc[1]["sample_count"])
    assert report.header[["host_count", "region_count"]].values.tolist() == [[2, 0]]
    assert report.header["start_time"].iloc[0] == pd.Timestamp("2024-08-15 01:23:58.5Z")
