"""pandera schemas of the accounting tables: intensity, tariffs, daily and monthly rollups,
carbon and cost per fact.

Units are in the column names: J, kWh, h (hours), W, gCO2e (``co2_g``), gCO2e/kWh; a cost
is in the ``currency`` of its row (per kWh for a price).
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa

from joulehouse.validation import all_str

_UTC = pd.DatetimeTZDtype("ns", "UTC")
_NONNEG = pa.Check.ge(0)


def _text(description: str | None = None) -> pa.Column:
    """Text in a table of a row per fact: an object column of str, checked in one pass
    (``validation.all_str``) instead of pandera's ``str`` dtype, which tests every value in
    Python (most of the validation of 10 million facts)."""
    return pa.Column(object, pa.Check(all_str, name="str"), description=description)


def _str_categories(series: pd.Series) -> bool:
    """Every category of a categorical column a str."""
    return pd.api.types.infer_dtype(series.cat.categories, skipna=False) in ("string", "empty")


def _label(description: str | None = None) -> pa.Column:
    """Text of few distinct values in a table of a row per fact: a categorical of str, no
    nulls. Its nulls are its codes of -1 (an object column's null test looks at every
    value) and it is stored dictionary-encoded; its values are those of
    the str they stand for."""
    return pa.Column("category", pa.Check(_str_categories, name="str"),
                     description=description)


INTENSITY_SCHEMA = pa.DataFrameSchema(
    {
        "zone": pa.Column(str, description="Grid zone: an Electricity Maps zone id (FR, DE, "
                                           "US-CAL-CISO) or an OWID code (FRA)."),
        "interval_start": pa.Column(_UTC, description="Start of the interval (UTC)."),
        "interval_end": pa.Column(_UTC, description="End of the interval (UTC), exclusive."),
        "intensity_g_per_kwh": pa.Column(float, _NONNEG,
                                         description="Carbon intensity (gCO2e/kWh)."),
        "basis": pa.Column(str, pa.Check.isin(["direct", "lca"]),
                           description="direct (combustion) or lca (life cycle) emissions."),
        "kind": pa.Column(str, pa.Check.isin(["series", "yearly"]),
                          description="series: a time series at its own resolution; yearly: "
                                      "OWID's yearly figures (the coarsest fallback)."),
        "file": pa.Column(str, description="The file the row was read from."),
        "digest": pa.Column(str, description="SHA-256 of that file's bytes: the series' version."),
    },
    checks=pa.Check(lambda df: df["interval_end"] > df["interval_start"],
                    name="interval_ordered"),
    strict=True,
    ordered=True,
    name="carbon_intensity",
)

TARIFF_SCHEMA = pa.DataFrameSchema(
    {
        "site": pa.Column(str, description="The tariff's site (what facts are mapped to)."),
        "interval_start": pa.Column(_UTC, description="Start of the band's interval (UTC)."),
        "interval_end": pa.Column(_UTC, description="End of the interval (UTC), exclusive."),
        "price_per_kwh": pa.Column(float, _NONNEG, description="Energy price (currency/kWh)."),
        "currency": pa.Column(str, description="ISO 4217 code of the price."),
        "file": pa.Column(str, description="The file the band was read from."),
        "digest": pa.Column(str, description="SHA-256 of that file's bytes: the tariff's "
                                             "version."),
    },
    checks=pa.Check(lambda df: df["interval_end"] > df["interval_start"],
                    name="interval_ordered"),
    strict=True,
    ordered=True,
    name="tariffs",
)

_KEYS = {
    "calendar": pa.Column(str, description="UTC, or the site's time zone whose local days "
                                           "(months) the row counts; a table holds both: sum "
                                           "within one calendar only."),
    "source": pa.Column(str, description="energy_facts source."),
    "group": pa.Column(str, description="Data root, landing folder, sensor or cluster "
                                        "(joulehouse/accounting/entities.py)."),
    "partition": pa.Column(str, description="Batch partition (ClusterCockpit), else ''."),
    "user": pa.Column(str, description="User (ClusterCockpit), else ''."),
    "project": pa.Column(str, description="Project (ClusterCockpit), experiment (GPU) or "
                                          "report (GEOPM), else ''."),
    "component": pa.Column(str, description="gpu, cpu, dram, node, external ..."),
    "method": pa.Column(str, description="How it was measured; methods of one measurement "
                                         "are rows of their own, never summed together."),
}
_VALUES = {
    "facts": pa.Column("int64", _NONNEG, description="Facts with time in the period."),
    "entities": pa.Column("int64", _NONNEG, description="Distinct entities (repetitions, "
                                                         "hosts, targets, jobs)."),
    "energy_j": pa.Column(float, _NONNEG, description="Energy in the period (J), facts split "
                                                      "at period boundaries by time."),
    "energy_kwh": pa.Column(float, _NONNEG, description="The same in kWh."),
    "duration_h": pa.Column(float, _NONNEG, description="Entity-hours: GPU-, host-, node-job- "
                                                        "or target-hours in the period."),
    "mean_power_w": pa.Column(float, nullable=True,
                              description="energy_j / duration (W); NaN for no time."),
    "co2_g": pa.Column(float, nullable=True,
                       description="gCO2e (times the PUE); NaN if any energy of the row has "
                                   "no intensity (see energy_without_intensity_j)."),
    "energy_without_intensity_j": pa.Column(float, _NONNEG,
                                            description="Energy with no intensity or zone (J)."),
    "cost": pa.Column(float, nullable=True,
                      description="Energy cost in currency (times the PUE), at the tariff's "
                                  "time-of-use prices; NaN if any energy of the row has no "
                                  "price (see energy_without_tariff_j)."),
    "currency": pa.Column(str, description="Currency of cost ('' when no tariff applies)."),
    "energy_without_tariff_j": pa.Column(float, _NONNEG,
                                         description="Energy with no tariff price (J)."),
}


def _rollup_schema(period: str, description: str, name: str) -> pa.DataFrameSchema:
    return pa.DataFrameSchema(
        {"calendar": _KEYS["calendar"],
         period: pa.Column("datetime64[ns]", description=description),
         **{k: v for k, v in _KEYS.items() if k != "calendar"}, **_VALUES},
        unique=["calendar", period, *[k for k in _KEYS if k != "calendar"]],
        strict=True, ordered=True, name=name)


DAILY_SCHEMA = _rollup_schema("day", "The day (midnight, in the row's calendar; naive).",
                              "accounting_daily")
MONTHLY_SCHEMA = _rollup_schema("month", "The month (its first day, in the row's calendar; "
                                         "naive).", "accounting_monthly")
#: Key columns of the rollups, after the period.
ROLLUP_KEYS = [k for k in _KEYS if k != "calendar"]

#: The columns of a fact that carbon_per_fact and cost_per_fact repeat.
_FACT = {
    "source": _text(), "entity": _text(), "component": _text(),
    "window_start": pa.Column(_UTC), "window_end": pa.Column(_UTC),
    "method": _text(),
    "energy_j": pa.Column(float, _NONNEG, description="The fact's energy (J)."),
}
FACT_COLUMNS = list(_FACT)
#: The same in carbon_per_fact and cost_per_fact: source, component and method as labels.
_PER_FACT = {**_FACT, "source": _label(), "component": _label(), "method": _label()}

CARBON_SCHEMA = pa.DataFrameSchema(
    {
        **_PER_FACT,
        "zone": _label("Grid zone used ('' when none is configured)."),
        "pue": pa.Column(float, pa.Check.ge(1), description="Site PUE the energy was scaled by."),
        "basis": _label("Intensity basis used: lca or direct."),
        "intensity_g_per_kwh": pa.Column(float, nullable=True,
                                         description="Energy-weighted intensity over the "
                                                     "window (gCO2e/kWh)."),
        "co2_g": pa.Column(float, nullable=True,
                           description="gCO2e = energy x PUE x intensity, integrated at the "
                                       "intensity's resolution; NaN if not covered."),
        "intensity_kind": _label("series, yearly (OWID fallback), series+yearly, or '' (none)."),
        "intensity_files": _label("The intensity files used, ';'-separated."),
        "intensity_digests": _label("Their SHA-256 digests (versions)."),
        "missing": _label("Why co2_g is NaN ('' when it is not)."),
    },
    strict=True,
    ordered=True,
    name="carbon_per_fact",
)

COST_SCHEMA = pa.DataFrameSchema(
    {
        **_PER_FACT,
        "site": _label("Tariff site used ('' when none is configured)."),
        "pue": pa.Column(float, pa.Check.ge(1), description="Site PUE the energy was scaled by."),
        "price_per_kwh": pa.Column(float, nullable=True,
                                   description="Energy-weighted price over the window "
                                               "(currency/kWh)."),
        "cost": pa.Column(float, nullable=True,
                          description="energy x PUE x price, integrated at the tariff's "
                                      "bands; NaN if not covered."),
        "currency": _label("Currency of cost and price ('' when no site is configured)."),
        "tariff_files": _label("The tariff files used, ';'-separated."),
        "tariff_digests": _label("Their SHA-256 digests (versions)."),
        "missing": _label("Why cost is NaN ('' when it is not)."),
    },
    strict=True,
    ordered=True,
    name="cost_per_fact",
)

TRUST_SCHEMA = pa.DataFrameSchema(
    {
        "rule": pa.Column(str, description="Trust rule id (joulehouse/accounting/trust.py)."),
        "version": pa.Column("int64", description="The rule's version."),
        "source": pa.Column(str, description="energy_facts source of the pair's entity."),
        "entity": pa.Column(str, description="What was checked: a repetition, a PowerAPI "
                                             "sensor, a ClusterCockpit job."),
        "component": pa.Column(str, description="Component of the reference figure."),
        "window_start": pa.Column(_UTC, description="Start of the compared window (UTC)."),
        "window_end": pa.Column(_UTC, description="End of the compared window (UTC)."),
        "reference": pa.Column(str, description="What the reference figure is."),
        "reference_j": pa.Column(float, description="The reference energy (J)."),
        "compared": pa.Column(str, description="What the compared figure is."),
        "compared_j": pa.Column(float, description="The compared energy (J)."),
        "ratio": pa.Column(float, nullable=True,
                           description="compared_j / reference_j (NaN for no reference)."),
        "low": pa.Column(float, description="Lowest ratio that passes."),
        "high": pa.Column(float, description="Highest ratio that passes (inf: none)."),
        "passed": pa.Column(bool, description="low <= ratio <= high."),
    },
    strict=True,
    ordered=True,
    name="trust_checks",
)

WASTE_SCHEMA = pa.DataFrameSchema(
    {
        "rule": pa.Column(str, description="Waste rule id (joulehouse/accounting/waste.py)."),
        "version": pa.Column("int64", description="The rule's version."),
        "threshold": pa.Column(float, description="Utilisation (fraction) below which is idle."),
        "source": pa.Column(str, description="energy_facts source."),
        "entity": pa.Column(str, description="The repetition or job."),
        "user": pa.Column(str, description="User (ClusterCockpit), else ''."),
        "window_start": pa.Column(_UTC, description="Start of the judged window (UTC)."),
        "window_end": pa.Column(_UTC, description="End of the judged window (UTC)."),
        "gpu_hours": pa.Column(float, _NONNEG, description="GPU-hours of the window."),
        "energy_j": pa.Column(float, _NONNEG, description="Energy judged (J)."),
        "idle_energy_j": pa.Column(float, _NONNEG, description="Of it, spent idle (J)."),
        "idle_s": pa.Column(float, _NONNEG, description="Time judged idle (s)."),
        "flagged": pa.Column(bool, description="Some energy was spent idle."),
    },
    strict=True,
    ordered=True,
    name="waste",
)

WASTE_WEEKLY_SCHEMA = pa.DataFrameSchema(
    {
        "week": pa.Column("datetime64[ns]", description="The UTC week (its Monday; naive)."),
        "user": pa.Column(str, description="User (ClusterCockpit), else ''."),
        "energy_j": pa.Column(float, _NONNEG, description="Energy judged in the week (J)."),
        "gpu_hours": pa.Column(float, _NONNEG, description="GPU-hours in the week."),
        "idle_energy_j": pa.Column(float, _NONNEG, description="Energy spent idle (J)."),
        "idle_share": pa.Column(float, nullable=True, description="idle_energy_j / energy_j."),
        "rank": pa.Column("int64", pa.Check.ge(1),
                          description="1 = most idle energy in the week."),
    },
    unique=["week", "user"],
    strict=True,
    ordered=True,
    name="waste_weekly",
)

QUALITY_SCHEMA = pa.DataFrameSchema(
    {
        **{k: v for k, v in _FACT.items() if k != "energy_j"},
        "sampling_interval_s": pa.Column(float, pa.Check.gt(0), nullable=True,
                                         description="Median step between the readings the "
                                                     "fact was computed from (s); NaN where "
                                                     "the source does not say."),
        "covered_fraction": pa.Column(float, pa.Check.in_range(0, 1), nullable=True,
                                      description="Share of the window covered by readings "
                                                  "(gaps bridged by interpolation are not); "
                                                  "NaN where the source does not say."),
    },
    strict=True,
    ordered=True,
    name="fact_quality",
)
