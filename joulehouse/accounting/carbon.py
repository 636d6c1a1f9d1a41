"""Carbon per energy fact: energy integrated against a time-varying grid intensity.

A window (a fact, or a fact's piece of a day) of ``energy_j`` over
``[window_start, window_end)`` is integrated against the intensity at the
intensity's own resolution, assuming a constant power inside the window:

    co2_g = energy_j / duration x integral of intensity over the window x PUE / 3.6e6

(intensity in gCO2e/kWh, 3.6e6 J per kWh): the same as splitting the window at every
intensity boundary and prorating its energy by time, computed as a difference of
running integrals at the window's two ends. The zone of a window comes from the
settings' ``zones``: the most specific of ``"<source>/<group>"`` (a data root, a
cluster: see ``entities.py``), ``"<source>"``, then ``"*"``.

Where the intensity series of the zone (at the configured ``basis``) does not cover a
piece, the piece falls back to OWID's yearly figure only when ``yearly_fallback`` maps
the zone to an OWID code; the row then says ``series+yearly`` or ``yearly``. Otherwise
the window gets ``co2_g`` NaN and ``missing`` says why (no zone configured, or the first
uncovered span): never a default. Each row records the zone, PUE, basis and the files and
digests of the intensity it used.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from joulehouse.accounting.intensity import SERIES, YEARLY
from joulehouse.accounting.schemas import CARBON_SCHEMA
from joulehouse.validation import validate

J_PER_KWH = 3.6e6
ANY = "*"
#: ``intensity_kind`` values: none, the series only, the yearly fallback only, both.
KINDS = ["", SERIES, YEARLY, f"{SERIES}+{YEARLY}"]


@dataclass(frozen=True)
class CarbonSettings:
    """Where each fact's electricity comes from and how the site scales it.

    ``zones``: ``"<source>/<group>"``, ``"<source>"`` or ``"*"`` -> grid zone.
    ``pue``: site power usage effectiveness (>= 1), applied to every fact.
    ``basis``: which Electricity Maps figure, ``lca`` or ``direct``.
    ``yearly_fallback``: zone -> OWID code whose yearly figure fills what the series does
    not cover; a zone not in it gets no fallback.
    """

    zones: Mapping[str, str] = field(default_factory=dict)
    pue: float = 1.0
    basis: str = "lca"
    yearly_fallback: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.pue >= 1.0:
            raise ValueError(f"PUE must be at least 1, not {self.pue}")
        if self.basis not in ("lca", "direct"):
            raise ValueError(f"basis must be lca or direct, not {self.basis!r}")


def zone_codes(frame: pd.DataFrame, zones: Mapping[str, str]) -> tuple[np.ndarray, list[str]]:
    """The zone of each row of ``frame`` (columns ``source`` and ``group``) as a code into the
    returned list of zone names ('' where none is configured); computed once per distinct
    (source, group), not per row."""
    grouped = frame.groupby(["source", "group"], observed=True, sort=False)
    keys = grouped.size().index
    names = [zones.get(f"{source}/{group}", zones.get(str(source), zones.get(ANY, "")))
             for source, group in keys]
    distinct = sorted(set(names))
    per_key = np.array([distinct.index(name) for name in names], dtype=np.int64)
    return per_key[grouped.ngroup().to_numpy()], distinct


@dataclass(frozen=True)
class _Segments:
    """A zone's intensity cut at every boundary: value, series id and kind per segment."""

    edges: np.ndarray  # int64 ns
    value: np.ndarray  # gCO2e/kWh per segment, NaN where none
    series: np.ndarray  # index into the labels of the intensity's files, -1 where none
    yearly: np.ndarray  # bool: the value is OWID's yearly fallback


