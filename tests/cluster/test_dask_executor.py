"""joulehouse.cluster: per-partition work on Dask workers, on this machine and in Slurm jobs.

The Slurm tests run against a real one-node Slurm cluster that the module
starts from Debian's packages (``tests/slurm_cluster.py``); without them, or
when not root, they skip with the reason (fail under CI=true). The function
run per partition is a real one: one GPU repetition of ``examples/gpu-data``
read and validated, then its energy per window.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from distributed.scheduler import NoWorkerError
from slurm_cluster import missing_requirement, one_node_slurm, tool

from joulehouse.cluster import dask_executor
from joulehouse.errors import InputError
from joulehouse.gpu.energy import repetition_energy
from joulehouse.gpu.layout import RepetitionRef, find_repetitions
from joulehouse.gpu.readers import read_repetition
from resources import StepWorkers
from tests.conftest import PROJECT_ROOT, skip_or_fail

EXAMPLES = PROJECT_ROOT / "examples" / "gpu-data"
BAD_KEY = "power-limit/bert/250W/0"
#: What the Slurm jobs import: this worktree's joulehouse and, as the functions
#: below travel by reference, this module (a centre's jobs import its install).
IMPORT_PATH = os.pathsep.join(map(str, (PROJECT_ROOT, PROJECT_ROOT / "tests",
                                        Path(__file__).parent)))


def where() -> tuple[str | None, str]:
    """Run on a worker: the Slurm job it runs in (None outside Slurm) and its host."""
    return os.environ.get("SLURM_JOB_ID"), socket.gethostname()


def energy_of(data_root: str, key: str) -> pd.DataFrame:
    """The per-partition work: read and validate one repetition, then its energy per window."""
    return repetition_energy(read_repetition(RepetitionRef.from_key(data_root, key)))


@pytest.fixture(scope="module")
def slurm():
    """A one-node Slurm cluster on this host, stopped after the module's tests."""
    reason = missing_requirement()
    if reason:
        skip_or_fail(reason)
    with one_node_slurm() as cluster:
        yield cluster


@pytest.fixture
def bad_root(tmp_path) -> Path:
    """A data root with one repetition whose ``gpu-power.csv`` has a garbled line 3."""
    root = tmp_path / "gpu-data"
    shutil.copytree(EXAMPLES / BAD_KEY, root / BAD_KEY)
    power = root / BAD_KEY / "gpu-power.csv"
    lines = power.read_text().splitlines(keepends=True)
    lines[2] = "garbled,line\n"
    power.write_text("".join(lines))
    return root


def in_process_error(root: Path) -> InputError:
    with pytest.raises(InputError) as caught:
        energy_of(str(root), BAD_KEY)
    return caught.value


def assert_same_results(pool, bad_root: Path) -> None:
    """Every example repetition's energy as in-process; the bad one's error, whole."""
    keys = [ref.key for ref in find_repetitions(EXAMPLES)]
    assert len(keys) == 8
    futures = {key: pool.submit(energy_of, str(EXAMPLES), key) for key in keys}
    for key, future in futures.items():
        remote = future.result()
        assert len(remote) == 5  # experiment, train, three epochs
        pd.testing.assert_frame_equal(remote, energy_of(str(EXAMPLES), key))
    last = futures["power-limit/bert/250W/1"].result().iloc[0]
    assert last.phase == "experiment"
    assert last.gpu_energy_counter_j == pytest.approx(12428.555407, rel=1e-9)
    expected = in_process_error(bad_root)
    with pytest.raises(InputError) as caught:
        pool.submit(energy_of, str(bad_root), BAD_KEY).result()
    error = caught.value
    assert str(error) == str(expected)
    assert (error.path, error.line, error.field) == (expected.path, expected.line, expected.field)
    assert error.path == str(bad_root / BAD_KEY / "gpu-power.csv") and error.line == 3


