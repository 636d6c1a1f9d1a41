"""ready_run_request: ready keys made contiguous at the end, never under a queued run over
them, whatever its job."""

import dagster as dg
import pytest

from sensors import partition_runs
from sensors.partition_runs import RANGE_END, RANGE_START, ready_run_request, run_in_flight
from tests.dagster_sqlite import empty_instance

PARTITION = "dagster/partition"

PARTS = dg.DynamicPartitionsDefinition(name="parts")


def _request(instance: dg.DagsterInstance, ready: dict[str, str]):
    return ready_run_request(instance, instance.get_dynamic_partitions(PARTS.name), PARTS, ready,
                             job_name="job", run_key_prefix="p", tags={})


def test_scattered_ready_keys_move_to_the_end_when_no_run_is_in_flight():
    with empty_instance() as instance:
        instance.add_dynamic_partitions(PARTS.name, ["a", "b", "c", "d"])
        request, additions, new = _request(instance, {"a": "1", "c": "2", "e": "3"})
        assert new == 1
        assert instance.get_dynamic_partitions(PARTS.name) == ["b", "d"]
        [add] = additions
        assert list(add.partition_keys) == ["a", "c", "e"]
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == ("a", "e")


def test_keys_are_not_moved_under_a_run_in_flight():
    with empty_instance() as instance:
        instance.add_dynamic_partitions(PARTS.name, ["a", "b", "c"])
        instance.add_run(dg.DagsterRun(job_name="job", run_id="in-flight",
                                       status=dg.DagsterRunStatus.STARTED,
                                       tags={RANGE_START: "a", RANGE_END: "c"}))
        assert _request(instance, {"a": "1"}) is None
        assert instance.get_dynamic_partitions(PARTS.name) == ["a", "b", "c"]
        # new keys alone are appended: the range of a run in flight does not change
        request, _additions, new = _request(instance, {"d": "1"})
        assert new == 1 and (request.tags[RANGE_START], request.tags[RANGE_END]) == ("d", "d")
        instance.report_run_failed(instance.get_run_by_id("in-flight"))
        assert _request(instance, {"a": "1"}) is not None
        assert instance.get_dynamic_partitions(PARTS.name) == ["b", "c"]


def test_a_run_over_another_partition_set_does_not_hold_the_keys():
    """A run of another source's job over its own partitions (a PowerAPI stream) in flight,
    and one over no partition: the keys of this set still move."""
    with empty_instance() as instance:
        instance.add_dynamic_partitions(PARTS.name, ["a", "b", "c"])
        instance.add_dynamic_partitions("streams", ["s1", "s2"])
        instance.add_run(dg.DagsterRun(job_name="other_job", run_id="other",
                                       status=dg.DagsterRunStatus.STARTED,
                                       tags={RANGE_START: "s1", RANGE_END: "s2"}))
        instance.add_run(dg.DagsterRun(job_name="unpartitioned", run_id="plain",
                                       status=dg.DagsterRunStatus.NOT_STARTED))
        request, additions, new = _request(instance, {"a": "1"})
        assert new == 0 and instance.get_dynamic_partitions(PARTS.name) == ["b", "c"]
        [add] = additions
        assert list(add.partition_keys) == ["a"]
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == ("a", "a")


@pytest.mark.parametrize("tags", [{RANGE_START: "c", RANGE_END: "c"}, {PARTITION: "b"}],
                         ids=["range", "one key"])
def test_a_run_of_any_job_over_these_keys_holds_them(tags):
    """A backfill or UI materialization (``__ASSET_JOB``) over keys of this set is starting:
    moving a key would change the keys its range resolves to, so nothing moves."""
    with empty_instance() as instance:
        instance.add_dynamic_partitions(PARTS.name, ["a", "b", "c"])
        instance.add_run(dg.DagsterRun(job_name="__ASSET_JOB", run_id="backfill",
                                       status=dg.DagsterRunStatus.STARTING, tags=tags))
        assert run_in_flight(instance, ["a", "b", "c"]) == "backfill"
        assert _request(instance, {"a": "1"}) is None
        assert instance.get_dynamic_partitions(PARTS.name) == ["a", "b", "c"]
        instance.report_run_canceled(instance.get_run_by_id("backfill"))
        assert run_in_flight(instance, ["a", "b", "c"]) is None
        assert _request(instance, {"a": "1"}) is not None
        assert instance.get_dynamic_partitions(PARTS.name) == ["b", "c"]


def test_latest_storage_ids_asks_in_chunks_for_the_keys_given_alone(monkeypatch):
    files = dg.AssetKey("files")
    with empty_instance() as instance:
        for key in ["a", "b", "c", "d", "e", "old"]:
            instance.report_runless_asset_event(dg.AssetMaterialization(files, partition=key))
        whole = partition_runs.latest_storage_ids(instance, files, ["a", "b", "c", "d", "e"])
        assert sorted(whole) == ["a", "b", "c", "d", "e"]  # not "old"
        monkeypatch.setattr(partition_runs, "KEYS_PER_QUERY", 2)
        assert partition_runs.latest_storage_ids(
            instance, files, ["e", "d", "c", "b", "a", "none"]) == whole
        assert partition_runs.latest_storage_ids(instance, files, []) == {}
