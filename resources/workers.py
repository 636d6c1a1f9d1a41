"""Worker processes inside one step: the per-partition work of a run on every core.

A step over many partitions (``assets/reporting.py``'s ``PartitionBatch``)
submits each partition's work (read, validate, store; energy) to the
``concurrent.futures.Executor`` that :meth:`StepWorkers.pool` yields:

    with workers.pool(partition_count) as executor:
        future = executor.submit(function, *arguments)

``function`` is a module-level function and its arguments are picklable (no
Dagster context, no resource: they stay in the step's process, which writes
every event). The pool is local processes by default, or Dask workers
(``cluster``: ``local`` for a ``LocalCluster``, ``slurm`` for Slurm jobs through
dask-jobqueue, ``joulehouse/cluster.py``, ``docs/scale-out.md``) behind the same
interface.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

import dagster as dg
from pydantic import Field, field_validator, model_validator

from joulehouse.cluster import KINDS, cluster_settings, dask_executor, usable_cpus

ENV = "JOULEHOUSE_STEP_WORKERS"
CLUSTER_ENV = "JOULEHOUSE_STEP_CLUSTER"
CLUSTER_SETTINGS_ENV = "JOULEHOUSE_STEP_CLUSTER_SETTINGS"
PARTITIONS_PER_WORKER_ENV = "JOULEHOUSE_STEP_PARTITIONS_PER_WORKER"
#: Modules every worker process imports once, in the fork server, before it forks the
#: workers: the asset modules whose functions are submitted (and pandas, pyarrow, pandera).
PRELOAD = ["assets"]


class InProcessExecutor(Executor):
    """Runs each submitted call at once, in this process: ``max_workers`` 1, for tests and
    debugging (a breakpoint in the work stops here)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as err:  # noqa: BLE001 - handed to whoever asks the future
            future.set_exception(err)
        return future


def in_order(executor: Executor, function: Callable[..., Any], calls: Iterable[tuple],
             ahead: int) -> Iterator[Future]:
    """Submit ``function(*arguments)`` for each of ``calls`` to ``executor`` and yield the
    futures in that order, with at most ``ahead`` submitted and not yet yielded: the
    results held at once stay bounded (e.g. whole TAUdb trials)."""
    pending: deque[Future] = deque()
    for arguments in calls:
        pending.append(executor.submit(function, *arguments))
        if len(pending) > ahead:
            yield pending.popleft()
    yield from pending


class StepWorkers(dg.ConfigurableResource):
    """Processes for the per-partition work of a step.

    ``max_workers``: processes (default: the CPUs this process may use); 1 runs the
    work in the step's own process, as does a step with fewer than two
    ``partitions_per_worker`` partitions (a landing of a few entries). Processes start
    from a fork server that has imported the asset modules once, not each worker again.
    ``cluster`` set, the work goes to Dask workers instead (``max_workers`` unused).
    """

    max_workers: int | None = None
    cluster: str = Field(default="", description=(
        "'' for local processes; 'local' (a Dask LocalCluster) or 'slurm' (Dask workers in "
        "Slurm jobs, dask-jobqueue): joulehouse/cluster.py"))
    cluster_settings: str = Field(default="{}", description=(
        "JSON object of the cluster's settings, by name (joulehouse/cluster.py: "
        "LocalSettings, SlurmSettings), e.g. {\"queue\": \"gpu\", \"jobs\": 8}"))
    partitions_per_worker: int = Field(default=8, ge=1, description=(
        "partitions a step must have per worker process it starts: a process costs its "
        "fork server's imports of the asset modules (seconds of CPU), so a small step runs "
        "in its own process"))

    @field_validator("cluster")
    @classmethod
    def _known_cluster(cls, value: str) -> str:
        if value and value not in KINDS:
            raise ValueError(f"unknown cluster {value!r}: '' or one of {', '.join(KINDS)}")
        return value

    @field_validator("cluster_settings")
    @classmethod
    def _settings_object(cls, value: str) -> str:
        if not isinstance(json.loads(value), dict):
            # pydantic reports a ValueError as the field's validation error
            raise ValueError(f"cluster_settings must be a JSON object, not {value!r}")  # noqa: TRY004
        return value

    @model_validator(mode="after")
    def _settings_of_the_cluster(self) -> StepWorkers:
        """A misspelt or bad cluster setting fails when the definitions load, not when a
        step opens its pool."""
        if self.cluster:
            try:
                cluster_settings(self.cluster, json.loads(self.cluster_settings))
            except TypeError as err:  # an unknown name: pydantic reports ValueErrors
                raise ValueError(f"cluster_settings: {err}") from err
        return self

    @classmethod
    def from_env(cls) -> StepWorkers:
        """``$JOULEHOUSE_STEP_WORKERS`` processes if set, else one per CPU, at most one per
        ``$JOULEHOUSE_STEP_PARTITIONS_PER_WORKER`` partitions (default 8); or the Dask
        cluster ``$JOULEHOUSE_STEP_CLUSTER`` with ``$JOULEHOUSE_STEP_CLUSTER_SETTINGS``."""
        value = os.environ.get(ENV)
        per_worker = os.environ.get(PARTITIONS_PER_WORKER_ENV)
        return cls(max_workers=int(value) if value else None,
                   cluster=os.environ.get(CLUSTER_ENV, ""),
                   cluster_settings=os.environ.get(CLUSTER_SETTINGS_ENV) or "{}",
                   **({"partitions_per_worker": int(per_worker)} if per_worker else {}))

    def workers(self, partitions: int | None = None) -> int:
        """How many processes :meth:`pool` uses for a step over ``partitions`` partitions
        (1: none, the step's own): one per ``partitions_per_worker`` of them, at most
        ``max_workers``; all ``max_workers`` when the count is not given."""
        most = self.max_workers or usable_cpus()
        if partitions is None:
            return most
        return max(1, min(most, partitions // self.partitions_per_worker))

    @contextmanager
    def pool(self, partitions: int | None = None) -> Iterator[Executor]:
        """An executor for the per-partition work of a step over ``partitions`` partitions
        (:meth:`workers`), shut down (its work waited for) when the block ends."""
        if self.cluster:
            with dask_executor(self.cluster, **json.loads(self.cluster_settings)) as executor:
                yield executor
            return
        workers = self.workers(partitions)
        if workers == 1:
            yield InProcessExecutor()
            return
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as executor:
            yield executor
