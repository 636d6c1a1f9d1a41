"""``joulehouse energy gpu`` on the bundled example data root."""

import io
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from joulehouse.cli import main
from joulehouse.gpu.generator import write_example
from joulehouse.gpu.schemas import REPETITION_ENERGY_SCHEMA

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gpu-data"


def run_cli(capsys, *args):
    code = main(["energy", "gpu", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_example_data_energy_table(capsys, tmp_path):
    code, out, err = run_cli(capsys, EXAMPLE)
    # the one repetition written without the external meter says it gives no such fact
    assert code == 0 and err == (
        f"joulehouse: {EXAMPLE / 'clock-limit/bert/877MHz,1065MHz/1'}: left out its external "
        "energy_facts row: no readings: power-external.csv missing or empty\n")
    table = pd.read_csv(io.StringIO(out))
    assert len(table) == 8 and (table["phase"] == "experiment").all()
    assert (table["data_root"] == "gpu-data").all()
    assert table["repetition"].tolist() == sorted(table["repetition"])
    truth = write_example(tmp_path / "again")  # the example is reproducible: same seed
    expected = pd.DataFrame({key: t.windows.iloc[0][["gpu_energy_j", "external_energy_j"]]
                             for key, t in truth.items()}).T.loc[table["repetition"]]
    gpu = expected["gpu_energy_j"].to_numpy(float)
    counter = table["gpu_energy_counter_j"].to_numpy()
    reset = table["counter_resets"].to_numpy() > 0
    np.testing.assert_allclose(counter[~reset], gpu[~reset], rtol=1e-3)
    np.testing.assert_allclose(table["gpu_energy_power_j"], gpu, rtol=5e-3)
    np.testing.assert_allclose(table["gpu_energy_samples_j"], gpu, rtol=5e-3)
    assert table.loc[reset, "repetition"].tolist() == ["power-limit/bert/200W/1"]
    no_external = table["external_energy_j"].isna()
    assert table.loc[no_external, "repetition"].tolist() == ["clock-limit/bert/877MHz,1065MHz/1"]
    np.testing.assert_allclose(table.loc[~no_external, "external_energy_j"],
                               expected.loc[~no_external.to_numpy(), "external_energy_j"]
                               .to_numpy(float), rtol=5e-3)
    clock = table[table["run"] == "877MHz,1065MHz"]
    assert (clock["memory_clock_mhz"] == 877).all() and (clock["sm_clock_mhz"] == 1065).all()


def test_parquet_output_keeps_types(capsys, tmp_path):
    out_file = tmp_path / "energy.parquet"
    code, out, _ = run_cli(capsys, EXAMPLE, "--format", "parquet", "--out", out_file)
    assert code == 0 and out == ""
    table = pd.read_parquet(out_file)
    assert len(table) == 8
    assert str(table["window_start"].dtype) == "datetime64[ns, UTC]"
    REPETITION_ENERGY_SCHEMA.validate(table)


def test_incomplete_skipped_and_bad_reported_while_others_go_out(capsys, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(EXAMPLE / "power-limit", root / "power-limit")
    incomplete = root / "power-limit/bert/150W/0/timestamps.csv"
    incomplete.write_text("".join(incomplete.read_text().splitlines(keepends=True)[:-1]))
    bad = root / "power-limit/bert/250W/1/gpu-power.csv"
    bad.write_bytes(bad.read_bytes()[:-5])
    code, out, err = run_cli(capsys, root, "--timezone", "UTC")
    assert code == 1
    assert "skipped power-limit/bert/150W/0: incomplete" in err
    assert f"power-limit/bert/250W/1: {bad}:" in err and "cut short" in err
    table = pd.read_csv(io.StringIO(out))
    assert table["repetition"].tolist() == [
        "power-limit/bert/150W/1", "power-limit/bert/200W/0", "power-limit/bert/200W/1",
        "power-limit/bert/250W/0"]


def test_root_name_option_names_the_data_root_column(capsys, tmp_path):
    root = tmp_path / "gpu"
    shutil.copytree(EXAMPLE / "power-limit", root / "power-limit")
    (tmp_path / "link").symlink_to(root)
    _, out, _ = run_cli(capsys, tmp_path / "link")
    assert set(pd.read_csv(io.StringIO(out))["data_root"]) == {"gpu"}  # the resolved folder
    code, out, _ = run_cli(capsys, root, "--root-name", "cluster-a")
    assert code == 0 and set(pd.read_csv(io.StringIO(out))["data_root"]) == {"cluster-a"}
    for bad in ("", "a/b"):
        with pytest.raises(SystemExit):
            run_cli(capsys, root, "--root-name", bad)


def test_timezone_and_unit_options(capsys):
    _, utc, _ = run_cli(capsys, EXAMPLE)
    _, shifted, _ = run_cli(capsys, EXAMPLE, "--timezone", "Asia/Tokyo",
                            "--external-power-unit", "cW")
    utc, shifted = pd.read_csv(io.StringIO(utc)), pd.read_csv(io.StringIO(shifted))
    start = pd.to_datetime(utc["window_start"]) - pd.Timedelta(hours=9)
    assert (pd.to_datetime(shifted["window_start"]) == start).all()
    np.testing.assert_allclose(shifted["external_energy_j"], utc["external_energy_j"] * 10)
    with pytest.raises(SystemExit):
        run_cli(capsys, EXAMPLE, "--timezone", "Nowhere/Special")
