"""ClusterCockpit assets: job-id blocks of a job archive -> job tables, energy, facts, trials.

One dynamic partition per job-id block folder of the archive, key
``<cluster>/<jobId // 1000>`` (``cc_job_blocks``; ``joulehouse.clustercockpit.blocks``):
at most 1000 job ids with any start times, listed from its folder alone, so
a million jobs are about a thousand partitions and no side index is kept
(docs/clustercockpit.md, "In Dagster"). Registered by the archive sensor
(``sensors/clustercockpit.py``). ``cc_pipeline`` is ONE subsettable step over
every block of a run, for the reason ``assets/pipeline.py`` gives. In order:

1. ``cc_block_tables``: each block's jobs read once (meta.json, data.json
   streamed): its ``cc_jobs`` rows, energy per job/host/metric and per-metric
   statistics, four Parquet partitions under ``cc_block_tables/``, and a fifth,
   ``files``, of each stored job's fingerprint (its files' names, sizes, mtimes,
   its cluster.json's, the reader version and settings), stored all or
   nothing (``joulehouse.partition_group``; a write a crash interrupted is
   completed at the start of the next step). A run reads only the block's jobs
   whose fingerprint differs from the stored one (new, changed, or failed before)
   and keeps the stored rows of the others (``joulehouse.clustercockpit.blocks``),
   so a landing reads and measures its new jobs, not the block's 1000; what stays
   per block: one stat pass over every job folder of the block (on Lustre or NFS
   these metadata operations per job dominate), its stored frames read, and, when
   anything changed, its five frames rewritten, ``kept_tables.land`` rewriting the
   block's jobs in cc_jobs, cc_job_energy and energy_facts, and the accounting's
   derived tables seeing the block's metric_stats partition changed; a run in
   which nothing of the block changed (no job read, none failed, none removed,
   the block landed as stored: ``cc_block_tables/landed``) writes none of that,
   a stat pass and a read. A run tagged
   ``joulehouse/reread=all`` (the weekly re-validation, which covers only the
   newest ``BLOCKS_PER_RUN`` blocks and runs only when its schedule is switched on,
   or an operator's launch or backfill with that tag: Dagster passes a backfill's
   tags to its runs) reads every job again, as does the first run over a block stored before the
   fingerprints were kept, or one with a folder that cannot be listed or a
   missing or bad cluster.json. A job that
   cannot be read is left out and named in the block's check ``jobs_read``
   (job folder and error); the block's other jobs are stored, the rows stored
   before for the failed job are kept, and the block's partition fails. JSON
   schema violations are the check ``schema_conformance`` (WARN), naming job,
   file and path; the job is still read. A job metric that gives no
   ``energy_facts`` row (a host without a bridged sample, unbridged gaps:
   ``JobMeasurement.left_out``) makes ``jobs_read`` a WARN and is stored in the
   warehouse table ``left_out`` (partition ``clustercockpit/read/<block>``): the
   records of every stored job of the block, derived from its stored energy rows
   (``blocks.left_out_of``), so a run cut off after the block's write loses none.
2. ``cc_job_trials``: one TAUdb trial per job of the block (replacing the
   job's trial by its source key, the job folder; a job whose files, cluster.json,
   ``max_missing`` and reader version are unchanged since its trial was loaded is
   not loaded again: an unchanged job not read in the run keeps its stored trial,
   read only where that is missing or stale; the trial fingerprint is taken before
   any read, with the job's; the reader version is in it, so once after deploying a
   new reader, or after any edit of a ``blocks.READER_SOURCES`` file, every job is read
   and its trial reloaded by its block's next run; a job whose folder cannot be listed
   has none and is loaded by every run); a job that cannot be mapped loads nothing
   and fails its block's check ``loads``; the block's other trials are written in one transaction (all or none).
3. the tables over every stored block, kept per entry
   (``joulehouse.clustercockpit.tables``, ``assets/facts.py``): ``cc_jobs``,
   ``cc_job_energy`` (per job), ``cc_rollup`` (per UTC start day, cluster,
   partition, project, user; kept from its groups' exact sums: a run adds its
   blocks' jobs and takes away their stored ones, whatever else the days hold) and
   ``energy_facts/clustercockpit``: a run writes its blocks' jobs, a run without
   partitions what differs from every stored block;
4. then, if any block failed, the step fails (``assets/reporting.py``).

Backfills run at most ``BLOCKS_PER_RUN`` blocks per run (``BackfillPolicy.multi_run``),
so one run's work is bounded (12,000 jobs at most) and a failure or a restart
costs one run, not the backfill. Dagster plans the tables over all blocks (not
partitioned) as one more run after the block runs, which brings them in line with
every stored block: 100,000 jobs (100 blocks) take 9 block runs and 1 table run.
"""

from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd

