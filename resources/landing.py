"""Landing folders as a resource: named folders whose entries are partitions.

A partition key is ``<landing name>/<entry name>``: the folder's name and the
entry's name in it, so keys stay unambiguous when a second folder is added.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field


class LandingFolders(dg.ConfigurableResource):
    """Folders watched for landed entries, and how long an entry must be quiet."""

    landing_folders: list[str] = Field(description="Folders watched for landed entries.")
    quiet_period_s: float = Field(
        default=60.0, description="An entry is complete once no file changed for this long.")

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
            raise KeyError(f"partition {partition_key!r}: no landing folder named {name!r}")
        return landing / entry
