"""A sensor on ClusterCockpit job archives: ready jobs -> their job-id blocks -> ONE run.

Each tick scans every archive root incrementally
(``joulehouse.clustercockpit.scan``: one stat per block folder, a listing only
where something changed or the rolling rescan is due; its state is in the
cursor), takes the jobs that are new or changed, complete (their files parse
to the end) and quiet for ``quiet_period_s`` (not waited for with
``ready_when_complete``), as many over all roots as fill
the tick's time budget at the pace the last full ticks measured, at most
``max_jobs_per_tick`` (``sensors/tick_budget.py``; a large hand-out's blocks
are registered and their events stored by the tick itself), and turns them
into their blocks ``<cluster>/<jobId // 1000>`` (``cc_job_blocks``): it
registers the new blocks, reports each block with ready jobs as a
materialization of ``cc_job_files`` (data version: a digest of its ready jobs'
keys and fingerprints) and asks for ONE run of ``cc_job`` covering exactly
those blocks (``sensors/partition_runs.py``). The run reads only the jobs of a
block that are new or changed since it was stored (their fingerprints are stored
with the block: ``joulehouse/clustercockpit/blocks.py``), so a job landing in an old
block costs its own read and measurement, not its block's up to 1000 jobs'. Per
block, a run still takes one stat pass over every job folder of the block (on
Lustre or NFS these metadata operations per job dominate) and reads its stored
frames; when anything changed it rewrites the block's five frames, lands the
block's jobs in cc_jobs, cc_job_energy and energy_facts again, and the
accounting's derived tables see the block's metric_stats partition changed
(``assets/clustercockpit.py``). The weekly re-validation
(``weekly_revalidation_cc_job_blocks``, tagged ``joulehouse/reread=all``) reads
whole only the newest 12 (``BLOCKS_PER_RUN``) registered blocks, and only when
that schedule is switched on (it is stopped by default): older blocks are read
whole again only by an operator's run or backfill with that tag.

Jobs that failed are rechecked (the hand-outs' bookkeeping every block source shares:
``sensors/blocks.py``): each ``cc_job_files`` materialization lists
the block's jobs handed out, with their fingerprints (metadata ``jobs``; the
jobs of a failed block rechecked at that tick stay listed); the
jobs of a block whose ``cc_block_tables`` partition FAILED are fingerprinted
again every tick (the scan's ``recheck``), so a job fixed in place is asked
for one tick after its quiet period, in the same one run as the rest. The
blocks of a run that was CANCELED (Dagster marks no partition of it FAILED)
are asked for again, once, with the jobs their materialization lists, when no
run over them is in flight (``partition_runs.cancelled_hand_outs``: each
materialization names the run key asked for; a cancelled retry, or a run tagged
``joulehouse/no_retry=true``, is not asked for again). The cursor holds the scan states
and the pace (``sensors/tick_budget.py``).

The sensor starts STOPPED: turn it on in the UI once the archive is configured.
"""

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import dagster as dg

from assets.clustercockpit import cc_block_tables, cc_job_blocks, cc_job_files, cc_pipeline
from joulehouse.clustercockpit.scan import ScanState, scan
from joulehouse.digest import digest_pairs
from resources import ClusterCockpitArchive
from sensors.blocks import BlockHandOuts
from sensors.partition_runs import (
    files_landed,
    ready_run_request,
    retry_request,
    wait_for_own_run,
)
from sensors.settings import sensor_interval_s
from sensors.tick_budget import Tick

SENSOR_NAME = "cc_job_archive"
JOB_NAME = "cc_job"

cc_job = dg.define_asset_job(
    JOB_NAME, selection=dg.AssetSelection.assets(cc_pipeline),
    description=("The whole ClusterCockpit pipeline, from each job-id block's tables to the "
                 "tables over all blocks, energy_facts/clustercockpit and the jobs' TAUdb "
                 "trials."),
    tags={"joulehouse/pipeline": "clustercockpit"},
)

JOBS_METADATA = "jobs"

#: The job-id blocks: a hand-out lists its jobs (``cluster/jobId/startTime``) under "jobs".
BLOCKS = BlockHandOuts(cc_job_blocks, cc_job_files.key, (cc_block_tables.key,), JOBS_METADATA)


