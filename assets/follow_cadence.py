"""How often the tables that follow the facts, but are no one's freshness target, are asked
for: the derived tables (trust checks, waste, quality) and the PowerAPI trials.

Asked for at every change, as the accounting is, each became a run of its own once each
pool had its automation sensor (``sensors/automation.py``): on the seeded history, 177
runs an hour of the derived tables and PowerAPI's trials besides the accounting's 89, each
paying a run worker's start on a 2-CPU host, and PowerAPI's runs waited 62 s (p50) for
their pool, held by the trials' (benchmarks/README.md; the trials have since a pool of
their own, ``assets/pools.TRIALS_POOL``). Asked for once per tick of every
``JOULEHOUSE_FOLLOWERS_EVERY_MIN`` minutes from the full hour (a divisor of 60; default 5;
0: at every change; read when the definitions load), what changed in between is taken
up by one run, so they are at most that much (and their run) behind the facts.
"""

from __future__ import annotations

import os

import dagster as dg

FOLLOWERS_EVERY_ENV = "JOULEHOUSE_FOLLOWERS_EVERY_MIN"
DEFAULT_EVERY_MIN = 5
#: The cadences that tick evenly through the hour (``*/N`` restarts at every full hour).
EVERY_MIN_CHOICES = (0, *(minutes for minutes in range(1, 61) if 60 % minutes == 0))


def followers_every_min() -> int:
    """The minutes between two ticks of the followers' cadence (0: none); raises ValueError
    naming the variable when it holds other than one of :data:`EVERY_MIN_CHOICES`."""
    value = os.environ.get(FOLLOWERS_EVERY_ENV, "").strip()
    if not value:
        return DEFAULT_EVERY_MIN
    if not value.isdecimal() or int(value) not in EVERY_MIN_CHOICES:
        raise ValueError(f"{FOLLOWERS_EVERY_ENV} must be 0 or a number of minutes that "
                         f"divides an hour {EVERY_MIN_CHOICES[1:]}, not {value!r}")
    return int(value)


def at_most_every(condition: dg.AutomationCondition) -> dg.AutomationCondition:
    """``condition`` (labelled), once a tick of every ``followers_every_min()`` minutes
    (from the full hour) has passed since the asset was last asked for: what would have
    asked for it in between waits for that tick, then asks once; a tick at which
    ``condition`` is false (its run or an input's in flight) still counts until it is
    asked for. Unchanged at 0."""
    minutes = followers_every_min()
    if not minutes:
        return condition
    tick = dg.AutomationCondition.cron_tick_passed(f"*/{minutes} * * * *")
    return (condition & tick.since(dg.AutomationCondition.newly_requested())).with_label(
        f"{condition.get_label()}, at most every {minutes} min")
