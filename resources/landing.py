"""Landing folders as a resource: the folders a source's entries land in, by name.

A partition key of such a source is ``<landing name>/<entry name>``: the
landing folder's own name, then the entry's (a file or folder directly in
it), as ``joulehouse.landing`` keys its entries.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from joulehouse.errors import InputError
from resources.gpu import SETTINGS_ENV, settings_from_env

#: A default of the folders: one folder, or the folders the YAML declares.
Folders = str | os.PathLike[str] | Sequence[str]


def folders_from_env(variable: str, default: Folders) -> list[str]:
    """The folders in ``$variable`` (separated by ``os.pathsep``), else ``default`` (a
    folder, or the folders the YAML declares)."""
    folders = [p for p in os.environ.get(variable, "").split(os.pathsep) if p]
    if folders:
        return folders
    return [str(default)] if isinstance(default, (str, os.PathLike)) else list(default)


class LandingFolders(dg.ConfigurableResource):
    """Folders watched for entries, and how long an entry must be quiet to be complete."""

    landing_folders: list[str] = Field(description="Folders watched for landed entries.")
    quiet_period_s: float = Field(
        default=60.0, description="An entry is complete once no file changed for this long.")
    grown_bytes: int | None = Field(
        default=None, gt=0,
        description="An entry still changing is handed out anyway once its files grew by this "
                    "many bytes since it was last handed out (a stream that is never quiet); "
                    "None: only once quiet.")
    grown_wait_s: float | None = Field(
        default=None, gt=0,
        description="An entry still changing is handed out anyway once this many seconds "
                    "have passed since a sensor tick first saw it changed (a stream that is "
                    "never quiet, nor grows by grown_bytes soon), half-written or not: only "
                    "for a source whose reader reads complete records alone (PowerAPI); "
                    "None: no such bound.")
    max_entries_per_tick: int = Field(
        default=10_000, ge=1,
        description="Most entries one sensor tick hands out; below it, a tick hands out as "
                    "many as fill its time budget (sensors/tick_budget.py); the rest wait for "
                    "the next ticks, those changed least recently first.")

    @staticmethod
    def landing_settings_from_env(variable: str, default_folder: Folders) -> dict[str, Any]:
        """The fields set from the environment: ``landing_folders`` from ``$variable``
        (separated by ``os.pathsep``), else ``default_folder``; ``quiet_period_s`` from
        ``$JOULEHOUSE_QUIET_PERIOD_S`` (shared by every source) where set."""
        return {"landing_folders": folders_from_env(variable, default_folder),
                **settings_from_env({"quiet_period_s": SETTINGS_ENV["quiet_period_s"]})}

    def landings(self) -> dict[str, Path]:
        """The landing folders by name (their folder name); raises on duplicate names."""
        named: dict[str, Path] = {}
        for folder in map(Path, self.landing_folders):
            if folder.resolve().name in named:
                raise ValueError(f"two landing folders named {folder.resolve().name!r}")
            named[folder.resolve().name] = folder.resolve()
        return named

    def resolve(self, partition_key: str) -> Path:
        """The entry (file or folder) of a partition key ``<landing name>/<entry>``."""
        name, _, entry = partition_key.partition("/")
        landing = self.landings().get(name)
        if landing is None or not entry or "/" in entry:
            raise InputError(partition_key, f"no landing folder named {name!r} is configured "
                             "(or the key names no entry in it)")
        return landing / entry
