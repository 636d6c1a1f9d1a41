"""Splitting windows at boundaries: pieces, segments, fractions."""

import numpy as np

from joulehouse.accounting import split
from joulehouse.accounting.split import split_windows

S = 1_000_000_000  # ns per s


def test_window_across_two_edges_is_three_pieces_prorated_by_time():
    pieces = split_windows(np.array([5 * S]), np.array([35 * S]), np.array([0, 10 * S, 30 * S]))
    assert pieces.segment.tolist() == [0, 1, 2]
    assert (pieces.start_ns // S).tolist() == [5, 10, 30]
    assert (pieces.end_ns // S).tolist() == [10, 30, 35]
    np.testing.assert_allclose(pieces.fraction, [5 / 30, 20 / 30, 5 / 30])


def test_window_on_edges_and_empty_window_and_outside():
    edges = np.array([0, 10 * S, 20 * S])
    pieces = split_windows(np.array([10 * S, 10 * S, -5 * S]), np.array([20 * S, 10 * S, -1 * S]),
                           edges)
    assert pieces.window.tolist() == [0, 1, 2]
    assert pieces.segment.tolist() == [1, 1, -1]  # -1: before the first edge
    assert pieces.fraction.tolist() == [1.0, 1.0, 1.0]


def test_fractions_of_each_window_sum_to_one():
    rng = np.random.default_rng(1)
    start = rng.integers(0, 100 * S, 500)
    end = start + rng.integers(0, 50 * S, 500)
    edges = np.arange(0, 200 * S, 7 * S)
    pieces = split_windows(start, end, edges)
    np.testing.assert_allclose(np.bincount(pieces.window, pieces.fraction), 1.0, rtol=1e-12)
    assert np.all(pieces.end_ns >= pieces.start_ns)


def test_searchsorted_equals_numpys_on_edges_ties_and_outside():
    rng = np.random.default_rng(2)
    for edges in (np.arange(0, 2000 * 3600 * S, 3600 * S),  # an hourly series
                  np.unique(rng.integers(0, 10**6 * S, 3000)),  # uneven
                  np.unique(np.concatenate([np.arange(0, 100 * S, S),  # crowded, then sparse
                                            [10**7 * S, 10**8 * S]]))):
        t = np.concatenate([rng.integers(edges[0] - 10**6 * S, edges[-1] + 10**6 * S, 200_000),
                            edges, edges - 1, edges + 1, [np.iinfo(np.int64).max - 1]])
        for side in ("left", "right"):
            assert (split.searchsorted(edges, t, side) == np.searchsorted(edges, t, side)).all()
