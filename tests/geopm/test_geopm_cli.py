"""``joulehouse read geopm`` and ``joulehouse energy geopm``, run as installed (docs/cli.md)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pandas as pd
import pytest

from joulehouse.geopm.energy import host_energy
from joulehouse.geopm.readers import read_report
from tests.test_cli_conventions import joulehouse, one_error_line, tree

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "geopm"
LEGACY = EXAMPLES / "geopmbench_1host.legacy.report"
YAML = EXAMPLES / "fm_stream_dgemm_2host.yaml.report"
EXPECTED = ("expected a GEOPM report (legacy 1.x text, 2.x/3.x YAML or geopmsession report) "
            "or a folder of them")
FRAMES = ["header", "regions", "session", "signals", "totals"]


def _csv(text: str) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(text), dtype={"host": str})


@pytest.fixture
def cut_report(tmp_path) -> Path:
    """The legacy example without its last line (the host's last 'geopmctl' line)."""
    path = tmp_path / "cut.report"
    path.write_bytes(LEGACY.read_bytes().rsplit(b"\n", 2)[0] + b"\n")
    return path


def test_energy_of_the_example_folder_one_row_per_report_host_and_region():
    result = joulehouse("energy", "geopm", EXAMPLES)
    assert result.returncode == 0 and result.stderr == ""
    table = _csv(result.stdout)
    assert list(table.columns) == [
        "report", "host", "section", "region", "hash", "runtime_s", "sync_runtime_s",
        "package_energy_j", "dram_energy_j", "gpu_energy_j", "power_w", "gpu_power_w",
        "frequency_hz"]
    yaml_key, legacy_key = "geopm/" + YAML.name, "geopm/" + LEGACY.name
    # the folder's reports in name order; regions of each host, then its totals
    assert table.groupby("report", sort=False).size().to_dict() == {yaml_key: 2 * (13 + 3),
                                                                    legacy_key: 6 + 3}
    legacy = table[table["report"] == legacy_key].set_index("region")
    assert list(legacy.index) == ["all2all", "sleep", "stream", "model-init", "dgemm",
                                  "MPI_Barrier", "Unmarked Totals", "Epoch Totals",
                                  "Application Totals"]
    all2all = legacy.loc["all2all"]
    assert (all2all["host"], all2all["section"], all2all["hash"]) == (
        "mcfly13", "region", "0x3ddc81bf")
    assert all2all[["runtime_s", "sync_runtime_s", "package_energy_j", "dram_energy_j"]].tolist(
    ) == [10.0041, 9.98393, 1802.26, 120.414]
    assert all2all["power_w"] == pytest.approx(1802.26 / 9.98393, rel=1e-15)
    assert all2all["frequency_hz"] == 2.79765e9 and pd.isna(all2all["gpu_energy_j"])
    application = legacy.loc["Application Totals"]
    assert (application["runtime_s"], application["package_energy_j"],
            application["dram_energy_j"]) == (23.3166, 4406.26, 328.19)
    # legacy totals have no sync-runtime: GEOPM 1.x's power is energy / runtime
    assert pd.isna(application["sync_runtime_s"])
    assert application["power_w"] == pytest.approx(4406.26 / 23.3166, rel=1e-15)
    mcfly12 = table[(table["report"] == yaml_key) & (table["host"] == "mcfly12")]
    sleep = mcfly12.set_index("region").loc["sleep"]
    assert sleep[["runtime_s", "sync_runtime_s", "package_energy_j", "dram_energy_j"]].tolist(
    ) == [275.837, 276.56, 34545.2, 3811.41]
    assert sleep["power_w"] == pytest.approx(34545.2 / 276.56, rel=1e-15)
    assert mcfly12.loc[mcfly12["section"] == "application", "package_energy_j"].tolist() == [
        85946.8]


def test_energy_as_parquet_to_a_file_is_the_cores_host_energy(tmp_path):
    out = tmp_path / "energy.parquet"
    result = joulehouse("energy", "geopm", YAML, "--format", "parquet", "--out", out)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == ""
    table = pd.read_parquet(out)
    assert len(table) == 32 and set(table["report"]) == {YAML.name}
    pd.testing.assert_frame_equal(table, host_energy(read_report(YAML)))


def test_read_writes_every_frame_of_each_report(tmp_path):
    out = tmp_path / "frames"
    result = joulehouse("read", "geopm", LEGACY, YAML, "--out", out)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.splitlines() == [str(out / LEGACY.name), str(out / YAML.name)]
    assert sorted(tree(out)) == sorted([LEGACY.name, YAML.name] + [
        f"{report}/{frame}.csv" for report in (LEGACY.name, YAML.name) for frame in FRAMES])
    header = pd.read_csv(out / YAML.name / "header.csv")
    assert header[["report", "shape", "geopm_version", "agent", "host_count",
                   "region_count"]].values.tolist() == [
        [YAML.name, "yaml", "1.0.0+dev30g4cccfda", "frequency_map", 2, 13]]
    assert header["start_time"].tolist() == ["2019-05-30 14:38:17+00:00"]
    regions = pd.read_csv(out / YAML.name / "regions.csv")
    assert len(regions) == 26 and regions["frequency_hz"].iloc[0] == 1e9
    totals = pd.read_csv(out / LEGACY.name / "totals.csv")
    assert totals[["section", "runtime_s", "geopmctl_memory_hwm_b"]].values.tolist()[-1] == [
        "application", 23.3166, 54416 * 1024]
    signals = pd.read_csv(out / LEGACY.name / "signals.csv")
    assert len(signals) == 17 and set(signals["field"]) == {
        "PAPI_DP_OPS", "PAPI_SP_OPS", "epoch-runtime-ignore (sec)"}
    assert pd.read_csv(out / LEGACY.name / "session.csv").empty


def test_read_as_parquet_keys_a_folders_reports_by_folder_and_name(tmp_path):
    result = joulehouse("read", "geopm", EXAMPLES, "--format", "parquet", "--out", tmp_path)
    assert result.returncode == 0
    regions = pd.read_parquet(tmp_path / "geopm" / LEGACY.name / "regions.parquet")
    assert regions["report"].unique().tolist() == ["geopm/" + LEGACY.name]
    assert regions["package_energy_j"].sum() == pytest.approx(
        1802.26 + 1708.52 + 645.647 + 158.375 + 70.188 + 0.0)


def test_a_missing_or_empty_path_is_exit_2_and_nothing_is_written(tmp_path):
    out = tmp_path / "out"
    result = joulehouse("read", "geopm", YAML, tmp_path / "typo", "--out", out)
    assert one_error_line(result) == f"{tmp_path / 'typo'}: no such file or folder; {EXPECTED}"
    assert not out.exists()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("no reports here\n")
    result = joulehouse("energy", "geopm", tmp_path / "notes")
    assert one_error_line(result) == (f"{tmp_path / 'notes'}: no GEOPM reports in this folder; "
                                      f"{EXPECTED}")
    assert result.stdout == ""


def test_two_reports_of_one_key_are_exit_2(tmp_path):
    (tmp_path / "a").mkdir()
    shutil.copy(YAML, tmp_path / "a")
    result = joulehouse("energy", "geopm", YAML, tmp_path / "a" / YAML.name)
    assert one_error_line(result) == (f"{tmp_path / 'a' / YAML.name}: a second report keyed "
                                      f"{YAML.name!r} (the first is {YAML}): give one of them")


def test_a_bad_report_in_a_folder_is_reported_and_the_good_ones_written(tmp_path, cut_report):
    shutil.copy(YAML, tmp_path)
    out = tmp_path / "out"
    result = joulehouse("read", "geopm", tmp_path, "--out", out)
    assert one_error_line(result, 1) == (f"{cut_report}:112: truncated report: host 'mcfly13' "
                                         "has no 'geopmctl network BW' line (GEOPM writes it "
                                         "last)")
    folder = tmp_path.name
    assert result.stdout.splitlines() == [str(out / folder / YAML.name)]
    assert sorted(tree(out / folder)) == sorted(
        [YAML.name] + [f"{YAML.name}/{frame}.csv" for frame in FRAMES])
    result = joulehouse("energy", "geopm", cut_report, YAML)
    assert one_error_line(result, 1).startswith(f"{cut_report}:112: truncated report")
    assert _csv(result.stdout)["report"].unique().tolist() == [YAML.name]


def test_an_output_folder_that_is_a_file_fails_before_any_work(tmp_path):
    (tmp_path / "taken").write_text("a file\n")
    result = joulehouse("read", "geopm", YAML, "--out", tmp_path / "taken" / "frames")
    assert one_error_line(result) == (f"{tmp_path / 'taken' / 'frames' / YAML.name}: cannot "
                                      f"write: {tmp_path / 'taken'} is a file, not a folder")


def test_when_every_report_fails_an_existing_output_is_left_untouched(tmp_path, cut_report):
    out = tmp_path / "energy.csv"
    out.write_text("kept\n")
    result = joulehouse("energy", "geopm", cut_report, "--out", out)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == ("joulehouse: no report could be read (1 reported "
                                              "above); nothing written")
    assert out.read_text() == "kept\n"