@pytest.fixture
def on_slurm(tmp_path) -> dict:
    """What every Slurm test sets: small jobs, their logs in ``tmp_path``, this code."""
    logs = tmp_path / "slurm-logs"
    logs.mkdir()
    return {"memory": "1GiB", "walltime": "00:10:00", "log_directory": str(logs),
            "start_timeout_s": 120, "prologue": [f"export PYTHONPATH={IMPORT_PATH}"]}


def test_slurm_workers_run_in_slurm_jobs_and_leave_with_the_context(slurm, on_slurm, bad_root):
    with dask_executor("slurm", jobs=2, cores=1, queue="debug", **on_slurm) as pool:
        jobs = slurm.job_ids()
        assert len(jobs) == 2
        places = {pool.submit(where).result() for _ in range(8)}
        assert {host for _, host in places} == {socket.gethostname()}
        assert {job for job, _ in places} <= set(jobs)
        assert_same_results(pool, bad_root)
        logs = sorted(path.name for path in Path(on_slurm["log_directory"]).iterdir())
        assert logs and all(name.startswith("joulehouse-worker-") for name in logs)
    slurm.wait_until(lambda: not slurm.job_ids(), "rid of the jobs after the context", 30)


def test_the_step_s_workers_resource_sends_the_work_to_slurm_jobs(slurm, on_slurm, bad_root):
    workers = StepWorkers(cluster="slurm", cluster_settings=json.dumps(
        on_slurm | {"jobs": 1, "cores": 1, "queue": "debug"}))
    with workers.pool() as pool:
        job, _ = pool.submit(where).result()
        assert job in slurm.job_ids()
        assert_same_results(pool, bad_root)
    slurm.wait_until(lambda: not slurm.job_ids(), "rid of the jobs after the step", 30)


def start_and_leave(kind: str, **settings) -> None:
    """Enter and leave ``dask_executor(kind, **settings)`` without submitting anything."""
    with dask_executor(kind, **settings):
        pass


def test_slurm_jobs_that_never_start_fail_the_step_naming_them_and_are_cancelled(slurm,
                                                                                 on_slurm):
    # A held job stays pending: no worker comes (as in a full queue).
    with pytest.raises(TimeoutError, match=r"no Dask worker connected within 3 s of "
                                           r"submitting Slurm job\(s\) \d+"):
        start_and_leave("slurm", **on_slurm | {"start_timeout_s": 3},
                        sbatch_directives=["--hold"])
    slurm.wait_until(lambda: not slurm.job_ids(), "rid of the held job", 30)


def test_tasks_fail_once_no_worker_is_left_instead_of_waiting_forever(slurm, on_slurm):
    with dask_executor("slurm", no_workers_timeout_s=3, **on_slurm) as pool:
        assert pool.submit(where).result()[0] == slurm.job_ids()[0]
        # The job ends under the step (as at its walltime): no worker is left.
        subprocess.run([tool("scancel"), *slurm.job_ids()], check=True)
        slurm.wait_until(lambda: not slurm.job_ids(), "rid of the cancelled job", 30)
        with pytest.raises(NoWorkerError, match="timed out after 3.00 s waiting without any "
                                                "running workers"):
            pool.submit(where).result(timeout=60)


def test_local_workers_are_other_processes_with_the_same_results(bad_root):
    with dask_executor("local", workers=2) as pool:
        pids = {pool.submit(os.getpid).result() for _ in range(8)}
        assert os.getpid() not in pids
        assert pool.submit(where).result() == (None, socket.gethostname())
        assert_same_results(pool, bad_root)


def test_settings_are_checked_before_anything_starts():
    with pytest.raises(ValueError, match="unknown cluster kind 'pbs'"):
        start_and_leave("pbs")
    with pytest.raises(TypeError, match="partition"):
        start_and_leave("slurm", partition="debug")
    with pytest.raises(ValueError, match=r"cores \(3\) must be a multiple of processes \(2\)"):
        start_and_leave("slurm", cores=3, processes=2)
    with pytest.raises(ValueError, match="settings must be positive: workers=0"):
        start_and_leave("local", workers=0)
