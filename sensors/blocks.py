"""Entries handed out in blocks: one partition holding many entries, and what its sensor
remembers of them between ticks.

A block is a partition that holds many of a source's entries (ClusterCockpit: a job-id
block ``<cluster>/<jobId // 1000>`` of jobs; GEOPM: a landing folder's UTC day of
reports), so the partition count stays bounded while the entries grow without bound
(docs/ARCHITECTURE.md, "Partitions over a decade"). A sensor hands out the entries ready
in a block as one materialization of the source's files asset for that block
(``partition_runs.files_landed``) whose metadata lists them, entry key -> fingerprint
(:attr:`BlockHandOuts.entries_metadata`), with the run key asked for
(``partition_runs.RUN_KEY_METADATA``). From those hand-outs alone, at every tick:

* the blocks whose built asset FAILED (:meth:`BlockHandOuts.failed_blocks`) and the
  entries of their latest hand-out that failed (those its failed run names, else all it
  listed: :meth:`BlockHandOuts.handed_out`): rechecked, and listed again with the
  block's next hand-out (:meth:`BlockHandOuts.metadata`), so that they stay rechecked
  while the block fails, and a fixed entry is picked up by itself;
* the blocks of a CANCELED run (:meth:`BlockHandOuts.cancelled`), asked for again once
  with the entries their hand-out listed (``partition_runs.cancelled_hand_outs``).

Nothing but the instance's events is kept: no side table, and the sensor's cursor stays
the scan's own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from assets.blocks import FAILED_ENTRIES
from joulehouse.digest import digest_pairs
from joulehouse.errors import InputError
from joulehouse.landing import LandedItem, LandingState
from resources.landing import LandingFolders
from sensors.partition_runs import (
    RUN_KEY_METADATA,
    RUN_KEY_TAG,
    HandOut,
    LandingSensor,
    cancelled_hand_outs,
    retry_request,
)

#: Entry key -> fingerprint, as a hand-out lists them.
Entries = dict[str, str]


@dataclass(frozen=True)
class BlockHandOuts:
    """A source's blocks: their partitions, the files asset their hand-outs materialize,
    the assets whose FAILED partitions are rechecked (``built``; the first is the one
    whose materialization ends a hand-out), and the metadata name under which a
    hand-out lists its entries."""

    partitions_def: dg.DynamicPartitionsDefinition
    files: dg.AssetKey
    built: tuple[dg.AssetKey, ...]
    entries_metadata: str

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

    def handed_out(self, instance: dg.DagsterInstance, blocks: Collection[str]
                   ) -> dict[str, Entries]:
        """Block -> the entries its latest hand-out listed, with their fingerprints then,
        for each of ``blocks``; only those that failed, where the failed run that hand-out
        was asked with names them (its step failure's :data:`~assets.blocks.FAILED_ENTRIES`),
        so that a block's good entries are not handed out again with its bad ones."""
        entries: dict[str, Entries] = {}
        for block in sorted(blocks):
            record = instance.get_latest_data_version_record(
                self.files, is_source=False, partition_key=block)
            event = record and record.asset_materialization
            if event is not None:
                listed = self.listed(event)
                failed = _failed_entries(instance, event, block)
                entries[block] = listed if failed is None else {
                    key: value for key, value in listed.items() if key in failed}
        return entries

    def listed(self, event: dg.AssetMaterialization) -> Entries:
        """The entries a hand-out ``event`` lists (none when it lists none)."""
        value = event.metadata.get(self.entries_metadata)
        return dict(value.value) if value is not None else {}

    def cancelled(self, instance: dg.DagsterInstance, failed: set[str],
                  registered: Sequence[str]) -> dict[str, dg.AssetMaterialization]:
        """The blocks handed out to a run that was CANCELED, by key, with their hand-out
        (``partition_runs.cancelled_hand_outs``; ``failed``: rechecked instead)."""
        return cancelled_hand_outs(instance, self.files, self.built[0], failed, registered)

    def listing(self, ready: Mapping[str, Entries], recheck: Mapping[str, Entries]
                ) -> dict[str, Entries]:
        """Each ready block's entries as its hand-out lists them: those ready now and those
        ``recheck`` holds for it (the failed blocks' :meth:`handed_out`), so that they stay
        rechecked should the block fail again."""
        return {block: recheck.get(block, {}) | dict(entries) for block, entries in ready.items()}

    def metadata(self, ready: Mapping[str, Entries], recheck: Mapping[str, Entries],
                 run_key: str) -> dict[str, dict[str, Any]]:
        """Each ready block's hand-out metadata: its :meth:`listing` and the run key asked
        for."""
        return {block: {self.entries_metadata: dg.MetadataValue.json(entries),
                        RUN_KEY_METADATA: run_key}
                for block, entries in self.listing(ready, recheck).items()}


@dataclass(frozen=True)
class BlockLandingSensor(LandingSensor):
    """A :class:`~sensors.partition_runs.LandingSensor` whose entries are handed out in
    blocks: ``block_of(entry, source)`` names the block of each ready entry; a block's
    hand-out lists its entries ready now, those a CANCELED run of it was handed (asked
    again once) and, while it FAILED, those of its failed hand-out that failed and are
    still there (``blocks``: :class:`BlockHandOuts`); the run is asked with
    ``run_config(block -> its entries' keys)``, so that it processes those entries alone,
    and its key digests them with their fingerprints.

    Its cursor names the blocks' partitions: a cursor written before the source had
    blocks (one partition per entry) is not taken, so every entry present is handed out
    again, once, into its block (the first ticks after an upgrade re-read what is
    there, at the tick's pace)."""

    blocks: BlockHandOuts
    block_of: Callable[[LandedItem, LandingFolders], str]
    run_config: Callable[[Mapping[str, list[str]]], dict[str, Any]]

    def state(self, own: str | None) -> LandingState:
        try:
            payload = json.loads(own or "{}")
        except ValueError:
            payload = {}
        if not isinstance(payload, dict) or payload.get("blocks") != self.partitions_def.name:
            return LandingState()
        return LandingState.from_json(payload["landing"])

    def cursor(self, state: LandingState) -> str:
        return json.dumps({"blocks": self.partitions_def.name, "landing": state.to_json()})

    def hand_out(self, instance: dg.DagsterInstance, ready: Sequence[LandedItem],
                 source: LandingFolders, registered: Callable[[], list[str]]) -> HandOut:
        failed = self.blocks.failed_blocks(instance, registered())
        cancelled = self.blocks.cancelled(instance, failed, registered())
        fresh: dict[str, Entries] = {block: self.blocks.listed(event)
                                     for block, event in cancelled.items()}
        for item in ready:
            fresh.setdefault(self.block_of(item, source), {})[item.key] = item.fingerprint
        now = {key for entries in fresh.values() for key in entries}
        recheck = {block: {key: value for key, value in entries.items()
                           if key not in now and _present(source, key)}
                   for block, entries in self.blocks.handed_out(
                       instance, failed & fresh.keys()).items()}
        listing = self.blocks.listing(fresh, recheck)
        prefix, tags = retry_request(self.run_key_prefix, cancelled)
        return HandOut(
            {block: digest_pairs(entries) for block, entries in sorted(listing.items())},
            sum(map(len, listing.values())), prefix,
            self.run_config({block: sorted(entries) for block, entries in listing.items()}),
            tags, lambda run_key: self.blocks.metadata(fresh, recheck, run_key))


def _present(source: LandingFolders, key: str) -> bool:
    """Whether entry ``key`` is still in its landing folder (one configured)."""
    try:
        return source.resolve(key).exists()
    except InputError:
        return False


def _failed_entries(instance: dg.DagsterInstance, event: dg.AssetMaterialization,
                    block: str) -> set[str] | None:
    """The entries of ``block`` that failed in the run its hand-out ``event`` was asked
    with, as that run's step failure names them; None when it names none (no such run, a
    run that did not fail, a source whose failure does not name entries)."""
    run_key = event.metadata.get(RUN_KEY_METADATA)
    runs = instance.get_runs(filters=dg.RunsFilter(tags={RUN_KEY_TAG: str(run_key.value)}),
                             limit=1) if run_key is not None else []
    if not runs or runs[0].status != dg.DagsterRunStatus.FAILURE:
        return None
    for entry in reversed(instance.all_logs(runs[0].run_id,
                                            of_type=dg.DagsterEventType.STEP_FAILURE)):
        failure = entry.dagster_event.step_failure_data.user_failure_data
        named = failure.metadata.get(FAILED_ENTRIES) if failure is not None else None
        if named is not None:
            return set(named.value.get(block, []))
    return None
