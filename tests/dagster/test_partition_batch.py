"""Two assets of each entry built in one task (``assets.blocks.run_entries_both``): each
entry's outcome per asset is the one the two separate passes (``run_entries``) give, and
the GPU energy computed from the frames in memory is the one computed from the stored
frames; a batch's partitions metadata and checks (``PartitionBatch``)."""

import pickle

import dagster as dg
import pandas as pd
import pandas.testing as pdt
import pytest

from assets.blocks import run_entries, run_entries_both
from assets.gpu import ENERGY_TABLE, store_energy, store_repetition, store_repetitions_and_energy
from assets.reporting import (
    BothOutcome,
    PartitionBatch,
    Stored,
    add_partitions_metadata,
    partitions_per_task,
    returned,
)
from joulehouse.errors import InputError
from joulehouse.gpu.generator import RepetitionSpec, write_data_root
from joulehouse.gpu.layout import find_repetitions, root_name
from joulehouse.leftout import LeftOut
from joulehouse.warehouse import Warehouse
from resources.workers import InProcessExecutor
from tests.dagster_sqlite import empty_instance

KEYS = ["good", "bad-frames", "bad-energy", "also-good"]
#: The entries in two blocks, as a run over two days holds them.
BLOCKS = {"day-1": KEYS[:3], "day-2": KEYS[3:]}
FRAMES_ERROR = InputError("rep/gpu-power.csv", "power: not a number", line=3)
ENERGY_ERROR = InputError("rep/timestamps.csv", "train ends before it starts", line=2)


def frames_of(key: str) -> Stored:
    if key == "bad-frames":
        raise FRAMES_ERROR
    return Stored.of({"timestamps": pd.DataFrame({"t": range(len(key))})})


def energy_of(key: str) -> Stored:
    if key == "bad-energy":
        raise ENERGY_ERROR
    return Stored.of({"energy": pd.DataFrame({"energy_j": [1.5, 2.5]})})


def both(key: str) -> BothOutcome:
    try:
        frames = frames_of(key)
    except InputError as err:
        return err, None
    try:
        return frames, energy_of(key)
    except InputError as err:
        return frames, err


def each(outcome_of):
    """A task of ``run_entries_both`` from a per-entry function (its arguments: the key)."""
    return lambda tasks: [outcome_of(*arguments) for arguments in tasks]


def outcome(outcomes: dict) -> tuple:
    """Entry -> rows stored, and entry -> error."""
    return ({key: sum(one.rows.values()) for key, one in outcomes.items()
             if isinstance(one, Stored)},
            {key: one for key, one in outcomes.items() if isinstance(one, InputError)})


@pytest.mark.parametrize("per_task", [1, 3, 16])
def test_one_task_per_entry_reports_what_two_passes_report(per_task):
    first, second, error = run_entries_both(BLOCKS, each(both), lambda key: (key,),
                                            InProcessExecutor(), per_task)
    frames = run_entries(BLOCKS, frames_of, lambda key: (key,), InProcessExecutor())
    failed = {key for key, one in frames.items() if isinstance(one, InputError)}
    energy = run_entries(BLOCKS, energy_of, lambda key: (key,), InProcessExecutor(),
                         skip=failed)
    assert outcome(first) == outcome(frames) == (
        {"good": 4, "bad-energy": 10, "also-good": 9}, {"bad-frames": FRAMES_ERROR})
    assert outcome(second) == outcome(energy) == (
        {"good": 2, "also-good": 2}, {"bad-energy": ENERGY_ERROR})
    assert set(second) == set(energy) == {"good", "bad-energy", "also-good"}
    assert error is None