from assets.blocks import MAX_LISTED, block_failure
from assets.facts import OwnedFacts, write_facts
from assets.gpu import FACTS_TABLE, TABLE_AUTOMATION
from assets.plot_cadence import plot_metadata
from assets.pools import tables_pool
from assets.reporting import (
    STEP_RETRY,
    PartitionBatch,
    Stored,
    backfills,
    failure,
    partition_check_spec,
    reread_all,
    run_partitions,
    table_metadata,
    verdict,
)
from assets.taudb import TrialLoads
from joulehouse.clustercockpit import schemas
from joulehouse.clustercockpit import tables as kept_tables
from joulehouse.clustercockpit.blocks import (
    FILES,
    FRAMES,
    BlockRead,
    files_digest,
    keep_stored,
    left_out_of,
    read_block,
    stored_fingerprints,
    unchanged_block,
    unchanged_violations,
)
from joulehouse.clustercockpit.conformance import SchemaWarning
from joulehouse.clustercockpit.energy import (
    FACTS_OWNERSHIP,
    FACTS_SOURCE,
    J_PER_KWH,
    energy_facts_rows,
)
from joulehouse.clustercockpit.layout import JobRef
from joulehouse.clustercockpit.measure import JobMeasurement
from joulehouse.entry_sync import Written
from joulehouse.errors import InputError
from joulehouse.leftout import LeftOut, store_left_out
from joulehouse.partition_group import finish_pending, write_together
from joulehouse.plots import Series, bars_png, markdown_image
from joulehouse.taudb.mapping.clustercockpit import job_trial
from joulehouse.taudb.model import TrialData
from joulehouse.warehouse import Warehouse as Tables
from resources import ClusterCockpitArchive, Warehouse
from resources.taudb import TaudbResource

GROUP = "clustercockpit"
TAGS = {"source": "clustercockpit"}
BLOCK_TABLE = "cc_block_tables"
JOBS_TABLE = "cc_jobs"
JOB_ENERGY_TABLE = "cc_job_energy"
ROLLUP_TABLE = "cc_rollup"
#: The journal of the blocks' writes: a block's four frames are stored all or nothing
#: (``joulehouse.partition_group``).
BLOCK_JOURNAL = f"{BLOCK_TABLE}/pending_writes"
#: Per block, the digest of its frame ``files`` (``blocks.files_digest``) as stored when its
#: jobs were last landed in the tables over the blocks and energy_facts (written after the
#: landing; removed before each write of the block's frames, when a write a crash
#: interrupted is completed, and by a rebuild that drops the block): a run that changes
#: nothing of a block so landed writes nothing for it.
LANDED_TABLE = f"{BLOCK_TABLE}/landed"
READ_CHECK = "jobs_read"
CONFORMANCE_CHECK = "schema_conformance"
LOADS_CHECK = "loads"
#: Blocks per backfill run: 100 blocks (100,000 jobs) in 9 runs, and 1 for the tables.
BLOCKS_PER_RUN = 12
#: The pandera schema of each frame of a block.
FRAME_SCHEMAS = {"jobs": schemas.CC_JOBS_SCHEMA, "host_energy": schemas.HOST_ENERGY_SCHEMA,
                 "job_energy": schemas.JOB_ENERGY_SCHEMA,
                 "metric_stats": schemas.METRIC_STATS_SCHEMA}

cc_job_blocks = dg.DynamicPartitionsDefinition(name="cc_job_blocks")

cc_job_files = dg.AssetSpec(
    "cc_job_files",
    description=(
        "The job folders of one job-id block <cluster>/<jobId // 1000> of a ClusterCockpit "
        "job archive as cc-backend wrote them (meta.json, data.json or data.json.gz per job "
        "<jobId % 1000>/<startTime>). Found by the archive sensor once a job's files were "
        "quiet and parse to the end; one materialization per block per tick that found "
        "ready jobs in it (data version: a digest of their fingerprints)."
    ),
    group_name=GROUP, partitions_def=cc_job_blocks, kinds={"json"}, tags=TAGS,
)

PER_BLOCK = {"group_name": GROUP, "partitions_def": cc_job_blocks, "skippable": True,
             "tags": TAGS}
WHOLE_TABLE = {"automation_condition": TABLE_AUTOMATION, "skippable": True, "tags": TAGS,
               "kinds": {"pandas", "parquet"}}

cc_block_tables = dg.AssetSpec(
    BLOCK_TABLE,
    description=(
        "A block's jobs read once: cc_jobs rows (cc-backend's job table columns), energy per "
        "job/host/metric (integrated, with covered fraction and cc-backend's figure) and "
        "per-metric statistics; one Parquet partition per frame under cc_block_tables/, "
        "with 'files', each stored job's fingerprint. A run reads only the jobs new or "
        "changed since the block was stored and keeps the others' rows; a run tagged "
        "joulehouse/reread=all (the weekly re-validation, or launched with that tag) reads "
        "every job again. A run that changes nothing of the block rewrites nothing. Metadata: "
        "jobs, jobs_attempted, jobs_unchanged, read_whole, block_written, node-hours, energy "
        "and the start-time span of the block. A job "
        "that cannot be read fails the block's check 'jobs_read' naming the job folder; "
        "the block's other jobs are stored and the failed job's earlier rows kept."
    ),
    **PER_BLOCK, deps=[cc_job_files], kinds={"pandas", "parquet", "pandera"},
)

