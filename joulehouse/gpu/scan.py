"""Incremental, bounded scan of a data root: which repetitions are new or changed and ready.

A sensor calls :func:`scan` once per tick with the state it got back last
time (:class:`ScanState`, the sensor cursor). Every tick is bounded, whatever
the size of the tree, and its work grows with what changed:

* It stats every folder above the repetitions (root, experiment, benchmark,
  run: about one per ten repetitions) and lists a folder only when it is new
  or its ctime changed. Adding, removing or renaming a repetition changes its
  run folder's ctime, which no copy tool can set back. Exact ctimes are kept
  only for folders changed at or after a watermark (``since``: the newest
  ctime seen minus :data:`CLOCK_MARGIN_NS`); older folders count as changed
  when their ctime reaches the watermark. This assumes the filesystem's
  clock does not step back by more than the margin; the rolling rescan
  below catches whatever that misses.
* Per listed run folder the state keeps the names of the repetitions already
  reported and ONE digest of their (name, fingerprint) pairs, not a
  fingerprint per repetition (about 7 bytes per run folder in the cursor).
  A listing re-fingerprints the reported repetitions; if the digest differs
  (a repetition rewritten, replaced or removed) every repetition of that run
  folder (typically 5-20) is reported again, as the state cannot tell which
  one changed. New names are reported once ready.
* A repetition is *ready* when its ``timestamps.csv`` has ``experiment_end``
  and no file in it changed for ``quiet_s`` seconds (mtime or ctime); until
  then it is *pending* and checked again every tick.
* At most ``max_repetitions`` ready repetitions are reported per tick, oldest
  (least recently changed) first; the rest stay pending. A tick stops listing
  run folders once it has that many candidates, or has listed
  :data:`LIST_FACTOR` times as many repetitions, so the first walk of a large
  tree spreads over many ticks (unlisted folders are listed oldest first).
* Repetitions to *recheck* (the caller's: those that failed downstream, by
  key, with the fingerprint they were reported with) are fingerprinted again
  every tick and reported again once their fingerprint differs and they are
  quiet, so a fix in place is found one tick after its quiet period, within
  the same cap; their run folder's digest follows the new fingerprint.
* Files rewritten *in place* change neither a run folder nor a repetition
  name. The rolling rescan re-lists a slice of the listed run folders every
  tick, resuming where the last slice ended, sized so that every run folder
  is re-listed once per ``full_rescan_s`` seconds (within the listing bound).

Removed folders are forgotten; nothing is reported for them.
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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from joulehouse.gpu.layout import RepetitionRef, fingerprint, is_complete, subdirs

RUN_LEVEL = 3  # root "" = 0, experiment = 1, benchmark = 2, run = 3, repetition = 4
STATE_VERSION = 2
CLOCK_MARGIN_NS = 60 * 10**9  # folders changed this long before the newest ctime seen
LIST_FACTOR = 10  # a tick lists at most LIST_FACTOR * max_repetitions repetitions
DIGEST_HEX = 8


@dataclass(frozen=True)
class RunFolder:
    """What was reported from one run folder.

    Invariant: ``digest`` is the XOR of :func:`_pair_hash` over ``names``, each
    with the fingerprint it had when it was reported; a pending repetition is
    never in ``names``.
    """

    names: frozenset[str] = frozenset()
    digest: int = 0

    def add(self, name: str, fingerprint_: str) -> RunFolder:
        return RunFolder(self.names | {name}, self.digest ^ _pair_hash(name, fingerprint_))

    def replace(self, name: str, old: str, new: str) -> RunFolder:
        """``name``, reported with fingerprint ``old``, now reported with ``new``."""
        return RunFolder(self.names, self.digest ^ _pair_hash(name, old) ^ _pair_hash(name, new))


@dataclass
class ScanState:
    """What the last scan saw; serialised compactly with :meth:`to_json`.

    ``tree`` maps each folder above the run folders (posix path relative to
    the root, ``""`` for the root) to its sorted subfolder names; ``runs``
    holds the run folders listed at least once (a run folder in ``tree`` but
    not in ``runs`` waits for its first listing); ``recent`` the exact ctime
    (ns) of folders whose ctime is at or after ``since``; ``pending`` the keys
    of repetitions seen but not reported yet; ``position`` the last run folder
    of the rolling rescan and ``credit`` how many run folders it may re-list
    (it grows with the time since ``last_tick``, the time of the last scan).
    """

    tree: dict[str, list[str]] = field(default_factory=dict)
    runs: dict[str, RunFolder] = field(default_factory=dict)
    recent: dict[str, int] = field(default_factory=dict)
    since: int = 0
    pending: set[str] = field(default_factory=set)
    position: str = ""
    credit: float = 0.0
    last_tick: float = 0.0

    def to_json(self) -> str:
        """A compact string (zlib-compressed JSON, base64) for a sensor cursor.

        Run folders are stored per parent, aligned with ``tree``: their
        reported names (``None`` for not listed yet) and one hex string of
        their digests.
        """
        names, digests = {}, {}
        for parent, children in self.tree.items():
            if parent.count("/") != RUN_LEVEL - 2 or not parent:
                continue
            folders = [self.runs.get(f"{parent}/{child}") for child in children]
            names[parent] = [None if f is None else "/".join(sorted(f.names)) for f in folders]
            digests[parent] = "".join(f"{0 if f is None else f.digest:0{DIGEST_HEX}x}"
                                      for f in folders)
        payload = {"v": STATE_VERSION, "tree": self.tree, "names": names, "digests": digests,
                   "recent": self.recent, "since": self.since, "pending": sorted(self.pending),
                   "position": self.position, "credit": self.credit,
                   "last_tick": self.last_tick}
        raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")

    @classmethod
    def from_json(cls, text: str | None) -> ScanState:
        """The state in ``text``; a fresh state for ``None``/empty or another version."""
        if not text:
            return cls()
        payload = json.loads(zlib.decompress(base64.b64decode(text)))
        if payload.get("v") != STATE_VERSION:
            return cls()
        runs = {}
        for parent, folder_names in payload["names"].items():
            digests = payload["digests"][parent]
            for i, (child, joined) in enumerate(zip(payload["tree"][parent], folder_names)):
                if joined is not None:
                    digest = int(digests[i * DIGEST_HEX:(i + 1) * DIGEST_HEX], 16)
                    runs[f"{parent}/{child}"] = RunFolder(
                        frozenset(joined.split("/")) if joined else frozenset(), digest)
        return cls(payload["tree"], runs, payload["recent"], payload["since"],
                   set(payload["pending"]), payload["position"], payload["credit"],
                   payload["last_tick"])


@dataclass(frozen=True)
class ReadyRepetition:
    """A complete, quiet repetition that is new or changed since it was last reported."""

    ref: RepetitionRef
    fingerprint: str
    last_change: float


@dataclass(frozen=True)
class ScanResult:
    ready: list[ReadyRepetition]  # at most max_repetitions, oldest first
    state: ScanState
    pending: int  # repetitions seen but not reported: not ready yet, or over the cap
    deferred: int  # of those, ready ones left for later ticks by the cap
    unlisted: int  # run folders new or changed but not listed yet (budget spent)
    rescanned: int  # run folders re-listed by the rolling rescan this tick


def scan(
    data_root: str | os.PathLike[str],
    state: ScanState,
    *,
    quiet_s: float = 60.0,
    full_rescan_s: float | None = 3600.0,
    max_repetitions: int = 500,
    now: float | None = None,
    recheck: Mapping[str, str] | None = None,
) -> ScanResult:
    """Scan ``data_root`` from ``state``; returns ready repetitions and the new state.

    ``state`` is not modified. ``full_rescan_s=None`` disables the rolling
    rescan; ``0`` re-lists every run folder each tick (within the bound).
    ``recheck``: repetition key -> the fingerprint it was reported with, to
    fingerprint again this tick (see the module docstring).
    """
    return _Tick(Path(data_root), state, quiet_s, max_repetitions,
                 time.time() if now is None else now, recheck or {}).run(full_rescan_s)


class _Tick:
    """One scan: walk the folders, list what changed within the budget, check candidates."""

    def __init__(self, root: Path, old: ScanState, quiet_s: float, cap: int, now: float,
                 recheck: Mapping[str, str]):
        self.root, self.old, self.quiet_s, self.cap, self.now = root, old, quiet_s, cap, now
        self.recheck = recheck
        self.new = ScanState(since=old.since, position=old.position, credit=old.credit,
                             last_tick=now)
        self.newest = 0  # largest ctime seen this tick
        self.to_list: list[tuple[int, str]] = []  # (ctime, run folder): new or changed

    def run(self, full_rescan_s: float | None) -> ScanResult:
        self._walk("", 0)
        checked: dict[str, ReadyRepetition | None] = {}
        self._check_all([k for k in self.old.pending
                         if k.rpartition("/")[0] in self.new.runs], checked)
        self._recheck(checked)
        budget = self.cap - sum(r is not None for r in checked.values())
        listed = 0
        changed = sorted(self.to_list)
        rescan = self._rescan_slice(full_rescan_s, {rel for _, rel in changed})
        queue = [*((c, rel, False) for c, rel in changed), *((0, rel, True) for rel in rescan)]
        done = 0
        for ctime, rel, rescanning in queue:
            if budget <= 0 or listed >= LIST_FACTOR * self.cap:
                break
            candidates, size = self._list_run(rel)
            listed += size
            budget -= len(candidates)
            if rescanning:
                self.new.position = rel
            else:
                self.new.recent[rel] = ctime
            self._check_all([k for k in candidates if k not in checked], checked)
            done += 1
        rescanned = sum(rescanning for _, _, rescanning in queue[:done])
        self.new.credit = max(0.0, self.new.credit - rescanned)
        waiting = [(c, rel) for c, rel, rescanning in queue[done:] if not rescanning]
        ready = sorted((r for r in checked.values() if r is not None),
                       key=lambda r: (r.last_change, r.ref.key))
        for found in ready[:self.cap]:
            run_dir, _, name = found.ref.key.rpartition("/")
            folder = self.new.runs[run_dir]
            self.new.runs[run_dir] = (
                folder.replace(name, self.recheck[found.ref.key], found.fingerprint)
                if name in folder.names else folder.add(name, found.fingerprint))
        # Rechecked repetitions come back through ``recheck``, not ``pending``.
        self.new.pending = {k for k, r in checked.items() if r is None and k not in self.recheck}
        self.new.pending.update(r.ref.key for r in ready[self.cap:]
                                if r.ref.key not in self.recheck)
        self._advance_watermark([c for c, rel in waiting if rel in self.old.runs])
        return ScanResult(ready[:self.cap], self.new, len(self.new.pending),
                          len(ready) - len(ready[:self.cap]), len(waiting), rescanned)

    def _recheck(self, checked: dict) -> None:
        """Fingerprint the reported repetitions to recheck; keep those changed (or not quiet)."""
        keys = [key for key, _ in sorted(self.recheck.items()) if key not in checked
                and key.rpartition("/")[2] in self.new.runs.get(key.rpartition("/")[0],
                                                                RunFolder()).names]
        self._check_all(keys, checked)
        for key in keys:
            found = checked.get(key)
            if found is not None and found.fingerprint == self.recheck[key]:
                del checked[key]  # unchanged: still the version that failed

    def _walk(self, rel: str, level: int) -> None:
        """Stat ``rel`` and the folders below it down to the run folders."""
        path = self.root / rel if rel else self.root
        try:
            ctime = path.stat().st_ctime_ns
        except FileNotFoundError:
            return
        self.newest = max(self.newest, ctime)
        changed = ctime >= self.old.since and self.old.recent.get(rel) != ctime
        if level == RUN_LEVEL:
            if rel in self.old.runs:
                self.new.runs[rel] = self.old.runs[rel]
            if changed or rel not in self.old.runs:
                self.to_list.append((ctime, rel))
            elif rel in self.old.recent:
                self.new.recent[rel] = ctime
            return
        if changed or rel not in self.old.tree:
            children = subdirs(path, missing_ok=True)
        else:
            children = self.old.tree[rel]
        self.new.tree[rel] = children
        self.new.recent[rel] = ctime
        for name in children:
            self._walk(_join(rel, name), level + 1)

    def _rescan_slice(self, full_rescan_s: float | None, skip: set[str]) -> list[str]:
        """The next listed run folders after ``position`` (wrapping).

        The credit grows by ``len(folders) * elapsed / full_rescan_s`` (at most
        one pass), so every run folder is re-listed once per ``full_rescan_s``.
        """
        folders = sorted(rel for rel in self.new.runs if rel not in skip)
        if full_rescan_s is None or not folders or not self.old.last_tick:
            self.new.credit = 0.0
            return []
        share = 1.0 if full_rescan_s <= 0 else (self.now - self.old.last_tick) / full_rescan_s
        self.new.credit = min(len(folders), self.old.credit + len(folders) * max(share, 0.0))
        start = bisect.bisect_right(folders, self.old.position)
        return (folders[start:] + folders[:start])[:math.floor(self.new.credit)]

    def _list_run(self, rel: str) -> tuple[list[str], int]:
        """List a run folder: the keys to check, and how many repetitions it holds.

        New names are to check; the reported ones too when their digest no
        longer matches (the folder's record then starts afresh).
        """
        path = self.root / rel
        names = subdirs(path, missing_ok=True)
        folder = self.new.runs.get(rel, RunFolder())
        if not folder.names <= set(names) or folder.digest != _digest(path, folder.names):
            folder = RunFolder()
        self.new.runs[rel] = folder
        return [f"{rel}/{name}" for name in names if name not in folder.names], len(names)

    def _check_all(self, keys: Iterable[str], checked: dict) -> None:
        """Ready -> :class:`ReadyRepetition`; not ready -> ``None``; vanished -> left out."""
        for key in keys:
            path = self.root / key
            try:
                last_change = _last_change(path)
                if not is_complete(path) or self.now - last_change < self.quiet_s:
                    checked[key] = None
                else:
                    checked[key] = ReadyRepetition(RepetitionRef.from_key(self.root, key),
                                                   fingerprint(path), last_change)
            except FileNotFoundError:
                continue

    def _advance_watermark(self, deferred_ctimes: list[int]) -> None:
        """Move ``since`` up to the newest ctime minus the margin, but not past a deferred
        changed folder (it must still count as changed next tick); prune ``recent``."""
        since = max(self.old.since, self.newest - CLOCK_MARGIN_NS)
        since = min([since, *deferred_ctimes])
        self.new.since = since
        self.new.recent = {rel: c for rel, c in self.new.recent.items() if c >= since}


def _pair_hash(name: str, fingerprint_: str) -> int:
    return int(hashlib.sha1(f"{name}\0{fingerprint_}".encode()).hexdigest()[:DIGEST_HEX], 16)


def _digest(run_path: Path, names: Iterable[str]) -> int | None:
    """XOR of the pair hashes of ``names`` as they are now; ``None`` if one vanished."""
    digest = 0
    try:
        for name in names:
            digest ^= _pair_hash(name, fingerprint(run_path / name))
    except FileNotFoundError:
        return None
    return digest


def _last_change(path: Path) -> float:
    """The latest mtime or ctime (s) of the folder and the files directly in it.

    ctime counts too: a copy that keeps the original mtimes (``cp -p``,
    ``rsync -a``) still sets ctime to the time of copying.
    """
    stat = path.stat()
    latest = max(stat.st_mtime, stat.st_ctime)
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.is_file():
                stat = entry.stat()
                latest = max(latest, stat.st_mtime, stat.st_ctime)
    return latest


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name
