"""One sensor per GPU data root: new or changed repetitions -> partitions -> one run.

Each tick scans the root incrementally (``joulehouse.gpu.scan``; its state is
the sensor cursor), registers new repetitions as ``gpu_repetitions``
partitions, reports each ready repetition's raw files as a materialization
of ``gpu_repetition_files`` (written outside Dagster; the data version is the
files' fingerprint) and asks for ONE run of ``gpu_energy_job`` over the ready
repetitions. A materialization, not an observation: Dagster's UI counts only
materializations as a partition's data, so observed files read "0% filled"
(see docs/ARCHITECTURE.md). A tick reports as many repetitions as fill its
time budget at the pace the last full ticks measured (the tick and the
daemon's creation of its run, 2 planned events a repetition), at most
``max_repetitions_per_tick`` (``sensors/tick_budget.py``); the rest are
reported by the next ticks, oldest first, so the first ticks over a large
tree register it as fast as the instance's storage allows, each bounded. A
large hand-out is registered and its events stored by the tick itself, in
one call and one batch (``tick_budget.hand_out``). The run
covers exactly the ready repetitions: new ones are appended to the
partition set and changed ones moved to its end (``sensors/partition_runs.py``).

A repetition whose validated frames FAILED (its partition status) is
fingerprinted again at every tick, whatever the size of the tree, and
compared with the fingerprint reported when it was handed out (the data
version of ``gpu_repetition_files``): a fix in place is asked for one tick
after its quiet period, in the same one run as the rest. Repetitions that
did not fail are found rewritten in place by the rolling rescan
(``full_rescan_s``).

The repetitions of a run that was CANCELED (Dagster marks none of them
FAILED) are asked for again, once, when no run over them is in flight
(``partition_runs.cancelled_hand_outs``: each materialization of the files
names the run key asked for; a cancelled retry, or a run tagged
``joulehouse/no_retry=true``, is not asked for again).

Run keys carry a digest of the keys and fingerprints of the run, so a
fixed repetition (new fingerprint) is asked for again. Dagster remembers a
run key forever, failed runs included: re-execute a run that failed for a
reason outside the data from the UI.

The sensors start STOPPED: turn one on in the UI (Automation) once its data
root is configured, so that loading the code never starts work on its own.
"""


from collections.abc import Sequence

import dagster as dg

from assets.gpu import gpu_repetition_files, gpu_repetitions, gpu_validated_frames
from joulehouse.gpu.scan import ScanState, scan
from resources import DataRoot, GpuBenchmarkSource
from sensors.partition_runs import (
    DATA_VERSION_TAG,
    RUN_KEY_METADATA,
    cancelled_hand_outs,
    files_landed,
    queued_reason,
    queued_run,
    ready_run_request,
    retry_request,
)
from sensors.settings import sensor_interval_s
from sensors.tick_budget import Tick

JOB_NAME = "gpu_energy_job"


def failed_repetitions(instance: dg.DagsterInstance, existing: Sequence[str], root: DataRoot
                       ) -> dict[str, str]:
    """The repetitions of ``root`` whose validated frames failed, by key relative to the
    root, with the fingerprint reported when they were handed out."""
    prefix = f"{root.key_prefix}/"
    keys = [key for key in existing if key.startswith(prefix)]
    status = instance.get_status_by_partition(gpu_validated_frames.key, keys, gpu_repetitions)
    failed = {}
    for key, state in (status or {}).items():
        if state != dg.AssetPartitionStatus.FAILED:
            continue
        record = instance.get_latest_data_version_record(
            gpu_repetition_files.key, is_source=False, partition_key=key)
        reported = record and record.asset_materialization and record.asset_materialization.tags.get(
            DATA_VERSION_TAG)
        if reported:
            failed[key.removeprefix(prefix)] = reported
    return failed


def sensor_name(root_name: str) -> str:
    """A valid sensor name for a data root name."""
    safe = "".join(c if c.isalnum() else "_" for c in root_name)
    return f"gpu_repetitions_{safe}"


