"""GEOPM reports of every shape read into frames: units SI, times UTC.

:func:`read_report` decides the shape from the content
(:func:`joulehouse.geopm.layout.report_shape`) and returns a :class:`Report`
of five frames (:mod:`joulehouse.geopm.schemas`): the header (one row), the
totals and the regions per host (the documented fields as columns), the
other fields in long form (``signals``) and, for a ``geopmsession`` report,
its per-host, per-signal statistics (``session``).

YAML reports are parsed by rapidyaml (C++), whose tree is emitted as JSON
and loaded by the standard library's C JSON decoder: no Python per YAML
node, and no type guessing by a YAML resolver (``1e+09`` is a number, the
host ``0012`` stays text, a duplicated host is an error instead of the last
one silently kept). Before parsing, each ``region: "..."`` line is re-quoted
in single quotes: GEOPM writes region names between double quotes without
escaping, so a ``"`` or ``\\`` in a name is taken literally, as GEOPM meant
it. The legacy text report is not YAML and has its own line reader.

Bad input is an InputError naming the file and the line: invalid YAML, a
truncated report (a host whose Application Totals lack the ``geopmctl``
lines GEOPM writes last), a region with no fields, a value that is not a
number, a duplicated host.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import ryml

from joulehouse.errors import InputError
from joulehouse.geopm import schemas
from joulehouse.geopm.layout import HEAD_BYTES, Shape, report_shape
from joulehouse.timeutil import UTC, TimestampError, localize
from joulehouse.validation import validate

#: Totals sections of a host: report key -> ``section`` value.
SECTIONS = {"Application Totals": "application", "Epoch Totals": "epoch",
            "Unmarked Totals": "unmarked"}
#: The legacy report's name of the unmarked totals (read into section ``unmarked``).
LEGACY_UNMARKED_REGION = "unmarked-region"
#: Fields GEOPM writes last in each host's Application Totals: a host without them is cut.
LAST_FIELDS = ("geopmctl memory HWM", "geopmctl network BW")

#: Unit in a field label -> (column suffix, factor to SI).
_UNITS = {"s": ("s", 1.0), "sec": ("s", 1.0), "J": ("j", 1.0), "joules": ("j", 1.0),
          "W": ("w", 1.0), "watts": ("w", 1.0), "%": ("pct", 1.0), "Hz": ("hz", 1.0),
          "B": ("b", 1.0), "kB": ("b", 1024.0), "B/s": ("b_per_s", 1.0),
          "B/sec": ("b_per_s", 1.0)}
_ALIASES = {"mpi_runtime_s": "network_time_s"}
_LABEL = re.compile(r"^(?P<name>.*?)\s*\((?P<unit>[^()]*)\)$")
_SIGNAL = re.compile(r"^(?P<signal>[^@]+)@(?P<domain>[A-Za-z_]+)-(?P<index>\d+)$")
_YAML_SPECIALS = {".nan": float("nan"), ".inf": float("inf"), "+.inf": float("inf"),
                  "-.inf": float("-inf")}
_HWM_COLUMN = "geopmctl_memory_hwm_b"

Locate = Callable[[int, str | None], "int | None"]
"""(row, field label or None) -> the 1-based line of that row's field in the file."""


@dataclass(frozen=True)
class Report:
    """One report's frames (see :mod:`joulehouse.geopm.schemas`); ``report`` is its key."""

    path: Path
    report: str
    shape: Shape
    header: pd.DataFrame
    totals: pd.DataFrame
    regions: pd.DataFrame
    signals: pd.DataFrame
    session: pd.DataFrame

    def frames(self) -> dict[str, pd.DataFrame]:
        """The frames by name: header, totals, regions, signals, session."""
        return {"header": self.header, "totals": self.totals, "regions": self.regions,
                "signals": self.signals, "session": self.session}


@dataclass
class _Sections:
    """A report's sections before conversion: ids and raw fields (label -> value) per row."""

    region_ids: list[tuple[str, str, str]] = field(default_factory=list)  # host, region, hash
    region_fields: list[dict[str, Any]] = field(default_factory=list)
    total_ids: list[tuple[str, str]] = field(default_factory=list)  # host, section
    total_fields: list[dict[str, Any]] = field(default_factory=list)
    host_fields: list[tuple[str, str, Any]] = field(default_factory=list)  # host, label, value
    hosts: list[str] = field(default_factory=list)


