"""Empty Dagster SQLite storages for tests, copied from one made once per test process.

Creating a SQLite storage (``runs.db``, the event log's ``index.db``, ``schedules.db``:
Dagster's schema and its migrations' stamps) costs seconds of CPU; copying the files of an
empty one costs milliseconds. A copy is the storage ``dg.instance_for_test()`` creates,
opened again: the same tables, no rows.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from unittest import mock

import dagster as dg


@cache
def _empty() -> Path:
    """The folder of the empty storage this process copies (removed when it exits)."""
    folder = Path(tempfile.mkdtemp(prefix="joulehouse-empty-dagster-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    with dg.instance_for_test(temp_dir=str(folder)) as instance:
        instance.get_runs_count()
    return folder


def empty_storage(folder: Path) -> str:
    """``folder`` (which must not exist yet) made to hold an empty Dagster SQLite storage;
    its path as a string, for ``DagsterSqliteStorage.from_local`` and the like."""
    shutil.copytree(_empty(), folder)
    return str(folder)


#: The storage the embedded instance is configured with (deploy/dagster.yaml), by name.
BATCHING = "batching"
#: Dagster's own SQLite storage, what ``dg.instance_for_test()`` makes.
DAGSTER_SQLITE = "dagster-sqlite"
#: What deploy/dev.sh, the demo and every deployment set (deploy/README.md): the event
#: batches the batching storage writes as one.
EVENT_BATCH_SIZE = "1000"
#: No step's stdout and stderr kept, as in ``dg.materialize``'s own instance: the local
#: manager of ``dg.instance_for_test()`` starts four processes a step (a ``tail -F`` and a
#: Python watcher for each stream), about 1,300 in a run of the suite, and no test reads
#: an in-process run's captured output.
NO_COMPUTE_LOGS = {"module": "dagster._core.storage.noop_compute_log_manager",
                   "class": "NoOpComputeLogManager"}


@contextmanager
def empty_instance(storage: str = BATCHING) -> Iterator[dg.DagsterInstance]:
    """``dg.instance_for_test()`` on a copy of the empty storage in a temporary folder
    removed on exit: by default with the storage and event batches the project runs with
    (``resources/instance_storage.py``), or Dagster's own (:data:`DAGSTER_SQLITE`, events
    written one by one: ``test_instance_storage.py`` compares the two, and one pipeline
    test runs on each); either keeps no compute logs (:data:`NO_COMPUTE_LOGS`)."""
    assert storage in (BATCHING, DAGSTER_SQLITE), storage
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        home = empty_storage(Path(tmp) / "home")
        if storage == DAGSTER_SQLITE:
            with dg.instance_for_test(temp_dir=home,
                                      overrides={"compute_logs": NO_COMPUTE_LOGS}) as instance:
                yield instance
            return
        batching = {"custom": {"module": "resources.instance_storage",
                               "class": "BatchingSqliteStorage", "config": {"base_dir": home}}}
        with (dg.instance_for_test(temp_dir=home, overrides={"storage": batching,
                                                             "compute_logs": NO_COMPUTE_LOGS})
              as instance,
              mock.patch.dict(os.environ, {"DAGSTER_EVENT_BATCH_SIZE": EVENT_BATCH_SIZE})):
            yield instance
