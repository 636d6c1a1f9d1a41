"""Every real GEOPM report of the peer data read with the right hosts, regions and values.

Expected values are copied by hand from the files' text.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from joulehouse.geopm.layout import file_shape
from joulehouse.geopm.readers import read_report

# file -> shape, hosts, region rows, (first region, its package J), first host's app package J
EXPECTED = {
    "endeavor_geopm-1.0.0dev189_efficient_2host.legacy.report":
        ("legacy", ["mcfly1", "mcfly2"], 10, ("stream", 62342.0), 144249.0),
    "endeavor_geopm-1.0.0dev189_fixed_2host.legacy.report":
        ("legacy", ["mcfly1", "mcfly2"], 10, ("stream", 81066.1), 171667.0),
    "endeavor_geopm-1.0.0dev189_ompt_2host.legacy.report":
        ("legacy", ["mcfly1", "mcfly2"], 16,
         ("[OMPT]omp_parallel_acopy_lookahead()+0x99f", 1734.2), 4360.38),
    "endeavor_geopm-1.0.0dev189_tutorial_0_2host.legacy.report":
        ("legacy", ["mcfly1", "mcfly2"], 0, None, 1105.68),
    "endeavor_geopm-1.0.0dev189_tutorial_1_2host.legacy.report":
        ("legacy", ["mcfly1", "mcfly2"], 14, ("[OMPT]tutorial_stream()+0x14a", 3274.93),
         14503.8),
    "endeavor_geopm-1.0.0dev189_tutorial_2_2host.legacy.report":
        ("legacy", ["mcfly1", "mcfly2"], 8, ("tutorial_stream", 8699.03), 14378.9),
    "geopm-1.1.0dev429_nekbone_frequency_map_4host.legacy.report":
        ("legacy", ["mcfly1", "mcfly2", "mcfly3", "mcfly4"], 24, ("MPI_Allreduce", 10262.7),
         73256.7),
    "geopm-1.1.0dev429_nekbone_frequency_map_4host.yaml-converted.report":
        ("yaml", ["mcfly1", "mcfly2", "mcfly3", "mcfly4"], 24, ("MPI_Allreduce", 10262.7),
         73256.7),
    "geopmsession-doc-example_3.x.session-report.yaml":
        ("session", ["cluster-node-11"], 0, None, None),
    "papi-iogroup-readme_geopm-1.1.0_geopmbench_1host.legacy.report":
        ("legacy", ["mcfly13"], 6, ("all2all", 1802.26), 4406.26),
    "pyagent-tutorial_geopm-2.0.0rc2dev112_stress-frequency-limit_1host.yaml.report":
        ("yaml", ["tutorial-hostname"], 0, None, 459.749),
    "pyagent-tutorial_geopm-2.0.0rc2dev112_stress-monitor_1host.yaml.report":
        ("yaml", ["tutorial-hostname"], 0, None, 881.021),
    "pyagent-tutorial_geopm-2.0.0rc2dev112_stress-package-energy_1host.yaml.report":
        ("yaml", ["tutorial-hostname"], 0, None, 885.778),
    "testio_geopm-1.0.0dev30_fm_stream_dgemm_2host.legacy.report":
        ("legacy", ["mcfly11", "mcfly12"], 26, ("sleep", 33573.9), 83998.9),
    "testio_geopm-1.0.0dev30_fm_stream_dgemm_2host.yaml.report":
        ("yaml", ["mcfly11", "mcfly12"], 26, ("sleep", 33573.9), 83998.9),
}


def test_every_peer_report_is_listed(geopm_peer):
    reports = {p.name for p in geopm_peer.iterdir() if p.name != "PROVENANCE.md"}
    assert reports == set(EXPECTED)
    assert {p.name: file_shape(p) for p in geopm_peer.iterdir() if p.name in EXPECTED} == {
        name: spec[0] for name, spec in EXPECTED.items()}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_peer_report(geopm_peer, name):
    shape, hosts, region_rows, first_region, app_package_j = EXPECTED[name]
    report = read_report(geopm_peer / name, report="r")
    header = report.header.iloc[0]
    assert report.shape == header["shape"] == shape
    assert header["host_count"] == len(hosts)
    frame = report.session if shape == "session" else report.totals
    assert list(dict.fromkeys(frame["host"])) == hosts
    assert len(report.regions) == region_rows
    if first_region is not None:
        first = report.regions.iloc[0]
        assert (first["host"], first["region"]) == (hosts[0], first_region[0])
        assert first["package_energy_j"] == first_region[1]
    if app_package_j is not None:
        app = report.totals[(report.totals["host"] == hosts[0])
                            & (report.totals["section"] == "application")]
        assert app["package_energy_j"].tolist() == [app_package_j]
        # every host has its application totals
        assert sorted(report.totals.query("section == 'application'")["host"]) == sorted(hosts)


def test_legacy_and_its_yaml_conversion_agree(geopm_peer):
    """The nekbone run as GEOPM 1.1 wrote it and as geopmpy's converter rewrote it."""
    legacy = read_report(geopm_peer / "geopm-1.1.0dev429_nekbone_frequency_map_4host"
                                      ".legacy.report", report="r")
    yaml = read_report(geopm_peer / "geopm-1.1.0dev429_nekbone_frequency_map_4host"
                                    ".yaml-converted.report", report="r")
    same = ["host", "region", "hash", "runtime_s", "count", "sync_runtime_s",
            "package_energy_j", "dram_energy_j", "power_w", "frequency_pct", "frequency_hz"]
    pd.testing.assert_frame_equal(legacy.regions[same], yaml.regions[same])
    # the 1.1 network-time is what the converter wrote as time-hint-network
    np.testing.assert_array_equal(legacy.regions["network_time_s"],
                                  yaml.regions["time_hint_network_s"])
    key = ["host", "section"]
    left = legacy.totals.sort_values(key, ignore_index=True)
    right = yaml.totals.sort_values(key, ignore_index=True)
    pd.testing.assert_frame_equal(left[[*key, "package_energy_j", "dram_energy_j"]],
                                  right[[*key, "package_energy_j", "dram_energy_j"]])
    # legacy 'geopmctl memory HWM: 108300 kB' x 1024 = the converter's bytes
    assert left["geopmctl_memory_hwm_b"].dropna().tolist() == [
        110899200.0, 109867008.0, 110333952.0, 110612480.0]
    assert right["geopmctl_memory_hwm_b"].dropna().tolist() == [
        110899200.0, 109867008.0, 110333952.0, 110612480.0]
    assert legacy.header["figure_of_merit"].tolist() == [327780.0]
    assert legacy.header["start_time"].tolist() == [pd.Timestamp("2020-08-17 20:01:41Z")]


