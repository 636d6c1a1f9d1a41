"""From ready partitions to what a sensor returns: dynamic-partition requests and ONE run.

Shared by the sensors over dynamic partitions. A Dagster run covers one
contiguous range of a partition set, so the ready keys are made contiguous
at its end: new keys are appended, and ready keys already registered (a
repetition or profile set fixed or rewritten in place) are deleted and added
again, which moves them to the end (Dagster keeps their materializations,
checks and events: those are stored by key, not by position). Dagster
refuses a sensor result that deletes and adds the same key, so the tick
deletes them from the instance itself and its result adds them back; should
the tick fail in between, its cursor is not kept and the next tick of a
landing sensor finds them ready again, unregistered, and adds them as new
(a GPU repetition found by the failed-partition recheck waits for the rolling
rescan: a known gap). Keys are moved only while no run over the partition set is
queued or in progress, whatever its job (the sensor's, a backfill's, a UI
materialization's ``__ASSET_JOB``), since such a run resolves its range to keys
only when it executes; a run is over the set when its partition tags name one of
its keys (runs over other sets, e.g. another source's stream, do not hold them). One run
then covers exactly the ready keys, however scattered they were, and the
tables are rebuilt once. The run key is ``<prefix>:<digest of the ready
(key, fingerprint) pairs>``, so changed content asks again.

The partitions of a CANCELED run are asked for again at most once
(:func:`cancelled_hand_outs`): the retry run carries the tag :data:`RETRY_OF_TAG`
(the cancelled run keys), and a cancelled retry is not asked for again, nor is a
cancelled run tagged :data:`NO_RETRY_TAG` ``=true`` (add it to the run to stop it for
good, e.g. ``instance.add_run_tags(run_id, {"joulehouse/no_retry": "true"})`` before or
after cancelling; a block's entries handed to it are not rechecked with the block's
next hand-out either, but for those a run recorded as failed: ``sensors/blocks.py``).
Such partitions wait for their files to change (a new fingerprint).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from joulehouse.digest import digest_pairs
from sensors.tick_budget import Tick

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
DATA_VERSION_TAG = "dagster/data_version"
RUN_KEY_TAG = "dagster/run_key"
RUN_KEY_METADATA = "run_key"  # of a files materialization: the run key its partition was asked with
RETRY_OF_TAG = "joulehouse/retry_of"  # of a run asking again for cancelled hand-outs: their run keys
NO_RETRY_TAG = "joulehouse/no_retry"  # "true" on a cancelled run: its hand-outs are not asked again


def files_landed(files: dg.AssetKey, fingerprints: dict[str, str],
                 metadata: Mapping[str, Mapping[str, Any]] | None = None
                 ) -> list[dg.AssetMaterialization]:
    """One materialization of the source asset ``files`` per ready partition (key ->
    fingerprint, its data version; ``metadata``: key -> its metadata, if any): the files
    were written outside Dagster, and Dagster's UI counts only materializations as a
    partition's data (observed partitions read "0% filled")."""
    return [dg.AssetMaterialization(files, partition=key, tags={DATA_VERSION_TAG: fingerprint},
                                    metadata=(metadata or {}).get(key))
            for key, fingerprint in fingerprints.items()]


#: A run in one of these states may still resolve its partition range to keys.
IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED,
             dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
             dg.DagsterRunStatus.CANCELING]


#: The tags by which a run names the partition(s) it covers: a range, or one key.
PARTITION_TAGS = (RANGE_START, RANGE_END, "dagster/partition")


def run_in_flight(instance: dg.DagsterInstance, keys: Collection[str]) -> str | None:
    """The id of a run over the partition set whose registered keys are ``keys`` that is
    queued or in progress, or None. A run is over the set when one of its partition tags
    (:data:`PARTITION_TAGS`) names one of ``keys``, whatever its job: the sensor's, a
    backfill's or a UI materialization's (``__ASSET_JOB``). Runs over other sets (another
    source's stream) do not hold the keys."""
    registered = set(keys)
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT)):
        if any(run.tags.get(tag) in registered for tag in PARTITION_TAGS):
            return run.run_id
    return None


