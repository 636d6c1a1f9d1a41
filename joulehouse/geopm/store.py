"""A report's validated frames in the warehouse, and back.

Each frame of :meth:`joulehouse.geopm.readers.Report.frames` (header, totals,
regions, signals, session; an absent one is stored empty) is one partition,
keyed by the report's partition key, of its own table under
``geopm_validated_frames/``. Every save writes all five, so the frames read
back for a key always come from one version of the report.

A report *given twice* is one whose content landed under two keys (the same
file copied into two landing folders or names): :func:`report_identities` tells it from
its frames, whatever its keys, so the tables count it once (``joulehouse/geopm/tables.py``
keeps the digests). :func:`distinct_reports`, the same from the frames alone, is left to the
tests and ``benchmarks/kept_tables_landing.py`` (the tables as written before).
"""

from __future__ import annotations

import hashlib
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


#: The frames a report's identity is computed from: the header (start time, profile, agent,
#: policy, version, host and region counts ...), the per-host totals, the session statistics.
IDENTITY_FRAMES = ("header", "totals", "session")


def stored_frame_keys(warehouse: Warehouse) -> list[str]:
    """The keys of every report whose frames are stored, sorted."""
    return warehouse.partition_keys(f"{TABLE}/header")


def report_identities(warehouse: Warehouse, keys: Iterable[str]) -> dict[str, str]:
    """Key -> a digest (20 hex digits) of the stored report's content, its key left out:
    the values of :data:`IDENTITY_FRAMES` row by row. Equal for the same report stored
    under two keys; a different job differs at least in its start time or its energies."""
    keys = list(keys)
    digests = {key: hashlib.sha1() for key in keys}
    for name in IDENTITY_FRAMES:
        frame = load_frames(warehouse, name, keys)
        if frame.empty:
            continue
        rows = pd.util.hash_pandas_object(frame.drop(columns="report"), index=False).to_numpy()
        for key, positions in frame.groupby("report", sort=False).indices.items():
            digests[key].update(name.encode() + rows[positions].tobytes())
    return {key: digest.hexdigest()[:20] for key, digest in digests.items()}


def distinct_reports(warehouse: Warehouse, keys: Iterable[str]
                     ) -> tuple[list[str], dict[str, str]]:
    """``keys`` with each report given twice kept once, under its first key in ``keys``
    order; and every key left out -> the key kept for its report."""
    first: dict[str, str] = {}
    kept, twice = [], {}
    for key, identity in report_identities(warehouse, keys).items():
        if identity in first:
            twice[key] = first[identity]
        else:
            first[identity] = key
            kept.append(key)
    return kept, twice


def load_report(warehouse: Warehouse, key: str, path: Path,
                names: Iterable[str] = tuple(FRAME_SCHEMAS)) -> Report:
    """The report stored as partition ``key`` (see :func:`save_report`), read from ``path``;
    only the frames ``names`` are read back (always the header), the others are empty."""
    wanted = {"header", *names}
    frames = {name: load_frames(warehouse, name, [key]) if name in wanted
              else schemas.empty_frame(schema) for name, schema in FRAME_SCHEMAS.items()}
    return Report(path=path, report=key, shape=frames["header"]["shape"].iloc[0], **frames)
