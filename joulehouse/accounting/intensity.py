"""Grid carbon intensity, a source of its own: CSV files landed in a folder, read to one table.

Formats (recognised by their header, whatever the file name):

- **Electricity Maps** data-portal export: ``Datetime (UTC)``, ``Zone Id`` (or
  ``Country``), ``Carbon Intensity gCO₂eq/kWh (direct)`` and
  ``Carbon Intensity gCO₂eq/kWh (LCA)`` (also spelt ``(life cycle assessment)``), further
  columns ignored. Each timestamp starts an interval that ends at the zone's next
  timestamp, but never later than the file's resolution (its shortest step per zone):
  a hole in the series stays a hole, and the last row lasts one step. Both bases are
  kept, as rows with ``basis`` ``direct`` and ``lca``. Hourly and finer exports only
  (monthly steps are not constant).
- **Our World in Data** yearly figures: ``Entity``, ``Code``, ``Year``,
  ``Carbon intensity of electricity - gCO2/kWh``: one interval per calendar year
  (UTC), zone = ``Code`` (ISO 3166 alpha-3, e.g. ``FRA``; ``Entity`` where it has none),
  basis ``lca`` (OWID's figures are life-cycle emissions). ``kind`` ``yearly``: the
  coarsest fallback, used only where configured (``joulehouse/accounting/carbon.py``).

Every row records its ``file`` and the file's ``digest`` (SHA-256 of its bytes: the
version of the series), so a carbon figure names exactly what it was computed from.
Values are gCO2e/kWh; timestamps tz-aware UTC. A bad file raises InputError naming the
file and line. A row (or OWID year) whose intensity cell is empty gives no interval (a
hole in the series); it is said, one record per file, zone and basis with the count and
the first and last start (``joulehouse/leftout.py``).
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import pandas as pd

from joulehouse.accounting import stepseries
from joulehouse.accounting.schemas import INTENSITY_SCHEMA
from joulehouse.errors import InputError
from joulehouse.leftout import LeftOut
from joulehouse.validation import validate

EM_TIME = "Datetime (UTC)"
EM_ZONES = ("Zone Id", "Country")
EM_BASES = {
    "direct": ("Carbon Intensity gCO₂eq/kWh (direct)",),
    "lca": ("Carbon Intensity gCO₂eq/kWh (LCA)",
            "Carbon Intensity gCO₂eq/kWh (life cycle assessment)"),
}
OWID_COLUMNS = ("Entity", "Code", "Year")
OWID_VALUE = "Carbon intensity of electricity - gCO2/kWh"
#: ``kind`` of a time series at its own resolution, and of OWID's yearly figures.
SERIES, YEARLY = "series", "yearly"
#: The left-out records' source.
LEFT_OUT_SOURCE = "intensity"


def read_file(path: str | Path, left_out: list[LeftOut] | None = None) -> pd.DataFrame:
    """One intensity file as INTENSITY_SCHEMA rows (format from its header, see module);
    the records of its rows with an empty intensity cell (:func:`holes`) are added to
    ``left_out`` when given."""
    path = Path(path)
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    frame = _csv(path, io.BytesIO(data))
    table = (_electricity_maps if _is_electricity_maps(path, frame.columns) else _owid)(
        path, frame)
    empty = table["intensity_g_per_kwh"].isna()
    if left_out is not None:
        left_out += holes(path, table[empty])
    table = table[~empty].assign(file=path.name, digest=digest)
    table = table.sort_values(["zone", "basis", "interval_start"], ignore_index=True)
    return validate(INTENSITY_SCHEMA, table, path)


def zones_in_file(path: str | Path) -> set[str]:
    """The zones of one intensity file, as :func:`read_file` names them, from its zone
    columns alone (the other columns are not parsed); InputError for a file that is not a
    CSV of either format. The figures are not checked (:func:`read_file` does): a zone
    whose cells are all empty is named too."""
    path = Path(path)
    header = _csv(path, path, nrows=0).columns
    if _is_electricity_maps(path, header):
        column = _em_zone_column(path, header)
        return set(_csv(path, path, usecols=[column])[column].str.strip())
    return set(_owid_zone(_csv(path, path, usecols=["Code", "Entity"])))


def zones_in_folder(folder: str | Path) -> set[str]:
    """The zones of every file :func:`read_folder` reads (:func:`zones_in_file`): its cost
    grows with the files' rows, not with their other columns."""
    return set().union(*(zones_in_file(path) for path in stepseries.landed_csvs(folder)))


def _csv(path: Path, source: Path | io.BytesIO, **options) -> pd.DataFrame:
    """``source`` (the bytes of ``path``, or the file) read as strings, empty cells kept;
    InputError naming ``path`` when it is not a readable CSV."""
    try:
        return pd.read_csv(source, encoding="utf-8-sig", dtype=str, keep_default_na=False,
                           **options)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as err:
        raise InputError(path, f"not a readable CSV: {err}") from None


def _is_electricity_maps(path: Path, columns: pd.Index) -> bool:
    """Whether the header ``columns`` is an Electricity Maps export's (else OWID's yearly
    figures'); InputError when it is neither."""
    if EM_TIME in columns:
        return True
    if set(OWID_COLUMNS) <= set(columns) and OWID_VALUE in columns:
        return False
    raise InputError(path, f"neither an Electricity Maps export (no {EM_TIME!r} column) "
                           f"nor OWID yearly figures (no {OWID_VALUE!r}); columns: "
                           f"{list(columns)}", line=1)


