"""Contiguous ranges of an ordered key list (e.g. a dynamic partition set)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


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