def read_report(path: str | os.PathLike[str], report: str | None = None,
                timezone: str = UTC) -> Report:
    """Read the report at ``path`` (any shape) into its frames.

    ``report`` is the key in every frame's ``report`` column (default: the
    file name); ``timezone`` is the zone of a ``Start Time`` written without
    one (GEOPM 1.x/2.x write the controller's local time).
    """
    path = Path(path)
    raw = path.read_bytes()
    key = report if report is not None else path.name
    shape = report_shape(raw[:HEAD_BYTES])
    if shape is None:
        raise InputError(path, "not a GEOPM report (no '##### geopm' line, 'Host:' line, "
                               "'GEOPM Version' / 'Hosts' key or session keys)", line=1)
    if shape == "legacy":
        header, sections, locate = _read_legacy(path, raw.decode("utf-8", "replace"))
        return _report(path, key, shape, header, sections, locate, timezone, hwm_is_kb=False)
    raw = _requote_regions(raw)  # same lines; the original is not kept (memory)
    documents = load_yaml(path, raw)
    if shape == "session":
        return _session_report(path, key, documents, timezone)
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise InputError(path, "a GEOPM report is one YAML mapping", line=1)
    header, sections, locate = _yaml_sections(path, raw, documents[0])
    _check_complete(path, sections, locate, raw.rstrip().count(b"\n") + 1)
    return _report(path, key, shape, header, sections, locate, timezone, hwm_is_kb=True)


# --- YAML -----------------------------------------------------------------------------------

# only names holding a '"' or '\\'; starts with a literal newline (a '^' or a look-behind
# is tried at every byte: 15x slower); line 1 of a report is never a region
_REGION_LINE = re.compile(rb'\n([ \t]*-?[ \t]*region: )"([^\n]*["\\][^\n]*)"[ \t]*(?=\r?\n|\Z)')


def _requote_regions(raw: bytes) -> bytes:
    """Each ``region: "name"`` line whose name holds ``"`` or ``\\`` with the name
    single-quoted (``'`` doubled), taken literally; ``raw`` itself when there is none."""
    def requote(match: re.Match[bytes]) -> bytes:
        return b"\n" + match.group(1) + b"'" + match.group(2).replace(b"'", b"''") + b"'"
    return _REGION_LINE.sub(requote, raw)


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        seen: set[str] = set()
        raise _DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return mapping


# ryml writes these plain scalars unquoted into JSON, where they are not JSON
_NOT_JSON = ("-nan", ": +", "[+", ",+", ", +")  # (a quick test; then the regex)
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|(?<![\w.])(-nan|[+]inf|[+](?=[0-9.]))')
_JSON_FIX = {"-nan": "NaN", "+inf": "Infinity", "+": ""}


def _json_text(tree: ryml.Tree, node: int) -> str:
    text = ryml.emit_json(tree, node)
    if any(token in text for token in _NOT_JSON):  # rare: rewrite them outside strings only
        text = _JSON_TOKEN.sub(
            lambda m: _JSON_FIX[m.group(1)] if m.group(1) is not None else m.group(0), text)
    return text


def load_yaml(path: str | os.PathLike[str], raw: bytes) -> list[Any]:
    """The YAML documents in ``raw`` as Python values (mappings, lists, numbers, text).

    Plain scalars that are numbers become int/float, other scalars text
    (``0012`` and ``0x1f`` stay text); a duplicated key is an InputError.
    """
    tree = ryml.Tree()
    tree.reserve(raw.count(b"\n") + 16)  # ~ one node per line: no doubling of the node array
    try:
        ryml.parse_in_arena(raw, tree=tree)
    except ryml.ExceptionParse as err:
        location = err.errdata_parse.ymlloc
        raise InputError(path, f"invalid YAML: {err.msg}", line=location.line or None) from None
    root = tree.root_id()
    nodes = []
    if tree.is_stream(root):
        child = tree.first_child(root)
        while child != ryml.NONE:
            nodes.append(child)
            child = tree.next_sibling(child)
    else:
        nodes.append(root)
    texts = [_json_text(tree, node) for node in nodes]
    del tree  # the tree (~5x the text) is freed before the JSON becomes Python values
    documents = []
    while texts:
        text = texts.pop(0)
        try:
            documents.append(json.loads(text, object_pairs_hook=_unique_keys))
        except _DuplicateKey as err:
            line = _line_of(raw, [b"\n" + err.key.encode() + b":", b" " + err.key.encode() + b":"],
                            nth=2)
            raise InputError(path, f"duplicated key {err.key!r}", line=line) from None
        except json.JSONDecodeError as err:  # pragma: no cover - ryml emitted invalid JSON
            raise InputError(path, f"YAML not representable as data: {err}") from None
    return [doc for doc in documents if doc is not None]


