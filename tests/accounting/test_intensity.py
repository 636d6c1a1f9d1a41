"""Reading grid intensity: Electricity Maps exports and OWID yearly figures."""

import hashlib
from pathlib import Path

import pandas as pd
import pytest

from joulehouse.accounting import generator, intensity
from joulehouse.errors import InputError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_electricity_maps_intervals_run_to_the_next_row_and_keep_holes(tmp_path):
    frame = generator.electricity_maps_frame("DE", "Germany", "2022-01-01", "2022-01-01 04:00")
    frame = frame.drop(index=2)  # 02:00 missing: a hole of one hour
    path = generator.write_csv(frame, tmp_path / "de.csv")
    table = intensity.read_file(path)
    lca = table[table["basis"] == "lca"]
    assert lca["interval_start"].dt.strftime("%H:%M").tolist() == ["00:00", "01:00", "03:00"]
    assert lca["interval_end"].dt.strftime("%H:%M").tolist() == ["01:00", "02:00", "04:00"]
    assert lca["intensity_g_per_kwh"].tolist() == frame[intensity.EM_BASES["lca"][0]].tolist()
    direct = table[table["basis"] == "direct"]["intensity_g_per_kwh"]
    assert direct.tolist() == frame[intensity.EM_BASES["direct"][0]].tolist()
    assert set(table["kind"]) == {"series"} and set(table["zone"]) == {"DE"}
    assert set(table["digest"]) == {hashlib.sha256(path.read_bytes()).hexdigest()}


def test_owid_yearly_rows_are_calendar_years(tmp_path):
    path = generator.write_csv(generator.owid_frame({("France", "FRA"): {2021: 58.5}}),
                               tmp_path / "owid.csv")
    row = intensity.read_file(path).iloc[0]
    assert (row["zone"], row["kind"], row["basis"]) == ("FRA", "yearly", "lca")
    assert row["interval_start"] == pd.Timestamp("2021-01-01", tz="UTC")
    assert row["interval_end"] == pd.Timestamp("2022-01-01", tz="UTC")
    assert row["intensity_g_per_kwh"] == 58.5


def test_bad_value_names_file_line_and_field(tmp_path):
    frame = generator.electricity_maps_frame("DE", "Germany", "2022-01-01", "2022-01-01 03:00")
    frame[intensity.EM_BASES["lca"][0]] = frame[intensity.EM_BASES["lca"][0]].astype(object)
    frame.iloc[1, frame.columns.get_loc(intensity.EM_BASES["lca"][0])] = "n/a"
    path = generator.write_csv(frame, tmp_path / "bad.csv")
    with pytest.raises(InputError, match=r"bad\.csv:3: Carbon Intensity .*\(LCA\): not a number"):
        intensity.read_file(path)


def test_unknown_format_and_overlapping_files_are_errors(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="x.csv:1: neither an Electricity Maps"):
        intensity.read_file(tmp_path / "x.csv")
    (tmp_path / "x.csv").unlink()
    for name in ("a.csv", "b.csv"):
        generator.write_csv(generator.electricity_maps_frame("DE", "Germany", "2022-01-01",
                                                             "2022-01-02"), tmp_path / name)
    with pytest.raises(InputError, match="b.csv: zone DE .*overlaps a.csv"):
        intensity.read_folder(tmp_path)


def test_bundled_example_reads():
    table = intensity.read_folder(EXAMPLES / "intensity")
    assert {("DE", "series"), ("FR", "series"), ("DEU", "yearly"), ("FRA", "yearly")} <= set(
        zip(table["zone"], table["kind"], strict=True))
