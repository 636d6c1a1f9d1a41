"""The GEOPM report source: landing folders of report files, and how to read them.

A partition key is ``<landing name>/<file name>`` (``resources/landing.py``):
one report file per partition, unique per landing folder.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from joulehouse.timeutil import check_timezone
from resources.gpu import settings_from_env
from resources.landing import Folders, LandingFolders

LANDING_ENV = "JOULEHOUSE_GEOPM_LANDING"
TIMEZONE_ENV = "JOULEHOUSE_GEOPM_TIMEZONE"


class GeopmReportSource(LandingFolders):
    """Folders where GEOPM reports land (one file per job, written when the job ends)."""

    timezone: str = Field(
        default="UTC", description="IANA zone of a report's Start Time written without one "
                                   "(GEOPM 1.x/2.x write the controller's local time).")

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        """An unknown zone is refused when the resource is built, not at every report."""
        return check_timezone(value)

    @classmethod
    def from_env(cls, default_folder: Folders, **settings) -> GeopmReportSource:
        """Landing folders from ``$JOULEHOUSE_GEOPM_LANDING`` (separated by ``os.pathsep``),
        else ``default_folder``; the quiet period from ``$JOULEHOUSE_QUIET_PERIOD_S`` and the
        time zone from ``$JOULEHOUSE_GEOPM_TIMEZONE`` where set, else ``settings``."""
        return cls(**{**settings, **cls.landing_settings_from_env(LANDING_ENV, default_folder),
                      **settings_from_env({"timezone": TIMEZONE_ENV})})
