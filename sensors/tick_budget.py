"""How much one sensor tick hands out, and how a large hand-out reaches the instance.

Measured (``benchmarks/README.md``, "First registration of every source"):
what a tick hands out costs mostly in the Dagster instance's storage, per
partition, and the daemon applies a ``SensorResult`` one piece at a time: it
asks ``has_dynamic_partition`` for every key to add (about 3 ms a key on
SQLite, 13 ms on PostgreSQL) and stores every asset event alone (12-22 ms on
SQLite, 27-30 ms on PostgreSQL), while the storages take a whole list of keys
in one statement (0.1 ms a key) and the instance's storage a whole list of
events in one (``store_event_batch``, ``resources/instance_storage.py``: about
0.5 ms an event on SQLite, 0.2-0.4 ms on PostgreSQL).

* :class:`Pace`: a tick's cap follows the seconds one hand-out cost at the
  last ticks that the cap cut, so that a tick fills its time budget
  (:func:`sensors.settings.sensor_tick_budget_s`, default 20 s, far from the
  daemon's 60 s evaluation timeout) whatever the storage and the load. The
  cost counts the tick's own work and the daemon's after it: creating the
  run stores one planned event per partition and asset (one batch with the
  instance's storage; one by one, 10-20 ms each, with Dagster's own), which a
  tick cannot time but the next one sees (the time since the last began, past
  the interval). The
  whole cycle, the tick and the daemon's work after it, fills three budgets
  (60 s), longer than the interval, so that a registration never waits
  between ticks. The first registration of a large tree so goes as fast as
  the storage allows, each tick bounded; a steady tick (nothing cut) keeps
  the pace it had.
  The pace is kept in the cursor (:func:`paced`, :func:`unpaced`), around
  the sensor's own; :class:`Tick` is the sequence of a tick (begin, cap,
  hand out, pace, cursor) the pacing sensors share.
* :func:`hand_out`: a tick handing out more than :data:`BULK_AT` partitions
  registers them and stores their events itself, in one call and one batch,
  and returns neither to the daemon; a smaller one returns both in its
  result, so that the tick's history in the UI lists them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import dagster as dg
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.events.log import EventLogEntry
from dagster._core.instance.utils import RUNLESS_JOB_NAME, RUNLESS_RUN_ID

from sensors.settings import sensor_interval_s, sensor_tick_budget_s

BULK_AT = 100  # a tick handing out more partitions than this writes them itself
FIRST_CAP = 500  # the cap of a tick when no pace was measured yet (the old fixed cap)
CYCLE_BUDGETS = 3  # the tick and the daemon's work after it: at most 3 budgets (60 s)
PAUSE_S = 600.0  # a gap between two ticks longer than this is a pause, not the daemon's work


@dataclass(frozen=True)
class Pace:
    """What one hand-out cost, in seconds: ``tick_s`` in the tick (scan, registration,
    event, share of the tick's fixed work; None: not measured yet) and ``after_s`` in
    the daemon after it (the run created); ``started`` (``time.time()``), ``seconds``
    and ``handed_out`` of the last tick the cap cut (None: the last was not cut);
    ``fixed_s``: what its tick spent whatever it handed out (a landing sensor's listing
    of every entry), left out of ``tick_s`` and off the budget."""

    tick_s: float | None = None
    after_s: float = 0.0
    started: float | None = None
    seconds: float = 0.0
    handed_out: int = 0
    fixed_s: float = 0.0

    def cap(self, budget_s: float, maximum: int) -> int:
        """How many to hand out this tick: as many as fill ``budget_s`` of the tick itself
        (less its fixed work, but a quarter of it at least) and :data:`CYCLE_BUDGETS` times
        it of the tick with the daemon's work after it, at this pace (at least 1), at most
        ``maximum``; :data:`FIRST_CAP` while unmeasured."""
        if self.tick_s is None:
            return min(FIRST_CAP, maximum)
        left = max(budget_s - self.fixed_s, budget_s / 4)  # a quarter at least
        fill = min(left / self.tick_s,
                   (CYCLE_BUDGETS * budget_s - self.fixed_s) / (self.tick_s + self.after_s))
        return max(1, min(maximum, int(fill)))

    def seen_at(self, now: float, interval_s: float) -> Pace:
        """The pace once the next tick began at ``now``: when the time since the last cut
        tick began passed the interval (plus the daemon's 5 s loop), the daemon worked
        after that tick until now, and ``after_s`` is that time per hand-out; otherwise
        it waited out the interval, and ``after_s`` is kept, at most what fits in the
        interval. A gap over :data:`PAUSE_S` is a pause (the sensor stopped, the daemon
        down), not work: ``after_s`` is kept. Either way the last tick is seen
        (``started`` None)."""
        seen = replace(self, started=None)
        if self.started is None or now - self.started > PAUSE_S:
            return seen
        if now - self.started <= interval_s + 5:
            return replace(seen, after_s=min(self.after_s, (interval_s + 5) / self.handed_out))
        return replace(seen, after_s=max(0.0, now - self.started - self.seconds)
                       / self.handed_out)

    def after(self, started: float, handed_out: int, cut: bool, fixed_s: float = 0.0,
              now: float | None = None) -> Pace:
        """The pace after a tick that began at ``started`` and ends ``now`` (both
        ``time.time()``; default: now), spent ``fixed_s`` whatever it handed out, and
        handed out ``handed_out``: measured anew when the cap ``cut`` it (more was ready or
        left unlisted), else kept (a small tick's fixed work would overstate the pace)."""
        if not cut or not handed_out:
            return self
        seconds = (time.time() if now is None else now) - started
        return Pace(max((seconds - fixed_s) / handed_out, 1e-6), self.after_s, started,
                    seconds, handed_out, fixed_s)


@dataclass(frozen=True)
class Tick:
    """One tick of a sensor that paces its hand-outs, the sequence every such sensor
    follows: :meth:`begin` (the pace as of now and the tick's ``cap``), the sensor's own
    scan of at most ``cap``, then one of :meth:`skip` (nothing to hand out), :meth:`wait`
    (a hand-out put off to a later tick) or :meth:`ask` (the run asked for, the hand-out
    written, the pace measured).

    ``cursor``: the whole sensor cursor as the tick got it; ``own``: the sensor's own part
    of it (:func:`unpaced`); ``pace``: as of ``started`` (``time.time()`` at the start,
    :meth:`Pace.seen_at`); ``cap``: how many to hand out (:meth:`Pace.cap` with the
    sensors' time budget, :func:`sensors.settings.sensor_tick_budget_s`)."""

    cursor: str | None
    own: str | None
    pace: Pace
    started: float
    cap: int

    @classmethod
    def begin(cls, cursor: str | None, maximum: int) -> Tick:
        """The tick starting now with the sensor ``cursor``, handing out at most
        ``maximum`` (the source's setting)."""
        started = time.time()
        own, pace = unpaced(cursor)
        pace = pace.seen_at(started, sensor_interval_s())
        return cls(cursor, own, pace, started, pace.cap(sensor_tick_budget_s(), maximum))

    def skip(self, own: str, reason: str) -> dg.SensorResult:
        """Nothing to hand out: the sensor's own cursor ``own`` is kept with the pace as
        it was (a tick handing out nothing measures nothing)."""
        return dg.SensorResult(cursor=paced(own, self.pace), skip_reason=dg.SkipReason(reason))

    def wait(self, reason: str) -> dg.SensorResult:
        """A hand-out put off (e.g. registered partitions not reordered under a queued
        run): the cursor as the tick got it, so that the next tick finds it ready again."""
        return dg.SensorResult(cursor=self.cursor, skip_reason=dg.SkipReason(reason))

    def ask(self, context: dg.SensorEvaluationContext, run_request: dg.RunRequest,
            additions: Sequence[dg.AddDynamicPartitionsRequest],
            events: Sequence[dg.AssetMaterialization], own: str, *, handed_out: int,
            cut: bool, told: str, fixed_s: float = 0.0) -> dg.SensorResult:
        """ONE ``run_request`` with the partitions to register (``additions``) and the
        ``events`` reporting them, written by the tick itself when large
        (:func:`hand_out`), and the sensor's own cursor ``own`` with the pace after this
        tick (:meth:`Pace.after`: ``handed_out`` counted, measured anew when the cap
        ``cut`` it, ``fixed_s`` spent whatever was handed out); ``told`` (what is asked
        for) is logged once the hand-out is written."""
        additions, events = hand_out(context.instance, additions, events)
        context.log.info(told)
        return dg.SensorResult(
            run_requests=[run_request], dynamic_partitions_requests=additions,
            asset_events=events,
            cursor=paced(own, self.pace.after(self.started, handed_out, cut, fixed_s)))


def paced(cursor: str, pace: Pace) -> str:
    """The sensor cursor holding the sensor's own ``cursor`` and the ``pace``."""
    return json.dumps({"pace": asdict(pace), "state": cursor}, separators=(",", ":"))


def unpaced(cursor: str | None) -> tuple[str | None, Pace]:
    """The sensor's own cursor and the pace in a cursor :func:`paced` wrote; a cursor
    written before paces were kept is the sensor's own, unmeasured; fields a pace no
    longer has are dropped (the pace is only a measurement: the next cut tick renews it)."""
    try:
        payload = json.loads(cursor or "")
    except ValueError:
        return cursor, Pace()
    if isinstance(payload, dict) and set(payload) == {"pace", "state"}:
        known = {name: value for name, value in payload["pace"].items()
                 if name in Pace.__dataclass_fields__}
        return payload["state"], Pace(**known)
    return cursor, Pace()


def hand_out(instance: dg.DagsterInstance,
             additions: Sequence[dg.AddDynamicPartitionsRequest],
             events: Sequence[dg.AssetMaterialization],
             ) -> tuple[list[dg.AddDynamicPartitionsRequest], list[dg.AssetMaterialization]]:
    """The additions and events a tick's result carries: as given when at most
    :data:`BULK_AT` events, else none, once the keys are registered here (one statement
    per 10,000 keys; the storage skips those registered already) and the events stored
    in one batch (``store_event_batch``: one write with the instance's storage). Either way the
    events are stored before the run is asked for, as the daemon does."""
    if len(events) <= BULK_AT:
        return list(additions), list(events)
    for request in additions:
        keys = list(request.partition_keys)
        for start in range(0, len(keys), 10_000):
            instance.add_dynamic_partitions(request.partitions_def_name,
                                            keys[start:start + 10_000])
    now = time.time()
    instance.event_log_storage.store_event_batch([_runless(event, now) for event in events])
    return [], []


def _runless(event: dg.AssetMaterialization, timestamp: float) -> EventLogEntry:
    """The event log entry ``instance.report_runless_asset_event`` stores for ``event``."""
    return EventLogEntry(
        user_message="", level=20, job_name=RUNLESS_JOB_NAME, run_id=RUNLESS_RUN_ID,
        error_info=None, timestamp=timestamp, step_key=None,
        dagster_event=DagsterEvent(
            event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
            event_specific_data=StepMaterializationData(event), job_name=RUNLESS_JOB_NAME))