cc_job_trials = dg.AssetSpec(
    "cc_job_trials",
    description=(
        "One TAUdb trial per job of the block (threads = hosts, timer 'job' with TIME and "
        "ENERGY <metric> (J), metric statistics as user events, meta.json as metadata; "
        "docs/taudb-mapping.md), replacing the job's trial (source key: the job folder). A "
        "job that cannot be read or mapped loads nothing. A job's trial is loaded again "
        "only when its files, cluster.json, max_missing or the reader version changed: "
        "after deploying a new reader, or any edit of a file of blocks.READER_SOURCES, "
        "every trial is reloaded once, by its block's next run; a job whose folder cannot "
        "be listed, by every run (docs/clustercockpit.md)."
    ),
    **PER_BLOCK, deps=[cc_block_tables], automation_condition=dg.AutomationCondition.eager(),
    kinds={"taudb"},
)

cc_jobs = dg.AssetSpec(
    JOBS_TABLE,
    description=("Every stored job of the archive, one row each: cc-backend's job table "
                 "(DB version 11) columns, then UTC times, node-hours and archive version. "
                 "Metadata: the start-time span of each block."),
    group_name=GROUP, deps=[cc_block_tables], **WHOLE_TABLE,
)

cc_job_energy = dg.AssetSpec(
    JOB_ENERGY_TABLE,
    description=("Per job and energy metric (the columns of `joulehouse energy cc`): energy "
                 "integrated over the job's window and summed over hosts (J), its covered "
                 "fraction, and cc-backend's figure (kWh) beside it."),
    group_name=GROUP, deps=[cc_block_tables], **WHOLE_TABLE,
)

cc_rollup = dg.AssetSpec(
    ROLLUP_TABLE,
    description=("Jobs, node-hours and energy per UTC start day, cluster, batch partition, "
                 "project and user (sums, never means). Metadata: energy per day and "
                 "cluster, as a table and a plot."),
    group_name=GROUP, deps=[cc_block_tables], **WHOLE_TABLE,
)

cc_energy_facts = dg.AssetSpec(
    dg.AssetKey([FACTS_TABLE, FACTS_SOURCE]),
    description=("The ClusterCockpit rows of the cross-source energy table "
                 "(energy_facts, kept per entry: a run writes its blocks' jobs): per job and "
                 "component, the integrated energy over the whole job (method power or "
                 "counter; none with unbridged gaps) and cc-backend's figure (method "
                 "cc-backend)."),
    group_name=FACTS_TABLE, deps=[cc_block_tables], **WHOLE_TABLE,
)

READ_SPEC = partition_check_spec(
    cc_block_tables.key, READ_CHECK, cc_job_blocks,
    "Every job of the block is stored current: read in the run, or unchanged since it was "
    "stored (one result per block; a failed one names each job folder that could not be "
    "read and its error; WARN with what the block's stored jobs leave out of energy_facts).")
CONFORMANCE_SPEC = partition_check_spec(
    cc_block_tables.key, CONFORMANCE_CHECK, cc_job_blocks,
    "meta.json and data.json of every job of the block follow the archive version's official "
    "JSON schemas: the jobs read in the run validated, the unchanged ones by the violation "
    "counts stored when they were read (WARN: real archives violate them and cc-backend "
    "does not enforce them; the jobs are still read). A warning names the job, the file and "
    "the JSON path.")
LOADS_SPEC = partition_check_spec(
    cc_job_trials.key, LOADS_CHECK, cc_job_blocks,
    "Every job of the block has its TAUdb trial, loaded in the run or kept as loaded "
    "before (one result per block; a failed one names the job and its error).")

CC_TABLES = [cc_jobs, cc_job_energy, cc_rollup, cc_energy_facts]


def _frame_table(name: str) -> str:
    return f"{BLOCK_TABLE}/{name}"


def stored_block(tables: Tables, key: str) -> dict[str, pd.DataFrame] | None:
    """The frames stored for block ``key`` (:data:`FRAMES`, and :data:`FILES` where it was
    stored with them), or None when none are stored."""
    if not tables.has_partition(_frame_table("jobs"), key):
        return None
    names = [*FRAMES, *([FILES] if tables.has_partition(_frame_table(FILES), key) else [])]
    return {name: tables.read_partitions(_frame_table(name), [key]) for name in names}


@dataclass
class ReadOfBlock:
    """Block ``key`` read (:func:`block_read`): the read, what was stored for it, and the
    archive root holding it."""

    key: str
    read: BlockRead
    stored: dict[str, pd.DataFrame] | None
    root: Path


