"""Block partitions in a step: each entry's work, each block's outcome and failure.

A block (``sensors/blocks.py``: a ClusterCockpit job-id block, a GEOPM, TAU or PowerAPI landing
day) holds many entries. A step over landing days takes the entries its run names
per day, a day named by none read whole (:class:`RunDays`). A step over blocks does
each entry's work on its own (:func:`run_entries`: one task per entry, in the step's
executor), then reports each block as one partition (:func:`block_batch`): stored when
all its entries were, failed when any failed, its check naming them, the first with its
file, line and field (:func:`block_failure`), so the UI shows which entry to fix while
the block's other entries are stored. A step over days reports each of its per-entry
assets per day (:class:`DayReports`), a day's partition listing the entries it stored
(:func:`stored_entries_metadata`).
"""

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import dagster as dg
import pandas as pd
from pydantic import Field

from assets.reporting import (
    BothOutcome,
    PartitionBatch,
    SchemaOf,
    Stored,
    Work,
    run_partitions,
    stored,
)
from joulehouse.errors import InputError
from joulehouse.landing import Identify
from joulehouse.landing_days import StartDay, day_key, entries_of_days, split_day_key

#: Entries' errors listed in one block's error.
MAX_LISTED = 50
#: The metadata of a block's outcome (:func:`block_outcomes`) naming its entries that
#: failed (what the block's sensor hands out again: ``sensors/blocks.BlockHandOuts.unsettled``).
FAILED_ENTRIES = "failed_entries"

#: Entry keys a day's partition lists in its metadata (:func:`stored_entries_metadata`).
ENTRIES_SHOWN = 200

#: One entry's outcome: what it stored, or the error that failed it.
Outcome = Stored | InputError


def block_failure(key: str, errors: list[InputError], entries: int, done: int, *,
                  entry: str = "job", block: str = "block") -> InputError:
    """The error of ``block`` ``key``: its first failed ``entry`` (file, line, field), the
    others after it, and how many of its ``entries`` were ``done`` (stored, or loaded)."""
    first = errors[0]
    others = "".join(f"; and {err}" for err in errors[1:MAX_LISTED])
    more = len(errors) - MAX_LISTED
    reason = (f"{first.reason} ({len(errors)} of {entries} {entry}(s) of {block} {key} "
              f"failed, {done} done{others}{f'; and {more} more' if more > 0 else ''})")
    return InputError(first.path, reason, line=first.line, field=first.field)


def run_entries(blocks: Mapping[str, Sequence[str]], work: Work,
                arguments: Callable[[str], tuple], executor: Executor,
                skip: Collection[str] = ()) -> dict[str, Outcome]:
    """Entry -> ``work(*arguments(entry))`` as :class:`Stored`, or its InputError, for every
    entry of ``blocks`` (block -> entry keys) but those in ``skip``, each a task of
    ``executor`` (a module-level ``work``, picklable arguments: worker processes)."""
    outcomes: dict[str, Outcome] = {}
    futures: dict[str, Future] = {}
    for entries in blocks.values():
        for entry in entries:
            if entry in skip:
                continue
            try:
                futures[entry] = executor.submit(stored, work, *arguments(entry))
            except InputError as err:
                outcomes[entry] = err
    for entry, future in futures.items():
        try:
            outcomes[entry] = future.result()
        except InputError as err:
            outcomes[entry] = err
    return outcomes


