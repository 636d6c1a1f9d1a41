"""Per-partition work spread over Dask workers: on this machine or in Slurm jobs.

A Joulehouse run is ONE Dagster step over many partitions (``assets/pipeline.py``
says why), so a large backfill is spread *inside* the step: the step submits
one task per partition to a ``concurrent.futures.Executor`` and gathers the
results. ``dask_executor`` gives that executor from an existing engine, Dask's
``distributed`` (``Client.get_executor()``), over

- ``"local"``: a ``distributed.LocalCluster`` of worker processes on the step's
  own machine (``LocalSettings``);
- ``"slurm"``: ``dask_jobqueue.SLURMCluster``, worker processes in Slurm jobs
  on the compute nodes, submitted with ``sbatch`` (``SlurmSettings``).

What runs where: the Dask scheduler runs inside the step's process (the
compute nodes must reach that host; ``interface`` picks the network), each
Slurm job runs ``python -m distributed.cli.dask_worker``, and a task runs the
submitted function on a worker. The jobs therefore need the step's Python
environment at the same path and every path the function reads or writes (the
data roots, the warehouse) on storage they reach; see ``docs/scale-out.md``.

Invariants: tasks are not deduplicated (``pure=False``: two submissions of the
same call run twice); a task's exception is raised again by its future in the
step, with its message (``InputError`` keeps file and line). Leaving the
context, normally or by an exception, closes the client and the cluster, which
cancels every Slurm job it started (``scancel``); a step killed outright
leaves its workers to exit by themselves once they lose the scheduler
(``death_timeout_s``), which ends their jobs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from concurrent.futures import Executor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Literal

#: The kinds of cluster ``dask_executor`` starts.
KINDS = ("local", "slurm")
#: The scheduler's HTTP server (dashboard, health) on a free port: Dask's fixed
#: default (8787) would clash between two steps on one host.
FREE_PORT = ":0"


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: a Slurm or cgroup limit counts),
    not the machine's."""
    return len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class LocalSettings:
    """A ``distributed.LocalCluster`` on the step's machine.

    ``workers``: worker processes (default: the CPUs this process may use);
    ``threads_per_worker``: tasks one worker runs at once (1: the core's
    readers already use threads for the files of one partition);
    ``memory_per_worker``: the limit above which Dask pauses and then restarts
    a worker, in Dask's notation (``"4GiB"``), ``"auto"`` for the machine's
    memory split between the workers.
    """

    workers: int = field(default_factory=usable_cpus)
    threads_per_worker: int = 1
    memory_per_worker: str = "auto"

    def __post_init__(self) -> None:
        _positive(workers=self.workers, threads_per_worker=self.threads_per_worker)


@dataclass(frozen=True)
class SlurmSettings:
    """Dask workers in Slurm jobs: what a centre sets for its batch system.

    Per job (``sbatch`` options in brackets):

    - ``queue``: the Slurm partition (``-p``); ``None``: the cluster's default;
    - ``account``: the account charged (``-A``); ``None``: the user's default;
    - ``cores``: CPU cores (``--cpus-per-task``), shared by its worker processes;
    - ``processes``: Dask worker processes in the job (``cores`` must divide
      evenly; each runs ``cores // processes`` tasks at once);
    - ``memory``: memory of the whole job (``--mem``), Dask's notation
      (``"16GiB"``), split between its worker processes;
    - ``walltime``: the job's time limit (``-t``), ``"HH:MM:SS"``; it must cover
      the whole step, as a job that ends is not replaced;
    - ``sbatch_directives``: further options, one per ``#SBATCH`` line
      (``"--qos=long"``, ``"--constraint=cpu"``).

    For the whole executor:

    - ``jobs``: how many Slurm jobs to submit (workers = ``jobs * processes``);
    - ``python``: the interpreter the jobs run, by default the step's own:
      the same virtual environment must exist at that path on the compute nodes;
    - ``prologue``: shell lines run in the job before the worker starts
      (``"module load python/3.11"``, ``"export PYTHONPATH=/opt/joulehouse"``);
    - ``local_directory``: a worker's scratch folder on its node (spilled data);
      ``None``: the system's temporary folder;
    - ``log_directory``: where the jobs' stdout and stderr files go;
      ``None``: Slurm's default (the submitting folder);
    - ``interface``: the network interface the scheduler and workers talk over
      (``"ib0"``); ``None``: the host's default address;
    - ``start_timeout_s``: seconds to wait, after submitting, for the first
      worker to connect (queue wait included) before failing the step;
    - ``no_workers_timeout_s``: once started, seconds the tasks wait while no
      worker is left (every job ended: walltime, crash, ``scancel``) before
      they fail (``distributed.scheduler.NoWorkerError``) instead of waiting forever;
    - ``death_timeout_s``: seconds a worker goes on without its scheduler
      before it exits (and its job ends);
    - ``job_name``: the jobs' name in ``squeue`` (``-J``).
    """

    queue: str | None = None
    account: str | None = None
    cores: int = 1
    processes: int = 1
    memory: str = "4GiB"
    walltime: str = "01:00:00"
    sbatch_directives: tuple[str, ...] = ()
    jobs: int = 1
    python: str = sys.executable
    prologue: tuple[str, ...] = ()
    local_directory: str | None = None
    log_directory: str | None = None
    interface: str | None = None
    start_timeout_s: float = 600.0
    no_workers_timeout_s: float = 600.0
    death_timeout_s: float = 60.0
    job_name: str = "joulehouse-worker"

    def __post_init__(self) -> None:
        _positive(cores=self.cores, processes=self.processes, jobs=self.jobs,
                  start_timeout_s=self.start_timeout_s,
                  no_workers_timeout_s=self.no_workers_timeout_s,
                  death_timeout_s=self.death_timeout_s)
        if self.cores % self.processes:
            raise ValueError(f"cores ({self.cores}) must be a multiple of processes "
                             f"({self.processes})")
        # Lists from a YAML or resource configuration are kept as tuples.
        for name in ("sbatch_directives", "prologue"):
            object.__setattr__(self, name, tuple(getattr(self, name)))


