"""StepWorkers: the executor of a step's per-partition work, in-process or in processes."""

import os

import pytest

from joulehouse.errors import InputError
from resources import StepWorkers
from resources.workers import InProcessExecutor, in_order


def where(value: int) -> tuple[int, int]:
    """The square of ``value`` and the process that computed it."""
    if value < 0:
        raise InputError("/data/rep/gpu-power.csv", "negative", line=value, field="power_w")
    return value * value, os.getpid()


def test_one_worker_runs_the_work_in_the_step_s_own_process():
    with StepWorkers(max_workers=1).pool() as executor:
        assert isinstance(executor, InProcessExecutor)
        assert executor.submit(where, 3).result() == (9, os.getpid())
        with pytest.raises(InputError, match="gpu-power.csv:-1: power_w: negative"):
            executor.submit(where, -1).result()


def test_worker_processes_run_the_work_and_send_an_input_error_back_whole():
    with StepWorkers(max_workers=2).pool() as executor:
        squares = [executor.submit(where, value) for value in range(6)]
        assert [future.result()[0] for future in squares] == [0, 1, 4, 9, 16, 25]
        assert os.getpid() not in {future.result()[1] for future in squares}
        with pytest.raises(InputError) as raised:
            executor.submit(where, -7).result()
    err = raised.value
    assert (err.path, err.line, err.field, err.reason) == (
        "/data/rep/gpu-power.csv", -7, "power_w", "negative")


def test_in_order_keeps_the_order_and_bounds_what_is_submitted_ahead():
    submitted = []

    class Counting(InProcessExecutor):
        def submit(self, fn, /, *args, **kwargs):
            submitted.append(args[0])
            return super().submit(fn, *args, **kwargs)

    futures = in_order(Counting(), where, [(value,) for value in range(10)], ahead=2)
    first = next(futures)
    assert first.result()[0] == 0 and submitted == [0, 1, 2]
    assert [future.result()[0] for future in futures] == [value * value for value in range(1, 10)]


def test_the_default_is_one_process_per_cpu():
    assert StepWorkers().workers() == len(os.sched_getaffinity(0))
    assert StepWorkers(max_workers=3).workers() == 3


def test_a_step_of_few_partitions_runs_in_its_own_process():
    """A process per 8 partitions (``partitions_per_worker``), at most ``max_workers``: a
    landing of a few entries starts no fork server."""
    workers = StepWorkers(max_workers=3)
    assert [workers.workers(n) for n in (1, 7, 8, 15, 16, 24, 1000)] == [1, 1, 1, 1, 2, 3, 3]
    assert StepWorkers(max_workers=3, partitions_per_worker=1).workers(2) == 2
    with workers.pool(15) as executor:
        assert isinstance(executor, InProcessExecutor)


def test_the_partitions_per_worker_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("JOULEHOUSE_STEP_WORKERS", "2")
    monkeypatch.setenv("JOULEHOUSE_STEP_PARTITIONS_PER_WORKER", "1")
    assert StepWorkers.from_env().workers(2) == 2
    monkeypatch.delenv("JOULEHOUSE_STEP_PARTITIONS_PER_WORKER")
    assert StepWorkers.from_env().workers(15) == 1


def test_a_dask_cluster_is_configured_by_kind_and_json_settings(monkeypatch):
    monkeypatch.setenv("JOULEHOUSE_STEP_CLUSTER", "slurm")
    monkeypatch.setenv("JOULEHOUSE_STEP_CLUSTER_SETTINGS", '{"queue": "gpu", "jobs": 8}')
    workers = StepWorkers.from_env()
    assert (workers.cluster, workers.cluster_settings) == ("slurm", '{"queue": "gpu", "jobs": 8}')
    with pytest.raises(Exception, match="unknown cluster 'pbs'"):
        StepWorkers(cluster="pbs")
    with pytest.raises(Exception, match="cluster_settings must be a JSON object"):
        StepWorkers(cluster="local", cluster_settings="[2]")
    # a misspelt or bad setting fails when the resource is built, before any cluster starts
    with pytest.raises(Exception, match="cluster_settings: .*unexpected keyword argument 'qeue'"):
        StepWorkers(cluster="slurm", cluster_settings='{"qeue": "gpu"}')
    with pytest.raises(Exception, match="settings must be positive: workers=0"):
        StepWorkers(cluster="local", cluster_settings='{"workers": 0}')