def run_entries_both(blocks: Mapping[str, Sequence[str]],
                     work: Callable[[list[tuple]], list[BothOutcome]],
                     arguments: Callable[[str], tuple], executor: Executor, per_task: int
                     ) -> tuple[dict[str, Outcome], dict[str, Outcome], Exception | None]:
    """:func:`run_entries` for two assets of each entry built in the same task (the second
    from the first's frames in memory, not read back), ``per_task`` entries a task of
    ``executor``: ``work([arguments(entry), ...])`` returns each entry's
    :data:`~assets.reporting.BothOutcome`. Returns entry -> the first asset's outcome (an
    entry whose ``arguments`` raise an InputError fails there); entry -> the second's, for
    the entries whose first was stored; and the first error of the second that is no
    InputError (a bug: raised by the caller once the first asset is reported)."""
    keys = list(dict.fromkeys(entry for entries in blocks.values() for entry in entries))
    first: dict[str, Outcome] = {}
    second: dict[str, Outcome] = {}
    tasks: list[tuple[list[str], Future]] = []
    chunk: list[str] = []
    given: list[tuple] = []
    for position, key in enumerate(keys, start=1):
        try:
            given.append(arguments(key))
            chunk.append(key)
        except InputError as err:
            first[key] = err
        if chunk and (len(chunk) == per_task or position == len(keys)):
            tasks.append((chunk, executor.submit(work, given)))
            chunk, given = [], []
    error: Exception | None = None
    for task_keys, future in tasks:
        for key, (outcome, then) in zip(task_keys, future.result(), strict=True):
            first[key] = outcome
            if isinstance(outcome, InputError):
                continue
            if isinstance(then, Stored | InputError):
                second[key] = then
            else:
                error = error or then
    return first, second, error


def block_batch(context: dg.AssetExecutionContext, blocks: Mapping[str, Sequence[str]],
                outcomes: Mapping[str, Outcome], schema_of: SchemaOf,
                metadata: Callable[[str, dict[str, Stored]], dict[str, Any]], *,
                unlisted: Mapping[str, InputError], skipped: Mapping[str, str],
                entry: str, block: str) -> PartitionBatch:
    """Each block of the run as one partition (``PartitionBatch``): failed when its entries
    could not be listed (``unlisted``: block -> why) or when any of its entries failed
    (:func:`block_failure`); else not computed when any of its entries was ``skipped``
    (entry -> why: e.g. an earlier asset failed in this run); else stored: its
    entries' rows summed per frame, what they left out, and ``metadata(block, entry ->
    what it stored)``."""

    def outcome(key: str) -> Stored:
        if key in unlisted:
            raise unlisted[key]
        entries = blocks.get(key, [])
        done = {name: outcomes[name] for name in entries
                if isinstance(outcomes.get(name), Stored)}
        errors = [outcomes[name] for name in entries
                  if isinstance(outcomes.get(name), InputError)]
        if errors:
            raise block_failure(key, errors, len(entries), len(done), entry=entry,
                                block=block)
        return merged(done.values(), metadata(key, done))

    skip = {}
    for key in context.partition_keys:
        entries = blocks.get(key, [])
        why = [skipped[name] for name in entries if name in skipped]
        if why and key not in unlisted and not any(
                isinstance(outcomes.get(name), InputError) for name in entries):
            skip[key] = f"{why[0]} for {len(why)} of its {len(entries)} {entry}(s)"
    return PartitionBatch.run(context, outcome, schema_of, skip=skip)


def merged(parts: Collection[Stored], metadata: dict[str, Any]) -> Stored:
    """What several entries stored, as one: rows summed per frame, the first non-empty
    columns of each frame, what they left out, and ``metadata``."""
    rows: dict[str, int] = {}
    columns: dict[str, pd.DataFrame] = {}
    for part in parts:
        for name, count in part.rows.items():
            rows[name] = rows.get(name, 0) + count
            if name not in columns or (columns[name].columns.empty
                                       and not part.columns[name].columns.empty):
                columns[name] = part.columns[name]
    return Stored(rows, columns, metadata, [record for part in parts for record in part.left_out])


