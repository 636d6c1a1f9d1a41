"""``trust_checks``, ``waste``/``waste_weekly`` and ``fact_quality`` kept current from what
changed in their inputs (issue 28; docs/ARCHITECTURE.md, "The accounting kept
incrementally").

Each table is a Delta table (``entry_table``) that its update brings to what the whole
computation (``trust.trust_checks``, ``waste.waste`` + ``waste.weekly``,
``quality.fact_quality``) gives from scratch over the stored inputs, at the cost of what
changed:

1. *What changed* (``changed.py``): the state (a hidden table per step, written last)
   holds the files of every input the table was computed from and a digest of the rules
   (versions, bounds, thresholds). ``energy_facts`` and the other inputs kept per entry
   give the (source, entity) whose rows differ between the files gone and the files new;
   the inputs of plain partitions (waste's GPU repetition energy and ``gpu-power`` frames,
   a ClusterCockpit block's statistics) the partitions rewritten, each naming its
   entities. fact_quality takes a GPU repetition's figures from ``gpu_repetition_figures``
   (kept per entry by the GPU step), so that its change costs what changed, not a listing
   of every repetition's files.
2. *Keys.* Those are mapped to the table's keys (source, entity): trust's PowerAPI rows are
   per sensor (the entity's part before ``/``), its GEOPM pairs per ClusterCockpit job
   (a changed GEOPM report, before or after, touches the jobs whose window contains it);
   waste's rows are per GPU repetition and job; fact_quality's per fact.
3. *Recomputed* from the inputs of those keys only (read through the files' statistics,
   facts in the accounting's canonical order, as the whole computation here takes them),
   and their rows replaced (:func:`entry_table.replace_keys`). ``waste_weekly``'s weeks
   touched by a changed row (before or after) are recomputed whole (the rank is per week)
   from the waste rows overlapping them, and written *before* the waste rows: a run stopped
   between the two finds the same rows changed and the same weeks.
4. The state last: a run that fails before finds the same changes again. Before its
   first commit a run writes what it is about to rewrite (its keys and weeks, or a whole
   recompute) to the state table's ``pending`` partition (``changed.Pending``), removed
   after the state; the next run rewrites those too (or recomputes whole), since an input
   gone back meanwhile to the rows the state consumed shows no change.

Everything is recomputed (the reason is returned) without a state, after a whole recompute
stopped before its state, when a rule's version,
bounds or threshold changed, when ``energy_facts`` is not kept per entry, when an input
changed between plain files and a table kept per entry, when a plain input of one file
changed, when a gone data file is no longer stored, or over WHOLE_ABOVE changed keys.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from joulehouse import entry_table
from joulehouse.accounting import quality, trust, waste
from joulehouse.accounting.incremental import FILE_BYTES, canonical
from joulehouse.accounting.repetition import FIGURES, stored_figures
from joulehouse.accounting.schemas import FACT_COLUMNS
from joulehouse.changed import (
    DELTA,
    PLAIN,
    Changed,
    Pending,
    Snapshot,
    State,
    delta_changes,
    partition_changes,
)
from joulehouse.clustercockpit.energy import FACTS_OWNERSHIP as CC_OWNERSHIP
from joulehouse.clustercockpit.energy import FACTS_SOURCE as CC_SOURCE
from joulehouse.geopm.energy import FACTS_SOURCE as GEOPM_SOURCE
from joulehouse.gpu.energy import FACTS_SOURCE as GPU_SOURCE
from joulehouse.gpu.store import TABLE as FRAMES_TABLE
from joulehouse.powerapi.energy import FACTS_SOURCE as POWERAPI_SOURCE
from joulehouse.warehouse import (
    Warehouse,
    partition_file_name,
    partition_key,
    read_parquet_files,
)

FACTS_TABLE = "energy_facts"
JOBS_TABLE = "cc_jobs"
GPU_ENERGY_TABLE = "gpu_repetition_energy"
GPU_POWER_TABLE = f"{FRAMES_TABLE}/gpu_power"
CC_STATS_TABLE = "cc_block_tables/metric_stats"
CC_ENERGY_TABLE = "cc_job_energy"
WINDOW_TABLE = "powerapi_window_energy"
TRUST_TABLE = "trust_checks"
WASTE_TABLE = "waste"
WASTE_WEEKLY_TABLE = "waste_weekly"
QUALITY_TABLE = "fact_quality"
#: The order each table's rows are written in, in files of ``incremental.FILE_BYTES`` (and
#: merged in: ``compaction.py``): a source's entities (``waste_weekly``: the weeks), so that
#: a write of some keys rewrites the files of their range, not the table, and reads by key
#: find their files by the files' statistics.
ORDER = {TRUST_TABLE: ["source", "entity", "rule", "window_start", "window_end"],
         WASTE_TABLE: ["source", "entity", "rule", "window_start"],
         WASTE_WEEKLY_TABLE: ["week", "rank", "user"],
         QUALITY_TABLE: ["source", "entity", "component", "window_start", "window_end",
                         "method"]}
#: Changed keys above which a table is recomputed whole rather than named in predicates.
WHOLE_ABOVE = 10_000
#: The version of this module's way of keeping each table: a change recomputes it whole.
#: 2: rows written in ORDER, in files of FILE_BYTES (a store of 1 holds files of 100 MiB
#: spanning a source's every entity, beside which no merge of ``compaction.py`` fits).
KEPT_VERSION = 2
_KEY = ["source", "entity"]


@dataclass(frozen=True)
class Updated:
    """What an update did: ``whole``, why the table was recomputed whole ('' when only
    what changed was); keys (source, entity) recomputed (after a whole recompute: the
    table's); rows written; weeks of waste_weekly recomputed."""

    whole: str
    keys: int
    rows: int
    weeks: int = 0


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps([KEPT_VERSION, *parts], sort_keys=True,
                                     default=str).encode()).hexdigest()


