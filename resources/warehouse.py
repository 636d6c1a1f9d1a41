"""The warehouse resource: the folder that holds the Parquet tables."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from joulehouse import warehouse

ENV = "JOULEHOUSE_WAREHOUSE"


class Warehouse(dg.ConfigurableResource):
    """Parquet tables under ``root`` (a local folder or a mounted shared path)."""

    root: str = "warehouse"

    @classmethod
    def from_env(cls, default: str | os.PathLike[str]) -> Warehouse:
        """``$JOULEHOUSE_WAREHOUSE`` if set, else ``default``."""
        return cls(root=os.environ.get(ENV) or str(default))

    def tables(self) -> warehouse.Warehouse:
        """The core warehouse over ``root``."""
        return warehouse.Warehouse(Path(self.root))
