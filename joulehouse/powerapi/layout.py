"""What a PowerAPI report file is, found from its name and first bytes.

Kinds (:data:`HWPC`, :data:`POWER`, :data:`OTHER`) and encodings:

- HWPC reports: JSON (an array, ``{"reports": [...]}``, one object, or JSON
  lines, MongoDB exports included) and hwpc-sensor CSV, one file per group
  (``rapl.csv``, or ``rapl`` without extension before hwpc-sensor 1.2).
- Power reports: PowerAPI 2.10.0 CSV (``<sensor>-<target>/PowerReport.csv``,
  a cgroup path as target giving nested folders), PowerAPI main's
  ``power.csv`` and JSON lines, JSON, and ``filedb``'s Python repr.
- Everything else (formula reports, procfs reports, logs) is :data:`OTHER`,
  listed by :func:`discover` with the reason it is not read.

Only the first bytes of a file are read here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from joulehouse.errors import InputError

HWPC = "hwpc"
POWER = "power"
OTHER = "other"

JSON = "json"
CSV = "csv"
FILEDB = "filedb"

#: Columns every hwpc-sensor CSV file starts with; the events follow.
HWPC_CSV_COLUMNS = ("timestamp", "sensor", "target", "socket", "cpu")
#: Columns every power report CSV file starts with; metadata may follow.
POWER_CSV_COLUMNS = ("timestamp", "sensor", "target", "power")
#: File name PowerAPI 2.10.0 gives each sensor and target's power reports.
POWER_REPORT_CSV = "PowerReport.csv"

#: Bytes read of a file to tell what it is (and, for its day, its first report times:
#: ``joulehouse/powerapi/days.py``).
HEAD_BYTES = 65536
_JSON_KEY = re.compile(rb'"(groups|power)"\s*:')
#: A report file begins with a report (or an array of them, or ``{"reports": [``).
_REPORT_START = re.compile(rb'^\s*(\[\s*)?(\{\s*"[^"]*"\s*:\s*\[\s*)?\{\s*"(_id|timestamp|sensor|target)"')


@dataclass(frozen=True)
class ReportFile:
    """One file: its ``kind`` (HWPC, POWER, OTHER), ``encoding`` and why if OTHER."""

    path: Path
    kind: str
    encoding: str
    reason: str = ""


def classify(path: str | os.PathLike[str]) -> ReportFile:
    """The kind and encoding of one file, from its first bytes (InputError if empty)."""
    path = Path(path)
    with path.open("rb") as file:
        return classify_head(path, file.read(HEAD_BYTES))


def classify_head(path: Path, head: bytes) -> ReportFile:
    """The kind and encoding of the file at ``path`` from ``head``, its first
    :data:`HEAD_BYTES` (InputError if empty)."""
    text = head.lstrip()
    if not text:
        raise InputError(path, "empty file")
    if text[:1] in (b"[", b"{"):
        if text.startswith(b"{'"):
            return ReportFile(path, POWER, FILEDB) if b"'PowerReport'" in text[:64] else (
                ReportFile(path, OTHER, FILEDB, "filedb output without power reports"))
        keys = {match[1] for match in _JSON_KEY.finditer(head)}
        if not _REPORT_START.match(head):
            return ReportFile(path, OTHER, JSON, "JSON that does not begin with a report")
        if b"groups" in keys:
            return ReportFile(path, HWPC, JSON)
        if b"power" in keys:
            return ReportFile(path, POWER, JSON)
        return ReportFile(path, OTHER, JSON, "JSON without HWPC groups or power values")
    header = tuple(text.split(b"\n", 1)[0].decode("utf-8", "replace").strip().split(","))
    if "power" in header and ("sensor" in header or "target" in header):
        # its reader names any missing column; a power column alone (gpu-power.csv) is not one
        return ReportFile(path, POWER, CSV)
    if "cpu" in header or "socket" in header:
        return ReportFile(path, HWPC, CSV)
    if header[:1] == ("timestamp",) or "timestamp" in header:
        return ReportFile(path, OTHER, CSV, f"CSV reports without power or counters: {header}")
    return ReportFile(path, OTHER, "", "not a PowerAPI report file")


def report_paths(*paths: str | os.PathLike[str]) -> list[Path]:
    """Every file under ``paths`` (files or folders, recursively; hidden names skipped), sorted."""
    found: list[Path] = []
    for root in map(Path, paths):
        files = [root] if root.is_file() else (
            Path(folder) / name for folder, _, names in os.walk(root) for name in names)
        found += [file for file in files if not file.name.startswith(".")]
    return sorted(found)


def discover(*paths: str | os.PathLike[str]) -> list[ReportFile]:
    """Every file under ``paths`` (files or folders, recursively), classified, sorted by path."""
    return [classify(file) for file in report_paths(*paths)]


def holds_reports(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an HWPC or power report file, or a folder with one somewhere under it.

    Stops at the first one found; files that cannot be read or are empty do
    not count.
    """
    for file in report_paths(path):
        try:
            if classify(file).kind != OTHER:
                return True
        except (InputError, OSError):
            continue
    return False


def csv_group(path: Path) -> str:
    """The group of an hwpc-sensor CSV file: its name without extension (``rapl.csv``, ``rapl``)."""
    return path.name.removesuffix(".csv")


def is_inside(target: str) -> bool:
    """A target is a name or a relative cgroup path staying inside its report folder.

    PowerAPI turns a target into folders (``<sensor>-<target>/``), so an
    absolute path or one with ``..`` would point outside the output folder.
    """
    return bool(target) and not target.startswith("/") and ".." not in PurePosixPath(
        target).parts and "\\" not in target


def check_target(path: Path, target: str, line: int | None = None) -> str:
    """``target`` if :func:`is_inside`, else an InputError naming it."""
    if not is_inside(target):
        raise InputError(path, f"target {target!r} is a path outside the report folder",
                         line=line, field="target")
    return target


def check_power_report_folder(path: Path, sensor: str, target: str) -> None:
    """A 2.10.0 ``PowerReport.csv`` lies in ``<sensor>-<target>/`` (nested for a cgroup path)."""
    expected = PurePosixPath(f"{sensor}-{target}")
    parents = PurePosixPath(path.parent.as_posix()).parts
    if tuple(parents[-len(expected.parts):]) != expected.parts:
        raise InputError(path, f"sensor {sensor!r} and target {target!r} do not match the "
                         f"folder {path.parent.name!r} ({expected}/ expected)", line=2,
                         field="target")
