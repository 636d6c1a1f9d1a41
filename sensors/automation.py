"""The automation: one automation condition sensor per concurrency pool.

The instance configs (deploy/) hold a queued run until the slot of every pool its steps
hold is free (``concurrency: pools: granularity: run``), and one automation sensor puts
what it asks for in one tick into one run: the accounting with the derived tables and
the PowerAPI trials, so the accounting waited until its own pool, the derived tables'
and PowerAPI's were free at once (on the seeded history, 52-63 s in the queue against
21 s alone: benchmarks/README.md). A sensor per pool asks for each pool's steps in runs of
their own, which start as soon as that pool is free.

The pool of an asset is its step's (``assets/pools.py``). The assets of no pool (the grid
intensity and the tariffs, read from the accounting's landing folders) are automated
with the accounting's. Each sensor is named ``joulehouse_automation_<name>``: the source
of a source's pool (``gpu``, ``geopm``, ``powerapi``, ``clustercockpit``), ``accounting``,
``derived`` or ``trials``.
"""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

from assets.pools import ACCOUNTING_POOL, POOL_PREFIX, keys_by_pool, pool_source
from sensors.settings import automation_interval_s

#: The queue's priority of the automation's runs (Dagster's ``dagster/priority``; every
#: other run has 0): they bring what has landed on (the accounting, the trials), so the
#: daemon launches them before new landings' runs that wait with them.
AUTOMATION_RUN_PRIORITY = "1"
#: What every automation sensor's name starts with.
AUTOMATION_PREFIX = "joulehouse_automation_"


def automation_name(pool: str) -> str:
    """The automation sensor of ``pool``'s steps: ``joulehouse_automation_`` and the pool's
    source, or the pool's name without its prefix ``joulehouse_`` (``accounting``,
    ``derived``, ``trials``)."""
    return AUTOMATION_PREFIX + (pool_source(pool) or pool.removeprefix(POOL_PREFIX))


def automated_by_pool(assets: Iterable[dg.AssetsDefinition | dg.AssetSpec]
                      ) -> dict[str, list[dg.AssetKey]]:
    """The executable assets of ``assets`` with an automation condition, in the order given,
    by the pool of their step (those of no pool under ``ACCOUNTING_POOL``)."""
    automated: dict[str, list[dg.AssetKey]] = {}
    for pool, keys in keys_by_pool(
            assets, lambda spec: spec.automation_condition is not None).items():
        automated.setdefault(pool or ACCOUNTING_POOL, []).extend(keys)
    return automated


def automation_sensors(assets: Iterable[dg.AssetsDefinition | dg.AssetSpec]
                       ) -> list[dg.AutomationConditionSensorDefinition]:
    """One automation condition sensor per pool of ``assets`` (:func:`automated_by_pool`),
    on by default, evaluated as often as the landing sensors tick (unless
    ``JOULEHOUSE_AUTOMATION_INTERVAL_S`` says otherwise: where a site ticks faster, what a
    landing brought to ``energy_facts`` reaches the accounting as much sooner, at the cost
    of more evaluations, each growing with its assets' partitions)."""
    return [dg.AutomationConditionSensorDefinition(
        automation_name(pool),
        target=dg.AssetSelection.assets(*keys),
        run_tags={"dagster/priority": AUTOMATION_RUN_PRIORITY},
        minimum_interval_seconds=automation_interval_s(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(f"Evaluates the automation conditions of the assets whose steps hold "
                     f"the pool {pool}, and asks for them in runs of their own: "
                     f"{', '.join(key.to_user_string() for key in keys)}."),
    ) for pool, keys in automated_by_pool(assets).items()]
