"""The accounting tables in one call: daily and monthly rollups with carbon and cost, carbon
and cost per fact.

What the Dagster assets (``assets/accounting.py``), the demo and the benchmark call, so
that they agree. The two calendars' rollups and the two per-fact tables are independent:
they run on WORKERS threads (numpy, pandas' group sums and Arrow release the GIL in
their loops), both cores of a two-core machine instead of one. Daily carbon is computed on each day's piece of a fact at the
intensity's own resolution (``carbon.co2_g`` on the pieces), so a day's ``co2_g``
is the carbon of its own hours, and the days of a fact sum to the fact's carbon; the
same for cost against the tariff (``cost.cost`` on the pieces). A month's row sums its
days' rows (``rollups.monthly``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
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
from joulehouse.accounting.rollups import UTC, daily, day_pieces, members, month_counts, monthly
from joulehouse.accounting.tariff import empty_tariffs

#: Threads computing the calendars' rollups and the per-fact tables side by side. Each
#: calendar holds its day pieces while it runs (2.25 per fact, UTC and a site's zone:
#: benchmarks/accounting.py prints the whole run's peak memory).
WORKERS = 2


@dataclass(frozen=True)
class Accounts:
    """``daily`` (DAILY_SCHEMA), ``monthly`` (MONTHLY_SCHEMA), ``carbon`` (CARBON_SCHEMA),
    ``cost`` (COST_SCHEMA), and, if asked for, the months' ``members`` (``rollups.members``,
    FACT the index of a fact in the facts given) whose facts and entities the monthly rows
    count."""

    daily: pd.DataFrame
    monthly: pd.DataFrame
    carbon: pd.DataFrame
    cost: pd.DataFrame
    members: pd.DataFrame | None = None

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
            cost_settings: CostSettings | None = None, with_members: bool = False) -> Accounts:
    """The accounting tables of ``facts`` (energy_facts rows of any sources), against the
    ``intensity`` table (``intensity.read_folder``) and the ``tariffs`` (``tariff.read_folder``;
    none: no fact is priced), in the UTC calendar and that of ``time_zone`` (the site's; one
    calendar when it is UTC); ``cc_jobs`` gives ClusterCockpit jobs their users, projects
    and partitions; ``with_members``: the months' members too (what the accounting kept
    incrementally stores)."""
    tariffs = empty_tariffs() if tariffs is None else tariffs
    cost_settings = cost_settings or CostSettings(pue=settings.pue)
    attributed = attribute(facts, cc_jobs)
    with ThreadPoolExecutor(WORKERS) as pool:
        calendars = [pool.submit(calendar_rollups, attributed, zone, intensity, settings,
                                 tariffs, cost_settings, with_members)
                     for zone in sorted({UTC, time_zone})]
        carbon = pool.submit(carbon_per_fact, attributed, intensity, settings)
        priced = pool.submit(cost_per_fact, attributed, tariffs, cost_settings)
        daily, monthly, months = zip(*(calendar.result() for calendar in calendars),
                                     strict=True)
        return Accounts(daily=pd.concat(daily, ignore_index=True),
                        monthly=pd.concat(monthly, ignore_index=True),
                        carbon=carbon.result(), cost=priced.result(),
                        members=pd.concat(months, ignore_index=True) if with_members else None)


def calendar_rollups(attributed: pd.DataFrame, zone: str, intensity: pd.DataFrame,
                     settings: CarbonSettings, tariffs: pd.DataFrame,
                     cost_settings: CostSettings, with_members: bool = False
                     ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None]:
    """The daily and monthly rollups of ``attributed`` facts in the calendar of ``zone``,
    with carbon and cost computed on their day pieces (a month summing its days), and, if
    ``with_members``, the months' members. The calendars' rollups,
    concatenated in the order of their names (the rollups' first key), are those of all
    pieces at once, without holding both calendars' pieces (22.5 million rows for 10
    million facts) in one frame."""
    pieces = day_pieces(attributed, zone)
    pieces["co2_g"] = co2_g(pieces, intensity, settings)
    pieces["cost"], pieces["currency"] = cost(pieces, tariffs, cost_settings)
    days = daily(pieces)
    return (days, monthly(days, month_counts(pieces)),
            members(pieces) if with_members else None)
