"""Digests: of (key, fingerprint) pairs for run keys and trial fingerprints, of named
contents (a reader's sources), and of files' names, sizes and mtimes for the fingerprints
of what lands."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping


def digest_pairs(pairs: Mapping[str, str]) -> str:
    """20 hex digits of SHA-1 over the sorted ``key\\0value`` lines; order does not matter."""
    text = "\n".join(f"{key}\0{value}" for key, value in sorted(pairs.items()))
    return hashlib.sha1(text.encode()).hexdigest()[:20]


def contents_digest(files: Iterable[tuple[str, bytes]]) -> str:
    """20 hex digits of SHA-1 over ``(name, content)`` pairs, in name order: each name, the
    content's length and the content, so no two lists of pairs run together."""
    digest = hashlib.sha1()
    for name, content in sorted(files):
        digest.update(f"{name}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()[:20]


def file_stats_digest(files: Iterable[tuple[str, os.stat_result]]) -> str:
    """16 hex digits of SHA-1 over ``name\0size\0mtime_ns`` lines, in the order given.

    Reads no content: changes when a file is added, removed, rewritten or touched.
    """
    digest = hashlib.sha1()
    for name, stat in files:
        digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]