def _line_of(raw: bytes, needles: list[bytes], nth: int = 1, start: int = 0) -> int | None:
    """Line (1-based) of the ``nth`` occurrence of any of ``needles`` from ``start``."""
    position = start - 1
    for _ in range(nth):
        found = [p for p in (raw.find(n, position + 1) for n in needles) if p >= 0]
        if not found:
            return None
        position = min(found)
    return raw.count(b"\n", 0, position + 1) + 1


def _yaml_sections(path: Path, raw: bytes, doc: dict[str, Any]
                   ) -> tuple[dict[str, Any], _Sections, Locate]:
    """The header keys, and the sections of every host, of a YAML report."""
    hosts = doc.get("Hosts")
    if not isinstance(hosts, dict):
        raise InputError(path, "no 'Hosts' mapping", line=_line_of(raw, [b"\nHosts:"]),
                         field="Hosts")
    header = {k: v for k, v in doc.items() if k != "Hosts"}
    sections = _Sections()
    host_lines: dict[str, int] = {}

    def host_start(host: str) -> int:
        if host not in host_lines:
            line = _line_of(raw, [f"\n  {host}:".encode(), f"\n{host}:".encode()]) or 1
            host_lines[host] = line
        return host_lines[host]

    def offset_of_line(line: int) -> int:
        position = -1
        for _ in range(line - 1):
            position = raw.find(b"\n", position + 1)
        return max(position, 0)

    def locate_region(row: int, label: str | None) -> int | None:
        host = sections.region_ids[row][0]
        before = sum(1 for h, *_ in sections.region_ids[:row] if h == host)
        start = offset_of_line(host_start(host))
        line = _line_of(raw, [b"region:"], nth=before + 1, start=start)
        if line is None or label is None:
            return line
        return _line_of(raw, [label.encode() + b":"], start=offset_of_line(line))

    def locate_total(row: int, label: str | None) -> int | None:
        host, section = sections.total_ids[row]
        name = next(k for k, v in SECTIONS.items() if v == section)
        line = _line_of(raw, [name.encode() + b":"], start=offset_of_line(host_start(host)))
        if line is None or label is None:
            return line
        return _line_of(raw, [label.encode() + b":"], start=offset_of_line(line))

    for host, content in hosts.items():
        sections.hosts.append(host)
        if not isinstance(content, dict):
            raise InputError(path, f"host {host!r} is not a mapping", line=host_start(host))
        for key, value in content.items():
            if key == "Regions":
                _yaml_regions(path, host, value, sections, host_start)
            elif key in SECTIONS:
                if value:  # an empty Unmarked/Epoch Totals ({} or null) is as if left out
                    if not isinstance(value, dict):
                        raise InputError(path, f"{key} of host {host!r} is not a mapping",
                                         line=host_start(host))
                    sections.total_ids.append((host, SECTIONS[key]))
                    sections.total_fields.append(value)
            else:
                sections.host_fields.extend((host, label, v) for label, v in _flat(key, value))
    return header, sections, _Locator(locate_region, locate_total)


def _yaml_regions(path: Path, host: str, regions: Any, sections: _Sections,
                  host_start: Callable[[str], int]) -> None:
    if regions is None:
        return
    if not isinstance(regions, list):
        raise InputError(path, f"Regions of host {host!r} is not a list", line=host_start(host))
    for entry in regions:
        if not isinstance(entry, dict) or "region" not in entry:
            raise InputError(path, f"a region of host {host!r} has no 'region' name",
                             line=host_start(host))
        fields = dict(entry)
        name, hash_text = str(fields.pop("region")), fields.pop("hash", None)
        sections.region_ids.append((host, name, hash_text))
        sections.region_fields.append(fields)


def _flat(label: str, value: Any) -> list[tuple[str, Any]]:
    """An agent's host addition: a value, or a map of values as ``label/key`` fields."""
    if isinstance(value, dict):
        return [(f"{label}/{key}", v) for key, v in value.items()]
    return [(label, value)]


