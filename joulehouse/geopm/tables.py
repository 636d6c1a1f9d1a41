"""``geopm_region_energy`` and ``geopm_report_energy`` kept per entry (issue 28).

Both are tables kept per entry (``joulehouse/entry_table.py``, written through
``joulehouse/entry_sync.py``) whose entries are reports (``report``, the partition key):
a report's rows are its regions' (sections') sums across its hosts, from its own frames.

A report given twice (the same content stored under two keys) counts once, under its
least key (the first in sorted order, whatever order the keys are stored or given in:
:func:`first_keys`). To keep that rule without reading every report, each stored report's content digest
(:func:`~.store.report_identities`) is kept in :data:`IDENTITIES` (entries: reports). A run
over some reports (:func:`land`) looks up the digests they had and have now, then every
stored report sharing one of them (a group), and rewrites the rows of each group's
members: the first key's from its frames, none for the others. So a duplicate landing
before or after its original, or the original removed, moves the rows to the right key.

:func:`rebuild` brings the tables in line with every stored report (the rows of
:func:`whole` over them), writing only the reports whose rows differ: a run without
partitions gives it the stored reports whose file is still in its configured landing
folder (``assets/geopm.stored_report_keys``), so a report removed from its folder loses
its rows there, while a folder that cannot be listed (unmounted) keeps all of its.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

import pandas as pd
import pyarrow.compute as pc

from joulehouse import entry_sync, entry_table
from joulehouse.geopm import energy
from joulehouse.geopm.schemas import REGION_ROLLUP_SCHEMA, REPORT_ROLLUP_SCHEMA
from joulehouse.geopm.store import TABLE as FRAMES_TABLE
from joulehouse.geopm.store import load_frames, report_identities
from joulehouse.warehouse import Warehouse

REGIONS = entry_sync.Kept("geopm_region_energy", list(REGION_ROLLUP_SCHEMA.columns), "report")
REPORTS = entry_sync.Kept("geopm_report_energy", list(REPORT_ROLLUP_SCHEMA.columns), "report")
#: Each stored report's content digest (``report``, ``identity``).
IDENTITIES = entry_sync.Kept(f"{FRAMES_TABLE}/identity", ["report", "identity"], "report")
#: A report's rows belong to the report itself.
BY_REPORT = entry_sync.Ownership(prefix=str, owner_of=str)


@dataclass(frozen=True)
class Landed:
    """What :func:`land` or :func:`rebuild` did: each table's write; the reports counted
    (the first key of each report) and every key left out -> the key kept for its report,
    among the reports the write looked at; the region and section rows of those counted;
    the reports whose rows the write replaced (every stored one, in a rebuild)."""

    regions: entry_sync.Written
    reports: entry_sync.Written
    counted: list[str]
    twice: dict[str, str]
    regions_rows: pd.DataFrame
    sections_rows: pd.DataFrame
    owners: list[str]


def whole(warehouse: Warehouse, keys: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The region and report (sections) rows of the stored reports ``keys``, across hosts."""
    if not keys:
        return pd.DataFrame(columns=REGIONS.columns), pd.DataFrame(columns=REPORTS.columns)
    return (energy.regions_across_hosts(load_frames(warehouse, "regions", keys), REGIONS.table),
            energy.sections_across_hosts(load_frames(warehouse, "totals", keys), REPORTS.table))


def first_keys(members: pd.DataFrame) -> tuple[list[str], dict[str, str]]:
    """Of ``members`` (``report``, ``identity``): the first key of each identity, sorted, and
    every other key -> its identity's first key."""
    first = members.groupby("identity")["report"].min()
    kept = members["identity"].map(first)
    twice = members.loc[kept != members["report"]]
    return sorted(first), dict(zip(twice["report"], kept[twice.index], strict=True))


def _identities(warehouse: Warehouse, keys: list[str]) -> pd.DataFrame:
    return pd.DataFrame(list(report_identities(warehouse, keys).items()),
                        columns=IDENTITIES.columns)


def _stored_where(warehouse: Warehouse, column: str, values: Collection[str]) -> pd.DataFrame:
    """The stored identity rows whose ``column`` is one of ``values``."""
    if not values:
        return pd.DataFrame(columns=IDENTITIES.columns)
    rows = entry_table.read_where(warehouse, IDENTITIES.table, pc.field(column).isin(sorted(values)))
    return rows[IDENTITIES.columns] if len(rows) else pd.DataFrame(columns=IDENTITIES.columns)


def _written(warehouse: Warehouse, kept: entry_sync.Kept, rows: pd.DataFrame,
             owners: Collection[str]) -> entry_sync.Written:
    return entry_sync.replace_owned(warehouse, kept, kept.ready(rows), owners, BY_REPORT)


@entry_sync.retried()
def land(warehouse: Warehouse, keys: Collection[str], stored: Collection[str],
         then: Callable[[Landed], object] = lambda landed: None) -> Landed:
    """Bring the tables in line for the run's reports ``keys``, of which ``stored`` have
    frames stored (the others lose their rows): the rows of every report sharing a digest
    they had (as :data:`IDENTITIES` holds them) or have are rewritten, one commit per
    table, then ``then(landed)`` (the facts), then the digests, last: a stop before them
    leaves the digests as before, so that the next run over the reports rewrites the same
    groups. Reads the frames of ``stored`` and of the first keys of those digests."""
    keys, stored = set(keys), sorted(set(stored))
    now = _identities(warehouse, stored)
    before = _stored_where(warehouse, "report", keys)
    digests = set(before["identity"]) | set(now["identity"])
    others = _stored_where(warehouse, "identity", digests)
    members = pd.concat([others[~others["report"].isin(keys)], now], ignore_index=True)
    counted, twice = first_keys(members)
    owners = keys | set(members["report"])
    regions, sections = whole(warehouse, counted)
    landed = Landed(_written(warehouse, REGIONS, regions, owners),
                    _written(warehouse, REPORTS, sections, owners), counted, twice,
                    regions, sections, sorted(owners))
    then(landed)
    IDENTITIES.write(warehouse, now, sorted(keys - set(stored)))
    entry_sync.compact_each(warehouse, (IDENTITIES, REGIONS, REPORTS))
    return landed


@entry_sync.retried()
def rebuild(warehouse: Warehouse, keys: list[str],
            then: Callable[[Landed], object] = lambda landed: None) -> Landed:
    """Make the tables (and the digests) hold what every stored report ``keys`` gives, writing
    only the reports whose rows differ (a table stored the old way, one plain file,
    compares with its rows and is migrated by its first write); ``then(landed)`` (the
    facts) and the digests last, as in :func:`land`."""
    identities = _identities(warehouse, keys)
    counted, twice = first_keys(identities)
    regions, sections = whole(warehouse, counted)
    written = [entry_sync.sync(warehouse, kept, kept.ready(rows), kept.stored(warehouse))
               for kept, rows in ((REGIONS, regions), (REPORTS, sections))]
    landed = Landed(*written, counted, twice, regions, sections, sorted(keys))
    then(landed)
    entry_sync.sync(warehouse, IDENTITIES, IDENTITIES.ready(identities),
                    IDENTITIES.stored(warehouse))
    entry_sync.compact_each(warehouse, (IDENTITIES, REGIONS, REPORTS))
    return landed


def is_kept(warehouse: Warehouse) -> bool:
    """Whether the digests are kept (a warehouse written before holds none: its first run
    is a :func:`rebuild`, which writes them)."""
    return entry_table.is_entry_table(warehouse, IDENTITIES.table)
