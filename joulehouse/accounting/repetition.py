"""What ``fact_quality`` and ``waste`` need of a GPU repetition's readings, kept with its energy.

Both tables judge a GPU fact against the repetition's readings: the median step between
them (``quality.py``) and the energy spent while the GPU was idle (``waste.py``, rule
``gpu_idle``, from ``gpu-power``). Those readings are a repetition's largest frames (an
hour of ``gpu-power`` is about 25,000 rows); read back for every repetition at each
rebuild of the two tables, they cost what is stored, not what is new. So the step that
computes a repetition's energy, holding its frames in memory, adds these figures to the
energy's rows (:func:`with_reading_figures`), stored in the same file, atomically with
the energy; the tables take them from there (:func:`stored_figures`).

Columns added to ``gpu_repetition_energy`` (names in ``joulehouse.gpu.schemas``):

- ``<method>_step_s`` (every window): the median step between the readings of the
  method's frame, over the whole frame (s; NaN without two readings or without the
  frame), as ``quality.median_step_s`` takes it;
- ``gpu_idle_version``, ``gpu_idle_threshold`` (every window): the waste rule that
  judged the repetition;
- ``gpu_idle_judged_j``, ``gpu_idle_energy_j``, ``gpu_idle_s``: ``waste.gpu_idle``'s
  ``energy_j``, ``idle_energy_j`` and ``idle_s`` over the experiment window, the window of
  the facts it judges (NaN in the other windows, and where ``gpu-power`` has no
  utilisation: not judged, no row of ``waste``).

A repetition stored without them (by older code), or judged by another version or
threshold of the rule, gives no figures: the tables compute its from the stored frames.
The command line's energy table (``joulehouse energy gpu``) has no such columns: they
serve the accounting only.

What ``fact_quality`` takes of a repetition is also kept per entry (``FIGURES``, the Delta
table ``gpu_repetition_figures``: a row per repetition, its key the ``energy_facts`` entity
``<data_root>/<repetition>``), written by the GPU step with the repetition's facts
(:func:`figures_rows`; ``assets/gpu.py``), so that ``fact_quality`` finds what changed
from the table's Delta log, not from a listing of every repetition's energy and frames
(issue 28). A repetition stored by older code has its steps from its stored frames there.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from joulehouse import entry_sync
from joulehouse.accounting import quality, waste
from joulehouse.gpu.energy import METHODS
from joulehouse.gpu.schemas import IDLE_FIGURES, IDLE_THRESHOLD, IDLE_VERSION, STEP_SUFFIX
from joulehouse.gpu.store import TABLE as FRAMES_TABLE
from joulehouse.warehouse import Warehouse

#: Every column :func:`with_reading_figures` adds.
FIGURE_COLUMNS = [*(method.name + STEP_SUFFIX for method in METHODS), IDLE_VERSION,
                  IDLE_THRESHOLD, *IDLE_FIGURES.values()]
#: The window gpu_idle judges (that of the GPU counter fact).
JUDGED_PHASE = "experiment"
#: Per method, its unbridged gap time in the experiment window (s; ``gpu_repetition_energy``).
GAP_COLUMNS = [method.name + "_gap_s" for method in METHODS]
#: Per method, the median step between its frame's readings (s).
STEP_COLUMNS = [method.name + STEP_SUFFIX for method in METHODS]
#: What fact_quality takes of each repetition, kept per entry (see the module): the
#: experiment window's length (s), each method's gap time and median step.
FIGURES = entry_sync.Kept("gpu_repetition_figures",
                          ["entity", "duration_s", *GAP_COLUMNS, *STEP_COLUMNS])


def with_reading_figures(energy: pd.DataFrame, frames: Mapping[str, pd.DataFrame],
                         rule: waste.WasteRule = waste.GPU_IDLE) -> pd.DataFrame:
    """``energy`` (one repetition's ``gpu_repetition_energy`` rows) with the columns of the
    module, from the repetition's validated frames by table name
    (``joulehouse.gpu.store.repetition_frames``)."""
    steps = {}
    for method in METHODS:
        frame = frames.get(quality.GPU_FRAMES[method.name])
        steps[method.name + STEP_SUFFIX] = np.nan if frame is None else quality.median_step_s(
            frame)
    figures = {column: np.full(len(energy), np.nan) for column in IDLE_FIGURES.values()}
    for row in np.flatnonzero((energy["phase"] == JUDGED_PHASE).to_numpy()):
        judged = waste.gpu_idle(frames["gpu_power"], energy["window_start"].iloc[row],
                                energy["window_end"].iloc[row], rule)
        for name, column in IDLE_FIGURES.items():
            figures[column][row] = np.nan if judged is None else judged[name]
    count = len(energy)
    added = pd.DataFrame({**{name: np.full(count, step) for name, step in steps.items()},
                          IDLE_VERSION: np.full(count, rule.version, dtype=np.int64),
                          IDLE_THRESHOLD: np.full(count, float(rule.threshold)), **figures},
                         index=energy.index)
    return pd.concat([energy, added], axis=1)


def stored_figures(energy: pd.DataFrame, rule: waste.WasteRule = waste.GPU_IDLE
                   ) -> tuple[dict[tuple[str, str], float], dict[waste.Window, waste.Judged]]:
    """From stored ``gpu_repetition_energy`` rows: the median steps of the repetitions that
    have them ((entity, frame table) -> s, as ``quality.fact_quality`` takes them) and the
    experiment windows ``rule`` judged ((entity, start, end) -> ``waste.gpu_idle``'s figures,
    None where it could not judge; as ``waste.gpu_waste`` takes them). The entity is
    ``<data_root>/<repetition>``, as in ``energy_facts``."""
    if IDLE_VERSION not in energy.columns or energy.empty:
        return {}, {}
    rows = energy[energy[IDLE_VERSION].notna()]
    entity = (rows["data_root"] + "/" + rows["repetition"]).to_numpy()
    steps = {}
    for method in METHODS:
        frame = quality.GPU_FRAMES[method.name]
        column = rows[method.name + STEP_SUFFIX].to_numpy(float)
        steps.update(zip(((key, frame) for key in entity), column, strict=True))
    chosen = ((rows["phase"] == JUDGED_PHASE) & (rows[IDLE_VERSION] == rule.version)
              & (rows[IDLE_THRESHOLD] == rule.threshold)).to_numpy(bool)
    figures = {name: rows[column].to_numpy(float)[chosen]
               for name, column in IDLE_FIGURES.items()}
    windows = zip(entity[chosen], rows["window_start"][chosen], rows["window_end"][chosen],
                  strict=True)
    judged = {}
    for i, window in enumerate(windows):
        values = {name: float(column[i]) for name, column in figures.items()}
        judged[window] = None if np.isnan(values["energy_j"]) else values
    return steps, judged


def figures_rows(energy: pd.DataFrame, warehouse: Warehouse) -> pd.DataFrame:
    """:data:`FIGURES`' rows of the repetitions of ``energy`` (stored ``gpu_repetition_energy``
    rows): their experiment windows' length and gap times, and the median steps stored with
    them; a repetition stored without the figures (older code) has each method's step from
    its frame stored in ``warehouse`` (NaN without it), as ``quality.median_step_s`` takes
    it."""
    if energy.empty:
        return pd.DataFrame(columns=FIGURES.columns)
    rows = energy[(energy["phase"] == JUDGED_PHASE).to_numpy(bool)]
    entity = (rows["data_root"] + "/" + rows["repetition"]).to_numpy(object)
    table = pd.DataFrame({"entity": entity, "duration_s": rows["duration_s"].to_numpy(float),
                          **{c: rows[c].to_numpy(float) if c in rows else np.nan
                             for c in [*GAP_COLUMNS, *STEP_COLUMNS]}})
    figured = (rows[IDLE_VERSION].notna().to_numpy(bool) if IDLE_VERSION in rows
               else np.zeros(len(rows), bool))
    for i in np.flatnonzero(~figured):
        steps: dict[str, float] = {}  # frame table -> step: counter and power share one
        for method in METHODS:
            name = quality.GPU_FRAMES[method.name]
            if name not in steps:
                steps[name] = _frame_step(warehouse, entity[i], name)
            table.loc[i, method.name + STEP_SUFFIX] = steps[name]
    return table


def _frame_step(warehouse: Warehouse, key: str, name: str) -> float:
    """The median step of repetition ``key``'s stored frame ``name`` (NaN: not stored)."""
    table = f"{FRAMES_TABLE}/{name}"
    if not warehouse.has_partition(table, key):
        return np.nan
    return quality.median_step_s(warehouse.read_partitions(table, [key]))