@dataclass(frozen=True)
class _Locator:
    """Where rows of the regions and totals lists are in the file."""

    region: Locate
    total: Locate


# --- legacy text ----------------------------------------------------------------------------

_VERSION_LINE = re.compile(r"^#+ *geopm +(?P<version>\S+) *#*\s*$", re.IGNORECASE)
_REGION_HEAD = re.compile(r"^Region (?P<name>.*) \((?P<hash>0x[0-9A-Fa-f]+)\):\s*$")
_KB_VALUE = re.compile(r"^(?P<value>\S+) kB$")


def _read_legacy(path: Path, text: str) -> tuple[dict[str, Any], _Sections, _Locator]:
    """The header, and the sections of every host, of a legacy (1.x) text report."""
    header: dict[str, Any] = {}
    sections = _Sections()
    region_lines: list[dict[str | None, int]] = []  # per row: label -> line (None: heading)
    total_lines: list[dict[str | None, int]] = []
    host: str | None = None
    current: tuple[dict[str, Any], dict[str | None, int]] | None = None
    map_label: str | None = None  # an agent's host map being read (e.g. Final online freq map)
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped:
            continue
        if line[0] in " \t":
            label, sep, value = stripped.rpartition(":")
            if not sep or not label:
                raise InputError(path, f"not a 'field: value' line: {stripped!r}", line=number)
            value = value.strip()
            kb = _KB_VALUE.match(value)
            if kb is not None and not _LABEL.match(label):
                label, value = f"{label} (kB)", kb["value"]
            if current is not None:
                current[0][label] = value
                current[1][label] = number
            elif map_label is not None and host is not None:
                sections.host_fields.append((host, f"{map_label}/{label}", value))
            else:
                raise InputError(path, "field outside any host section", line=number)
            continue
        current, map_label = None, None
        if number == 1 and _VERSION_LINE.match(line):
            header["GEOPM Version"] = _VERSION_LINE.match(line)["version"]
            continue
        if stripped.startswith("Host:"):
            host = stripped[len("Host:"):].strip()
            if host in sections.hosts:
                raise InputError(path, f"duplicated host {host!r}", line=number)
            sections.hosts.append(host)
            continue
        region = _REGION_HEAD.match(stripped)
        key, sep, value = stripped.partition(":")
        if host is not None and (region is not None or stripped[:-1] in SECTIONS):
            fields: dict[str, Any] = {}
            where: dict[str | None, int] = {None: number}
            current = (fields, where)
            if region is not None and region["name"] != LEGACY_UNMARKED_REGION:
                sections.region_ids.append((host, region["name"], region["hash"]))
                sections.region_fields.append(fields)
                region_lines.append(where)
            else:
                name = "Unmarked Totals" if region is not None else stripped[:-1]
                sections.total_ids.append((host, SECTIONS[name]))
                sections.total_fields.append(fields)
                total_lines.append(where)
        elif sep and value.strip():
            header[key.strip()] = value.strip()
        elif sep and host is not None:
            map_label = key.strip()
        else:
            raise InputError(path, f"unexpected line {stripped!r}", line=number)
    last_line = next((n for n in range(len(lines), 0, -1) if lines[n - 1].strip()), 1)

    def locate(line_maps: list[dict[str | None, int]]) -> Locate:
        def where(row: int, label: str | None) -> int | None:
            found = line_maps[row]
            return found.get(label, found[None])
        return where

    locator = _Locator(locate(region_lines), locate(total_lines))
    _check_complete(path, sections, locator, last_line)
    return header, sections, locator


# --- common ---------------------------------------------------------------------------------


def _check_complete(path: Path, sections: _Sections, locator: _Locator,
                    last_line: int | None) -> None:
    """Every host has Application Totals ending with the geopmctl lines; no region is empty.

    The hosts are checked first: a report cut anywhere in its last host is
    reported as truncated, whatever the cut left half-written.
    """
    if not sections.hosts:
        raise InputError(path, "no host in the report", line=last_line)
    applications = {host: row for row, (host, section) in enumerate(sections.total_ids)
                    if section == "application"}
    for host in sections.hosts:
        row = applications.get(host)
        labels = [] if row is None else list(sections.total_fields[row])
        missing = [name for name in LAST_FIELDS
                   if not any(label.startswith(name) for label in labels)]
        if missing:
            cut = host == sections.hosts[-1]
            line = last_line if cut or row is None else locator.total(row, None)
            what = "no Application Totals" if row is None else f"no '{missing[0]}' line"
            raise InputError(path, f"{'truncated report: ' if cut else ''}host {host!r} has "
                                   f"{what} (GEOPM writes it last)", line=line)
    for row, fields in enumerate(sections.region_fields):
        if not fields:
            host, name, _ = sections.region_ids[row]
            raise InputError(path, f"region {name!r} of host {host!r} has no fields",
                             line=locator.region(row, None))


