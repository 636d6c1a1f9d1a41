"""How often the tables that follow the facts, but are no one's freshness target, are asked
for: the derived tables (trust checks, waste, quality) and the PowerAPI trials.

Asked for at every change, as the accounting is, each became a run of its own once each
pool had its automation sensor (``sensors/automation.py``): on the seeded history, 165
runs an hour of the derived tables and PowerAPI's trials besides the accounting's 89, each
paying a run worker's start on a 2-CPU host, and PowerAPI's runs waited 62 s (p50) for
their pool, held by the trials' (benchmarks/README.md). At most once every
``JOULEHOUSE_FOLLOWERS_EVERY_MIN`` minutes (default 5; 0: at every change), what changed
in between is taken up by one run, so they are at most that much (and their run) behind
the facts.
"""

from __future__ import annotations

import os

import dagster as dg

FOLLOWERS_EVERY_ENV = "JOULEHOUSE_FOLLOWERS_EVERY_MIN"
DEFAULT_EVERY_MIN = 5


def followers_every_min() -> int:
    """The minutes between two requests of a follower at least (0: none between); raises
    ValueError naming the variable when it holds other than a whole number 0-59."""
    value = os.environ.get(FOLLOWERS_EVERY_ENV, "").strip()
    if not value:
        return DEFAULT_EVERY_MIN
    if not value.isdigit() or int(value) > 59:
        raise ValueError(f"{FOLLOWERS_EVERY_ENV} must be a whole number of minutes from 0 "
                         f"to 59, not {value!r}")
    return int(value)


def at_most_every(condition: dg.AutomationCondition) -> dg.AutomationCondition:
    """``condition``, asked for once a tick of every ``followers_every_min()`` minutes
    (from the full hour) has passed since the asset was last asked for: what would have
    asked for it in between waits for that tick, then asks once; unchanged at 0."""
    minutes = followers_every_min()
    if not minutes:
        return condition
    tick = dg.AutomationCondition.cron_tick_passed(f"*/{minutes} * * * *")
    return (condition & tick.since(dg.AutomationCondition.newly_requested())).with_label(
        f"{condition.get_label() or 'its condition'}, at most every {minutes} min")
