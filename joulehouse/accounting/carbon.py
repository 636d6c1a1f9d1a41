"""Carbon per energy fact: energy integrated against a time-varying grid intensity.

A window (a fact, or a fact's piece of a day) gets

    co2_g = energy_j / duration x integral of intensity over the window x PUE / 3.6e6

(intensity in gCO2e/kWh) at the intensity's own resolution: ``stepseries.py``, which
cost (``cost.py``) shares. The zone of a window comes from the settings' ``zones``: the
most specific of ``"<source>/<group>"`` (a data root, a cluster: see ``entities.py``),
``"<source>"``, then ``"*"``.

Where the intensity series of the zone (at the configured ``basis``) does not cover a
piece, the piece falls back to OWID's yearly figure only when ``yearly_fallback`` maps
the zone to an OWID code; the row then says ``series+yearly`` or ``yearly``. Otherwise
the window gets ``co2_g`` NaN and ``missing`` says why (no zone configured, or the first
uncovered span): never a default. Each row records the zone, PUE, basis and the files and
digests of the intensity it used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from joulehouse.accounting import stepseries
from joulehouse.accounting.intensity import SERIES, YEARLY
from joulehouse.accounting.schemas import CARBON_SCHEMA

#: The intensity table's value column (gCO2e/kWh).
VALUE = "intensity_g_per_kwh"
#: ``intensity_kind`` values: none, the series only, the yearly fallback only, both.
KINDS = ["", SERIES, YEARLY, f"{SERIES}+{YEARLY}"]


@dataclass(frozen=True)
class CarbonSettings:
    """Where each fact's electricity comes from and how the site scales it.

    ``zones``: ``"<source>/<group>"``, ``"<source>"`` or ``"*"`` -> grid zone.
    ``pue``: site power usage effectiveness (>= 1), applied to every fact.
    ``basis``: which Electricity Maps figure, ``lca`` or ``direct``.
    ``yearly_fallback``: zone -> OWID code whose yearly figure fills what the series does
    not cover; a zone not in it gets no fallback.
    """

    zones: Mapping[str, str] = field(default_factory=dict)
    pue: float = 1.0
    basis: str = "lca"
    yearly_fallback: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.pue >= 1.0:
            raise ValueError(f"PUE must be at least 1, not {self.pue}")
        if self.basis not in ("lca", "direct"):
            raise ValueError(f"basis must be lca or direct, not {self.basis!r}")


def _segments_of(intensity: pd.DataFrame, settings: CarbonSettings,
                 versions: pd.Series) -> Callable[[str], stepseries.Segments]:
    """The function giving a zone's segments: its series at the configured basis, then
    the OWID yearly figure of its fallback code, if any."""
    def segments_of(zone: str) -> stepseries.Segments:
        fine = intensity[(intensity["zone"] == zone) & (intensity["basis"] == settings.basis)
                         & (intensity["kind"] == SERIES)]
        code = settings.yearly_fallback.get(zone)
        coarse = (intensity[(intensity["zone"] == code) & (intensity["kind"] == YEARLY)]
                  if code else intensity.iloc[:0])
        return stepseries.segments([stepseries.part_of(rows, VALUE, versions)
                                    for rows in (fine, coarse)])
    return segments_of


def co2_g(windows: pd.DataFrame, intensity: pd.DataFrame,
          settings: CarbonSettings) -> np.ndarray:
    """The ``co2_g`` column of :func:`integrate` (the same values), without the zone, kind,
    files and reasons of each window: what the rollups need of millions of day pieces."""
    segments_of = _segments_of(intensity, settings, stepseries.versions_of(intensity)[1])
    return stepseries.amounts(windows, settings.zones, segments_of, settings.pue)


def integrate(windows: pd.DataFrame, intensity: pd.DataFrame,
              settings: CarbonSettings) -> pd.DataFrame:
    """Carbon of each window of ``windows`` (columns ``source``, ``group``, ``window_start``,
    ``window_end``, ``energy_j``), on its index: ``zone``, ``pue``, ``basis``,
    ``intensity_g_per_kwh``, ``co2_g``, ``intensity_kind``, ``intensity_files``,
    ``intensity_digests``, ``missing`` (see the module and CARBON_SCHEMA)."""
    versions, ids = stepseries.versions_of(intensity)
    done = stepseries.integrate(
        windows, settings.zones, _segments_of(intensity, settings, ids), settings.pue,
        versions, key_name="zone",
        series_name=lambda zone: f"{zone} ({settings.basis}) intensity")
    return pd.DataFrame({
        "zone": done["key"], "pue": settings.pue,
        "basis": stepseries.constant(settings.basis, len(windows)),
        "intensity_g_per_kwh": done["value_per_kwh"], "co2_g": done["amount"],
        "intensity_kind": pd.Categorical.from_codes(done["kind"].to_numpy(), KINDS),
        "intensity_files": done["files"], "intensity_digests": done["digests"],
        "missing": done["missing"],
    }, index=windows.index, copy=False)  # copy=False: no consolidation into 2-D blocks


def carbon_per_fact(facts: pd.DataFrame, intensity: pd.DataFrame,
                    settings: CarbonSettings) -> pd.DataFrame:
    """The CARBON_SCHEMA table: each fact of ``facts`` (energy_facts rows with the
    ``group`` of ``entities.attribute``) with its carbon, in the facts' order."""
    return stepseries.per_fact_table(
        facts, integrate(facts, intensity, settings), CARBON_SCHEMA, "carbon_per_fact")


def missing_carbon(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a carbon table (carbon_per_fact) without a value, and why."""
    return stepseries.missing_rows(table, "co2_g", "zone")
