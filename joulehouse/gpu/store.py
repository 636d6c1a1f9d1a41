"""A repetition's validated frames in the warehouse, and back.

Each frame is one partition (keyed by the repetition's partition key) of its
own table under ``gpu_validated_frames/``: ``timestamps``, ``gpu_power``,
``external_power``, ``samples_<type>`` and ``system_info`` (the JSON as one
string). A ``manifest`` partition, written last, lists the frames of the
latest save, so a frame left from an earlier version of the repetition (e.g.
a file that was since removed) is never read back with newer ones.
:func:`stored_version` tells when a partition was last stored without reading it.
"""

from __future__ import annotations

import json
from collections.abc import Collection

import pandas as pd

from joulehouse.gpu.layout import RepetitionRef, parse_settings
from joulehouse.gpu.readers import Repetition
from joulehouse.warehouse import Warehouse

TABLE = "gpu_validated_frames"
#: The timestamps of a repetition loaded without them (:func:`load_repetition`'s frames).
_NO_TIMESTAMPS = pd.DataFrame({"time": pd.Series([], dtype="datetime64[ns, UTC]"),
                               "event": pd.Series([], dtype=object),
                               "data": pd.Series([], dtype="int64")})
MANIFEST = "manifest"
SAMPLES_PREFIX = "samples_"


def repetition_frames(rep: Repetition) -> dict[str, pd.DataFrame]:
    """The frames of ``rep`` by table name (absent optional files are left out)."""
    frames = {"timestamps": rep.timestamps, "gpu_power": rep.gpu_power}
    if rep.external_power is not None:
        frames["external_power"] = rep.external_power
    frames.update({SAMPLES_PREFIX + kind: frame for kind, frame in rep.samples.items()})
    if rep.system_info is not None:
        frames["system_info"] = pd.DataFrame({"json": [json.dumps(rep.system_info)]})
    return frames


def save_repetition(warehouse: Warehouse, key: str, rep: Repetition) -> dict[str, pd.DataFrame]:
    """Store the frames of ``rep`` as partition ``key``; returns them by table name."""
    frames = repetition_frames(rep)
    for name, frame in frames.items():
        warehouse.write_partition(f"{TABLE}/{name}", key, frame)
    manifest = pd.DataFrame({"frame": list(frames), "rows": [len(f) for f in frames.values()]})
    warehouse.write_partition(f"{TABLE}/{MANIFEST}", key, manifest)
    return frames


def load_repetition(warehouse: Warehouse, key: str, ref: RepetitionRef,
                    frames: Collection[str] | None = None) -> Repetition:
    """The validated repetition stored as partition ``key`` (see :func:`save_repetition`).

    ``frames``: read only these (table names, e.g. ``gpu_power``) for a reader that needs
    no others; a frame not read comes back absent, and ``timestamps`` without rows."""
    names = warehouse.read_partitions(f"{TABLE}/{MANIFEST}", [key])["frame"].tolist()
    wanted = [name for name in names if frames is None or name in frames]
    stored = {name: warehouse.read_partitions(f"{TABLE}/{name}", [key]) for name in wanted}
    info = stored.get("system_info")
    return Repetition(
        ref=ref,
        settings=parse_settings(ref.run, ref.experiment),
        timestamps=(stored["timestamps"] if frames is None or "timestamps" in frames
                    else _NO_TIMESTAMPS.copy()),
        gpu_power=stored["gpu_power"],
        external_power=stored.get("external_power"),
        samples={name.removeprefix(SAMPLES_PREFIX): frame for name, frame in stored.items()
                 if name.startswith(SAMPLES_PREFIX)},
        system_info=json.loads(info["json"].iloc[0]) if info is not None else None,
    )


def stored_version(warehouse: Warehouse, key: str, *tables: str) -> str:
    """When partition ``key`` was last stored: the :meth:`Warehouse.partition_version` of
    its manifest, then of its partition of each of ``tables``, space-separated (each save
    rewrites the manifest).

    Reads no content; raises FileNotFoundError when one of them is not stored.
    """
    return " ".join(warehouse.partition_version(table, key)
                    for table in (f"{TABLE}/{MANIFEST}", *tables))