def _keys(pairs) -> pd.DataFrame:
    """(source, entity) pairs as a sorted frame."""
    return pd.DataFrame(sorted(set(pairs)), columns=_KEY, dtype=object)


def _pairs(frame: pd.DataFrame, source: str | None = None, entity: str = "entity") -> set:
    if frame is None or frame.empty:
        return set()
    sources = frame["source"].astype(str) if source is None else [source] * len(frame)
    return set(zip(sources, frame[entity].astype(str), strict=True))


def _of(pairs) -> ds.Expression | None:
    """The dataset filter of the rows of (source, entity) ``pairs``; None: none."""
    by_source: dict[str, list[str]] = {}
    for source, entity in pairs:
        by_source.setdefault(source, []).append(entity)
    clauses = [(ds.field("source") == source) & _isin("entity", sorted(entities))
               for source, entities in sorted(by_source.items())]
    return functools.reduce(lambda a, b: a | b, clauses) if clauses else None


def _isin(column: str, values) -> ds.Expression:
    """``column`` IN ``values`` (strings; none: no row)."""
    return ds.field(column).isin(pa.array(sorted(set(values)), pa.string()))


def _timestamp(value) -> pa.Scalar:
    """A UTC time (naive: taken as UTC) as a scalar of the tables' time columns."""
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tz is None else stamp.tz_convert("UTC")
    return pa.scalar(stamp.to_pydatetime(), pa.timestamp("us", "UTC"))


def _owner(job: str) -> str | None:
    """The job-id block of a ClusterCockpit job key (None: not a job key)."""
    try:
        return CC_OWNERSHIP.owner_of(job)
    except ValueError:
        return None


#: Windows closer than this are bounded together in a time predicate (:func:`_clusters`).
NEAR = pd.Timedelta("1D")


def _clusters(starts: np.ndarray, ends: np.ndarray, gap: pd.Timedelta = NEAR
              ) -> list[tuple[pd.Timestamp, pd.Timestamp, pd.Timestamp, pd.Timestamp]]:
    """Windows grouped where they lie within ``gap`` of each other: per group the least and
    greatest start and end (bounds for a time predicate; rows are then filtered exactly)."""
    order = np.argsort(starts, kind="stable")
    groups: list[list[int]] = []
    for i in order:
        if groups and starts[i] - starts[groups[-1][-1]] <= gap:
            groups[-1].append(i)
        else:
            groups.append([i])
    return [(starts[g].min(), starts[g].max(), ends[g].min(), ends[g].max()) for g in groups]


