"""Empty Dagster SQLite storages for tests, copied from one made once per test process.

Creating a SQLite storage (``runs.db``, the event log's ``index.db``, ``schedules.db``:
Dagster's schema and its migrations' stamps) costs seconds of CPU; copying the files of an
empty one costs milliseconds. A copy is the storage ``dg.instance_for_test()`` creates,
opened again: the same tables, no rows.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

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


@contextmanager
def empty_instance() -> Iterator[dg.DagsterInstance]:
    """``dg.instance_for_test()``, on a copy of the empty storage in a temporary folder
    removed on exit."""
    with (tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp,
          dg.instance_for_test(temp_dir=empty_storage(Path(tmp) / "home")) as instance):
        yield instance
