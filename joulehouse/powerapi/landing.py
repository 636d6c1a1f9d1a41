"""Folders where PowerAPI reports land: which entries are report sets, and their files.

An entry of a landing folder is one report file (an HWPC or power report
file in any form :mod:`joulehouse.powerapi.layout` knows) or a folder of
them (hwpc-sensor's CSV output, one file per group; PowerAPI 2.10.0's
``<sensor>-<target>/PowerReport.csv`` tree). Files that are not reports
(notes, formula reports, logs) are not entries, and a folder holding none
is not one. Completeness (a quiet period) and fingerprints are the shared
rules of :mod:`joulehouse.landing`: a file still being appended to is an
entry that changes, so it waits until it has been quiet for the period.
"""

from __future__ import annotations

import os
from pathlib import Path

from joulehouse.errors import InputError
from joulehouse.powerapi import layout


def report_entry_files(entry: Path) -> list[Path] | None:
    """The files (and folders) that make up the report entry ``entry``, or None when it holds
    no HWPC or power report (an empty file, just created, is not one yet)."""
    if entry.is_file():
        try:
            return [entry] if layout.classify(entry).kind != layout.OTHER else None
        except InputError:
            return None
    if not entry.is_dir() or not layout.holds_reports(entry):
        return None
    folders = [Path(folder) for folder, _, _ in os.walk(entry)]
    return [*folders, *layout.report_paths(entry)]