@pytest.mark.parametrize("unresolved", ["good", "bad-energy", "also-good"])
def test_an_entry_whose_arguments_fail_fails_and_the_others_are_reported(unresolved):
    """A key that cannot even be resolved (first, completing a task, last) fails alone,
    its energy not computed; every other entry is reported as without it."""
    def arguments(key: str) -> tuple:
        if key == unresolved:
            raise FRAMES_ERROR
        return (key,)

    first, second, _ = run_entries_both(BLOCKS, each(both), arguments, InProcessExecutor(), 2)
    assert outcome(first)[1] == {"bad-frames": FRAMES_ERROR, unresolved: FRAMES_ERROR}
    assert set(outcome(first)[0]) == {"good", "bad-energy", "also-good"} - {unresolved}
    assert set(second) == {"good", "bad-energy", "also-good"} - {unresolved}


def test_partitions_per_task_leave_each_worker_two_tasks():
    assert [partitions_per_task(n, 2) for n in (0, 1, 3, 4, 20, 64, 65, 10_000)] == [
        1, 1, 1, 1, 5, 16, 16, 16]
    assert partitions_per_task(100, 1) == 16 and partitions_per_task(100, 0) == 16


def test_energy_from_frames_in_memory_is_the_energy_from_stored_frames(tmp_path):
    root = tmp_path / "lab"
    write_data_root(root, {"power-limit": {"bert": ["150W", "250W"]}}, repetitions=2,
                    base=RepetitionSpec(duration_s=8.0, epochs=2))
    together, apart = Warehouse(str(tmp_path / "together")), Warehouse(str(tmp_path / "apart"))
    refs = find_repetitions(root)
    assert len(refs) == 4
    keys = [f"lab/{ref.key}" for ref in refs]
    outcomes = store_repetitions_and_energy([(together, key, ref, "UTC", "mW", root_name(root),
                                              5.0) for key, ref in zip(keys, refs, strict=True)])
    for key, ref, (frames, energy) in zip(keys, refs, outcomes, strict=True):
        for got, expected in ((frames, store_repetition(apart, key, ref, "UTC", "mW")),
                              (energy, store_energy(apart, key, ref, root_name(root), 5.0))):
            assert got.rows == expected.rows and got.metadata == expected.metadata
            assert {name: frame.dtypes.to_dict() for name, frame in got.columns.items()} == {
                name: frame.dtypes.to_dict() for name, frame in expected.columns.items()}
        stored = together.read_partitions(ENERGY_TABLE, [key])
        pdt.assert_frame_equal(stored, apart.read_partitions(ENERGY_TABLE, [key]),
                               check_exact=True)
        assert stored["gpu_energy_counter_j"].gt(0).all()


def test_a_bug_in_the_second_asset_is_returned_with_every_first_outcome():
    """An error of the energy that is no bad input is returned beside every entry's frames
    (the step raises it after the frames' results, as it did with two passes)."""
    def buggy(key: str) -> BothOutcome:
        frames, energy = both(key)
        return frames, ZeroDivisionError("a bug") if key == "also-good" else energy

    first, second, error = run_entries_both(BLOCKS, each(buggy), lambda key: (key,),
                                            InProcessExecutor(), 16)
    assert set(outcome(first)[0]) == {"good", "bad-energy", "also-good"}
    assert "also-good" not in second and isinstance(error, ZeroDivisionError)


def test_an_error_a_worker_returns_keeps_its_traceback_once_pickled_back(tmp_path):
    """``returned``: a bug's traceback goes with it as a note (pickled back from a worker, a
    returned error has no ``__traceback__``, unless a library such as dask's tblib taught
    pickle to keep it); bad input is returned as it is."""
    def energy_of_nothing():
        return 1 / 0

    try:
        energy_of_nothing()
    except ZeroDivisionError as err:
        bug = pickle.loads(pickle.dumps(returned(err)))
    assert "energy_of_nothing" in bug.__notes__[0]
    try:
        raise InputError(tmp_path / "report", "no Application Totals", line=3)
    except InputError as err:
        bad = returned(err)
    assert not hasattr(bad, "__notes__")