def _positive(**values: float) -> None:
    """Raise ValueError naming each setting that is not > 0."""
    bad = [f"{name}={value!r}" for name, value in values.items() if not value > 0]
    if bad:
        raise ValueError(f"settings must be positive: {', '.join(bad)}")


def _local_cluster(settings: LocalSettings):
    from distributed import LocalCluster

    return LocalCluster(n_workers=settings.workers,
                        threads_per_worker=settings.threads_per_worker,
                        memory_limit=settings.memory_per_worker, processes=True,
                        dashboard_address=FREE_PORT)


def _slurm_cluster(settings: SlurmSettings):
    import dask
    from dask_jobqueue import SLURMCluster

    # The scheduler reads the timeout from Dask's configuration when it starts.
    timeout = {"distributed.scheduler.no-workers-timeout": f"{settings.no_workers_timeout_s}s"}
    with dask.config.set(timeout):
        cluster = SLURMCluster(
            queue=settings.queue, account=settings.account, cores=settings.cores,
            processes=settings.processes, memory=settings.memory, walltime=settings.walltime,
            job_extra_directives=list(settings.sbatch_directives), python=settings.python,
            job_script_prologue=list(settings.prologue),
            local_directory=settings.local_directory, log_directory=settings.log_directory,
            interface=settings.interface, death_timeout=settings.death_timeout_s,
            job_name=settings.job_name,
            scheduler_options={"dashboard_address": FREE_PORT},
        )
    cluster.scale(jobs=settings.jobs)
    return cluster


def _wait_for_slurm_worker(client, cluster, settings: SlurmSettings) -> None:
    """Wait for the first worker; fail naming the jobs when none connects in time."""
    try:
        client.wait_for_workers(1, timeout=settings.start_timeout_s)
    except TimeoutError as err:
        jobs = sorted(job.job_id for job in cluster.workers.values() if job.job_id)
        raise TimeoutError(
            f"no Dask worker connected within {settings.start_timeout_s:g} s of submitting "
            f"Slurm job(s) {', '.join(jobs) or '(none accepted)'}; `squeue -j` shows why "
            f"they are waiting, their output is in {settings.log_directory or 'the submit folder'}"
        ) from err


def cluster_settings(kind: str, settings: dict) -> LocalSettings | SlurmSettings:
    """The settings of a cluster of ``kind`` (one of :data:`KINDS`: ValueError otherwise)
    from ``settings`` by field name (an unknown name is a TypeError, a bad value a
    ValueError), so that a configuration can be checked before any cluster starts."""
    if kind not in KINDS:
        raise ValueError(f"unknown cluster kind {kind!r}: one of {', '.join(KINDS)}")
    return SlurmSettings(**settings) if kind == "slurm" else LocalSettings(**settings)


@contextmanager
def dask_executor(kind: Literal["local", "slurm"], **settings) -> Iterator[Executor]:
    """A ``concurrent.futures.Executor`` whose tasks run on Dask workers of ``kind``.

    ``settings`` are the fields of ``LocalSettings`` (``kind="local"``) or
    ``SlurmSettings`` (``kind="slurm"``); an unknown name is a TypeError, an
    unknown kind a ValueError. For ``"local"`` the workers are running when
    the executor is yielded; for ``"slurm"`` at least one worker is (the other
    jobs' workers join as the queue starts them, and take tasks from then on).
    Leaving the context releases every worker and cancels the Slurm jobs.
    """
    chosen = cluster_settings(kind, settings)
    # Imported here: the cluster extra is optional, and this module is imported
    # wherever the step's pool is configured, local processes included.
    from distributed import Client

    with ExitStack() as stack:
        slurm = chosen if isinstance(chosen, SlurmSettings) else None
        cluster = stack.enter_context(
            _slurm_cluster(slurm) if slurm else _local_cluster(chosen))
        client = stack.enter_context(Client(cluster))
        if slurm:
            _wait_for_slurm_worker(client, cluster, slurm)
        executor = client.get_executor(pure=False)
        stack.callback(executor.shutdown, wait=False)
        yield executor