def block_read(context: dg.AssetExecutionContext, source: ClusterCockpitArchive,
               tables: Tables, key: str, *, for_trials: bool = False) -> ReadOfBlock:
    """Read block ``key``: only its jobs new or changed since it was stored, every job in a
    run tagged ``joulehouse/reread=all`` (``assets.reporting.REREAD_TAG``) or over a block
    stored without fingerprints (``joulehouse.clustercockpit.blocks.read_block``); and what
    was stored for it (read where needed: always, unless the block is read whole and no
    job failed). ``for_trials``: read for the trials alone (the block's tables not selected:
    nothing stored), its jobs not validated against the JSON schemas."""
    whole = reread_all(context)
    root = source.resolve(key)
    stored = None if whole else stored_block(tables, key)
    read = read_block(root, key, check_schema=source.check_schema,
                      max_missing=source.max_missing, known=stored_fingerprints(stored),
                      validate_schemas=False if for_trials else None)
    if stored is None and read.failed:
        stored = stored_block(tables, key)
    return ReadOfBlock(key, read, stored, root)


@dataclass
class StoredBlock:
    """What :func:`store_block` stored of a block: its frames (``blocks.keep_stored``), the
    left-out records of its jobs, whether anything was written (False: nothing of the
    block changed, and it was landed as stored) and the digest of its frame ``files``."""

    frames: dict[str, pd.DataFrame]
    records: list[LeftOut]
    written: bool
    digest: str


def landed_digest(tables: Tables, key: str) -> str | None:
    """The ``files`` digest block ``key`` was last landed with (:data:`LANDED_TABLE`)."""
    if not tables.has_partition(LANDED_TABLE, key):
        return None
    return str(tables.read_partitions(LANDED_TABLE, [key])["digest"].iloc[0])


def mark_landed(tables: Tables, digests: dict[str, str]) -> None:
    """Record that blocks (key -> ``files`` digest) are landed as stored."""
    for key, digest in digests.items():
        tables.write_partition(LANDED_TABLE, key, pd.DataFrame({"digest": [digest]}))


def unmark_landed(tables: Tables, keys: Iterable[str]) -> None:
    """Record that blocks ``keys`` may differ from what the tables over the blocks hold
    (their frames written, or dropped from those tables): their next run lands them."""
    for key in keys:
        tables.remove_partition(LANDED_TABLE, key)


def store_block(tables: Tables, block: ReadOfBlock) -> StoredBlock:
    """Store a block's read: its frames (:data:`FRAMES` and :data:`FILES`, all or nothing:
    ``write_together``), then the left-out records of every stored job of it, derived from
    the frames (``blocks.left_out_of``: a run cut off between the two writes loses none,
    the next run writes them). Nothing is written when the read changed nothing of the
    block (``blocks.unchanged_block``) and it was landed as stored (:data:`LANDED_TABLE`):
    a rerun costs its stat pass and the read of its stored frames. A write first drops the
    block's :data:`LANDED_TABLE` mark (:func:`unmark_landed`): frames rewritten with other
    rows but the same ``files`` digest (a re-read after a library upgrade) are landed by
    the next run even where this run's landing does not happen (not selected, failed, cut
    off, or the write completed later by ``finish_pending``)."""
    frames = keep_stored(block.read, block.stored)
    records = left_out_of(frames, block.root)
    digest = files_digest(frames)
    if unchanged_block(block.read, block.stored) and landed_digest(tables, block.key) == digest:
        return StoredBlock(frames, records, False, digest)
    unmark_landed(tables, [block.key])  # before staging: a write completed later is unmarked
    write_together(tables, BLOCK_JOURNAL, block.key,
                   {_frame_table(name): frame for name, frame in frames.items()})
    store_left_out(tables, FACTS_SOURCE, "read", block.key, records,
                   now=pd.Timestamp.now(tz="UTC"))
    return StoredBlock(frames, records, True, digest)


def read_metadata(read: BlockRead, written: bool) -> dict[str, Any]:
    """How a run read a block: ``jobs_attempted`` (the listed jobs not unchanged, whose
    files were read: some may have failed), ``jobs_unchanged`` (not read, their stored
    rows kept), ``read_whole`` (every listed job attempted: a run tagged
    joulehouse/reread=all, a block not stored or stored without fingerprints, a folder
    that could not be listed, a missing or bad cluster.json; False where the stored
    fingerprints were compared, even when every job differed) and ``block_written``
    (False: nothing of the block changed, nothing written)."""
    return {"jobs_attempted": dg.MetadataValue.int(read.listed - len(read.unchanged)),
            "jobs_unchanged": dg.MetadataValue.int(len(read.unchanged)),
            "read_whole": dg.MetadataValue.bool(read.whole),
            "block_written": dg.MetadataValue.bool(written)}


