"""Bad PowerAPI input: an InputError naming the file, the line and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from joulehouse.errors import InputError
from joulehouse.powerapi import readers
from joulehouse.powerapi.schemas import MAX_RAPL_TICK_J

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "powerapi"


@pytest.fixture(scope="module")
def reports() -> list[dict]:
    text = (EXAMPLES / "smartwatts_timeline.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def _lines(tmp_path: Path, reports: list[dict], name: str = "bad.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(report) + "\n" for report in reports))
    return path


def _error(call, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as err:
        call(*args, **kwargs)
    return err.value


def test_truncated_json_inside_the_file(tmp_path, reports):
    path = _lines(tmp_path, reports[:5])
    text = path.read_text().splitlines()
    text[2] = text[2][:50]
    path.write_text("\n".join(text) + "\n")
    err = _error(readers.read_hwpc, path)
    assert err.path == str(path) and err.line == 3 and "not valid JSON" in str(err)


def test_truncated_json_array_inside_the_file(tmp_path, reports):
    path = tmp_path / "bad.json"
    text = json.dumps(reports[:3], indent=1)
    second = text.index('"sensor"', text.index('"sensor"') + 1)
    path.write_text(text[:second] + "," + text[second:])  # second report: ",," is not JSON
    err = _error(readers.read_hwpc, path)
    object_starts = [number for number, line in enumerate(text.splitlines(), 1) if line == " {"]
    assert err.line == object_starts[1] and "not valid JSON" in str(err)


def test_report_without_groups(tmp_path, reports):
    broken = [dict(report) for report in reports[:4]]
    del broken[3]["groups"]
    err = _error(readers.read_hwpc, _lines(tmp_path, broken))
    assert (err.line, err.field) == (4, "groups")


def test_power_report_without_power(tmp_path):
    path = tmp_path / "power.jsonl"
    path.write_text('{"timestamp": "2021-01-13T09:51:22.630Z", "sensor": "s", "target": "a", '
                    '"power": 1.5}\n{"timestamp": "2021-01-13T09:51:23.630Z", "sensor": "s", '
                    '"target": "a"}\n')
    err = _error(readers.read_power, path)
    assert (err.line, err.field) == (2, "power")


def test_unknown_group(tmp_path, reports):
    err = _error(readers.read_hwpc, _lines(tmp_path, reports[:4]), groups={"rapl", "msr"})
    assert (err.line, err.field) == (1, "groups.core") and "unknown group 'core'" in str(err)
    err = _error(readers.read_hwpc, EXAMPLES / "hwpc-csv" / "core.csv", groups={"rapl"})
    assert "unknown group 'core'" in str(err)


@pytest.mark.parametrize("stamp", ["13/01/2021 09:51", "yesterday", "2021-13-45T09:51:22"])
def test_timestamp_in_no_known_form(tmp_path, reports, stamp):
    broken = [dict(report) for report in reports[:3]]
    broken[1]["timestamp"] = stamp
    err = _error(readers.read_hwpc, _lines(tmp_path, broken))
    assert (err.line, err.field) == (2, "timestamp") and repr(stamp) in str(err)


def test_zoned_and_naive_timestamps_mixed(tmp_path, reports):
    broken = [dict(report) for report in reports[:3]]
    broken[0]["timestamp"] += "Z"
    err = _error(readers.read_hwpc, _lines(tmp_path, broken))
    assert (err.line, err.field) == (2, "timestamp")


@pytest.mark.parametrize(("value", "what"), [(-5, "negative"), (2.0**70, "absurd")])
def test_counter_negative_or_absurd(tmp_path, reports, value, what):
    broken = json.loads(json.dumps(reports[:4]))
    broken[1]["groups"]["rapl"]["0"]["7"]["RAPL_ENERGY_PKG"] = value
    err = _error(readers.read_hwpc, _lines(tmp_path, broken))
    assert (err.line, err.field) == (2, "groups.rapl.0.7.RAPL_ENERGY_PKG") and what in str(err)


def test_absurd_rapl_energy_refused_where_it_is_read(tmp_path, reports):
    """A RAPL value above MAX_RAPL_TICK_J in one tick names its file, line and field; the
    same count in another counter, and RAPL at the limit, are read."""
    limit = int(MAX_RAPL_TICK_J * 2**32)
    broken = json.loads(json.dumps(reports[:4]))
    rapl = broken[1]["groups"]["rapl"]["0"]["7"]
    rapl["RAPL_ENERGY_PKG"] = 2**60
    err = _error(readers.read_hwpc, _lines(tmp_path, broken))
    assert (err.line, err.field) == (2, "groups.rapl.0.7.RAPL_ENERGY_PKG")
    assert "absurd RAPL value" in err.reason and "2.68435e+08 J in one tick" in err.reason
    rapl["RAPL_ENERGY_PKG"] = limit
    broken[0]["groups"]["core"]["0"]["3"]["LLC_MISSES"] = 2**60
    counters = readers.read_hwpc(_lines(tmp_path, broken, "ok.jsonl"))
    assert counters["value"].max() == 2**60
    assert readers.rapl_energy(counters)["energy_j"].max() == MAX_RAPL_TICK_J
    lines = (EXAMPLES / "hwpc-csv" / "rapl.csv").read_text().splitlines()
    path = tmp_path / "rapl.csv"
    fields = lines[3].split(",")
    fields[lines[0].split(",").index("RAPL_ENERGY_PKG")] = str(2**60)
    path.write_text("\n".join([*lines[:3], ",".join(fields), *lines[4:]]) + "\n")
    err = _error(readers.read_hwpc, path)
    assert (err.path, err.line, err.field) == (str(path), 4, "RAPL_ENERGY_PKG")
    assert "absurd RAPL value" in err.reason


def test_csv_negative_counter_and_bad_value(tmp_path):
    lines = (EXAMPLES / "hwpc-csv" / "rapl.csv").read_text().splitlines()
    path = tmp_path / "rapl.csv"
    path.write_text("\n".join(lines[:3] + [lines[3].replace(",5", ",-5", 1)] + lines[4:]) + "\n")
    err = _error(readers.read_hwpc, path)
    assert (err.line, err.field) == (4, "RAPL_ENERGY_PKG") and "negative" in str(err)
    path.write_text("\n".join(lines[:5] + [lines[5].replace(",0,7,", ",zero,7,")]) + "\n")
    err = _error(readers.read_hwpc, path)
    assert (err.line, err.field) == (6, "socket")


@pytest.mark.parametrize("target", ["../../etc", "/sys/fs/cgroup/x", "a/../../b"])
def test_target_path_outside_the_folder(tmp_path, reports, target):
    broken = [dict(report) for report in reports[:4]]
    broken[2]["target"] = target
    err = _error(readers.read_hwpc, _lines(tmp_path, broken))
    assert (err.line, err.field) == (3, "target")


def test_power_report_csv_in_another_targets_folder(tmp_path):
    folder = tmp_path / "sensor_test-influxdb"
    folder.mkdir()
    (folder / "PowerReport.csv").write_text(
        "timestamp,sensor,target,power,socket\n1610531482630,sensor_test,mongo,12.5,0\n")
    err = _error(readers.read_power, folder / "PowerReport.csv")
    assert err.field == "target" and "sensor_test-mongo" in str(err)
    nested = tmp_path / "sensor_test-system.slice" / "docker-1.scope"
    nested.mkdir(parents=True)
    (nested / "PowerReport.csv").write_text(
        "timestamp,sensor,target,power,socket\n"
        "1610531482630,sensor_test,system.slice/docker-1.scope,12.5,0\n")
    power = readers.read_power(nested / "PowerReport.csv")
    assert power["target"].tolist() == ["system.slice/docker-1.scope"]


def test_negative_power(tmp_path):
    path = tmp_path / "power.csv"
    path.write_text("timestamp,sensor,target,power\n"
                    "2021-01-13T09:51:22.630+00:00,s,a,1.0\n"
                    "2021-01-13T09:51:23.630+00:00,s,a,-2.0\n")
    err = _error(readers.read_power, path)
    assert (err.line, err.field) == (3, "power")


def test_empty_files(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text("")
    assert "empty file" in str(_error(readers.read_hwpc, path))