def _covering(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Index of the interval (sorted, non-overlapping) holding each ``at``; -1 if none."""
    if not len(starts):
        return np.full(len(at), -1)
    i = np.searchsorted(starts, at, side="right") - 1
    ok = (i >= 0) & (ends[np.maximum(i, 0)] > at)
    return np.where(ok, i, -1)


def _segments(intensity: pd.DataFrame, zone: str, settings: CarbonSettings,
              file_ids: pd.Series) -> _Segments:
    fine = intensity[(intensity["zone"] == zone) & (intensity["basis"] == settings.basis)
                     & (intensity["kind"] == SERIES)]
    code = settings.yearly_fallback.get(zone)
    coarse = (intensity[(intensity["zone"] == code) & (intensity["kind"] == YEARLY)]
              if code else intensity.iloc[:0])
    parts = []
    for rows in (fine, coarse):
        rows = rows.sort_values("interval_start")
        parts.append((rows["interval_start"].to_numpy("datetime64[ns]").view(np.int64),
                      rows["interval_end"].to_numpy("datetime64[ns]").view(np.int64),
                      rows["intensity_g_per_kwh"].to_numpy(float),
                      file_ids.loc[rows.index].to_numpy()))
    edges = np.unique(np.concatenate([p[0] for p in parts] + [p[1] for p in parts]))
    at = edges[:-1]
    value = np.full(len(at), np.nan)
    series = np.full(len(at), -1)
    yearly = np.zeros(len(at), bool)
    for is_yearly, (starts, ends, values, ids) in zip((False, True), parts, strict=True):
        i = _covering(starts, ends, at)
        fill = (i >= 0) & np.isnan(value)
        value[fill], series[fill], yearly[fill] = values[i[fill]], ids[i[fill]], is_yearly
    return _Segments(edges, value, series, yearly)


def _used_labels(part: _ZoneCarbon, seg: _Segments, labels: list[tuple[int, ...]]
                 ) -> np.ndarray:
    """Per window, the index in ``labels`` of the sorted tuple of series ids (files) its
    covered segments used (-1: not covered). Most windows lie in one file's series (no
    Python loop); the few across files get their tuple appended to ``labels``."""
    out = np.full(len(part.co2_g), -1)
    covered = ~np.isnan(part.co2_g)
    out[covered & part.single] = seg.series[part.first[covered & part.single]]
    for w in np.flatnonzero(covered & ~part.single):
        ids = seg.series[part.first[w]:part.last[w] + 1]
        combo = tuple(sorted({int(i) for i in ids if i >= 0}))
        if combo not in labels:
            labels.append(combo)
        out[w] = labels.index(combo)
    return out


@dataclass(frozen=True)
class _ZoneCarbon:
    """The carbon of windows of one zone (see :func:`_zone_carbon`)."""

    co2_g: np.ndarray  # NaN where not covered
    covered_j: np.ndarray  # energy over covered time (all of it, or 0)
    kind: np.ndarray  # code into KINDS
    first: np.ndarray  # segment of each window's start (clipped into range)
    last: np.ndarray  # segment of each window's last instant (clipped)
    single: np.ndarray  # bool: one series id over the window's segments
    uncovered: dict[int, tuple[int, int]]  # window -> first uncovered span (ns)


def _locate(edges: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each ``t``: the edge at or before it (clipped into range), its segment (clipped)
    and whether it lies inside the edges."""
    k = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(edges) - 1)
    return k, np.minimum(k, len(edges) - 2), (t >= edges[0]) & (t < edges[-1])


