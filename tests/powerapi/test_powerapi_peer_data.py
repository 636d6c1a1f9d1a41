"""Every file of ../shared/peer-data/powerapi read (or refused with its reason), real values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from joulehouse.errors import InputError
from joulehouse.powerapi import energy, layout, readers

UTC = "UTC"


@pytest.fixture(scope="module")
def powerapi_data(peer_data):
    return peer_data / "powerapi"


def test_every_peer_file_is_classified(powerapi_data):
    found = {item.path.relative_to(powerapi_data).as_posix(): (item.kind, item.encoding)
             for item in layout.discover(powerapi_data)}
    kinds = {kind: sorted(path for path, (k, _) in found.items() if k == kind)
             for kind in (layout.HWPC, layout.POWER, layout.OTHER)}
    assert len(found) == 33
    assert len(kinds[layout.HWPC]) == 14  # 4 JSON + 7 CSV + 3 CSV missing a column
    assert len(kinds[layout.POWER]) == 10
    assert kinds[layout.OTHER] == [
        "PROVENANCE.json", "docs/basis-reports.schema.json", "docs/reports.md",
        "generated_by_powerapi_2.10.0_TZ-Europe-Paris/behaviour_log.json",
        "generated_by_powerapi_2.10.0_TZ-UTC/behaviour_log.json",
        "generated_by_powerapi_main_HEAD/behaviour_log.json",
        "generated_by_powerapi_main_HEAD/csv_output/formula.csv",
        "generated_by_powerapi_main_HEAD/formula.jsonl",
        "powerapi_v2.10.0/reconstructed/procfs_timeline.json",
    ]


@pytest.mark.parametrize("name", ["smartwatts_timeline.json", "smartwatts_timeline.jsonl"])
def test_smartwatts_fixture_measured_energy(powerapi_data, name):
    counters = readers.read_hwpc(powerapi_data / "smartwatts_fixture" / name)
    assert len(counters) == 1870
    assert set(counters["target"]) == {"all", "influxdb", "mongo", "powerapi-sensor"}
    rapl = readers.rapl_energy(counters)
    assert len(rapl) == 10 and set(rapl["socket"]) == {0} and set(rapl["cpu"]) == {7}
    assert rapl["energy_j"].iloc[0] == 5709496320 * 2**-32
    assert round(rapl["energy_j"].sum(), 1) == 12.2
    assert rapl["energy_j"].sum() == pytest.approx(12.19696044921875, abs=1e-12)
    table = energy.window_energy(rapl, None, "1min")
    assert len(table) == 1
    row = table.iloc[0]
    assert row["energy_j"] == pytest.approx(12.19696044921875, rel=1e-12)
    assert row["duration_s"] == pytest.approx(10.041, abs=1e-9)  # 9 ticks + the median first
    assert 1.1 < row["energy_j"] / row["duration_s"] < 1.3


def test_mongo_export_with_ids_and_msr(powerapi_data):
    counters = readers.read_hwpc(powerapi_data / "powerapi_v2.10.0" / "hwpc.json")
    assert len(counters) == 430
    assert counters["timestamp"].iloc[0] == pd.Timestamp("2020-09-08T15:46:44.856", tz=UTC)
    assert sorted(set(counters["group"])) == ["msr", "rapl"]
    rapl = readers.rapl_energy(counters)
    assert len(rapl) == 10
    assert rapl["energy_j"].sum() == pytest.approx(11.6312255859375, rel=1e-12)


def test_two_sockets_float_values_unsorted_times(powerapi_data):
    counters = readers.read_hwpc(powerapi_data / "powerapi_v2.10.0" / "hwpc_rapl_2_socket.json")
    rapl = readers.rapl_energy(counters)
    assert len(rapl) == 106 and sorted(set(rapl["socket"])) == [0, 1]
    first = rapl[rapl["timestamp"] == pd.Timestamp("2021-07-12T11:33:13.520", tz=UTC)]
    assert first["energy_j"].tolist() == [87599611904.0 * 2**-32, 80734322688.0 * 2**-32]
    assert rapl["energy_j"].sum() == pytest.approx(2098.6968383789062, rel=1e-12)
    measured = energy.measured_energy(rapl, "1min")
    assert measured["energy_j"].sum() == pytest.approx(2098.6968383789062, rel=1e-12)


def test_hwpc_csv_files(powerapi_data):
    folder = powerapi_data / "powerapi_v2.10.0" / "csv_files"
    rapl = readers.rapl_energy(readers.read_hwpc(folder / "rapl2.csv"))
    assert rapl["timestamp"].iloc[0] == pd.Timestamp(1539260664189, unit="ms", tz=UTC)
    assert rapl[["socket", "cpu", "domain"]].values.tolist() == [
        [0, 58, "dram"], [0, 58, "pkg"], [1, 21, "dram"], [1, 21, "pkg"]] * 2
    assert rapl["energy_j"].sum() == pytest.approx(
        (116981760 + 722468864 + 81592320 + 603979776 + 10479468544 + 83577274368
         + 3448832000 + 33809760256) * 2**-32, rel=1e-12)
    core = readers.read_hwpc(folder / "core2.csv")
    assert len(core) == 8 * 6 and set(core["group"]) == {"core2"}
    halves = pd.concat([readers.read_hwpc(folder / name)
                        for name in ("core1_miss_second.csv", "core1_miss_first.csv")])
    columns = ["timestamp", "sensor", "target", "socket", "cpu", "event", "value"]
    assert halves[columns].reset_index(drop=True).astype(str).equals(core[columns].astype(str))
    assert set(halves["group"]) == {"core1_miss_first", "core1_miss_second"}  # named by file
    assert len(readers.read_hwpc(folder / "pcu2.csv")) == 4 * 6
    for name in ("rapl1_miss_first.csv", "rapl1_miss_second.csv"):
        assert len(readers.read_hwpc(folder / name)) == 8


@pytest.mark.parametrize("missing", ["sensor", "target", "timestamp"])
def test_hwpc_csv_missing_common_column(powerapi_data, missing):
    path = powerapi_data / "powerapi_v2.10.0" / "csv_files" / f"bad_common_miss_{missing}.csv"
    with pytest.raises(InputError) as err:
        readers.read_hwpc(path)
    assert (err.value.line, err.value.field) == (1, missing)


def test_power_reports_2_10_csv_and_local_epoch(powerapi_data):
    utc = powerapi_data / "generated_by_powerapi_2.10.0_TZ-UTC" / "csv_output"
    paris = powerapi_data / "generated_by_powerapi_2.10.0_TZ-Europe-Paris" / "csv_output"
    power = readers.read_power(utc / "sensor_test-influxdb" / "PowerReport.csv")
    assert power[["target", "power_w", "scope", "formula", "ratio"]].values.tolist() == [
        ["influxdb", 12.345678, "cpu", "a56245b14576471989f53789969f6af00ee009d1", 0.42],
        ["influxdb", 13.0, "cpu", "a56245b14576471989f53789969f6af00ee009d1", 0.4]]
    assert power["timestamp"].tolist() == [pd.Timestamp("2021-01-13T09:51:22.630", tz=UTC),
                                           pd.Timestamp("2021-01-13T09:51:23.634", tz=UTC)]
    assert power["socket"].tolist() == [0, 0]
    shifted = readers.read_power(paris / "sensor_test-influxdb" / "PowerReport.csv")
    assert (power["timestamp"] - shifted["timestamp"]).eq(pd.Timedelta(hours=1)).all()
    corrected = readers.read_power(paris / "sensor_test-influxdb" / "PowerReport.csv",
                                   epoch_zone="Europe/Paris")
    pd.testing.assert_frame_equal(corrected, power)
    rapl = readers.read_power(utc / "sensor_test-rapl" / "PowerReport.csv")
    assert rapl[["target", "power_w", "formula"]].values.tolist() == [
        ["rapl", 20.1, "RAPL_ENERGY_PKG"]]


def test_power_reports_filedb(powerapi_data):
    for folder, zone in (("TZ-UTC", None), ("TZ-Europe-Paris", "Europe/Paris")):
        power = readers.read_power(
            powerapi_data / f"generated_by_powerapi_2.10.0_{folder}" / "filedb_output.txt",
            epoch_zone=zone)
        assert power[["timestamp", "target", "power_w"]].values.tolist() == [
            [pd.Timestamp("2021-01-13T09:51:22.630", tz=UTC), "influxdb", 12.345678]]


def test_power_reports_main_csv_and_jsonl_agree(powerapi_data):
    folder = powerapi_data / "generated_by_powerapi_main_HEAD"
    csv = readers.read_power(folder / "csv_output" / "power.csv")
    lines = readers.read_power(folder / "power.jsonl")
    for frame in (csv, lines):
        assert frame[["timestamp", "target", "power_w"]].values.tolist() == [
            [pd.Timestamp("2021-01-13T09:51:22.630", tz=UTC), "influxdb", 12.345678],
            [pd.Timestamp("2021-01-13T09:51:22.630", tz=UTC), "rapl", 20.1]]
    assert csv["scope"].isna().all() and csv["socket"].isna().all()
    assert lines[["scope", "socket", "formula", "ratio"]].values.tolist() == [
        ["cpu", 0, "a56245b1", 0.42], ["cpu", 0, "RAPL_ENERGY_PKG", 1.0]]


def test_power_reports_json(powerapi_data):
    folder = powerapi_data / "powerapi_v2.10.0" / "reconstructed"
    nested = readers.read_power(folder / "power_report_with_nested_metadata.json")
    assert nested[["timestamp", "target", "power_w", "scope", "socket"]].values.tolist() == [
        [pd.Timestamp("2020-01-01", tz=UTC), "test", 42.0, "cpu", 0]]
    assert nested["metadata"].iloc[0] == (
        '{"k8s": {"app.kubernetes.io/managed-by": "pytest", "app.kubernetes.io/name": "test", '
        '"helm.sh/chart": "powerapi-pytest-1.0.0"}}')
    generated = readers.read_power(folder / "power_reports_gen_json_power_report.json")
    assert generated["timestamp"].tolist() == list(
        pd.date_range("1970-01-01", periods=3, freq="s", tz=UTC))
    assert np.all(generated["power_w"] == 42.0)


@pytest.mark.parametrize("name", ["procfs_timeline.json"])
def test_other_reports_are_refused_with_their_reason(powerapi_data, name):
    with pytest.raises(InputError, match="not power reports"):
        readers.read_power(powerapi_data / "powerapi_v2.10.0" / "reconstructed" / name)


#: Rows read from each HWPC / power report file of the peer data (counters / power reports).
ROWS = {
    "generated_by_powerapi_2.10.0_TZ-Europe-Paris/csv_output/sensor_test-influxdb/"
    "PowerReport.csv": 2,
    "generated_by_powerapi_2.10.0_TZ-Europe-Paris/csv_output/sensor_test-rapl/PowerReport.csv": 1,
    "generated_by_powerapi_2.10.0_TZ-Europe-Paris/filedb_output.txt": 1,
    "generated_by_powerapi_2.10.0_TZ-UTC/csv_output/sensor_test-influxdb/PowerReport.csv": 2,
    "generated_by_powerapi_2.10.0_TZ-UTC/csv_output/sensor_test-rapl/PowerReport.csv": 1,
    "generated_by_powerapi_2.10.0_TZ-UTC/filedb_output.txt": 1,
    "generated_by_powerapi_main_HEAD/csv_output/power.csv": 2,
    "generated_by_powerapi_main_HEAD/power.jsonl": 2,
    "powerapi_v2.10.0/csv_files/core1_miss_first.csv": 24,
    "powerapi_v2.10.0/csv_files/core1_miss_second.csv": 24,
    "powerapi_v2.10.0/csv_files/core2.csv": 48,
    "powerapi_v2.10.0/csv_files/pcu2.csv": 24,
    "powerapi_v2.10.0/csv_files/rapl1_miss_first.csv": 8,
    "powerapi_v2.10.0/csv_files/rapl1_miss_second.csv": 8,
    "powerapi_v2.10.0/csv_files/rapl2.csv": 16,
    "powerapi_v2.10.0/hwpc.json": 430,
    "powerapi_v2.10.0/hwpc_rapl_2_socket.json": 318,
    "powerapi_v2.10.0/reconstructed/power_report_with_nested_metadata.json": 1,
    "powerapi_v2.10.0/reconstructed/power_reports_gen_json_power_report.json": 3,
    "smartwatts_fixture/smartwatts_timeline.json": 1870,
    "smartwatts_fixture/smartwatts_timeline.jsonl": 1870,
}
#: Files deliberately malformed upstream: refused, naming the missing column.
MALFORMED = {f"powerapi_v2.10.0/csv_files/bad_common_miss_{name}.csv": name
             for name in ("sensor", "target", "timestamp")}


def test_every_report_file_is_read(powerapi_data):
    read = {}
    for item in layout.discover(powerapi_data):
        name = item.path.relative_to(powerapi_data).as_posix()
        if item.kind == layout.OTHER:
            continue
        if name in MALFORMED:
            with pytest.raises(InputError) as err:
                readers.read_hwpc(item.path)
            assert err.value.field == MALFORMED[name]
            continue
        frame = (readers.read_hwpc(item.path) if item.kind == layout.HWPC
                 else readers.read_power(item.path))
        read[name] = len(frame)
    assert read == ROWS
