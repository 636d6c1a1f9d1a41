"""One sensor per GPU data root: new or changed repetitions -> their days -> one run.

Each tick scans the root incrementally (``joulehouse.gpu.scan``; its state is
the sensor cursor), groups the ready repetitions by UTC day of their start
(``joulehouse.gpu.days``: the ``experiment_begin`` of their ``timestamps.csv``, else
their newest file's mtime), registers the new days as ``gpu_repetition_days``
partitions (key ``<root name>/<YYYY-MM-DD>``: 3,650 a decade per root, where one per
repetition passed Dagster's 100,000 within a year at a centre's rate), reports each
day's hand-out as a materialization of ``gpu_repetition_files`` (metadata
``repetitions``: key -> fingerprint; data version: their digest) and asks for ONE run
of ``gpu_energy_job`` covering exactly those days, its run config naming the
repetitions handed out in each (``assets.gpu.GpuHandOut``): the run processes those
alone (``sensors/blocks.BlockHandOuts.hand_out``, ``sensors/partition_runs.py``).
A materialization, not an observation: Dagster's UI counts only
materializations as a partition's data, so observed files read "0% filled"
(see docs/ARCHITECTURE.md). A tick hands out as many repetitions as fill its
time budget at the pace the last full ticks measured (the tick and the
daemon's creation of its run), at most ``max_repetitions_per_tick``
(``sensors/tick_budget.py``); the rest are handed out by the next ticks, oldest
first, each tick bounded. A large hand-out is registered and its events stored by the
tick itself, in one call and one batch (``tick_budget.hand_out``).

Every run over days records which repetitions of each day failed
(``assets/blocks.block_outcomes``). The repetitions a FAILED day's latest record names
are fingerprinted again at every tick, whatever the size of the tree, and compared with
the fingerprint the day's latest hand-out listed them with (one it does not list, found
by a whole-day run, matches none: handed out again once quiet, then compared as listed:
:func:`failed_repetitions`): a fix in place is asked for one tick
after its quiet period, alone, in the same one run as the rest. A day's next hand-out
lists again those of its repetitions its latest record names and that are still there,
and every repetition of its previous hand-out if that one's run ended without success
and without a record (``BlockHandOuts.unsettled``; nothing is handed out while the
sensor's own run is in flight: ``partition_runs.own_run_in_flight``), so the day stays
failed, and visible, until its bad repetitions are fixed; its good ones are not read again. Repetitions that did not fail
are found rewritten in place by the rolling rescan (``full_rescan_s``).

The repetitions of a run that was CANCELED (Dagster marks none of its days
FAILED) are asked for again, once, when no run over them is in flight
(``partition_runs.cancelled_hand_outs``: each materialization of the files
names the run key asked for; a cancelled retry, or a run tagged
``joulehouse/no_retry=true``, is not asked for again).

Run keys carry a digest of the days' repetitions and fingerprints, so a
fixed repetition (new fingerprint) is asked for again. Dagster remembers a
run key forever, failed runs included: re-execute a run that failed for a
reason outside the data from the UI.

On an upgrade from one partition per repetition (``gpu_repetitions``), the cursor
written then is not taken: every repetition present is handed out again, at the tick's
pace, into its day (docs/gpu.md, "Upgrading").

The sensors start STOPPED: turn one on in the UI (Automation) once its data
root is configured, so that loading the code never starts work on its own.
"""

from collections.abc import Collection

import dagster as dg

from assets.gpu import (
    GpuHandOut,
    gpu_repetition_days,
    gpu_repetition_energy,
    gpu_repetition_files,
    gpu_validated_frames,
)
from joulehouse.gpu.days import repetition_day_key
from joulehouse.gpu.layout import RepetitionRef, fingerprint, is_complete
from joulehouse.gpu.scan import ScanState, scan
from resources import DataRoot, GpuBenchmarkSource
from sensors.blocks import (
    BlockHandOuts,
    Entries,
    TickRecords,
    blocks_cursor,
    blocks_cursor_state,
    still_there_of,
)
from sensors.partition_runs import ask_for, wait_for_own_run
from sensors.settings import sensor_interval_s
from sensors.tick_budget import Tick

JOB_NAME = "gpu_energy_job"
#: The metadata of a ``gpu_repetition_files`` day listing the repetitions handed out.
REPETITIONS_METADATA = "repetitions"

#: The GPU repetitions' days: a hand-out lists its repetitions under "repetitions".
BLOCKS = BlockHandOuts(gpu_repetition_days, gpu_repetition_files.key,
                       (gpu_validated_frames.key, gpu_repetition_energy.key),
                       REPETITIONS_METADATA)


def scan_state(own: str | None) -> ScanState:
    """The scan state in the sensor's own cursor ``own``: a fresh one for a cursor written
    before the repetitions had days (one partition per repetition), so that every
    repetition is handed out again, once, into its day (``blocks.blocks_cursor_state``)."""
    scan_json = blocks_cursor_state(own, gpu_repetition_days.name, "scan")
    return ScanState() if scan_json is None else ScanState.from_json(scan_json)


def cursor_of(state: ScanState) -> str:
    """The sensor's own cursor holding ``state``, naming the partitions it hands out in."""
    return blocks_cursor(gpu_repetition_days.name, "scan", state.to_json())


#: The fingerprint a failed repetition is rechecked against when its day's latest hand-out
#: does not list it: none matches, so any state of it present is a change.
UNKNOWN_FINGERPRINT = ""


