"""Cost per energy fact: energy integrated against a time-of-use tariff (``tariff.py``).

The same integration as carbon (``stepseries.py``), with the tariff's price per kWh as
the step series:

    cost = energy_j / duration x integral of price over the window x PUE / 3.6e6

(in the tariff's currency; the site PUE scales IT energy to what the meter bills). The
tariff of a window is its site's, chosen by the settings' ``sites``: the most specific of
``"<source>/<group>"``, ``"<source>"``, then ``"*"``. A window the site's bands do not
wholly cover, or one of no configured site, gets cost NaN and ``missing`` says why: never a
default price. Each row names the tariff files and digests it used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from joulehouse.accounting import stepseries
from joulehouse.accounting.schemas import COST_SCHEMA
from joulehouse.accounting.tariff import VALUE


@dataclass(frozen=True)
class CostSettings:
    """``sites``: ``"<source>/<group>"``, ``"<source>"`` or ``"*"`` -> tariff site;
    ``pue``: site power usage effectiveness (>= 1), applied to every fact."""

    sites: Mapping[str, str] = field(default_factory=dict)
    pue: float = 1.0

    def __post_init__(self) -> None:
        if not self.pue >= 1.0:
            raise ValueError(f"PUE must be at least 1, not {self.pue}")


def _segments_of(tariffs: pd.DataFrame, versions: pd.Series
                 ) -> Callable[[str], stepseries.Segments]:
    def segments_of(site: str) -> stepseries.Segments:
        return stepseries.segments([stepseries.part_of(tariffs[tariffs["site"] == site],
                                                       VALUE, versions)])
    return segments_of


def _currencies(windows: pd.DataFrame, tariffs: pd.DataFrame,
                settings: CostSettings) -> pd.Categorical:
    """The currency of each window's site ('' where none is configured or priced)."""
    codes, sites = stepseries.key_codes(windows, settings.sites)
    of_site = tariffs.drop_duplicates("site").set_index("site")["currency"]
    names, of_code = np.unique([str(of_site.get(site, "")) for site in sites] or [""],
                               return_inverse=True)  # two sites may share a currency
    return pd.Categorical.from_codes(of_code[codes], names)


def cost(windows: pd.DataFrame, tariffs: pd.DataFrame,
         settings: CostSettings) -> tuple[np.ndarray, pd.Categorical]:
    """The ``cost`` and ``currency`` columns of :func:`integrate` (the same values) without
    the lineage: what the rollups need of millions of day pieces."""
    segments_of = _segments_of(tariffs, stepseries.versions_of(tariffs)[1])
    return (stepseries.amounts(windows, settings.sites, segments_of, settings.pue),
            _currencies(windows, tariffs, settings))


def integrate(windows: pd.DataFrame, tariffs: pd.DataFrame,
              settings: CostSettings) -> pd.DataFrame:
    """Cost of each window of ``windows`` (columns ``source``, ``group``, ``window_start``,
    ``window_end``, ``energy_j``), on its index: the COST_SCHEMA columns after the fact's."""
    versions, ids = stepseries.versions_of(tariffs)
    done = stepseries.integrate(windows, settings.sites, _segments_of(tariffs, ids),
                                settings.pue, versions, key_name="tariff site",
                                series_name=lambda site: f"site {site}'s tariff")
    return pd.DataFrame({
        "site": done["key"], "pue": settings.pue, "price_per_kwh": done["value_per_kwh"],
        "cost": done["amount"],
        "currency": _currencies(windows, tariffs, settings),
        "tariff_files": done["files"], "tariff_digests": done["digests"],
        "missing": done["missing"],
    }, index=windows.index, copy=False)  # copy=False: no consolidation into 2-D blocks


def cost_per_fact(facts: pd.DataFrame, tariffs: pd.DataFrame,
                  settings: CostSettings) -> pd.DataFrame:
    """The COST_SCHEMA table: each fact of ``facts`` (energy_facts rows with the ``group``
    of ``entities.attribute``) with its cost, in the facts' order."""
    return stepseries.per_fact_table(
        facts, integrate(facts, tariffs, settings), COST_SCHEMA, "cost_per_fact")


def missing_cost(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a cost table (cost_per_fact) without a value, and why."""
    return stepseries.missing_rows(table, "cost", "site")
