"""One digest of (key, fingerprint) pairs, for run keys and trial fingerprints."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping


def digest_pairs(pairs: Mapping[str, str]) -> str:
    """20 hex digits of SHA-1 over the sorted ``key\\0value`` lines; order does not matter."""
    text = "\n".join(f"{key}\0{value}" for key, value in sorted(pairs.items()))
    return hashlib.sha1(text.encode()).hexdigest()[:20]
