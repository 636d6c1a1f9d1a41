"""Incremental, bounded scan of a data root: which repetitions are new or changed and ready.

The GPU adapter of the shared tree scanner (:mod:`joulehouse.treescan`, whose
docstring tells how a tick stays bounded): the tree is
``experiment/benchmark/run/repetition``, the listed folders are the run
folders (level 3, about one per ten repetitions), and a repetition is
complete when its ``timestamps.csv`` has ``experiment_end``. With
``ready_when_complete`` a complete repetition is ready at once, quiet or not:
only for repetitions ``joulehouse collect`` writes in place (``experiment_end``
last, after fsync of every other file), not for ones copied in by tools that
may write ``timestamps.csv`` before ``gpu-power.csv`` is whole.

Per listed run folder the state keeps the names of the repetitions already
reported and ONE digest of their (name, fingerprint) pairs
(:class:`joulehouse.treescan.NameDigest`, about 7 bytes per run folder in
the cursor): if the digest differs at a listing (a repetition rewritten,
replaced or removed) every repetition of that run folder (typically 5-20) is
reported again. Files rewritten in place are found by the rolling rescan
(``full_rescan_s``); no repetition is watched after its report.

A repetition quiet but without ``experiment_end`` (a killed collector) stays
pending and is not asked again while unchanged; at most ``max_incomplete``
(:data:`MAX_INCOMPLETE`) are remembered, the most recently changed: an older
one is forgotten and probed again when its run folder is next listed (the
rolling rescan, once per ``full_rescan_s``), so abandoned repetitions cost a
bounded cursor.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from joulehouse import treescan
from joulehouse.errors import InputError
from joulehouse.gpu.layout import RepetitionRef, is_complete, subdirs

RUN_LEVEL = 3  # root "" = 0, experiment = 1, benchmark = 2, run = 3, repetition = 4
MAX_INCOMPLETE = 500  # repetitions without experiment_end remembered (about 25 B each)


class ScanState(treescan.TreeState):
    """The GPU scan's cursor (:class:`joulehouse.treescan.TreeState`); ``runs`` are its
    listed folders' records."""

    version = 2
    records = treescan.NameDigest(RUN_LEVEL)

    @property
    def runs(self) -> dict[str, treescan.Reported]:
        return self.folders


@dataclass(frozen=True)
class ReadyRepetition:
    """A complete repetition, quiet (or ``ready_when_complete``), new or changed since it was
    last reported."""

    ref: RepetitionRef
    fingerprint: str
    last_change: float


@dataclass(frozen=True)
class ScanResult:
    ready: list[ReadyRepetition]  # at most max_repetitions, oldest first
    state: ScanState
    pending: int  # repetitions seen but not reported: not ready yet, or over the cap
    deferred: int  # of those, quiet ones left for later ticks by the cap
    unlisted: int  # run folders new or changed but not listed yet (budget spent)
    rescanned: int  # run folders re-listed by the rolling rescan this tick
    incomplete: int = 0  # of the pending, quiet ones without experiment_end (unchanged since)
    errors: list[InputError] = field(default_factory=list)  # folders unreadable (skipped)
    unasked: int = 0  # of the pending, ones inside their quiet period left by the cap (not asked)


def _folders(path: Path, *_) -> list[str]:
    """The subfolders of ``path`` (hidden ones left out); none if it vanished."""
    return subdirs(path, missing_ok=True)


TREE = treescan.Tree(listed_level=RUN_LEVEL, children=_folders, leaves=_folders,
                     is_complete=is_complete, records=ScanState.records)


def scan(
    data_root: str | os.PathLike[str],
    state: ScanState,
    *,
    quiet_s: float = 60.0,
    full_rescan_s: float | None = 3600.0,
    max_repetitions: int = 500,
    now: float | None = None,
    recheck: Mapping[str, str] | None = None,
    max_incomplete: int = MAX_INCOMPLETE,
    ready_when_complete: bool = False,
) -> ScanResult:
    """Scan ``data_root`` from ``state``; returns ready repetitions and the new state.

    ``state`` is not modified. ``full_rescan_s=None`` disables the rolling
    rescan; ``0`` re-lists every run folder each tick (within the bound).
    ``recheck``: repetition key -> the fingerprint it was reported with, to
    fingerprint again this tick. ``max_incomplete``: how many quiet repetitions
    without ``experiment_end`` to remember (those changed last); the others are
    probed again when their run folder is next listed (module docstring).
    ``ready_when_complete``: a repetition inside its quiet period is ready once it has
    ``experiment_end`` (module docstring: when that is safe).
    """
    root = Path(data_root)
    result = treescan.scan(TREE, root, state, quiet_s=quiet_s, cap=max_repetitions,
                           full_rescan_s=full_rescan_s, recheck=recheck or {}, now=now,
                           max_incomplete=max_incomplete,
                           ready_when_complete=ready_when_complete)
    ready = [ReadyRepetition(RepetitionRef.from_key(root, found.key), found.fingerprint,
                             found.last_change) for found in result.ready]
    return ScanResult(ready, result.state, result.pending, result.deferred, result.unlisted,
                      result.rescanned, result.incomplete, result.errors, result.unasked)
