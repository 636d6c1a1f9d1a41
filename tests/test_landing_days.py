"""Entries grouped per landing folder and UTC day (joulehouse/landing_days.py): the key, the
day of an entry from its start or its newest file's mtime, the entries of given days."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from joulehouse.errors import InputError
from joulehouse.landing import read_landed_item
from joulehouse.landing_days import (
    day_key,
    entries_of_days,
    entry_day,
    item_day_key,
    split_day_key,
)


def _at(path: Path, year: int, month: int, day: int, hour: int = 12) -> None:
    """Set ``path``'s mtime to that UTC time."""
    os.utime(path, (0, datetime(year, month, day, hour, tzinfo=UTC).timestamp()))


def files(entry: Path) -> list[Path] | None:
    """A folder entry and its files (the ``identify`` of these tests)."""
    return [entry, *sorted(entry.iterdir())] if entry.is_dir() else None


def test_a_day_key_names_its_landing_folder_and_day():
    assert day_key("landing", "2020-04-01") == "landing/2020-04-01"
    assert split_day_key("nfs/landing/2020-04-01") == ("nfs/landing", "2020-04-01")
    with pytest.raises(InputError, match="not a day key"):
        split_day_key("landing/job.report")


def test_an_entry_without_a_start_is_in_its_newest_files_mtime_day(tmp_path):
    entry = tmp_path / "landing" / "set"
    entry.mkdir(parents=True)
    for name, day in (("a", 3), ("b", 5)):
        (entry / name).write_text(name)
        _at(entry / name, 2023, 3, day, 23)
    item = read_landed_item(entry, "landing/set", files)
    assert item.mtime == datetime(2023, 3, 5, 23, tzinfo=UTC).timestamp()
    assert item_day_key(item, lambda path: None) == "landing/2023-03-05"
    assert item_day_key(item, lambda path: "2020-01-01") == "landing/2020-01-01"

    def gone(path: Path) -> str | None:
        raise FileNotFoundError(path)

    assert item_day_key(item, gone) == "landing/2023-03-05"  # removed since listed
    (entry / "b").unlink()
    assert entry_day(entry / "a", lambda path: None) == "2023-03-03"  # a file's own mtime


def test_the_entries_of_days_skip_those_written_before_them_unread(tmp_path):
    folder = tmp_path / "landing"
    read = []

    def start(path: Path) -> str | None:
        read.append(path.name)
        return (path / "day").read_text()

    for name, day, written in (("new", "2021-01-01", (2021, 1, 2)),
                               ("late", "2021-01-01", (2021, 6, 1)),
                               ("other", "2021-01-02", (2021, 1, 2)),
                               ("old", "2021-01-01", (2019, 1, 1))):
        (folder / name).mkdir(parents=True)
        (folder / name / "day").write_text(day)
        _at(folder / name / "day", *written)
    found = entries_of_days(folder, "landing", ["2021-01-01", "2021-03-01"], files, start)
    assert {day: [item.key for item in items] for day, items in found.items()} == {
        "2021-01-01": ["landing/late", "landing/new"], "2021-03-01": []}
    assert sorted(read) == ["late", "new", "other"]  # "old": its start never read


def test_a_landing_folder_listing_nothing_fails_its_days_read_whole(tmp_path):
    """An empty landing folder (a mount point with nothing mounted) read whole fails its
    days, naming it, where a folder with entries none of which is of the days gives none."""
    folder = tmp_path / "landing"
    folder.mkdir()
    with pytest.raises(InputError, match="lists no entry at all") as raised:
        entries_of_days(folder, "landing", ["2021-01-01"], files, lambda path: None)
    assert raised.value.path == str(folder)
    (folder / "other").mkdir()
    (folder / "other" / "day").write_text("2021-01-02")
    found = entries_of_days(folder, "landing", ["2021-01-01"], files,
                            lambda path: (path / "day").read_text())
    assert found == {"2021-01-01": []}
