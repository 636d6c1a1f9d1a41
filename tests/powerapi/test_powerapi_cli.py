"""``joulehouse read powerapi`` and ``joulehouse energy powerapi``, run as the installed command
on the bundled example reports (docs/cli.md): the exact rows, exit codes 0/1/2, one-line errors."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pandas as pd
import pytest
from test_cli_conventions import joulehouse, one_error_line, tree

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "powerapi"
HWPC = EXAMPLES / "smartwatts_timeline.jsonl"
POWER = EXAMPLES / "power.jsonl"
FIXTURE_J = 12.19696044921875  # the ten RAPL_ENERGY_PKG values x 2^-32
EXPECTED = ("expected PowerAPI report files (hwpc-sensor's HWPC reports, a formula's power "
            "reports: JSON, JSON lines, CSV, MongoDB exports) or folders of them")
START, END = "2021-01-13 09:51:21.626000+00:00", "2021-01-13 09:51:31.667000+00:00"
#: Estimated J of each target over the fixture's 10.041 s: sum of power x tick of power.jsonl.
ESTIMATED_J = {"influxdb": 0.928093265, "mongo": 5.36458944, "powerapi-sensor": 4.684579202,
               "rapl": 12.196961691}
CGROUPS_J = ESTIMATED_J["influxdb"] + ESTIMATED_J["mongo"] + ESTIMATED_J["powerapi-sensor"]


def csv_rows(text: str) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(text))


def test_energy_of_the_example_one_row_per_target_and_window():
    result = joulehouse("energy", "powerapi", HWPC, POWER)
    assert result.returncode == 0 and result.stderr == ""
    table = csv_rows(result.stdout)
    assert list(table.columns) == ["sensor", "target", "component", "window_start", "window_end",
                                   "duration_s", "covered_s", "energy_j", "method", "measured_j",
                                   "estimated_total_j", "relative_error"]
    assert table[["target", "method"]].values.tolist() == [
        ["influxdb", "estimated"], ["mongo", "estimated"], ["powerapi-sensor", "estimated"],
        ["rapl", "estimated"], ["all", "measured"]]
    assert set(table["sensor"]) == {"sensor_test"} and set(table["component"]) == {"cpu"}
    assert set(table["window_start"]) == {START} and set(table["window_end"]) == {END}
    assert table["duration_s"].tolist() == [10.041] * 5
    assert table["covered_s"].to_numpy() == pytest.approx([10.041] * 5, abs=1e-9)  # no gap
    energy = dict(zip(table["target"], table["energy_j"], strict=True))
    assert energy["all"] == FIXTURE_J  # written with every digit
    for target, joules in ESTIMATED_J.items():
        assert energy[target] == pytest.approx(joules, rel=1e-12)
    assert table["measured_j"].tolist() == [FIXTURE_J] * 5
    assert table["estimated_total_j"].tolist() == pytest.approx([CGROUPS_J] * 5, rel=1e-12)
    # the generated estimates are 90 % of the measurement (examples/powerapi/PROVENANCE.md)
    assert table["relative_error"].tolist() == pytest.approx(
        [(CGROUPS_J - FIXTURE_J) / FIXTURE_J] * 5, rel=1e-12)
    assert table["relative_error"].iloc[0] == pytest.approx(-0.1, abs=1e-6)


def test_the_folder_of_every_form_counts_each_report_once_in_any_window():
    """examples/powerapi holds the HWPC reports twice (JSON lines and hwpc-sensor CSV)."""
    two_files = csv_rows(joulehouse("energy", "powerapi", HWPC, POWER).stdout)
    result = joulehouse("energy", "powerapi", EXAMPLES)
    assert result.returncode == 0
    assert result.stderr == (f"joulehouse: skipped {EXAMPLES / 'PROVENANCE.md'}: not a PowerAPI "
                             "report file\n")
    pd.testing.assert_frame_equal(csv_rows(result.stdout), two_files)
    windows = csv_rows(joulehouse("energy", "powerapi", EXAMPLES, "--window", "2s",
                                  "--quiet").stdout)
    # 21.626-22, 22-24, ..., 30-31.667: six windows per target
    assert windows.groupby("target").size().to_dict() == {target: 6 for target in
                                                          ["all", *ESTIMATED_J]}
    assert windows["window_start"].iloc[5 * 5] == "2021-01-13 09:51:30+00:00"
    by_target = windows.groupby("target")["energy_j"].sum()
    assert by_target["all"] == pytest.approx(FIXTURE_J, rel=1e-12)
    assert by_target["mongo"] == pytest.approx(ESTIMATED_J["mongo"], rel=1e-12)
    measured = windows[windows["method"] == "measured"]
    assert (measured["energy_j"] == measured["measured_j"]).all()


def test_energy_as_parquet_to_a_file(tmp_path):
    out = tmp_path / "energy.parquet"
    result = joulehouse("energy", "powerapi", HWPC, POWER, "--format", "parquet", "--out", out)
    assert result.returncode == 0 and result.stdout == ""
    table = pd.read_parquet(out)
    assert len(table) == 5 and str(table["window_start"].dtype) == "datetime64[ns, UTC]"
    assert table.loc[table["method"] == "measured", "energy_j"].tolist() == [FIXTURE_J]


def test_read_writes_the_frames(tmp_path):
    out = tmp_path / "frames" / "new"
    result = joulehouse("read", "powerapi", HWPC, POWER, "--out", out, "--format", "parquet")
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.splitlines() == [f"{out}/counters.parquet: 1870 rows",
                                          f"{out}/rapl_energy.parquet: 10 rows",
                                          f"{out}/power_reports.parquet: 40 rows"]
    counters = pd.read_parquet(out / "counters.parquet")
    rapl = counters[counters["event"] == "RAPL_ENERGY_PKG"]
    assert len(rapl) == 10 and rapl["value"].sum() * 2.0**-32 == FIXTURE_J
    assert set(counters["target"]) == {"all", "influxdb", "mongo", "powerapi-sensor"}
    energy = pd.read_parquet(out / "rapl_energy.parquet")
    assert energy["energy_j"].iloc[0] == 5709496320 * 2.0**-32 and energy["energy_j"].sum() == (
        FIXTURE_J)
    power = pd.read_parquet(out / "power_reports.parquet")
    assert power.groupby("target")["power_w"].size().to_dict() == {
        "influxdb": 10, "mongo": 10, "powerapi-sensor": 10, "rapl": 10}
    assert power["power_w"].iloc[0] == 1.32405 and power["formula"].iloc[0] == "RAPL_ENERGY_PKG"


def test_read_as_csv_into_the_current_folder(tmp_path):
    result = joulehouse("read", "powerapi", EXAMPLES / "hwpc-csv", cwd=tmp_path)
    assert result.returncode == 0
    assert sorted(tree(tmp_path)) == ["counters.csv", "rapl_energy.csv"]  # no power reports
    energy = pd.read_csv(tmp_path / "rapl_energy.csv")
    assert energy.columns.tolist() == ["timestamp", "sensor", "target", "socket", "cpu",
                                       "domain", "energy_j"]
    assert energy["timestamp"].iloc[0] == "2021-01-13 09:51:22.630000+00:00"
    assert energy["energy_j"].sum() == pytest.approx(FIXTURE_J, rel=1e-15)


# --- paths that must exist and hold something; bad files ----------------------------------------

def test_a_missing_path_is_exit_2_and_nothing_is_written(tmp_path):
    for command in (["energy", "powerapi", HWPC, tmp_path / "typo", "--out",
                     tmp_path / "energy.csv"],
                    ["read", "powerapi", HWPC, tmp_path / "typo", "--out", tmp_path / "frames"]):
        result = joulehouse(*command)
        assert one_error_line(result) == f"{tmp_path / 'typo'}: no such file or folder; {EXPECTED}"
        assert result.stdout == "" and tree(tmp_path) == {}


def test_a_folder_without_reports_is_exit_2(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("no reports here\n")
    result = joulehouse("energy", "powerapi", tmp_path / "notes")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"joulehouse: skipped {tmp_path / 'notes' / 'README.md'}: not a PowerAPI report file",
        f"joulehouse: {tmp_path / 'notes'}: no HWPC or power report files; {EXPECTED}"]
    result = joulehouse("read", "powerapi", tmp_path / "notes" / "README.md", "--out",
                        tmp_path / "notes", "-q")
    assert result.returncode == 2 and sorted(tree(tmp_path)) == ["notes", "notes/README.md"]


def test_bad_options_are_usage_errors():
    result = joulehouse("energy", "powerapi", HWPC, "--window", "soon")
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == (
        "joulehouse energy powerapi: error: argument --window: not a positive time span: "
        "'soon' (e.g. 1min, 10s, 1h)")
    result = joulehouse("read", "powerapi", HWPC, "--timezone", "Mars/Olympus")
    assert result.returncode == 2 and "argument --timezone" in result.stderr
    result = joulehouse("read", "powerapi", HWPC, "--out", HWPC)
    assert one_error_line(result) == (f"{HWPC}: not a folder; expected the folder to write the "
                                      "frames to")


def _tree_with_a_bad_file(root: Path) -> Path:
    """The example's two files, and a third whose second power report is negative."""
    (root / "sensor").mkdir(parents=True)
    (root / "formula").mkdir()
    shutil.copy(HWPC, root / "sensor" / HWPC.name)
    shutil.copy(POWER, root / "formula" / POWER.name)
    lines = POWER.read_text().splitlines(keepends=True)[:3]
    lines[1] = lines[1].replace('"power":0.050524', '"power":-0.5')
    bad = root / "formula" / "other.jsonl"
    bad.write_text("".join(lines))
    return bad


