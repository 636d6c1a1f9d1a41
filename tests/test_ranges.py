"""Contiguous ranges of an ordered key list."""

from joulehouse.ranges import contiguous_ranges


def test_contiguous_ranges_merge_the_smallest_gaps():
    order = [str(i) for i in range(10)]
    assert contiguous_ranges(order, ["8", "9"], 1) == [("8", "9")]
    assert contiguous_ranges(order, ["1", "2", "4", "9"], 5) == [("1", "2"), ("4", "4"),
                                                                ("9", "9")]
    assert contiguous_ranges(order, ["1", "2", "4", "9"], 2) == [("1", "4"), ("9", "9")]
    assert contiguous_ranges(order, [], 3) == []
