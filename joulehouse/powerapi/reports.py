"""Report files read together: a sensor's HWPC reports and its formula's power reports.

A session's reports are often spread over several files (the sensor's
output, the formula's output, a MongoDB export of either), and the same
report may be in two of them (one data set in two forms). :func:`combine`
puts the files' frames together and keeps one copy of a report given twice
with the same values; a report given twice with different values stays, and
the RAPL frame's uniqueness check refuses it.

What a file or the energy left out (``joulehouse/leftout.py``) comes with the
frames: a file read to its end (not a growing file read to its last line end)
that ends inside a report leaves that report out, and says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from joulehouse.leftout import LeftOut
from joulehouse.powerapi import energy, layout, readers
from joulehouse.powerapi.jsonblocks import CLOSING


@dataclass
class Reports:
    """HWPC counters (``COUNTERS_SCHEMA``) and power reports (``POWER_SCHEMA``); None
    where no file of that kind was read; ``left_out``: what the files read left out."""

    counters: pd.DataFrame | None = None
    power: pd.DataFrame | None = None
    left_out: list[LeftOut] = field(default_factory=list)
    #: (counters, their RAPL frame): :meth:`rapl` computed once per counters frame
    _rapl: tuple[pd.DataFrame, pd.DataFrame] | None = field(default=None, repr=False,
                                                           compare=False)

    def rapl(self) -> pd.DataFrame | None:
        """RAPL energy per tick and socket (J), ``RAPL_SCHEMA``; None without counters;
        computed once for the same counters (the energy and what it leaves out both use it)."""
        if self.counters is None:
            return None
        if self._rapl is None or self._rapl[0] is not self.counters:
            self._rapl = (self.counters, readers.rapl_energy(self.counters))
        return self._rapl[1]

    def window_energy(self, window: str = "1min",
                      targets: tuple[str, ...] = energy.MACHINE_TARGETS) -> pd.DataFrame:
        """Measured and estimated energy per sensor, target, component and window, with the
        estimates' relative error (:func:`joulehouse.powerapi.energy.window_energy`);
        ``targets``: the machine-level target names."""
        return energy.window_energy(self.rapl(), self.power, window, targets)

    def energy_left_out(self, targets: tuple[str, ...] = energy.MACHINE_TARGETS,
                        input_of: Callable[[str], str] = energy.sensor_input
                        ) -> list[LeftOut]:
        """What the files left out, then what :meth:`window_energy` leaves out (its records
        name ``input_of(sensor)``)."""
        return self.left_out + energy.left_out(self.rapl(), self.power, targets, input_of)


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
    the ``end`` of an earlier read. Read to its end (``stop`` None), a file that ends
    inside a report leaves it out (:func:`cut_short`)."""
    if item.kind == layout.HWPC:
        counters, end = readers.read_hwpc_part(item.path, timezone=timezone, start=start,
                                               stop=stop)
        found = Reports(counters=counters)
    elif item.kind == layout.POWER:
        power, end = readers.read_power_part(item.path, timezone=timezone,
                                             epoch_zone=epoch_zone, start=start, stop=stop)
        found = Reports(power=power)
    else:
        return Reports(), start
    if stop is None:
        found.left_out = cut_short(item.path, end)
    return found, end


def cut_short(path: Path, end: int) -> list[LeftOut]:
    """A record of the last report of ``path`` when the file goes on after ``end`` (the byte
    after its last complete report) with more than blanks and closing brackets: it ends
    inside a report, which the readers leave out."""
    with path.open("rb") as file:
        file.seek(end)
        rest = file.read()
    if not rest.strip(CLOSING):
        return []
    return [LeftOut(energy.FACTS_SOURCE, str(path), f"its last report (bytes {end}-"
                    f"{end + len(rest)})", "the file ends inside it: cut short (a file still "
                    "being written is read on later; this one was read to its end)")]


def combine(parts: Sequence[Reports]) -> Reports:
    """The frames of several files as one; a report given twice with the same values is kept once."""
    counters = [part.counters for part in parts if part.counters is not None]
    power = [part.power for part in parts if part.power is not None]
    combined = Reports(left_out=[record for part in parts for record in part.left_out])
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
