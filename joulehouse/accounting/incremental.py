"""The accounting tables kept current from what changed in ``energy_facts`` (issue 28).

``accounting_daily``, ``accounting_monthly``, ``carbon_per_fact`` and ``cost_per_fact``
are Delta tables (``joulehouse/entry_table.py``) that :func:`update` brings to what
``accounts.account`` gives from scratch for the stored facts, at the cost of what changed
(docs/ARCHITECTURE.md, "The accounting kept incrementally"):

1. *Candidates* (``changed.files_since``, shared with ``kept.py``). The state
   (STATE_TABLE, hidden: no reader lists it) holds the ``energy_facts`` data files the
   tables were computed from (the Delta version's ``entry_table.files``), a digest of
   every other input (intensity, tariffs, settings) and the ``cc_jobs`` data files
   consumed. A (source, entity) is a candidate if it has rows in a data file not consumed
   yet or in one consumed and no longer listed (read back: a version stops listing a file
   long before ``compact`` removes it), or if its job's attribution (user, project,
   partition: CC_JOB_COLUMNS) changed: the jobs whose attribution rows differ between
   cc_jobs' files new and gone since (``changed.delta_changes``, as ``kept.py`` finds
   them), so a ClusterCockpit landing reads its new jobs' rows, not every job stored
   (a job of several rows compared as a set: ``attribute`` takes the least, in no file
   order). Once cc_jobs is compacted (``optimize.compact``, in no order of ``job``), a
   block re-landed rewrites the merged file, which the next run then reads whole on both
   sides (new and gone), and again by job (its statistics span every job).
   Where that cannot be told, as before cc_jobs' files were kept: cc_jobs as plain files
   (the state then keeps a digest of every job's attribution, compared whole when its
   files changed), none consumed before, or a state written before the files were kept
   (compared once so, then its digests removed).
2. *Changed.* A candidate's rows now (the current files, pruned by their statistics) are
   compared with its rows in ``carbon_per_fact``, which repeat the facts' accounted
   columns (``schemas.FACT_COLUMNS``): it changed if they differ (new: none stored;
   removed: none now) or its attribution did. A compaction moves rows into new files
   and changes none.
3. *Touched.* The (calendar, source, day) and (calendar, source, month) of the changed
   entities' day pieces, before (stored rows) and after (rows now).
4. *Recomputed.* Every fact of a touched source that overlaps a touched day is read,
   attributed (the cc_jobs rows of its jobs alone: one read filtered on ``job``, of the
   files whose job statistics may hold them), cut at midnights and
   rolled up as from scratch (the sums run over the same pieces in the same order, never
   added to a stored sum). A touched month sums its
   days (``rollups.monthly``: the touched ones recomputed, the others read back), and its
   distinct facts and entities are its members' (``months.kept``: the changed entities'
   replaced, in a hidden table of their own). So a landing reads the facts of its days,
   not of its months. The members, then the rows of the touched days and months replace
   theirs, one commit per table; the changed entities' carbon and cost replace theirs
   (the removed ones' are removed), one commit per table (members and per-fact rows: per
   part of ``entry_table.IN_LIMIT`` entities). The per-fact tables are written
   after the roll-ups (``carbon_per_fact``, which the next run compares with, last), and
   the state last: a run that fails before the end finds the same changes again (the
   jobs changed in cc_jobs among them: the state still names the files it consumed; a
   stale partition of jobs' digests, left by a run stopped after its state, is unread
   and removed by the next state: :meth:`State.write`).

Facts are accounted in one canonical order (:func:`canonical`), so that a day computed
now and one computed from scratch sum the same pieces in the same order, and a month the
same days in day order (equal to the last bit).

Everything is recomputed (``account`` over every fact, every job read; the reason is
returned) when there is no state (a rollback to the code before cc_jobs' files were kept
costs as much once: this state lacks the jobs' digests it reads, so every job is
changed), the intensity, tariffs or settings changed,
``energy_facts`` is not kept per entry, a consumed data file (of ``energy_facts`` or
``cc_jobs``) is gone from storage, ``cc_jobs`` consumed kept per entry no longer is, or
the touched days of a source are more than one predicate names (``entry_table.IN_MAX``:
a decade and more). However many
entities changed, their members and per-fact rows are written in parts of
``entry_table.IN_LIMIT`` entities, a commit each (``Pending`` completes a run stopped
between two), so a landing of many entities costs its days, not the whole history.

The step compacts and vacuums the tables after an update (``compaction.py``): no state
names their files, so neither is seen as a change.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from joulehouse import changed as changed_files
from joulehouse import entry_sync, entry_table, filestats
from joulehouse.accounting import months as kept_months
from joulehouse.accounting.accounts import account
from joulehouse.accounting.carbon import CarbonSettings, carbon_per_fact, co2_g
from joulehouse.accounting.cost import CostSettings, cost, cost_per_fact
from joulehouse.accounting.entities import CC_JOB_COLUMNS, attribute, first_rows
from joulehouse.accounting.rollups import UTC, daily, day_pieces, members, monthly
from joulehouse.accounting.schemas import FACT_COLUMNS
from joulehouse.clustercockpit.energy import FACTS_SOURCE as CC_SOURCE
from joulehouse.warehouse import Warehouse

FACTS_TABLE = "energy_facts"
JOBS_TABLE = "cc_jobs"
DAILY_TABLE = "accounting_daily"
MONTHLY_TABLE = "accounting_monthly"
CARBON_TABLE = "carbon_per_fact"
COST_TABLE = "cost_per_fact"
#: What the tables were computed from (hidden: ``warehouse.is_hidden``); partitions
#: ``inputs`` (kind, name, value), ``jobs`` (job, digest: only while cc_jobs is plain
#: files, see :class:`State`); and, from a run's first commit to its state, ``pending``
#: (kind, source, entity: the entities it rewrites, or ``whole``) and ``pending_touched``
#: (calendar, source, day, month): see :class:`Pending`.
STATE_TABLE = "_accounting_state"
PENDING, PENDING_TOUCHED = "pending", "pending_touched"
JOB_DIGESTS = "jobs"
#: The cc_jobs columns the accounting reads: the job and its attribution.
JOB_READ = ["job", *CC_JOB_COLUMNS]
#: The size of the tables' data files (bytes): roll-up rows written in the order of their
#: source and period make files of a source's day ranges, per-fact rows in canonical order
#: files of entity ranges, so that replacing some days (entities) rewrites the files
#: holding them, not the table.
FILE_BYTES = 4 * 2**20
#: The order of :func:`canonical`.
ORDER = ["source", "entity", "window_start", "window_end", "component", "method", "energy_j"]
_KEY = ["source", "entity"]


#: What the tables and their hidden state keep, and how: changed, it makes the next run
#: recompute everything (a store kept by other code, older or newer, is not trusted).
#: 2: months summed from daily rows, distinct counts kept in ``months.MEMBERS_TABLE``.
LAYOUT = 2

@dataclass(frozen=True)
class Inputs:
    """What the accounting tables depend on besides ``energy_facts`` and ``cc_jobs``: the
    intensity and tariff tables, the carbon and cost settings and the site's time zone."""

    intensity: pd.DataFrame
    tariffs: pd.DataFrame
    carbon: CarbonSettings
    cost: CostSettings
    time_zone: str

    @functools.cached_property
    def digest(self) -> str:
        """SHA-256 of the intensity's and tariffs' rows, of the settings and of
        :data:`LAYOUT`: when it changes, every fact's figures may have, or the tables and
        their hidden state were kept otherwise."""
        settings = [{name: dict(value) if isinstance(value, Mapping) else value
                     for name, value in vars(one).items()} for one in (self.carbon, self.cost)]
        text = json.dumps([LAYOUT, _frame_digest(self.intensity), _frame_digest(self.tariffs),
                           settings, self.time_zone], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def zones(self) -> list[str]:
        """The calendars: UTC and the site's zone (once when it is UTC)."""
        return sorted({UTC, self.time_zone})


@dataclass(frozen=True)
class Updated:
    """What :func:`update` did: ``whole``, why everything was recomputed ('' when only
    what changed was); entities changed (new or rewritten; after a whole recompute, the
    facts accounted) and removed; (calendar, source) days and months recomputed; facts
    read to recompute them; ClusterCockpit jobs whose attribution changed in cc_jobs
    (after a whole recompute: 0), and cc_jobs rows read (to find those, and to attribute
    the facts recomputed; a whole read: every row)."""

    whole: str
    changed: int
    removed: int
    days: int
    months: int
    facts_read: int
    jobs_changed: int = 0
    jobs_read: int = 0


def _frame_digest(frame: pd.DataFrame) -> str:
    """A digest of a table's rows (in order) and column names."""
    rows = pd.util.hash_pandas_object(frame, index=False).to_numpy() if len(frame) else []
    return hashlib.sha256(np.asarray(rows, np.uint64).tobytes()
                          + "\0".join(map(str, frame.columns)).encode()).hexdigest()


def canonical(facts: pd.DataFrame) -> pd.DataFrame:
    """``facts`` in the order the accounting sums them (ORDER, sorted by Arrow: strings by
    code point), index 0 .. n - 1."""
    keys = pa.Table.from_pandas(facts[ORDER], preserve_index=False)
    order = pc.sort_indices(keys, sort_keys=[(name, "ascending") for name in ORDER])
    return facts.take(order.to_numpy()).reset_index(drop=True)


def period_order(period: str) -> list[str]:
    """The order roll-up rows lie in their files (see FILE_BYTES; ``compaction.py`` merges
    them so): source, ``period`` (day, month), calendar."""
    return ["source", period, "calendar"]


def _in_period_order(rollup_rows: pd.DataFrame, period: str) -> pd.DataFrame:
    """Roll-up rows as stored (:func:`period_order`): a source's days (months) lie in files
    apart from the others' sources."""
    return rollup_rows.sort_values(period_order(period), kind="stable", ignore_index=True)


def _keys(rows: pd.DataFrame) -> pd.MultiIndex:
    return pd.MultiIndex.from_arrays([rows[name].astype(str).to_numpy() for name in _KEY],
                                     names=_KEY)


def _signatures(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (source, entity): its rows' count and the XOR of their FACT_COLUMNS' hashes
    (times to the microsecond, labels as str; ``entry_sync.signatures`` per source), equal
    for equal sets of rows."""
    rows = entry_table.to_microseconds(rows[FACT_COLUMNS]).astype(
        {name: object for name in ("source", "entity", "component", "method")})
    if rows.empty:
        return entry_sync.signatures(rows, FACT_COLUMNS, "entity").set_axis(
            pd.MultiIndex.from_arrays([[], []], names=_KEY))
    return pd.concat({source: entry_sync.signatures(part, FACT_COLUMNS, "entity")
                      for source, part in rows.groupby("source", sort=True)}, names=_KEY)


def _of(keys: set[tuple[str, str]]) -> ds.Expression | None:
    """The dataset filter of the rows of ``keys`` ((source, entity) pairs); None: no row."""
    by_source: dict[str, list[str]] = {}
    for source, entity in keys:
        by_source.setdefault(source, []).append(entity)
    clauses = [(ds.field("source") == source) & ds.field("entity").isin(sorted(entities))
               for source, entities in sorted(by_source.items())]
    return functools.reduce(lambda a, b: a | b, clauses) if clauses else None


@dataclass(frozen=True)
class State:
    """What the tables were last computed from (see the module): the inputs' ``digest``,
    the energy_facts data ``files`` consumed, and cc_jobs as consumed: its ``jobs_mode``
    (``changed``'s DELTA, PLAIN or ABSENT), its ``jobs_version`` (files, sizes and
    modification times, as listed), and either its data files consumed (``jobs_files``,
    DELTA: what changed is read from the files new and gone since) or, PLAIN, a digest of
    each job's attribution (partition JOB_DIGESTS, a row per job: compared whole when the
    version changed). A state written before cc_jobs' files were kept has no mode and
    digests for every job: read as PLAIN."""

    digest: str
    files: frozenset[str]
    jobs_version: str
    jobs_mode: str = changed_files.PLAIN
    jobs_files: frozenset[str] = frozenset()
    #: job -> uint64 digest of its attribution, to write (PLAIN only); None: those stored
    #: stay (cc_jobs unchanged)
    jobs: pd.Series | None = None

    def write(self, warehouse: Warehouse) -> None:
        """Written once the tables are. PLAIN: the jobs' digests first (if given), then the
        inputs. Otherwise the inputs, then the digests of an earlier state removed: a run
        stopped between the two leaves digests that no state reads (its inputs name no
        PLAIN mode), which the next state removes."""
        plain = self.jobs_mode == changed_files.PLAIN
        if plain and self.jobs is not None:
            warehouse.write_partition(STATE_TABLE, JOB_DIGESTS, pd.DataFrame(
                {"job": self.jobs.index.astype(str).to_numpy(object),
                 "digest": self.jobs.to_numpy(np.uint64)}))
        rows = [("digest", "", self.digest), ("jobs_version", "", self.jobs_version),
                ("jobs_mode", "", self.jobs_mode),
                *(("file", name, "") for name in sorted(self.files)),
                *(("jobs_file", name, "") for name in sorted(self.jobs_files))]
        warehouse.write_partition(STATE_TABLE, "inputs",
                                  pd.DataFrame(rows, columns=["kind", "name", "value"]))
        if not plain:
            warehouse.remove_partition(STATE_TABLE, JOB_DIGESTS)

    @classmethod
    def read(cls, warehouse: Warehouse) -> State | None:
        """The stored state; None before the first :func:`update` (or a state without its
        jobs' digests written before their mode was)."""
        if not warehouse.has_partition(STATE_TABLE, "inputs"):
            return None
        inputs = warehouse.read_partitions(STATE_TABLE, ["inputs"])
        kind = inputs["kind"].to_numpy()
        value = dict(zip(inputs["kind"], inputs["value"], strict=True))  # files: ''
        mode = value.get("jobs_mode")
        if mode is None:  # written before cc_jobs' files were kept: digests of every job
            if not warehouse.has_partition(STATE_TABLE, JOB_DIGESTS):
                return None
            mode = changed_files.PLAIN
        return cls(digest=value["digest"], jobs_version=value["jobs_version"],
                   files=frozenset(inputs.loc[kind == "file", "name"]), jobs_mode=mode,
                   jobs_files=frozenset(inputs.loc[kind == "jobs_file", "name"]))

    @staticmethod
    def stored_jobs(warehouse: Warehouse) -> pd.Series | None:
        """The jobs' digests stored (None: none)."""
        if not warehouse.has_partition(STATE_TABLE, JOB_DIGESTS):
            return None
        jobs = warehouse.read_partitions(STATE_TABLE, [JOB_DIGESTS])
        return pd.Series(jobs["digest"].to_numpy(np.uint64),
                         index=pd.Index(jobs["job"].astype(object), name="job"))


@dataclass(frozen=True)
class Pending:
    """What a run is about to rewrite, written before its first commit and removed after
    its state: ``whole``, or the changed ``entities`` and the ``touched`` days and months. A
    run stopped between them leaves it, and the next run rewrites these too: the facts may
    have gone back meanwhile to those the state consumed (and ``carbon_per_fact`` hold, if
    the stopped run did not reach it), which then show no change though the roll-ups (and
    cost) hold the rows of the facts in between."""

    whole: bool = False
    entities: frozenset = frozenset()
    touched: pd.DataFrame | None = None

    def write(self, warehouse: Warehouse) -> None:
        if self.touched is not None:
            warehouse.write_partition(STATE_TABLE, PENDING_TOUCHED, self.touched)
        rows = [("whole", "", "")] if self.whole else []
        rows += [("entity", source, entity) for source, entity in sorted(self.entities)]
        warehouse.write_partition(STATE_TABLE, PENDING, pd.DataFrame(
            rows, columns=["kind", "source", "entity"], dtype=object))

    @classmethod
    def read(cls, warehouse: Warehouse) -> Pending:
        if not warehouse.has_partition(STATE_TABLE, PENDING):
            return cls()
        rows = warehouse.read_partitions(STATE_TABLE, [PENDING])
        kind = rows["kind"].to_numpy()
        touched = (warehouse.read_partitions(STATE_TABLE, [PENDING_TOUCHED])
                   if warehouse.has_partition(STATE_TABLE, PENDING_TOUCHED) else None)
        return cls(bool((kind == "whole").any()),
                   frozenset(zip(rows.loc[kind == "entity", "source"].astype(str),
                                 rows.loc[kind == "entity", "entity"].astype(str),
                                 strict=True)), touched)

    @staticmethod
    def clear(warehouse: Warehouse) -> None:
        warehouse.remove_partition(STATE_TABLE, PENDING)
        warehouse.remove_partition(STATE_TABLE, PENDING_TOUCHED)


def _jobs_version(snapshot: changed_files.Snapshot) -> str:
    """cc_jobs' files, sizes and modification times as listed (``Warehouse.files``: those
    of the current version of a Delta table, without a modification time), not read."""
    return ";".join(f"{info.path}:{info.size}:{info.mtime_ns}"
                    for info in sorted(snapshot.infos.values(), key=lambda info: info.path))


def _read_jobs(warehouse: Warehouse, snapshot: changed_files.Snapshot | None = None
               ) -> pd.DataFrame | None:
    """cc_jobs' ``job`` and attribution columns (JOB_READ), every row: of ``snapshot``'s
    data files if it is kept per entry, else of the table (a whole read, as before
    cc_jobs' files were kept); None if not stored."""
    if snapshot is not None and snapshot.mode == changed_files.DELTA:
        return entry_table.read_files(warehouse, JOBS_TABLE, _in_order(snapshot),
                                      columns=JOB_READ)
    if not warehouse.files(JOBS_TABLE):
        return None
    return warehouse.read_table(JOBS_TABLE)[JOB_READ]


def _in_order(snapshot: changed_files.Snapshot) -> list[pafs.FileInfo]:
    return sorted(snapshot.infos.values(), key=lambda info: info.path)


def _job_digests(jobs: pd.DataFrame | None) -> pd.Series:
    """Per job, a digest of its attribution (the row ``attribute`` takes, whatever the
    rows' order: ``entities.first_rows``)."""
    if jobs is None or jobs.empty:
        return pd.Series(np.zeros(0, np.uint64), index=pd.Index([], dtype=object, name="job"))
    first = first_rows(jobs)
    values = first[list(CC_JOB_COLUMNS)]
    return pd.Series(pd.util.hash_pandas_object(values, index=False).to_numpy(),
                     index=pd.Index(first["job"].to_numpy(object), name="job"))


def _changed_jobs(before: pd.Series, after: pd.Series) -> set[str]:
    """Jobs whose attribution differs (given, changed or no longer given)."""
    both = before.index.intersection(after.index)
    differ = both[before.loc[both].to_numpy() != after.loc[both].to_numpy()]
    return {*before.index.symmetric_difference(after.index), *differ}


def _relative(warehouse: Warehouse, info: pafs.FileInfo) -> str:
    return info.path.removeprefix(warehouse.table_path(FACTS_TABLE) + "/")


def _spans(touched: pd.DataFrame, period: str) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """The UTC spans of the (calendar, ``period``: day or month) of ``touched``, overlapping
    ones merged."""
    step = pd.offsets.Day(1) if period == "day" else pd.offsets.MonthBegin(1)
    spans = []
    for calendar, start in touched[["calendar", period]].drop_duplicates().itertuples(
            index=False):
        start, end = (pd.Timestamp(at).tz_localize(calendar, ambiguous=False,
                                                   nonexistent="shift_forward")
                      for at in (start, pd.Timestamp(start) + step))
        spans.append((start.tz_convert(UTC), end.tz_convert(UTC)))
    merged: list[tuple[pd.Timestamp, pd.Timestamp]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


class _Run:
    """One :func:`update`: the snapshots of energy_facts' and cc_jobs' files it reads, and
    its inputs; ``jobs_read``: the cc_jobs rows it read."""

    def __init__(self, warehouse: Warehouse, inputs: Inputs) -> None:
        self.warehouse, self.inputs = warehouse, inputs
        self.snapshot = changed_files.Snapshot.of(warehouse, FACTS_TABLE)
        self.per_entry = self.snapshot.mode == changed_files.DELTA
        self.files = _in_order(self.snapshot)
        self.jobs_snapshot = changed_files.Snapshot.of(warehouse, JOBS_TABLE)
        self.jobs_version = _jobs_version(self.jobs_snapshot)
        self.jobs_read = 0

    @functools.cached_property
    def jobs(self) -> pd.DataFrame | None:
        """Every job (a whole read: a whole recompute, or cc_jobs as plain files)."""
        rows = _read_jobs(self.warehouse, self.jobs_snapshot)
        self.jobs_read += 0 if rows is None else len(rows)
        return rows

    def jobs_named(self, names: pd.Series) -> pd.DataFrame | None:
        """The cc_jobs rows of the jobs ``names``: of a table kept per entry, those rows
        only (one read filtered on ``job`` by the whole list; the files whose ``job``
        statistics in the Delta log exclude every one are not opened,
        ``filestats.may_hold``, nor the row groups whose footer's exclude them); plain
        files are read whole (once a run)."""
        mode = self.jobs_snapshot.mode
        if mode == changed_files.ABSENT:
            return None
        if mode != changed_files.DELTA or "jobs" in self.__dict__:  # read whole already
            return None if self.jobs is None else self.jobs[self.jobs["job"].isin(names)]
        values = sorted(pd.unique(names.astype(str).to_numpy(object)))
        # the snapshot's files whose statistics in the log may hold one of the jobs (a file
        # the current version no longer lists, after a commit since the snapshot, is kept),
        # read once with the whole list (a pyarrow filter: IN_LIMIT bounds deltalake's
        # SQL predicates only)
        stats = entry_table.file_stats(self.warehouse, JOBS_TABLE)
        base = self.warehouse.table_path(JOBS_TABLE) + "/"
        may = dict(zip(stats["path"], filestats.may_hold(stats, {"job": values}), strict=True))
        listed = [info for info in _in_order(self.jobs_snapshot)
                  if may.get(info.path.removeprefix(base), True)]
        rows = entry_table.read_files(
            self.warehouse, JOBS_TABLE, listed,
            ds.field("job").isin(pa.array(values, pa.string())), columns=JOB_READ
        ) if listed else pd.DataFrame(columns=JOB_READ)
        self.jobs_read += len(rows)
        return rows

    def facts(self, where: ds.Expression | None = None) -> pd.DataFrame:
        """The facts of the snapshot that ``where`` selects, in canonical order."""
        if not self.per_entry:  # plain files (written before kept per entry): read whole
            return canonical(self.warehouse.read_table(FACTS_TABLE))
        return canonical(entry_table.read_files(self.warehouse, FACTS_TABLE, self.files, where))

    def state(self, jobs: pd.Series | None) -> State:
        """The state of this run's snapshots; ``jobs``: the jobs' digests to store (plain
        cc_jobs only; None: those stored stay)."""
        files = frozenset(_relative(self.warehouse, info) for info in self.files)
        kept = self.jobs_snapshot.mode == changed_files.DELTA
        return State(self.inputs.digest, files if self.per_entry else frozenset(),
                     self.jobs_version, self.jobs_snapshot.mode,
                     frozenset(self.jobs_snapshot.files) if kept else frozenset(),
                     jobs if self.jobs_snapshot.mode == changed_files.PLAIN else None)

    def pieces(self, facts: pd.DataFrame, zone: str) -> pd.DataFrame:
        """The day pieces of attributed ``facts`` in ``zone``, with a ``month`` column."""
        pieces = day_pieces(facts, zone)
        pieces["month"] = pieces["day"].to_numpy().astype("datetime64[M]").astype(
            "datetime64[ns]")
        return pieces


def update(warehouse: Warehouse, inputs: Inputs) -> Updated:
    """Bring the four accounting tables to what ``account`` gives from scratch for the
    stored facts (see the module), recomputing what changed only where it can."""
    run = _Run(warehouse, inputs)
    state = State.read(warehouse)
    pending = Pending.read(warehouse)
    reason = "a run stopped during a whole recompute" if pending.whole else ""
    reason = reason or _whole_reason(run, state)
    if reason:
        return _whole(run, reason)
    found_jobs = _jobs_changed(run, state)
    if isinstance(found_jobs, str):
        return _whole(run, found_jobs)
    changed_jobs, jobs = found_jobs
    forced = {(CC_SOURCE, job) for job in changed_jobs}
    found = _changes(run, state, forced, pending.entities)
    if isinstance(found, str):
        return _whole(run, found)
    before, after, changed, removed = found
    touched, read_facts = None, 0
    if changed:
        touched = _touched(run, [before.assign(duration_s=np.nan), after])
        if pending.touched is not None and len(pending.touched):
            touched = pd.concat([touched, pending.touched[list(touched.columns)]],
                                ignore_index=True).drop_duplicates(ignore_index=True)
        if not all(entry_table.fits_one_predicate(touched[["calendar", "source", period]])
                   for period in ("day", "month")):  # a rewrite of more days than that
            return _whole(run, f"{len(touched)} days touched (over one predicate's "
                               f"{entry_table.IN_MAX} values a source)")
        Pending(entities=frozenset(changed), touched=touched).write(warehouse)
        read_facts = _recompute(run, touched, changed, after)
        _replace_per_fact(run, before, after, changed)
    run.state(jobs).write(warehouse)
    Pending.clear(warehouse)
    return Updated("", len(changed - removed), len(removed),
                   0 if touched is None else
                   len(touched[["calendar", "source", "day"]].drop_duplicates()),
                   0 if touched is None else
                   len(touched[["calendar", "source", "month"]].drop_duplicates()), read_facts,
                   len(changed_jobs), run.jobs_read)


def _jobs_changed(run: _Run, state: State) -> tuple[set[str], pd.Series | None] | str:
    """The jobs whose attribution (CC_JOB_COLUMNS) changed in cc_jobs since ``state``, and
    the jobs' digests to store (plain cc_jobs that changed; else None); or why everything
    must be recomputed. Consumed as a table kept per entry: from its data files new and
    gone since (``changed.delta_changes``: only those read). Otherwise, when its files
    changed (plain files; none before; a state written before the files were kept): every
    job's digest now against those stored (none: every job is new), cc_jobs read whole."""
    snapshot = run.jobs_snapshot
    if state.jobs_mode == changed_files.DELTA:
        if snapshot.mode != changed_files.DELTA:
            return f"{JOBS_TABLE} is no longer a table kept per entry"
        if set(snapshot.files) == state.jobs_files:
            return set(), None
        found = changed_files.delta_changes(run.warehouse, snapshot, state.jobs_files,
                                            ["job"], list(CC_JOB_COLUMNS))
        if isinstance(found, str):
            return found
        run.jobs_read += found.read
        return set(found.keys["job"]), None
    if run.jobs_version == state.jobs_version:
        return set(), None
    stored = (_job_digests(None) if state.jobs_mode == changed_files.ABSENT
              else State.stored_jobs(run.warehouse))
    if stored is None:
        return "the jobs' attribution digests of the state are not stored"
    now = _job_digests(run.jobs)
    return _changed_jobs(stored, now), now


def _changes(run: _Run, state: State, forced: set[tuple[str, str]],
             pending: frozenset = frozenset()
             ) -> tuple[pd.DataFrame, pd.DataFrame, set, set] | str:
    """The changed entities' stored rows (of carbon_per_fact) and rows now, the changed
    (source, entity) pairs and the removed ones among them (see the module); or why
    everything must be recomputed. ``pending``: those a stopped run left (changed)."""
    warehouse = run.warehouse
    found = changed_files.files_since(warehouse, run.snapshot, state.files)
    if isinstance(found, str):
        return found
    new, gone = found
    read = new + gone
    candidates = set(_keys(entry_table.read_files(warehouse, FACTS_TABLE, read,
                                                  columns=_KEY))) | forced | pending
    where = _of(candidates)
    if where is None:
        return pd.DataFrame(), pd.DataFrame(), set(), set()
    after = run.facts(where)
    before = entry_table.read_files(warehouse, CARBON_TABLE,
                                    entry_table.files(warehouse, CARBON_TABLE), where,
                                    columns=FACT_COLUMNS)
    new, old = _signatures(after), _signatures(before)
    both = new.index.intersection(old.index)
    differ = ((new.loc[both, "rows"].to_numpy() != old.loc[both, "rows"].to_numpy())
              | (new.loc[both, "digest"].to_numpy() != old.loc[both, "digest"].to_numpy()))
    removed = set(old.index) - set(new.index)
    changed = ({*new.index.difference(old.index), *both[differ]} | removed
               | (forced & {*new.index, *old.index}) | pending)
    return (before[_keys(before).isin(changed)], after[_keys(after).isin(changed)],
            changed, removed)


def _replace_per_fact(run: _Run, before: pd.DataFrame, after: pd.DataFrame,
                      changed: set[tuple[str, str]]) -> None:
    """The changed entities' cost and carbon rows in place of theirs, carbon last: the rows
    the next run compares with (``before``: its stored ones), so a run stopped between the
    two finds the same entities changed. Each table's rows are appended (no stored file
    scanned) only where that table holds none of ``changed``: cost may hold rows that
    carbon lacks, written by a run stopped before its carbon commit. Elsewhere one commit
    per part of ``changed`` whose predicate stays within ``entry_table.IN_LIMIT`` (a run
    stopped between two is completed by the next: ``Pending``)."""
    rows, inputs = attribute(after), run.inputs
    keys = pd.DataFrame(sorted(changed), columns=_KEY)
    stored_cost = not entry_table.read_files(run.warehouse, COST_TABLE,
                                             entry_table.files(run.warehouse, COST_TABLE),
                                             _of(changed), columns=_KEY).empty
    for table, table_rows, stored in (
            (COST_TABLE, cost_per_fact(rows, inputs.tariffs, inputs.cost), stored_cost),
            (CARBON_TABLE, carbon_per_fact(rows, inputs.intensity, inputs.carbon),
             not before.empty)):
        table_rows = entry_table.to_microseconds(table_rows)
        if not stored:
            entry_table.replace_where(run.warehouse, table, table_rows, "")
            continue
        for part_rows, where in entry_table.predicate_parts(table, table_rows, keys):
            entry_table.replace_where(run.warehouse, table, part_rows, where)


def _whole_reason(run: _Run, state: State | None) -> str:
    """Why everything is recomputed ('' if it need not be)."""
    if state is None:
        return "no accounting state stored (first run)"
    if not run.per_entry:
        return "energy_facts is not kept per entry"
    if state.digest != run.inputs.digest:
        return "the intensity, the tariffs or the settings changed"
    if not all(entry_table.is_entry_table(run.warehouse, table)
               for table in (DAILY_TABLE, MONTHLY_TABLE, CARBON_TABLE, COST_TABLE,
                             kept_months.MEMBERS_TABLE)):
        return "an accounting table is not kept per entry"
    return ""


def _touched(run: _Run, changed: list[pd.DataFrame]) -> pd.DataFrame:
    """The (calendar, source, day, month) the day pieces of ``changed`` facts touch."""
    facts = attribute(pd.concat(changed, ignore_index=True))
    return pd.concat([run.pieces(facts, zone)[["calendar", "source", "day", "month"]]
                      .astype({"calendar": str, "source": str}).drop_duplicates()
                      for zone in run.inputs.zones], ignore_index=True)


def _recompute(run: _Run, touched: pd.DataFrame, changed: set[tuple[str, str]],
               after: pd.DataFrame) -> int:
    """Replace the roll-up rows of the ``touched`` days by those recomputed from every fact
    of their sources overlapping them, and of the touched months by the sums of their days
    (those not touched read back) with the counts of their members, the ``changed``
    entities' (rows ``after``) replaced (``months.kept``); the facts read."""
    where = functools.reduce(lambda a, b: a | b, [
        (ds.field("source") == source) & functools.reduce(lambda a, b: a | b, [
            (ds.field("window_start") <= end) & (ds.field("window_end") >= start)
            for start, end in _spans(rows, "day")])
        for source, rows in touched.groupby("source")])
    facts = run.facts(where)
    jobs = _jobs_of(run, pd.concat([rows[_KEY] for rows in (facts, after)], ignore_index=True))
    attributed, changed_rows = attribute(facts, jobs), attribute(after, jobs)
    inputs = run.inputs
    days, now = [], []  # now: the changed entities' members, FACT indexing changed_rows
    for zone in inputs.zones:
        pieces = run.pieces(attributed, zone)
        mine = touched[touched["calendar"] == zone]
        in_day = pd.MultiIndex.from_arrays([pieces["source"].astype(str).to_numpy(),
                                            pieces["day"]]).isin(
            pd.MultiIndex.from_frame(mine[["source", "day"]]))
        pieces = pieces[in_day].reset_index(drop=True)
        pieces["co2_g"] = co2_g(pieces, inputs.intensity, inputs.carbon)
        pieces["cost"], pieces["currency"] = cost(pieces, inputs.tariffs, inputs.cost)
        days.append(daily(pieces))
        now.append(members(day_pieces(changed_rows, zone)))
    month_counts = kept_months.kept(run.warehouse, pd.DataFrame(sorted(changed), columns=_KEY),
                                    pd.concat(now, ignore_index=True),
                                    changed_rows["entity"].to_numpy(object), touched)
    days = pd.concat(days, ignore_index=True)
    month_days = pd.concat([_stored_days(run, touched), days], ignore_index=True)
    for table, rows, period in ((DAILY_TABLE, days, "day"),
                                (MONTHLY_TABLE, monthly(month_days, month_counts), "month")):
        entry_table.replace_where(run.warehouse, table, _in_period_order(rows, period),
                                  entry_table.keys_predicate(touched[["calendar", "source", period]]),
                                  FILE_BYTES)
    return len(facts)


def _stored_days(run: _Run, touched: pd.DataFrame) -> pd.DataFrame:
    """The stored daily rows of the touched (calendar, source, month) but not of the touched
    days (read from the files whose statistics in the log may hold them)."""
    months = touched[["calendar", "source", "month"]].drop_duplicates()
    day = ds.field("day")
    where = functools.reduce(lambda a, b: a | b, [
        (ds.field("calendar") == calendar) & (ds.field("source") == source)
        & (day >= _microseconds(month))
        & (day < _microseconds(month + pd.offsets.MonthBegin(1)))
        for calendar, source, month in months.itertuples(index=False)])
    days = pd.DatetimeIndex(np.concatenate([
        pd.date_range(month, month + pd.offsets.MonthBegin(1), freq="D", inclusive="left")
        for month in months["month"].unique()]))
    listed = filestats.holding(run.warehouse, DAILY_TABLE, {
        "calendar": months["calendar"].unique(), "source": months["source"].unique(),
        "day": days})
    stored = entry_table.read_files(run.warehouse, DAILY_TABLE, listed, where)
    keys = ["calendar", "source", "day"]
    recomputed = pd.MultiIndex.from_frame(touched[keys].astype({"calendar": str, "source": str}))
    return stored[~pd.MultiIndex.from_frame(stored[keys]).isin(recomputed)]


def _microseconds(at: pd.Timestamp) -> pa.Scalar:
    """A naive time as the tables store it (a filter's literal)."""
    return pa.scalar(pd.Timestamp(at).to_pydatetime(), pa.timestamp("us"))


def _jobs_of(run: _Run, facts: pd.DataFrame) -> pd.DataFrame | None:
    """The cc_jobs rows of the ClusterCockpit entities of ``facts`` (``_Run.jobs_named``:
    read only for facts that have some, and only theirs where cc_jobs is kept per
    entry)."""
    jobs = facts.loc[facts["source"] == CC_SOURCE, "entity"]
    return None if jobs.empty else run.jobs_named(jobs)


def _whole(run: _Run, reason: str) -> Updated:
    """Recompute and replace all four tables (``account`` over every fact)."""
    facts = run.facts()
    accounts = account(facts, run.inputs.intensity, run.inputs.carbon, run.inputs.time_zone,
                       run.jobs, tariffs=run.inputs.tariffs, cost_settings=run.inputs.cost,
                       with_members=True)
    Pending(whole=True).write(run.warehouse)
    kept_months.whole(run.warehouse, accounts.members, facts["entity"].to_numpy(object))
    for table, rows in ((DAILY_TABLE, _in_period_order(accounts.daily, "day")),
                        (MONTHLY_TABLE, _in_period_order(accounts.monthly, "month")),
                        (COST_TABLE, entry_table.to_microseconds(accounts.cost)),
                        (CARBON_TABLE, entry_table.to_microseconds(accounts.carbon))):
        entry_table.replace_where(run.warehouse, table, rows, None, FILE_BYTES)
    plain = run.jobs_snapshot.mode == changed_files.PLAIN
    run.state(_job_digests(run.jobs) if plain else None).write(run.warehouse)
    Pending.clear(run.warehouse)
    daily = accounts.daily
    return Updated(reason, len(accounts.carbon), 0,
                   len(daily[["calendar", "source", "day"]].drop_duplicates()),
                   len(accounts.monthly[["calendar", "source", "month"]].drop_duplicates()),
                   len(facts), 0, run.jobs_read)


def stored_missing(warehouse: Warehouse, table: str, value: str,
                   columns: list[str]) -> pd.DataFrame:
    """The rows of per-fact ``table`` whose ``value`` is null (NaN), ``columns`` of them:
    the column ``value`` is read, the others only for the rows selected."""
    listed = entry_table.files(warehouse, table)
    return entry_table.read_files(warehouse, table, listed, ds.field(value).is_null(),
                                  columns=columns)



def recent_days(warehouse: Warehouse, monthly: pd.DataFrame, months: int) -> pd.DataFrame:
    """The UTC calendar's daily rows of the ``months`` UTC months up to the latest of
    ``monthly`` (the stored monthly rows), not the whole table: only the files whose
    statistics may hold them are read (written in day order, FILE_BYTES)."""
    where = ds.field("calendar") == UTC
    latest = monthly.loc[monthly["calendar"] == UTC, "month"].max()
    if not pd.isna(latest):
        where &= ds.field("day") >= _microseconds(latest - pd.DateOffset(months=months - 1))
    return entry_table.read_files(warehouse, DAILY_TABLE, entry_table.files(warehouse, DAILY_TABLE),
                                  where)
