"""The GPU benchmark source: data roots and how to read them.

A partition key is ``<root name>/<experiment>/<benchmark>/<run>/<repetition>``:
the repetition's path relative to its data root, prefixed with the root's
name (its folder name unless configured), so keys stay unambiguous and
stable when a second data root is added.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType

import dagster as dg
from pydantic import Field

from joulehouse.gpu.layout import RepetitionRef, is_root_name, root_name

ENV = "JOULEHOUSE_GPU_DATA_ROOTS"
#: Environment variables of the sensor settings: field -> variable (unset: the default).
SETTINGS_ENV = {
    "quiet_period_s": "JOULEHOUSE_QUIET_PERIOD_S",
    "full_rescan_s": "JOULEHOUSE_FULL_RESCAN_S",
    "max_repetitions_per_tick": "JOULEHOUSE_MAX_REPETITIONS_PER_TICK",
    "ready_when_complete": "JOULEHOUSE_GPU_READY_WHEN_COMPLETE",
}


def settings_from_env(variables: Mapping[str, str]) -> dict[str, str | None]:
    """Field -> value of each variable of ``variables`` (field -> name) that is set and not
    empty, ``none`` (any case) as None (a setting turned off, where its field allows it);
    the resource's fields validate the values (a bad one names its field)."""
    values = {field: os.environ[name].strip() for field, name in variables.items()
              if os.environ.get(name, "").strip()}
    return {field: None if value.lower() == "none" else value for field, value in values.items()}


class DataRoot(dg.Config):
    """One data root: a tree ``experiment/benchmark/run/repetition``."""

    path: str = Field(description="Folder holding the experiments.")
    name: str | None = Field(
        default=None, description="Partition key prefix; default: the folder's name.")
    timezone: str = Field(
        default="UTC", description="IANA zone of the naive timestamps in the CSV files.")
    external_power_unit: str = Field(
        default="mW", description="Unit of the power-external.csv channels: mW, cW or W.")
    ready_when_complete: bool | None = Field(
        default=None,
        description="Hand out a repetition of this root at the first tick that finds "
                    "experiment_end in its timestamps.csv, without waiting for the quiet "
                    "period. Safe only where joulehouse collect writes the root's repetitions "
                    "in place (experiment_end last, after fsync of every other file); not "
                    "where tools copy them in, which may write timestamps.csv before "
                    "gpu-power.csv is whole. None: the source's ready_when_complete "
                    "(JOULEHOUSE_GPU_READY_WHEN_COMPLETE, default false).")

    @property
    def key_prefix(self) -> str:
        """The root's name: ``name`` if configured, else the folder's (``layout.root_name``)."""
        return root_name(self.path) if self.name is None else self.name


class GpuBenchmarkSource(dg.ConfigurableResource):
    """Where GPU benchmark repetitions land, and the settings to read them."""

    data_roots: list[DataRoot]
    quiet_period_s: float = Field(
        default=60.0, description="A repetition is ready once no file changed for this long "
                                  "and its timestamps.csv has experiment_end (with "
                                  "ready_when_complete: once it has experiment_end).")
    full_rescan_s: float | None = Field(
        default=3600.0,
        description="Seconds in which the rolling rescan re-lists every run folder once, to "
                    "find files rewritten in place (None: never; 0: every tick).")
    max_gap_s: float = Field(
        default=5.0, description="Gaps between power samples longer than this are not bridged.")
    max_repetitions_per_tick: int = Field(
        default=10_000, ge=1,
        description="Most repetitions one sensor tick reports (and one run covers); below it, "
                    "a tick reports as many as fill its time budget "
                    "(sensors/tick_budget.py); the rest wait for the next ticks, oldest first.")
    ready_when_complete: bool = Field(
        default=False,
        description="The ready_when_complete of every data root that does not set its own "
                    "(a data root's field: whether its repetitions are handed out once they "
                    "have experiment_end, without the quiet period).")

    @classmethod
    def from_env(cls, default_roots: str | os.PathLike[str] | Sequence[DataRoot], **settings
                 ) -> GpuBenchmarkSource:
        """Data roots from ``$JOULEHOUSE_GPU_DATA_ROOTS``, else ``default_roots`` (a folder,
        or the data roots the YAML declares); the sensor settings from the variables of
        :data:`SETTINGS_ENV` where set, else ``settings``.

        The variable holds either a JSON list of data-root objects
        (``[{"path": "/data/gpu", "timezone": "Europe/Berlin"}]``) or paths
        separated by ``os.pathsep``. ``JOULEHOUSE_FULL_RESCAN_S`` may be ``none``
        (never rescan).
        """
        value = os.environ.get(ENV, "").strip()
        if value.startswith("["):
            roots = [DataRoot(**item) for item in json.loads(value)]
        elif value:
            roots = [DataRoot(path=p) for p in value.split(os.pathsep) if p]
        elif isinstance(default_roots, (str, os.PathLike)):
            roots = [DataRoot(path=str(default_roots))]
        else:
            roots = list(default_roots)
        return cls(data_roots=roots, **{**settings, **settings_from_env(SETTINGS_ENV)})

    def roots_by_name(self) -> Mapping[str, DataRoot]:
        """The data roots by key prefix; raises on duplicate names.

        Built once per list of data roots (equal field by field), not per call
        (0.6 us a call for two roots): the cache is keyed on the roots
        themselves, so a copy with other roots (``model_copy(update={"data_roots":
        ...})``) gets its own map, while copies with equal roots share one, and
        the folder names it resolved, for the life of the process.
        """
        return _roots_by_name(tuple(self.data_roots))

    def ready_when_complete_of(self, root: DataRoot) -> bool:
        """Whether ``root``'s repetitions are handed out once complete: its own setting,
        else the source's."""
        return self.ready_when_complete if root.ready_when_complete is None else (
            root.ready_when_complete)

    def partition_key(self, root: DataRoot, ref: RepetitionRef) -> str:
        return f"{root.key_prefix}/{ref.key}"

    def run_key(self, root: DataRoot, ref: RepetitionRef) -> str:
        """The run of ``ref`` as its partition keys begin: ``<root name>/<exp>/<bench>/<run>``."""
        return f"{root.key_prefix}/{ref.run_key}"

    def resolve(self, partition_key: str) -> tuple[DataRoot, RepetitionRef]:
        """The data root and repetition of a partition key."""
        name, _, key = partition_key.partition("/")
        root = self.roots_by_name().get(name)
        if root is None:
            raise KeyError(f"partition {partition_key!r}: no data root named {name!r}")
        return root, RepetitionRef.from_key(root.path, key)


@lru_cache(maxsize=16)
def _roots_by_name(data_roots: tuple[DataRoot, ...]) -> Mapping[str, DataRoot]:
    """The map of :meth:`GpuBenchmarkSource.roots_by_name` (DataRoot is frozen, so hashable),
    read-only: every caller with equal roots shares it."""
    roots: dict[str, DataRoot] = {}
    for root in data_roots:
        if not is_root_name(root.key_prefix) or root.key_prefix in roots:
            raise ValueError(f"data root name must be unique, non-empty and contain no '/': "
                             f"{root.key_prefix!r}; set `name` for {root.path}")
        roots[root.key_prefix] = root
    return MappingProxyType(roots)
