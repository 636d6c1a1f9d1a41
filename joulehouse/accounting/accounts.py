"""The accounting tables in one call: daily and monthly rollups with carbon and cost, carbon
and cost per fact.

What the Dagster assets (``assets/accounting.py``), the demo and the benchmark call, so
that they agree. Daily carbon is computed on each day's piece of a fact at the
intensity's own resolution (``carbon.co2_g`` on the pieces), so a day's ``co2_g``
is the carbon of its own hours, and the days of a fact sum to the fact's carbon; the
same for cost against the tariff (``cost.cost`` on the pieces).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd

from joulehouse.accounting.carbon import (
    CarbonSettings,
    carbon_per_fact,
    co2_g,
    missing_carbon,
)
from joulehouse.accounting.cost import CostSettings, cost, cost_per_fact, missing_cost
from joulehouse.accounting.entities import attribute
from joulehouse.accounting.rollups import UTC, day_pieces, rollup
from joulehouse.accounting.tariff import empty_tariffs


@dataclass(frozen=True)
class Accounts:
    """``daily`` (DAILY_SCHEMA), ``monthly`` (MONTHLY_SCHEMA), ``carbon`` (CARBON_SCHEMA),
    ``cost`` (COST_SCHEMA)."""

    daily: pd.DataFrame
    monthly: pd.DataFrame
    carbon: pd.DataFrame
    cost: pd.DataFrame

    @property
    def missing(self) -> pd.DataFrame:
        """The facts without carbon, and why."""
        return missing_carbon(self.carbon)

    @property
    def unpriced(self) -> pd.DataFrame:
        """The facts without cost, and why."""
        return missing_cost(self.cost)


def account(facts: pd.DataFrame, intensity: pd.DataFrame, settings: CarbonSettings,
            time_zone: str, cc_jobs: pd.DataFrame | None = None, *,
            tariffs: pd.DataFrame | None = None,
            cost_settings: CostSettings | None = None) -> Accounts:
    """The accounting tables of ``facts`` (energy_facts rows of any sources), against the
    ``intensity`` table (``intensity.read_folder``) and the ``tariffs`` (``tariff.read_folder``;
    none: no fact is priced), in the UTC calendar and that of ``time_zone`` (the site's; one
    calendar when it is UTC); ``cc_jobs`` gives ClusterCockpit jobs their users, projects
    and partitions."""
    tariffs = empty_tariffs() if tariffs is None else tariffs
    cost_settings = cost_settings or CostSettings(pue=settings.pue)
    attributed = attribute(facts, cc_jobs)
    daily, monthly = [], []
    for pieces in calendar_pieces(attributed, intensity, settings, time_zone, tariffs,
                                  cost_settings):
        daily.append(rollup(pieces, "day"))
        monthly.append(rollup(pieces, "month"))
    return Accounts(daily=pd.concat(daily, ignore_index=True),
                    monthly=pd.concat(monthly, ignore_index=True),
                    carbon=carbon_per_fact(attributed, intensity, settings),
                    cost=cost_per_fact(attributed, tariffs, cost_settings))


def calendar_pieces(attributed: pd.DataFrame, intensity: pd.DataFrame, settings: CarbonSettings,
                    time_zone: str, tariffs: pd.DataFrame,
                    cost_settings: CostSettings) -> Iterator[pd.DataFrame]:
    """The day pieces of ``attributed`` facts with their ``co2_g``, ``cost`` and
    ``currency``, one calendar at a time (UTC and ``time_zone``) in the order of their
    names, the rollups' first key: the rollups of each, concatenated, are those of all
    pieces at once, without holding both calendars' pieces (22.5 million rows for 10
    million facts) together."""
    for zone in sorted({UTC, time_zone}):
        pieces = day_pieces(attributed, zone)
        pieces["co2_g"] = co2_g(pieces, intensity, settings)
        pieces["cost"], pieces["currency"] = cost(pieces, tariffs, cost_settings)
        yield pieces