class _Run:
    """One update: the snapshot of its inputs' files (read as of that snapshot)."""

    def __init__(self, warehouse: Warehouse, state_table: str, inputs: list[str],
                 digest: str) -> None:
        self.warehouse, self.state_table, self.digest = warehouse, state_table, digest
        self.snapshots = {table: Snapshot.of(warehouse, table) for table in inputs}
        self.state = State.read(warehouse, state_table)
        self.pending = Pending.read(warehouse, state_table)

    def stored(self, table: str) -> bool:
        return self.snapshots[table].mode != "absent"

    def read(self, table: str, where: ds.Expression | None = None,
             columns: list[str] | None = None) -> pd.DataFrame | None:
        """The rows of an input that ``where`` selects (a plain one read whole, then
        filtered); None if it is not stored."""
        snapshot = self.snapshots[table]
        if snapshot.mode == "absent":
            return None
        if table == FACTS_TABLE and snapshot.mode == DELTA:  # as of the snapshot
            return entry_table.read_files(self.warehouse, table, list(snapshot.infos.values()),
                                          where, columns)
        if snapshot.mode == DELTA:  # the pandas dtypes written (nullable ones)
            rows = (entry_table.read(self.warehouse, table) if where is None
                    else entry_table.read_where(self.warehouse, table, where))
            return rows if columns is None else rows[columns]
        rows = self.warehouse.read_table(table)
        if where is not None and len(rows):
            rows = pa.Table.from_pandas(rows, preserve_index=False).filter(where).to_pandas()
        return rows if columns is None else rows[columns]

    def facts(self, where: ds.Expression | None = None) -> pd.DataFrame:
        """The facts of the snapshot that ``where`` selects, in canonical order."""
        rows = self.read(FACTS_TABLE, where)
        return canonical(rows if rows is not None else pd.DataFrame(columns=FACT_COLUMNS))

    def partitions(self, table: str, keys) -> pd.DataFrame | None:
        """The stored partitions ``keys`` of a plain table (those of the snapshot), in key
        order as a whole read gives them; None if the table is not stored."""
        snapshot = self.snapshots[table]
        if snapshot.mode == "absent":
            return None
        names = {partition_file_name(key) for key in keys} & set(snapshot.files)
        if not names:  # as a whole read without these keys' rows
            return None
        return read_parquet_files([snapshot.infos[name] for name in sorted(names)],
                                  self.warehouse.filesystem)

    def whole_reason(self) -> str:
        state = self.state
        if state is None:
            return "no state stored (first run)"
        if self.pending.whole:
            return "a run stopped during a whole recompute"
        if state.digest != self.digest:
            return "a rule's version, bounds or threshold changed"
        if self.snapshots[FACTS_TABLE].mode != DELTA:
            return "energy_facts is not kept per entry"
        for table, snapshot in self.snapshots.items():
            before = state.modes.get(table, "absent")
            if {before, snapshot.mode} == {DELTA, PLAIN}:
                return f"{table} changed between plain files and a table kept per entry"
        return ""

    def delta(self, table: str, key: list[str], columns: list[str] | None = None
              ) -> Changed | str | None:
        """What changed in an input kept per entry (None: not one now or before)."""
        snapshot = self.snapshots[table]
        if snapshot.mode != DELTA and self.state.modes.get(table) != DELTA:
            if snapshot.files != self.state.files.get(table, {}):
                return f"{table} (a plain table) changed"
            return None
        return delta_changes(self.warehouse, snapshot, set(self.state.files.get(table, {})),
                             key, columns)

    def partition_keys(self, table: str) -> list[str]:
        """The partitions of a plain input new, gone or rewritten."""
        return partition_changes(self.snapshots[table], self.state.files.get(table, {}))

    def to_recompute(self, keys_of: Callable[[_Run], pd.DataFrame | str]
                     ) -> tuple[str, pd.DataFrame | None]:
        """Why everything must be recomputed ('' if not) and, if not, the keys to recompute:
        ``keys_of(self)`` and those a stopped run left pending."""
        reason = self.whole_reason()
        found = None if reason else self.with_pending(keys_of(self))
        return (found, None) if isinstance(found, str) else (reason, found)

    def with_pending(self, keys: pd.DataFrame | str) -> pd.DataFrame | str:
        """``keys`` and those a run stopped between commits left to rewrite."""
        if isinstance(keys, str) or not self.pending.keys:
            return keys
        pairs = set(map(tuple, keys[_KEY].to_numpy())) | self.pending.keys
        if len(pairs) > WHOLE_ABOVE:
            return f"{len(pairs)} keys changed (over {WHOLE_ABOVE})"
        return _keys(pairs)

    def mark(self, keys: pd.DataFrame | None, weeks=()) -> None:
        """What this run is about to rewrite (None: the whole table), before its first
        commit (:class:`changed.Pending`)."""
        pending = (Pending(whole=True) if keys is None else
                   Pending(keys=frozenset(map(tuple, keys[_KEY].to_numpy())),
                           weeks=tuple(weeks)))
        pending.write(self.warehouse, self.state_table)

    def write_state(self) -> None:
        State.of(self.digest, list(self.snapshots.values())).write(self.warehouse,
                                                                  self.state_table)
        Pending.clear(self.warehouse, self.state_table)


def _cc_jobs_of_blocks(run: _Run, blocks: list[str]) -> set | str:
    """The ClusterCockpit entities of energy_facts owned by job-id ``blocks`` (partition
    keys of ``cc_block_tables``); or why they cannot be told (a key that is no block)."""
    try:
        prefixes = [CC_OWNERSHIP.prefix(block) for block in blocks]
    except ValueError:
        return f"{CC_STATS_TABLE}: a partition that is no job-id block changed"
    if not prefixes:
        return set()
    found = entry_table.stored_entries(run.warehouse, FACTS_TABLE, {"source": CC_SOURCE},
                                       prefixes)
    wanted = set(blocks)
    return {(CC_SOURCE, job) for job in found if _owner(job) in wanted}


