"""The concurrency pools the steps hold: one per source, the accounting's own, one for the
tables derived beside it and one for PowerAPI's trials.

The instance configs (deploy/) limit every pool to 1, so a pool's steps never run beside
each other, whoever launched their runs (sensor, backfill, automation), and steps of
different pools do. Every pool is named here, so the names stay distinct:
:func:`pool_source` tells a source's pool from any other by its prefix alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import dagster as dg

#: What every pool's name starts with.
POOL_PREFIX = "joulehouse_"
#: What every source's pool is named after (:func:`tables_pool`), the source's name being
#: the value of its runs' ``joulehouse/pipeline`` tag.
TABLES_POOL_PREFIX = f"{POOL_PREFIX}tables_"


def tables_pool(source: str) -> str:
    """The concurrency pool of ``source``'s step (``source`` as its runs' tag
    ``joulehouse/pipeline`` names it: ``gpu``, ``geopm``, ``powerapi``, ``clustercockpit``), which writes its tables, its TAUdb trials
    (PowerAPI's in :data:`TRIALS_POOL`) and its ``energy_facts`` rows: the instance configs (deploy/) limit every pool to 1, so
    two runs never write one source's tables at once, whoever launched them (sensor,
    backfill, automation). Each source has its own, so the sources' steps run beside each
    other: the one table they share, ``energy_facts``, is written and compacted by commits
    that refuse each other when they race (``joulehouse/facts_entries.py``), and TAUdb
    loads of different sources do not wait for each other on PostgreSQL (on SQLite one
    waits for the other's write lock: ``joulehouse/taudb/connect.py``).
    One pool for all sources made every landing wait for every other source's run."""
    return f"{TABLES_POOL_PREFIX}{source}"


def pool_source(pool: str | None) -> str | None:
    """The source whose step holds ``pool`` (:func:`tables_pool`'s inverse); None for any
    other pool, or none."""
    return pool[len(TABLES_POOL_PREFIX):] if pool and pool.startswith(TABLES_POOL_PREFIX) else None


#: The accounting steps' own pool, of limit 1 (the instance's ``pools: default_limit``): they
#: write the accounting tables alone, so they run beside the sources' steps (their pools,
#: ``tables_pool``), never beside each other. They read ``energy_facts`` at one Delta
#: version, the one their state records (``joulehouse/accounting/incremental.py``), and the
#: sources' other tables as they are then: what a source writes meanwhile is taken up by
#: the next accounting run, which that write asks for (``assets.accounting.ACCOUNTING_AUTOMATION``).
#: In a source's pool, an accounting run waited in the queue behind that source's runs (the
#: soak, benchmarks/README.md). Not a source's pool (:func:`pool_source` gives None): the
#: daily rollups run the accounting tables in a run of their own (``sensors/schedules.py``).
ACCOUNTING_POOL = f"{POOL_PREFIX}accounting"

#: The pool of the steps that keep the tables derived from the facts beside the accounting
#: (``trust_checks``, ``waste_step``, ``fact_quality``), of limit 1: each writes its own
#: tables and state (``joulehouse/accounting/kept.py``), so they never need the accounting's
#: slot, nor it theirs. In the accounting's pool, every accounting run waited behind them: on
#: the seeded history an accounting run was asked for at each landing and started 92 s (p50)
#: later, one every 110 s, the three taking their turns between (the soak,
#: benchmarks/README.md). One pool for the three, not one each, so they take one core of a
#: small host at most. Not a source's pool (:func:`pool_source` gives None).
DERIVED_POOL = f"{POOL_PREFIX}derived"


#: The pool of PowerAPI's trials (``powerapi_trials``), of limit 1: never two of its runs at
#: once (two loads of a day from different inputs could leave the older trial under the
#: newer state: ``joulehouse/powerapi/trial_days.py``), and beside the PowerAPI pipeline
#: step, whose tables it reads by snapshots taken before its reads. In PowerAPI's pool, the
#: source's runs waited behind the trials' (107 s p95 on the seeded history: the soak,
#: benchmarks/README.md), whose runs read every changed sensor-day whole; with the derived
#: tables, each would wait for the other. Not a source's pool (:func:`pool_source` gives None).
TRIALS_POOL = f"{POOL_PREFIX}trials"


def keys_by_pool(assets: Iterable[dg.AssetsDefinition | dg.AssetSpec],
                 kept: Callable[[dg.AssetSpec], bool]) -> dict[str | None, list[dg.AssetKey]]:
    """The keys of the executable assets of ``assets`` whose spec is ``kept``, in the order
    given, by the pool their step holds (None: none)."""
    grouped: dict[str | None, list[dg.AssetKey]] = {}
    for asset in assets:
        if isinstance(asset, dg.AssetsDefinition) and asset.is_executable:
            for spec in asset.specs:
                if kept(spec):
                    grouped.setdefault(asset.get_op_def_for_asset_key(spec.key).pool,
                                       []).append(spec.key)
    return grouped