def field_column(label: str) -> tuple[str | None, float]:
    """The field column of a report label and the factor to SI; (None, 1) for other fields.

    ``runtime (sec)`` and ``runtime (s)`` are both ``runtime_s``; a label
    without unit (``count``) keeps its name; ``mpi-runtime (sec)`` (1.0) is
    ``network_time_s``.
    """
    match = _LABEL.match(label)
    name, unit = (match["name"], match["unit"]) if match else (label, None)
    column = re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")
    factor = 1.0
    if unit is not None:
        if unit not in _UNITS:
            return None, 1.0
        suffix, factor = _UNITS[unit]
        column = f"{column}_{suffix}"
    column = _ALIASES.get(column, column)
    return (column, factor) if column in schemas.FIELD_COLUMNS else (None, factor)


def _number(path: Path, value: Any, label: str, line: int | None) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        special = _YAML_SPECIALS.get(text.lower())
        if special is not None:
            return special
        try:
            return float(text)
        except ValueError:
            pass
    raise InputError(path, f"not a number: {value!r}", line=line, field=label)


def _numbers(path: Path, values: np.ndarray, label: str, rows: list[int],
             locate: Locate) -> np.ndarray:
    """Float64 values of one field over rows; InputError at the first one not a number.

    Numbers and numeric text convert in one numpy pass; anything else (YAML's
    ``.nan``, a bool, a missing value, a bad number) value by value.
    """
    if set(map(type, values)) <= {float, int, str}:
        try:
            return values.astype("float64")
        except (TypeError, ValueError):
            pass
    return np.array([_number(path, value, label, locate(rows[k], label))
                     if not isinstance(value, (float, int)) or isinstance(value, bool)
                     else float(value) for k, value in enumerate(values)], dtype="float64")


def _field_frame(path: Path, ids: pd.DataFrame, fields: list[dict[str, Any]],
                 section: str | None, locate: Locate, hwm_is_kb: bool,
                 long_parts: list[pd.DataFrame]) -> pd.DataFrame:
    """``ids`` with one column per documented field; the other fields go to ``long_parts``.

    Rows with the same labels in the same order (every region of a report,
    usually) are converted together, one numpy conversion per field.
    """
    count = len(fields)
    columns = {name: np.full(count, np.nan) for name in schemas.FIELD_COLUMNS}
    groups: dict[tuple[str, ...], list[int]] = {}
    for row, values in enumerate(fields):
        groups.setdefault(tuple(values), []).append(row)
    for labels, rows in groups.items():
        matrix = np.empty((len(rows), len(labels)), dtype=object)
        matrix[:] = [list(fields[row].values()) for row in rows]
        index = np.asarray(rows)
        for position, label in enumerate(labels):
            values = _numbers(path, matrix[:, position], label, rows, locate)
            column, factor = field_column(label)
            if column == _HWM_COLUMN and hwm_is_kb:
                values = _hwm_bytes(values)
            elif factor != 1.0:
                values = values * factor
            if column is not None:
                columns[column][index] = values
            else:
                long_parts.append(_long(ids.iloc[index], section, label, values))
    return pd.concat([ids.reset_index(drop=True), pd.DataFrame(columns)], axis=1)


def _hwm_bytes(values: np.ndarray) -> np.ndarray:
    """``geopmctl memory HWM (B)`` in bytes: GEOPM's Reporter writes kB under that label.

    A value that is a multiple of 1024 and at least 1 MiB is taken as bytes
    already (geopmpy's update_report converter multiplied 1.x kB by 1024);
    any other is kB. A real kB figure passes that test with chance 1/1024
    and only for a controller of 1 GiB or more.
    """
    already_bytes = (values % 1024 == 0) & (values >= 2**20)
    return np.where(already_bytes, values, values * 1024)