def _span(jobs: pd.DataFrame) -> str:
    """``first .. last`` start time of ``jobs`` (UTC), or "no jobs"."""
    if jobs.empty:
        return "no jobs"
    times = jobs["start_time_utc"]
    return f"{times.min():%Y-%m-%d %H:%M} .. {times.max():%Y-%m-%d %H:%M} UTC"


def block_metadata(frames: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """What a stored block shows: jobs, node-hours, energy (kWh) and start-time span."""
    jobs, energy = frames["jobs"], frames["job_energy"]
    return {
        "jobs": dg.MetadataValue.int(len(jobs)),
        "node_hours": dg.MetadataValue.float(float(jobs["node_hours"].sum())),
        "energy_kwh": dg.MetadataValue.float(float(energy["energy_j"].sum()) / J_PER_KWH),
        "start_time_span": dg.MetadataValue.text(_span(jobs)),
        "start_days": dg.MetadataValue.json(sorted(
            jobs["start_time_utc"].dt.strftime("%Y-%m-%d").unique().tolist())),
    }


#: A block's trial load: the trials loaded (job, trial_id), or the error naming its jobs.
TrialOutcome = dict[str, pd.DataFrame] | InputError


def _job_trial(measured: JobMeasurement, trial_fingerprint: str) -> TrialData:
    return replace(job_trial(measured), fingerprint=trial_fingerprint)


def _unchanged_trial(read: BlockRead, ref: JobRef, max_missing: int,
                     trial_fingerprint: str) -> TrialData:
    """The trial of ``ref``, a job of the block not read in the run (unchanged): read now,
    where its stored trial is missing or stale."""
    return _job_trial(read.measure(ref, max_missing), trial_fingerprint)


def load_block_trials(loads: TrialLoads, key: str, read: BlockRead, max_missing: int
                      ) -> TrialOutcome:
    """Load one trial per job of the block (replacing each job's trial): the jobs read,
    and those unchanged since the block was stored (``read.unchanged``, not read in the
    run). A job whose trial fingerprint (``read.trial_fingerprints``,
    ``blocks.trial_fingerprint``: its files, cluster.json, ``max_missing`` and the reader
    version, taken before any read) equals its stored trial's (primary metadata) is not
    loaded again (an unchanged job is read only where its trial is missing or stale; a job
    without one, its folder not listable when fingerprinted, is always loaded: its trial
    stored with the empty fingerprint, which ``TrialLoads.unchanged`` never matches), and
    a job that cannot be mapped loads nothing and is named in the returned error. The
    block's other trials are written in one transaction (:meth:`TrialLoads.load_many`: all
    or none of them). The frame ``trials``: every job's trial id, by job."""
    builds = [*((measured.ref, partial(_job_trial, measured)) for measured in read.measured),
              *((ref, partial(_unchanged_trial, read, ref, max_missing))
                for ref in read.unchanged)]
    sources = {ref.key: str(ref.path.resolve()) for ref, _ in builds}
    loads.look_up(sources.values())
    outcomes = loads.load_many(
        (ref.key, partial(build, known or ""),
         None if known is None else (sources[ref.key], known))
        for ref, build in builds for known in [read.trial_fingerprints.get(ref.key)])
    failed = [err for err in outcomes.values() if isinstance(err, InputError)]
    loaded = sorted((name, loads.ids[name]) for name, outcome in outcomes.items()
                    if not isinstance(outcome, InputError))
    if failed:
        return block_failure(key, failed, len(builds), len(loaded))
    return {"trials": pd.DataFrame(loaded, columns=["job", "trial_id"])}


@dataclass
class BlockOutcomes:
    """What the step keeps of each block it read, once the block is stored: its schema
    warnings and jobs read, and its trial load (when the trials are selected); the
    measurements themselves are dropped, so a run holds one block's at a time."""

    warnings: dict[str, list[SchemaWarning]] = field(default_factory=dict)
    jobs_read: dict[str, int] = field(default_factory=dict)
    #: Per block, its jobs not read (unchanged) and the schema violations each of them had
    #: when it was read (those with any).
    unchanged: dict[str, int] = field(default_factory=dict)
    unchanged_violations: dict[str, dict[str, int]] = field(default_factory=dict)
    trials: dict[str, TrialOutcome] = field(default_factory=dict)
    #: The blocks written in the run, with their ``files`` digest (marked landed once their
    #: jobs are), and those of which nothing changed (not written, not landed again).
    written: dict[str, str] = field(default_factory=dict)
    untouched: set[str] = field(default_factory=set)


def read_blocks(context: dg.AssetExecutionContext, source: ClusterCockpitArchive,
                tables: Tables, loads: TrialLoads | None, outcomes: BlockOutcomes
                ) -> PartitionBatch:
    """Read and store every block of the run, and load its trials through ``loads`` if
    given."""
    shown: dict[str, dict[str, Any]] = {}

    read_of: dict[str, dict[str, Any]] = {}

    def read_one(key: str) -> Stored:
        block = block_read(context, source, tables, key)
        read, done = block.read, store_block(tables, block)
        frames, records = done.frames, done.records
        if done.written:
            outcomes.written[key] = done.digest
        else:
            outcomes.untouched.add(key)
        outcomes.warnings[key], outcomes.jobs_read[key] = read.warnings, len(read.measured)
        outcomes.unchanged[key] = len(read.unchanged)
        outcomes.unchanged_violations[key] = unchanged_violations(read, frames)
        read_of[key] = read_metadata(read, done.written)
        if loads is not None:
            outcomes.trials[key] = load_block_trials(loads, key, read, source.max_missing)
        if read.failed:
            raise block_failure(key, list(read.failed.values()), read.listed, read.stored)
        shown[key] = block_metadata(frames) | read_of[key]
        return Stored.of({name: frames[name] for name in FRAMES}, records)

    batch = PartitionBatch.run(context, read_one, FRAME_SCHEMAS.get)
    batch.check_metadata |= read_of
    for key, metadata in shown.items():
        batch.stored[key] |= metadata
    return batch


def conformance_results(context: dg.AssetExecutionContext, outcomes: BlockOutcomes
                        ) -> Iterator[Any]:
    """The WARN check ``schema_conformance`` of every block read in the run."""
    if CONFORMANCE_SPEC.key not in context.selected_asset_check_keys:
        return
    yield dg.Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(
        CONFORMANCE_SPEC.key))
    for key, warnings in outcomes.warnings.items():
        read = sorted({warning.job for warning in warnings})
        kept = outcomes.unchanged_violations.get(key, {})
        said = [(f"{len(warnings)} schema violation(s) in {len(read)} of "
                 f"{outcomes.jobs_read[key]} job(s) read")] if warnings else []
        if kept:
            said.append(f"{sum(kept.values())} in {len(kept)} of the "
                        f"{outcomes.unchanged[key]} unchanged job(s) not read again, when "
                        "they were read")
        yield dg.AssetCheckEvaluation(
            asset_key=cc_block_tables.key, check_name=CONFORMANCE_CHECK, partition=key,
            passed=not said, severity=dg.AssetCheckSeverity.WARN,
            description=f"{key}: {'; '.join(said)}" if said else f"{key}: passed",
            metadata={"partition": key, "jobs": dg.MetadataValue.json(sorted({*read, *kept})),
                      "violations": dg.MetadataValue.json(
                          [str(warning) for warning in warnings[:MAX_LISTED]]),
                      "jobs_read": outcomes.jobs_read[key],
                      "jobs_unchanged": outcomes.unchanged.get(key, 0),
                      "unchanged_violations": dg.MetadataValue.json(
                          dict(sorted(kept.items())[:MAX_LISTED]))})