def _em_zone_column(path: Path, columns: pd.Index) -> str:
    """The zone column of an Electricity Maps export (the first of :data:`EM_ZONES`)."""
    column = next((c for c in EM_ZONES if c in columns), None)
    if column is None:
        raise InputError(path, f"no zone column (one of {list(EM_ZONES)})", line=1)
    return column


def _owid_zone(frame: pd.DataFrame) -> pd.Series:
    """OWID's zone: ``Code``, ``Entity`` where it has none."""
    return frame["Code"].str.strip().where(frame["Code"].str.strip() != "", frame["Entity"])


def holes(path: Path, empty: pd.DataFrame) -> list[LeftOut]:
    """The records of a file's rows ``empty`` (zone, interval_start, basis, kind) whose
    intensity cell is empty: one per zone and basis, with the count and the first and
    last start (UTC; the year of OWID's figures)."""
    records = []
    for (zone, basis), rows in empty.groupby(["zone", "basis"], sort=True):
        starts = rows["interval_start"].sort_values()
        shown = "%Y" if rows["kind"].iloc[0] == YEARLY else "%Y-%m-%d %H:%M UTC"
        span = starts.iloc[0].strftime(shown)
        if len(starts) > 1:
            span += f" to {starts.iloc[-1].strftime(shown)}"
        records.append(LeftOut(
            LEFT_OUT_SOURCE, str(path), f"{len(rows)} row(s) of zone {zone} ({basis}) with "
            f"an empty intensity cell, {span}", "no value, so no interval: a hole in the "
            "series (a fact in it gets co2_g NaN, 'missing')"))
    return records


def read_folder(folder: str | Path, left_out: list[LeftOut] | None = None) -> pd.DataFrame:
    """Every ``*.csv`` under ``folder`` (recursively, sorted by path) as one table; what
    each file leaves out is added to ``left_out`` when given (:func:`read_file`).

    Raises InputError if two files give the same zone, basis and kind overlapping
    intervals (which series would hold is then unknown), naming both files.
    """
    return stepseries.read_landing(folder, lambda path: read_file(path, left_out),
                                   ["zone", "basis", "kind"], empty_intensity,
                                   lambda row: f"zone {row['zone']} ({row['basis']})")


def empty_intensity() -> pd.DataFrame:
    """An intensity table without rows."""
    return INTENSITY_SCHEMA.coerce_dtype(pd.DataFrame(columns=list(INTENSITY_SCHEMA.columns)))


def _number(path: Path, frame: pd.DataFrame, column: str) -> pd.Series:
    """``column`` as floats; an empty cell is NaN (no value for that interval)."""
    cells = frame[column].str.strip()
    values = pd.to_numeric(cells.mask(cells == ""), errors="coerce")  # no downcast warning
    bad = values.isna() & (cells != "")
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(path, f"not a number: {frame[column].iloc[row]!r}", line=row + 2,
                         field=column)
    return values


def _electricity_maps(path: Path, frame: pd.DataFrame) -> pd.DataFrame:
    zone_column = _em_zone_column(path, frame.columns)
    starts = pd.to_datetime(frame[EM_TIME], utc=True, errors="coerce", format="ISO8601")
    if starts.isna().any():
        row = int(np.flatnonzero(starts.isna().to_numpy())[0])
        raise InputError(path, f"not a timestamp: {frame[EM_TIME].iloc[row]!r}", line=row + 2,
                         field=EM_TIME)
    zones = frame[zone_column].str.strip()
    end = pd.Series(pd.NaT, index=frame.index, dtype=starts.dtype)
    for zone, rows in starts.groupby(zones, sort=False):
        ordered = rows.sort_values()
        steps = ordered.diff().dropna()
        if (steps <= pd.Timedelta(0)).any():
            raise InputError(path, f"zone {zone}: timestamps repeat or go back near "
                                   f"{ordered[steps.index[(steps <= pd.Timedelta(0)).to_numpy()][0]]}",
                             field=EM_TIME)
        if steps.empty:
            raise InputError(path, f"zone {zone}: one row gives no resolution", field=EM_TIME)
        resolution = steps.min()
        end[ordered.index] = ordered.shift(-1).where(ordered.shift(-1) - ordered <= resolution,
                                                     ordered + resolution)
        end[ordered.index[-1]] = ordered.iloc[-1] + resolution
    parts = []
    for basis, names in EM_BASES.items():
        column = next((c for c in names if c in frame.columns), None)
        if column is None:
            continue
        parts.append(pd.DataFrame({"zone": zones, "interval_start": starts, "interval_end": end,
                                   "intensity_g_per_kwh": _number(path, frame, column),
                                   "basis": basis, "kind": SERIES}))
    if not parts:
        raise InputError(path, f"no intensity column (one of "
                               f"{[n for names in EM_BASES.values() for n in names]})", line=1)
    return pd.concat(parts, ignore_index=True)


def _owid(path: Path, frame: pd.DataFrame) -> pd.DataFrame:
    years = pd.to_numeric(frame["Year"], errors="coerce")
    if years.isna().any():
        row = int(np.flatnonzero(years.isna().to_numpy())[0])
        raise InputError(path, f"not a year: {frame['Year'].iloc[row]!r}", line=row + 2,
                         field="Year")
    start = pd.to_datetime(years.astype(int).astype(str) + "-01-01", utc=True)
    end = pd.to_datetime((years.astype(int) + 1).astype(str) + "-01-01", utc=True)
    return pd.DataFrame({"zone": _owid_zone(frame), "interval_start": start, "interval_end": end,
                         "intensity_g_per_kwh": _number(path, frame, OWID_VALUE),
                         "basis": "lca", "kind": YEARLY})