def _replace(run: _Run, table: str, rows: pd.DataFrame, keys: pd.DataFrame | None) -> None:
    """``table``'s rows of ``keys`` (None: all) replaced by ``rows``, written in ORDER."""
    rows = rows.sort_values(ORDER[table], kind="stable", ignore_index=True)
    entry_table.replace_keys(run.warehouse, table, entry_table.to_microseconds(rows), keys,
                             FILE_BYTES)


# --- trust_checks ---------------------------------------------------------------------

TRUST_STATE = "_trust_checks_state"
TRUST_INPUTS = [FACTS_TABLE, JOBS_TABLE]
#: cc_jobs columns the GEOPM pairing reads (a job's hosts).
_TRUST_JOB_COLUMNS = ["job", "resources"]


def _trust_digest() -> str:
    return _digest("trust", [vars(rule) for rule in trust.RULES])


def _sensor(entity: str) -> str:
    return entity.split("/", 1)[0]


def update_trust(warehouse: Warehouse) -> Updated:
    """Bring ``trust_checks`` to ``trust.trust_checks`` from scratch over the stored facts
    and jobs (see the module)."""
    run = _Run(warehouse, TRUST_STATE, TRUST_INPUTS, _trust_digest())
    reason, found = run.to_recompute(_trust_keys)
    if reason:
        table = trust_whole(run)
        run.mark(None)
        _replace(run, TRUST_TABLE, table, None)
        run.write_state()
        return Updated(reason, len(table.drop_duplicates(_KEY)), len(table))
    rows = _trust_rows(run, found)
    if len(found):
        run.mark(found)
        _replace(run, TRUST_TABLE, rows, found)
    run.write_state()
    return Updated("", len(found), len(rows))


def trust_whole(run: _Run) -> pd.DataFrame:
    jobs = run.read(JOBS_TABLE)
    return trust.trust_checks(run.facts(), jobs)


def _facts_and_jobs(run: _Run, job_columns: list[str]
                    ) -> tuple[Changed | None, Changed | None] | str:
    """What changed in ``energy_facts`` and in ``cc_jobs``' ``job_columns`` (None: not kept
    per entry now or before); or why all must be recomputed."""
    facts = run.delta(FACTS_TABLE, _KEY, FACT_COLUMNS)
    if isinstance(facts, str):
        return facts
    jobs = run.delta(JOBS_TABLE, ["job"], job_columns)
    return jobs if isinstance(jobs, str) else (facts, jobs)


def _trust_keys(run: _Run) -> pd.DataFrame | str:
    """The trust keys (source, entity) to recompute; or why all must be."""
    found = _facts_and_jobs(run, _TRUST_JOB_COLUMNS)
    if isinstance(found, str):
        return found
    facts, jobs = found
    changed = set() if facts is None else set(map(tuple, facts.keys[_KEY].to_numpy()))
    keys = {(s, e) for s, e in changed if s in (GPU_SOURCE, CC_SOURCE)}
    keys |= {(POWERAPI_SOURCE, _sensor(e)) for s, e in changed if s == POWERAPI_SOURCE}
    if jobs is not None:
        keys |= {(CC_SOURCE, job) for job in jobs.keys["job"]}
    if facts is not None:
        keys |= _jobs_around(run, pd.concat([facts.before, facts.after], ignore_index=True))
    if len(keys) > WHOLE_ABOVE:
        return f"{len(keys)} keys changed (over {WHOLE_ABOVE})"
    return _keys(keys)