class DayHandOut(dg.Config):
    """The entries a landing sensor handed out, by day partition, in the run config of the
    step that processes them (``OP``): a run processes these alone. A day of the run that
    is not named there (a backfill, a materialization from the UI, the weekly
    re-validation) is read whole (:class:`RunDays`). A source's subclass declares its
    ``OP`` and its one field, day partition key -> entry keys (:func:`hand_out_field`)."""

    OP: ClassVar[str]

    @classmethod
    def run_config_of(cls, entries: Mapping[str, Sequence[str]]) -> dict[str, Any]:
        """The run config of the step's job handing out ``entries`` (day -> entry keys)."""
        [name] = cls.model_fields
        return {"ops": {cls.OP: {"config": {name: {
            day: list(keys) for day, keys in entries.items()}}}}}

    @classmethod
    def named_in(cls, run_config: Mapping[str, Any]) -> dict[str, list[str]]:
        """Day partition key -> the entry keys that ``run_config`` (a run's, or a run
        request's) hands out (:meth:`run_config_of`); none when it names none."""
        [name] = cls.model_fields
        return dict(run_config.get("ops", {}).get(cls.OP, {}).get("config", {}).get(name, {}))

    def named(self) -> dict[str, list[str]]:
        """Day partition key -> the entry keys handed out in it."""
        [name] = type(self).model_fields
        return getattr(self, name)


def hand_out_field(entries: str) -> Any:
    """The field of a :class:`DayHandOut` naming ``entries`` (e.g. "the keys
    (<landing name>/<file name>) of the reports") per day; none by default."""
    return Field(default={}, description=f"Day partition key -> {entries} handed out in it.")


#: Landing name, its days (``YYYY-MM-DD``) -> each day's entry keys, every entry whose day
#: it is (what a run reads of a day none of its hand-outs names); raises an InputError
#: naming why the landing cannot be read.
DaysOf = Callable[[str, list[str]], dict[str, list[str]]]


def _landing_days_of(folders: Mapping[str, Path], identify: Identify, start_day: StartDay,
                     source: str) -> DaysOf:
    """The :data:`DaysOf` of landing folders (``folders``: name -> path) whose entries
    ``identify`` tells and ``start_day`` dates (``landing_days.entries_of_days``: one listing
    per landing folder); ``source`` names the source in errors."""

    def days_of(landing: str, dates: list[str]) -> dict[str, list[str]]:
        if landing not in folders:
            raise InputError(landing, f"no such {source} landing folder configured")
        try:
            found = entries_of_days(folders[landing], landing, dates, identify, start_day)
        except OSError as err:
            raise InputError(folders[landing], f"cannot be listed ({err})") from err
        return {date: [item.key for item in items] for date, items in found.items()}

    return days_of


@dataclass(frozen=True)
class RunDays:
    """The entries a run over landing days (``joulehouse.landing_days``) processes, by day
    (``entries``: day -> entry keys, in key order), and the days whose entries could not
    be listed (``unlisted``: day -> why)."""

    entries: dict[str, list[str]]
    unlisted: dict[str, InputError]

    @property
    def keys(self) -> list[str]:
        """Every entry of the run, sorted."""
        return sorted(key for keys in self.entries.values() for key in keys)

    @classmethod
    def of(cls, context: dg.AssetExecutionContext, config: DayHandOut,
           days_of: DaysOf) -> "RunDays":
        """The entries the run's ``config`` hands out for each day of the run; a day it does
        not name is read whole: ``days_of(landing, dates)`` (one call per landing folder or
        data root, its days read together) gives every entry of that landing whose day
        each date is, or an InputError naming why the landing cannot be read, which fails
        those days alone."""
        named = config.named()
        entries: dict[str, list[str]] = {}
        unlisted: dict[str, InputError] = {}
        whole: dict[str, list[str]] = {}  # landing -> days read whole
        for day in run_partitions(context) or []:
            if day in named:
                entries[day] = sorted(named[day])
                continue
            try:
                landing, date = split_day_key(day)
            except InputError as err:
                unlisted[day] = err
                continue
            whole.setdefault(landing, []).append(date)
        for landing, dates in whole.items():
            try:
                found = days_of(landing, dates)
            except InputError as err:
                found = {}
                unlisted |= {day_key(landing, date): err for date in dates}
            for date, keys in found.items():
                entries[day_key(landing, date)] = sorted(keys)
        return cls(entries, unlisted)

    @classmethod
    def of_landings(cls, context: dg.AssetExecutionContext, config: DayHandOut,
                    folders: Mapping[str, Path], identify: Identify, start_day: StartDay,
                    source: str) -> "RunDays":
        """:meth:`of` for landing folders (``folders``: name -> path) whose entries
        ``identify`` tells and ``start_day`` dates: a day read whole is every entry of its
        landing folder whose day it is (``landing_days.entries_of_days``: one listing per
        landing folder); ``source`` names the source in errors."""
        return cls.of(context, config, _landing_days_of(folders, identify, start_day, source))

    def batch(self, context: dg.AssetExecutionContext, outcomes: Mapping[str, Outcome],
              schema_of: SchemaOf, metadata: Callable[[str, dict[str, Stored]], dict],
              skipped: Mapping[str, str], *, entry: str) -> PartitionBatch:
        """Each day of the run as one partition (:func:`block_batch`; ``entry``: what an
        entry is called in its errors)."""
        return block_batch(context, self.entries, outcomes, schema_of, metadata,
                           unlisted=self.unlisted, skipped=skipped, entry=entry, block="day")


