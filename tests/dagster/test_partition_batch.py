"""Two assets of each partition built in one task (``PartitionBatch.run_both``): each
partition's outcome per asset is the one the two separate passes give, and the GPU
energy computed from the frames in memory is the one computed from the stored frames."""

from types import SimpleNamespace

import dagster as dg
import pandas as pd
import pandas.testing as pdt

from assets.gpu import ENERGY_TABLE, store_energy, store_repetition, store_repetition_and_energy
from assets.reporting import (
    FRAMES_FAILED,
    PartitionBatch,
    Stored,
    dynamic_partitions_read_once,
)
from joulehouse.errors import InputError
from joulehouse.gpu.generator import RepetitionSpec, write_data_root
from joulehouse.gpu.layout import find_repetitions, root_name
from joulehouse.warehouse import Warehouse

KEYS = ["good", "bad-frames", "bad-energy", "also-good"]
FRAMES_ERROR = InputError("rep/gpu-power.csv", "power: not a number", line=3)
ENERGY_ERROR = InputError("rep/timestamps.csv", "train ends before it starts", line=2)


def context() -> SimpleNamespace:
    return SimpleNamespace(partition_keys=KEYS, log=SimpleNamespace(error=lambda message: None))


def frames_of(key: str) -> Stored:
    if key == "bad-frames":
        raise FRAMES_ERROR
    return Stored.of({"timestamps": pd.DataFrame({"t": range(len(key))})})


def energy_of(key: str) -> Stored:
    if key == "bad-energy":
        raise ENERGY_ERROR
    return Stored.of({"energy": pd.DataFrame({"energy_j": [1.5, 2.5]})})


def both(key: str) -> tuple[Stored, Stored | InputError]:
    frames = frames_of(key)
    try:
        return frames, energy_of(key)
    except InputError as err:
        return frames, err


def outcome(batch: PartitionBatch) -> tuple:
    return ({key: meta["dagster/row_count"].value for key, meta in batch.stored.items()},
            batch.failed, batch.skipped)


def test_one_task_per_partition_reports_what_two_passes_report():
    first, second = PartitionBatch.run_both(context(), both, lambda name: None,
                                            lambda name: None, arguments=lambda key: (key,))
    frames = PartitionBatch.run(context(), frames_of, lambda name: None)
    energy = PartitionBatch.run(context(), energy_of, lambda name: None,
                                skip={key: FRAMES_FAILED for key in frames.failed})
    assert outcome(first) == outcome(frames) == (
        {"good": 4, "bad-energy": 10, "also-good": 9}, {"bad-frames": FRAMES_ERROR}, {})
    assert outcome(second) == outcome(energy) == (
        {"good": 2, "also-good": 2}, {"bad-energy": ENERGY_ERROR},
        {"bad-frames": FRAMES_FAILED})
    assert first.errors() == frames.errors() and second.errors() == energy.errors()


def test_energy_from_frames_in_memory_is_the_energy_from_stored_frames(tmp_path):
    root = tmp_path / "lab"
    write_data_root(root, {"power-limit": {"bert": ["150W", "250W"]}}, repetitions=2,
                    base=RepetitionSpec(duration_s=8.0, epochs=2))
    together, apart = Warehouse(str(tmp_path / "together")), Warehouse(str(tmp_path / "apart"))
    refs = find_repetitions(root)
    assert len(refs) == 4
    for ref in refs:
        key = f"lab/{ref.key}"
        frames, energy = store_repetition_and_energy(together, key, ref, "UTC", "mW",
                                                     root_name(root), 5.0)
        for got, expected in ((frames, store_repetition(apart, key, ref, "UTC", "mW")),
                              (energy, store_energy(apart, key, ref, root_name(root), 5.0))):
            assert got.rows == expected.rows and got.metadata == expected.metadata
            assert {name: frame.dtypes.to_dict() for name, frame in got.columns.items()} == {
                name: frame.dtypes.to_dict() for name, frame in expected.columns.items()}
        stored = together.read_partitions(ENERGY_TABLE, [key])
        pdt.assert_frame_equal(stored, apart.read_partitions(ENERGY_TABLE, [key]),
                               check_exact=True)
        assert stored["gpu_energy_counter_j"].gt(0).all()


def test_a_bug_in_the_second_asset_is_raised_after_the_first_is_reported():
    """An error of the energy that is no bad input fails the step as it did with two
    passes: after the frames' results, with every partition's frames reported."""
    def buggy(key: str) -> tuple[Stored, Stored | Exception]:
        frames, energy = both(key)
        return frames, ZeroDivisionError("a bug") if key == "also-good" else energy

    first, second = PartitionBatch.run_both(context(), buggy, lambda name: None,
                                            lambda name: None, arguments=lambda key: (key,))
    assert set(first.stored) == {"good", "bad-energy", "also-good"}
    assert isinstance(second.error, ZeroDivisionError)


def test_dynamic_partitions_are_read_once_while_a_run_reports(monkeypatch):
    """``context.add_asset_metadata`` reads the dynamic partitions at each call: while a
    run's partitions are reported, one read serves them all; after it, new keys show."""
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("gpu_repetitions", ["a", "b"])
        reads = []
        storage = instance.event_log_storage
        original = type(storage).get_dynamic_partitions
        monkeypatch.setattr(type(storage), "get_dynamic_partitions",
                            lambda self, name: reads.append(name) or original(self, name))
        with dynamic_partitions_read_once(instance):
            for _ in range(100):
                assert instance.get_dynamic_partitions("gpu_repetitions") == ["a", "b"]
            with dynamic_partitions_read_once(instance):  # nested: the outer read serves
                assert instance.get_dynamic_partitions("gpu_repetitions") == ["a", "b"]
            assert instance.get_dynamic_partitions("gpu_repetitions") == ["a", "b"]
        assert reads == ["gpu_repetitions"]
        instance.add_dynamic_partitions("gpu_repetitions", ["c"])
        assert instance.get_dynamic_partitions("gpu_repetitions") == ["a", "b", "c"]
