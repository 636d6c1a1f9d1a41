"""One incremental, bounded scanner for fixed-depth trees of leaf folders.

A tree is ``root/<level 1>/.../<listed folder>/<leaf path>``: the folders
down to the *listed level* are few (stat'ed every tick), the leaves below a
listed folder are many (listed only when needed). The GPU data root
(``experiment/benchmark/run/repetition``, listed level 3: run folders) and
the ClusterCockpit job archive (``cluster/jobId÷1000/jobId%1000/startTime``,
listed level 2: block folders) are two such trees; their adapters
(``joulehouse.gpu.scan``, ``joulehouse.clustercockpit.scan``) give a
:class:`Tree`: how a level's folders are named, how a listed folder's leaves
are found, when a leaf is complete, its fingerprint, and how a listed folder
remembers what it reported (:class:`Records`).

A sensor calls :func:`scan` once per tick with the state it got back last
time (:class:`TreeState`, the sensor cursor). Every tick is bounded, whatever
the size of the tree, and its work grows with what changed:

* It stats every folder down to the listed level and lists a folder only
  when it is new or its ctime changed. Adding, removing or renaming an entry
  changes its parent's ctime, which no copy tool can set back. Exact ctimes
  are kept only for folders changed at or after a watermark (``since``: the
  newest ctime seen, at most the tick's time, minus :data:`CLOCK_MARGIN_NS`);
  older folders count as changed when their ctime reaches the watermark.
  This assumes the filesystem's clock does not step back by more than the
  margin; the rolling rescan below catches whatever that misses.
* Listing a listed folder finds its leaves and asks its record
  (:class:`Records`) which are new or changed: the *candidates*.
* A candidate is *ready* when no file in it changed for ``quiet_s`` seconds
  (by ctime: :func:`probe`) and the tree says it is complete; until then it is
  *pending* and checked again every tick.
* At most ``cap`` ready leaves are reported per tick, oldest (least recently
  changed) first; the rest stay pending. Completeness, which may read the
  files, is asked of the quiet candidates in that order only until the cap
  is reached; the quiet ones left over are *deferred*. A quiet leaf found
  incomplete is remembered with its fingerprint (``incomplete``) and neither
  asked again nor counted against the cap until its fingerprint changes, so
  leaves that stay incomplete (a killed writer) cost one stat per tick and
  never starve the scan. With ``incomplete_after_s``, a leaf quiet for that
  long is ready whether complete or not (the tree's reader then names what
  is wrong with it); without it (None), an incomplete leaf waits for ever.
  With ``max_incomplete``, at most that many are remembered (those changed
  last): the older ones leave ``pending`` and ``incomplete`` and are probed
  again only when their folder is next listed (a change or the rolling
  rescan), so abandoned leaves do not grow the cursor without bound. This
  needs records that offer every unreported leaf again at each listing
  (:class:`NameDigest`), not :class:`Watermark`, whose folders forget a leaf
  that is not pending.
  A tick stops listing once it has that many candidates (known-incomplete
  ones left out), or has listed :data:`LIST_FACTOR` times as many leaves, so
  the first walk of a large tree spreads over many ticks (changed folders
  are listed oldest first).
* With ``ready_when_complete``, a candidate still inside its quiet period (a
  listed or pending one, or a watched one found changed) is asked too, after
  the quiet ones (oldest first, within the same cap; those it leaves over are
  *unasked*, as the quiet ones deferred): complete, and probed again unchanged
  (else it was written to while asked, and its fingerprint is stale), it is
  ready at once; incomplete, it stays pending, not remembered in
  ``incomplete`` (it is still changing) but in ``early_incomplete``, and is
  asked again at the first tick that finds its fingerprint changed (within
  ``max_incomplete``, those changed last; the others every tick); once quiet,
  the rules above apply. Safe only where ``is_complete`` holds only once the
  writer is done with every file (a ClusterCockpit job, parsed to its end; a
  GPU repetition written by ``joulehouse collect``, ``experiment_end`` last).
  Rechecked leaves still wait for their quiet period.
* Leaves to *recheck* (the caller's: those that failed downstream, by key,
  with the fingerprint they were reported with) are fingerprinted again
  every tick and reported again once their fingerprint differs and they are
  quiet, so a fix in place is found one tick after its quiet period, within
  the same cap.
* Leaves reported in the last ``watch_s`` seconds are *watched*: stat'ed
  every tick (no listing) and reported again when their record says they
  changed, so a rewrite soon after a report, which changes only the leaf's
  own folder, is found at once. At most ``max_watched`` are kept (the most
  recently reported).
* Files rewritten *in place* change no folder above the leaf. The rolling
  rescan re-lists a slice of the listed folders every tick, resuming where
  the last slice ended, sized so that every listed folder is re-listed once
  per ``full_rescan_s`` seconds (within the listing bound).

Nothing is reported for removed folders, and their records are forgotten
only once they stayed absent for :data:`FORGET_AFTER_S` (``gone``): a folder
that comes back within that time (a subtree moved away and back, a file
server that was briefly unreachable) is not reported again. Only a folder
that is not there (FileNotFoundError, and no entry of that name) is absent: one
that exists but cannot be stat'ed or listed (EIO, EACCES, ESTALE) keeps its
records and its name however long it stays so; it is *stuck* (``stuck``),
tried again every tick, and once readable it is listed, with the folders
below it down to the listed level, whatever their ctimes. It holds the
watermark back (so that what changed below it meanwhile still counts as
changed) for at most :data:`FORGET_AFTER_S`; past that, the watermark moves
on and the rolling rescan finds what changed in the listed folders below it
(new ones are listed anyway). A root that is
missing, lacks the tree's ``marker`` file, or lists no folder where the
state knew some (an unmounted file system's empty mount point) skips the
tick: the state is kept as it was and an InputError naming the root says
why; otherwise a remount would hand out every leaf again. Keys are posix
paths relative to the root; a listed folder's key is the first
``listed_level`` parts of its leaves' keys.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import json
import math
import os
import time
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from joulehouse.digest import file_stats_digest
from joulehouse.errors import InputError

CLOCK_MARGIN_NS = 60 * 10**9  # folders changed this long before the newest ctime seen
LIST_FACTOR = 10  # a tick lists at most LIST_FACTOR * cap leaves
FORGET_AFTER_S = 3600.0  # a folder's records are forgotten once it was absent this long (s)
DIGEST_HEX = 8


def probe(path: Path) -> tuple[int, str]:
    """``(last change in ns, fingerprint)`` of a leaf folder, from one listing of it.

    The last change is the latest ctime of the folder and the files directly in
    it, as :mod:`joulehouse.landing` takes it: every write, copy, rename or link
    sets a ctime to the file server's clock, so a copy that keeps the original
    mtimes (``cp -p``, ``rsync -a``) still waits, and one whose mtimes are ahead
    (copied from a node whose clock runs ahead, ``touch -d``) does not wait for
    them (an mtime counted too kept it pending until then). The
    fingerprint digests the files' names, sizes and mtimes (ns) in name order,
    the same digest as the layouts' ``fingerprint``. Reads no content;
    FileNotFoundError if the folder vanished, another OSError (PermissionError)
    if it cannot be read.
    """
    latest = path.stat().st_ctime_ns
    with os.scandir(path) as entries:
        files = sorted((e.name, e.stat()) for e in entries if e.is_file())
    for _, stat in files:
        latest = max(latest, stat.st_ctime_ns)
    return latest, file_stats_digest(files)


class Records(ABC):
    """How a listed folder remembers what was reported from it: one kind per tree.

    A record is immutable; every method returns a new one. ``horizon`` (ns) is
    the newest ctime seen so far in the tick minus :data:`CLOCK_MARGIN_NS`: any
    later change of the tree has a ctime at or after it.
    """

    @abstractmethod
    def empty(self) -> Any:
        """The record of a folder from which nothing was reported."""

    @abstractmethod
    def list(self, path: Path, leaves: list[str], record: Any, horizon: int
             ) -> tuple[Any, list[str], int]:
        """``(record, candidates, newest ctime seen)`` for the folder ``path`` listed now
        with ``leaves``: the leaves new or changed since reported."""

    @abstractmethod
    def reported(self, record: Any, leaf: str, old: str | None, new: str,
                 change_ns: int) -> Any:
        """``leaf`` (last changed at ``change_ns``), reported before with fingerprint
        ``old`` (None: never), is reported now with ``new``."""

    @abstractmethod
    def is_new(self, record: Any, leaf: str, fingerprint: str, change_ns: int) -> bool:
        """Whether the leaf as it is now (a watched one) is not reported yet."""

    @abstractmethod
    def knows(self, record: Any, leaf: str) -> bool:
        """Whether ``leaf`` may have been reported from this folder (to recheck it)."""

    @abstractmethod
    def encode(self, state: TreeState) -> dict:
        """The records of ``state.folders`` as JSON-ready entries of the cursor."""

    @abstractmethod
    def decode(self, payload: dict) -> dict[str, Any]:
        """The records :meth:`encode` wrote into ``payload``, by listed folder."""


@dataclass(frozen=True)
class Tree:
    """What differs between trees: their shape, leaves, completeness and records.

    ``children(path, level, errors)``: the sorted names of the folders in
    ``path`` (at ``level``, root = 0) that may lead to leaves; a folder that is
    missing has none. ``leaves(path, errors)``: the leaves of the listed
    folder ``path``, as posix paths relative to it. Both append an InputError
    to ``errors`` for what they refuse to follow (and go on). ``marker``: a
    file the root must hold to be scanned (None: the root must only exist).
    """

    listed_level: int
    children: Callable[[Path, int, list[InputError]], list[str]]
    leaves: Callable[[Path, list[InputError]], list[str]]
    is_complete: Callable[[Path], bool]
    records: Records
    marker: str | None = None


@dataclass
class TreeState:
    """What the last scan saw; serialised compactly with :meth:`to_json`.

    ``tree`` maps each folder above the listed level (posix path relative to
    the root, ``""`` for the root) to its sorted subfolder names; ``folders``
    holds the records of the listed folders listed at least once (one in
    ``tree`` but not in ``folders`` waits for its first listing); ``recent``
    the exact ctime (ns) of folders whose ctime is at or after ``since``;
    ``pending`` the keys of leaves seen but not reported yet; ``position`` the
    last listed folder of the rolling rescan and ``credit`` how many it may
    re-list (it grows with the time since ``last_tick``, the time of the last
    scan, s); ``watched`` the keys of leaves watched -> until when (s);
    ``incomplete`` the pending (or rechecked) leaves found quiet but incomplete
    -> the fingerprint they had then (not asked again while it stays);
    ``early_incomplete`` likewise the pending leaves found incomplete inside their quiet
    period (``ready_when_complete``), kept apart: ``incomplete`` counts the quiet ones;
    ``gone`` the folders absent but still remembered -> when first missed (s);
    ``stuck`` the folders that exist but could not be stat'ed or listed -> when
    first so (s): their records are kept and they are tried again every tick.

    A subclass per tree names its ``version`` and ``records``.
    """

    version: ClassVar[int]
    records: ClassVar[Records]

    tree: dict[str, list[str]] = field(default_factory=dict)
    folders: dict[str, Any] = field(default_factory=dict)
    recent: dict[str, int] = field(default_factory=dict)
    since: int = 0
    pending: set[str] = field(default_factory=set)
    position: str = ""
    credit: float = 0.0
    last_tick: float = 0.0
    watched: dict[str, int] = field(default_factory=dict)
    incomplete: dict[str, str] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)
    stuck: dict[str, float] = field(default_factory=dict)
    early_incomplete: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        """A compact string (zlib-compressed JSON, base64) for a sensor cursor."""
        payload = {"v": self.version, "tree": self.tree, "recent": self.recent,
                   "since": self.since, "pending": sorted(self.pending),
                   "position": self.position, "credit": self.credit,
                   "last_tick": self.last_tick, **self.records.encode(self)}
        if self.watched:
            payload["watched"] = self.watched
        if self.incomplete:
            payload["incomplete"] = self.incomplete
        if self.gone:
            payload["gone"] = self.gone
        if self.stuck:
            payload["stuck"] = self.stuck
        if self.early_incomplete:
            payload["early_incomplete"] = self.early_incomplete
        raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")

    @classmethod
    def from_json(cls, text: str | None) -> TreeState:
        """The state in ``text``; a fresh state for ``None``/empty or another version."""
        if not text:
            return cls()
        payload = json.loads(zlib.decompress(base64.b64decode(text)))
        if payload.get("v") != cls.version:
            return cls()
        return cls(payload["tree"], cls.records.decode(payload), payload["recent"],
                   payload["since"], set(payload["pending"]), payload["position"],
                   payload["credit"], payload["last_tick"], payload.get("watched", {}),
                   payload.get("incomplete", {}), payload.get("gone", {}),
                   payload.get("stuck", {}), payload.get("early_incomplete", {}))


@dataclass(frozen=True)
class Found:
    """A leaf new or changed since it was last reported, as probed: quiet (or, with
    ``ready_when_complete``, still inside its quiet period); ready once complete."""

    key: str
    fingerprint: str
    last_change: float  # s since the epoch
    change_ns: int


@dataclass(frozen=True)
class TreeResult:
    ready: list[Found]  # at most cap, oldest first
    state: TreeState
    pending: int  # leaves seen but not reported: not ready yet, or over the cap
    deferred: int  # of those, quiet ones left for later ticks by the cap (completeness not asked)
    unlisted: int  # listed folders new or changed but not listed yet (budget spent)
    rescanned: int  # listed folders re-listed by the rolling rescan this tick
    errors: list[InputError]  # what the walk refused to follow (it went on)
    incomplete: int = 0  # of the pending, quiet ones found incomplete (unchanged since)
    unasked: int = 0  # of the pending, ones inside their quiet period left by the cap (not asked)


def scan(tree: Tree, root: Path, state: TreeState, *, quiet_s: float, cap: int,
         full_rescan_s: float | None, recheck: Mapping[str, str], now: float | None = None,
         watch_s: float = 0.0, max_watched: int = 0,
         incomplete_after_s: float | None = None,
         max_incomplete: int | None = None, ready_when_complete: bool = False) -> TreeResult:
    """Scan ``root`` from ``state``; returns ready leaves and the new state.

    ``state`` is not modified. ``full_rescan_s=None`` disables the rolling
    rescan; ``0`` re-lists every listed folder each tick (within the bound).
    ``recheck``: leaf key -> the fingerprint it was reported with, to
    fingerprint again this tick. ``watch_s``/``max_watched``: how long and how
    many reported leaves to watch (0: none). ``incomplete_after_s``: a leaf
    quiet for this long is ready even if incomplete (None: never).
    ``max_incomplete``: how many leaves found incomplete to remember (None: all;
    only for :class:`NameDigest` records). ``ready_when_complete``: a candidate
    inside its quiet period is ready once complete (asked after the quiet ones,
    within the cap; incomplete, asked again once changed). See the module docstring.
    """
    unusable = _unusable(tree, root, state)
    if unusable is not None:
        return TreeResult([], state, len(state.pending), 0, 0, 0, [unusable],
                          len(state.incomplete))
    tick = _Tick(tree, root, state, quiet_s, cap, time.time() if now is None else now,
                 recheck, incomplete_after_s, ready_when_complete)
    return tick.run(full_rescan_s, watch_s, max_watched, max_incomplete)


def _unusable(tree: Tree, root: Path, state: TreeState) -> InputError | None:
    """Why the tick must skip ``root`` and keep ``state`` (module docstring), or None."""
    if not root.is_dir():
        return InputError(root, "the root is missing (not mounted?); tick skipped, state kept")
    if tree.marker is not None and not (root / tree.marker).is_file():
        return InputError(root, f"the root holds no {tree.marker} (not mounted?); tick "
                                "skipped, state kept")
    if state.tree.get(""):
        try:
            with os.scandir(root) as entries:
                if not any(entry.is_dir() for entry in entries):
                    return InputError(root, "the root holds no folder where the last scan "
                                            "saw some (not mounted?); tick skipped, state kept")
        except OSError as err:
            return InputError(root, f"cannot be read ({err.strerror or err}); tick skipped, "
                                    "state kept")
    return None


class _Tick:
    """One scan: walk the folders, list what changed within the budget, check candidates."""

    def __init__(self, tree: Tree, root: Path, old: TreeState, quiet_s: float, cap: int,
                 now: float, recheck: Mapping[str, str], incomplete_after_s: float | None,
                 ready_when_complete: bool):
        self.spec, self.root, self.old, self.quiet_s, self.cap = tree, root, old, quiet_s, cap
        self.now, self.recheck = now, recheck
        self.incomplete_after_s = incomplete_after_s
        self.ready_when_complete = ready_when_complete
        self.overdue: set[str] = set()  # quiet for incomplete_after_s: ready, complete or not
        self.early: dict[str, Found] = {}  # inside their quiet period: ready if complete
        self.records = tree.records
        self.new = type(old)(since=old.since, position=old.position, credit=old.credit,
                             last_tick=now)
        self.newest = 0  # largest ctime seen this tick
        self.to_list: list[tuple[int, str]] = []  # (ctime, listed folder): new or changed
        self.errors: list[InputError] = []
        self.unread: list[int] = []  # ctimes of changed folders that could not be listed
        self.kept: set[str] = set()  # pending leaves of absent folders still remembered
        self.changes: dict[str, int] = {}  # leaf key -> last change (ns), probed this tick

    def run(self, full_rescan_s: float | None, watch_s: float, max_watched: int,
            max_incomplete: int | None) -> TreeResult:
        self._walk("", 0)
        checked: dict[str, Found | None] = {}
        self._check_all([k for k in sorted(self.old.pending) if self._folder(k) in
                         self.new.folders], checked, self.ready_when_complete)
        self._recheck(checked)
        self._watch(checked)
        budget = self.cap - sum(r is not None for r in checked.values())
        listed = 0
        changed = sorted(self.to_list)
        rescan = self._rescan_slice(full_rescan_s, {rel for _, rel in changed})
        queue = [*((c, rel, False) for c, rel in changed), *((0, rel, True) for rel in rescan)]
        done = 0
        for ctime, rel, rescanning in queue:
            if budget <= 0 or listed >= LIST_FACTOR * self.cap:
                break
            done += 1
            listing = self._list(rel)
            if listing is None:
                if not rescanning:
                    self._stuck(rel, ctime)
                continue
            candidates, size = listing
            listed += size
            if rescanning:
                self.new.position = rel
            else:
                self.new.recent[rel] = ctime
            self._check_all([k for k in candidates if k not in checked], checked,
                            self.ready_when_complete)
            budget -= sum(k not in self.new.incomplete for k in candidates)
        rescanned = sum(rescanning for _, _, rescanning in queue[:done])
        self.new.credit = max(0.0, self.new.credit - rescanned)
        waiting = [(c, rel) for c, rel, rescanning in queue[done:] if not rescanning]
        ready, left = self._complete(checked)
        deferred = [r for r in left if r.key not in self.early]
        for found in ready:
            self._reported(found, watch_s)
        # Rechecked leaves come back through ``recheck``, not ``pending``.
        self.new.pending = {k for k, r in checked.items() if r is None and k not in self.recheck}
        self.new.pending.update(r.key for r in deferred if r.key not in self.recheck)
        self.new.pending.update(self.kept)
        self.new.incomplete.update((k, self.old.incomplete[k]) for k in self.kept
                                   if k in self.old.incomplete)
        self._prune_incomplete(max_incomplete)
        incomplete = sum(k in self.new.incomplete for k in self.new.pending)
        self.new.stuck.update((rel, self.old.stuck[rel]) for _, rel in waiting
                              if rel in self.old.stuck)  # not tried this tick: still stuck
        self._advance_watermark([max(c, self.old.since) for c, rel in waiting
                                 if rel in self.old.folders] + self.unread)
        self._prune_watched(max_watched)
        return TreeResult(ready, self.new, len(self.new.pending), len(deferred), len(waiting),
                          rescanned, self.errors, incomplete, len(left) - len(deferred))

    def _complete(self, checked: dict) -> tuple[list[Found], list[Found]]:
        """``(ready, left)``: the quiet candidates, then those inside their quiet period
        (``early``), oldest first, that are complete, up to the cap; and those left over by
        the cap, not asked.

        Completeness may read the files (a ClusterCockpit job's are parsed to
        the end), so it is asked of no more candidates than the cap needs; an
        incomplete quiet one becomes ``None`` in ``checked`` (pending) and is remembered
        in ``incomplete`` with its fingerprint; an incomplete early one stays pending,
        remembered in ``early_incomplete``. A complete early one is ready only if a
        second probe finds it unchanged (:meth:`_unchanged`); else it stays pending. A
        quiet candidate changed before every early one, so sorting by last change puts
        the quiet ones first.
        """
        quiet = [r for r in checked.values() if r is not None]
        order = sorted([*quiet, *self.early.values()], key=lambda r: (r.last_change, r.key))
        ready: list[Found] = []
        for index, found in enumerate(order):
            if len(ready) == self.cap:
                return ready, order[index:]
            if found.key in self.overdue or self.spec.is_complete(self.root / found.key):
                if found.key in self.early and not self._unchanged(found):
                    continue  # written to since its probe: pending, asked again next tick
                ready.append(found)
                checked[found.key] = found
            elif found.key in self.early:
                self.new.early_incomplete[found.key] = found.fingerprint
            else:
                checked[found.key] = None
                self.new.incomplete[found.key] = found.fingerprint
        return ready, []

    def _unchanged(self, found: Found) -> bool:
        """Whether the leaf is still as ``found`` probed it. A leaf inside its quiet period
        is often written to between its probe and the ask (``experiment_end``, the end of
        ``meta.json``); handed out with the fingerprint of the state before, it would be
        found changed, and handed out again, at a later tick."""
        try:
            return probe(self.root / found.key)[1] == found.fingerprint
        except OSError:  # vanished or unreadable: the next tick's probe says which
            return False

    def _folder(self, key: str) -> str:
        return "/".join(key.split("/")[:self.spec.listed_level])

    def _leaf(self, key: str) -> tuple[str, str]:
        parts = key.split("/")
        level = self.spec.listed_level
        return "/".join(parts[:level]), "/".join(parts[level:])

    def _reported(self, found: Found, watch_s: float) -> None:
        folder, leaf = self._leaf(found.key)
        self.new.folders[folder] = self.records.reported(
            self.new.folders[folder], leaf, self.recheck.get(found.key), found.fingerprint,
            found.change_ns)
        if watch_s > 0:
            self.new.watched[found.key] = math.ceil(self.now + watch_s)

    def _recheck(self, checked: dict) -> None:
        """Fingerprint the reported leaves to recheck; keep those changed (or not quiet)."""
        keys = []
        for key in sorted(self.recheck):
            folder, leaf = self._leaf(key)
            if key not in checked and folder in self.new.folders and self.records.knows(
                    self.new.folders[folder], leaf):
                keys.append(key)
        self._check_all(keys, checked)
        for key in keys:
            found = checked.get(key)
            if found is not None and found.fingerprint == self.recheck[key]:
                del checked[key]  # unchanged: still the version that failed

    def _watch(self, checked: dict) -> None:
        """Stat the watched leaves; check those their record no longer matches."""
        changed = []
        for key, until in self.old.watched.items():
            folder, leaf = self._leaf(key)
            if until <= self.now or folder not in self.new.folders:
                continue
            try:
                change_ns, fingerprint_ = probe(self.root / key)
            except FileNotFoundError:
                continue
            except OSError as err:
                self._unreadable(self.root / key, err)
                continue
            self.new.watched[key] = until
            if key not in checked and self.records.is_new(self.new.folders[folder], leaf,
                                                          fingerprint_, change_ns):
                changed.append(key)
        self._check_all(sorted(changed), checked, self.ready_when_complete)

    def _prune_incomplete(self, max_incomplete: int | None) -> None:
        """Keep the ``max_incomplete`` incomplete leaves changed last, quiet ones and early
        ones each; the other quiet ones (those not probed this tick first) are forgotten
        until their folder is listed again, the other early ones are asked every tick."""
        if max_incomplete is None:
            return
        for key in self._but_newest(self.new.incomplete, max_incomplete):
            del self.new.incomplete[key]
            self.new.pending.discard(key)
        for key in self._but_newest(self.new.early_incomplete, max_incomplete):
            del self.new.early_incomplete[key]

    def _but_newest(self, leaves: Iterable[str], kept: int) -> list[str]:
        """The keys of ``leaves`` but the ``kept`` changed last (probed this tick first)."""
        by_age = sorted(leaves, key=lambda k: (self.changes.get(k, 0), k))
        return by_age[:max(0, len(by_age) - kept)]

    def _prune_watched(self, max_watched: int) -> None:
        """Keep the ``max_watched`` watched leaves reported last (the latest ends)."""
        if len(self.new.watched) > max_watched:
            kept = sorted(self.new.watched.items(), key=lambda item: (-item[1], item[0]))
            self.new.watched = dict(kept[:max_watched])

    def _walk(self, rel: str, level: int, forced: bool = False) -> bool:
        """Stat ``rel`` and the folders below it down to the listed folders; False if it
        is absent and forgotten. ``forced``: list ``rel`` whatever its ctime (below a
        folder that was stuck, changes may predate the watermark)."""
        path = self.root / rel if rel else self.root
        try:
            ctime = path.stat().st_ctime_ns
        except OSError as err:
            if isinstance(err, FileNotFoundError) and not os.path.lexists(path):
                return self._vanished(rel)
            self._unreadable(path, err)  # there but unreadable (EIO, EACCES, ESTALE): kept
            self._stuck(rel, self.old.since)
            self._keep(rel)
            return True
        self._saw(ctime)
        forced = forced or rel in self.old.stuck
        changed = forced or ctime >= self.old.since and self.old.recent.get(rel) != ctime
        if level == self.spec.listed_level:
            if rel in self.old.folders:
                self.new.folders[rel] = self.old.folders[rel]
            if changed or rel not in self.old.folders:
                self.to_list.append((ctime, rel))
            elif rel in self.old.recent:
                self.new.recent[rel] = ctime
            return True
        children, listed = self.old.tree.get(rel, []), True
        if changed or rel not in self.old.tree:
            try:
                children = self.spec.children(path, level, self.errors)
            except OSError as err:  # unreadable now: the children seen last, if any
                self._unreadable(path, err)
                self._stuck(rel, ctime)  # still changed next tick
                listed = False
        if listed:
            self.new.recent[rel] = ctime
        absent = [name for name in self.old.tree.get(rel, [])
                  if name not in children and not os.path.lexists(path / name)]
        below = forced and level + 1 < self.spec.listed_level  # listed ones: rolling rescan
        self.new.tree[rel] = [name for name in sorted({*children, *absent})
                              if self._walk(f"{rel}/{name}" if rel else name, level + 1, below)]
        return True

    def _vanished(self, rel: str) -> bool:
        """Keep the records of the absent folder ``rel`` (and its pending leaves) until it
        was absent for :data:`FORGET_AFTER_S`; True while kept."""
        if rel not in self.old.tree and rel not in self.old.folders:
            return False
        first = self.old.gone.get(rel, self.now)
        if self.now - first >= FORGET_AFTER_S:
            return False
        self.new.gone[rel] = first
        self._keep(rel)
        return True

    def _keep(self, rel: str) -> None:
        """Keep the old records of ``rel`` and below, and the pending leaves below it."""
        prefix = f"{rel}/"
        for old, new in ((self.old.tree, self.new.tree), (self.old.folders, self.new.folders)):
            new.update((k, v) for k, v in old.items() if k == rel or k.startswith(prefix))
        self.kept.update(k for k in self.old.pending if k.startswith(prefix))

    def _stuck(self, rel: str, ctime: int) -> None:
        """``rel`` exists but could not be stat'ed or listed: try it again every tick
        (``stuck``), and keep ``since`` at or before ``ctime`` (or the old watermark)
        so that what changed below it meanwhile still counts as changed, for at most
        :data:`FORGET_AFTER_S` (else ``recent`` would grow with every later change)."""
        first = self.new.stuck[rel] = self.old.stuck.get(rel, self.now)
        if self.now - first < FORGET_AFTER_S:
            self.unread.append(max(ctime, self.old.since))

    def _rescan_slice(self, full_rescan_s: float | None, skip: set[str]) -> list[str]:
        """The next listed folders after ``position`` (wrapping).

        The credit grows by ``len(folders) * elapsed / full_rescan_s`` (at most
        one pass), so every listed folder is re-listed once per ``full_rescan_s``.
        """
        folders = sorted(rel for rel in self.new.folders if rel not in skip)
        if full_rescan_s is None or not folders or not self.old.last_tick:
            self.new.credit = 0.0
            return []
        share = 1.0 if full_rescan_s <= 0 else (self.now - self.old.last_tick) / full_rescan_s
        self.new.credit = min(len(folders), self.old.credit + len(folders) * max(share, 0.0))
        start = bisect.bisect_right(folders, self.old.position)
        return (folders[start:] + folders[:start])[:math.floor(self.new.credit)]

    def _list(self, rel: str) -> tuple[list[str], int] | None:
        """List a listed folder: the keys of its candidates, and how many leaves it holds;
        ``None`` (its record kept, the error in ``errors``) if it cannot be read."""
        path = self.root / rel
        try:
            leaves = self.spec.leaves(path, self.errors)
        except OSError as err:  # unreadable now: its record kept, listed again next time
            self._unreadable(path, err)
            return None
        record, candidates, newest = self.records.list(
            path, leaves, self.new.folders.get(rel, self.records.empty()),
            self.newest - CLOCK_MARGIN_NS)
        self._saw(newest)
        self.new.folders[rel] = record
        return [f"{rel}/{leaf}" for leaf in candidates], len(leaves)

    def _check_all(self, keys: Iterable[str], checked: dict, ask_early: bool = False) -> None:
        """Quiet -> :class:`Found` (complete or not: :meth:`_complete` asks; quiet for
        ``incomplete_after_s``: in ``overdue``, not asked); not quiet, or found incomplete
        before as it is now (and not overdue), or unreadable (reported in ``errors``) ->
        ``None``; vanished -> left out. With ``ask_early``, a leaf not quiet is also put in
        ``self.early``, for :meth:`_complete` to ask, unless found incomplete before as it
        is now (``early_incomplete``)."""
        for key in keys:
            try:
                change_ns, fingerprint_ = probe(self.root / key)
            except FileNotFoundError:
                continue
            except OSError as err:
                self._unreadable(self.root / key, err)
                checked[key] = None
                continue
            self.changes[key] = change_ns
            last_change = change_ns / 1e9
            quiet_for = self.now - last_change
            overdue = (self.incomplete_after_s is not None
                       and quiet_for >= max(self.incomplete_after_s, self.quiet_s))
            if quiet_for < self.quiet_s:
                checked[key] = None
                if ask_early and self.old.early_incomplete.get(key) == fingerprint_:
                    self.new.early_incomplete[key] = fingerprint_  # as when found incomplete
                elif ask_early:
                    self.early[key] = Found(key, fingerprint_, last_change, change_ns)
            elif not overdue and self.old.incomplete.get(key) == fingerprint_:
                checked[key] = None
                self.new.incomplete[key] = fingerprint_
            else:
                checked[key] = Found(key, fingerprint_, last_change, change_ns)
                if overdue:
                    self.overdue.add(key)

    def _unreadable(self, path: Path, err: OSError) -> None:
        self.errors.append(InputError(path, f"cannot be read ({err.strerror or err}); "
                                            "skipped this tick"))

    def _saw(self, ctime_ns: int) -> None:
        """Count ``ctime_ns`` into the newest ctime seen, at most the tick's time: a ctime
        ahead (a file server's clock ahead, then set back) must not carry the watermark
        past the changes that follow (as :class:`joulehouse.landing.LandingState`)."""
        self.newest = max(self.newest, min(ctime_ns, int(self.now * 1e9)))

    def _advance_watermark(self, deferred_ctimes: list[int]) -> None:
        """Move ``since`` up to the newest ctime minus the margin, but not past a deferred
        changed folder (it must still count as changed next tick); prune ``recent``."""
        since = max(self.old.since, self.newest - CLOCK_MARGIN_NS)
        since = min([since, *deferred_ctimes])
        self.new.since = since
        self.new.recent = {rel: c for rel, c in self.new.recent.items() if c >= since}


def _pair_hash(name: str, fingerprint: str) -> int:
    return int(hashlib.sha1(f"{name}\0{fingerprint}".encode()).hexdigest()[:DIGEST_HEX], 16)


@dataclass(frozen=True)
class Reported:
    """What was reported from one listed folder of few leaves (:class:`NameDigest`).

    Invariant: ``digest`` is the XOR of :func:`_pair_hash` over ``names``, each
    with the fingerprint it had when it was reported; a pending leaf is never
    in ``names``.
    """

    names: frozenset[str] = frozenset()
    digest: int = 0

    def add(self, name: str, fingerprint: str) -> Reported:
        return Reported(self.names | {name}, self.digest ^ _pair_hash(name, fingerprint))

    def replace(self, name: str, old: str, new: str) -> Reported:
        """``name``, reported with fingerprint ``old``, now reported with ``new``."""
        return Reported(self.names, self.digest ^ _pair_hash(name, old) ^ _pair_hash(name, new))


class NameDigest(Records):
    """Records for listed folders of a few leaves each (GPU run folders: 5-20).

    A folder keeps the names of the leaves reported and ONE digest of their
    (name, fingerprint) pairs (about 7 bytes per folder in the cursor). A
    listing re-fingerprints the reported leaves; if the digest differs (a leaf
    rewritten, replaced or removed) every leaf of the folder is reported again,
    as the record cannot tell which one changed. New names are candidates.
    In the cursor, names and digests are stored per parent, aligned with
    ``tree`` (``None`` for a folder not listed yet).
    """

    def __init__(self, listed_level: int):
        self.listed_level = listed_level

    def empty(self) -> Reported:
        return Reported()

    def list(self, path, leaves, record, horizon):
        if not record.names <= set(leaves) or record.digest != _digest(path, record.names):
            record = Reported()
        return record, [name for name in leaves if name not in record.names], 0

    def reported(self, record, leaf, old, new, change_ns):
        return record.replace(leaf, old, new) if leaf in record.names else record.add(leaf, new)

    def is_new(self, record, leaf, fingerprint, change_ns):
        return leaf not in record.names

    def knows(self, record, leaf):
        return leaf in record.names

    def encode(self, state):
        names, digests = {}, {}
        for parent, children in state.tree.items():
            if parent.count("/") != self.listed_level - 2 or not parent:
                continue
            folders = [state.folders.get(f"{parent}/{child}") for child in children]
            names[parent] = [None if f is None else "/".join(sorted(f.names)) for f in folders]
            digests[parent] = "".join(f"{0 if f is None else f.digest:0{DIGEST_HEX}x}"
                                      for f in folders)
        return {"names": names, "digests": digests}

    def decode(self, payload):
        folders = {}
        for parent, folder_names in payload["names"].items():
            digests = payload["digests"][parent]
            for i, (child, joined) in enumerate(zip(payload["tree"][parent], folder_names)):
                if joined is not None:
                    digest = int(digests[i * DIGEST_HEX:(i + 1) * DIGEST_HEX], 16)
                    folders[f"{parent}/{child}"] = Reported(
                        frozenset(joined.split("/")) if joined else frozenset(), digest)
        return folders


def _digest(path: Path, names: Iterable[str]) -> int | None:
    """XOR of the pair hashes of ``names`` as they are now; ``None`` if one vanished or
    cannot be read."""
    digest = 0
    try:
        for name in names:
            digest ^= _pair_hash(name, probe(path / name)[1])
    except OSError:
        return None
    return digest


@dataclass(frozen=True)
class Mark:
    """What was reported from one listed folder of many leaves (:class:`Watermark`).

    Invariant: every leaf whose last change (ns) is before ``through`` was
    reported as it is now, or is pending (in the state's ``pending``), or is
    not ready to be; ``seen`` holds the leaves reported whose last change is
    at or after ``through``, with the fingerprint they were reported with.
    """

    through: int = 0
    seen: Mapping[str, str] = field(default_factory=dict)


class Watermark(Records):
    """Records for listed folders of many leaves (ClusterCockpit blocks: up to 1,000 jobs).

    A folder keeps no name per leaf: only a time, ``through`` (ns), and the few
    leaves reported that changed at or after it. A listing probes every leaf
    (a stat of the folder and its files, no content) and takes as candidates
    those changed at or after ``through`` and not seen as they are; it then
    moves ``through`` up to the tick's horizon (the newest ctime seen minus
    the clock margin). A leaf changed after a listing has a later ctime, so
    it is a candidate at the next listing, however old the folder.
    """

    def empty(self) -> Mark:
        return Mark()

    def list(self, path, leaves, record, horizon):
        through = max(record.through, horizon)
        candidates, seen, newest = [], {}, 0
        for leaf in leaves:
            try:
                change_ns, fingerprint = probe(path / leaf)
            except FileNotFoundError:
                continue
            except OSError:  # unreadable: the tick's check keeps it pending and reports it
                candidates.append(leaf)
                continue
            newest = max(newest, change_ns)
            if self.is_new(record, leaf, fingerprint, change_ns):
                candidates.append(leaf)
            elif change_ns >= through:
                seen[leaf] = fingerprint
        return Mark(through, seen), candidates, newest

    def reported(self, record, leaf, old, new, change_ns):
        if change_ns < record.through:
            return record
        return Mark(record.through, {**record.seen, leaf: new})

    def is_new(self, record, leaf, fingerprint, change_ns):
        return change_ns >= record.through and record.seen.get(leaf) != fingerprint

    def knows(self, record, leaf):
        return True

    def encode(self, state):
        return {"marks": {rel: [m.through, dict(m.seen)] if m.seen else [m.through]
                          for rel, m in state.folders.items()}}

    def decode(self, payload):
        return {rel: Mark(entry[0], entry[1] if len(entry) > 1 else {})
                for rel, entry in payload["marks"].items()}