def trial_results(context: dg.AssetExecutionContext, source: ClusterCockpitArchive,
                  tables: Tables, loads: TrialLoads, outcomes: BlockOutcomes,
                  skip: dict[str, str]) -> PartitionBatch:
    """The trial load of every block of the run: as loaded while it was read, else (the
    block tables not selected) read and loaded now (:func:`block_read`: the jobs changed
    since the block was stored, every job's trial kept or loaded; the jobs read not
    validated against the JSON schemas, nothing stored); blocks in ``skip`` load nothing."""

    def outcome(key: str) -> dict[str, pd.DataFrame]:
        loaded = outcomes.trials.get(key) or load_block_trials(
            loads, key, block_read(context, source, tables, key, for_trials=True).read,
            source.max_missing)
        if isinstance(loaded, InputError):
            raise loaded
        return loaded

    return PartitionBatch.run(context, outcome, lambda name: None, skip=skip)


def stored_block_keys(context: dg.AssetExecutionContext, tables: Tables) -> list[str]:
    """The registered blocks with stored frames, in table order (a block whose latest read
    failed keeps what was stored)."""
    registered = set(context.instance.get_dynamic_partitions(cc_job_blocks.name))
    return [key for key in tables.partition_keys(_frame_table("jobs")) if key in registered]


def energy_per_day(table: pd.DataFrame) -> pd.DataFrame:
    """Integrated energy (kWh), jobs and node-hours per UTC start day (rows) and cluster."""
    per_day = table.groupby(["day", "cluster"], as_index=False)[
        ["jobs", "node_hours", "energy_j"]].sum()
    per_day["energy_kwh"] = per_day["energy_j"] / J_PER_KWH
    return per_day.drop(columns="energy_j")


def energy_plot(per_day: pd.DataFrame) -> str:
    """Markdown with the PNG of energy per day, one stacked bar part per cluster."""
    wide = per_day.pivot(index="day", columns="cluster", values="energy_kwh").fillna(0.0)
    days = [f"{day:%Y-%m-%d}" for day in wide.index]
    series = [Series(str(cluster), [], wide[cluster].tolist()) for cluster in wide.columns]
    png = bars_png(days, series, title="energy per day and cluster (jobs by start day)",
                   y_label="energy (kWh)")
    return markdown_image(png, "energy per day and cluster")


