"""ready_run_request: ready keys made contiguous at the end, never under a queued run."""

import dagster as dg

from sensors.partition_runs import RANGE_END, RANGE_START, ready_run_request

PARTS = dg.DynamicPartitionsDefinition(name="parts")


def _request(instance: dg.DagsterInstance, ready: dict[str, str]):
    return ready_run_request(instance, instance.get_dynamic_partitions(PARTS.name), PARTS, ready,
                             job_name="job", run_key_prefix="p", tags={})


def test_scattered_ready_keys_move_to_the_end_when_no_run_is_in_flight():
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(PARTS.name, ["a", "b", "c", "d"])
        request, additions, new = _request(instance, {"a": "1", "c": "2", "e": "3"})
        assert new == 1
        assert instance.get_dynamic_partitions(PARTS.name) == ["b", "d"]
        [add] = additions
        assert list(add.partition_keys) == ["a", "c", "e"]
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == ("a", "e")


def test_keys_are_not_moved_under_a_run_in_flight():
    with dg.instance_for_test() as instance:
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


def test_a_run_of_another_job_does_not_hold_the_keys():
    """A run of another source's job (a PowerAPI stream, a GPU run) in flight: the keys of
    this job still move."""
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(PARTS.name, ["a", "b", "c"])
        instance.add_run(dg.DagsterRun(job_name="other_job", run_id="other",
                                       status=dg.DagsterRunStatus.STARTED))
        request, additions, new = _request(instance, {"a": "1"})
        assert new == 0 and instance.get_dynamic_partitions(PARTS.name) == ["b", "c"]
        [add] = additions
        assert list(add.partition_keys) == ["a"]
        assert (request.tags[RANGE_START], request.tags[RANGE_END]) == ("a", "a")