def test_a_tree_with_one_bad_file_writes_the_others_and_exits_1(tmp_path):
    bad = _tree_with_a_bad_file(tmp_path / "reports")
    message = f"joulehouse: {bad}:2: power: negative or missing power -0.5\n"
    result = joulehouse("energy", "powerapi", tmp_path / "reports")
    assert result.returncode == 1 and result.stderr == message
    expected = csv_rows(joulehouse("energy", "powerapi", HWPC, POWER).stdout)
    pd.testing.assert_frame_equal(csv_rows(result.stdout), expected)
    result = joulehouse("read", "powerapi", tmp_path / "reports", "--out", tmp_path / "frames")
    assert result.returncode == 1 and result.stderr == message
    assert [line.split(": ")[1] for line in result.stdout.splitlines()] == [
        "1870 rows", "10 rows", "40 rows"]


def test_a_list_with_one_bad_file_writes_the_others_and_exits_1(tmp_path):
    bad = _tree_with_a_bad_file(tmp_path)
    result = joulehouse("energy", "powerapi", bad, HWPC)
    assert result.returncode == 1
    assert result.stderr == f"joulehouse: {bad}:2: power: negative or missing power -0.5\n"
    table = csv_rows(result.stdout)  # the measurement alone: no power report was read
    assert table[["target", "method", "energy_j"]].values.tolist() == [
        ["all", "measured", FIXTURE_J]]
    assert table["estimated_total_j"].isna().all() and table["relative_error"].isna().all()


def test_a_file_that_cannot_be_opened_is_reported_and_the_others_written(tmp_path):
    folder = tmp_path / "reports"
    folder.mkdir()
    shutil.copy(HWPC, folder / HWPC.name)
    (folder / "gone.jsonl").symlink_to(tmp_path / "deleted.jsonl")
    result = joulehouse("energy", "powerapi", folder)
    assert result.returncode == 1
    assert result.stderr == (f"joulehouse: {folder / 'gone.jsonl'}: cannot read: No such file or "
                             "directory\n")
    assert csv_rows(result.stdout)["energy_j"].tolist() == [FIXTURE_J]


def test_when_every_file_fails_an_existing_output_is_left_untouched(tmp_path):
    bad = _tree_with_a_bad_file(tmp_path)
    out = tmp_path / "energy.csv"
    out.write_text("kept\n")
    result = joulehouse("energy", "powerapi", bad, "--out", out)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == ("joulehouse: no report file could be read "
                                              "(1 reported above); nothing written")
    assert out.read_text() == "kept\n"