def _records(frame: pd.DataFrame, limit: int = 200) -> dg.TableMetadataValue:
    """The last ``limit`` rows of ``frame`` as an inline table (days as text)."""
    shown = frame.tail(limit)
    columns = [dg.TableColumn(str(name), "string" if dtype == object or "datetime" in str(dtype)
                              else "float") for name, dtype in shown.dtypes.items()]
    records = [dg.TableRecord({name: (f"{value:%Y-%m-%d}" if isinstance(value, pd.Timestamp)
                                      else value.item() if hasattr(value, "item") else value)
                               for name, value in row.items()})
               for row in shown.to_dict("records")]
    return dg.MetadataValue.table(records, dg.TableSchema(columns=columns))


def block_spans(jobs: pd.DataFrame) -> pd.DataFrame:
    """Per block (``cluster/<jobId // 1000>``): jobs and the first and last start (UTC)."""
    block = jobs["cluster"] + "/" + (jobs["job_id"] // 1000).astype(str)
    return jobs.assign(block=block).groupby("block", as_index=False).agg(
        jobs=("job", "size"), first_start=("start_time_utc", "min"),
        last_start=("start_time_utc", "max")).assign(
        first_start=lambda f: f["first_start"].dt.strftime("%Y-%m-%d %H:%M"),
        last_start=lambda f: f["last_start"].dt.strftime("%Y-%m-%d %H:%M"))


def _block_rows(tables: Tables, keys: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The stored cc_jobs and job energy rows of blocks ``keys``."""
    return (tables.read_partitions(_frame_table("jobs"), keys),
            tables.read_partitions(_frame_table("job_energy"), keys))


def _written(written: Written, entries: str) -> dict[str, Any]:
    return {f"{entries}_written": dg.MetadataValue.int(written.entities),
            f"{entries}_removed": dg.MetadataValue.int(written.removed),
            "rows_written": dg.MetadataValue.int(written.rows)}


def whole_tables(context: dg.AssetExecutionContext, tables: Tables, selected: set[dg.AssetKey],
                 every: list[str] | None, completed: list[str],
                 outcomes: BlockOutcomes) -> Iterator[dg.MaterializeResult]:
    """Keep the tables over every block per entry (``joulehouse.clustercockpit.tables``): a
    run over blocks writes its stored blocks' jobs and the days they touch; a run without
    partitions, or the first run over a cc_rollup written before it was kept
    (``kept_tables.is_kept``), brings the tables in line with every stored block, writing
    what differs. cc_jobs, cc_job_energy and cc_rollup are written together whichever of
    them is selected (the rollup's days from its groups' kept sums, which a landing adds its
    jobs to and takes its replaced ones from: joulehouse/clustercockpit/tables.py); the facts per
    entry (``assets/facts.py``). Figures named ``run_*`` are of the blocks the run landed
    (every stored block, in a rebuild), not of the whole table. ``every``: every stored
    block, in a rebuild;
    ``completed``: blocks whose write a crash interrupted and this step completed, landed
    (tables and facts) with the run's own if still registered. ``outcomes``: the run's
    blocks not written (nothing changed: not landed again) and those written, marked
    landed (:data:`LANDED_TABLE`) once their jobs and facts are. A rebuild drops the marks
    of the blocks not in ``every`` first: their rows leave the tables."""
    if every is not None:
        # a block the rebuild drops (deleted from Dagster, or moved: deleted, then
        # registered again) is landed again by its next run, even with nothing changed
        kept = set(every)
        unmark_landed(tables, [key for key in tables.partition_keys(LANDED_TABLE)
                               if key not in kept])
        landed = kept_tables.rebuild(tables, *_block_rows(tables, every))
        blocks = every
    else:
        registered = set(context.instance.get_dynamic_partitions(cc_job_blocks.name))
        blocks = [key for key in dict.fromkeys([*context.partition_keys, *completed])
                  if key in registered and tables.has_partition(_frame_table("jobs"), key)
                  and (key not in outcomes.untouched or key in completed)]
        if not blocks and outcomes.untouched:
            context.log.info(f"{len(outcomes.untouched)} block(s) unchanged since they were "
                             "stored and landed: the tables over the blocks not written")
            return
        landed = kept_tables.land(tables, blocks, partial(_block_rows, tables))
    jobs = landed.landed_jobs
    summary = {"run_blocks": dg.MetadataValue.int(len(blocks)),
               "run_jobs": dg.MetadataValue.int(len(jobs)),
               "run_start_time_span": dg.MetadataValue.text(_span(jobs))}
    if cc_jobs.key in selected:
        yield dg.MaterializeResult(asset_key=cc_jobs.key, metadata={
            **table_metadata(jobs, schemas.CC_JOBS_SCHEMA), **summary,
            **_written(landed.jobs, "jobs"),
            "dagster/row_count": dg.MetadataValue.int(kept_tables.JOBS.count(tables)),
            "run_node_hours": dg.MetadataValue.float(float(jobs["node_hours"].sum())),
            "run_blocks_span": _records(block_spans(jobs))})
    if cc_job_energy.key in selected:
        yield dg.MaterializeResult(asset_key=cc_job_energy.key, metadata={
            **table_metadata(landed.landed_energy, schemas.JOB_ENERGY_SCHEMA), **summary,
            **_written(landed.job_energy, "jobs"),
            "run_energy_kwh": dg.MetadataValue.float(
                float(landed.landed_energy["energy_j"].sum()) / J_PER_KWH),
            "dagster/row_count": dg.MetadataValue.int(kept_tables.JOB_ENERGY.count(tables))})
    if cc_rollup.key in selected:
        per_day = energy_per_day(landed.days)
        yield dg.MaterializeResult(asset_key=cc_rollup.key, metadata={
            **table_metadata(landed.days, schemas.ROLLUP_SCHEMA), **summary,
            **_written(landed.rollup, "days"),
            "dagster/row_count": dg.MetadataValue.int(kept_tables.ROLLUP.count(tables)),
            "energy_per_day": _records(per_day),
            **(plot_metadata(context, cc_rollup.key, "energy_per_day_plot",
                             partial(energy_plot, per_day), carry=False)
               if len(per_day) else {})})
    if cc_energy_facts.key in selected:
        yield facts(context, tables, summary, blocks)
        mark_landed(tables, {key: digest for key, digest in outcomes.written.items()
                             if key in blocks})


def facts(context: dg.AssetExecutionContext, tables: Tables, summary: dict[str, Any],
          blocks: list[str] | None) -> dg.MaterializeResult:
    """Write the ClusterCockpit rows of energy_facts per entry (``assets/facts.py``): in a
    run over blocks, the landed ``blocks``' (the run's and those whose interrupted write it
    completed, still registered; every stored block in a rebuild) from their stored job
    energy; in a run without partitions, every stored block's."""
    job_energy = _frame_table("job_energy")

    def facts_of(keys: list[str]) -> pd.DataFrame:
        return energy_facts_rows(tables.read_partitions(job_energy, keys))

    owned = OwnedFacts(FACTS_OWNERSHIP, job_energy, facts_of)
    return write_facts(context, tables, cc_energy_facts.key, FACTS_SOURCE,
                       lambda: facts_of(stored_block_keys(context, tables)), owned=owned,
                       metadata=summary, owners=blocks)


with backfills(partitions_per_run=BLOCKS_PER_RUN) as blocks_per_run:
    @dg.multi_asset(
        retry_policy=STEP_RETRY,
        name="cc_pipeline",
        specs=[cc_block_tables, cc_job_trials, *CC_TABLES],
        check_specs=[READ_SPEC, CONFORMANCE_SPEC, LOADS_SPEC],
        can_subset=True,
        backfill_policy=blocks_per_run,
        pool=tables_pool("clustercockpit"),
        description="The ClusterCockpit pipeline in one step; see assets/clustercockpit.py.",
    )
    def cc_pipeline(context: dg.AssetExecutionContext, cc_archive: ClusterCockpitArchive,
                    warehouse: Warehouse, taudb: TaudbResource) -> Iterator:
        selected = context.selected_asset_keys
        tables = warehouse.tables()
        completed = finish_pending(tables, BLOCK_JOURNAL)
        unmark_landed(tables, completed)  # a write staged by other code or run: land it again
        for key in completed:
            context.log.warning(f"{key}: the block's interrupted write completed")
        failed: dict[str, str] = {}
        outcomes = BlockOutcomes()
        with ExitStack() as stack:
            loads = (TrialLoads.into(stack.enter_context(taudb.open()))
                     if cc_job_trials.key in selected else None)
            if cc_block_tables.key in selected:
                blocks = read_blocks(context, cc_archive, tables, loads, outcomes)
                yield from blocks.results(context, READ_SPEC)
                yield from conformance_results(context, outcomes)
                failed |= blocks.errors()
            if loads is not None:
                skip = {key: "its block could not be read in this run" for key in failed
                        if key not in outcomes.jobs_read}
                trials = trial_results(context, cc_archive, tables, loads, outcomes, skip)
                yield from trials.results(context, LOADS_SPEC)
                failed |= {key: why for key, why in trials.errors().items()
                           if key not in failed}
        if selected & {spec.key for spec in CC_TABLES}:
            every = (stored_block_keys(context, tables) if run_partitions(context) is None
                     or not kept_tables.is_kept(tables) else None)
            if every == [] and not failed:
                raise verdict("no ClusterCockpit block stored yet: materialize "
                              "cc_block_tables")
            if every != []:
                yield from whole_tables(context, tables, selected, every, completed,
                                        outcomes)
        if failed:
            raise failure(len(context.partition_keys), failed)


CC_ASSETS = [cc_job_files, cc_pipeline]
