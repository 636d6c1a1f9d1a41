"""Incremental scan of a data root: which repetitions are new or changed and ready.

A sensor calls :func:`scan` once per tick with the state it got back last
time (:class:`ScanState`, JSON in the sensor cursor). The scan's work grows
with the number of folders above the repetitions and with what changed, not
with the number of repetitions:

* It stats every folder of the levels root, experiment, benchmark and run
  (about one per ten repetitions) and lists a folder only when its mtime
  changed since the last tick. A new or removed repetition folder changes
  the mtime of its run folder, so only changed run folders are listed.
* Repetitions found in a changed run folder, and repetitions still pending
  from earlier ticks, are checked: a repetition is *ready* when its
  ``timestamps.csv`` has ``experiment_end`` and no file in it changed for
  ``quiet_s`` seconds (mtime or ctime). Ready repetitions whose fingerprint differs from the
  one reported before (or that are new) are returned; the others stay
  pending and are checked again next tick, so a folder still being written
  on a shared filesystem waits.
* Rewriting a file *in place* inside a known repetition changes neither the
  run folder's mtime nor the repetition's name, so it is found by the full
  rescan every ``full_rescan_s`` seconds (it fingerprints every repetition)
  or at once when the fix replaces the repetition folder (write it beside,
  then rename it into place, or delete and copy it anew).

Removed repetitions are forgotten; nothing is reported for them.
"""

from __future__ import annotations

import base64
import json
import os
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from joulehouse.gpu.layout import RepetitionRef, fingerprint, is_complete

RUN_LEVEL = 3  # root "" = 0, experiment = 1, benchmark = 2, run = 3, repetition = 4
SHORT_FINGERPRINT = 8  # hex digits kept per known repetition in the state
STATE_VERSION = 1


@dataclass
class ScanState:
    """What the last scan saw; serialised compactly with :meth:`to_json`.

    ``dirs`` maps folders above the repetitions (posix paths relative to the
    root, ``""`` for the root) to their mtime in ns; ``known`` maps a run
    folder to ``{repetition name: short fingerprint}`` of the repetitions
    already reported; ``pending`` lists repetition keys seen but not ready.
    """

    dirs: dict[str, int] = field(default_factory=dict)
    known: dict[str, dict[str, str]] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)
    last_full_scan: float = 0.0

    def to_json(self) -> str:
        """A compact string (zlib-compressed JSON, base64) for a sensor cursor."""
        payload = {"v": STATE_VERSION, "dirs": self.dirs, "known": self.known,
                   "pending": sorted(self.pending), "full": self.last_full_scan}
        raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        return base64.b64encode(zlib.compress(raw, 6)).decode("ascii")

    @classmethod
    def from_json(cls, text: str | None) -> ScanState:
        """The state in ``text``; a fresh state for ``None``/empty or another version."""
        if not text:
            return cls()
        payload = json.loads(zlib.decompress(base64.b64decode(text)))
        if payload.get("v") != STATE_VERSION:
            return cls()
        return cls(payload["dirs"], payload["known"], set(payload["pending"]), payload["full"])


@dataclass(frozen=True)
class ReadyRepetition:
    """A complete, quiet repetition that is new or changed since it was last reported."""

    ref: RepetitionRef
    fingerprint: str


@dataclass(frozen=True)
class ScanResult:
    ready: list[ReadyRepetition]
    state: ScanState
    full_scan: bool
    pending: int  # repetitions seen but not ready yet (incomplete or not quiet)


def scan(
    data_root: str | os.PathLike[str],
    state: ScanState,
    *,
    quiet_s: float = 60.0,
    full_rescan_s: float | None = 3600.0,
    now: float | None = None,
) -> ScanResult:
    """Scan ``data_root`` from ``state``; returns ready repetitions and the new state.

    ``state`` is not modified. ``full_rescan_s=None`` disables periodic full
    rescans (the first scan of a fresh state is always full).
    """
    now = time.time() if now is None else now
    root = Path(data_root)
    full = not state.dirs or (full_rescan_s is not None and now - state.last_full_scan
                              >= full_rescan_s)
    new = ScanState(dirs={}, known={k: dict(v) for k, v in state.known.items()},
                    pending=set(state.pending),
                    last_full_scan=now if full else state.last_full_scan)
    walker = _Walker(root, state, new, full)
    walker.walk("", 0)
    candidates = walker.candidates | {k for k in new.pending if walker.still_present(k)}
    new.pending = set()
    ready = []
    for key in sorted(candidates):
        ref = RepetitionRef.from_key(root, key)
        found = _check(ref, new, quiet_s, now)
        if found is not None:
            ready.append(found)
    return ScanResult(ready, new, full, len(new.pending))


