"""The seeded history's keeping over several runs (``benchmarks/soak_history.make``): its
progress kept at a run's time limit and continued by the next, made anew after a run
killed mid-way, moved into place once complete. The image's file system and mount are
left out (a folder stands for the mounted image); what each run brings in is the test's."""

from __future__ import annotations

import contextlib
import json
import shutil

import pytest
import soak_history
from soak_landers import History

HISTORY = History(jobs=3, reports=2, repetitions=1, days=2)


@pytest.fixture
def kept(tmp_path, monkeypatch):
    """``make``'s places in ``tmp_path``: the kept folder, and the mount point standing for
    the image (``mkfs`` and the mount do nothing: the folder keeps what a run wrote)."""
    monkeypatch.setattr(soak_history, "KEPT", tmp_path / "kept")
    monkeypatch.setattr(soak_history, "MOUNT", tmp_path / "mount")
    monkeypatch.setattr(soak_history, "IMAGE_GB", 0)
    monkeypatch.setattr(soak_history, "run_command",  # mkfs: an empty file system
                        lambda *command: command[0] == "mkfs.ext4" and shutil.rmtree(
                            tmp_path / "mount", ignore_errors=True))
    monkeypatch.setattr(soak_history, "mounted",
                        lambda image: contextlib.nullcontext(
                            (tmp_path / "mount").mkdir(exist_ok=True)))
    return soak_history.kept(HISTORY)


class Runs:
    """Each run's ``bring_in``: records the progress it was given, and ends complete or not
    (or raises: a run killed)."""

    def __init__(self) -> None:
        self.given: list[dict | None] = []

    def __call__(self, complete: bool | None):
        def bring_in(folder, progress):
            self.given.append(progress)
            if complete is None:
                raise KeyboardInterrupt  # killed
            for name in soak_history.DATABASES:  # as dump() leaves them
                (folder / f"{name}.dump").write_text(str(len(self.given)))
            return {"complete": complete, "covers_to": f"2026-12-0{len(self.given)}",
                    "brought_in": {"seen": len(self.given)}}
        return bring_in


def test_a_history_is_continued_run_after_run_until_complete(kept):
    runs = Runs()
    with pytest.raises(soak_history.HistoryIncomplete, match="the same command continues"):
        soak_history.make(HISTORY, runs(False))
    progress = json.loads((kept / soak_history.PROGRESS).read_text())
    assert runs.given == [None] and [run["covers_to"] for run in progress["runs"]] == [
        "2026-12-01"]
    assert progress["covers_to"] == "2026-12-01" and (kept / "data.img.part").exists()
    written = sorted(p.name for p in (soak_history.MOUNT / "data" / "archive").rglob("*"))
    assert written  # the history's files, written once

    with pytest.raises(soak_history.HistoryIncomplete):
        soak_history.make(HISTORY, runs(False))
    assert runs.given[1]["covers_to"] == "2026-12-01"  # where the last files end
    assert soak_history.make(HISTORY, runs(True)) == kept
    record = json.loads((kept / "history.json").read_text())
    assert [run["brought_in"]["seen"] for run in record["runs"]] == [1, 2, 3]
    assert record["covers_to"] == "2026-12-03" and record["jobs"] == 3
    assert record["brought_in_s"] >= 0 and record["written_s"] >= 0
    assert (kept / "data.img").exists() and not (kept / "data.img.part").exists()
    assert not (kept / soak_history.PROGRESS).exists()
    assert soak_history.make(HISTORY, runs(True)) == kept and len(runs.given) == 3  # kept


def test_a_run_killed_while_continuing_leaves_no_progress_and_the_next_starts_anew(kept):
    runs = Runs()
    with pytest.raises(soak_history.HistoryIncomplete):
        soak_history.make(HISTORY, runs(False))
    with pytest.raises(KeyboardInterrupt):  # the image moved on: its record is gone
        soak_history.make(HISTORY, runs(None))
    assert not (kept / soak_history.PROGRESS).exists()
    assert soak_history.make(HISTORY, runs(True)) == kept  # anew: a new image, written
    assert runs.given[0] is None and runs.given[1]["runs"] and runs.given[2] is None
    record = json.loads((kept / "history.json").read_text())
    assert [run["brought_in"]["seen"] for run in record["runs"]] == [3]
