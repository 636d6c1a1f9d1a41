"""The PowerAPI source: folders where report files land, and how to read them.

A partition key is ``<landing name>/<entry name>`` (``resources/landing.py``):
one report file, or one folder of report files, as it landed; a file that
keeps growing stays one partition, read on in pieces
(``joulehouse/powerapi/stream.py``).
"""

from __future__ import annotations

import pandas as pd
from pydantic import Field, field_validator

from joulehouse.powerapi.energy import MACHINE_TARGETS, MACHINE_TARGETS_ENV, target_names
from joulehouse.timeutil import check_timezone
from resources.gpu import settings_from_env
from resources.landing import Folders, LandingFolders

LANDING_ENV = "JOULEHOUSE_POWERAPI_LANDING"
#: Environment variables of the reader, stream and energy settings: field -> variable.
READER_ENV = {
    "timezone": "JOULEHOUSE_POWERAPI_TIMEZONE",
    "epoch_zone": "JOULEHOUSE_POWERAPI_EPOCH_ZONE",
    "window": "JOULEHOUSE_POWERAPI_WINDOW",
    "machine_targets": MACHINE_TARGETS_ENV,
    "grown_bytes": "JOULEHOUSE_POWERAPI_GROWN_BYTES",
    "grown_wait_s": "JOULEHOUSE_POWERAPI_GROWN_WAIT_S",
}
#: A growing report file is read on once it grew by this much (1 MiB: about 10 s of a busy
#: node's hwpc-sensor JSON lines, 30 min of one target's).
GROWN_BYTES = 1 << 20
#: A growing report file is also read on at the latest this long after a tick first saw it
#: grown (s): a target's power reports (about 1 MiB in 30 min) reach the tables within a
#: minute, two ticks and a run, at one run a minute per stream at most.
GROWN_WAIT_S = 60.0


class PowerapiSource(LandingFolders):
    """Folders where PowerAPI HWPC and power report files land, and the reader settings."""

    timezone: str = Field(
        default="UTC", description="IANA zone of ISO timestamps written without a zone.")
    epoch_zone: str | None = Field(
        default=None,
        description="IANA zone PowerAPI 2.10.0 wrote its epoch milliseconds in (its power "
                    "reports are shifted by the writing machine's offset); None: true UTC.")
    window: str = Field(
        default="1min", description="Length of the energy windows (a pandas Timedelta string).")
    machine_targets: str = Field(
        default=",".join(MACHINE_TARGETS),
        description="Names of the machine-level target, whose RAPL energy is the "
                    "measurement, separated by commas (hwpc-sensor: all; older: system).")
    grown_bytes: int | None = Field(
        default=GROWN_BYTES, gt=0,
        description="A report entry still being written (a live sensor or formula, never "
                    "quiet) is handed out once its files grew by this many bytes since its "
                    "last read, and only its new complete reports are read; None: only once "
                    "quiet.")
    grown_wait_s: float | None = Field(
        default=GROWN_WAIT_S, gt=0,
        description="A report entry still being written is handed out at the latest this "
                    "many seconds after a sensor tick first saw it grown, however little it "
                    "grew: how fresh a slow stream's reports are; None: no such bound.")

    @field_validator("timezone", "epoch_zone")
    @classmethod
    def _known_zone(cls, zone: str | None) -> str | None:
        return zone if zone is None else check_timezone(zone)

    @field_validator("machine_targets")
    @classmethod
    def _some_target(cls, names: str) -> str:
        return ",".join(target_names(names))

    @property
    def targets(self) -> tuple[str, ...]:
        """The machine-level target names, as a tuple."""
        return target_names(self.machine_targets)

    @field_validator("window")
    @classmethod
    def _positive_window(cls, window: str) -> str:
        try:
            length = pd.Timedelta(window)
        except ValueError as err:
            raise ValueError(f"window {window!r} is not a time length such as 1min") from err
        if length <= pd.Timedelta(0):
            raise ValueError(f"window {window!r} must be longer than 0")
        return window

    @classmethod
    def from_env(cls, default_folder: Folders, **settings) -> PowerapiSource:
        """Landing folders from ``$JOULEHOUSE_POWERAPI_LANDING`` (separated by
        ``os.pathsep``), else ``default_folder``; the quiet period from
        ``$JOULEHOUSE_QUIET_PERIOD_S`` and the reader settings from the variables of
        :data:`READER_ENV` where set, else ``settings``."""
        return cls(**{**settings, **cls.landing_settings_from_env(LANDING_ENV, default_folder),
                      **settings_from_env(READER_ENV)})
