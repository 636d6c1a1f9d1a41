"""The accounting tables in one call: daily and monthly rollups with carbon, carbon per fact.

What the Dagster assets (``assets/accounting.py``), the demo and the benchmark call, so
that they agree. Daily carbon is computed on each day's piece of a fact at the
intensity's own resolution (``carbon.integrate`` on the pieces), so a day's ``co2_g``
is the carbon of its own hours, and the days of a fact sum to the fact's carbon.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from joulehouse.accounting.carbon import (
    CarbonSettings,
    carbon_per_fact,
    integrate,
    missing_carbon,
)
from joulehouse.accounting.entities import attribute
from joulehouse.accounting.rollups import UTC, day_pieces, rollup


@dataclass(frozen=True)
class Accounts:
    """``daily`` (DAILY_SCHEMA), ``monthly`` (MONTHLY_SCHEMA), ``carbon`` (CARBON_SCHEMA)."""

    daily: pd.DataFrame
    monthly: pd.DataFrame
    carbon: pd.DataFrame

    @property
    def missing(self) -> pd.DataFrame:
        """The facts without carbon, and why."""
        return missing_carbon(self.carbon)


def account(facts: pd.DataFrame, intensity: pd.DataFrame, settings: CarbonSettings,
            time_zone: str, cc_jobs: pd.DataFrame | None = None) -> Accounts:
    """The accounting tables of ``facts`` (energy_facts rows of any sources), against the
    ``intensity`` table (``intensity.read_folder``), in the UTC calendar and that of
    ``time_zone`` (the site's; one calendar when it is UTC); ``cc_jobs`` gives
    ClusterCockpit jobs their users, projects and partitions."""
    attributed = attribute(facts, cc_jobs)
    calendars = [UTC] if time_zone == UTC else [UTC, time_zone]
    pieces = pd.concat([day_pieces(attributed, zone) for zone in calendars], ignore_index=True)
    pieces["co2_g"] = integrate(pieces, intensity, settings)["co2_g"]
    return Accounts(daily=rollup(pieces, "day"), monthly=rollup(pieces, "month"),
                    carbon=carbon_per_fact(attributed, intensity, settings))
