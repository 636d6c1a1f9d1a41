"""Energy windows integrated against a step series: a value per kWh, constant per interval.

What carbon (grid intensity, gCO2e/kWh: ``carbon.py``) and cost (a tariff's price per
kWh: ``cost.py``) share. A window (a fact, or a fact's piece of a day) of ``energy_j``
over ``[window_start, window_end)`` is integrated against the series at its own
resolution, assuming a constant power inside the window:

    amount = energy_j / duration x integral of the value over the window x scale / 3.6e6

(``scale``: the site PUE; 3.6e6 J per kWh): the same as splitting the window at every
boundary of the series and prorating its energy by time, computed as a difference of
running integrals at the window's two ends. The series of a window is chosen by a key
(a grid zone, a tariff site) from the settings' mapping: the most specific of
``"<source>/<group>"`` (a data root, a cluster: see ``entities.py``), ``"<source>"``,
then ``"*"``.

A key's series is one or more parts (:func:`segments`): the first part's intervals
hold, a later part (a fallback, e.g. OWID's yearly figure) fills only what earlier
ones leave uncovered. A window not wholly covered gets the amount NaN and the first
uncovered span is reported: never a default. Each window records which versions
(files and their digests) it used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa

from joulehouse.accounting.schemas import FACT_COLUMNS
from joulehouse.accounting.split import searchsorted
from joulehouse.errors import InputError
from joulehouse.validation import validate

J_PER_KWH = 3.6e6
ANY = "*"
#: ``kind`` codes of a window: none, the first part only, a fallback only, both.
PRIMARY, FALLBACK = 1, 2


def _codes(column: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """A column's codes (int64) and the values they stand for: a categorical's own."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy().astype(np.int64), column.cat.categories
    codes, values = pd.factorize(column)
    return codes.astype(np.int64), pd.Index(values)


def _pairs(frame: pd.DataFrame) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """Each row's (source, group) pair (columns ``source`` and ``group``, categoricals or
    not) as a code into the returned list of every pair of their values."""
    (source, sources), (group, groups) = _codes(frame["source"]), _codes(frame["group"])
    return source * len(groups) + group, [(str(s), str(g)) for s in sources for g in groups]


def key_codes(frame: pd.DataFrame, keys: Mapping[str, str]) -> tuple[np.ndarray, list[str]]:
    """The key (zone, site) of each row of ``frame`` (columns ``source`` and ``group``) as a
    code into the returned list of names ('' where none is configured); looked up once per
    (source, group) pair of their values, not per row."""
    pair, pairs = _pairs(frame)
    names = [keys.get(f"{s}/{g}", keys.get(s, keys.get(ANY, ""))) for s, g in pairs]
    distinct = sorted(set(names))
    per_pair = np.array([distinct.index(name) for name in names], dtype=np.int64)
    return per_pair[pair] if len(per_pair) else pair, distinct


def _rows(codes: np.ndarray, names: list[str]) -> Iterator[tuple[int, str, np.ndarray | slice]]:
    """Each key with rows: its code, name and rows, all of them as a slice (no copies) when
    it is the only key."""
    counts = np.bincount(codes, minlength=len(names))
    for code, name in enumerate(names):
        if counts[code]:
            yield code, name, (slice(None) if counts[code] == len(codes)
                               else np.flatnonzero(codes == code))


@dataclass(frozen=True)
class Segments:
    """A key's series cut at every boundary: value, version and part per segment."""

    edges: np.ndarray  # int64 ns, strictly increasing
    value: np.ndarray  # value per kWh per segment, NaN where none
    series: np.ndarray  # index of the version (file) per segment, -1 where none
    fallback: np.ndarray  # bool: the value comes from a part after the first


#: One part of a series: interval starts and ends (int64 ns, sorted, not overlapping),
#: values per kWh, and each interval's version index.
Part = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def part_of(rows: pd.DataFrame, value: str, versions: pd.Series) -> Part:
    """The :data:`Part` of table rows with ``interval_start``, ``interval_end`` and ``value``
    columns; ``versions``: the version index of every row of their table."""
    rows = rows.sort_values("interval_start")
    return (rows["interval_start"].to_numpy("datetime64[ns]").view(np.int64),
            rows["interval_end"].to_numpy("datetime64[ns]").view(np.int64),
            rows[value].to_numpy(float), versions.loc[rows.index].to_numpy())


