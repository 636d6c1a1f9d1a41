"""Folders where TAU profile sets land: which entries are profile sets, and their files.

A landing folder holds profile sets side by side: a folder of
``profile.N.C.T`` files, a folder of ``MULTI__<metric>`` folders of them, or
a ``.ppk`` file. Completeness (a quiet period) and fingerprints are the
shared rules of :mod:`joulehouse.landing`.
"""

from __future__ import annotations

from pathlib import Path

from joulehouse.landing import LandedItem, read_landed_item
from joulehouse.taudb.profiles import identify_profile_set


def profile_set_files(entry: Path) -> list[Path] | None:
    """The files that make up the profile set ``entry`` (with its folders), or None."""
    profile_set = identify_profile_set(entry)
    if profile_set is None:
        return None
    _, layout = profile_set  # a .ppk has no layout: the file alone
    return [entry, *(p for folder, files in layout for p in [folder, *files.values()])]


def read_profile_set(path: Path, key: str) -> LandedItem | None:
    """The profile set at ``path`` with its fingerprint, or None when it is not one."""
    return read_landed_item(path, key, profile_set_files)
