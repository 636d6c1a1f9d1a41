"""Where repetitions live in a data root, what their run names mean, and their state.

``data-root/experiment/benchmark/run/repetition/`` holds one repetition's
files. The run folder name carries the settings (``877MHz,1065MHz`` or
``250W``). Everything here is cheap: it lists folders and stats files but
reads no content except the tail of ``timestamps.csv``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from joulehouse.digest import file_stats_digest
from joulehouse.errors import InputError

TIMESTAMPS_FILE = "timestamps.csv"
END_EVENT = "experiment_end"
_TAIL_BYTES = 4096

_CLOCKS = re.compile(r"^(?P<mem>\d+)\s*MHz\s*,\s*(?P<sm>\d+)\s*MHz$", re.IGNORECASE)
_WATTS = re.compile(r"^(?P<w>\d+(?:\.\d+)?)\s*W$", re.IGNORECASE)
_NUMBER = re.compile(r"^(?P<w>\d+(?:\.\d+)?)$")


def root_name(data_root: str | os.PathLike[str]) -> str:
    """The name of a data root unless one is configured: its resolved folder's name.

    The name is the partition key prefix of the root's repetitions and the
    ``data_root`` column of the energy tables.
    """
    return Path(data_root).resolve().name


def is_root_name(name: str) -> bool:
    """A usable data root name: non-empty, without ``/`` (it begins partition keys)."""
    return bool(name) and "/" not in name


@dataclass(frozen=True)
class RepetitionRef:
    """One repetition folder; ``key`` is its posix path relative to ``data_root``."""

    data_root: Path
    key: str
    experiment: str
    benchmark: str
    run: str
    repetition: str

    @classmethod
    def from_key(cls, data_root: str | os.PathLike[str], key: str) -> RepetitionRef:
        """The repetition ``experiment/benchmark/run/repetition`` under ``data_root``."""
        parts = key.split("/")
        if len(parts) != 4 or not all(parts):
            raise ValueError(f"not an experiment/benchmark/run/repetition key: {key!r}")
        return cls(Path(data_root), key, *parts)

    @property
    def path(self) -> Path:
        """The repetition folder."""
        return self.data_root.joinpath(*self.key.split("/"))

    @property
    def run_key(self) -> str:
        """The run folder's posix path relative to ``data_root``: ``experiment/benchmark/run``."""
        return f"{self.experiment}/{self.benchmark}/{self.run}"

    @property
    def run_dir(self) -> Path:
        """The run folder (the repetition folder's parent)."""
        return self.data_root / self.experiment / self.benchmark / self.run


@dataclass(frozen=True)
class RunSettings:
    """Settings of a benchmark run, from its folder name (``label`` is the name itself)."""

    label: str
    memory_clock_mhz: int | None = None
    sm_clock_mhz: int | None = None
    power_limit_w: float | None = None


def parse_settings(run_name: str, experiment: str = "") -> RunSettings:
    """Settings from a run folder name.

    ``877MHz,1065MHz`` -> memory and SM clock (MHz); ``250W`` -> power limit
    (W); a bare number is a power limit too when the experiment's name
    mentions "power" (``power-limit/bert/250``). Any other name keeps only
    its label.
    """
    name = run_name.strip()
    if match := _CLOCKS.match(name):
        return RunSettings(run_name, int(match["mem"]), int(match["sm"]))
    match = _WATTS.match(name) or ("power" in experiment.lower() and _NUMBER.match(name))
    if match:
        return RunSettings(run_name, power_limit_w=float(match["w"]))
    return RunSettings(run_name)


def subdirs(path: str | os.PathLike[str], *, missing_ok: bool = False) -> list[str]:
    """The names of the folders in ``path``, sorted; hidden folders (``.name``) left out.

    A missing ``path`` raises FileNotFoundError, or has no folders with
    ``missing_ok`` (the scan's case: a folder removed while it walks the tree).
    """
    try:
        with os.scandir(path) as entries:
            return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))
    except FileNotFoundError:
        if missing_ok:
            return []
        raise