def evaluate(context: dg.SensorEvaluationContext, source: ClusterCockpitArchive
             ) -> dg.SensorResult:
    """One tick over every archive root of ``source``."""
    tick = Tick.begin(context.cursor, source.max_jobs_per_tick)
    if (waiting := wait_for_own_run(context, tick, JOB_NAME)) is not None:
        return waiting
    cursor = json.loads(tick.own or "{}")
    registered = BLOCKS.registered(context.instance)
    failed = BLOCKS.failed_blocks(context.instance, registered)
    records = BLOCKS.records(context.instance)  # each block's latest records, once a tick
    recheck = BLOCKS.handed_out(records, failed)  # block -> job key -> fingerprint
    cancelled = BLOCKS.cancelled(records, failed, registered)
    states: dict[str, str] = {}
    ready: dict[str, dict[str, str]] = {  # block -> job key -> fingerprint
        block: BLOCKS.listed(event) for block, event in cancelled.items()}
    pending = deferred = unasked = unlisted = incomplete = 0
    errors: list[str] = []
    budget = tick.cap
    for root in source.roots():
        if budget == 0:  # the cap is reached: this root's scan waits for the next tick
            states[str(root)] = cursor.get(str(root))
            continue
        result = scan(root, ScanState.from_json(cursor.get(str(root))),
                      quiet_s=source.quiet_period_s, max_jobs=budget,
                      full_rescan_s=source.full_rescan_s,
                      recheck=_of_root(_flat(recheck.values()), root),
                      incomplete_after_s=source.incomplete_after_s,
                      ready_when_complete=source.ready_when_complete)
        for error in result.errors:
            context.log.warning(str(error))
        errors += map(str, result.errors)
        for job in result.ready:
            ready.setdefault(job.ref.block, {})[job.ref.key] = job.fingerprint
        budget -= len(result.ready)
        pending, deferred = pending + result.pending, deferred + result.deferred
        unasked += result.unasked
        unlisted += result.unlisted
        incomplete += result.incomplete
        states[str(root)] = result.state.to_json()
    waiting = ("to be complete" if source.ready_when_complete
               else f"to be complete and quiet for {source.quiet_period_s:g} s")
    not_asked = (f" (and {unasked} inside the quiet period, not asked whether complete)"
                 if source.ready_when_complete else "")
    remaining = (f"{pending - deferred - unasked} job(s) waiting {waiting} "
                 f"({incomplete} quiet but incomplete: handed out "
                 f"once unchanged for {source.incomplete_after_s:g} s), {deferred} ready but "
                 f"left for the next ticks by this tick's cap of {tick.cap}{not_asked}, "
                 f"{unlisted} block folder(s) still to list"
                 + "".join(f"; skipped: {error}" for error in errors[:3]))
    if not ready:
        return tick.skip(json.dumps(states), f"no new or changed job ready; {remaining}")
    fingerprints = {block: digest_pairs(jobs) for block, jobs in sorted(ready.items())}
    run_key_prefix, retry_tags = retry_request("cc", cancelled)
    request = ready_run_request(
        context.instance, registered, cc_job_blocks, fingerprints,
        job_name=JOB_NAME, run_key_prefix=run_key_prefix, tags=retry_tags)
    count = sum(map(len, ready.values()))
    if request is None:
        return tick.wait(f"{count} job(s) in {len(ready)} block(s) ready, asked for once the "
                         "runs in flight end (registered partitions are not reordered under a "
                         "queued run)")
    run_request, additions, new = request
    return tick.ask(context, run_request, additions, files_landed(
        cc_job_files.key, fingerprints, BLOCKS.metadata(BLOCKS.listing(ready, recheck), run_request.run_key)),
        json.dumps(states), handed_out=count, cut=bool(deferred or unasked or unlisted),
        told=f"{count} job(s) ready in {len(ready)} block(s) ({new} new), one run; {remaining}")


def _flat(blocks: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """The jobs of ``blocks`` (job key -> fingerprint) in one mapping."""
    return {key: value for jobs in blocks for key, value in jobs.items()}


def _of_root(jobs: Mapping[str, str], root: Path) -> dict[str, str]:
    """The jobs (``cluster/jobId/startTime`` -> value) whose cluster folder is in ``root``."""
    return {key: value for key, value in jobs.items()
            if (root / key.split("/", 1)[0]).is_dir()}


@dg.sensor(
    name=SENSOR_NAME,
    job=cc_job,
    minimum_interval_seconds=sensor_interval_s(),
    default_status=dg.DefaultSensorStatus.STOPPED,
    description=("Registers the job-id blocks of ClusterCockpit archives holding new or "
                 "changed, complete and quiet jobs as partitions, and asks for one run of "
                 "the ClusterCockpit pipeline over them."),
)
def cc_archive_sensor(context: dg.SensorEvaluationContext, cc_archive: ClusterCockpitArchive):
    return evaluate(context, cc_archive)