def stored_entries_metadata(entry: str, entries: str | None = None
                     ) -> Callable[[str, Mapping[str, Stored]], dict[str, Any]]:
    """What a block's partition of a per-entry asset shows besides its rows: how many
    ``entry`` (e.g. ``"report"``) the run stored in it (``entries``, default
    ``<entry>s``) and the first :data:`ENTRIES_SHOWN` of their keys (``<entry>_keys``)."""

    def metadata(block: str, done: Mapping[str, Stored]) -> dict[str, Any]:
        return {entries or f"{entry}s": dg.MetadataValue.int(len(done)),
                f"{entry}_keys": dg.MetadataValue.json(sorted(done)[:ENTRIES_SHOWN])}

    return metadata


@dataclass
class DayReports:
    """A run's per-entry assets over days (``run``) reported one after the other, each day as
    one partition (:meth:`RunDays.batch`, ``entry``: what an entry is called in its errors),
    keeping what the later assets and the step's end need: day -> why, for each day that
    failed or was not computed (``failed_days``, the first reason); entry -> why its later
    assets are not computed (``skipped``: ``skip_reason`` for an entry that failed);
    and the entries that failed (``bad``)."""

    context: dg.AssetExecutionContext
    run: RunDays
    entry: str
    skip_reason: str
    failed_days: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    bad: set[str] = field(default_factory=set)

    def report(self, outcomes: Mapping[str, Outcome], spec: dg.AssetCheckSpec,
               schema_of: SchemaOf,
               metadata: Callable[[str, dict[str, Stored]], dict] | None = None
               ) -> Iterator[Any]:
        """Yield the events of one asset's ``outcomes`` (entry -> what it stored, or its
        InputError), each day's with its check of ``spec`` and ``metadata(day, entry ->
        what it stored)`` (default: the entries stored, :func:`stored_entries_metadata`); the
        entries already ``skipped`` are not computed."""
        batch = self.run.batch(self.context, outcomes, schema_of,
                               metadata or stored_entries_metadata(self.entry), self.skipped,
                               entry=self.entry)
        yield from batch.results(self.context, spec)
        for day, why in batch.errors().items():
            self.failed_days.setdefault(day, why)
        errors = {key for key, outcome in outcomes.items() if isinstance(outcome, InputError)}
        self.skipped.update(dict.fromkeys(errors, self.skip_reason))
        self.bad.update(errors)


def block_outcomes(files: dg.AssetKey, entries: Mapping[str, Sequence[str]],
                   failed: Collection[str]) -> Iterator[dg.AssetObservation]:
    """Each block the step processed (``entries``: block -> its entry keys) observed as a
    partition of its ``files`` asset, its metadata :data:`FAILED_ENTRIES` naming those of its
    entries in ``failed`` (none: all passed), from every run that processes blocks (a
    hand-out's, the UI's, a backfill, a re-validation), so the block's sensor rechecks them
    with its next hand-out."""
    for block, keys in sorted(entries.items()):
        yield dg.AssetObservation(files, partition=block, metadata={
            FAILED_ENTRIES: dg.MetadataValue.json(sorted(set(keys) & set(failed)))})