def failed_repetitions(records: TickRecords, failed: Collection[str], root: DataRoot
                       ) -> dict[str, str]:
    """The repetitions of ``root`` not known good in its ``failed`` days (its FAILED ones:
    :meth:`BlockHandOuts.unsettled`), by key relative to the root, with the
    fingerprint their day's latest hand-out listed them with: what the scan fingerprints
    again at every tick. A repetition named failed that the latest hand-out does not list
    (a whole-day run, from the UI or the weekly re-validation, found it; an earlier
    hand-out listed it) is rechecked against :data:`UNKNOWN_FINGERPRINT`: it is handed
    out again once quiet, whatever changed, and then rechecked as the latest hand-out
    lists it."""
    handed = BLOCKS.handed_out(records, failed)
    prefix = f"{root.key_prefix}/"
    return {key.removeprefix(prefix): handed.get(day, {}).get(key, UNKNOWN_FINGERPRINT)
            for day, keys in BLOCKS.unsettled(records, failed).items()
            for key in keys if key.startswith(prefix)}


def still_there(source: GpuBenchmarkSource, root: DataRoot, keys: Collection[str],
                day: str | None) -> Entries:
    """Each of repetitions ``keys`` still complete in ``root`` (and, given a ``day``, still
    of that day), with its fingerprint now (``blocks.still_there_of``)."""

    def complete(key: str) -> RepetitionRef | None:
        _, ref = source.resolve(key)
        return ref if is_complete(ref.path) else None

    return still_there_of(
        keys, day, complete,
        lambda ref: repetition_day_key(root.key_prefix, ref.path, root.timezone),
        lambda ref: fingerprint(ref.path), errors=(OSError, KeyError, ValueError))


def evaluate(context: dg.SensorEvaluationContext, source: GpuBenchmarkSource, root: DataRoot
             ) -> dg.SensorResult:
    """One tick for ``root``."""
    tick = Tick.begin(context.cursor, source.max_repetitions_per_tick)
    if (waiting := wait_for_own_run(context, tick, JOB_NAME)) is not None:
        return waiting
    registered = BLOCKS.registered(context.instance)
    prefix = f"{root.key_prefix}/"
    own = [day for day in registered if day.startswith(prefix)]
    failed = BLOCKS.failed_blocks(context.instance, own)  # once a tick
    records = BLOCKS.records(context.instance)  # each day's latest records, once a tick
    cancelled = {day: event for day, event in BLOCKS.cancelled(
        records, set(), registered).items() if day.startswith(prefix)}
    ready_when_complete = source.ready_when_complete_of(root)
    result = scan(root.path, scan_state(tick.own),
                  quiet_s=source.quiet_period_s, full_rescan_s=source.full_rescan_s,
                  max_repetitions=tick.cap,
                  recheck=failed_repetitions(records, failed, root),
                  ready_when_complete=ready_when_complete)
    for error in result.errors:
        context.log.warning(str(error))
    cut = bool(result.deferred or result.unasked or result.unlisted)
    waiting = ("experiment_end" if ready_when_complete
               else f"experiment_end or the {source.quiet_period_s:g} s quiet period")
    unasked = (f" (and {result.unasked} inside the quiet period, not asked for experiment_end)"
               if ready_when_complete else "")
    remaining = (f"{result.pending - result.deferred - result.unasked} waiting for {waiting} "
                 f"({result.incomplete} quiet without "
                 "experiment_end, never ingested until it has one: a killed collector?), "
                 f"{result.deferred} ready but left "
                 f"for the next ticks by this tick's cap of {tick.cap}{unasked}, "
                 f"{result.unlisted} run folder(s) still to list"
                 + "".join(f"; skipped: {error}" for error in result.errors[:3]))
    cursor = cursor_of(result.state)
    if not result.ready and not cancelled:
        return tick.skip(cursor, f"nothing new or changed and ready; {remaining}")
    fresh: dict[str, Entries] = {}
    for ready in result.ready:
        try:
            day = repetition_day_key(root.key_prefix, ready.ref.path, root.timezone)
        except OSError as err:  # gone since the scan: not handed out
            context.log.warning(f"{ready.ref.path}: gone since the scan, not handed out ({err})")
            continue
        fresh.setdefault(day, {})[source.partition_key(root, ready.ref)] = ready.fingerprint
    hand_out = BLOCKS.hand_out(
        records, fresh, cancelled,
        lambda keys, day: still_there(source, root, keys, day), own, root.key_prefix,
        GpuHandOut.run_config_of, failed)
    if not hand_out.fingerprints:
        return tick.skip(cursor, f"nothing new or changed and ready; {remaining}")
    days = f"{hand_out.entries} ready in {len(hand_out.fingerprints)} day(s)"
    return ask_for(context, tick, hand_out, registered, gpu_repetition_days, JOB_NAME,
                   gpu_repetition_files.key, cursor, what=days,
                   told=lambda new: f"{days} ({new} new), one run; {remaining}",
                   handed_out=hand_out.entries, cut=cut,
                   tags={"joulehouse/data_root": root.key_prefix})


def sensor_name(root_name: str) -> str:
    """A valid sensor name for a data root name."""
    safe = "".join(c if c.isalnum() else "_" for c in root_name)
    return f"gpu_repetitions_{safe}"


def gpu_repetition_sensor(root_name: str) -> dg.SensorDefinition:
    """The sensor of the data root named ``root_name`` in the ``gpu_source`` resource."""

    @dg.sensor(
        name=sensor_name(root_name),
        job_name=JOB_NAME,
        minimum_interval_seconds=sensor_interval_s(),
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=(f"Registers the days of complete, quiet repetitions under data root "
                     f"{root_name!r} as partitions and asks for one run over the "
                     "repetitions handed out."),
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
