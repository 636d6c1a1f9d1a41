"""The warehouse: atomic writes, partition keys as file names, reads across column sets; on a
path and on an object store (moto's S3-compatible server)."""

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from joulehouse.warehouse import Warehouse, partition_file_name, partition_key

KEY = "lab/clock-limit/bert/877MHz,1065MHz/0"


@pytest.fixture
def tables(empty_warehouse: Warehouse) -> Warehouse:
    """The tests' name for an empty warehouse, on a path and on the object store."""
    return empty_warehouse


def test_partition_keys_round_trip_through_file_names():
    name = partition_file_name(KEY)
    assert "/" not in name and "," not in name and name.endswith(".parquet")
    assert partition_key(name) == KEY
    with pytest.raises(ValueError):
        partition_file_name("x" * 300)


def parquet_writes_fail_half_way(monkeypatch) -> None:
    """Every Parquet write sends half a file, then fails as a full disk would."""

    def broken(table, sink, **kwargs):
        sink.write(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", broken)


def test_failed_write_keeps_the_stored_partition(tmp_path, monkeypatch):
    tables = Warehouse(tmp_path)
    path = Path(tables.write_partition("energy", KEY, pd.DataFrame({"energy_j": [1.0, 2.0]})))
    before = path.read_bytes()
    parquet_writes_fail_half_way(monkeypatch)
    with pytest.raises(OSError, match="disk full"):
        tables.write_partition("energy", KEY, pd.DataFrame({"energy_j": [9.0]}))
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    assert tables.read_partitions("energy", [KEY])["energy_j"].tolist() == [1.0, 2.0]


def test_replace_and_read_partitions_with_different_columns(tables):
    tables.write_partition("frames", "a", pd.DataFrame({"power_w": [1.0], "util_gpu": [50.0]}))
    tables.write_partition("frames", "b", pd.DataFrame({"power_w": [2.0]}))
    tables.write_partition("frames", "b", pd.DataFrame({"power_w": [3.0], "extra": ["x"]}))
    assert tables.partition_keys("frames") == ["a", "b"]
    whole = tables.read_table("frames").sort_values("power_w")
    assert whole["power_w"].tolist() == [1.0, 3.0]
    assert set(whole.columns) == {"power_w", "util_gpu", "extra"}
    assert tables.read_partitions("frames", ["b"])["extra"].tolist() == ["x"]
    with pytest.raises(FileNotFoundError):
        tables.read_partitions("frames", ["missing"])
    assert tables.partitions_without("frames", ["a", "b"], "extra") == ["a"]
    assert tables.partitions_without("frames", ["a", "b"], "power_w") == []


def test_unpartitioned_table_and_bad_names(tables):
    tables.write_table("settings", pd.DataFrame({"run": ["150W"]}))
    tables.write_table("settings", pd.DataFrame({"run": ["150W", "250W"]}))
    assert tables.read_table("settings")["run"].tolist() == ["150W", "250W"]
    assert tables.read_table("never_written").empty
    for bad in ("../outside", "/abs", ""):
        with pytest.raises(ValueError):
            tables.table_path(bad)


def test_repetition_energy_round_trips_with_its_dtypes(tables, tmp_path):
    from joulehouse.gpu.energy import repetition_energy
    from joulehouse.gpu.generator import RepetitionSpec, write_repetition
    from joulehouse.gpu.layout import RepetitionRef
    from joulehouse.gpu.readers import read_repetition
    from joulehouse.gpu.schemas import REPETITION_ENERGY_SCHEMA

    ref = RepetitionRef.from_key(tmp_path / "data", "power-limit/bert/250W/0")
    write_repetition(ref.path, RepetitionSpec(with_external=False), seed=0)
    energy = repetition_energy(read_repetition(ref))
    assert energy["epoch"].isna().any() and energy["external_gap_count"].isna().all()
    tables.write_partition("gpu_repetition_energy", ref.key, energy)
    back = tables.read_partitions("gpu_repetition_energy", [ref.key])
    pd.testing.assert_frame_equal(back, energy)
    REPETITION_ENERGY_SCHEMA.validate(back)
    # Int64 stays Int64 when a partition without the column is read alongside
    tables.write_partition("gpu_repetition_energy", "other", energy[["repetition"]].iloc[:1])
    assert tables.read_table("gpu_repetition_energy")["epoch"].dtype == "Int64"


def test_a_failed_upload_keeps_the_stored_object(tables, monkeypatch):
    tables.write_partition("energy", KEY, pd.DataFrame({"energy_j": [1.0, 2.0]}))
    before = tables.partition_version("energy", KEY)
    parquet_writes_fail_half_way(monkeypatch)
    with pytest.raises(OSError, match="disk full"):
        tables.write_partition("energy", KEY, pd.DataFrame({"energy_j": [9.0]}))
    monkeypatch.undo()
    assert tables.partition_version("energy", KEY) == before
    assert tables.partition_keys("energy") == [KEY]
    assert tables.read_partitions("energy", [KEY])["energy_j"].tolist() == [1.0, 2.0]
    tables.write_partition("energy", KEY, pd.DataFrame({"energy_j": [3.0, 4.0, 5.0]}))
    assert tables.partition_version("energy", KEY) != before
    assert tables.has_partition("energy", KEY) and not tables.has_partition("energy", "x")
    with pytest.raises(FileNotFoundError):
        tables.partition_version("energy", "x")


def test_the_object_store_holds_the_bytes_of_the_path_layout(object_store, s3_warehouse,
                                                             tmp_path):
    local = Warehouse(tmp_path / "warehouse")
    remote = Warehouse(s3_warehouse, object_store.store)
    frame = pd.DataFrame({"power_w": [1.5, 2.5], "host": ["a", "b"]})
    for tables in (local, remote):
        tables.write_partition("frames/gpu_power", KEY, frame)
        tables.write_table("settings", frame)
    assert list(remote.table_files()) == list(local.table_files()) == [
        "frames/gpu_power", "settings"]
    for path, remote_path in zip(local.table_files()["frames/gpu_power"] +
                                 local.table_files()["settings"],
                                 remote.table_files()["frames/gpu_power"] +
                                 remote.table_files()["settings"], strict=True):
        assert remote_path.path.endswith(path.path.removeprefix(str(tmp_path)))
        with remote.filesystem.open_input_stream(remote_path.path) as stored:
            assert stored.read() == Path(path.path).read_bytes()
    assert remote.location("settings") == f"{s3_warehouse}/settings"
    with pytest.raises(ValueError, match="object store"):
        remote.table_dir("settings")