def _covering(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Index of the interval (sorted, non-overlapping) holding each ``at``; -1 if none."""
    if not len(starts):
        return np.full(len(at), -1)
    i = np.searchsorted(starts, at, side="right") - 1
    ok = (i >= 0) & (ends[np.maximum(i, 0)] > at)
    return np.where(ok, i, -1)


def segments(parts: Sequence[Part]) -> Segments:
    """The segments of a series from its parts, the first winning (see module)."""
    edges = np.unique(np.concatenate([p[0] for p in parts] + [p[1] for p in parts]))
    at = edges[:-1]
    value = np.full(len(at), np.nan)
    series = np.full(len(at), -1)
    fallback = np.zeros(len(at), bool)
    for k, (starts, ends, values, ids) in enumerate(parts):
        i = _covering(starts, ends, at)
        fill = (i >= 0) & np.isnan(value)
        value[fill], series[fill], fallback[fill] = values[i[fill]], ids[i[fill]], k > 0
    return Segments(edges, value, series, fallback)


@dataclass(frozen=True)
class Integral:
    """Windows of one key integrated against its segments (see :func:`integrate_segments`)."""

    amount: np.ndarray  # NaN where not covered
    covered_j: np.ndarray  # energy over covered time (all of it, or 0)
    kind: np.ndarray  # PRIMARY + FALLBACK flags (0: not covered)
    first: np.ndarray  # segment of each window's start (clipped into range)
    last: np.ndarray  # segment of each window's last instant (clipped)
    single: np.ndarray  # bool: one version over the window's segments
    uncovered: dict[int, tuple[int, int]]  # window -> first uncovered span (ns)


def _locate(edges: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each ``t``: how many edges lie at or before it (0: before the first edge;
    ``len(edges)``: at or after the last), its slot in :func:`_running`'s tables."""
    return searchsorted(edges, t)


def _segment(edges: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """The segment of each time of that :func:`_locate` ``slot`` (clipped into range)."""
    return np.clip(slot - 1, 0, len(edges) - 2)


def _running(edges: np.ndarray, rate: np.ndarray, t: np.ndarray,
             slot: np.ndarray) -> np.ndarray:
    """The integral from ``edges[0]`` to ``t`` of a piecewise-constant ``rate`` (per ns,
    one value per segment; 0 outside the edges), at each ``t`` (``slot``: its
    :func:`_locate`): the integral up to the edge at or before ``t`` plus the rate after
    it times the time since, from tables by slot (nothing before the first edge, no rate
    after the last), with no test of where ``t`` lies."""
    at_edges = np.concatenate([[0], np.cumsum(rate * np.diff(edges))])
    done = np.concatenate([[0], at_edges])
    after = np.concatenate([[0], rate, [0]])
    since = np.concatenate([edges[:1], edges])
    return done[slot] + after[slot] * (t - since[slot])


def _time_in(edges: np.ndarray, where: np.ndarray, ends: list) -> np.ndarray:
    """Per window, its time (int64 ns) in the segments where ``where`` (bool per segment):
    a difference of running integrals at its two ends (``ends``: each end's times and their
    :func:`_locate`); zeros without integrating when ``where`` holds nowhere (the usual
    case of a fully covered series without fallback)."""
    if not where.any():
        return np.zeros(len(ends[0][0]), np.int64)
    rate = where.astype(np.int64)
    return _running(edges, rate, *ends[1]) - _running(edges, rate, *ends[0])


@dataclass(frozen=True)
class _Amount:
    """What :func:`_amount` gives a window; ``ends``: each end's times and :func:`_locate`."""

    amount: np.ndarray
    covered: np.ndarray
    point: np.ndarray
    ends: list


def _amount(seg: Segments, start: np.ndarray, end: np.ndarray, energy: np.ndarray,
            scale: float) -> _Amount:
    """The amount of each window and whether it is covered (see :func:`integrate_segments`);
    ``seg`` has at least two edges. The time outside the edges and the value of a window of
    no length are computed for the windows they concern only."""
    edges = seg.edges
    ok = ~np.isnan(seg.value)
    ends = [(t, _locate(edges, t)) for t in (start, end)]
    totals = [_running(edges, np.where(ok, seg.value, 0.0) / 1e9, t, at) for t, at in ends]
    gap = _time_in(edges, ~ok, ends)  # int64 ns without a value, then outside the edges
    out = np.flatnonzero((start < edges[0]) | (end > edges[-1]))
    if len(out):
        s, e = start[out], end[out]
        gap[out] += (np.clip(edges[0] - s, 0, None) - np.clip(edges[0] - e, 0, None)
                     + np.clip(e - edges[-1], 0, None) - np.clip(s - edges[-1], 0, None))
    point = end == start
    covered = gap == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (totals[1] - totals[0]) / ((end - start) / 1e9)
    at = np.flatnonzero(point)
    if len(at):  # a window of no length: the value at its start
        first = _segment(edges, ends[0][1][at])
        covered[at] = (start[at] >= edges[0]) & (start[at] < edges[-1]) & ok[first]
        mean[at] = seg.value[first]
    amount = energy * mean * scale / J_PER_KWH
    amount[~covered] = np.nan
    return _Amount(amount, covered, point, ends)


def integrate_segments(seg: Segments, start: np.ndarray, end: np.ndarray, energy: np.ndarray,
                       scale: float) -> Integral:
    """Windows ``[start, end)`` (ns) of ``energy`` J against one key's segments.

    Under a constant power inside a window, its amount is energy / duration x the
    integral of the value over the window x ``scale`` / 3.6e6: a difference of running
    integrals at its two ends (no splitting). The window is covered when the time
    without a value inside it (also a difference of running integrals, in integer ns) is
    zero. A window of no length takes the value at its start.
    """
    n = len(start)
    if len(seg.edges) < 2:
        return Integral(np.full(n, np.nan), np.zeros(n), np.zeros(n, np.int8),
                        np.zeros(n, int), np.zeros(n, int), np.ones(n, bool),
                        {w: (int(start[w]), int(end[w])) for w in range(n)})
    edges = seg.edges
    ok = ~np.isnan(seg.value)
    done = _amount(seg, start, end, energy, scale)
    covered, point, ends = done.covered, done.point, done.ends
    first = _segment(edges, ends[0][1])
    last = np.clip(searchsorted(edges, end, side="left") - 1, 0, len(ok) - 1)
    last = np.maximum(last, first)
    if seg.fallback.any():
        has_fallback = np.where(point, seg.fallback[first],
                                _time_in(edges, ok & seg.fallback, ends) > 0)
        has_primary = np.where(point, ~seg.fallback[first],
                               _time_in(edges, ok & ~seg.fallback, ends) > 0)
        kind = np.where(covered, PRIMARY * has_primary.astype(np.int8)
                        + FALLBACK * has_fallback.astype(np.int8), 0)
    else:  # a covered window's time (or start) is all in the first part's segments
        kind = np.where(covered, PRIMARY, 0)
    changes = np.concatenate([[0], np.cumsum(seg.series[1:] != seg.series[:-1])])
    spans = {}
    for w in np.flatnonzero(~covered):
        s, e = int(start[w]), int(end[w])
        if s < edges[0]:
            spans[w] = (s, min(e, int(edges[0])))
            continue
        bad = [j for j in range(first[w], last[w] + 1) if not ok[j]]
        if bad and s < edges[-1]:
            spans[w] = (max(s, int(edges[bad[0]])), min(e, int(edges[bad[0] + 1])))
        else:
            spans[w] = (max(s, int(edges[-1])), e)
    return Integral(done.amount, np.where(covered, energy, 0.0), kind.astype(np.int8), first,
                    last, changes[last] == changes[first], spans)


def _used_labels(part: Integral, seg: Segments, labels: list[tuple[int, ...]]) -> np.ndarray:
    """Per window, the index in ``labels`` of the sorted tuple of versions (files) its
    covered segments used (-1: not covered). Most windows lie in one file's series (no
    Python loop); the few across files get their tuple appended to ``labels``."""
    out = np.full(len(part.amount), -1)
    covered = ~np.isnan(part.amount)
    out[covered & part.single] = seg.series[part.first[covered & part.single]]
    for w in np.flatnonzero(covered & ~part.single):
        ids = seg.series[part.first[w]:part.last[w] + 1]
        combo = tuple(sorted({int(i) for i in ids if i >= 0}))
        if combo not in labels:
            labels.append(combo)
        out[w] = labels.index(combo)
    return out


def _labelled(codes: np.ndarray, labels: list[str]) -> pd.Categorical:
    """``labels[code]`` per entry (``""`` for -1), as a categorical."""
    names, inverse = np.unique(np.asarray([*labels, ""], dtype=object), return_inverse=True)
    return pd.Categorical.from_codes(inverse[codes], names)


def versions_of(table: pd.DataFrame) -> tuple[np.ndarray, pd.Series]:
    """The distinct (file, digest) pairs of a series table (columns ``file`` and
    ``digest``) and, per row, its pair's index."""
    codes, _ = pd.factorize(table["file"] + "\n" + table["digest"])
    versions = table[["file", "digest"]].to_numpy()[np.unique(codes, return_index=True)[1]]
    return versions, pd.Series(codes, index=table.index)


def _windows(windows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Energy (J), start and end (int64 ns) of each window."""
    return (windows["energy_j"].to_numpy(float),
            windows["window_start"].to_numpy("datetime64[ns]").view(np.int64),
            windows["window_end"].to_numpy("datetime64[ns]").view(np.int64))


def amounts(windows: pd.DataFrame, keys: Mapping[str, str],
            segments_of: Callable[[str], Segments], scale: float) -> np.ndarray:
    """The amount of each window (columns ``source``, ``group``, ``window_start``,
    ``window_end``, ``energy_j``), NaN where not covered: the ``amount`` column of
    :func:`integrate` without its lineage, what the rollups need of millions of pieces."""
    out = np.full(len(windows), np.nan)
    codes, names = key_codes(windows, keys)
    energy, start, end = _windows(windows)
    for _, name, rows in _rows(codes, names):
        seg = segments_of(name) if name else None
        if seg is not None and len(seg.edges) >= 2:
            out[rows] = _amount(seg, start[rows], end[rows], energy[rows], scale).amount
    return out


def integrate(windows: pd.DataFrame, keys: Mapping[str, str],
              segments_of: Callable[[str], Segments], scale: float, versions: np.ndarray,
              *, key_name: str, series_name: Callable[[str], str]) -> pd.DataFrame:
    """Each window of ``windows`` (see :func:`amounts`) integrated, on its index: ``key``
    (its zone or site, '' when none is configured), ``value_per_kwh`` (the energy-weighted
    mean value over the window), ``amount``, ``kind`` (PRIMARY/FALLBACK flags), ``files``
    and ``digests`` (';'-separated, of the ``versions`` used) and ``missing`` (why the
    amount is NaN: ``"no <key_name> configured for <source>/<group>"`` or
    ``"<series_name(key)> does not cover <start>..<end>"``, '' when it is not)."""
    n = len(windows)
    amount = np.full(n, np.nan)
    covered_j = np.zeros(n)
    reasons = {"": 0}  # why a window has no amount -> its code in ``missing``
    missing = np.zeros(n, dtype=np.int64)
    kind = np.zeros(n, dtype=np.int8)
    used = np.full(n, -1)
    key = np.zeros(n, dtype=np.int64)
    labels = [(i,) for i in range(len(versions))]
    codes, names = key_codes(windows, keys)
    energy, start, end = _windows(windows)
    for code, name, rows in _rows(codes, names):
        key[rows] = code
        if not name:
            pair, pairs = _pairs(windows)
            missing[rows] = np.array([reasons.setdefault(f"no {key_name} configured for "
                                                         f"{source}/{group}", len(reasons))
                                      for source, group in pairs], dtype=np.int64)[pair[rows]]
            continue
        seg = segments_of(name)
        part = integrate_segments(seg, start[rows], end[rows], energy[rows], scale)
        amount[rows], covered_j[rows], kind[rows] = part.amount, part.covered_j, part.kind
        at = np.arange(n)[rows]
        for w, (lo, hi) in part.uncovered.items():
            missing[at[w]] = reasons.setdefault(
                f"{series_name(name)} does not cover {pd.Timestamp(lo, tz='UTC').isoformat()}"
                f"..{pd.Timestamp(hi, tz='UTC').isoformat()}", len(reasons))
        used[rows] = _used_labels(part, seg, labels)
    key_array = pd.Categorical.from_codes(key, names or [""])
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(covered_j > 0, amount / scale * J_PER_KWH / covered_j, np.nan)
    return pd.DataFrame({
        "key": key_array, "value_per_kwh": np.where(np.isnan(amount), np.nan, mean),
        "amount": amount, "kind": kind,
        "files": _labelled(used, [";".join(versions[i][0] for i in ids) for ids in labels]),
        "digests": _labelled(used, [";".join(versions[i][1] for i in ids) for ids in labels]),
        "missing": pd.Categorical.from_codes(missing, list(reasons)).remove_unused_categories(),
    }, index=windows.index, copy=False)  # copy=False: no consolidation into 2-D blocks


def per_fact_table(facts: pd.DataFrame, integrated: pd.DataFrame,
                   schema: pa.DataFrameSchema, name: str) -> pd.DataFrame:
    """``facts``' own columns beside what :func:`integrate` gave them (same index), in the
    facts' order, with source, component and method as categoricals (as
    ``entities.attribute`` gives them), validated as ``name``."""
    table = pd.DataFrame({column: frame[column].array for frame, names in
                          ((facts, FACT_COLUMNS), (integrated, integrated.columns))
                          for column in names}, copy=False)
    for column in ("source", "component", "method"):
        table[column] = table[column].astype("category")
    return validate(schema, table, name)


def constant(value: str, n: int) -> pd.Categorical:
    """``value`` n times, as a categorical."""
    return pd.Categorical.from_codes(np.zeros(n, np.int8), [value])


def missing_rows(table: pd.DataFrame, value: str, key: str) -> pd.DataFrame:
    """The rows of a per-fact table without a ``value``: the fact, its series ``key``
    (zone, site) and why."""
    return table.loc[table[value].isna(),
                     ["source", "entity", "component", "method", "window_start",
                      "window_end", key, "missing"]]


def first_overlap(table: pd.DataFrame, keys: Sequence[str]
                  ) -> tuple[pd.Series, pd.Series] | None:
    """The first two rows of one series (same ``keys``; ``table`` sorted by them and
    ``interval_start``) whose intervals overlap, or None."""
    same = ((table[list(keys)] == table[list(keys)].shift()).all(axis=1)
            & (table["interval_start"] < table["interval_end"].shift()))
    if not same.any():
        return None
    i = int(np.flatnonzero(same.to_numpy())[0])
    return table.iloc[i - 1], table.iloc[i]


def landed_csvs(folder: str | Path) -> list[Path]:
    """The files a landing folder holds: every ``*.csv`` under ``folder`` (recursively),
    sorted by path."""
    return [path for path in sorted(Path(folder).rglob("*.csv")) if path.is_file()]


def read_landing(folder: str | Path, read_file: Callable[[Path], pd.DataFrame],
                 keys: Sequence[str], empty: Callable[[], pd.DataFrame],
                 series: Callable[[pd.Series], str]) -> pd.DataFrame:
    """Every ``*.csv`` under ``folder`` (recursively, sorted by path) read by ``read_file``,
    as one table sorted by ``keys`` and ``interval_start`` (``empty()`` when there is none).

    Raises InputError if two files give one series (same ``keys``, named by ``series`` of
    a row) overlapping intervals (which would hold is then unknown), naming both files.
    """
    folder = Path(folder)
    frames = [read_file(p) for p in landed_csvs(folder)]
    if not frames:
        return empty()
    table = pd.concat(frames, ignore_index=True).sort_values(
        [*keys, "interval_start"], ignore_index=True)
    overlap = first_overlap(table, keys)
    if overlap is not None:
        a, b = overlap
        raise InputError(folder / b["file"], f"{series(b)}: interval from "
                         f"{b['interval_start']} overlaps {a['file']}'s from {a['interval_start']}")
    return table