def _check(ref: RepetitionRef, state: ScanState, quiet_s: float, now: float
           ) -> ReadyRepetition | None:
    """Ready and new or changed -> the repetition (recorded as known); not ready -> pending."""
    path = ref.path
    run_dir, name = ref.key.rsplit("/", 1)
    reported = state.known.get(run_dir, {})
    digest = fingerprint(path) if name in reported else None
    if digest is not None and digest[:SHORT_FINGERPRINT] == reported[name]:
        return None
    if not is_complete(path) or now - _last_change(path) < quiet_s:
        state.pending.add(ref.key)
        return None
    digest = digest or fingerprint(path)
    state.known.setdefault(run_dir, {})[name] = digest[:SHORT_FINGERPRINT]
    return ReadyRepetition(ref, digest)


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


class _Walker:
    """One pass over the folders above the repetitions, listing only changed ones."""

    def __init__(self, root: Path, old: ScanState, new: ScanState, full: bool) -> None:
        self.root = root
        self.old = old
        self.new = new
        self.full = full
        self.children = _children_index(old.dirs)
        self.candidates: set[str] = set()

    def walk(self, rel: str, level: int) -> None:
        path = self.root / rel if rel else self.root
        try:
            mtime = path.stat().st_mtime_ns
        except FileNotFoundError:
            self._forget(rel)
            return
        self.new.dirs[rel] = mtime
        changed = self.full or self.old.dirs.get(rel) != mtime
        if level == RUN_LEVEL:
            if changed:
                self._list_run(rel, path)
            return
        names = _subdirs(path) if changed else self.children.get(rel, [])
        if changed:
            for gone in set(self.children.get(rel, [])) - set(names):
                self._forget(_join(rel, gone))
        for name in names:
            self.walk(_join(rel, name), level + 1)

    def _list_run(self, rel: str, path: Path) -> None:
        names = _subdirs(path)
        known = self.new.known.get(rel, {})
        for gone in set(known) - set(names):
            del known[gone]
        if not known:
            self.new.known.pop(rel, None)
        self.candidates.update(f"{rel}/{name}" for name in names)

    def _forget(self, rel: str) -> None:
        """Drop all state under a folder that no longer exists."""
        prefix = rel + "/" if rel else ""
        for state in (self.new.dirs, self.new.known):
            for key in [k for k in state if k == rel or k.startswith(prefix)]:
                del state[key]
        self.new.pending = {k for k in self.new.pending if not k.startswith(prefix)}

    def still_present(self, key: str) -> bool:
        return key.rsplit("/", 1)[0] in self.new.dirs and (self.root / key).is_dir()


def contiguous_ranges(order: Sequence[str], keys: Iterable[str], max_ranges: int
                      ) -> list[tuple[str, str]]:
    """Cover ``keys`` with at most ``max_ranges`` (start, end) ranges of ``order``.

    ``order`` is the full ordered key list (e.g. a dynamic partition set, in
    which new keys are appended, so new keys form one range). Ranges are
    merged across the smallest gaps first; a merged range also covers the
    keys in its gaps, which are then recomputed unchanged.
    """
    position = {key: i for i, key in enumerate(order)}
    indices = sorted({position[k] for k in keys})
    if not indices:
        return []
    runs = [[indices[0], indices[0]]]
    for i in indices[1:]:
        if i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    while len(runs) > max(1, max_ranges):
        gap = min(range(len(runs) - 1), key=lambda j: runs[j + 1][0] - runs[j][1])
        runs[gap:gap + 2] = [[runs[gap][0], runs[gap + 1][1]]]
    return [(order[a], order[b]) for a, b in runs]


def _children_index(dirs: dict[str, int]) -> dict[str, list[str]]:
    index: dict[str, list[str]] = {}
    for rel in dirs:
        if rel:
            parent, _, name = rel.rpartition("/")
            index.setdefault(parent, []).append(name)
    return index


def _subdirs(path: Path) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return sorted(e.name for e in entries
                          if e.is_dir() and not e.name.startswith("."))
    except FileNotFoundError:
        return []


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name
