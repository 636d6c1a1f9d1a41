"""Report files read together: a sensor's HWPC reports and its formula's power reports.

A session's reports are often spread over several files (the sensor's
output, the formula's output, a MongoDB export of either), and the same
report may be in two of them (one data set in two forms). :func:`combine`
puts the files' frames together and keeps one copy of a report given twice
with the same values; a report given twice with different values stays, and
the RAPL frame's uniqueness check refuses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from joulehouse.powerapi import energy, layout, readers


@dataclass
class Reports:
    """HWPC counters (``COUNTERS_SCHEMA``) and power reports (``POWER_SCHEMA``); None
    where no file of that kind was read."""

    counters: pd.DataFrame | None = None
    power: pd.DataFrame | None = None

    def rapl(self) -> pd.DataFrame | None:
        """RAPL energy per tick and socket (J), ``RAPL_SCHEMA``; None without counters."""
        return None if self.counters is None else readers.rapl_energy(self.counters)

    def window_energy(self, window: str = "1min") -> pd.DataFrame:
        """Measured and estimated energy per sensor, target, component and window, with the
        estimates' relative error (:func:`joulehouse.powerapi.energy.window_energy`)."""
        return energy.window_energy(self.rapl(), self.power, window)


def read_file(item: layout.ReportFile, *, timezone: str = "UTC",
              epoch_zone: str | None = None) -> Reports:
    """The reports of one classified file (an OTHER file gives none).

    ``timezone``: zone of ISO timestamps without one; ``epoch_zone``: the zone
    PowerAPI 2.10.0 wrote epoch milliseconds in (see ``readers.read_power``).
    Raises the readers' InputError for bad content.
    """
    return read_part(item, timezone=timezone, epoch_zone=epoch_zone)[0]


def read_part(item: layout.ReportFile, *, timezone: str = "UTC", epoch_zone: str | None = None,
              start: int = 0, stop: int | None = None) -> tuple[Reports, int]:
    """The complete reports of one classified file between bytes ``start`` and ``stop``
    (None: its end), and the byte after the last of them (``start`` if none; an OTHER file
    gives no reports). A ``start`` other than 0 is for line-based files (JSON lines, CSV):
    the ``end`` of an earlier read."""
    if item.kind == layout.HWPC:
        counters, end = readers.read_hwpc_part(item.path, timezone=timezone, start=start,
                                               stop=stop)
        return Reports(counters=counters), end
    if item.kind == layout.POWER:
        power, end = readers.read_power_part(item.path, timezone=timezone,
                                             epoch_zone=epoch_zone, start=start, stop=stop)
        return Reports(power=power), end
    return Reports(), start


def combine(parts: Sequence[Reports]) -> Reports:
    """The frames of several files as one; a report given twice with the same values is kept once."""
    counters = [part.counters for part in parts if part.counters is not None]
    power = [part.power for part in parts if part.power is not None]
    combined = Reports()
    if counters:
        combined.counters = readers.concat_counters(counters).drop_duplicates(ignore_index=True)
    if power:
        frame = pd.concat(power, ignore_index=True) if len(power) > 1 else power[0]
        combined.power = frame.drop_duplicates(ignore_index=True)
    return combined


def read_reports(items: Iterable[layout.ReportFile], *, timezone: str = "UTC",
                 epoch_zone: str | None = None) -> Reports:
    """Every HWPC and power report of ``items`` combined (OTHER files skipped); the first
    bad file's InputError stops it."""
    return combine([read_file(item, timezone=timezone, epoch_zone=epoch_zone)
                    for item in items])
