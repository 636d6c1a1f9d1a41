"""Folders where TAU profile sets land: which sets are there, and which are complete.

A landing folder holds profile sets side by side: a folder of
``profile.N.C.T`` files, a folder of ``MULTI__<metric>`` folders of them, or
a ``.ppk`` file. A set is *complete* once none of its files (nor its
folders) changed for a quiet period: mtime and ctime both count, so a set
copied with its old mtimes still waits. Its *fingerprint* is a digest of
its files' names, sizes and mtimes (ns); it changes when a file is added,
removed or rewritten, and reads no content.

Profile sets are few and flat, so listing every landing folder per sensor
tick is cheap: the work is one ``stat`` per profile file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG

from joulehouse.digest import file_stats_digest
from joulehouse.taudb.profiles import identify_profile_set


@dataclass(frozen=True)
class ProfileSet:
    """One profile set; ``key`` is ``<landing name>/<entry name>``; ``last_change`` in
    seconds since the epoch (the latest mtime or ctime of its files and folders)."""

    key: str
    path: Path
    fingerprint: str
    last_change: float

    def is_quiet(self, quiet_s: float, now: float) -> bool:
        """True when nothing in the set changed for ``quiet_s`` seconds before ``now``."""
        return now - self.last_change >= quiet_s


def _files(entry: Path) -> list[Path] | None:
    """The files that make up the profile set ``entry`` (with its folders), or None."""
    profile_set = identify_profile_set(entry)
    if profile_set is None:
        return None
    _, layout = profile_set  # a .ppk has no layout: the file alone
    return [entry, *(p for folder, files in layout for p in [folder, *files.values()])]


def read_profile_set(path: Path, key: str) -> ProfileSet | None:
    """The profile set at ``path`` with its fingerprint, or None when it is not one."""
    files = _files(path)
    if files is None:
        return None
    stats = [(file, file.stat()) for file in sorted(set(files))]
    last_change = max((max(stat.st_mtime, stat.st_ctime) for _, stat in stats), default=0.0)
    digest = file_stats_digest((file.relative_to(path.parent).as_posix(), stat)
                               for file, stat in stats if S_ISREG(stat.st_mode))
    return ProfileSet(key, path, digest, last_change)


def find_profile_sets(landing: str | os.PathLike[str], name: str) -> list[ProfileSet]:
    """Every profile set directly in the folder ``landing`` (named ``name``), by key.

    Hidden entries (``.name``) and entries that are no profile set are skipped.
    """
    sets = []
    with os.scandir(landing) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if not entry.name.startswith("."):
                found = read_profile_set(Path(entry.path), f"{name}/{entry.name}")
                if found is not None:
                    sets.append(found)
    return sets


@dataclass(frozen=True)
class LandingScan:
    """Sets to load now (new or changed since ``seen``, and quiet), and how many wait."""

    ready: list[ProfileSet]
    waiting: int
    seen: dict[str, str]
    """key -> fingerprint of every present set handed out so far (the next ``seen``)."""


def scan_landings(sets: Iterable[ProfileSet], seen: Mapping[str, str], quiet_s: float,
                  now: float) -> LandingScan:
    """Compare the present ``sets`` with ``seen`` (key -> fingerprint handed out before).

    A set whose fingerprint differs from the one seen (or that is new) is
    ready once quiet; until then it waits. Sets no longer present are forgotten.
    """
    ready, waiting, next_seen = [], 0, {}
    for found in sets:
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
