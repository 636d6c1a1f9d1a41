"""Energy per day and per month, across every source of ``energy_facts``.

A fact is split at the midnights of each calendar (UTC, and the site's time zone)
by time (``split.py``): energy prorated by the overlap, which assumes a constant
power inside the fact; a fact across midnight is never given whole to one day.
The pieces of a fact sum to its energy. A daily row sums its day's pieces, a monthly row
its month's daily rows (in day order: so a month kept from stored days equals one from
scratch to the last bit), per key (ROLLUP_KEYS: source, group, partition, user, project,
component, method):

- ``energy_j`` (and ``energy_kwh``), ``duration_h`` (entity-hours of the pieces),
  distinct ``facts`` and ``entities`` (a month's from its :func:`members`, the facts per
  entity: a fact over three days of March is one fact of the March row);
- ``mean_power_w`` = total energy / total time, never a mean of powers;
- ``co2_g`` when the pieces carry carbon (``carbon.integrate`` on the pieces: each
  day's carbon at the intensity's own resolution), NaN for a row where some energy has
  none (its energy is ``energy_without_intensity_j``): a partial sum is never shown
  as the total.
- ``cost`` (in ``currency``) the same way from the pieces' ``cost`` (``cost.cost``), NaN
  where some energy has no price (``energy_without_tariff_j``). A row's pieces share a
  source and group, so one tariff site and one currency.

``method`` is a key: several methods of one measurement (a GPU's counter and its
integrated power, cc-backend's figure beside ours) are rows of their own, and summing
across methods counts the same energy twice. Both calendars are rows of one table
(``calendar``): sum within one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from joulehouse.accounting.entities import ENTITY_ID
from joulehouse.accounting.schemas import DAILY_SCHEMA, MONTHLY_SCHEMA, ROLLUP_KEYS
from joulehouse.accounting.split import split_windows
from joulehouse.accounting.stepseries import J_PER_KWH, constant
from joulehouse.validation import validate

UTC = "UTC"
#: Column of :func:`day_pieces`: the index of each piece's fact in the facts given (int64).
FACT = "fact"
#: The keys of a month's row (and of its :func:`counts`).
MONTH_KEYS = ["calendar", "month", *ROLLUP_KEYS]
#: The summed columns of a roll-up row: a month's are the sums of its days'.
SUMS = ["energy_j", "duration_h", "co2_g", "energy_without_intensity_j", "cost",
        "energy_without_tariff_j"]
_NS_PER_S = 1e9


def day_pieces(facts: pd.DataFrame, time_zone: str) -> pd.DataFrame:
    """The facts (energy_facts rows with the attributes and ENTITY_ID of
    ``entities.attribute``) cut at the midnights of ``time_zone``: one row per fact and day
    it touches, with its ROLLUP_KEYS, ENTITY_ID, FACT, ``calendar`` (categorical), ``day``
    (naive local midnight), the piece's ``window_start``, ``window_end``, ``duration_s`` and
    prorated ``energy_j``. The pieces of a fact are consecutive, in time order."""
    columns = [*ROLLUP_KEYS, ENTITY_ID]  # categoricals and int64: cheap to repeat
    if facts.empty:
        return facts[columns].assign(**{FACT: np.arange(0, dtype=np.int64)},
                                     calendar=time_zone, day=pd.Series(dtype="datetime64[ns]"),
                                     window_start=facts["window_start"],
                                     window_end=facts["window_end"],
                                     duration_s=facts["duration_s"], energy_j=facts["energy_j"])
    local_start = facts["window_start"].min().tz_convert(time_zone).normalize().tz_localize(None)
    local_end = facts["window_end"].max().tz_convert(time_zone).normalize().tz_localize(None)
    days = pd.date_range(local_start - pd.Timedelta(days=1), local_end + pd.Timedelta(days=2),
                         freq="D")
    edges = (days.tz_localize(time_zone, ambiguous=False, nonexistent="shift_forward")
             .tz_convert(UTC).as_unit("ns").asi8)
    start = facts["window_start"].to_numpy("datetime64[ns]").view(np.int64)
    end = facts["window_end"].to_numpy("datetime64[ns]").view(np.int64)
    pieces = split_windows(start, end, edges)
    # each column taken once (no frame copied whole, as assign or iloc would)
    return pd.DataFrame({
        **{name: facts[name].array.take(pieces.window) for name in columns},
        FACT: pieces.window.astype(np.int64),
        "calendar": constant(time_zone, len(pieces.window)),
        "day": days[pieces.segment].to_numpy(),
        "window_start": _utc(pieces.start_ns),
        "window_end": _utc(pieces.end_ns),
        "duration_s": (pieces.end_ns - pieces.start_ns) / _NS_PER_S,
        "energy_j": facts["energy_j"].to_numpy(float)[pieces.window] * pieces.fraction,
    }, copy=False)


def _combined(keys: pd.DataFrame):
    """The rows of ``keys`` as one int64 each, ordered as the rows' codes are (categories in
    their order, other columns sorted), and the function that turns such ints back into
    the key columns (categories as str). Grouping on one int64 instead of nine columns is
    what makes the rollups of millions of pieces cheap."""
    codes, values = [], []
    for name in keys.columns:
        column = keys[name]
        if isinstance(column.dtype, pd.CategoricalDtype):
            code, uniques = column.cat.codes.to_numpy(), column.cat.categories
        else:
            code, uniques = pd.factorize(column, sort=True)
        if len(code) and code.min() < 0:
            raise ValueError(f"rollup key {name!r} is missing in some pieces")
        codes.append(code)
        values.append(pd.Index(uniques))
    sizes = [max(len(v), 1) for v in values]
    if np.prod(np.array(sizes, dtype=float)) >= 2.0 ** 62:
        raise ValueError(f"too many distinct rollup keys to combine: {sizes}")
    combined = np.zeros(len(keys), dtype=np.int64)
    for code, size in zip(codes, sizes, strict=True):
        if size > 1:  # in place: no temporary of millions of int64 per key
            combined *= size
            combined += code

    def decode(numbers: np.ndarray) -> pd.DataFrame:
        columns = {}
        for name, size, names in zip(reversed(keys.columns), reversed(sizes),
                                     reversed(values), strict=True):
            numbers, code = np.divmod(numbers, size)
            columns[name] = np.asarray(names.take(code))
        return pd.DataFrame({name: columns[name] for name in keys.columns})

    return combined, decode


def distinct_per_group(group: np.ndarray, ids: np.ndarray, groups: int) -> np.ndarray:
    """Per group ``0 .. groups - 1``, the number of distinct ``ids`` among its rows
    (``group`` and ``ids``: non-negative ints, one per row), exact for rows in any order.

    Counted without hashing where it can be: an id whose rows form one consecutive run in
    which the group never decreases (a fact's day pieces; an entity of one fact) meets each
    of its groups in one stretch, so its rows that differ from the row before count its
    (group, id) pairs. Only the pairs of other ids (found in several runs, or going back to
    an earlier group) are hashed: hashing all of 10 million ids (pandas' ``nunique``) was
    most of a rollup's time.
    """
    counts = np.zeros(groups, np.int64)
    if not len(ids):
        return counts
    run = np.ones(len(ids), bool)  # the first row of a run of equal ids
    np.not_equal(ids[1:], ids[:-1], out=run[1:])
    new = run.copy()  # ... or of a run of equal groups
    new[1:] |= group[1:] != group[:-1]
    back = ids[1:][~run[1:] & (group[1:] < group[:-1])]  # ids whose group goes back
    sorted_ids = bool(np.all(ids[1:] >= ids[:-1]))  # then no id has two runs
    if sorted_ids and not len(back):
        return counts + np.bincount(group[new], minlength=groups)
    hashed = (np.zeros(int(ids.max()) + 1, bool) if sorted_ids
              else np.bincount(ids[run]) > 1)
    hashed[back] = True
    group, ids = group[new], ids[new]
    hard = hashed[ids]
    counts += np.bincount(group[~hard], minlength=groups)
    if hard.any():
        width = int(ids.max()) + 1
        if float(groups) * width >= 2.0 ** 62:
            raise ValueError(f"too many groups ({groups}) and ids ({width}) to pair")
        pairs = pd.unique(group[hard].astype(np.int64) * width + ids[hard])
        counts += np.bincount(pairs // width, minlength=groups)
    return counts


def _periods(days: pd.Series, period: str) -> pd.Categorical:
    """The pieces' days, or their months (first days), as a categorical of the periods in
    ascending order: the distinct days hashed once, a month computed per distinct day."""
    codes, values = pd.factorize(days.to_numpy())
    values = np.asarray(values, dtype="datetime64[ns]")
    if period == "month":
        of_day, values = pd.factorize(values.astype("datetime64[M]").astype("datetime64[ns]"))
        codes, values = of_day[codes], np.asarray(values, dtype="datetime64[ns]")
    order = np.argsort(values)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return pd.Categorical.from_codes(rank[codes] if len(codes) else codes,
                                     pd.DatetimeIndex(values[order]))


def _utc(ns: np.ndarray) -> pd.DatetimeIndex:
    """int64 ns since the epoch as tz-aware UTC timestamps (no parsing)."""
    return pd.DatetimeIndex(ns.view("datetime64[ns]")).tz_localize(UTC)


def _period_keys(pieces: pd.DataFrame, period: str) -> pd.DataFrame:
    """The pieces' calendar, ``period`` (categorical, ascending) and ROLLUP_KEYS."""
    keys = pd.DataFrame({"calendar": pieces["calendar"], period: _periods(pieces["day"], period)},
                        copy=False)
    return pd.concat([keys, pieces[ROLLUP_KEYS]], axis=1, copy=False)


def daily(pieces: pd.DataFrame) -> pd.DataFrame:
    """Sum ``pieces`` (of :func:`day_pieces`, maybe with ``co2_g`` from ``carbon.co2_g`` and
    ``cost`` and ``currency`` from ``cost.cost``) per day, calendar and ROLLUP_KEYS: the rows
    of DAILY_SCHEMA, sorted by their keys. Each sum runs over the day's pieces in their
    order (pandas' group sums)."""
    energy = pieces["energy_j"].to_numpy(float)
    co2, cost = (pieces[name].to_numpy(float) if name in pieces.columns
                 else np.full(len(pieces), np.nan) for name in ("co2_g", "cost"))
    currency = (pieces["currency"] if "currency" in pieces.columns else
                constant("", len(pieces)))
    keys = _period_keys(pieces, "day")
    keys["currency"] = currency  # a function of the keys (source, group): no extra rows
    combined, decode = _combined(keys)
    group, uniques = pd.factorize(combined, sort=True)
    # only the columns summed, without copying the pieces; grouped on the codes as they are
    # (a categorical of them: no second hashing of millions of pieces)
    summed = {"energy_j": energy, "duration_s": pieces["duration_s"].to_numpy(float)}
    for name, values, without in (("co2_g", co2, "energy_without_intensity_j"),
                                  ("cost", cost, "energy_without_tariff_j")):
        none = np.isnan(values)
        summed[name] = np.where(none, 0.0, values) if none.any() else values
        summed[without] = np.where(none, energy, 0.0) if none.any() else None
    frame = pd.DataFrame({k: v for k, v in summed.items() if v is not None}, copy=False)
    by = pd.Categorical.from_codes(group, categories=np.arange(len(uniques)))
    table = frame.groupby(by, observed=True, sort=True).sum().reset_index(drop=True)
    for name, values in summed.items():
        if values is None:  # no piece without a value: nothing to sum
            table[name] = 0.0
    table = pd.concat([_with_distinct(table, group, pieces), decode(uniques)], axis=1)
    table["duration_h"] = table["duration_s"] / 3600.0
    with np.errstate(invalid="ignore", divide="ignore"):
        table["mean_power_w"] = np.where(table["duration_s"] > 0,
                                         table["energy_j"] / table["duration_s"], np.nan)
    return _finished(table, DAILY_SCHEMA)


def _with_distinct(table: pd.DataFrame, group: np.ndarray, pieces: pd.DataFrame
                   ) -> pd.DataFrame:
    """``table`` (a row per group 0 .. len - 1 of the ``pieces``) with its groups' distinct
    ``facts`` and ``entities``."""
    table["facts"] = distinct_per_group(group, pieces[FACT].to_numpy(), len(table))
    table["entities"] = distinct_per_group(group, pieces[ENTITY_ID].to_numpy(), len(table))
    return table


def _finished(table: pd.DataFrame, schema) -> pd.DataFrame:
    """A roll-up's rows with ``energy_kwh``, ``co2_g`` (``cost``) NaN where some energy has
    no intensity (price), in ``schema``'s columns, validated."""
    table["energy_kwh"] = table["energy_j"] / J_PER_KWH
    table["co2_g"] = table["co2_g"].where(table["energy_without_intensity_j"] == 0)
    table["cost"] = table["cost"].where(table["energy_without_tariff_j"] == 0)
    return validate(schema, table[list(schema.columns)], schema.name)


def members(pieces: pd.DataFrame) -> pd.DataFrame:
    """The months' members: per calendar, month, ROLLUP_KEYS and entity (ENTITY_ID) of
    ``pieces`` (of :func:`day_pieces`), ``facts``, the entity's distinct facts with time in
    the month, and FACT, the index of one of them; the labels categorical. A fact is one
    entity's, so a month's distinct facts and entities are sums and counts of its members
    (:func:`counts`), which a change of some entities changes by theirs alone."""
    combined, decode = _combined(_period_keys(pieces, "month"))
    group, uniques = pd.factorize(combined, sort=True)
    ids, fact = pieces[ENTITY_ID].to_numpy(), pieces[FACT].to_numpy()
    width = int(ids.max()) + 1 if len(ids) else 1
    if float(len(uniques)) * width >= 2.0 ** 62:
        raise ValueError(f"too many months ({len(uniques)}) and entities ({width}) to pair")
    member, pairs = pd.factorize(group.astype(np.int64) * width + ids, sort=True)
    at = pairs // width  # each member's month and keys, an index of uniques
    keys = decode(uniques)
    table = pd.DataFrame({name: keys[name].to_numpy()[at] if name == "month" else
                          pd.Categorical(keys[name]).take(at) for name in keys.columns})
    one = np.zeros(len(pairs), np.int64)
    one[member] = fact
    table[FACT] = one
    table["facts"] = distinct_per_group(member, fact, len(pairs))
    return table


def month_counts(pieces: pd.DataFrame) -> pd.DataFrame:
    """Per calendar, month and ROLLUP_KEYS of ``pieces`` (of :func:`day_pieces`): its distinct
    ``facts`` and ``entities`` (int64), labels as str: the rows of
    ``counts(members(pieces))``, counted without the members (one row per entity and month:
    millions)."""
    combined, decode = _combined(_period_keys(pieces, "month"))
    group, uniques = pd.factorize(combined, sort=True)
    return _with_distinct(decode(uniques), group, pieces)


def counts(months: pd.DataFrame) -> pd.DataFrame:
    """Per calendar, month and ROLLUP_KEYS of :func:`members` rows ``months``: ``facts`` and
    ``entities`` (int64), labels as str, sorted by those keys."""
    table = (months.groupby(MONTH_KEYS, sort=True, observed=True)["facts"]
             .agg(facts="sum", entities="size").reset_index())
    return table.astype({name: str for name in ["calendar", *ROLLUP_KEYS]})


def monthly(days: pd.DataFrame, counted: pd.DataFrame) -> pd.DataFrame:
    """The rows of MONTHLY_SCHEMA from the daily rows ``days`` (of :func:`daily`; every day of
    each month they hold) and ``counted`` (of :func:`counts` or :func:`month_counts`: the same
    months and keys).

    Each sum is that of the month's days, in day order (pandas' group sums, compensated),
    whatever order ``days`` come in: the same days give the same bits whether they were
    computed now or read back. ``duration_h`` is summed as the days store it, so
    ``mean_power_w`` = ``energy_j`` / (``duration_h`` x 3600). ``co2_g`` (``cost``) is NaN
    where some energy has no intensity (price): energies are not negative, so where a month
    has no such energy none of its days has (no NaN day is summed)."""
    month = days["day"].to_numpy("datetime64[ns]").astype("datetime64[M]").astype("datetime64[ns]")
    keys = pd.concat([pd.DataFrame({"calendar": days["calendar"], "month": month,
                                    **{name: days[name] for name in ROLLUP_KEYS}}),
                      counted[MONTH_KEYS]], ignore_index=True)  # one code per key and row
    combined, decode = _combined(keys)
    group, uniques = pd.factorize(combined, sort=True)
    of_day, of_count = group[:len(days)], group[len(days):]
    if not ((np.bincount(of_count, minlength=len(uniques)) == 1).all()
            and np.bincount(of_day, minlength=len(uniques)).all()):
        raise ValueError("the days and the counts of the months name different keys")
    order = np.lexsort((days["day"].to_numpy(), of_day))  # each month's days in day order
    by = pd.Categorical.from_codes(of_day[order], categories=np.arange(len(uniques)))
    table = days[SUMS].take(order).groupby(by, observed=True, sort=True).sum()
    table = pd.concat([table.reset_index(drop=True), decode(uniques)], axis=1)
    first = np.flatnonzero(np.diff(of_day[order], prepend=-1))  # a month's first day
    table["currency"] = days["currency"].to_numpy()[order[first]]
    for name in ("facts", "entities"):
        table[name] = np.zeros(len(uniques), np.int64)
        table.loc[of_count, name] = counted[name].to_numpy(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        table["mean_power_w"] = np.where(table["duration_h"] > 0,
                                         table["energy_j"] / (table["duration_h"] * 3600.0),
                                         np.nan)
    return _finished(table, MONTHLY_SCHEMA)


#: Per source, the method its plots and the demo show (tables keep every method):
#: GPU benchmarks the GPU's own energy counter (the reference the other methods are
#: checked against), GEOPM its RAPL counters, PowerAPI the RAPL measurement (not the
#: per-cgroup estimates, which share it out), ClusterCockpit our integration of the
#: job's power series (not cc-backend's rounded average x duration).
PRIMARY_METHOD = {"gpu-benchmark": "counter", "geopm": "rapl", "powerapi": "measured",
                  "clustercockpit": "power"}


def primary(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a rollup (or facts) in their source's PRIMARY_METHOD; a source not listed
    keeps all its rows."""
    chosen = table["source"].map(PRIMARY_METHOD)
    return table[chosen.isna() | (table["method"] == chosen)]
