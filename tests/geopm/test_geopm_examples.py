"""The bundled example reports are the peer files they say they are, and read."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulehouse.geopm.energy import energy_facts_rows, total_energy_j
from joulehouse.geopm.readers import read_report

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "geopm"


@pytest.mark.parametrize("name, shape, hosts, regions, energy_j", [
    ("geopmbench_1host.legacy.report", "legacy", 1, 6, 4406.26 + 328.19),
    ("fm_stream_dgemm_2host.yaml.report", "yaml", 2, 26,
     83998.9 + 8218.69 + 85946.8 + 10142.6),
])
def test_example_report(name, shape, hosts, regions, energy_j):
    report = read_report(EXAMPLES / name)
    assert (report.shape, int(report.header["host_count"][0]), len(report.regions)) == (
        shape, hosts, regions)
    assert total_energy_j(report) == pytest.approx(energy_j)
    assert len(energy_facts_rows(report)) == 2 * hosts  # cpu and dram per host


def test_examples_are_copies_of_the_peer_files(geopm_peer):
    assert (EXAMPLES / "geopmbench_1host.legacy.report").read_bytes() == (
        geopm_peer / "papi-iogroup-readme_geopm-1.1.0_geopmbench_1host.legacy.report"
    ).read_bytes()
    assert (EXAMPLES / "fm_stream_dgemm_2host.yaml.report").read_bytes() == (
        geopm_peer / "testio_geopm-1.0.0dev30_fm_stream_dgemm_2host.yaml.report").read_bytes()