def _geopm_rapl(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[(rows["source"] == GEOPM_SOURCE) & (rows["component"] == "cpu")
                & (rows["method"] == "rapl")]


def _cc_cpu_power(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[(rows["source"] == CC_SOURCE) & (rows["component"] == "cpu")
                & (rows["method"] == "power")]


_CC_CPU_POWER = ((ds.field("source") == CC_SOURCE) & (ds.field("component") == "cpu")
                 & (ds.field("method") == "power"))
_GEOPM_RAPL = ((ds.field("source") == GEOPM_SOURCE) & (ds.field("component") == "cpu")
               & (ds.field("method") == "rapl"))


def _jobs_around(run: _Run, changed: pd.DataFrame) -> set:
    """The ClusterCockpit jobs whose CPU power fact's window contains a window of the
    changed GEOPM package facts (before or after): their pairs may have changed."""
    geopm = _geopm_rapl(changed) if len(changed) else changed
    if geopm.empty:
        return set()
    starts = geopm["window_start"].to_numpy("datetime64[ns]")
    ends = geopm["window_end"].to_numpy("datetime64[ns]")
    where = functools.reduce(lambda a, b: a | b, [
        (ds.field("window_start") <= _timestamp(latest_start))
        & (ds.field("window_end") >= _timestamp(earliest_end))
        for _, latest_start, earliest_end, _ in _clusters(starts, ends)])
    jobs = run.read(FACTS_TABLE, _CC_CPU_POWER & where,
                    ["entity", "window_start", "window_end"])
    if jobs is None or jobs.empty:
        return set()
    js = jobs["window_start"].to_numpy("datetime64[ns]")[:, None]
    je = jobs["window_end"].to_numpy("datetime64[ns]")[:, None]
    inside = ((starts[None, :] >= js) & (ends[None, :] <= je)).any(axis=1)
    return {(CC_SOURCE, job) for job in jobs.loc[inside, "entity"].astype(str)}


def _sensor_entities(run: _Run, sensors: list[str]) -> list[str]:
    """The PowerAPI entities of the snapshot of ``sensors`` (``<sensor>`` or
    ``<sensor>/...``): the entity column of the PowerAPI facts between the least and the
    greatest sensor read once (a clause per sensor took 92 s at 5,000 and crashed
    pyarrow at 10,000)."""
    where = ((ds.field("source") == POWERAPI_SOURCE) & (ds.field("entity") >= min(sensors))
             & (ds.field("entity") < max(sensors) + chr(ord("/") + 1)))
    found = run.read(FACTS_TABLE, where, ["entity"])
    if found is None or found.empty:
        return []
    entities = pd.unique(found["entity"].astype(str))
    wanted = set(sensors)
    return [entity for entity in entities if _sensor(entity) in wanted]


def _trust_rows(run: _Run, keys: pd.DataFrame) -> pd.DataFrame:
    """The trust rows of ``keys``, from their facts (and the GEOPM facts inside their jobs'
    windows) only."""
    pairs = set(map(tuple, keys[_KEY].to_numpy()))
    direct = {(s, e) for s, e in pairs if s in (GPU_SOURCE, CC_SOURCE)}
    sensors = sorted(e for s, e in pairs if s == POWERAPI_SOURCE)
    clauses = [] if not direct else [_of(direct)]
    if sensors:  # their entities ('<sensor>', '<sensor>/...'): one IN, not a clause each
        clauses.append(_isin("entity", _sensor_entities(run, sensors))
                       & (ds.field("source") == POWERAPI_SOURCE))
    facts = run.facts(functools.reduce(lambda a, b: a | b, clauses)) if clauses else run.facts(
        ds.scalar(False))
    jobs = None
    cc = _cc_cpu_power(facts)
    if len(cc) and run.stored(JOBS_TABLE):
        jobs = run.read(JOBS_TABLE, ds.field("job").isin(sorted(set(cc["entity"]))))
        starts = cc["window_start"].to_numpy("datetime64[ns]")
        ends = cc["window_end"].to_numpy("datetime64[ns]")
        inside = functools.reduce(lambda a, b: a | b, [
            (ds.field("window_start") >= _timestamp(earliest_start))
            & (ds.field("window_end") <= _timestamp(latest_end))
            for earliest_start, _, _, latest_end in _clusters(starts, ends)])
        geopm = run.facts(_GEOPM_RAPL & inside)
        facts = canonical(pd.concat([facts, geopm], ignore_index=True))
    rows = trust.trust_checks(facts, jobs)
    mine = pd.MultiIndex.from_arrays([rows["source"], rows["entity"]]).isin(
        pd.MultiIndex.from_frame(keys[_KEY]))
    return rows[mine].reset_index(drop=True)


def trust_summary(warehouse: Warehouse) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per rule of RULES: version, pairs (counted from the Delta log; files holding several
    rules have their ``rule`` column read) and failed pairs; and the failed rows (read by a
    predicate on ``passed``: the row groups whose statistics hold no failure are
    skipped)."""
    listed = entry_table.files(warehouse, TRUST_TABLE)
    failed = entry_table.read_files(
        warehouse, TRUST_TABLE, listed, ds.field("passed") == False,
        columns=["rule", "entity", "window_start", "reference_j", "compared_j", "ratio"])
    rows = []
    for rule in trust.RULES:
        pairs = entry_table.count(warehouse, TRUST_TABLE, {"rule": rule.id}) if listed else 0
        rows.append({"rule": rule.id, "version": rule.version, "pairs": pairs,
                     "failed": int((failed["rule"] == rule.id).sum()) if len(failed) else 0})
    return pd.DataFrame(rows), failed


# --- waste, waste_weekly ----------------------------------------------------------------

WASTE_STATE = "_waste_state"
WASTE_INPUTS = [FACTS_TABLE, JOBS_TABLE, GPU_ENERGY_TABLE, GPU_POWER_TABLE, CC_STATS_TABLE]
#: cc_jobs columns cpu_low_load reads.
_WASTE_JOB_COLUMNS = ["job", "hpc_user", "num_acc", "num_hwthreads", "num_nodes"]


def _waste_digest() -> str:
    return _digest("waste", vars(waste.GPU_IDLE), vars(waste.CPU_LOW_LOAD))


@dataclass(frozen=True)
class WasteUpdated(Updated):
    """``unjudged``: the GPU repetitions of the recomputed keys that gpu_idle could not
    judge (no utilisation, no frame)."""

    unjudged: tuple[str, ...] = ()


def update_waste(warehouse: Warehouse,
                 frame_of: Callable[[str], pd.DataFrame | None] | None = None) -> WasteUpdated:
    """Bring ``waste`` and ``waste_weekly`` to ``waste.waste`` and ``waste.weekly`` from
    scratch over the stored inputs (see the module). ``frame_of``: a GPU repetition's
    ``gpu-power`` frame by key, for those stored without their readings' figures (default:
    the stored partition)."""
    run = _Run(warehouse, WASTE_STATE, WASTE_INPUTS, _waste_digest())
    frame_of = frame_of or _frame_reader(run, GPU_POWER_TABLE)
    reason, found = run.to_recompute(_waste_keys)
    if reason:
        facts = run.facts()
        table, unjudged = _waste_rows(run, facts, None, frame_of)
        weekly = waste.weekly(table)
        run.mark(None)
        _replace(run, WASTE_WEEKLY_TABLE, weekly, None)
        _replace(run, WASTE_TABLE, table, None)
        run.write_state()
        return WasteUpdated(reason, len(table), len(table), weekly["week"].nunique(),
                            tuple(unjudged))
    pairs = set(map(tuple, found[_KEY].to_numpy()))
    facts = run.facts(_of(pairs)) if pairs else run.facts(ds.scalar(False))
    rows, unjudged = _waste_rows(run, facts, pairs, frame_of)
    mine = pd.MultiIndex.from_arrays([rows["source"], rows["entity"]]).isin(
        pd.MultiIndex.from_frame(found[_KEY]))
    rows = rows[mine].reset_index(drop=True)
    stored = entry_table.files(warehouse, WASTE_TABLE)
    before = (entry_table.read_files(warehouse, WASTE_TABLE, stored, _of(pairs))
              if pairs else rows.iloc[:0])
    weeks = np.union1d(_weeks(pd.concat([before, rows], ignore_index=True)),
                       np.asarray(run.pending.weeks, "datetime64[ns]"))
    if len(weeks) or pairs:
        run.mark(found, weeks)
    if len(weeks):
        _replace(run, WASTE_WEEKLY_TABLE, _weekly_of(run, stored, weeks, rows, found),
                 pd.DataFrame({"week": weeks}))
    if pairs:
        _replace(run, WASTE_TABLE, rows, found)
    run.write_state()
    return WasteUpdated("", len(found), len(rows), len(weeks), tuple(unjudged))


def _frame_reader(run: _Run, table: str) -> Callable[[str], pd.DataFrame | None]:
    """A reader of a GPU frame table's stored partition by repetition key (None: not
    stored in the run's snapshot); the stored keys found once, from the file names."""
    snapshot = run.snapshots.get(table) or Snapshot.of(run.warehouse, table)
    stored = functools.cache(lambda: {partition_key(name): name for name in snapshot.files})

    def frame_of(key: str) -> pd.DataFrame | None:
        if key not in stored():
            return None
        return read_parquet_files([snapshot.infos[stored()[key]]], run.warehouse.filesystem)
    return frame_of


def _with_changed_blocks(run: _Run, keys: set[tuple[str, str]]) -> pd.DataFrame | str:
    """``keys`` and the jobs of the ClusterCockpit blocks whose statistics changed, as a
    frame; or why all must be recomputed."""
    blocks = _cc_jobs_of_blocks(run, run.partition_keys(CC_STATS_TABLE))
    if isinstance(blocks, str):
        return blocks
    keys |= blocks
    if len(keys) > WHOLE_ABOVE:
        return f"{len(keys)} keys changed (over {WHOLE_ABOVE})"
    return _keys(keys)


def _waste_keys(run: _Run) -> pd.DataFrame | str:
    found = _facts_and_jobs(run, _WASTE_JOB_COLUMNS)
    if isinstance(found, str):
        return found
    facts, jobs = found
    keys = set() if facts is None else {
        (s, e) for s, e in map(tuple, facts.keys[_KEY].to_numpy()) if s in (GPU_SOURCE, CC_SOURCE)}
    if jobs is not None:
        keys |= {(CC_SOURCE, job) for job in jobs.keys["job"]}
    for table in (GPU_ENERGY_TABLE, GPU_POWER_TABLE):
        keys |= {(GPU_SOURCE, key) for key in run.partition_keys(table)}
    return _with_changed_blocks(run, keys)


def _waste_rows(run: _Run, facts: pd.DataFrame, pairs: set | None,
                frame_of: Callable[[str], pd.DataFrame | None]) -> tuple[pd.DataFrame, list]:
    """``waste.waste`` over ``facts`` with the inputs of ``pairs`` only (None: all); and
    the GPU repetitions not judged."""
    if pairs is None:
        energy = run.read(GPU_ENERGY_TABLE)
        stats, jobs = run.read(CC_STATS_TABLE), run.read(JOBS_TABLE)
    else:
        gpu_keys = sorted(e for s, e in pairs if s == GPU_SOURCE)
        energy = run.partitions(GPU_ENERGY_TABLE, gpu_keys)
        cc = sorted(e for s, e in pairs if s == CC_SOURCE)
        blocks = sorted({_owner(job) for job in cc} - {None})
        stats = run.partitions(CC_STATS_TABLE, blocks)
        if stats is not None and len(stats):
            stats = stats[stats["job"].isin(cc)]
        jobs = run.read(JOBS_TABLE, _isin("job", cc))
    _, judged = stored_figures(pd.DataFrame() if energy is None else energy)
    gpu = waste.gpu_waste(facts, frame_of, judged)
    table = waste.waste(facts, gpu, stats, jobs)
    unjudged = sorted(set(waste.gpu_windows(facts)["entity"]) - set(gpu["entity"]))
    return table, unjudged


def _mondays(times: pd.Series) -> np.ndarray:
    day = times.dt.tz_convert("UTC").dt.tz_localize(None).dt.normalize()
    return (day - pd.to_timedelta(day.dt.weekday, unit="D")).to_numpy("datetime64[ns]")


def _weeks(rows: pd.DataFrame) -> np.ndarray:
    """The UTC weeks (Mondays, naive) ``rows``' windows touch."""
    if rows.empty:
        return np.asarray([], "datetime64[ns]")
    first, last = _mondays(rows["window_start"]), _mondays(rows["window_end"])
    week = np.timedelta64(7, "D")
    spans = [np.arange(a, b + week, week) for a, b in zip(first, last, strict=True)]
    return np.unique(np.concatenate(spans)).astype("datetime64[ns]")


def _weekly_of(run: _Run, stored: list, weeks: np.ndarray, rows: pd.DataFrame,
               keys: pd.DataFrame) -> pd.DataFrame:
    """``waste_weekly``'s rows of ``weeks``, from the stored waste rows overlapping them
    (but those of ``keys``) and the recomputed ``rows``."""
    span = np.timedelta64(7, "D")
    where = functools.reduce(lambda a, b: a | b, [
        (ds.field("window_start") <= _timestamp(latest + span))
        & (ds.field("window_end") >= _timestamp(earliest))
        for earliest, latest, _, _ in _clusters(weeks, weeks, pd.Timedelta(days=7))])
    others = entry_table.read_files(run.warehouse, WASTE_TABLE, stored, where)
    if len(others):
        theirs = pd.MultiIndex.from_arrays([others["source"], others["entity"]]).isin(
            pd.MultiIndex.from_frame(keys[_KEY]))
        others = others[~theirs]
    table = pd.concat([part for part in (others, rows) if len(part)] or [rows],
                      ignore_index=True)
    weekly = waste.weekly(table)
    return weekly[weekly["week"].isin(pd.DatetimeIndex(weeks))].sort_values(
        ["week", "rank", "user"], ignore_index=True)


# --- fact_quality ---------------------------------------------------------------------

QUALITY_STATE = "_fact_quality_state"
#: A GPU repetition's figures are read from ``gpu_repetition_figures`` (kept per entry),
#: no longer from its energy and frames (plain partitions, every file listed at each run).
QUALITY_INPUTS = [FACTS_TABLE, FIGURES.table, CC_ENERGY_TABLE, CC_STATS_TABLE, WINDOW_TABLE]


def _quality_digest() -> str:
    """Its methods and its inputs: a state written over other inputs (before
    ``gpu_repetition_figures``) makes the next run recompute whole."""
    return _digest("fact_quality", quality.GPU_FRAMES, QUALITY_INPUTS)


def update_quality(warehouse: Warehouse) -> Updated:
    """Bring ``fact_quality`` to ``quality.fact_quality`` from scratch over the stored
    inputs (see the module)."""
    run = _Run(warehouse, QUALITY_STATE, QUALITY_INPUTS, _quality_digest())
    reason, found = run.to_recompute(_quality_keys)
    if reason:
        table = _quality_rows(run, run.facts(), None)
        run.mark(None)
        _replace(run, QUALITY_TABLE, table[table["source"] == table["source"].min()]
                 if len(table) else table, None)
        for source in sorted(set(table["source"]))[1:]:  # a file holds one source
            _replace(run, QUALITY_TABLE, table[table["source"] == source],
                     pd.DataFrame({"source": [source]}))
        run.write_state()
        return Updated(reason, len(table.drop_duplicates(_KEY)), len(table))
    pairs = set(map(tuple, found[_KEY].to_numpy()))
    rows = _quality_rows(run, run.facts(_of(pairs)), pairs) if pairs else None
    if pairs:
        run.mark(found)
    for source, keys in found.groupby("source", sort=True):  # a commit (file) per source
        _replace(run, QUALITY_TABLE, rows[rows["source"] == source], keys)
    run.write_state()
    return Updated("", len(found), 0 if rows is None else len(rows))


def quality_summary(warehouse: Warehouse) -> tuple[pd.DataFrame, float]:
    """Per source, the facts with a sampling interval and with a coverage; and the least
    coverage: from the Delta log's statistics (the table is written a file per source),
    the columns of a file holding several sources (written before) read."""
    stats = entry_table.file_stats(warehouse, QUALITY_TABLE)
    columns = ["sampling_interval_s", "covered_fraction"]
    if stats.empty:
        return pd.DataFrame(columns=["source", *columns]), float("nan")
    single = (stats["min.source"] == stats["max.source"]).to_numpy(bool)
    parts = [pd.DataFrame({"source": stats.loc[single, "min.source"].to_numpy(object),
                           **{c: (stats.loc[single, "num_records"]
                                  - stats.loc[single, f"null_count.{c}"]).to_numpy()
                              for c in columns}})]
    least = [float(stats["min.covered_fraction"].min())]
    if (~single).any():
        base = warehouse.table_path(QUALITY_TABLE)
        mixed = [pafs.FileInfo(f"{base}/{path}", pafs.FileType.File, size=int(size)) for path, size in zip(
            stats.loc[~single, "path"], stats.loc[~single, "size_bytes"], strict=True)]
        rows = entry_table.read_files(warehouse, QUALITY_TABLE, mixed,
                                      columns=["source", *columns])
        parts.append(rows.groupby("source", as_index=False)[columns].count())
        least.append(float(rows["covered_fraction"].min()))
    known = pd.concat(parts, ignore_index=True).groupby("source", as_index=False)[columns].sum()
    return known, float(np.nanmin(least)) if not np.isnan(least).all() else float("nan")



def _quality_keys(run: _Run) -> pd.DataFrame | str:
    facts = run.delta(FACTS_TABLE, _KEY, FACT_COLUMNS)
    figures = run.delta(FIGURES.table, [FIGURES.entry])
    energy = run.delta(CC_ENERGY_TABLE, ["job"])
    windows = run.delta(WINDOW_TABLE, ["sensor", "target"])
    for found in (facts, figures, energy, windows):
        if isinstance(found, str):
            return found
    keys = set() if facts is None else set(map(tuple, facts.keys[_KEY].to_numpy()))
    if figures is not None:
        keys |= {(GPU_SOURCE, entity) for entity in figures.keys[FIGURES.entry]}
    if energy is not None:
        keys |= {(CC_SOURCE, job) for job in energy.keys["job"]}
    if windows is not None:
        keys |= {(POWERAPI_SOURCE, f"{sensor}/{target}")
                 for sensor, target in windows.keys[["sensor", "target"]].to_numpy()}
    return _with_changed_blocks(run, keys)


def _quality_rows(run: _Run, facts: pd.DataFrame, pairs: set | None) -> pd.DataFrame:
    """``quality.fact_quality`` over ``facts`` with the inputs of ``pairs`` only (None:
    all)."""
    if pairs is None:
        gpu_figures, cc_energy = run.read(FIGURES.table), run.read(CC_ENERGY_TABLE)
        stats, windows = run.read(CC_STATS_TABLE), run.read(WINDOW_TABLE)
    else:
        gpu_figures = run.read(FIGURES.table, _isin(FIGURES.entry, (
            e for s, e in pairs if s == GPU_SOURCE)))
        cc = sorted(e for s, e in pairs if s == CC_SOURCE)
        cc_energy = run.read(CC_ENERGY_TABLE, _isin("job", cc))
        stats = run.partitions(CC_STATS_TABLE, sorted({_owner(j) for j in cc} - {None}))
        if stats is not None and len(stats):
            stats = stats[stats["job"].isin(cc)]
        targets = [e.split("/", 1) for s, e in pairs if s == POWERAPI_SOURCE and "/" in e]
        sensors = sorted({sensor for sensor, _ in targets})
        windows = run.read(WINDOW_TABLE, _isin("sensor", sensors))
    return quality.fact_quality(facts, gpu_figures=gpu_figures, cc_energy=cc_energy,
                                cc_stats=stats, powerapi_windows=windows)