def _long(ids: pd.DataFrame, section: str | None, label: str, values: np.ndarray
          ) -> pd.DataFrame:
    """Rows of the signals frame for one non-documented field."""
    match = _SIGNAL.match(label)
    count = len(values)
    return pd.DataFrame({
        "report": ids["report"].to_numpy(),
        "host": ids["host"].to_numpy(),
        "section": ids["section"].to_numpy() if section is None else np.full(count, section),
        "region": ids["region"].to_numpy() if "region" in ids else np.full(count, None),
        "field": label,
        "signal": match["signal"] if match else label,
        "domain": match["domain"] if match else None,
        "domain_index": pd.array([int(match["index"]) if match else None] * count,
                                 dtype="Int64"),
        "value": values,
    })


def _hash(path: Path, text: Any, line: Callable[[], int | None]) -> str:
    """A region hash as ``0x%08x`` (lower case; legacy 0x%016x shortened); ``line()``
    finds its line for the error (only then: locating is a search of the text)."""
    try:
        return f"0x{int(str(text), 16):08x}"
    except ValueError:
        raise InputError(path, f"not a hexadecimal hash: {text!r}", line=line(),
                         field="hash") from None


def parse_start_time(path: Path, text: Any, timezone: str) -> pd.Timestamp | None:
    """``Start Time`` in UTC: C's asctime (no zone: in ``timezone``) or ISO 8601."""
    if text is None:
        return None
    text = str(text).strip()
    try:
        stamp = pd.Timestamp(datetime.strptime(text, "%a %b %d %H:%M:%S %Y"))
    except ValueError:
        try:
            stamp = pd.Timestamp(text)
        except ValueError:
            raise InputError(path, f"not a time: {text!r}", field="Start Time") from None
    if stamp.tzinfo is not None:
        return stamp.tz_convert(UTC)
    try:
        return localize(pd.DatetimeIndex([stamp]), timezone)[0]
    except TimestampError as err:
        raise InputError(path, str(err), field="Start Time") from None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _policy(value: Any) -> str | None:
    """Policy as JSON text: a mapping (YAML's or JSON text's) dumped, other text kept."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return value
    return None if value is None else (json.dumps(value) if isinstance(value, (dict, list))
                                       else str(value))


def _optional_number(path: Path, header: dict[str, Any], key: str) -> float:
    return np.nan if header.get(key) is None else _number(path, header[key], key, None)


def _ids(report: str, **columns: list[str]) -> pd.DataFrame:
    """Text id columns (object dtype, also when empty) after a constant ``report``."""
    count = len(next(iter(columns.values())))
    return pd.DataFrame({"report": pd.Series([report] * count, dtype=object),
                         **{name: pd.Series(values, dtype=object)
                            for name, values in columns.items()}})


_HEADER_KEYS = ("GEOPM Version", "Start Time", "Profile", "Agent", "Policy",
                "Figure of Merit", "Total Runtime")


def _report(path: Path, key: str, shape: Shape, header: dict[str, Any], sections: _Sections,
            locator: _Locator, timezone: str, hwm_is_kb: bool) -> Report:
    long_parts: list[pd.DataFrame] = []
    region_ids = _ids(key, host=[host for host, _, _ in sections.region_ids],
                      region=[name for _, name, _ in sections.region_ids],
                      hash=[_hash(path, h, lambda row=row: locator.region(row, "hash"))
                            for row, (_, _, h) in enumerate(sections.region_ids)])
    regions = _field_frame(path, region_ids, sections.region_fields, "region",
                           locator.region, hwm_is_kb, long_parts)
    total_ids = _ids(key, host=[host for host, _ in sections.total_ids],
                     section=[section for _, section in sections.total_ids])
    totals = _field_frame(path, total_ids, sections.total_fields, None, locator.total,
                          hwm_is_kb, long_parts)
    if sections.host_fields:
        host_ids = _ids(key, host=[host for host, _, _ in sections.host_fields])
        for label in dict.fromkeys(label for _, label, _ in sections.host_fields):
            rows = [row for row, (_, lab, _) in enumerate(sections.host_fields) if lab == label]
            values = np.array([_number(path, sections.host_fields[row][2], label, None)
                               for row in rows])
            long_parts.append(_long(host_ids.iloc[rows], "host", label, values))
    signals = (pd.concat(long_parts, ignore_index=True) if long_parts
               else schemas.empty_frame(schemas.SIGNALS_SCHEMA))
    header_row = pd.DataFrame({
        "report": [key],
        "shape": shape,
        "geopm_version": _text(header.get("GEOPM Version")),
        "start_time": pd.Series([parse_start_time(path, header.get("Start Time"), timezone)],
                                dtype=schemas.UTC_TIME),
        "profile": _text(header.get("Profile")),
        "agent": _text(header.get("Agent")),
        "policy_json": _policy(header.get("Policy")),
        "figure_of_merit": _optional_number(path, header, "Figure of Merit"),
        "total_runtime_s": _optional_number(path, header, "Total Runtime"),
        "extra_json": json.dumps({k: v for k, v in header.items() if k not in _HEADER_KEYS}),
        "host_count": len(sections.hosts),
        "region_count": regions["region"].nunique(),
    })
    return Report(
        path, key, shape,
        header=validate(schemas.HEADER_SCHEMA, header_row, path),
        totals=validate(schemas.TOTALS_SCHEMA, totals, path),
        regions=validate(schemas.REGIONS_SCHEMA, regions, path),
        signals=validate(schemas.SIGNALS_SCHEMA, signals, path),
        session=schemas.empty_frame(schemas.SESSION_SCHEMA),
    )


# --- geopmsession --report-out --------------------------------------------------------------

_SESSION_FIELDS = {"sample-time-total": "sample_time_total_s", "sample-count": "sample_count",
                   "sample-period-mean": "sample_period_mean_s",
                   "sample-period-std": "sample_period_std_s"}
_STATISTICS = ("count", "first", "last", "min", "max", "mean", "std")


def _session_report(path: Path, key: str, documents: list[Any], timezone: str) -> Report:
    """A ``geopmsession --report-out`` report: one YAML document per host."""
    rows = []
    for number, doc in enumerate(documents, 1):
        if not isinstance(doc, dict) or not isinstance(doc.get("metrics"), dict):
            raise InputError(path, f"session document {number} has no 'metrics' mapping",
                             field="metrics")
        host = _text(doc.get("host"))
        if host is None:
            raise InputError(path, f"session document {number} has no 'host'", field="host")
        per_host = {"report": key, "host": host,
                    "sample_time_first": parse_start_time(path, doc.get("sample-time-first"),
                                                     timezone)}
        for label, column in _SESSION_FIELDS.items():
            per_host[column] = (np.nan if doc.get(label) is None
                                else _number(path, doc[label], label, None))
        for signal, stats in doc["metrics"].items():
            if not isinstance(stats, dict):
                raise InputError(path, f"signal {signal!r} of host {host!r} has no statistics",
                                 field=signal)
            row = dict(per_host, signal=signal)
            for stat in _STATISTICS:
                column = stat if stat == "count" else f"{stat}_si"
                row[column] = (np.nan if stats.get(stat) is None
                               else _number(path, stats[stat], f"{signal}.{stat}", None))
            rows.append(row)
    columns = list(schemas.SESSION_SCHEMA.columns)
    session = pd.DataFrame(rows, columns=columns)
    session["sample_time_first"] = pd.to_datetime(session["sample_time_first"], utc=True)
    hosts = list(dict.fromkeys(session["host"]))
    starts = session["sample_time_first"].dropna()
    header_row = pd.DataFrame({
        "report": [key], "shape": "session", "geopm_version": None,
        "start_time": pd.Series([starts.min() if len(starts) else pd.NaT],
                                dtype=schemas.UTC_TIME),
        "profile": None, "agent": None, "policy_json": None,
        "figure_of_merit": np.nan, "total_runtime_s": np.nan, "extra_json": "{}",
        "host_count": len(hosts), "region_count": 0,
    })
    header_row[["geopm_version", "profile", "agent", "policy_json"]] = header_row[
        ["geopm_version", "profile", "agent", "policy_json"]].astype(object)
    return Report(
        path, key, "session",
        header=validate(schemas.HEADER_SCHEMA, header_row, path),
        totals=schemas.empty_frame(schemas.TOTALS_SCHEMA),
        regions=schemas.empty_frame(schemas.REGIONS_SCHEMA),
        signals=schemas.empty_frame(schemas.SIGNALS_SCHEMA),
        session=validate(schemas.SESSION_SCHEMA, session, path),
    )
