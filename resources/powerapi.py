"""The PowerAPI source: folders where report files land, and how to read them.

A partition key is ``<landing name>/<entry name>`` (``resources/landing.py``):
one report file, or one folder of report files, as it landed.
"""

from __future__ import annotations

import os

import pandas as pd
from pydantic import Field, field_validator

from joulehouse.timeutil import check_timezone
from resources.gpu import SETTINGS_ENV, settings_from_env
from resources.landing import LandingFolders

LANDING_ENV = "JOULEHOUSE_POWERAPI_LANDING"
#: Environment variables of the reader and energy settings: field -> variable.
READER_ENV = {
    "timezone": "JOULEHOUSE_POWERAPI_TIMEZONE",
    "epoch_zone": "JOULEHOUSE_POWERAPI_EPOCH_ZONE",
    "window": "JOULEHOUSE_POWERAPI_WINDOW",
}


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

    @field_validator("timezone", "epoch_zone")
    @classmethod
    def _known_zone(cls, zone: str | None) -> str | None:
        return zone if zone is None else check_timezone(zone)

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
    def from_env(cls, default_folder: str | os.PathLike[str], **settings) -> PowerapiSource:
        """Landing folders from ``$JOULEHOUSE_POWERAPI_LANDING`` (separated by
        ``os.pathsep``), else ``default_folder``; the quiet period from
        ``$JOULEHOUSE_QUIET_PERIOD_S`` and the reader settings from the variables of
        :data:`READER_ENV` where set, else ``settings``."""
        value = os.environ.get(LANDING_ENV, "")
        folders = [p for p in value.split(os.pathsep) if p] or [str(default_folder)]
        from_env = settings_from_env(
            {"quiet_period_s": SETTINGS_ENV["quiet_period_s"], **READER_ENV})
        return cls(landing_folders=folders, **{**settings, **from_env})