def _materialized_metadata(add: str) -> dict[str, dict]:
    """Each partition's materialization metadata of a run over three of four dynamic
    partitions of a two-asset step, reported by ``add``: Dagster's call per partition, or
    :func:`add_partitions_metadata` once."""
    parts = dg.DynamicPartitionsDefinition(name="reps")

    @dg.multi_asset(specs=[dg.AssetSpec("frames", partitions_def=parts),
                           dg.AssetSpec("energy", partitions_def=parts)])
    def both(context: dg.AssetExecutionContext):
        for asset in ("frames", "energy"):
            metadata = {key: {"rows": len(key), "asset": asset} for key in context.partition_keys}
            if add == "dagster":
                for key, values in metadata.items():
                    context.add_asset_metadata(values, asset_key=asset, partition_key=key)
                context.add_asset_metadata({"rows": 0}, asset_key=asset, partition_key="b")
            else:
                add_partitions_metadata(context, dg.AssetKey(asset), metadata)
                add_partitions_metadata(context, dg.AssetKey(asset), {"b": {"rows": 0}})
            yield dg.MaterializeResult(asset_key=asset, metadata={"common": 1})

    with empty_instance() as instance:
        instance.add_dynamic_partitions("reps", ["a", "b", "cc", "ddd"])
        assert dg.materialize([both], instance=instance, tags={
            "dagster/asset_partition_range_start": "a",
            "dagster/asset_partition_range_end": "cc"}).success
        return {f"{record.asset_key.to_user_string()}/{record.partition_key}":
                {name: value.value for name, value in
                 record.asset_materialization.metadata.items()}
                for asset in ("frames", "energy")
                for record in instance.fetch_materializations(
                    dg.AssetKey(asset), limit=10).records}


def test_partitions_metadata_at_once_is_what_dagster_adds_one_by_one():
    """Each partition's materialization carries its own metadata (a later addition for a
    partition merged over the earlier), the run's common metadata beside it, exactly as
    with ``context.add_asset_metadata`` per partition."""
    at_once = _materialized_metadata("joulehouse")
    assert at_once == _materialized_metadata("dagster")
    assert at_once["frames/a"] == {"rows": 1, "asset": "frames", "common": 1}
    assert at_once["energy/b"] == {"rows": 0, "asset": "energy", "common": 1}
    assert at_once["energy/cc"] == {"rows": 2, "asset": "energy", "common": 1}
    assert set(at_once) == {f"{asset}/{key}" for asset in ("frames", "energy")
                            for key in ("a", "b", "cc")}


def test_partitions_metadata_outside_the_run_is_refused():
    parts = dg.DynamicPartitionsDefinition(name="reps")

    @dg.asset(partitions_def=parts)
    def frames(context: dg.AssetExecutionContext):
        add_partitions_metadata(context, context.asset_key, {"ddd": {"rows": 3}})

    with empty_instance() as instance:
        instance.add_dynamic_partitions("reps", ["a", "ddd"])
        result = dg.materialize([frames], instance=instance, partition_key="a",
                                raise_on_error=False)
        assert not result.success
        assert "not targeted by this run: ['ddd']" in str(
            result.failure_data_for_node("frames").error)


def test_a_failed_partition_checks_as_an_error_even_with_something_left_out():
    left = LeftOut("powerapi", "rep/power.jsonl", "its last report (bytes 10-20)", "cut short")
    batch = PartitionBatch(stored={"left": {}}, failed={"bad": FRAMES_ERROR},
                           left_out={"bad": [left], "left": [left]})
    check = dg.AssetCheckKey(dg.AssetKey("frames"), "valid")
    failed = batch._evaluation(check, "bad")
    assert (failed.passed, failed.severity) == (False, dg.AssetCheckSeverity.ERROR)
    assert failed.description == f"bad: {FRAMES_ERROR}"
    warned = batch._evaluation(check, "left")
    assert (warned.passed, warned.severity) == (False, dg.AssetCheckSeverity.WARN)
    assert warned.description == f"left: 1 input(s) left something out (1 record(s)): {left}"
