"""TAU profiles as trials: the text reader, TAU's reader rules shared with ``ppk``, and
what a path is as a profile set (:func:`identify_profile_set`).

A folder of text profiles holds one file ``profile.<node>.<context>.<thread>``
per thread (TAU's ``TauDataSource``, data_source 1); a run with several
metrics holds one ``MULTI__<metric>`` sub-folder of such files per metric.

TAU's reader rules, applied here as TAU applies them (``docs/tau-profiles.md``):

- names: runs of two or more spaces collapse to one, then Java's ``trim``;
  entries of one thread with the same normalised name are summed (timers) or
  combined (user events: counts and SumSqr add, mean weighted, min/max);
- text only: timer lines with 0 calls and user events with 0 samples are
  skipped, negative inclusive/exclusive values become 0;
- calls, subroutines, groups and user events come from the first metric;
  every metric adds its own inclusive/exclusive values;
- groups: ``GROUP="a | b"`` becomes ``"a|b"``; callpath entries (``A => B``)
  keep none (TAUdb holds the groups of flat timers only);
- metadata: the ``<attribute><name/><value/></attribute>`` pairs of each
  file, trimmed, XML entities resolved, the last of a duplicate name wins,
  ``Metric Name`` removed (it names the metric).

Values keep TAU's units and types: TIME in microseconds, everything a float
(TAU reads doubles; its loader truncates calls to int when writing them).
"""

from __future__ import annotations

import hashlib
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from joulehouse.errors import InputError
from joulehouse.leftout import LeftOut
from joulehouse.taudb.model import DATA_SOURCE_TAU_PROFILES, THREAD_COLUMNS, TrialData

PROFILE_NAME = re.compile(r"profile\.(\d+)\.(\d+)\.(\d+)")
MULTI_PREFIX = "MULTI__"
PPK_SUFFIX = ".ppk"
DEFAULT_METRIC = "Time"  # TAU's name when neither the header nor the metadata names one
#: The left-out records' source, and how many names a record quotes.
LEFT_OUT_SOURCE = "tau"
NAMES_QUOTED = 3

#: A user event's statistics, in the text format's order (the .ppk has min before max).
COUNTER_STATS = ["sample_count", "maximum", "minimum", "mean", "sum_squares"]

#: Characters Java's ``String.trim`` removes (all up to and including the space).
_JAVA_TRIM = "".join(map(chr, range(33)))
_SPACE_RUN = re.compile(" {2,}")

_HEADER = re.compile(r"\s*(\d+)\s+templated_functions(\S*)")
_COUNT_LINE = re.compile(r"\s*(\S+)\s+(aggregates|userevents)\b.*")


def _entry_line(numbers: int, group: bool) -> re.Pattern:
    """``"name"`` then ``numbers`` fields (one capture) then maybe ``GROUP="..."``."""
    fields = rf"((?:[ \t]+\S+){{{numbers}}})"
    return re.compile(r'^"(.*)"' + fields + (r'(?:[ \t]+GROUP="(.*)")?' if group else "")
                      + r"[ \t]*$", re.MULTILINE)


_TIMER_LINE = _entry_line(5, group=True)
#: With profile statistics (``SumExclSqr`` in the heading) a sixth number precedes ProfileCalls.
_TIMER_LINE_STATS = _entry_line(6, group=True)
_COUNTER_LINE = _entry_line(5, group=False)
_TIMER_FIELDS = ["calls", "subroutines", "exclusive", "inclusive"]


# --- TAU's rules, shared with the ppk reader ---------------------------------------------------


def normalise_names(names: Iterable[str]) -> list[str]:
    """TAU's name normalisation: runs of 2+ spaces become one space, then Java's trim."""
    return [_SPACE_RUN.sub(" ", name).strip(_JAVA_TRIM) for name in names]


