"""Bad reports: an InputError naming the file and the line (and the field where there is one)."""

from __future__ import annotations

import pytest

from joulehouse.errors import InputError
from joulehouse.geopm.readers import read_report
from tests.geopm.test_geopm_traps import LEGACY, REPORT_3X

TESTIO_YAML = "testio_geopm-1.0.0dev30_fm_stream_dgemm_2host.yaml.report"
PAPI_LEGACY = "papi-iogroup-readme_geopm-1.1.0_geopmbench_1host.legacy.report"


def _error(path) -> InputError:
    with pytest.raises(InputError) as caught:
        read_report(path)
    assert caught.value.path == str(path)
    return caught.value


def test_truncated_yaml_report(geopm_peer, tmp_path):
    lines = (geopm_peer / TESTIO_YAML).read_text().splitlines(keepends=True)
    for keep in (690, 500, 356):  # in the last host's totals, regions, at its first line
        path = tmp_path / f"cut{keep}.report"
        path.write_text("".join(lines[:keep]))
        error = _error(path)
        assert "truncated report: host 'mcfly12'" in error.reason
        assert error.line == keep


def test_legacy_missing_its_last_memory_line(geopm_peer, tmp_path):
    lines = (geopm_peer / PAPI_LEGACY).read_text().splitlines(keepends=True)
    hwm = next(n for n, line in enumerate(lines) if "geopmctl memory HWM" in line)
    path = tmp_path / "cut.report"
    path.write_text("".join(lines[:hwm]))
    error = _error(path)
    assert "truncated report: host 'mcfly13' has no 'geopmctl memory HWM' line" in str(error)
    assert error.line == hwm  # the last line left


def test_legacy_host_without_memory_line_before_the_last(write_report):
    path = write_report(LEGACY.replace("    geopmctl memory HWM: 100 kB\n", "", 1))
    error = _error(path)
    assert "host 'a' has no 'geopmctl memory HWM' line" in error.reason
    assert "truncated" not in error.reason
    assert error.line == 13  # host a's Application Totals


def test_invalid_yaml(write_report):
    path = write_report(REPORT_3X.replace("      count: 1.5\n", "     count: 1.5\n"))
    error = _error(path)
    assert error.reason.startswith("invalid YAML")
    assert error.line in (13, 14)


@pytest.mark.parametrize("text, line", [
    (REPORT_3X.replace("""      region: "say "hi" \\now"
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
""", """      region: "empty"
      hash: 0x0000abcd
"""), 10),
    (LEGACY.replace("Region x (0x00000000000000ab):\n    runtime (sec): 1\n"
                    "    sync-runtime (sec): 1\n    package-energy (joules): 10\n    count: 1\n",
                    "Region x (0x00000000000000ab):\n"), 8),
])
def test_region_with_no_fields(write_report, text, line):
    error = _error(write_report(text))
    assert "has no fields" in error.reason
    assert error.line == line


@pytest.mark.parametrize("text, line, field", [
    (REPORT_3X.replace("dram-energy (J): 10", "dram-energy (J): ten"), 16, "dram-energy (J)"),
    (REPORT_3X.replace("gpu-energy (J): 40", "gpu-energy (J): 4O"), 27, "gpu-energy (J)"),
    (REPORT_3X.replace("CPU_ENERGY@package-0: nan", "CPU_ENERGY@package-0: n/a"), 18,
     "CPU_ENERGY@package-0"),
    (LEGACY.replace("package-energy (joules): 30", "package-energy (joules): 3,0"), 23,
     "package-energy (joules)"),
])
def test_numbers_that_are_not_numbers(write_report, text, line, field):
    error = _error(write_report(text))
    assert error.reason.startswith("not a number")
    assert (error.line, error.field) == (line, field)


def test_duplicated_host(write_report):
    host = REPORT_3X[REPORT_3X.index("  0012:"):]
    error = _error(write_report(REPORT_3X + host))
    assert error.reason == "duplicated key '0012'"
    assert error.line == 31
    legacy = LEGACY.replace("Host: b", "Host: a")
    error = _error(write_report(legacy))
    assert (error.reason, error.line) == ("duplicated host 'a'", 19)


def test_not_a_report(write_report):
    error = _error(write_report("just: some yaml\n"))
    assert "not a GEOPM report" in error.reason and error.line == 1
