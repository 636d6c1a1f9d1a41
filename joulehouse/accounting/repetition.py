"""What ``fact_quality`` and ``waste`` need of a GPU repetition's readings, kept with its energy.

Both tables judge a GPU fact against the repetition's readings: the median step between
them (``quality.py``) and the energy spent while the GPU was idle (``waste.py``, rule
``gpu_idle``, from ``gpu-power``). Those readings are a repetition's largest frames (an
hour of ``gpu-power`` is about 25,000 rows); read back for every repetition at each
rebuild of the two tables, they cost what is stored, not what is new. So the step that
computes a repetition's energy, holding its frames in memory, adds these figures to the
energy's rows (:func:`with_reading_figures`), stored in the same file, atomically with
the energy; the tables take them from there (:func:`stored_figures`).

Columns added to ``gpu_repetition_energy`` (every window of the repetition):

- ``<method>_step_s``: the median step between the readings of the method's frame, over
  the whole frame (s; NaN without two readings or without the frame), as
  ``quality.median_step_s`` takes it;
- ``gpu_idle_version``, ``gpu_idle_threshold``: the waste rule that judged the window;
- ``gpu_idle_judged_j``, ``gpu_idle_energy_j``, ``gpu_idle_s``: ``waste.gpu_idle``'s
  ``energy_j``, ``idle_energy_j`` and ``idle_s`` over the window.

A repetition stored without them (by older code), or judged by another version or
threshold of the rule, gives no figures: the tables compute its from the stored frames.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from joulehouse.accounting import quality, waste
from joulehouse.gpu.energy import METHODS

#: The column holding each method's median step between readings.
STEP_COLUMN = "{}_step_s"
#: waste.gpu_idle's figures -> the column holding each.
IDLE_COLUMNS = {"energy_j": "gpu_idle_judged_j", "idle_energy_j": "gpu_idle_energy_j",
                "idle_s": "gpu_idle_s"}
VERSION_COLUMN, THRESHOLD_COLUMN = "gpu_idle_version", "gpu_idle_threshold"


def with_reading_figures(energy: pd.DataFrame, frames: Mapping[str, pd.DataFrame],
                         rule: waste.WasteRule = waste.GPU_IDLE) -> pd.DataFrame:
    """``energy`` (one repetition's ``gpu_repetition_energy`` rows) with the columns of the
    module, from the repetition's validated frames by table name
    (``joulehouse.gpu.store.repetition_frames``)."""
    steps = {}
    for method in METHODS:
        frame = frames.get(quality.GPU_FRAMES[method.name])
        steps[STEP_COLUMN.format(method.name)] = (
            np.nan if frame is None else quality.median_step_s(frame))
    judged = [waste.gpu_idle(frames["gpu_power"], start, end, rule)
              for start, end in zip(energy["window_start"], energy["window_end"], strict=True)]
    return energy.assign(
        **steps,
        **{VERSION_COLUMN: np.int64(rule.version), THRESHOLD_COLUMN: float(rule.threshold)},
        **{column: np.array([figures[name] for figures in judged], dtype=float)
           for name, column in IDLE_COLUMNS.items()})


def stored_figures(energy: pd.DataFrame, rule: waste.WasteRule = waste.GPU_IDLE
                   ) -> tuple[dict[tuple[str, str], float], dict[waste.Window, dict[str, float]]]:
    """From stored ``gpu_repetition_energy`` rows: the median steps of the repetitions that
    have them ((entity, frame table) -> s, as ``quality.fact_quality`` takes them) and the
    windows ``rule`` judged ((entity, start, end) -> ``waste.gpu_idle``'s figures, as
    ``waste.gpu_waste`` takes them). The entity is ``<data_root>/<repetition>``, as in
    ``energy_facts``."""
    if VERSION_COLUMN not in energy.columns or energy.empty:
        return {}, {}
    rows = energy[energy[VERSION_COLUMN].notna()]
    entity = (rows["data_root"] + "/" + rows["repetition"]).to_numpy()
    steps = {}
    for method in METHODS:
        frame = quality.GPU_FRAMES[method.name]
        column = rows[STEP_COLUMN.format(method.name)].to_numpy(float)
        steps.update(zip(((key, frame) for key in entity), column, strict=True))
    same_rule = ((rows[VERSION_COLUMN] == rule.version)
                 & (rows[THRESHOLD_COLUMN] == rule.threshold)).to_numpy(bool)
    figures = {name: rows[column].to_numpy(float) for name, column in IDLE_COLUMNS.items()}
    judged = {
        (key, start, end): {name: float(values[i]) for name, values in figures.items()}
        for i, (key, start, end) in enumerate(zip(entity, rows["window_start"],
                                                  rows["window_end"], strict=True))
        if same_rule[i]}
    return steps, judged

