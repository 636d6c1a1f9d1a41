"""Roll-ups by GEOPM's rules (sum energies and times, divide; never average powers) and facts."""

from __future__ import annotations

import pandas as pd
import pytest

from joulehouse.geopm import energy
from joulehouse.geopm.readers import read_report

TWO_HOSTS = '''
GEOPM Version: 3.1.0
Start Time: 2024-01-01T00:00:00+00:00
Profile: p
Agent: monitor
Policy: {}
Hosts:
  h1:
    Regions:
    - region: "a"
      hash: 0x1
      runtime (s): 11
      count: 1
      sync-runtime (s): 10
      package-energy (J): 1000
      dram-energy (J): 100
      gpu-energy (J): 3000
      power (W): 100
      frequency (Hz): 2e+09
    Application Totals:
      runtime (s): 20
      count: 0
      sync-runtime (s): 20
      package-energy (J): 2000
      dram-energy (J): 200
      gpu-energy (J): 5000
      geopmctl memory HWM (B): 1
      geopmctl network BW (B/s): 0
  h2:
    Regions:
    - region: "a"
      hash: 0x1
      runtime (s): 31
      count: 1
      sync-runtime (s): 30
      package-energy (J): 6000
      dram-energy (J): 300
      power (W): 200
      frequency (Hz): 1e+09
    Application Totals:
      runtime (s): 40
      count: 0
      sync-runtime (s): 40
      package-energy (J): 8000
      dram-energy (J): 400
      geopmctl memory HWM (B): 1
      geopmctl network BW (B/s): 0
'''


@pytest.fixture
def two_hosts(write_report):
    return read_report(write_report(TWO_HOSTS), report="job")


def test_region_rollup_divides_sums(two_hosts):
    row = energy.region_rollup(two_hosts).iloc[0]
    assert (row["region"], row["hash"], row["host_count"]) == ("a", "0x00000001", 2)
    assert row["sync_runtime_s"] == 40.0 and row["runtime_s"] == 42.0
    assert row["package_energy_j"] == 7000.0 and row["dram_energy_j"] == 400.0
    assert row["gpu_energy_j"] == 3000.0  # one host has GPU energy: not NaN, not 0 added
    assert row["power_w"] == pytest.approx(7000 / 40)  # 175 W, not the mean 150 W
    # h1 alone has a GPU: its 3000 J over its own 10 s, not over both hosts' 40 s
    assert row["gpu_power_w"] == pytest.approx(3000 / 10)
    assert row["frequency_hz"] == pytest.approx((2e9 * 10 + 1e9 * 30) / 40)


def test_report_rollup_and_host_energy(two_hosts):
    app = energy.report_rollup(two_hosts).set_index("section").loc["application"]
    assert app["package_energy_j"] == 10000.0 and app["sync_runtime_s"] == 60.0
    assert app["power_w"] == pytest.approx(10000 / 60)
    assert app["gpu_power_w"] == pytest.approx(5000 / 20)  # h1's GPU over h1's time
    assert pd.isna(app["frequency_hz"])  # no host wrote one
    table = energy.host_energy(two_hosts)
    assert table[["host", "section", "region", "power_w"]].values.tolist() == [
        ["h1", "region", "a", 100.0], ["h2", "region", "a", 200.0],
        ["h1", "application", "Application Totals", 100.0],
        ["h2", "application", "Application Totals", 200.0]]
    assert energy.total_energy_j(two_hosts) == 2000 + 200 + 5000 + 8000 + 400


def test_energy_facts_rows(two_hosts):
    facts = energy.energy_facts_rows(two_hosts)
    assert facts[["entity", "component", "energy_j", "duration_s", "method"]].values.tolist() == [
        ["job/h1", "cpu", 2000.0, 20.0, "rapl"],
        ["job/h1", "dram", 200.0, 20.0, "rapl"],
        ["job/h1", "gpu", 5000.0, 20.0, "counter"],
        ["job/h2", "cpu", 8000.0, 40.0, "rapl"],
        ["job/h2", "dram", 400.0, 40.0, "rapl"],
    ]
    assert set(facts["source"]) == {"geopm"}
    assert (facts["window_start"] == pd.Timestamp("2024-01-01 00:00:00Z")).all()
    assert facts["window_end"].iloc[-1] == pd.Timestamp("2024-01-01 00:00:40Z")


def test_peer_report_rollups(geopm_peer):
    report = read_report(geopm_peer / "testio_geopm-1.0.0dev30_fm_stream_dgemm_2host"
                                      ".yaml.report", report="r")
    sleep = energy.region_rollup(report).set_index("region").loc["sleep"]
    # mcfly11 + mcfly12 as written in the file
    assert sleep["package_energy_j"] == pytest.approx(33573.9 + 34545.2)
    assert sleep["sync_runtime_s"] == pytest.approx(276.581 + 276.56)
    facts = energy.energy_facts_rows(report)
    assert len(facts) == 4
    assert facts.query("component == 'cpu'")["energy_j"].tolist() == [83998.9, 85946.8]
    session = read_report(geopm_peer / "geopmsession-doc-example_3.x.session-report.yaml")
    assert energy.energy_facts_rows(session).empty


def test_many_reports_at_once_are_each_report_alone(geopm_peer):
    """The tables over all reports (concatenated frames) hold exactly each report's rows;
    a report without a start time (the session report) adds no fact."""
    reports = [read_report(geopm_peer / name, report=name) for name in (
        "testio_geopm-1.0.0dev30_fm_stream_dgemm_2host.yaml.report",
        "papi-iogroup-readme_geopm-1.1.0_geopmbench_1host.legacy.report",
        "geopmsession-doc-example_3.x.session-report.yaml")]

    def joined(frame: str) -> pd.DataFrame:
        return pd.concat([getattr(r, frame) for r in reports], ignore_index=True)

    pd.testing.assert_frame_equal(
        energy.regions_across_hosts(joined("regions"), "all"),
        pd.concat([energy.region_rollup(r) for r in reports], ignore_index=True))
    pd.testing.assert_frame_equal(
        energy.sections_across_hosts(joined("totals"), "all"),
        pd.concat([energy.report_rollup(r) for r in reports], ignore_index=True))
    facts = energy.facts_rows(joined("header"), joined("totals"))
    assert len(facts) == 4 + 2
    pd.testing.assert_frame_equal(facts, pd.concat(
        [energy.energy_facts_rows(r) for r in reports[:2]]).sort_values(
        ["entity", "component", "method"], ignore_index=True))  # the order facts_rows keeps


def test_legacy_application_power_is_energy_over_runtime(geopm_peer):
    """Legacy 1.x Application Totals have no sync-runtime; GEOPM wrote their power as
    energy / runtime (mcfly1's own 'power (W): 212.76')."""
    report = read_report(geopm_peer / "endeavor_geopm-1.0.0dev189_efficient_2host.legacy.report")
    table = energy.host_energy(report)
    application = table[table["section"] == "application"].set_index("host")
    assert application["sync_runtime_s"].isna().all()
    assert application["power_w"].tolist() == pytest.approx(
        [144249 / 677.99, 154277 / 678.022], rel=1e-12)
    written = report.totals[report.totals["section"] == "application"]["power_w"]
    assert application["power_w"].tolist() == pytest.approx(written.tolist(), abs=0.005)
    rolled = energy.report_rollup(report).set_index("section").loc["application"]
    assert rolled["power_w"] == pytest.approx((144249 + 154277) / (677.99 + 678.022), rel=1e-12)
    assert pd.isna(rolled["sync_runtime_s"])  # as written