def _running(edges: np.ndarray, rate: np.ndarray, t: np.ndarray,
             where: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """The integral from ``edges[0]`` to ``t`` of a piecewise-constant ``rate`` (per ns,
    one value per segment; 0 outside the edges), at each ``t`` (``where``: its
    :func:`_locate`)."""
    k, segment, inside = where
    at_edges = np.concatenate([[0], np.cumsum(rate * np.diff(edges))])
    return at_edges[k] + np.where(inside, rate[segment] * (t - edges[segment]), 0)


def _time_in(edges: np.ndarray, where: np.ndarray, ends: list) -> np.ndarray:
    """Per window, its time (int64 ns) in the segments where ``where`` (bool per segment):
    a difference of running integrals at its two ends (``ends``: each end's times and their
    :func:`_locate`); zeros without integrating when ``where`` holds nowhere (the usual
    case of a fully covered series without fallback)."""
    if not where.any():
        return np.zeros(len(ends[0][0]), np.int64)
    rate = where.astype(np.int64)
    return _running(edges, rate, *ends[1]) - _running(edges, rate, *ends[0])


def _zone_carbon(seg: _Segments, start: np.ndarray, end: np.ndarray, energy: np.ndarray,
                 pue: float) -> _ZoneCarbon:
    """Carbon of windows ``[start, end)`` (ns) of ``energy`` J against one zone's segments.

    Under a constant power inside a window, its carbon is energy / duration x the
    integral of the intensity over the window: a difference of running integrals at its
    two ends (no splitting). The window is covered when the time without intensity
    inside it (also a difference of running integrals, in integer ns) is zero. A window
    of no length takes the intensity at its start.
    """
    n = len(start)
    if len(seg.edges) < 2:
        return _ZoneCarbon(np.full(n, np.nan), np.zeros(n), np.zeros(n, np.int8),
                           np.zeros(n, int), np.zeros(n, int), np.ones(n, bool),
                           {w: (int(start[w]), int(end[w])) for w in range(n)})
    edges = seg.edges
    ok = ~np.isnan(seg.value)
    ends = [(t, _locate(edges, t)) for t in (start, end)]
    grams = [_running(edges, np.where(ok, seg.value, 0.0) / 1e9, t, at) for t, at in ends]
    gap = (_time_in(edges, ~ok, ends)
           + np.clip(edges[0] - start, 0, None) - np.clip(edges[0] - end, 0, None)
           + np.clip(end - edges[-1], 0, None) - np.clip(start - edges[-1], 0, None))
    first = ends[0][1][1]
    last = np.clip(np.searchsorted(edges, end, side="left") - 1, 0, len(ok) - 1)
    last = np.maximum(last, first)
    point = end == start
    at_start_ok = (start >= edges[0]) & (start < edges[-1]) & ok[first]
    covered = np.where(point, at_start_ok, gap == 0)
    length_s = (end - start) / 1e9
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(point, seg.value[first], (grams[1] - grams[0]) / length_s)
    co2 = np.where(covered, energy * mean * pue / J_PER_KWH, np.nan)
    has_yearly = np.where(point, seg.yearly[first], _time_in(edges, ok & seg.yearly, ends) > 0)
    has_series = np.where(point, ~seg.yearly[first],
                          _time_in(edges, ok & ~seg.yearly, ends) > 0)
    kind = np.where(covered, has_series.astype(np.int8) + 2 * has_yearly.astype(np.int8), 0)
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
    return _ZoneCarbon(co2, np.where(covered, energy, 0.0), kind.astype(np.int8), first,
                       last, changes[last] == changes[first], spans)


def _labelled(codes: np.ndarray, labels: list[str]) -> pd.Categorical:
    """``labels[code]`` per entry (``""`` for -1), as a categorical."""
    names, inverse = np.unique(np.asarray([*labels, ""], dtype=object), return_inverse=True)
    return pd.Categorical.from_codes(inverse[codes], names)


def _file_ids(intensity: pd.DataFrame) -> tuple[np.ndarray, pd.Series]:
    """The distinct (file, digest) pairs of ``intensity`` and, per row, its pair's index."""
    codes, _ = pd.factorize(intensity["file"] + "\n" + intensity["digest"])
    versions = intensity[["file", "digest"]].to_numpy()[np.unique(codes, return_index=True)[1]]
    return versions, pd.Series(codes, index=intensity.index)


def _by_zone(windows: pd.DataFrame, intensity: pd.DataFrame, settings: CarbonSettings,
             file_ids: pd.Series) -> Iterator[tuple[str, np.ndarray, _Segments | None,
                                                    _ZoneCarbon | None]]:
    """Per zone of the ``windows``: its name, the rows (positions) in it, and, unless no
    zone is configured for them (name ``""``), the zone's segments and the rows' carbon."""
    codes_of_zone, zone_names = zone_codes(windows, settings.zones)
    energy = windows["energy_j"].to_numpy(float)
    start = windows["window_start"].to_numpy("datetime64[ns]").view(np.int64)
    end = windows["window_end"].to_numpy("datetime64[ns]").view(np.int64)
    for code, z in enumerate(zone_names):
        rows = np.flatnonzero(codes_of_zone == code)
        if not len(rows):
            continue
        if z == "":
            yield z, rows, None, None
            continue
        seg = _segments(intensity, z, settings, file_ids)
        yield z, rows, seg, _zone_carbon(seg, start[rows], end[rows], energy[rows],
                                         settings.pue)


def co2_g(windows: pd.DataFrame, intensity: pd.DataFrame,
          settings: CarbonSettings) -> np.ndarray:
    """The ``co2_g`` column of :func:`integrate` (the same values), without the zone, kind,
    files and reasons of each window: what the rollups need of millions of day pieces."""
    co2 = np.full(len(windows), np.nan)
    for _, rows, _, part in _by_zone(windows, intensity, settings, _file_ids(intensity)[1]):
        if part is not None:
            co2[rows] = part.co2_g
    return co2


def integrate(windows: pd.DataFrame, intensity: pd.DataFrame,
              settings: CarbonSettings) -> pd.DataFrame:
    """Carbon of each window of ``windows`` (columns ``source``, ``group``, ``window_start``,
    ``window_end``, ``energy_j``), on its index: ``zone``, ``pue``, ``basis``,
    ``intensity_g_per_kwh``, ``co2_g``, ``intensity_kind``, ``intensity_files``,
    ``intensity_digests``, ``missing`` (see the module and CARBON_SCHEMA)."""
    versions, file_ids = _file_ids(intensity)
    n = len(windows)
    co2 = np.full(n, np.nan)
    covered_j = np.zeros(n)
    missing = np.full(n, "", dtype=object)
    kind = np.zeros(n, dtype=np.int8)  # code into KINDS
    used = np.full(n, -1)
    zone = np.zeros(n, dtype=np.int64)
    zone_names = []
    labels = [(i,) for i in range(len(versions))]
    for z, rows, seg, part in _by_zone(windows, intensity, settings, file_ids):
        zone[rows] = len(zone_names)
        zone_names.append(z)
        if part is None:
            missing[rows] = ("no zone configured for " + windows["source"].iloc[rows].astype(str)
                             + "/" + windows["group"].iloc[rows].astype(str)).to_numpy()
            continue
        co2[rows], covered_j[rows], kind[rows] = part.co2_g, part.covered_j, part.kind
        for w, (lo, hi) in part.uncovered.items():
            missing[rows[w]] = (f"{z} ({settings.basis}) intensity does not cover "
                                f"{pd.Timestamp(lo, tz='UTC').isoformat()}.."
                                f"{pd.Timestamp(hi, tz='UTC').isoformat()}")
        used[rows] = _used_labels(part, seg, labels)
    zone_array = pd.Categorical.from_codes(zone, zone_names) if n else np.array([], object)
    files = _labelled(used, [";".join(versions[i][0] for i in ids) for ids in labels])
    digests = _labelled(used, [";".join(versions[i][1] for i in ids) for ids in labels])
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(covered_j > 0, co2 / settings.pue * J_PER_KWH / covered_j, np.nan)
    return pd.DataFrame({
        "zone": zone_array, "pue": settings.pue, "basis": settings.basis,
        "intensity_g_per_kwh": np.where(np.isnan(co2), np.nan, mean), "co2_g": co2,
        "intensity_kind": pd.Categorical.from_codes(kind, KINDS),
        "intensity_files": files, "intensity_digests": digests,
        "missing": missing,
    }, index=windows.index)


def carbon_per_fact(facts: pd.DataFrame, intensity: pd.DataFrame,
                    settings: CarbonSettings) -> pd.DataFrame:
    """The CARBON_SCHEMA table: each fact of ``facts`` (energy_facts rows with the
    ``group`` of ``entities.attribute``) with its carbon, in the facts' order."""
    carbon = integrate(facts, intensity, settings)
    table = pd.concat([facts[["source", "entity", "component", "window_start", "window_end",
                              "method", "energy_j"]], carbon], axis=1).reset_index(drop=True)
    for column in ("source", "entity", "component", "method", "zone", "intensity_kind",
                   "intensity_files", "intensity_digests"):  # categoricals back to str
        table[column] = np.asarray(table[column], dtype=object)
    return validate(CARBON_SCHEMA, table, "carbon_per_fact")


def missing_carbon(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a carbon table (carbon_per_fact) without a value, and why."""
    return table.loc[table["co2_g"].isna(),
                     ["source", "entity", "component", "method", "window_start",
                      "window_end", "zone", "missing"]]
