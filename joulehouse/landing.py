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
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG

from joulehouse.digest import file_stats_digest

Identify = Callable[[Path], "list[Path] | None"]
"""Entry path -> the files and folders that make up the entry (itself included), or None."""


@dataclass(frozen=True)
class LandedItem:
    """One entry of a landing folder; ``key`` is ``<landing name>/<entry name>``;
    ``last_change`` in seconds since the epoch (the latest mtime or ctime of its files
    and folders)."""

    key: str
    path: Path
    fingerprint: str
    last_change: float

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
    return LandedItem(key, path, digest, last_change)


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
    """Entries to process now (new or changed since ``seen``, and quiet), and how many wait."""

    ready: list[LandedItem]
    waiting: int
    seen: dict[str, str]
    """key -> fingerprint of every present entry handed out so far (the next ``seen``)."""


def scan_landings(items: Iterable[LandedItem], seen: Mapping[str, str], quiet_s: float,
                  now: float) -> LandingScan:
    """Compare the present ``items`` with ``seen`` (key -> fingerprint handed out before).

    An entry whose fingerprint differs from the one seen (or that is new) is
    ready once quiet; until then it waits. Entries no longer present are forgotten.
    """
    ready, waiting, next_seen = [], 0, {}
    for found in items:
        if seen.get(found.key) == found.fingerprint:
            next_seen[found.key] = found.fingerprint
        elif found.is_quiet(quiet_s, now):
            ready.append(found)
            next_seen[found.key] = found.fingerprint
        else:
            waiting += 1
            if found.key in seen:
                next_seen[found.key] = seen[found.key]
    return LandingScan(ready, waiting, next_seen)
