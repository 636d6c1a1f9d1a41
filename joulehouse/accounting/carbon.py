"""Carbon per energy fact: energy integrated against a time-varying grid intensity.

A window (a fact, or a fact's piece of a day) of ``energy_j`` over
``[window_start, window_end)`` is split at the intensity's own interval
boundaries (``joulehouse/accounting/split.py``: energy prorated by time, i.e. a
constant power inside the window), and

    co2_g = sum over pieces of energy_j x fraction x PUE x intensity / 3.6e6

(intensity in gCO2e/kWh, 3.6e6 J per kWh). The zone of a window comes from the
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

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from joulehouse.accounting.intensity import SERIES, YEARLY
from joulehouse.accounting.schemas import CARBON_SCHEMA
from joulehouse.accounting.split import split_windows
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


def _used_labels(window: np.ndarray, series: np.ndarray, n: int,
                 labels: list[tuple[int, ...]]) -> np.ndarray:
    """Per window (0..n-1), the index in ``labels`` of the sorted tuple of series ids its
    covered pieces used (-1: none). A window uses one series but where it crosses from
    one file into another; those few tuples are appended to ``labels``."""
    lo = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(lo, window, series)
    hi = np.full(n, -1)
    np.maximum.at(hi, window, series)
    out = np.where((lo == hi) & (hi >= 0), lo, -1)
    several = np.flatnonzero((lo < hi) & (hi >= 0))
    if len(several):
        keep = np.isin(window, several)
        pairs = np.unique(np.stack([window[keep], series[keep]]), axis=1)
        for w, ids in pd.Series(pairs[1]).groupby(pairs[0]):
            combo = tuple(int(i) for i in ids)
            if combo not in labels:
                labels.append(combo)
            out[w] = labels.index(combo)
    return out


def _labelled(codes: np.ndarray, labels: list[str]) -> pd.Categorical:
    """``labels[code]`` per entry (``""`` for -1), as a categorical."""
    names, inverse = np.unique(np.asarray([*labels, ""], dtype=object), return_inverse=True)
    return pd.Categorical.from_codes(inverse[codes], names)


def integrate(windows: pd.DataFrame, intensity: pd.DataFrame,
              settings: CarbonSettings) -> pd.DataFrame:
    """Carbon of each window of ``windows`` (columns ``source``, ``group``, ``window_start``,
    ``window_end``, ``energy_j``), on its index: ``zone``, ``pue``, ``basis``,
    ``intensity_g_per_kwh``, ``co2_g``, ``intensity_kind``, ``intensity_files``,
    ``intensity_digests``, ``missing`` (see the module and CARBON_SCHEMA)."""
    codes_of_zone, zone_names = zone_codes(windows, settings.zones)
    codes, _ = pd.factorize(intensity["file"] + "\n" + intensity["digest"])
    versions = intensity[["file", "digest"]].to_numpy()[np.unique(codes, return_index=True)[1]]
    file_ids = pd.Series(codes, index=intensity.index)
    n = len(windows)
    co2 = np.full(n, np.nan)
    covered_j = np.zeros(n)
    missing = np.full(n, "", dtype=object)
    kind = np.zeros(n, dtype=np.int8)  # code into KINDS
    used = np.full(n, -1)
    labels = [(i,) for i in range(len(versions))]
    energy = windows["energy_j"].to_numpy(float)
    start = windows["window_start"].to_numpy("datetime64[ns]").view(np.int64)
    end = windows["window_end"].to_numpy("datetime64[ns]").view(np.int64)
    zone_array = pd.Categorical.from_codes(codes_of_zone, zone_names) if n else np.array([], object)
    for code, z in enumerate(zone_names):
        rows = np.flatnonzero(codes_of_zone == code)
        if not len(rows):
            continue
        if z == "":
            missing[rows] = ("no zone configured for " + windows["source"].iloc[rows].astype(str)
                             + "/" + windows["group"].iloc[rows].astype(str)).to_numpy()
            continue
        seg = _segments(intensity, z, settings, file_ids)
        pieces = split_windows(start[rows], end[rows], seg.edges)
        inside = (pieces.segment >= 0) & (pieces.segment < len(seg.value))
        k = np.where(inside, pieces.segment, 0)
        value = np.where(inside, seg.value[k] if len(seg.value) else np.nan, np.nan)
        series = np.where(inside, seg.series[k] if len(seg.series) else -1, -1)
        yearly = inside & (seg.yearly[k] if len(seg.yearly) else False)
        piece_j = energy[rows][pieces.window] * pieces.fraction
        ok = ~np.isnan(value)
        sums = np.bincount(pieces.window, weights=np.where(ok, piece_j * value, 0.0),
                           minlength=len(rows))
        bad = np.bincount(pieces.window, weights=~ok, minlength=len(rows)) > 0
        co2[rows] = np.where(bad, np.nan, sums * settings.pue / J_PER_KWH)
        covered_j[rows] = np.bincount(pieces.window, weights=np.where(ok, piece_j, 0.0),
                                      minlength=len(rows))
        first_bad = pd.Series(np.flatnonzero(~ok)).groupby(pieces.window[~ok]).first()
        for w, p in first_bad.items():
            missing[rows[w]] = (f"{z} ({settings.basis}) intensity does not cover "
                                f"{pd.Timestamp(pieces.start_ns[p], tz='UTC').isoformat()}.."
                                f"{pd.Timestamp(pieces.end_ns[p], tz='UTC').isoformat()}")
        has_series = np.bincount(pieces.window, weights=ok & ~yearly, minlength=len(rows)) > 0
        has_yearly = np.bincount(pieces.window, weights=ok & yearly, minlength=len(rows)) > 0
        kind[rows] = np.select([has_series & has_yearly, has_series, has_yearly], [3, 1, 2], 0)
        used[rows] = _used_labels(pieces.window[ok], series[ok], len(rows), labels)
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
