"""A repetition's files written as they are measured, and the completion protocol.

The files have the seed's names and columns (see ``joulehouse.gpu.readers``):
pandas' unnamed index column first, naive UTC ISO timestamps in the real
writer's form (``joulehouse.gpu.generator.local_strings``) in
``timestamps.csv`` and ``gpu-power.csv``, µs since the epoch in
``*_samples.csv``. Rows are appended in batches and each batch is flushed to
the operating system at once, so a collector killed at any moment leaves
every batch written before it.

Completion protocol: a repetition is complete when its ``timestamps.csv``
has an ``experiment_end`` event (``joulehouse.gpu.layout.is_complete``, which
the sensor's scan asks). :meth:`RepetitionWriter.complete` writes that event
last, after every other file has been flushed, synced to disk and closed; a
repetition abandoned (the collector killed, the measured command failed)
never gets it, so no sensor ingests a half-written repetition.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from joulehouse.gpu.generator import local_strings
from joulehouse.gpu.layout import END_EVENT, TIMESTAMPS_FILE

#: The zone the collector's naive timestamps are written in (the data roots' default).
TIMEZONE = "UTC"


def _iso(times_ns: Sequence[int]) -> list[str]:
    """Naive UTC ISO strings (µs) of epoch ns, in the real writer's form."""
    return local_strings(pd.DatetimeIndex(pd.to_datetime(list(times_ns), unit="ns", utc=True)),
                         TIMEZONE)


class CsvWriter:
    """One CSV file in pandas' form, appended a batch of rows at a time.

    The header is pandas' unnamed index, ``timestamp``, then ``columns``.
    Each row is ``(time, *values)``: ``time`` in ns since the epoch is written
    as a naive UTC ISO string when ``iso_time``, else written as it is (µs
    since the epoch in ``*_samples.csv``).
    """

    def __init__(self, path: Path, columns: Sequence[str], *, iso_time: bool) -> None:
        self.path = path
        self._iso_time = iso_time
        # open for the writer's lifetime, closed by close(); "x": never overwrites
        self._file = open(path, "x", newline="", encoding="utf-8")  # noqa: SIM115
        self._csv = csv.writer(self._file, lineterminator="\n")
        self._csv.writerow(["", "timestamp", *columns])
        self._file.flush()
        self.rows = 0

    def write(self, rows: Sequence[Sequence[Any]]) -> None:
        """Append ``rows`` and flush them to the operating system."""
        if not rows:
            return
        times = _iso([row[0] for row in rows]) if self._iso_time else [row[0] for row in rows]
        self._csv.writerows([self.rows + i, time, *row[1:]]
                            for i, (time, row) in enumerate(zip(times, rows, strict=True)))
        self.rows += len(rows)
        self._file.flush()

    def close(self) -> None:
        """Flush, sync to disk and close (a second call does nothing)."""
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()


class RepetitionWriter:
    """The files of one new repetition folder; complete only after :meth:`complete`.

    The folder is made when missing; a file already in it is an error
    (FileExistsError: nothing is overwritten). ``timestamps.csv`` is opened at
    once; events are flushed as they come.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._timestamps = CsvWriter(self.folder / TIMESTAMPS_FILE, ["event", "data"],
                                     iso_time=True)
        self._files: list[CsvWriter] = []
        self.completed = False

    def csv(self, name: str, columns: Sequence[str], *, iso_time: bool = True) -> CsvWriter:
        """A new CSV file ``name`` (relative to the folder; its own folder made)."""
        path = self.folder / name
        path.parent.mkdir(exist_ok=True)
        writer = CsvWriter(path, columns, iso_time=iso_time)
        self._files.append(writer)
        return writer

    def json(self, name: str, data: dict[str, Any]) -> None:
        """Write ``name`` (relative to the folder) as indented JSON, synced to disk."""
        path = self.folder / name
        path.parent.mkdir(exist_ok=True)
        with open(path, "x", encoding="utf-8") as file:
            file.write(json.dumps(data, indent=2) + "\n")
            file.flush()
            os.fsync(file.fileno())

    def event(self, name: str, time_ns: int, data: int = 0) -> None:
        """Append an event (``experiment_begin``, ``epoch_end`` ...) to timestamps.csv."""
        if name == END_EVENT:
            raise ValueError(f"{END_EVENT} is written by complete(), last")
        self._timestamps.write([(time_ns, name, data)])

    def complete(self, end_ns: int) -> None:
        """Close every other file (flushed, synced), then write ``experiment_end`` at
        ``end_ns`` and close timestamps.csv: from here the repetition is complete."""
        for writer in self._files:
            writer.close()
        self._timestamps.write([(end_ns, END_EVENT, 0)])
        self._timestamps.close()
        self.completed = True

    def abandon(self) -> None:
        """Close every file without ``experiment_end``: the repetition stays incomplete
        (what was measured is kept; no sensor takes it)."""
        for writer in [*self._files, self._timestamps]:
            writer.close()
