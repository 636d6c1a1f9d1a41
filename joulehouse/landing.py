"""Landing folders: files or folders that appear side by side, and when they are complete.

Every source whose data lands as entries of a folder (TAU profile sets,
GEOPM reports, PowerAPI report files) uses this module; what counts as an
entry is the source's ``identify`` function (entry path -> the files that
make it up, or None when it is not one of the source's entries).

An entry is *complete* once none of its files (nor its folders) changed for
a quiet period: mtime and ctime both count, so an entry copied with its old
mtimes still waits. Its *fingerprint* is a digest of its files' names, sizes
and mtimes (ns); it changes when a file is added, removed or rewritten, and
reads no content. Listing a landing folder costs one ``stat`` per file.

An entry that keeps growing (a report stream) is never quiet; a source may
hand it out anyway once its files grew by ``grown_bytes`` since it was last
handed out (:func:`scan_landings`), and read only what is new (the source's
business: see ``joulehouse/powerapi/stream.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG

from joulehouse.digest import file_stats_digest

Identify = Callable[[Path], "list[Path] | None"]
"""Entry path -> the files and folders that make up the entry (itself included), or None."""


@dataclass(frozen=True)
class LandedItem:
    """One entry of a landing folder; ``key`` is ``<landing name>/<entry name>``;
    ``last_change`` in seconds since the epoch (the latest mtime or ctime of its files
    and folders); ``size``: bytes of its files together."""

    key: str
    path: Path
    fingerprint: str
    last_change: float
    size: int = 0

    def is_quiet(self, quiet_s: float, now: float) -> bool:
        """True when nothing in the entry changed for ``quiet_s`` seconds before ``now``."""
        return now - self.last_change >= quiet_s


def read_landed_item(path: Path, key: str, identify: Identify) -> LandedItem | None:
    """The entry at ``path`` with its fingerprint, or None when ``identify`` rejects it."""
    files = identify(path)
    if files is None:
        return None
    stats = [(file, file.stat()) for file in sorted(set(files))]
    last_change = max((max(stat.st_mtime, stat.st_ctime) for _, stat in stats), default=0.0)
    digest = file_stats_digest((file.relative_to(path.parent).as_posix(), stat)
                               for file, stat in stats if S_ISREG(stat.st_mode))
    size = sum(stat.st_size for _, stat in stats if S_ISREG(stat.st_mode))
    return LandedItem(key, path, digest, last_change, size)


def find_landed(landing: str | os.PathLike[str], name: str,
                identify: Identify) -> list[LandedItem]:
    """Every entry directly in the folder ``landing`` (named ``name``) that ``identify``
    accepts, by key. Hidden entries (``.name``) are skipped."""
    items = []
    with os.scandir(landing) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if not entry.name.startswith("."):
                found = read_landed_item(Path(entry.path), f"{name}/{entry.name}", identify)
                if found is not None:
                    items.append(found)
    return items


@dataclass(frozen=True)
class LandingScan:
    """Entries to process now (new or changed since ``seen``, and quiet), and how many wait
    (``deferred`` of them ready but over the cap)."""

    ready: list[LandedItem]
    waiting: int
    seen: dict[str, str]
    """key -> fingerprint of every present entry handed out so far (the next ``seen``)."""
    sizes: dict[str, int] = field(default_factory=dict)
    """key -> size when last handed out, of the same entries (the next ``sizes``)."""
    deferred: int = 0


def scan_landings(items: Iterable[LandedItem], seen: Mapping[str, str], quiet_s: float,
                  now: float, *, grown_bytes: int | None = None,
                  sizes: Mapping[str, int] | None = None,
                  cap: int | None = None) -> LandingScan:
    """Compare the present ``items`` with ``seen`` (key -> fingerprint handed out before).

    An entry whose fingerprint differs from the one seen (or that is new) is
    ready once quiet, or, with ``grown_bytes``, once its size is that many bytes
    above its size when last handed out (``sizes``; 0 for a new entry): a stream
    that is never quiet is handed out as it grows. Until then it waits. With
    ``cap``, at most that many are ready (those changed least recently; in the
    order given), the others wait (``deferred``) as if not ready yet. Entries no longer
    present are forgotten.
    """
    sizes = sizes or {}
    present = list(items)
    eligible = sorted(
        (found for found in present if seen.get(found.key) != found.fingerprint and (
            found.is_quiet(quiet_s, now) or grown_bytes is not None
            and found.size - sizes.get(found.key, 0) >= grown_bytes)),
        key=lambda found: (found.last_change, found.key))
    chosen = {found.key for found in eligible[:cap]}
    ready = [found for found in present if found.key in chosen]  # in the order given
    waiting, next_seen, next_sizes = 0, {}, {}
    for found in present:
        if found.key in chosen:
            next_seen[found.key] = found.fingerprint
            next_sizes[found.key] = found.size
            continue
        if seen.get(found.key) == found.fingerprint:
            next_seen[found.key] = found.fingerprint
        else:
            waiting += 1
            if found.key in seen:
                next_seen[found.key] = seen[found.key]
        if found.key in sizes:
            next_sizes[found.key] = sizes[found.key]
    return LandingScan(ready, waiting, next_seen, next_sizes, len(eligible) - len(ready))
