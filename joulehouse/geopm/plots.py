"""The plot of a report's energy per region (matplotlib), for materialization metadata.

Drawn on a ``matplotlib.figure.Figure`` directly (no pyplot): no global state
and no display backend, so it can be drawn in any thread or process.
"""

from __future__ import annotations

import pandas as pd

from joulehouse.plots import new_axes, png_bytes

#: Regions drawn (the most energy first); the others are summed into one bar.
MAX_REGIONS = 15
#: Bars, stacked: (column of the region roll-up, label).
COMPONENTS = [("package_energy_j", "package"), ("dram_energy_j", "DRAM"),
              ("gpu_energy_j", "GPU")]


def kj_column(column: str) -> str:
    """The kJ column of an energy column in J: ``package_energy_j`` -> ``package_energy_kj``."""
    return column.removesuffix("_j") + "_kj"


def region_energy_kj(regions: pd.DataFrame) -> pd.DataFrame:
    """What :func:`region_energy_png` draws: per region name, the energy of each component
    of :data:`COMPONENTS` in kJ (columns :func:`kj_column`; summed over hosts and hashes),
    the most energy first; the regions beyond :data:`MAX_REGIONS` summed into one row,
    ``other (N regions)``."""
    columns = [column for column, _ in COMPONENTS]
    energy = (regions.groupby("region", sort=False)[columns].sum(min_count=1) / 1e3).rename(
        columns=kj_column)
    energy = energy.loc[energy.sum(axis=1).sort_values(ascending=False, kind="stable").index]
    if len(energy) > MAX_REGIONS:
        rest = energy.iloc[MAX_REGIONS - 1:]
        energy = pd.concat([energy.iloc[:MAX_REGIONS - 1],
                            rest.sum(min_count=1).to_frame(f"other ({len(rest)} regions)").T])
    return energy


def region_energy_png(regions: pd.DataFrame, title: str) -> bytes:
    """A PNG bar chart of the energy per region (kJ, package + DRAM + GPU stacked) of one
    report's region roll-up (``energy.region_rollup``), as :func:`region_energy_kj`."""
    energy = region_energy_kj(regions)
    figure, axes = new_axes((6.4, 1.2 + 0.3 * len(energy)))
    left = pd.Series(0.0, index=energy.index)
    for column, label in COMPONENTS:
        if energy[kj_column(column)].notna().any():
            values = energy[kj_column(column)].fillna(0.0)
            axes.barh(energy.index, values, left=left, label=label)
            left += values
    axes.invert_yaxis()
    axes.set(title=title, xlabel="energy over all hosts (kJ)")
    axes.grid(axis="x", alpha=0.3)
    if axes.get_legend_handles_labels()[0]:  # a session report has no region energy to key
        axes.legend(fontsize="small")
    return png_bytes(figure)
