"""A report's validated frames in the warehouse, and back.

Each frame of :meth:`joulehouse.geopm.readers.Report.frames` (header, totals,
regions, signals, session; an absent one is stored empty) is one partition,
keyed by the report's partition key, of its own table under
``geopm_validated_frames/``. Every save writes all five, so the frames read
back for a key always come from one version of the report.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from joulehouse.geopm import schemas
from joulehouse.geopm.readers import Report
from joulehouse.warehouse import Warehouse

TABLE = "geopm_validated_frames"
#: Frame name -> its pandera schema.
FRAME_SCHEMAS = {"header": schemas.HEADER_SCHEMA, "totals": schemas.TOTALS_SCHEMA,
                 "regions": schemas.REGIONS_SCHEMA, "signals": schemas.SIGNALS_SCHEMA,
                 "session": schemas.SESSION_SCHEMA}


def save_report(warehouse: Warehouse, key: str, report: Report) -> dict[str, pd.DataFrame]:
    """Store the frames of ``report`` as partition ``key``; returns them by frame name."""
    frames = report.frames()
    for name, frame in frames.items():
        warehouse.write_partition(f"{TABLE}/{name}", key, frame)
    return frames


def load_frames(warehouse: Warehouse, name: str, keys: Iterable[str]) -> pd.DataFrame:
    """The stored frame ``name`` (header, totals ...) of the reports ``keys``, concatenated."""
    return warehouse.read_partitions(f"{TABLE}/{name}", keys)


def stored_frame_keys(warehouse: Warehouse) -> list[str]:
    """The keys of every report whose frames are stored, sorted."""
    return warehouse.partition_keys(f"{TABLE}/header")


def load_report(warehouse: Warehouse, key: str, path: Path,
                names: Iterable[str] = tuple(FRAME_SCHEMAS)) -> Report:
    """The report stored as partition ``key`` (see :func:`save_report`), read from ``path``;
    only the frames ``names`` are read back (always the header), the others are empty."""
    wanted = {"header", *names}
    frames = {name: load_frames(warehouse, name, [key]) if name in wanted
              else schemas.empty_frame(schema) for name, schema in FRAME_SCHEMAS.items()}
    return Report(path=path, report=key, shape=frames["header"]["shape"].iloc[0], **frames)
