"""Each entry's own windowed energy (table ``powerapi_report_energy``, one partition per
entry), stored with the inputs it was computed from, so the window table can take a
sensor's rows from it instead of computing them again.

A partition's Parquet footer names its inputs (:data:`INPUTS_METADATA`): the entry's
progress when it was computed (generation, pieces and how far each file was read: a
progress cleared by hand restarts at generation 0, so the generation alone would not name
the frames), the window, the machine-level targets and :data:`ENERGY_VERSION`. Its rows are
:func:`energy.window_energy` of the entry's frames, and ``window_energy`` computes each
sensor's rows from that sensor's reports alone: for a sensor no other stored entry holds,
the partition's rows of it are the window table's, row for row, as long as its inputs are
the entry's current ones (:func:`current`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import pandas as pd

from joulehouse.powerapi.energy import window_energy
from joulehouse.powerapi.stream import Progress
from joulehouse.warehouse import Warehouse

TABLE = "powerapi_report_energy"
#: The footer key of a partition's inputs (:func:`inputs`).
INPUTS_METADATA = "joulehouse.powerapi.inputs"
#: Raised whenever ``energy.window_energy`` or the window table's schema changes: stored
#: energy of an earlier version is then computed again, never mixed with the new.
ENERGY_VERSION = 1


def inputs(progress: Progress, window: str, targets: tuple[str, ...]) -> str:
    """What an entry's energy is computed from: its ``progress`` (generation, pieces,
    each file's read), the ``window``, the machine-level ``targets`` and the code's
    :data:`ENERGY_VERSION` (JSON)."""
    reads = [[name, read.read_to_byte, read.prefix_digest, read.line_based, read.tail_bytes]
             for name, read in sorted(progress.files.items())]
    return json.dumps([ENERGY_VERSION, progress.generation, progress.pieces, reads, window,
                       list(targets)])


def store(tables: Warehouse, key: str, progress: Progress, rapl: pd.DataFrame | None,
          power: pd.DataFrame | None, window: str, targets: tuple[str, ...]) -> pd.DataFrame:
    """Compute entry ``key``'s windowed energy from its frames (those of ``progress``) and
    store it, with its inputs, in place of the earlier; returns its rows."""
    table = window_energy(rapl, power, window, targets)
    tables.write_partition(TABLE, key, table,
                           {INPUTS_METADATA: inputs(progress, window, targets)})
    return table


def current(tables: Warehouse, progress: dict[str, Progress], keys: Iterable[str],
            window: str, targets: tuple[str, ...]) -> tuple[list[str], pd.DataFrame]:
    """Those of ``keys`` whose stored energy was computed from their current ``progress``,
    ``window`` and ``targets``, and its rows (no rows, no columns: none); an entry
    computed from other inputs, or never, is left out."""
    fresh = [key for key in keys if tables.partition_metadata(TABLE, key).get(
        INPUTS_METADATA) == inputs(progress[key], window, targets)]
    return fresh, tables.read_partitions(TABLE, fresh) if fresh else pd.DataFrame()
