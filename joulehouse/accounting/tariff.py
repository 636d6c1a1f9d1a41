"""Time-of-use electricity tariffs, a source of their own: CSV files landed in a folder.

The format (one header line, then one row per price band; further columns ignored)::

    site,timezone,valid_from,valid_to,weekdays,start,end,price_per_kwh,currency
    hpc-centre,Europe/Berlin,2026-01-01,2027-01-01,Mon-Fri,07:00,20:00,0.31,EUR
    hpc-centre,Europe/Berlin,2026-01-01,2027-01-01,Mon-Fri,00:00,07:00,0.22,EUR
    hpc-centre,Europe/Berlin,2026-01-01,2027-01-01,Mon-Fri,20:00,24:00,0.22,EUR
    hpc-centre,Europe/Berlin,2026-01-01,2027-01-01,Sat-Sun,00:00,24:00,0.19,EUR

- ``site``: the tariff's name, what facts are mapped to (``cost.CostSettings.sites``);
- ``timezone``: IANA zone of the band's local dates and times;
- ``valid_from`` / ``valid_to``: local dates, the first day included, the last excluded;
- ``weekdays``: ``*`` (every day), a range ``Mon-Fri`` or a list ``Sat,Sun`` (three-letter
  English names; quote a list in the CSV);
- ``start`` / ``end``: local ``HH:MM`` of the band on each such day, ``start < end``,
  ``end`` up to ``24:00`` (a band over midnight is two rows);
- ``price_per_kwh``: the energy price in ``currency`` per kWh (an ISO 4217 code), >= 0.

Each band is expanded to one interval per day it applies to, in UTC (at a daylight-saving
change a band keeps its local times; a nonexistent local time moves forward to the
change), so a tariff is a step series like grid intensity (``stepseries.py``). Bands of a
site must not overlap (an error naming both lines); what no band covers is a hole, and a
fact in it gets no cost. A site has one currency. Every row keeps its ``file`` and the
file's SHA-256 ``digest`` (the tariff's version). A bad file raises InputError naming the
file, line and field.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import pandas as pd

from joulehouse.accounting import stepseries
from joulehouse.accounting.schemas import TARIFF_SCHEMA
from joulehouse.errors import InputError
from joulehouse.timeutil import check_timezone
from joulehouse.validation import validate

COLUMNS = ("site", "timezone", "valid_from", "valid_to", "weekdays", "start", "end",
           "price_per_kwh", "currency")
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
#: The tariff table's value column (currency per kWh).
VALUE = "price_per_kwh"


def _weekdays(text: str) -> set[int]:
    """``*``, ``Mon-Fri`` or ``Sat,Sun`` -> weekday numbers (Monday 0); ValueError if not."""
    text = text.strip()
    if text == "*":
        return set(range(7))
    days: set[int] = set()
    for item in (part.strip() for part in text.split(",")):
        first, dash, last = item.partition("-")
        if first not in DAYS or (dash and last not in DAYS):
            raise ValueError(f"not weekdays: {text!r} (use *, Mon-Fri or Sat,Sun)")
        a, b = DAYS.index(first), DAYS.index(last if dash else first)
        days |= set(range(a, b + 1)) if a <= b else set(range(a, 7)) | set(range(b + 1))
    return days


def _minutes(text: str) -> int:
    """``HH:MM`` (00:00 to 24:00) -> minutes after midnight; ValueError if not."""
    hours, colon, minutes = text.strip().partition(":")
    if not (colon and hours.isdigit() and minutes.isdigit() and len(minutes) == 2):
        raise ValueError(f"not a time HH:MM: {text!r}")
    value = int(hours) * 60 + int(minutes)
    if int(minutes) >= 60 or value > 24 * 60:
        raise ValueError(f"not a time of day: {text!r}")
    return value


def _band(path: Path, line: int, row: pd.Series) -> pd.DataFrame:
    """One band (a CSV row at ``line``) as its intervals, UTC."""
    def field(name: str, parse):
        try:
            return parse(row[name])
        except (ValueError, KeyError) as err:
            raise InputError(path, str(err), line=line, field=name) from None
    zone = field("timezone", lambda v: check_timezone(v.strip()))
    first = field("valid_from", lambda v: pd.Timestamp(v.strip()).normalize())
    last = field("valid_to", lambda v: pd.Timestamp(v.strip()).normalize())
    days = field("weekdays", _weekdays)
    start, end = field("start", _minutes), field("end", _minutes)
    price = field("price_per_kwh", float)
    currency = row["currency"].strip()
    if not last > first:
        raise InputError(path, f"valid_to {row['valid_to']} is not after valid_from "
                               f"{row['valid_from']}", line=line, field="valid_to")
    if not end > start:
        raise InputError(path, f"end {row['end']} is not after start {row['start']} (a band "
                               "over midnight is two rows)", line=line, field="end")
    if not (price >= 0 and np.isfinite(price)):
        raise InputError(path, f"not a price: {row['price_per_kwh']!r}", line=line,
                         field="price_per_kwh")
    if not (len(currency) == 3 and currency.isalpha() and currency.isupper()):
        raise InputError(path, f"not an ISO 4217 currency code: {currency!r}", line=line,
                         field="currency")
    dates = pd.date_range(first, last, freq="D", inclusive="left")
    dates = dates[dates.weekday.isin(sorted(days))]

    def utc(minutes: int) -> pd.DatetimeIndex:
        local = dates + pd.Timedelta(minutes=minutes)
        return (local.tz_localize(zone, ambiguous=False, nonexistent="shift_forward")
                .tz_convert("UTC").as_unit("ns"))
    return pd.DataFrame({"site": row["site"].strip(), "interval_start": utc(start),
                         "interval_end": utc(end), VALUE: price, "currency": currency,
                         "line": line})


def read_file(path: str | Path) -> pd.DataFrame:
    """One tariff file as TARIFF_SCHEMA rows (see the module for the format)."""
    path = Path(path)
    data = path.read_bytes()
    try:
        frame = pd.read_csv(io.BytesIO(data), encoding="utf-8-sig", dtype=str,
                            keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as err:
        raise InputError(path, f"not a readable CSV: {err}") from None
    absent = [c for c in COLUMNS if c not in frame.columns]
    if absent:
        raise InputError(path, f"not a tariff: no column(s) {absent}; columns: "
                               f"{list(frame.columns)}", line=1)
    bands = [_band(path, i + 2, row) for i, row in frame.iterrows()]
    table = (pd.concat(bands, ignore_index=True) if bands else
             pd.DataFrame(columns=["site", "interval_start", "interval_end", VALUE,
                                   "currency", "line"]))
    table = table.sort_values(["site", "interval_start"], ignore_index=True)
    overlap = stepseries.first_overlap(table, ["site"])
    if overlap is not None:
        a, b = overlap
        raise InputError(path, f"site {b['site']}: the band of line {b['line']} overlaps that "
                               f"of line {a['line']} at {b['interval_start']}", line=int(b["line"]))
    table = table.drop(columns="line").assign(file=path.name,
                                              digest=hashlib.sha256(data).hexdigest())
    return validate(TARIFF_SCHEMA, table, path)


def read_folder(folder: str | Path) -> pd.DataFrame:
    """Every ``*.csv`` under ``folder`` (recursively, sorted by path) as one table.

    Raises InputError if two files give one site overlapping intervals or two currencies,
    naming both files.
    """
    folder = Path(folder)
    table = stepseries.read_landing(folder, read_file, ["site"], empty_tariffs,
                                    lambda row: f"site {row['site']}")
    currencies = table.drop_duplicates(["site", "currency"])
    twice = currencies["site"].duplicated(keep=False)
    if twice.any():
        rows = currencies[twice]
        raise InputError(folder / rows["file"].iloc[-1], f"site {rows['site'].iloc[0]} is "
                         f"priced in {' and '.join(rows['currency'])} (files "
                         f"{', '.join(rows['file'])}): one currency per site")
    return table


def empty_tariffs() -> pd.DataFrame:
    """A tariff table without rows."""
    return TARIFF_SCHEMA.coerce_dtype(pd.DataFrame(columns=list(TARIFF_SCHEMA.columns)))
