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
    first = np.searchsorted(edges, start_ns, side="right") - 1
    last = np.searchsorted(edges, end_ns, side="left") - 1
    count = np.maximum(last - first + 1, 1)
    window = np.repeat(np.arange(len(start_ns)), count)
    offsets = np.cumsum(count) - count
    segment = first[window] + (np.arange(len(window)) - offsets[window])
    bounds = np.concatenate([[_BEFORE], edges, [_AFTER]])
    piece_start = np.maximum(start_ns[window], bounds[segment + 1])
    piece_end = np.minimum(end_ns[window], bounds[segment + 2])
    length = (end_ns - start_ns)[window].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        fraction = np.where(length > 0, (piece_end - piece_start) / length, 1.0)
    return Pieces(window, segment, piece_start, piece_end, fraction)