def _name_codes(names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(code per entry, unique normalised names): names that normalise alike share a code."""
    codes, uniques = pd.factorize(pd.Series(names, dtype=object))
    clean_codes, clean = pd.factorize(pd.Series(normalise_names(uniques), dtype=object))
    return clean_codes[codes], np.asarray(clean, dtype=object)


def _group_strings(groups: Sequence[str | None]) -> np.ndarray:
    """TAU's ``GROUP="a | b"`` as ``"a|b"`` (each name trimmed, empty ones dropped)."""
    codes, uniques = pd.factorize(pd.Series(groups, dtype=object))
    clean = ["|".join(p for p in (part.strip(_JAVA_TRIM) for part in g.split("|")) if p)
             for g in uniques]
    return np.array([*clean, ""], dtype=object)[codes]  # code -1 (no GROUP=) -> ""


def _union_groups(groups: pd.Series) -> str:
    return "|".join(dict.fromkeys(p for g in groups for p in g.split("|") if p))


def _with_threads(threads: np.ndarray, rows: np.ndarray, columns: dict) -> pd.DataFrame:
    """A frame of THREAD_COLUMNS (``threads[rows]``) followed by ``columns``."""
    ranks = {c: threads[rows, i] for i, c in enumerate(THREAD_COLUMNS)}
    return pd.DataFrame({**ranks, **columns})


def _by_thread(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in thread order (stable: a thread's entries keep their file order)."""
    return frame.iloc[np.argsort(frame["thread"].to_numpy(), kind="stable")]


def timer_frames(threads: np.ndarray, thread_of_row: np.ndarray, names: Sequence[str],
                 groups: Sequence[str | None], calls: np.ndarray, subroutines: np.ndarray,
                 values: np.ndarray, metrics: Sequence[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``timers`` and ``timer_values`` of raw entries, TAU's rules applied.

    ``thread_of_row`` indexes ``threads`` (n, 3); ``values`` is (rows, metrics, 2),
    inclusive then exclusive. Names are normalised, entries of one thread with
    the same name summed (which also merges metrics read as separate rows),
    callpaths lose their groups.
    """
    codes, uniques = _name_codes(names)
    is_callpath = np.array(["=>" in name for name in uniques], dtype=bool)
    group_names = _group_strings(groups)
    group_names[is_callpath[codes]] = ""
    value_columns = [f"{kind}{m}" for m in range(len(metrics)) for kind in ("incl", "excl")]
    frame = pd.DataFrame({"thread": thread_of_row, "code": codes, "group_names": group_names,
                          "calls": calls, "subroutines": subroutines,
                          **dict(zip(value_columns, values.reshape(len(codes), -1).T))})
    keys = ["thread", "code"]
    if frame.duplicated(keys).any():
        sums = frame.groupby(keys, sort=False)[["calls", "subroutines", *value_columns]].sum()
        named = frame.loc[frame["group_names"] != "", [*keys, "group_names"]].drop_duplicates()
        group_union = named.groupby(keys, sort=False)["group_names"].agg(_union_groups)
        frame = sums.join(group_union).fillna({"group_names": ""}).reset_index()
    frame = _by_thread(frame)
    rows = frame["thread"].to_numpy()
    name = uniques[frame["code"].to_numpy()]
    timers = _with_threads(threads, rows, {"name": name, "group_names": frame["group_names"],
                                           "calls": frame["calls"],
                                           "subroutines": frame["subroutines"]})
    timer_values = pd.concat(
        [_with_threads(threads, rows, {"name": name, "metric": metric,
                                       "inclusive": frame[f"incl{m}"].to_numpy(),
                                       "exclusive": frame[f"excl{m}"].to_numpy()})
         for m, metric in enumerate(metrics)], ignore_index=True)
    return timers.reset_index(drop=True), timer_values


def counter_frame(threads: np.ndarray, thread_of_row: np.ndarray, names: Sequence[str],
                  stats: np.ndarray) -> pd.DataFrame:
    """``counters`` of raw user events; ``stats`` is (rows, 5) in COUNTER_STATS order.

    Names are normalised; entries of one thread with the same name combine as
    TAU does: counts and SumSqr add, min of mins, max of maxes, count-weighted mean.
    """
    codes, uniques = _name_codes(names)
    frame = pd.DataFrame({"thread": thread_of_row, "code": codes,
                          **dict(zip(COUNTER_STATS, stats.reshape(-1, len(COUNTER_STATS)).T))})
    keys = ["thread", "code"]
    if frame.duplicated(keys).any():
        frame["weighted"] = frame["mean"] * frame["sample_count"]
        frame = frame.groupby(keys, sort=False, as_index=False).agg(
            sample_count=("sample_count", "sum"), maximum=("maximum", "max"),
            minimum=("minimum", "min"), weighted=("weighted", "sum"),
            sum_squares=("sum_squares", "sum"))
        count = frame["sample_count"]
        frame["mean"] = (frame["weighted"] / count.where(count != 0)).fillna(0.0)
    frame = _by_thread(frame)
    counters = _with_threads(threads, frame["thread"].to_numpy(),
                             {"name": uniques[frame["code"].to_numpy()],
                              **{c: frame[c].to_numpy() for c in COUNTER_STATS}})
    return counters


def metadata_frame(threads: np.ndarray, pairs: Sequence[Sequence[tuple[str, str]]]) -> pd.DataFrame:
    """``metadata`` of each thread's (name, value) pairs in order; the last of a
    duplicate name wins."""
    rows: list[int] = []
    names: list[str] = []
    values: list[str] = []
    for index, thread_pairs in enumerate(pairs):
        merged = dict(thread_pairs)
        rows += [index] * len(merged)
        names += merged.keys()
        values += merged.values()
    return _with_threads(threads, np.asarray(rows, dtype=np.intp),
                         {"name": pd.Series(names, dtype=object),
                          "value": pd.Series(values, dtype=object)})


def make_trial(*, name: str, data_source: int, metrics: list[str], threads: np.ndarray,
               timers: pd.DataFrame, timer_values: pd.DataFrame, counters: pd.DataFrame,
               metadata: pd.DataFrame, source_key: str, fingerprint: str,
               trial_metadata: dict[str, str] | None = None) -> TrialData:
    """The TrialData of a TAU source; ``threads`` is (n, 3), sorted, one row per thread."""
    return TrialData(
        name=name, data_source=data_source, metrics=metrics,
        threads=pd.DataFrame(threads.astype(np.int64).reshape(-1, 3), columns=THREAD_COLUMNS),
        timers=timers, timer_values=timer_values, counters=counters, metadata=metadata,
        source_key=source_key, fingerprint=fingerprint, trial_metadata=trial_metadata or {})


# --- the text format ---------------------------------------------------------------------------


@dataclass
class TextProfile:
    """One parsed ``profile.N.C.T`` file: raw entries (names not yet normalised)."""

    metric: str | None = None
    names: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    #: (timers, 4): calls, subroutines, exclusive, inclusive
    numbers: np.ndarray = field(default_factory=lambda: np.empty((0, 4)))
    counter_names: list[str] = field(default_factory=list)
    #: (user events, 5) in COUNTER_STATS order, which is the file's
    counter_stats: np.ndarray = field(default_factory=lambda: np.empty((0, 5)))
    metadata: list[tuple[str, str]] = field(default_factory=list)


def _lines(data: bytes) -> list[str]:
    """The lines as Java's readLine splits them (\\n, \\r or \\r\\n); bad UTF-8 replaced."""
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _numbers(path: Path, rows: Sequence[str], first_line: int, fields: list[str]) -> np.ndarray:
    """The numbers of consecutive lines (each its fields as text) as floats (rows, fields)."""
    try:
        return np.array(" ".join(rows).split(), dtype=np.float64).reshape(-1, len(fields))
    except ValueError:
        for offset, row in enumerate(rows):
            for column, text in zip(fields, row.split()):
                try:
                    float(text)
                except ValueError:
                    raise InputError(path, f"not a number: {text!r}", line=first_line + offset,
                                     field=column) from None
        raise


def _match_block(path: Path, lines: list[str], start: int, count: int, pattern: re.Pattern,
                 what: str, shape: str) -> list[tuple[str, ...]]:
    """The ``count`` lines from index ``start``, each matched by ``pattern``."""
    block = lines[start:start + count]
    found = pattern.findall("\n".join(block)) if block else []
    if len(found) == count:
        return found
    for offset, line in enumerate(block):
        if not pattern.match(line):
            if _COUNT_LINE.fullmatch(line) or line.startswith("#"):
                raise InputError(path, f"truncated: {offset} of the {count} {what} lines the "
                                 f"file announces, then {line!r}", line=start + offset + 1)
            raise InputError(path, f"expected a {what} line {shape}, found {line!r}",
                             line=start + offset + 1)
    raise InputError(path, f"truncated: {len(block)} of the {count} {what} lines the file "
                     "announces, then the end of the file", line=len(lines) + 1)


def _count(path: Path, lines: list[str], index: int, word: str) -> int:
    """The count of the ``<k> aggregates`` / ``<k> userevents`` line at ``index``."""
    if index >= len(lines):
        raise InputError(path, f"truncated: expected '<count> {word}', found the end of the file",
                         line=index + 1)
    match = _COUNT_LINE.fullmatch(lines[index])
    if not match or match.group(2) != word:
        raise InputError(path, f"expected '<count> {word}', found {lines[index]!r}",
                         line=index + 1)
    if not match.group(1).isdigit():
        raise InputError(path, f"not a number: {match.group(1)!r}", line=index + 1, field=word)
    return int(match.group(1))


def parse_metadata(path: Path, line: str, line_no: int) -> list[tuple[str, str]]:
    """The (name, value) pairs of the ``<metadata>`` block in ``line``, in order."""
    start = line.find("<metadata>")
    if start < 0:
        return []
    end = line.find("</metadata>", start)
    if end < 0:
        raise InputError(path, "no closing </metadata>", line=line_no, field="metadata")
    try:
        root = ET.fromstring(line[start:end + len("</metadata>")])
    except ET.ParseError as err:
        raise InputError(path, f"not well-formed XML ({err})", line=line_no,
                         field="metadata") from None
    pairs, current = [], ""
    for element in root.iter():
        if element.tag == "name":
            current = (element.text or "").strip(_JAVA_TRIM)
        elif element.tag == "value":
            pairs.append((current, (element.text or "").strip(_JAVA_TRIM)))
    return pairs


def parse_profile(path: Path, data: bytes, *, with_counters: bool = True) -> TextProfile:
    """Parse the text profile ``path`` (``data``: its bytes); InputError names file and line.

    User events are read only ``with_counters`` (TAU reads them from the first metric).
    """
    lines = _lines(data)
    profile = TextProfile()
    header = _HEADER.match(lines[0]) if lines else None
    if header is None:
        found = repr(lines[0]) if lines else "an empty file"
        raise InputError(path, "not a TAU profile: expected '<count> templated_functions...', "
                         f"found {found}", line=1)
    count = int(header.group(1))
    if header.group(2).startswith("_MULTI_"):
        profile.metric = header.group(2)[len("_MULTI_"):]
    if len(lines) < 2 or not lines[1].startswith("#"):
        found = repr(lines[1]) if len(lines) > 1 else "the end of the file"
        raise InputError(path, "not a TAU profile: expected '# Name Calls Subrs Excl Incl "
                         f"ProfileCalls...', found {found}", line=2)
    profile.metadata = parse_metadata(path, lines[1], 2)
    profile.metric = dict(profile.metadata).get("Metric Name", profile.metric)

    stats = "SumExclSqr" in lines[1].split("<metadata>", 1)[0]
    fields = [*_TIMER_FIELDS, *(["sumexclsqr"] if stats else []), "profilecalls"]
    found = _match_block(path, lines, 2, count, _TIMER_LINE_STATS if stats else _TIMER_LINE,
                         "timer", '"name" ' + " ".join(fields) + ' GROUP="..."')
    if found:
        columns = list(zip(*found))
        profile.names = list(columns[0])
        profile.groups = list(columns[2])
        profile.numbers = _numbers(path, columns[1], 3, fields)[:, :4]

    index = 2 + count
    index += 1 + _count(path, lines, index, "aggregates")
    if with_counters and index < len(lines) and lines[index].strip():
        events = _count(path, lines, index, "userevents")
        found = _match_block(path, lines, index + 2, events, _COUNTER_LINE, "user event",
                             '"name" numevents max min mean sumsqr')
        if found:
            columns = list(zip(*found))
            profile.counter_names = list(columns[0])
            profile.counter_stats = _numbers(path, columns[1], index + 3, COUNTER_STATS)
    return profile


def _profiles_in(folder: Path) -> dict[tuple[int, int, int], Path]:
    """The ``profile.N.C.T`` files of ``folder`` by (node, context, thread), sorted."""
    found = {}
    for path in folder.iterdir():
        match = PROFILE_NAME.fullmatch(path.name)
        if match and path.is_file():
            found[tuple(int(x) for x in match.groups())] = path
    return dict(sorted(found.items()))


def find_profile_layout(path: Path) -> list[tuple[Path, dict]] | None:
    """The metric folders of a profile set with their profiles by thread, or None.

    TAU's rule: ``profile.N.C.T`` files in ``path`` make one metric; without
    them each ``MULTI__*`` sub-folder is one metric (in name order here; TAU
    takes the file system's order, so "the first metric" is arbitrary there).
    """
    if not path.is_dir():
        return None
    own = _profiles_in(path)
    if own:
        return [(path, own)]
    folders = sorted(p for p in path.iterdir() if p.name.startswith(MULTI_PREFIX) and p.is_dir())
    layout = [(folder, _profiles_in(folder)) for folder in folders]
    return layout if any(files for _, files in layout) else None


#: What a path is as a TAU profile set: a packed ``.ppk`` file or a folder of text profiles.
ProfileSetKind = Literal["ppk", "profiles"]


def identify_profile_set(path: Path) -> tuple[ProfileSetKind, list[tuple[Path, dict]]] | None:
    """What ``path`` is as a TAU profile set, or None: the one rule of the readers and the
    landing scan.

    ``("ppk", [])`` for a ``.ppk`` file; ``("profiles", layout)`` for a folder of
    text profiles, ``layout`` as :func:`find_profile_layout` gives it.
    """
    if path.is_file():
        return ("ppk", []) if path.suffix.lower() == PPK_SUFFIX else None
    layout = find_profile_layout(path)
    return None if layout is None else ("profiles", layout)


def _check_same_threads(layout: list[tuple[Path, dict]]) -> None:
    """Every MULTI__ folder must hold the same threads; else an InputError naming the
    profile that has no counterpart."""
    first, keys = layout[0]
    for folder, files in layout[1:]:
        for key, path in keys.items():
            if key not in files:
                raise InputError(path, f"no profile of this thread in {folder.name}")
        for key, path in files.items():
            if key not in keys:
                raise InputError(path, f"no profile of this thread in {first.name}")


def read_profile_dir(path: str | Path, *, name: str | None = None) -> TrialData:
    """Read a folder of TAU text profiles (one metric, or ``MULTI__<metric>`` folders).

    The trial is named after the folder unless ``name`` is given; ``source_key``
    is the resolved folder, ``fingerprint`` a SHA-256 of the files' names and
    bytes. Threads are sorted by (node, context, thread); a metric is named by
    its ``Metric Name`` metadata, else the header's ``_MULTI_<metric>``, else
    its ``MULTI__`` folder, else ``Time``.
    """
    root = Path(path).resolve()
    layout = find_profile_layout(root)
    if layout is None:
        raise InputError(root, "no TAU profiles: expected profile.<node>.<context>.<thread> "
                         f"files or {MULTI_PREFIX}<metric> folders of them")
    _check_same_threads(layout)
    keys = list(layout[0][1])
    threads = np.array(keys, dtype=np.int64)
    n_metrics = len(layout)
    digest = hashlib.sha256()
    metrics: list[str] = []
    rows, names, groups, numbers, metric_of_row = [], [], [], [], []
    counters: list[tuple[int, TextProfile]] = []
    metadata: list[list[tuple[str, str]]] = [[] for _ in keys]
    for m, (folder, files) in enumerate(layout):
        for t, file in enumerate(files.values()):
            data = file.read_bytes()
            digest.update(f"{file.relative_to(root)}\0{len(data)}\0".encode())
            digest.update(data)
            profile = parse_profile(file, data, with_counters=m == 0)
            if t == 0:
                metric = profile.metric or (folder.name[len(MULTI_PREFIX):] if n_metrics > 1
                                            else DEFAULT_METRIC)
                if metric in metrics:
                    raise InputError(file, f"metric {metric!r} already read from another folder",
                                     line=1)
                metrics.append(metric)
            rows.append(np.full(len(profile.names), t))
            metric_of_row.append(np.full(len(profile.names), m))
            names += profile.names
            groups += profile.groups if m == 0 else [""] * len(profile.names)
            numbers.append(profile.numbers)
            metadata[t] += [pair for pair in profile.metadata if pair[0] != "Metric Name"]
            counters.append((t, profile))

    numbers_ = np.concatenate(numbers)
    metric_of_row_ = np.concatenate(metric_of_row)
    keep = numbers_[:, 0] != 0  # TAU skips timer lines with 0 calls
    calls = np.where((metric_of_row_ == 0)[:, None], numbers_[:, :2], 0.0)[keep]
    values = np.zeros((len(numbers_), n_metrics, 2))  # negative values become 0, as in TAU
    values[np.arange(len(numbers_)), metric_of_row_] = np.maximum(numbers_[:, [3, 2]], 0.0)
    timers, timer_values = timer_frames(
        threads, np.concatenate(rows)[keep], [n for n, k in zip(names, keep) if k],
        [g for g, k in zip(groups, keep) if k], calls[:, 0], calls[:, 1], values[keep], metrics)

    counter_rows = np.concatenate([np.full(len(p.counter_names), t) for t, p in counters])
    stats = np.concatenate([p.counter_stats for _, p in counters])
    sampled = stats[:, 0] != 0  # TAU skips user events without samples
    counter_names = [n for _, p in counters for n in p.counter_names]
    trial = make_trial(
        name=name or root.name, data_source=DATA_SOURCE_TAU_PROFILES, metrics=metrics,
        threads=threads, timers=timers, timer_values=timer_values,
        counters=counter_frame(threads, counter_rows[sampled],
                               [n for n, s in zip(counter_names, sampled) if s], stats[sampled]),
        metadata=metadata_frame(threads, metadata), source_key=str(root),
        fingerprint=digest.hexdigest())
    trial.left_out = skipped_by_rule(
        str(root), normalise_names(n for n, k in zip(names, keep) if not k),
        normalise_names(n for n, s in zip(counter_names, sampled) if not s))
    return trial


def skipped_by_rule(source: str, timers: list[str], events: list[str]) -> list[LeftOut]:
    """The records of what TAU's rules skip in the text profiles of ``source``: ``timers``,
    the (normalised) names of its timer lines with 0 calls, ``events``, of its user events
    with 0 samples (one name per line, every thread and metric). One record each, with the
    count and the first names, not one per line: nothing is lost that TAU would keep."""
    why = "skipped by rule, as TAU's loader skips them (docs/tau-profiles.md)"
    return [LeftOut(LEFT_OUT_SOURCE, source, f"{len(lines)} {what} ({_quoted(lines)})", why)
            for lines, what in ((timers, "timer line(s) with 0 calls"),
                                (events, "user event line(s) with 0 samples")) if lines]


def _quoted(names: list[str]) -> str:
    """The first :data:`NAMES_QUOTED` distinct ``names``, quoted, and how many more."""
    distinct = list(dict.fromkeys(names))
    shown = ", ".join(repr(name) for name in distinct[:NAMES_QUOTED])
    more = len(distinct) - NAMES_QUOTED
    return f"{shown} and {more} more" if more > 0 else shown
