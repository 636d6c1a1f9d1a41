"""What a GEOPM report file is, which of the three shapes it has, and where reports land.

A report is one file per job (GEOPM writes it when the job ends). Its shape
is decided from its first bytes, never from a file name or a version string:

- ``legacy``: the 1.x text report, first line ``##### geopm <version> #####``,
  hosts as ``Host: <name>`` lines (not YAML: a YAML parser reads it without
  error and keeps only the last host);
- ``yaml``: the 2.x/3.x report (and some 1.1 dev builds), a YAML mapping
  with ``GEOPM Version`` and ``Hosts``;
- ``session``: the 3.x ``geopmsession --report-out`` report, YAML documents
  with ``host``, ``sample-time-first`` ... and ``metrics``.

A landing folder holds reports side by side; each is one entry of
:mod:`joulehouse.landing` (key ``<landing name>/<file name>``), complete once
quiet. Sniffing reads at most :data:`HEAD_BYTES` of each file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from joulehouse.landing import LandedItem, find_landed

Shape = Literal["legacy", "yaml", "session"]

#: Bytes read to decide a file's shape.
HEAD_BYTES = 4096

_LEGACY = re.compile(rb"\A\s*#{3,} *geopm\b", re.IGNORECASE)
_LEGACY_HOST = re.compile(rb"^Host: ", re.MULTILINE)
_YAML_KEYS = re.compile(rb"^(GEOPM Version|Hosts):", re.MULTILINE)
_SESSION_KEYS = re.compile(rb"^(host|sample-time-first|metrics):", re.MULTILINE)


def report_shape(head: bytes) -> Shape | None:
    """The shape of a report from its first bytes, or None when it is no GEOPM report.

    A ``#####  geopm`` first line or a top-level ``Host:`` line (what only the
    text report has) is ``legacy``; a top-level ``GEOPM Version`` or ``Hosts``
    key is ``yaml``; ``host``, ``sample-time-first`` and ``metrics`` keys
    are ``session``.
    """
    if _LEGACY.match(head) or _LEGACY_HOST.search(head):
        return "legacy"
    if _YAML_KEYS.search(head):
        return "yaml"
    if len({match.group(1) for match in _SESSION_KEYS.finditer(head)}) >= 2:
        return "session"
    return None


def file_shape(path: str | os.PathLike[str]) -> Shape | None:
    """The shape of the report at ``path`` (reads its first :data:`HEAD_BYTES`)."""
    with open(path, "rb") as handle:
        return report_shape(handle.read(HEAD_BYTES))


def identify_report(path: Path) -> list[Path] | None:
    """``[path]`` when ``path`` is a regular file holding a GEOPM report, else None.

    The ``identify`` of :func:`joulehouse.landing.find_landed`: a report is a
    single file; folders and other files are not reports.
    """
    try:
        if not path.is_file():
            return None
        return [path] if file_shape(path) is not None else None
    except OSError:  # removed or unreadable between the listing and the read
        return None


def find_reports(landing: str | os.PathLike[str], name: str | None = None) -> list[LandedItem]:
    """Every report directly in the folder ``landing``, keyed ``<name>/<file name>``.

    ``name`` defaults to the folder's name.
    """
    return find_landed(landing, name or Path(landing).resolve().name, identify_report)