def test_testio_legacy_and_yaml_agree(geopm_peer):
    legacy = read_report(geopm_peer / "testio_geopm-1.0.0dev30_fm_stream_dgemm_2host"
                                      ".legacy.report", report="r")
    yaml = read_report(geopm_peer / "testio_geopm-1.0.0dev30_fm_stream_dgemm_2host"
                                    ".yaml.report", report="r")
    same = ["host", "region", "hash", "runtime_s", "count", "sync_runtime_s",
            "package_energy_j", "dram_energy_j", "power_w", "frequency_hz"]
    pd.testing.assert_frame_equal(legacy.regions[same], yaml.regions[same])
    assert "with some spaces" in set(legacy.regions["region"])
    # `frequency (Hz): 1e+09` (PyYAML's string) is the number 1e9
    sleep = yaml.regions[(yaml.regions["region"] == "sleep")]
    assert sleep["frequency_hz"].tolist()[0] == 1e9


def test_pyagent_policy_mapping_signals_and_hwm_kb(geopm_peer):
    report = read_report(geopm_peer / "pyagent-tutorial_geopm-2.0.0rc2dev112_stress-"
                                      "frequency-limit_1host.yaml.report", report="r")
    header = report.header.iloc[0]
    assert json.loads(header["policy_json"]) == {
        "Initial Controls": {"CPU_FREQUENCY_MAX_CONTROL": 1500000000.0}}
    signals = report.signals.set_index("field")
    assert signals.loc["CPU_ENERGY@package-0", "value"] == 294.2
    assert signals.loc["CPU_ENERGY@package-1", ["signal", "domain", "domain_index"]].tolist() \
        == ["CPU_ENERGY", "package", 1]
    app = report.totals.iloc[0]
    assert app["geopmctl_memory_hwm_b"] == 32820 * 1024  # kB under a '(B)' label
    assert app["uncore_frequency_hz"] == 1.2e9
    assert app["frequency_hz"] == 1499860000.0


def test_legacy_extensions_and_agent_maps(geopm_peer):
    papi = read_report(geopm_peer / "papi-iogroup-readme_geopm-1.1.0_geopmbench_1host"
                                    ".legacy.report", report="r")
    dp = papi.signals[(papi.signals["field"] == "PAPI_DP_OPS")
                      & (papi.signals["region"] == "all2all")]
    assert dp["value"].tolist() == [3.17311e07]
    assert papi.totals.query("section == 'application'")["geopmctl_memory_hwm_b"].tolist() == [
        54416 * 1024]
    efficient = read_report(geopm_peer / "endeavor_geopm-1.0.0dev189_efficient_2host"
                                         ".legacy.report", report="r")
    freq_map = efficient.signals[efficient.signals["section"] == "host"]
    assert freq_map[["host", "field", "value"]].values.tolist() == [
        ["mcfly1", "Final online freq map/0x00000000d691da00", 1e9],
        ["mcfly2", "Final online freq map/0x00000000d691da00", 1095454545.454545]]
    assert json.loads(efficient.header["policy_json"].iloc[0]) == {
        "FREQ_MIN": 1e9, "FREQ_MAX": 2.1e9, "PERF_MARGIN": 0.1}


def test_session_report(geopm_peer):
    report = read_report(geopm_peer / "geopmsession-doc-example_3.x.session-report.yaml",
                         report="r")
    session = report.session.set_index("signal")
    assert list(session.index) == ["TIME", "CPU_POWER", "CPU_FREQUENCY_STATUS"]
    assert session.loc["CPU_POWER", ["count", "first_si", "mean_si", "std_si"]].tolist() == [
        2000.0, 71.9161, 50.1323, 6.61714]
    assert session.loc["CPU_FREQUENCY_STATUS", "min_si"] == 1e9
    assert session["sample_count"].tolist() == [2001.0] * 3
    # -0700 zone to UTC
    assert report.header["start_time"].iloc[0] == pd.Timestamp(
        "2024-08-15 01:23:58.545153099Z")
