"""Splitting time windows at boundaries: facts cut at the midnights of a calendar.

A window ``[start, end)`` (int64 ns since the epoch, UTC) is cut at every
boundary inside it into pieces, each lying in one segment of the boundaries
(``edges``, sorted, strictly increasing). Segment ``k`` is
``[edges[k], edges[k + 1])`` for ``0 <= k < len(edges) - 1``; segment ``-1``
is everything before ``edges[0]`` and segment ``len(edges) - 1`` everything
from ``edges[-1]`` on, so every piece has a segment.

Energy is prorated by time: a piece carries ``fraction`` = its length over
the window's, which assumes a constant power inside the window (the finest
a fact tells). A zero-length window is one piece of fraction 1 in the segment
holding its start. Fractions of a window sum to 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_BEFORE = np.iinfo(np.int64).min
_AFTER = np.iinfo(np.int64).max
#: Below this many times, :func:`searchsorted` is numpy's.
_DIRECT = 1 << 16
#: Buckets per edge in :func:`searchsorted`'s table, and the most edges one bucket may hold
#: before it leaves the times to numpy.
_BUCKETS_PER_EDGE, _MOST_PER_BUCKET = 4, 4


def searchsorted(edges: np.ndarray, t: np.ndarray, side: str = "right") -> np.ndarray:
    """``np.searchsorted(edges, t, side)`` (the same indices) for int64 ``edges``, sorted and
    strictly increasing, and int64 times ``t`` above int64's minimum (NaT's value: a
    validated time is never NaT): faster for many unsorted times.

    numpy's binary search of many times in random order mispredicts a branch at every
    step (the stage times in benchmarks/accounting.py). Instead each time's bucket (its offset from ``edges[0]``
    shifted right, about four buckets per edge) gives the count of edges at or before the
    bucket's start from a small table; the next few edges are then compared, as many steps
    as the fullest bucket holds edges. Edges crowded into one bucket leave it to numpy.
    """
    t = np.asarray(t, dtype=np.int64)
    if side == "left":  # edges before t are those at or before t - 1 (integers)
        return searchsorted(edges, t - 1) if len(t) else np.zeros(0, np.intp)
    if side != "right":
        raise ValueError(f"side is left or right, not {side!r}")
    if len(t) < _DIRECT or len(edges) < 2:
        return np.searchsorted(edges, t, side="right")
    first, last = int(edges[0]), int(edges[-1])
    shift = max((last - first) // (_BUCKETS_PER_EDGE * len(edges)), 1).bit_length() - 1
    starts = first + (np.arange(((last - first) >> shift) + 2, dtype=np.int64) << shift)
    table = np.searchsorted(edges, starts, side="right")
    steps = int(np.diff(table).max())
    if steps > _MOST_PER_BUCKET:
        return np.searchsorted(edges, t, side="right")
    bucket = np.clip(t, first, last)
    bucket -= first
    bucket >>= shift
    found = table[bucket]
    padded = np.append(edges, _AFTER)  # found <= len(edges): the next edge always exists
    for _ in range(steps):
        found += padded[found] <= t
    found[t < first] = 0
    return found


@dataclass(frozen=True)
class Pieces:
    """The pieces of many windows, one array entry per piece (the windows' order kept)."""

    window: np.ndarray  #: index of the window each piece belongs to
    segment: np.ndarray  #: its segment (-1: before the first edge; len(edges) - 1: after the last)
    start_ns: np.ndarray  #: piece start, ns since the epoch (UTC)
    end_ns: np.ndarray  #: piece end
    fraction: np.ndarray  #: piece length over its window's length (1 for an empty window)


def split_windows(start_ns: np.ndarray, end_ns: np.ndarray, edges: np.ndarray) -> Pieces:
    """Cut each window ``[start_ns[i], end_ns[i])`` at the ``edges`` inside it (see module).

    Raises ValueError if ``edges`` is not strictly increasing or a window ends before it
    starts.
    """
    start_ns = np.asarray(start_ns, dtype=np.int64)
    end_ns = np.asarray(end_ns, dtype=np.int64)
    edges = np.asarray(edges, dtype=np.int64)
    if len(edges) and np.any(np.diff(edges) <= 0):
        raise ValueError("edges must be strictly increasing")
    if np.any(end_ns < start_ns):
        raise ValueError("a window ends before it starts")
    first = searchsorted(edges, start_ns, side="right") - 1
    last = searchsorted(edges, end_ns, side="left") - 1
    count = np.maximum(last - first + 1, 1)
    offsets = np.cumsum(count) - count  # each window's first piece
    window = np.repeat(np.arange(len(start_ns)), count)
    segment = np.repeat(first - offsets, count)
    segment += np.arange(len(window))
    # a piece runs from its segment's edges, but a window's first piece from its start and
    # its last piece to its end (the edges around them lie outside the window)
    bounds = np.concatenate([[_BEFORE], edges, [_AFTER]])
    piece_start, piece_end = bounds[segment + 1], bounds[segment + 2]
    piece_start[offsets] = start_ns
    piece_end[offsets + count - 1] = end_ns
    fraction = np.ones(len(window))  # all of a window of one piece (or of no length)
    split = np.flatnonzero(np.repeat(count > 1, count))
    fraction[split] = ((piece_end[split] - piece_start[split])
                       / (end_ns - start_ns)[window[split]].astype(np.float64))
    return Pieces(window, segment, piece_start, piece_end, fraction)