def _run_repetitions(root: Path, experiment: str, benchmark: str, run: str, *,
                     missing_ok: bool = False) -> list[RepetitionRef]:
    run_key = f"{experiment}/{benchmark}/{run}"
    return [RepetitionRef(root, f"{run_key}/{name}", experiment, benchmark, run, name)
            for name in subdirs(os.path.join(root, experiment, benchmark, run),
                                missing_ok=missing_ok)]


def iter_repetitions(data_root: str | os.PathLike[str]) -> Iterator[RepetitionRef]:
    """Every repetition folder four levels below ``data_root``, by key, listed as walked.

    Hidden folders (``.name``) are skipped, and so is a folder below the root that
    vanishes during the walk (removed, or renamed hidden: docs/collect.md's moves); the
    root itself unlistable raises OSError.
    """
    root = Path(data_root)
    for experiment in subdirs(root):
        for benchmark in subdirs(os.path.join(root, experiment), missing_ok=True):
            for run in subdirs(os.path.join(root, experiment, benchmark), missing_ok=True):
                yield from _run_repetitions(root, experiment, benchmark, run, missing_ok=True)


def find_repetitions(data_root: str | os.PathLike[str]) -> list[RepetitionRef]:
    """Every repetition folder four levels below ``data_root``, sorted by key
    (:func:`iter_repetitions`: a folder vanishing during the walk is skipped; the root
    itself unlistable raises OSError)."""
    return list(iter_repetitions(data_root))


def holds_repetitions(data_root: str | os.PathLike[str]) -> bool:
    """Whether ``data_root`` lists at least one repetition folder (the walk stops at the
    first): False for an NFS mount point with nothing mounted on it (an empty folder).
    OSError when the root cannot be listed."""
    return next(iter_repetitions(data_root), None) is not None


def run_repetitions(run_dir: str | os.PathLike[str]) -> list[RepetitionRef]:
    """The repetitions of the run folder ``data-root/experiment/benchmark/run``, sorted by key.

    ``run_dir`` is resolved first; its data root is three levels up (an
    :class:`InputError` when there are not that many). Hidden folders are skipped.
    """
    run = Path(run_dir).resolve()
    if len(run.parents) < 3:
        raise InputError(run_dir, "a run folder is DATA_ROOT/experiment/benchmark/run; "
                         f"{run} has too few folders above it")
    return _run_repetitions(run.parents[2], *run.parts[-3:])


def folder_level(path: str | os.PathLike[str]) -> str | None:
    """``"repetition"``, ``"run"`` or ``"benchmark"`` for a folder of a data root, told by
    where ``timestamps.csv`` files are (in it, in its subfolders, or one level deeper);
    else None."""
    folder = Path(path)
    if not folder.is_dir():
        return None
    if (folder / TIMESTAMPS_FILE).is_file():
        return "repetition"
    children = [folder / name for name in subdirs(folder)]
    if any((child / TIMESTAMPS_FILE).is_file() for child in children):
        return "run"
    if any((child / rep / TIMESTAMPS_FILE).is_file()
           for child in children for rep in subdirs(child)):
        return "benchmark"
    return None


def is_complete(path: str | os.PathLike[str]) -> bool:
    """True when the repetition's ``timestamps.csv`` has an ``experiment_end`` event.

    Reads only the last few KiB of the file.
    """
    try:
        with open(Path(path) / TIMESTAMPS_FILE, "rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - _TAIL_BYTES))
            tail = file.read()
    except OSError:
        return False
    return any(
        END_EVENT in line.decode("utf-8", "replace").strip().split(",")
        for line in tail.splitlines()
    )


def fingerprint(path: str | os.PathLike[str]) -> str:
    """Short hex digest of the repetition's file names, sizes and mtimes (ns).

    Changes when any file is added, removed, rewritten or touched; reads no
    content.
    """
    with os.scandir(path) as entries:
        files = sorted((e for e in entries if e.is_file()), key=lambda e: e.name)
        return file_stats_digest((entry.name, entry.stat()) for entry in files)
