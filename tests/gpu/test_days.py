"""The day of a GPU repetition (joulehouse/gpu/days.py): its timestamps.csv's
experiment_begin in the root's zone, else its newest file's mtime; a root's repetitions of
given days."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest

from joulehouse.errors import InputError
from joulehouse.gpu.days import day_of_head, repetition_day, repetitions_of_days


def _at(path, year: int, month: int, day: int, hour: int = 12) -> None:
    """Set the mtime of ``path`` and of every file in it to that UTC time."""
    when = datetime(year, month, day, hour, tzinfo=UTC).timestamp()
    for child in [path, *path.iterdir()] if path.is_dir() else [path]:
        os.utime(child, (0, when))


def test_the_day_is_the_utc_date_of_experiment_begin_in_the_roots_zone():
    head = (b",timestamp,event,data\n0,2020-11-16 23:30:00,experiment_begin,0\n"
            b"1,2020-11-17 00:10:00,train_begin,0\n")
    assert day_of_head(head, "UTC") == "2020-11-16"
    assert day_of_head(head, "America/New_York") == "2020-11-17"  # 04:30 UTC
    assert day_of_head(head, "Europe/Berlin") == "2020-11-16"  # 22:30 UTC


def test_a_head_without_a_parsable_experiment_begin_has_no_day():
    assert day_of_head(b",timestamp,event,data\n0,2020-11-16 23:30:00,train_begin,0\n",
                       "UTC") is None
    assert day_of_head(b",timestamp,event,data\n0,yesterday,experiment_begin,0\n",
                       "UTC") is None
    assert day_of_head(b"", "UTC") is None
    assert day_of_head(b"not,a,header\n", "UTC") is None


def test_a_repetition_is_in_its_starts_day_else_its_newest_files(tmp_path, make_repetition):
    ref, _ = make_repetition(tmp_path, start_utc="2021-03-04 23:59:00")
    assert repetition_day(ref.path, "UTC") == "2021-03-04"
    assert repetition_day(ref.path, "America/New_York") == "2021-03-05"  # 04:59 UTC
    (ref.path / "timestamps.csv").write_text(",timestamp,event,data\n0,broken,experiment_begin,0\n")
    _at(ref.path, 2022, 5, 6)
    assert repetition_day(ref.path, "UTC") == "2022-05-06"


def test_the_repetitions_of_days_are_the_complete_ones_whose_day_it_is(tmp_path,
                                                                        make_repetition):
    root = tmp_path / "lab"
    make_repetition(root, "exp/bench/150W/0", start_utc="2021-03-04 10:00:00")
    make_repetition(root, "exp/bench/150W/1", start_utc="2021-03-05 10:00:00")
    make_repetition(root, "exp/other/250W/0", start_utc="2021-03-04 11:00:00")
    old, _ = make_repetition(root, "exp/other/250W/1", start_utc="2021-03-04 12:00:00")
    _at(old.path, 2021, 3, 1)  # written 3 days before the day: not read
    cut, _ = make_repetition(root, "exp/other/250W/2", start_utc="2021-03-04 13:00:00")
    text = (cut.path / "timestamps.csv").read_text()
    (cut.path / "timestamps.csv").write_text(text.split("experiment_end")[0])  # incomplete
    found = repetitions_of_days(root, ["2021-03-04", "2021-03-06"], "UTC")
    assert found == {"2021-03-04": ["exp/bench/150W/0", "exp/other/250W/0"], "2021-03-06": []}
    with pytest.raises(InputError, match="cannot be listed"):
        repetitions_of_days(tmp_path / "gone", ["2021-03-04"], "UTC")
    (tmp_path / "unmounted").mkdir()  # an empty mount point: its days fail, not pass empty
    with pytest.raises(InputError, match="lists no repetition at all"):
        repetitions_of_days(tmp_path / "unmounted", ["2021-03-04"], "UTC")


def test_a_folder_vanishing_during_the_walk_is_skipped(tmp_path, make_repetition,
                                                       monkeypatch):
    """A run folder listed and then removed (or renamed hidden) before the walk reaches
    it is skipped: the day's other repetitions are found, nothing raises."""
    from joulehouse.gpu import layout

    root = tmp_path / "lab"
    make_repetition(root, "exp/bench/150W/0", start_utc="2021-03-04 10:00:00")
    moved, _ = make_repetition(root, "exp/bench/250W/0", start_utc="2021-03-04 11:00:00")
    listed = layout.subdirs

    def listing_then_move(path, **kwargs):
        names = listed(path, **kwargs)
        if str(path).endswith("bench"):  # the benchmark listed: a run folder moves away
            moved.path.parent.rename(moved.path.parent.with_name(".250W"))
        return names

    monkeypatch.setattr(layout, "subdirs", listing_then_move)
    found = repetitions_of_days(root, ["2021-03-04"], "UTC")
    assert found == {"2021-03-04": ["exp/bench/150W/0"]}


def test_the_newest_mtime_is_read_only_when_the_head_gives_no_day(tmp_path, make_repetition,
                                                                  monkeypatch):
    from joulehouse.gpu import days

    ref, _ = make_repetition(tmp_path, start_utc="2021-03-04 10:00:00")
    calls = []
    newest = days.newest_mtime
    monkeypatch.setattr(days, "newest_mtime", lambda path: calls.append(path) or newest(path))
    assert repetition_day(ref.path, "UTC") == "2021-03-04"
    assert calls == []
    (ref.path / "timestamps.csv").write_text(",timestamp,event,data\n0,broken,experiment_begin,0\n")
    _at(ref.path, 2022, 5, 6)
    assert repetition_day(ref.path, "UTC") == "2022-05-06"
    assert calls == [ref.path]
    (ref.path / "timestamps.csv").unlink()
    ref.path.rename(ref.path.with_name("gone"))
    with pytest.raises(OSError):
        repetition_day(ref.path, "UTC")
