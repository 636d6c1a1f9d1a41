"""The accounting settings: where grid intensity lands, the site's zone, grid zones, PUE.

From the environment (``AccountingSettings.from_env``):

- ``JOULEHOUSE_INTENSITY_LANDING``: the folder of intensity CSV files, default
  ``examples/intensity``;
- ``JOULEHOUSE_SITE_TIMEZONE``: the IANA zone of the site's local days, default
  ``Europe/Berlin`` (the bundled examples' sites);
- ``JOULEHOUSE_CARBON_ZONES``: ``key=zone`` pairs separated by commas, a key being
  ``<source>/<group>`` (a data root, a cluster), ``<source>`` or ``*``; default ``*=DE``
  (the bundled intensity's zone);
- ``JOULEHOUSE_PUE`` (default 1.0), ``JOULEHOUSE_INTENSITY_BASIS`` (``lca`` or ``direct``,
  default ``lca``);
- ``JOULEHOUSE_INTENSITY_FALLBACK``: ``zone=OWID code`` pairs (e.g. ``DE=DEU``) whose yearly
  figure fills what a zone's series does not cover; default none;
- ``JOULEHOUSE_TARIFF_LANDING``: the folder of time-of-use tariff CSV files
  (``joulehouse/accounting/tariff.py``), default the bundled ``examples/tariffs``;
- ``JOULEHOUSE_TARIFF_SITES``: ``key=site`` pairs like the zones, naming each fact's tariff
  site; default ``*=hpc-centre`` (the bundled tariff's site).
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pandas as pd
from pydantic import Field, field_validator

from joulehouse.accounting import tariff
from joulehouse.accounting.carbon import CarbonSettings
from joulehouse.accounting.cost import CostSettings
from joulehouse.accounting.intensity import read_folder
from joulehouse.leftout import LeftOut
from joulehouse.timeutil import check_timezone
from resources.gpu import settings_from_env

LANDING_ENV = "JOULEHOUSE_INTENSITY_LANDING"
ENV = {"time_zone": "JOULEHOUSE_SITE_TIMEZONE", "pue": "JOULEHOUSE_PUE",
       "basis": "JOULEHOUSE_INTENSITY_BASIS", "tariff_landing": "JOULEHOUSE_TARIFF_LANDING"}
MAPPING_ENV = {"zones": "JOULEHOUSE_CARBON_ZONES", "yearly_fallback": "JOULEHOUSE_INTENSITY_FALLBACK",
               "tariff_sites": "JOULEHOUSE_TARIFF_SITES"}
#: The bundled example tariff (``examples/tariffs``) and its site.
EXAMPLE_TARIFFS = Path(__file__).resolve().parent.parent / "examples" / "tariffs"
EXAMPLE_TARIFF_SITE = "hpc-centre"


def parse_pairs(text: str, variable: str) -> dict[str, str]:
    """``"a=x, b=y"`` -> ``{"a": "x", "b": "y"}``; raises ValueError naming ``variable``."""
    pairs = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = (s.strip() for s in item.partition("="))
        if not sep or not key or not value:
            raise ValueError(f"{variable}: {item!r} is not key=value")
        pairs[key] = value
    return pairs


class AccountingSettings(dg.ConfigurableResource):
    """Where intensity files land and how facts become carbon (see the module)."""

    intensity_landing: str = Field(description="Folder of grid-intensity CSV files.")
    time_zone: str = Field(default="Europe/Berlin",
                           description="IANA zone of the site's local days.")
    zones: dict[str, str] = Field(default_factory=lambda: {"*": "DE"},
                                  description="<source>/<group>, <source> or * -> grid zone.")
    pue: float = Field(default=1.0, ge=1.0, description="Site power usage effectiveness.")
    basis: str = Field(default="lca", description="Intensity basis: lca or direct.")
    yearly_fallback: dict[str, str] = Field(default_factory=dict,
                                            description="Zone -> OWID code of its yearly "
                                                        "fallback; none by default.")
    tariff_landing: str = Field(default=str(EXAMPLE_TARIFFS),
                                description="Folder of time-of-use tariff CSV files.")
    tariff_sites: dict[str, str] = Field(default_factory=lambda: {"*": EXAMPLE_TARIFF_SITE},
                                         description="<source>/<group>, <source> or * -> "
                                                     "tariff site.")

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        return check_timezone(value)

    @field_validator("basis")
    @classmethod
    def _known_basis(cls, value: str) -> str:
        if value not in ("lca", "direct"):
            raise ValueError(f"basis must be lca or direct, not {value!r}")
        return value

    @classmethod
    def from_env(cls, default_landing: str | os.PathLike[str], **settings) -> AccountingSettings:
        """The settings from the environment (see the module), else ``settings`` (those the
        YAML declares), else the defaults."""
        mappings = {field: parse_pairs(os.environ[name], name) for field, name in
                    MAPPING_ENV.items() if os.environ.get(name, "").strip()}
        return cls(**{**settings, "intensity_landing": os.environ.get(LANDING_ENV, "").strip()
                      or str(default_landing), **settings_from_env(ENV), **mappings})

    def carbon_settings(self) -> CarbonSettings:
        """The core's carbon settings."""
        return CarbonSettings(zones=dict(self.zones), pue=self.pue, basis=self.basis,
                              yearly_fallback=dict(self.yearly_fallback))

    def cost_settings(self) -> CostSettings:
        """The core's cost settings (the same PUE as carbon)."""
        return CostSettings(sites=dict(self.tariff_sites), pue=self.pue)

    def read_tariffs(self) -> pd.DataFrame:
        """Every tariff file of the tariff landing folder, as one table."""
        return tariff.read_folder(Path(self.tariff_landing))

    def read_intensity(self, left_out: list[LeftOut] | None = None) -> pd.DataFrame:
        """Every intensity file of the landing folder, as one table; what the files leave
        out (rows with an empty intensity cell) is added to ``left_out`` when given."""
        return read_folder(Path(self.intensity_landing), left_out)