SENSOR_NAME_TAG = "dagster/sensor_name"
#: A run the daemon made and has not queued after so long was never submitted (the
#: daemon died in between): it holds nothing back.
NOT_SUBMITTED_S = 300.0


def wait_for_own_run(context: dg.SensorEvaluationContext, tick: Tick, job_name: str
                     ) -> dg.SensorResult | None:
    """The tick's skip, keeping its cursor and naming the run, while a run of ``job_name``
    that this sensor asked for is in flight (:func:`own_run_in_flight`); else None."""
    running = own_run_in_flight(context.instance, job_name, context.sensor_name)
    if running is None:
        return None
    return tick.skip(tick.own, f"a run of {job_name} asked for by this sensor is in flight "
                               f"({running}): what is ready now is handed out in one run "
                               "once it has ended")


def own_run_in_flight(instance: dg.DagsterInstance, job_name: str, sensor_name: str
                      ) -> str | None:
    """The id of a run of ``job_name`` that sensor ``sensor_name`` asked for and that is
    queued or running (:data:`IN_FLIGHT`; NOT_STARTED only for less than
    NOT_SUBMITTED_S), or None.

    A sensor asks for no run while one of its own is in flight. Queued, a new run would
    only wait behind it (a source's runs go one at a time: the tag
    ``joulehouse/pipeline``), each run costing its start (a process, the code loaded:
    10-20 s) whatever it covers (the soak's queue grew without bound when every tick asked
    for one). Running, a new hand-out of a block it holds would have to list that run's
    entries again, not knowing yet which of them fail (``sensors/blocks.py``): while
    each tick found the run before running, each run re-read every entry of the day so
    far (a review's test: hand-outs of 6, 7, 8 repetitions for one new repetition a
    tick). The tick keeps its cursor, so what is ready meanwhile is handed out in one run
    at the first tick after the run has ended: a sensor has at most one run in flight,
    covering what landed while the one before ran; the price is up to a tick's interval
    between a run's end and the next one's request. A run whose process was killed is
    marked failed by the code server that launched it (or, under Kubernetes, by the
    daemon's run monitoring); one left STARTING because its launch failed while
    PostgreSQL was down holds the sensor until run monitoring's start timeout ends it
    (120 s in production: deploy/production/dagster.yaml); one left STARTED because its code server
    died with it holds the sensor until it is ended in the UI: the tick's message names it
    (deploy/dagster.yaml). Only the sensor's own runs count: the sensors of several GPU
    data roots share a job, and a backfill's runs do not hold a sensor back."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(job_name=job_name, statuses=IN_FLIGHT,
                              tags={SENSOR_NAME_TAG: sensor_name}), limit=20)
    now = time.time()
    for record in records:
        if (record.dagster_run.status != dg.DagsterRunStatus.NOT_STARTED
                or now - record.create_timestamp.timestamp() < NOT_SUBMITTED_S):
            return record.dagster_run.run_id
    return None


def ready_run_request(
    instance: dg.DagsterInstance,
    existing: Sequence[str],
    partitions_def: dg.DynamicPartitionsDefinition,
    fingerprints: dict[str, str],
    *,
    job_name: str,
    run_key_prefix: str,
    tags: dict[str, str],
    run_config: Mapping[str, Any] | None = None,
) -> tuple[dg.RunRequest, list[dg.AddDynamicPartitionsRequest], int] | None:
    """The run request (with ``run_config``, if any) covering the ready ``fingerprints``
    (key -> fingerprint, not empty),
    the request adding them at the end of the set ``existing`` (the registered keys in
    order; those not at its end yet are deleted from ``instance`` now), and how many keys
    are new.

    None when registered keys would have to move while a run over ``existing`` is queued
    or in progress (:func:`run_in_flight`): such a run resolves its range start and end to keys only
    when it executes, so moving a key it starts or ends with would change what it
    covers. The caller keeps its cursor and asks again at a later tick."""
    known = set(existing)
    moved = [key for key in existing if key in fingerprints]
    new_keys = [key for key in fingerprints if key not in known]
    keys = [*moved, *new_keys]
    added = new_keys
    if moved and list(existing[len(existing) - len(moved):]) != moved:  # not at the end yet
        if run_in_flight(instance, existing) is not None:
            return None
        for key in moved:
            instance.delete_dynamic_partition(partitions_def.name, key)
        added = keys
    requests = [partitions_def.build_add_request(added)] if added else []
    request = dg.RunRequest(
        run_key=f"{run_key_prefix}:{digest_pairs(fingerprints)}",
        job_name=job_name,
        run_config=run_config or {},
        tags={RANGE_START: keys[0], RANGE_END: keys[-1],
              "joulehouse/partitions": str(len(keys)), **tags},
    )
    return request, requests, len(new_keys)


#: Partition keys one query asks for (SQLite allows 32,766 variables in a statement).
KEYS_PER_QUERY = 10_000


def latest_storage_ids(instance: dg.DagsterInstance, asset: dg.AssetKey,
                       keys: Collection[str]) -> dict[str, int]:
    """The storage id of the latest materialization of each of the partitions ``keys`` of
    ``asset`` that has one, in queries of at most :data:`KEYS_PER_QUERY` keys (an empty set
    of keys would ask Dagster for every partition's)."""
    ordered = sorted(set(keys))
    found: dict[str, int] = {}
    for start in range(0, len(ordered), KEYS_PER_QUERY):
        found |= instance.get_latest_storage_id_by_partition(
            asset, dg.DagsterEventType.ASSET_MATERIALIZATION,
            partitions=set(ordered[start:start + KEYS_PER_QUERY]))
    return found


def cancelled_hand_outs(instance: dg.DagsterInstance, files: dg.AssetKey, built: dg.AssetKey,
                        failed: set[str], existing: Collection[str],
                        latest: Callable[[str], dg.EventLogRecord | None] | None = None
                        ) -> dict[str, dg.AssetMaterialization]:
    """The partitions handed out (their latest ``files`` materialization, whose metadata
    :data:`RUN_KEY_METADATA` names the run key asked for) whose run was CANCELED before
    ``built`` was materialized again, by key, with that materialization; none while a run
    over the registered keys ``existing`` is in flight (:func:`run_in_flight`). Dagster
    marks a partition FAILED only for runs that FAILED, so the partitions of a cancelled
    run must be asked for again by their sensor (``failed``: keys left out, rechecked
    instead; ``latest(key)``: the latest ``files`` materialization record of a key, when
    the tick reads it already, else read here). A run never launched (a test's tick) is
    no reason. Each cancel is undone
    once at most: a cancelled retry (tagged :data:`RETRY_OF_TAG`, :func:`retry_request`)
    and a run tagged :data:`NO_RETRY_TAG` ``=true`` are left be.

    Only keys registered in the current partitions (``existing``) count: the ``files``
    history of a partitions definition the source had before (one partition per entry,
    before days) is no hand-out of it, so a run cancelled then is no reason now (it made
    every later run a "retry", which is never retried). The two storage-id queries (the
    files and the built asset) ask for the registered keys alone, so that history costs
    nothing at a tick.
    """
    if not existing or run_in_flight(instance, existing) is not None:
        return {}
    built_at = latest_storage_ids(instance, built, existing)
    by_run: dict[str, dict[str, dg.AssetMaterialization]] = {}
    for key, handed_at in latest_storage_ids(instance, files, existing).items():
        if handed_at <= built_at.get(key, -1) or key in failed:
            continue
        record = latest(key) if latest is not None else (
            instance.get_latest_data_version_record(files, is_source=False, partition_key=key))
        event = record and record.asset_materialization
        if event and RUN_KEY_METADATA in event.metadata:
            by_run.setdefault(event.metadata[RUN_KEY_METADATA].value, {})[key] = event
    cancelled = {}
    for run_key, events in by_run.items():
        runs = instance.get_runs(filters=dg.RunsFilter(tags={RUN_KEY_TAG: run_key}), limit=1)
        if runs and _to_retry(runs[0]):
            cancelled |= events
    return cancelled


def left_be(run: dg.DagsterRun) -> bool:
    """Whether ``run`` was cancelled and tagged :data:`NO_RETRY_TAG` ``=true``: what it was
    handed is neither asked for again nor rechecked with a later hand-out."""
    return (run.status == dg.DagsterRunStatus.CANCELED
            and run.tags.get(NO_RETRY_TAG, "").lower() == "true")


def _to_retry(run: dg.DagsterRun) -> bool:
    """Whether the hand-outs of ``run`` are asked for again: it was cancelled, is no retry
    itself and was not tagged not to be (:func:`left_be`)."""
    return (run.status == dg.DagsterRunStatus.CANCELED and RETRY_OF_TAG not in run.tags
            and not left_be(run))


def retry_request(prefix: str, cancelled: Mapping[str, dg.AssetMaterialization]
                  ) -> tuple[str, dict[str, str]]:
    """The run key prefix and tags of a run asking again for the ``cancelled`` hand-outs
    (:func:`cancelled_hand_outs`; ``prefix`` and no tag when there are none): the daemon
    never runs a run key twice, so the prefix names the cancelled runs' keys, and the tag
    :data:`RETRY_OF_TAG` lists them, so that the retry is not retried again."""
    if not cancelled:
        return prefix, {}
    keys = {key: str(event.metadata[RUN_KEY_METADATA].value) for key, event in cancelled.items()}
    return (f"{prefix}-retry-{digest_pairs(keys)}",
            {RETRY_OF_TAG: " ".join(sorted(set(keys.values())))})


@dataclass(frozen=True)
class HandOut:
    """What one tick asks for: partition key -> fingerprint (ONE run covers exactly these
    partitions; its run key digests them), how many entries they hold, the run key's
    prefix, the run's config and tags, and each partition's files metadata
    (``metadata(run_key)``: key -> its metadata, given the run key asked with)."""

    fingerprints: dict[str, str]
    entries: int
    run_key_prefix: str
    run_config: Mapping[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metadata: Callable[[str], Mapping[str, Mapping[str, Any]]] = lambda run_key: {}


def ask_for(context: dg.SensorEvaluationContext, tick: Tick, hand_out: HandOut,
            registered: Sequence[str], partitions_def: dg.DynamicPartitionsDefinition,
            job_name: str, files: dg.AssetKey, cursor: str, *, what: str,
            told: Callable[[int], str], handed_out: int, cut: bool, fixed_s: float = 0.0,
            tags: Mapping[str, str] | None = None) -> dg.SensorResult:
    """What a tick returns for ``hand_out``: ONE run of ``job_name`` covering exactly its
    partitions (:func:`ready_run_request` over the ``registered`` keys of
    ``partitions_def``, with ``tags`` besides the hand-out's), each reported as a
    materialization of ``files`` (:func:`files_landed`) and the sensor's own ``cursor``
    (``Tick.ask``: ``handed_out``, ``cut`` and ``fixed_s`` for the pace; ``told(new
    partitions)`` logged); or, while registered partitions would move under a run in
    flight, a wait keeping the cursor (``what`` is ready: the tick's message)."""
    ready = ready_run_request(
        context.instance, registered, partitions_def, hand_out.fingerprints,
        job_name=job_name, run_key_prefix=hand_out.run_key_prefix,
        tags={**(tags or {}), **hand_out.tags}, run_config=hand_out.run_config)
    if ready is None:
        return tick.wait(f"{what} ready, asked for once the runs in flight end (registered "
                         "partitions are not reordered under a queued run)")
    run_request, additions, new = ready
    return tick.ask(context, run_request, additions,
                    files_landed(files, hand_out.fingerprints,
                                 hand_out.metadata(run_request.run_key)), cursor,
                    handed_out=handed_out, cut=cut, fixed_s=fixed_s, told=told(new))

