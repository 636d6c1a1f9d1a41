"""One source's sensor and job in one test instance, driven the way the daemon would; and a
module's first run saved once for each test to start from (:class:`Saved`)."""

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from unittest import mock

import dagster as dg

from sensors.local import launch_in_process, tick
from sensors.partition_runs import RETRY_OF_TAG, RUN_KEY_METADATA, RUN_KEY_TAG
from tests import dagster_sqlite
from tests.dagster_sqlite import empty_instance, empty_storage


class SourceRuns:
    """Tick the sensor ``sensor_name`` of ``defs`` (keeping its cursor between ticks), launch
    the runs it asks for in-process as job ``job_name``, and read the partitions of
    ``partitions_def`` it registered and their status. The sensor gets ``source`` (as it
    is at each tick) as its resource ``resource_key`` (e.g. ``"geopm_source"``)."""

    def __init__(self, instance: dg.DagsterInstance, defs: dg.Definitions, sensor_name: str,
                 job_name: str, resource_key: str, source: dg.ConfigurableResource,
                 partitions_def: dg.DynamicPartitionsDefinition):
        self.instance, self.defs = instance, defs
        self.sensor_name, self.job_name = sensor_name, job_name
        self.resource_key, self.source, self.partitions_def = resource_key, source, partitions_def
        self.cursor = None

    def tick(self) -> dg.SensorResult:
        data = tick(self.defs.resolve_sensor_def(self.sensor_name), self.instance,
                    {self.resource_key: self.source}, self.cursor)
        self.cursor = data.cursor
        return data

    def launch(self, request: dg.RunRequest) -> dg.ExecuteInProcessResult:
        return launch_in_process(self.defs.resolve_job_def(self.job_name), self.instance,
                                 request, self.sensor_name, log_level="WARNING")

    def cancel(self, request: dg.RunRequest, **tags: str) -> None:
        """A run of ``request`` (with ``tags`` added) created and cancelled before it read
        anything, as from the UI: Dagster fails no partition of it."""
        run = self.instance.create_run_for_job(
            self.defs.resolve_job_def(self.job_name), run_config=request.run_config,
            tags={**request.tags, RUN_KEY_TAG: request.run_key, **tags})
        self.instance.report_run_canceled(run)

    def cancelled_before_days(self, files: dg.AssetKey, entry: str, run_key: str) -> None:
        """What an instance upgraded from one partition per entry holds: a hand-out of
        ``entry`` (an old partition key) as a materialization of ``files`` whose run, of key
        ``run_key``, was cancelled."""
        self.instance.report_runless_asset_event(dg.AssetMaterialization(
            files, partition=entry, metadata={RUN_KEY_METADATA: run_key}))
        self.instance.report_run_canceled(self.instance.create_run_for_job(
            self.defs.resolve_job_def(self.job_name), tags={RUN_KEY_TAG: run_key}))

    def cancelled_and_retried(self) -> tuple[dg.RunRequest, dg.RunRequest]:
        """The next tick's run request (no retry itself), cancelled, and the retry of it
        that the tick after asks for."""
        [request] = self.tick().run_requests
        assert RETRY_OF_TAG not in request.tags
        self.cancel(request)
        [retry] = self.tick().run_requests
        assert retry.tags[RETRY_OF_TAG] == request.run_key
        return request, retry

    def partitions(self) -> list[str]:
        return list(self.instance.get_dynamic_partitions(self.partitions_def.name))

    def status(self, asset: dg.AssetKey) -> dict[str, dg.AssetPartitionStatus]:
        return self.instance.get_status_by_partition(asset, self.partitions(),
                                                     self.partitions_def)


@contextmanager
def instance_in(storage: Path) -> Iterator[dg.DagsterInstance]:
    """An instance as the ``instance`` fixture makes (the batching storage) on the Dagster
    storage in folder ``storage`` (made by ``empty_storage``, or a copy of one used since),
    left there when the instance closes."""
    with (mock.patch.object(dagster_sqlite, "empty_storage", lambda _: str(storage)),
          empty_instance() as instance):
        yield instance


#: What :meth:`Saved.restored_source` makes: anything with a sensor's ``cursor``.
SourceT = TypeVar("SourceT")


@dataclass(frozen=True)
class Saved:
    """What a module fixture made in folder ``root`` (``base / "root"``: a landing folder
    ``landing``, the warehouse, the TAUdb) and in an instance on the storage
    ``base / "storage"`` (:meth:`storage`), saved once that instance closed (its events
    written) under ``saved``, with the sensor's cursor then."""

    root: Path
    saved: Path
    cursor: str | None

    @staticmethod
    def storage(base: Path) -> Path:
        """Folder ``base / "root"`` made, and an empty Dagster storage ``base / "storage"``
        for :func:`instance_in`."""
        (base / "root").mkdir()
        return Path(empty_storage(base / "storage"))

    @classmethod
    def save(cls, base: Path, cursor: str | None) -> "Saved":
        """``base / "root"`` and the storage (its instance closed) copied under
        ``base / "saved"``."""
        shutil.copytree(base / "storage", base / "saved" / "storage")
        shutil.copytree(base / "root", base / "saved" / "root")  # copy2: sizes, mtimes kept
        return cls(base / "root", base / "saved", cursor)

    @contextmanager
    def restored(self, tmp_path: Path) -> Iterator[dg.DagsterInstance]:
        """``root`` put back as it was saved (at the same paths: the trials name their
        files, the trials' state the TAUdb and the window table, by their location), and
        an instance on a copy (in ``tmp_path``) of the storage saved."""
        shutil.rmtree(self.root)
        shutil.copytree(self.saved / "root", self.root)
        storage = shutil.copytree(self.saved / "storage", tmp_path / "dagster-storage")
        with instance_in(storage) as instance:
            yield instance

    @contextmanager
    def restored_source(self, tmp_path: Path,
                        source: Callable[[dg.DagsterInstance, Path], SourceT]) -> Iterator[SourceT]:
        """:meth:`restored`, and ``source(instance, root)`` (a sensor's source or pipeline,
        with a ``cursor``) given the sensor's cursor saved."""
        with self.restored(tmp_path) as instance:
            made = source(instance, self.root)
            made.cursor = self.cursor
            yield made


@dataclass(frozen=True)
class FirstRun:
    """A module's first run, made once by a module fixture: what it left, saved, and its
    result."""

    saved: Saved
    result: dg.ExecuteInProcessResult
