"""Each source's ``energy_facts/<source>`` asset, written per entry by one helper,
:func:`write_facts`.

The rows go to the table kept per entry (``joulehouse/facts_entries.py``): a run
writes the entities it landed or fixed in one commit (per ``entry_table.IN_LIMIT``
entities) scoped to its source, not the
source's rows whole (issue 28). The asset keeps its shape: unpartitioned, one spec of
its source's step, which writes it after the per-partition assets of the run:

- in a run over partitions (a sensor's run, a backfill, the weekly revalidation) of a
  source whose facts each partition owns alone (GPU repetitions, ClusterCockpit job-id
  blocks: ``owned``), the facts of the run's partitions only, from their stored energy
  (``facts_entries.replace_owned``): the run costs what it landed;
- in such a run of a source whose facts belong to owners that are not partitions
  (GEOPM: the reports of one content, counted once under the first key,
  ``joulehouse/geopm/tables.py``; PowerAPI: a sensor, whose windows straddle files,
  ``joulehouse/powerapi/windows.py``), the facts of the owners the run recomputed
  (:func:`write_owned_facts`, ``replace_owned`` too);
- otherwise (any run without partitions: the daily rollups, the asset materialized
  alone; and GEOPM's or PowerAPI's first run over a warehouse written before their
  owners were kept; ClusterCockpit's first such run writes every stored block's facts
  as their owner, ``replace_owned``),
  every fact the source gives now, compared with the stored ones, and only the changed
  entities written (``facts_entries.sync``): this also removes the facts of partitions
  deleted from Dagster.

Either way the materialization reports the source's rows in the table after the write
(``dagster/row_count``, ``facts_entries.stored_rows``: from the Delta log's statistics)
beside what the write did (``entities_written``, ``entities_removed``, ``rows_written``).

After the write the source's files are compacted once they are many
(``facts_entries.compact_if_due``). Every source's step writes the table, each in its own
pool (``assets.pools.tables_pool``), so writes and compactions of different sources may
race: each is one commit that delta-rs refuses when another took what it read, and it is
tried again from the stored state.

Why not partition the facts asset like its source's energy: one spec per source stays
what the accounting assets, the schedules and the UI's graph depend on, a GEOPM or
PowerAPI fact has no single partition, and a per-partition materialization of the
facts would add an event per partition to every run, for what the energy asset's own
partitions already show.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pandas as pd

from assets.reporting import column_schema, run_partitions
from joulehouse.facts import ENERGY_FACTS_SCHEMA
from joulehouse.facts_entries import (
    Ownership,
    Written,
    compact_if_due,
    replace_owned,
    stored_rows,
    sync,
)
from joulehouse.warehouse import Warehouse


@dataclass(frozen=True)
class OwnedFacts:
    """Where each partition of a source owns its facts alone: how its entities belong to
    it, the table of its stored energy (only a partition stored there owns facts: one never
    stored, or a malformed key, has none), and the facts of given stored partitions."""

    ownership: Ownership
    energy_table: str
    facts_of: Callable[[list[str]], pd.DataFrame]


def write_facts(context: dg.AssetExecutionContext, tables: Warehouse, asset: dg.AssetKey,
                source: str, every: Callable[[], pd.DataFrame],
                owned: OwnedFacts | None = None,
                metadata: Mapping[str, Any] | None = None,
                owners: list[str] | None = None) -> dg.MaterializeResult:
    """Write ``source``'s facts per entry (see the module) and report the materialization
    of ``asset``: ``every()`` gives every fact of the source now; ``owned``, where each
    partition owns its facts alone; ``owners``, the partitions whose facts the run writes
    where ``owned`` (default: the run's; ignored in a run without partitions)."""
    keys = run_partitions(context)
    if keys is not None and owners is not None:
        keys = owners
    if owned is not None and keys is not None:
        owners = [key for key in keys if tables.has_partition(owned.energy_table, key)]
        rows = owned.facts_of(owners) if owners else pd.DataFrame()
        written = replace_owned(tables, source, rows, owners, owned.ownership)
        how = f"the facts of the run's {len(keys)} partition(s)"
    else:
        rows = every()
        written = sync(tables, source, rows)
        how = ("every fact, the source's rows replaced whole" if written.whole else
               "every fact compared with the stored ones, the changed entities written")
    return _reported(context, tables, asset, source, rows, written, how, metadata)


def _reported(context: dg.AssetExecutionContext, tables: Warehouse, asset: dg.AssetKey,
              source: str, rows: pd.DataFrame, written: Written, how: str,
              metadata: Mapping[str, Any] | None) -> dg.MaterializeResult:
    """After a write of ``source``'s facts (``rows``): the table compacted if due, and the
    materialization of ``asset`` with what the write did and the source's rows now."""
    compacted = compact_if_due(tables, source)
    if compacted is not None:
        context.log.info(f"energy_facts compacted: {compacted}")
    return dg.MaterializeResult(asset_key=asset, metadata={
        "written": dg.MetadataValue.text(how),
        "entities_written": dg.MetadataValue.int(written.entities),
        "entities_removed": dg.MetadataValue.int(written.removed),
        "rows_written": dg.MetadataValue.int(written.rows),
        "dagster/row_count": dg.MetadataValue.int(stored_rows(tables, source)),
        "compacted": dg.MetadataValue.json(compacted),
        "dagster/column_schema": column_schema({"table": rows}, lambda name: ENERGY_FACTS_SCHEMA),
        **(metadata or {})})


def write_owned_facts(context: dg.AssetExecutionContext, tables: Warehouse,
                      asset: dg.AssetKey, source: str, rows: pd.DataFrame,
                      owners: list[str], ownership: Ownership, how: str,
                      metadata: Mapping[str, Any] | None = None) -> dg.MaterializeResult:
    """Write ``rows``, every fact of ``owners`` now (owners that are no Dagster partition:
    the GEOPM reports a run recomputed, PowerAPI's sensors), in one commit
    (``facts_entries.replace_owned``: an owner's stored entities it no longer gives are
    removed), and report the materialization of ``asset`` as :func:`write_facts` does."""
    written = replace_owned(tables, source, rows, owners, ownership)
    return _reported(context, tables, asset, source, rows, written, how, metadata)
