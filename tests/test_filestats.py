"""filestats.holding_ranges: the files of a table whose log statistics may hold a value
within given ranges, judged by the statistics alone."""

import numpy as np
import pandas as pd
import pytest

from joulehouse import entry_table, filestats
from joulehouse.warehouse import Warehouse

#: Three files' statistics of ``job``: two with bounds, one written without statistics.
STATS = pd.DataFrame({"path": ["a.parquet", "b.parquet", "none.parquet"],
                      "size_bytes": [10, 20, 30],
                      "min.job": ["a/1", "b/0", np.nan], "max.job": ["a/5", "b/9", np.nan]})


@pytest.mark.parametrize(("ranges", "kept"), [
    ([("a/5", "a/6")], ["a", "none"]),  # a file's maximum equal to a range's low: kept
    ([("a/6", "b/0")], ["none"]),  # a file's minimum equal to a range's (open) high: not
    ([("a/0", "a/2"), ("b/9", "c")], ["a", "b", "none"]),  # either range
    ([("c", "d")], ["none"]),  # a file without statistics is never pruned
])
def test_files_whose_bounds_may_hold_a_value_within_a_range_are_listed(
        tmp_path, monkeypatch, ranges, kept):
    tables = Warehouse(tmp_path)
    monkeypatch.setattr(entry_table, "file_stats", lambda warehouse, table: STATS)
    listed = filestats.holding_ranges(tables, "cc_jobs", "job", ranges)
    base = tables.table_path("cc_jobs")
    sizes = dict(zip(STATS["path"], STATS["size_bytes"], strict=True))
    assert [(info.path, info.size) for info in listed] == [
        (f"{base}/{name}.parquet", sizes[f"{name}.parquet"]) for name in kept]


def test_a_table_without_statistics_of_the_column_lists_every_file(tmp_path, monkeypatch):
    tables = Warehouse(tmp_path)
    monkeypatch.setattr(entry_table, "file_stats",
                        lambda warehouse, table: STATS[["path", "size_bytes"]])
    assert len(filestats.holding_ranges(tables, "cc_jobs", "job", [("x", "y")])) == 3