def evaluate(context: dg.SensorEvaluationContext, source: GpuBenchmarkSource, root: DataRoot
             ) -> dg.SensorResult:
    """One tick for ``root``."""
    tick = Tick.begin(context.cursor, source.max_repetitions_per_tick)
    if (waiting := queued_run(context.instance, JOB_NAME, context.sensor_name)):
        return tick.skip(tick.own, queued_reason(JOB_NAME, waiting))
    existing = context.instance.get_dynamic_partitions(gpu_repetitions.name)
    failed = failed_repetitions(context.instance, existing, root)
    prefix = f"{root.key_prefix}/"
    cancelled = {key: event for key, event in cancelled_hand_outs(
        context.instance, gpu_repetition_files.key, gpu_validated_frames.key,
        {prefix + key for key in failed}, existing).items() if key.startswith(prefix)}
    result = scan(root.path, ScanState.from_json(tick.own),
                  quiet_s=source.quiet_period_s, full_rescan_s=source.full_rescan_s,
                  max_repetitions=tick.cap, recheck=failed)
    for error in result.errors:
        context.log.warning(str(error))
    cut = bool(result.deferred or result.unlisted)
    remaining = (f"{result.pending - result.deferred} waiting for experiment_end or the "
                 f"{source.quiet_period_s:g} s quiet period ({result.incomplete} quiet without "
                 "experiment_end, never ingested until it has one: a killed collector?), "
                 f"{result.deferred} ready but left "
                 f"for the next ticks by this tick's cap of {tick.cap}, "
                 f"{result.unlisted} run folder(s) still to list"
                 + "".join(f"; skipped: {error}" for error in result.errors[:3]))
    if not result.ready and not cancelled:
        return tick.skip(result.state.to_json(),
                         f"nothing new or changed and ready; {remaining}")
    fingerprints = {key: event.tags[DATA_VERSION_TAG] for key, event in cancelled.items()}
    fingerprints |= {source.partition_key(root, r.ref): r.fingerprint for r in result.ready}
    run_key_prefix, retry_tags = retry_request(root.key_prefix, cancelled)
    ready = ready_run_request(
        context.instance, context.instance.get_dynamic_partitions(gpu_repetitions.name),
        gpu_repetitions, fingerprints, job_name=JOB_NAME, run_key_prefix=run_key_prefix,
        tags={"joulehouse/data_root": root.key_prefix, **retry_tags})
    if ready is None:
        return tick.wait(f"{len(fingerprints)} ready, asked for once the runs in flight end "
                         "(registered partitions are not reordered under a queued run)")
    run_request, additions, new = ready
    return tick.ask(context, run_request, additions, files_landed(
        gpu_repetition_files.key, fingerprints,
        {key: {RUN_KEY_METADATA: run_request.run_key} for key in fingerprints}),
        result.state.to_json(), handed_out=len(fingerprints), cut=cut,
        told=f"{len(fingerprints)} ready ({new} new), one run; {remaining}")


def gpu_repetition_sensor(root_name: str) -> dg.SensorDefinition:
    """The sensor of the data root named ``root_name`` in the ``gpu_source`` resource."""

    @dg.sensor(
        name=sensor_name(root_name),
        job_name=JOB_NAME,
        minimum_interval_seconds=sensor_interval_s(),
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=(f"Registers complete, quiet repetitions under data root {root_name!r} "
                     "as partitions and asks for one run covering them."),
    )
    def _sensor(context: dg.SensorEvaluationContext, gpu_source: GpuBenchmarkSource):
        return evaluate(context, gpu_source, gpu_source.roots_by_name()[root_name])

    return _sensor


def gpu_repetition_sensors(source: GpuBenchmarkSource) -> list[dg.SensorDefinition]:
    """One sensor per data root of ``source``; raises when two roots' sensor names clash."""
    names = {}
    for root_name in source.roots_by_name():
        clash = names.setdefault(sensor_name(root_name), root_name)
        if clash != root_name:
            raise ValueError(f"data roots {clash!r} and {root_name!r} give the same sensor name "
                             f"{sensor_name(root_name)!r}; set `name` on one of them")
    return [gpu_repetition_sensor(root_name) for root_name in source.roots_by_name()]
