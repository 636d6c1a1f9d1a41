"""The counters frame's row order: report by report as in the file, wherever blocks are cut;
a bad value located in the right report of a block."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from joulehouse.errors import InputError
from joulehouse.powerapi import readers

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "powerapi"
LINES = EXAMPLES / "smartwatts_timeline.jsonl"


def test_rows_are_report_by_report_in_file_order():
    """Each report's counters in one run, reports in file order, leaves in the order of
    the block's columns (group, socket, cpu, event as first seen)."""
    reports = [json.loads(line) for line in LINES.read_text().splitlines()]
    counters = readers.read_hwpc(LINES)
    per_report = [sum(len(events) for sockets in report["groups"].values()
                      for cpus in sockets.values() for events in cpus.values())
                  for report in reports]
    assert len(counters) == sum(per_report) == 1870
    starts = np.cumsum([0, *per_report[:-1]])
    assert counters["target"].iloc[starts].tolist() == [r["target"] for r in reports]
    first = reports[0]
    group, sockets = next(iter(first["groups"].items()))
    socket, cpus = next(iter(sockets.items()))
    cpu, events = next(iter(cpus.items()))
    head = counters.iloc[:len(events)]
    assert set(head["group"]) == {group} and set(head["socket"]) == {int(socket)}
    assert set(head["cpu"]) == {int(cpu)}
    assert head["value"].tolist() == [float(events[name]) for name in head["event"]]


@pytest.mark.parametrize("block_bytes", [1500, 7000])
def test_blocks_give_the_whole_frame_in_the_same_order(block_bytes):
    whole = readers.read_hwpc(LINES)
    blocks = list(readers.iter_hwpc(LINES, block_bytes=block_bytes))
    assert len(blocks) > 3
    streamed = readers.concat_counters([b.counters for b in blocks])
    # the same rows in the same order; categories may be listed in another order
    pd.testing.assert_frame_equal(streamed, whole, check_categorical=False)


def test_concat_of_one_frame_is_that_frame():
    whole = readers.read_hwpc(LINES)
    assert readers.concat_counters([whole]) is whole


@pytest.mark.parametrize("report", [0, 5, 39])
def test_bad_value_named_in_its_report(tmp_path, report):
    """The report of a bad value among the block's cells: its line and field."""
    reports = [json.loads(line) for line in LINES.read_text().splitlines()]
    group, sockets = next(iter(reports[report]["groups"].items()))
    socket, cpus = next(iter(sockets.items()))
    cpu, events = list(cpus.items())[-1]
    event = list(events)[-1]
    events[event] = -3
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in reports))
    with pytest.raises(InputError) as caught:
        readers.read_hwpc(path)
    assert caught.value.line == report + 1
    assert caught.value.field == f"groups.{group}.{socket}.{cpu}.{event}"
    assert "negative counter value -3.0" in caught.value.reason
