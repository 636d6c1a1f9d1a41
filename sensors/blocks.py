"""Entries handed out in blocks: one partition holding many entries, and what its sensor
remembers of them between ticks.

A block is a partition that holds many of a source's entries (ClusterCockpit: a job-id
block ``<cluster>/<jobId // 1000>`` of jobs; GEOPM, TAU profile sets and PowerAPI: a
landing folder's UTC day of reports, sets or report files; GPU: a data root's UTC day of
repetitions), so the partition count stays bounded while the entries grow without bound
(docs/ARCHITECTURE.md, "Partitions over a decade"). A sensor hands out the entries ready
in a block as one materialization of the source's files asset for that block
(``partition_runs.files_landed``) whose metadata lists them, entry key -> fingerprint
(:attr:`BlockHandOuts.entries_metadata`), with the run key asked for
(``partition_runs.RUN_KEY_METADATA``). From those hand-outs alone, at every tick:

* ClusterCockpit, whose runs read again every job of a block not stored with its current
  fingerprint (a failed job among them: it keeps its old one), so handing out the block
  is enough: the blocks whose built asset FAILED
  (:meth:`BlockHandOuts.failed_blocks`), their latest hand-out's entries listed again
  with the block's next hand-out (:meth:`BlockHandOuts.handed_out`), so that they stay
  rechecked while the block fails;
* GEOPM, TAU profile sets and PowerAPI (:class:`BlockLandingSensor`) and GPU, whose runs
  process the entries named: each block's entries not known good
  (:meth:`BlockHandOuts.unsettled`: those the step's latest record of the block names as
  failed, from whichever run, and the whole previous hand-out when its run did not end in success and recorded nothing after it:
  a sensor hands out nothing while a run of its own is in flight,
  ``partition_runs.own_run_in_flight``), listed again, still there, with the
  block's next hand-out, so that a fixed entry is picked up by itself; and a FAILED
  block whose failed entry is handed out in another block now, rechecked in the same run
  without it (:meth:`BlockHandOuts.moved_failures`);
* the blocks of a CANCELED run (:meth:`BlockHandOuts.cancelled`), asked for again once
  with the entries their hand-out listed (``partition_runs.cancelled_hand_outs``).

The landing folders' sensor (GEOPM, TAU profile sets, PowerAPI) is
:class:`BlockLandingSensor`: its tick scans the folders and hands out what is ready by
block, in one run (``partition_runs.ask_for``).

Nothing but the instance's events is kept: no side table, and the sensor's cursor stays
the scan's own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any, TypeVar

import dagster as dg

from assets.blocks import FAILED_ENTRIES
from joulehouse.digest import digest_pairs
from joulehouse.errors import InputError
from joulehouse.landing import (
    Identify,
    LandedItem,
    LandingState,
    list_landings,
    read_landed_item,
    scan_landings,
)
from resources.landing import LandingFolders
from sensors.partition_runs import (
    RUN_KEY_METADATA,
    RUN_KEY_TAG,
    HandOut,
    ask_for,
    cancelled_hand_outs,
    left_be,
    retry_request,
    wait_for_own_run,
)
from sensors.tick_budget import Tick

T = TypeVar("T")
#: Entry key -> fingerprint, as a hand-out lists them.
Entries = dict[str, str]
#: Entry keys, a block (None: any) -> those of the entries still there (and, given a
#: block, still of that block), with their fingerprints now.
StillThere = Callable[[Collection[str], "str | None"], Entries]


@dataclass
class TickRecords:
    """The latest hand-out (a materialization of ``files``) and the latest outcome record
    (an observation of it: ``assets/blocks.block_outcomes``) of each block a tick looks at,
    each read at most once a tick, however many of :class:`BlockHandOuts`' questions
    need it (a FAILED day's: its recheck, its entries not known good, the moved failures,
    the cancelled runs' check). Every read comes before the tick stores its hand-out
    (``tick_budget.hand_out`` stores a large one itself): keep none past
    :meth:`BlockHandOuts.hand_out`. A FAILED day's outcome is so read before the scan, and
    a run over the day ending during the scan is seen by the next tick."""

    instance: dg.DagsterInstance
    files: dg.AssetKey
    _hand_outs: dict[str, dg.EventLogRecord | None] = field(default_factory=dict)
    _outcomes: dict[str, dg.EventLogRecord | None] = field(default_factory=dict)

    def hand_out(self, block: str) -> dg.EventLogRecord | None:
        """The latest hand-out of ``block``, if any."""
        if block not in self._hand_outs:
            self._hand_outs[block] = next(iter(self.instance.fetch_materializations(
                self._of(block), limit=1).records), None)
        return self._hand_outs[block]

    def outcome(self, block: str) -> dg.EventLogRecord | None:
        """The latest outcome record of ``block``, if any."""
        if block not in self._outcomes:
            self._outcomes[block] = next(iter(self.instance.fetch_observations(
                self._of(block), limit=1).records), None)
        return self._outcomes[block]

    def _of(self, block: str) -> dg.AssetRecordsFilter:
        return dg.AssetRecordsFilter(asset_key=self.files, asset_partitions=[block])


@dataclass(frozen=True)
class BlockHandOuts:
    """A source's blocks: their partitions, the files asset their hand-outs materialize
    (and, for a source whose step records its blocks' outcomes, that it observes), the
    assets built from them (``built``: the first is the one whose materialization ends a
    hand-out; their FAILED partitions are :meth:`failed_blocks`), and the metadata name
    under which a hand-out lists its entries."""

    partitions_def: dg.DynamicPartitionsDefinition
    files: dg.AssetKey
    built: tuple[dg.AssetKey, ...]
    entries_metadata: str

    def records(self, instance: dg.DagsterInstance) -> TickRecords:
        """A tick's reads of its blocks' latest records (:class:`TickRecords`)."""
        return TickRecords(instance, self.files)

    def registered(self, instance: dg.DagsterInstance) -> list[str]:
        """The registered blocks, in order (the whole key list: read once a tick)."""
        return list(instance.get_dynamic_partitions(self.partitions_def.name))

    def failed_blocks(self, instance: dg.DagsterInstance, registered: Sequence[str]
                      ) -> set[str]:
        """The blocks, of the ``registered`` ones, of which a ``built`` partition FAILED."""
        return {block for asset in self.built
                for block, state in (instance.get_status_by_partition(
                    asset, registered, self.partitions_def) or {}).items()
                if state == dg.AssetPartitionStatus.FAILED}

    def handed_out(self, records: TickRecords, blocks: Collection[str]
                   ) -> dict[str, Entries]:
        """Block -> the entries its latest hand-out listed, with their fingerprints then,
        for each of ``blocks`` that has one."""
        entries: dict[str, Entries] = {}
        for block in sorted(blocks):
            event = records.hand_out(block)
            if event is not None:
                entries[block] = self.listed(event.asset_materialization)
        return entries

    def unsettled(self, records: TickRecords, blocks: Collection[str]
                  ) -> dict[str, set[str]]:
        """Block -> its entries whose outcome is not known good, for each of ``blocks``
        (a source whose step records its blocks' :data:`~assets.blocks.FAILED_ENTRIES`,
        ``assets/blocks.block_outcomes``): those the latest such record names, from
        whichever run (a hand-out's, the UI's, a backfill, a re-validation); and, when the
        run the block's latest hand-out was asked with has not ended in success and has
        recorded nothing after that hand-out, every entry that hand-out listed, unless
        that run was cancelled and tagged not to be retried (``partition_runs.left_be``).
        Its sensor asks for nothing while that run is in flight
        (``partition_runs.own_run_in_flight``), so such a run ended without a record (its
        worker killed), or was never submitted."""
        entries: dict[str, set[str]] = {}
        for block in sorted(blocks):
            keys: set[str] = set()
            outcome = records.outcome(block)
            if outcome is not None:
                named = outcome.asset_observation.metadata.get(FAILED_ENTRIES)
                keys |= set(named.value if named is not None else [])
            handed = records.hand_out(block)
            run = handed and _run_of(records.instance, handed.asset_materialization)
            if run is not None and not left_be(run) and (not run.is_finished or (
                    run.status != dg.DagsterRunStatus.SUCCESS
                    and (outcome is None or outcome.storage_id < handed.storage_id))):
                keys |= set(self.listed(handed.asset_materialization))
            if keys:
                entries[block] = keys
        return entries

    def moved_failures(self, records: TickRecords, registered: Sequence[str],
                       listing: Mapping[str, Entries], failed: set[str] | None = None
                       ) -> dict[str, set[str]]:
        """FAILED block -> its other failed entries, for each of the ``registered`` blocks
        not in ``listing`` whose latest record (:data:`~assets.blocks.FAILED_ENTRIES`)
        names an entry that ``listing`` hands out in another block now: an entry fixed so
        that it belongs to another block (a GEOPM report whose Start Time was wrong), whose
        old block stays FAILED until it is rechecked without it. One status query per
        built asset (none when the tick has them already: ``failed``, the
        :meth:`failed_blocks` of ``registered``), and the latest record of each FAILED
        block, when anything is handed out (``records``: read once a tick)."""
        elsewhere = {key for entries in listing.values() for key in entries}
        if not elsewhere:
            return {}
        if failed is None:
            failed = self.failed_blocks(records.instance, registered)
        moved: dict[str, set[str]] = {}
        for block in sorted(failed - listing.keys()):
            outcome = records.outcome(block)
            named = outcome and outcome.asset_observation.metadata.get(FAILED_ENTRIES)
            recorded = set(named.value) if named is not None else set()
            if recorded & elsewhere:
                moved[block] = recorded - elsewhere
        return moved

    def hand_out(self, records: TickRecords, fresh: Mapping[str, Entries],
                 cancelled: Mapping[str, dg.AssetMaterialization], still_there: StillThere,
                 registered: Sequence[str], run_key_prefix: str,
                 run_config: Callable[[Mapping[str, list[str]]], dict[str, Any]],
                 failed: set[str] | None = None) -> HandOut:
        """What a tick asks for, given the entries ready now by block (``fresh``: block ->
        entry -> fingerprint, each entry in one block): each block's hand-out lists those,
        the entries a CANCELED run of it was handed (``cancelled``: :meth:`cancelled`; asked
        again once, failed block or not), those not known good (:meth:`unsettled`), and a
        FAILED block's other failed entries where one of them is handed out in another
        block now (:meth:`moved_failures`; none: a run over no entry, so the block passes
        without the moved one), each once in the run and only while ``still_there(keys,
        block)`` finds it (``block`` None: wherever it is now), with its fingerprint now
        (``registered``: the source's registered blocks; ``failed``: their
        :meth:`failed_blocks`, when the tick has read them already). The run is asked with
        ``run_config(block -> its entries' keys)`` under ``run_key_prefix`` (a retry's
        when anything was cancelled), and its key digests the entries with their
        fingerprints."""
        fresh = {block: dict(entries) for block, entries in fresh.items()}
        now = {key for entries in fresh.values() for key in entries}
        for block, event in cancelled.items():
            there = still_there(set(self.listed(event)) - now, None)
            if there:  # a block none of whose entries is left is not handed out empty
                fresh.setdefault(block, {}).update(there)
                now |= there.keys()
        recheck: dict[str, Entries] = {}
        for block, keys in self.unsettled(records, fresh.keys()).items():
            recheck[block] = still_there(keys - now, block)
            now |= recheck[block].keys()
        listing = self.listing(fresh, recheck)
        for block, keys in self.moved_failures(records, registered, listing,
                                               failed).items():
            listing[block] = still_there(keys - now, block)  # none: it passes
            now |= listing[block].keys()
        prefix, tags = retry_request(run_key_prefix, cancelled)
        return HandOut(
            {block: digest_pairs(entries) for block, entries in sorted(listing.items())},
            sum(map(len, listing.values())), prefix,
            run_config({block: sorted(entries) for block, entries in listing.items()}),
            tags, lambda run_key: self.metadata(listing, run_key))

    def listed(self, event: dg.AssetMaterialization) -> Entries:
        """The entries a hand-out ``event`` lists (none when it lists none)."""
        value = event.metadata.get(self.entries_metadata)
        return dict(value.value) if value is not None else {}

    def cancelled(self, records: TickRecords, failed: set[str],
                  registered: Sequence[str]) -> dict[str, dg.AssetMaterialization]:
        """The blocks handed out to a run that was CANCELED, by key, with their hand-out
        (``partition_runs.cancelled_hand_outs``; ``failed``: rechecked instead)."""
        return cancelled_hand_outs(records.instance, self.files, self.built[0], failed,
                                   registered, records.hand_out)

    def listing(self, ready: Mapping[str, Entries], recheck: Mapping[str, Entries]
                ) -> dict[str, Entries]:
        """Each ready block's entries as its hand-out lists them: those ready now and those
        ``recheck`` holds for it (the failed blocks' :meth:`handed_out`), so that they stay
        rechecked should the block fail again."""
        return {block: recheck.get(block, {}) | dict(entries) for block, entries in ready.items()}

    def metadata(self, listing: Mapping[str, Entries], run_key: str
                 ) -> dict[str, dict[str, Any]]:
        """Each block's hand-out metadata: the entries ``listing`` lists in it (none for a
        block whose run processes none) and the run key asked for."""
        return {block: {self.entries_metadata: dg.MetadataValue.json(entries),
                        RUN_KEY_METADATA: run_key}
                for block, entries in listing.items()}


@dataclass(frozen=True)
class BlockLandingSensor:
    """A sensor over landing folders whose entries are handed out in blocks (every landing
    source's since PowerAPI's moved to days): which entries of a folder are its own
    (``identify``: :func:`joulehouse.landing.find_landed`), the blocks' partitions they
    become, the source asset of their files, the job it asks for, and how an entry is
    called in the tick's messages.

    ``block_of(entry, source)`` names the block of each ready entry; a block's
    hand-out lists its entries ready now, those a CANCELED run of it was handed (asked
    again once, failed block or not) and those not known good
    (:meth:`BlockHandOuts.unsettled`), each once in the run and only while still there
    (``blocks``: :class:`BlockHandOuts`); the run is asked with
    ``run_config(block -> its entries' keys)``, so that it processes those entries alone,
    and its key digests them with their fingerprints. An entry is rechecked only in the
    block it belongs to now. A FAILED block one of whose failed entries is handed out in
    another block now (fixed, it belongs there) is added to the run with its other failed
    entries still there (:meth:`BlockHandOuts.moved_failures`; none: a run over no entry),
    so it passes without the moved one, or fails on the others alone.

    Its cursor names the blocks' partitions: a cursor written before the source had
    blocks (one partition per entry) is not taken, so every entry present is handed out
    again, once, into its block (the first ticks after an upgrade re-read what is
    there, at the tick's pace)."""

    identify: Identify
    partitions_def: dg.DynamicPartitionsDefinition
    files: dg.AssetKey
    job_name: str
    run_key_prefix: str
    entries: str  # e.g. "GEOPM report(s)"
    blocks: BlockHandOuts
    block_of: Callable[[LandedItem, LandingFolders], str]
    run_config: Callable[[Mapping[str, list[str]]], dict[str, Any]]

    def state(self, own: str | None) -> LandingState:
        """The landing state in the sensor's own cursor ``own``."""
        landing = blocks_cursor_state(own, self.partitions_def.name, "landing")
        return LandingState() if landing is None else LandingState.from_json(landing)

    def cursor(self, state: LandingState) -> str:
        """The sensor's own cursor holding ``state``."""
        return blocks_cursor(self.partitions_def.name, "landing", state.to_json())

    def hand_out(self, instance: dg.DagsterInstance, ready: Sequence[LandedItem],
                 source: LandingFolders, registered: Callable[[], list[str]]) -> HandOut:
        """What the tick asks for, given the ``ready`` entries (``registered()``: the
        registered keys, read once a tick when asked for)."""
        records = self.blocks.records(instance)  # each block's latest records, once a tick
        cancelled = self.blocks.cancelled(records, set(), registered())
        fresh: dict[str, Entries] = {}
        for item in ready:
            fresh.setdefault(self.block_of(item, source), {})[item.key] = item.fingerprint
        return self.blocks.hand_out(
            records, fresh, cancelled, partial(self._still_there, source), registered(),
            self.run_key_prefix, self.run_config)

    def evaluate(self, context: dg.SensorEvaluationContext, source: LandingFolders
                 ) -> dg.SensorResult:
        """One tick over every landing folder of ``source``.

        Lists the entries, takes those new or changed since they were last handed
        out (cursor: a watermark, and key -> fingerprint and size of the entries changed
        after it) and quiet for ``source.quiet_period_s``
        (or grown by ``source.grown_bytes`` since, or waiting ``source.grown_wait_s``:
        :func:`joulehouse.landing.scan_landings`),
        as many as fill the tick's time budget, at most ``source.max_entries_per_tick``
        (``sensors/tick_budget.py``), registers the new partitions (:meth:`hand_out`), asks
        for ONE run covering exactly them (``partition_runs.ready_run_request``) and reports
        each as a materialization of the files (``partition_runs.files_landed``; a large
        hand-out is written by the tick itself: ``tick_budget.hand_out``). Every entry is
        listed at every tick, and fingerprinted unless it is a file unchanged since the
        cursor's watermark (:class:`joulehouse.landing.LandingState`: the cursor stays
        small), so one whose partition failed and that is fixed in place is asked for
        again one tick after its quiet period, and so is one whose ctime alone moved (a
        ``chmod``: one idempotent re-run, the known cost). A landing folder that cannot be
        listed (missing, unreadable, one of its entries unreadable or holding a dangling
        link, an empty mount point: :func:`joulehouse.landing.list_landings`) is named in
        a warning and the tick's message (with the entry and why), the others are
        scanned, and its cursor is kept as it was for when it is back.
        """
        tick = Tick.begin(context.cursor, source.max_entries_per_tick)
        if (waiting := wait_for_own_run(context, tick, self.job_name)) is not None:
            return waiting
        folders = source.landings()
        state = self.state(tick.own).over(folders)
        listing = list_landings(folders, state, self.identify)
        for why in listing.unlisted.values():
            context.log.warning(why)
        skipped = "".join(f"; skipped: {why}" for why in listing.unlisted.values())
        scan = scan_landings(listing.items, state, source.quiet_period_s, time.time(),
                             grown_bytes=source.grown_bytes,
                             grown_wait_s=source.grown_wait_s, cap=tick.cap,
                             unlisted=listing.unlisted, devices=listing.devices)
        cursor = self.cursor(scan.state)
        listed_s = time.time() - tick.started  # every entry listed, each tick
        registered = cache(lambda: list(
            context.instance.get_dynamic_partitions(self.partitions_def.name)))
        hand_out = self.hand_out(context.instance, scan.ready, source, registered)
        if not hand_out.fingerprints:
            return tick.skip(cursor, f"no new or changed {self.entries} ready ({scan.waiting} "
                                     f"waiting for the {source.quiet_period_s:g} s quiet "
                                     f"period){skipped}")
        blocks = ("" if hand_out.entries == len(scan.ready) == len(hand_out.fingerprints)
                  else f" in {len(hand_out.fingerprints)} partition(s)")
        return ask_for(
            context, tick, hand_out, registered(), self.partitions_def, self.job_name,
            self.files, cursor, what=f"{hand_out.entries} {self.entries}",
            told=lambda new: (f"{hand_out.entries} {self.entries} ready{blocks} ({new} new), "
                              f"{scan.waiting} waiting ({scan.deferred} of them left for the "
                              f"next ticks by this tick's cap){skipped}"),
            handed_out=len(scan.ready), cut=scan.deferred > 0, fixed_s=listed_s)

    def _still_there(self, source: LandingFolders, keys: Collection[str],
                     block: str | None) -> Entries:
        """Each of entries ``keys`` still in its landing folder (and, given a ``block``,
        still of that block), with its fingerprint now (:func:`still_there_of`)."""
        return still_there_of(
            keys, block, lambda key: read_landed_item(source.resolve(key), key, self.identify),
            lambda item: self.block_of(item, source), lambda item: item.fingerprint)


def still_there_of(keys: Collection[str], block: str | None,
                   read: Callable[[str], T | None], block_of: Callable[[T], str],
                   fingerprint_of: Callable[[T], str],
                   errors: tuple[type[Exception], ...] = (OSError, InputError)) -> Entries:
    """Each of entries ``keys`` that ``read(key)`` still finds (None, or one of ``errors``:
    gone or unusable now) and, given a ``block``, whose ``block_of`` it still is, with
    ``fingerprint_of`` it now (taken after the block check): a :data:`StillThere` over a
    source's own reading of its entries."""
    entries: Entries = {}
    for key in sorted(keys):
        try:
            found = read(key)
            if found is not None and (block is None or block_of(found) == block):
                entries[key] = fingerprint_of(found)
        except errors:
            continue
    return entries


def blocks_cursor_state(own: str | None, partitions: str, name: str) -> Any:
    """The scan state stored under ``name`` in a block sensor's own cursor ``own``
    (:func:`blocks_cursor`), or None (start afresh) when ``own`` does not name the blocks'
    partitions ``partitions``: a cursor written before the source had blocks (one
    partition per entry), so that every entry present is handed out again, once, into
    its block."""
    try:
        payload = json.loads(own or "{}")
    except ValueError:
        payload = {}
    if not isinstance(payload, dict) or payload.get("blocks") != partitions:
        return None
    return payload.get(name)


def blocks_cursor(partitions: str, name: str, state: Any) -> str:
    """A block sensor's own cursor holding the scan ``state`` (JSON-ready) under ``name``,
    naming the blocks' partitions ``partitions`` (:func:`blocks_cursor_state`)."""
    return json.dumps({"blocks": partitions, name: state})


def _run_of(instance: dg.DagsterInstance, event: dg.AssetMaterialization) -> dg.DagsterRun | None:
    """The run a hand-out ``event`` was asked with (its run key), if one was created."""
    run_key = event.metadata.get(RUN_KEY_METADATA)
    runs = instance.get_runs(filters=dg.RunsFilter(tags={RUN_KEY_TAG: str(run_key.value)}),
                             limit=1) if run_key is not None else []
    return runs[0] if runs else None
