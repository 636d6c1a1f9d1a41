"""Accounting assets: grid intensity as a source, rollups per day and month, carbon per fact.

1. ``carbon_intensity``: every file of the intensity landing folder read to one table
   (``carbon_intensity/table.parquet``), when missing and by the daily schedule
   ``daily_rollups``; its
   data version is the digest of the files'
   digests, so what changed upstream of a carbon figure is visible as lineage.
2. ``accounting`` (one step, ``joulehouse.accounting.accounts.account``): from every
   source's ``energy_facts/<source>``, ``cc_jobs`` (users, projects) and the intensity,
   ``accounting_daily``, ``accounting_monthly`` and ``carbon_per_fact``; rebuilt when any
   input changes (``TABLE_AUTOMATION``) and by the daily schedule ``daily_rollups``
   (``sensors/schedules.py``, stopped by default). Facts without carbon are counted and listed in the metadata, and
   fail the WARN check ``carbon_covered`` of ``carbon_per_fact``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import dagster as dg
import pandas as pd

from assets.clustercockpit import JOBS_TABLE, cc_energy_facts, cc_jobs
from assets.geopm import geopm_energy_facts
from assets.gpu import TABLE_AUTOMATION, TABLES_POOL
from assets.gpu import energy_facts as gpu_energy_facts
from assets.powerapi import powerapi_energy_facts
from assets.reporting import table_metadata
from joulehouse.accounting.accounts import account
from joulehouse.accounting.intensity import empty_intensity
from joulehouse.accounting.rollups import UTC, primary
from joulehouse.accounting.schemas import (
    CARBON_SCHEMA,
    DAILY_SCHEMA,
    INTENSITY_SCHEMA,
    MONTHLY_SCHEMA,
)
from joulehouse.plots import Series, bars_png, markdown_image
from joulehouse.warehouse import Warehouse as Tables
from resources import AccountingSettings, Warehouse

GROUP = "accounting"
INTENSITY_TABLE = "carbon_intensity"
DAILY_TABLE = "accounting_daily"
MONTHLY_TABLE = "accounting_monthly"
CARBON_TABLE = "carbon_per_fact"
FACTS_TABLE = "energy_facts"
COVERED_CHECK = "carbon_covered"
#: Facts without carbon listed in the check's metadata (all are counted).
MISSING_SHOWN = 20
#: Every source's energy_facts asset.
FACT_ASSETS = [gpu_energy_facts, geopm_energy_facts, powerapi_energy_facts, cc_energy_facts]


def _table(frame: pd.DataFrame) -> dg.TableMetadataValue:
    """``frame`` as a metadata table of strings."""
    return dg.MetadataValue.table(
        records=[dg.TableRecord(r) for r in frame.astype(str).to_dict("records")],
        schema=dg.TableSchema(columns=[dg.TableColumn(str(c), "string") for c in frame.columns]))


@dg.asset(
    name=INTENSITY_TABLE,
    group_name=GROUP,
    kinds={"csv", "parquet"},
    automation_condition=dg.AutomationCondition.on_missing(),
    description=("Grid carbon intensity (gCO2e/kWh) per zone and interval, from the files "
                 "of the intensity landing folder (Electricity Maps exports, OWID yearly "
                 "figures), each row naming its file and the file's SHA-256."),
)
def carbon_intensity(accounting: AccountingSettings,
                     warehouse: Warehouse) -> dg.MaterializeResult:
    table = accounting.read_intensity()
    warehouse.tables().write_table(INTENSITY_TABLE, table)
    files = table.drop_duplicates("file")[["file", "digest"]]
    version = hashlib.sha256("".join(files["digest"]).encode()).hexdigest()
    coverage = table.groupby(["zone", "basis", "kind"]).agg(
        rows=("file", "size"), start=("interval_start", "min"), end=("interval_end", "max"))
    return dg.MaterializeResult(data_version=dg.DataVersion(version), metadata={
        **table_metadata(table, INTENSITY_SCHEMA),
        "landing_folder": dg.MetadataValue.path(accounting.intensity_landing),
        "files": dg.MetadataValue.json(dict(zip(files["file"], files["digest"], strict=True))),
        "coverage": _table(coverage.reset_index()),
    })


_TABLE = {"group_name": GROUP, "automation_condition": TABLE_AUTOMATION, "skippable": True,
          "kinds": {"pandas", "parquet"}}
_INPUTS = [*FACT_ASSETS, cc_jobs, carbon_intensity]

accounting_daily = dg.AssetSpec(
    DAILY_TABLE, deps=_INPUTS, **_TABLE,
    description=("Energy per day (UTC and the site's local days: column calendar), source, "
                 "group, partition, user, project, component and method: J, kWh, "
                 "entity-hours, facts, entities, mean power (energy / time) and gCO2e. Facts "
                 "across midnight are split by time."))
accounting_monthly = dg.AssetSpec(
    MONTHLY_TABLE, deps=_INPUTS, **_TABLE,
    description="The same per month (facts split at month boundaries).")
carbon_per_fact = dg.AssetSpec(
    CARBON_TABLE, deps=_INPUTS, **_TABLE,
    description=("gCO2e of each energy fact, integrated at the intensity's own resolution, "
                 "times the site PUE; zone, basis, intensity files and digests per row; "
                 "NaN and the reason where no intensity covers the fact."))
COVERED_SPEC = dg.AssetCheckSpec(
    COVERED_CHECK, asset=carbon_per_fact.key,
    description="Every fact has carbon: the intensity covers its window and its zone is "
                "configured. Fails (WARN) listing the facts without.")


def _stored(tables: Tables, table: str) -> pd.DataFrame | None:
    return tables.read_table(table) if tables.partition_keys(table) else None


def daily_plots(daily: pd.DataFrame) -> str:
    """Markdown: energy (kWh) and CO2 (kg) per UTC day, stacked by source, each source in
    its primary method (``rollups.PRIMARY_METHOD``)."""
    shown = primary(daily[daily["calendar"] == UTC])
    per_day = shown.groupby(["day", "source"])[["energy_kwh", "co2_g"]].sum(min_count=1)
    per_day = per_day.unstack("source")
    days = [day.strftime("%Y-%m-%d") for day in per_day.index]
    images = []
    for column, label, factor in (("energy_kwh", "energy (kWh)", 1.0),
                                  ("co2_g", "CO2e (kg)", 1e-3)):
        values = per_day[column].fillna(0.0) * factor
        series = [Series(str(source), days, values[source].tolist()) for source in values]
        png = bars_png(days, series, title=f"{label} per UTC day", y_label=label)
        images.append(markdown_image(png, f"{label} per day"))
    return "\n\n".join(images)


@dg.multi_asset(
    name="accounting",
    specs=[accounting_daily, accounting_monthly, carbon_per_fact],
    check_specs=[COVERED_SPEC],
    pool=TABLES_POOL,
    description="The accounting tables in one step; see assets/accounting.py.",
)
def accounting(accounting: AccountingSettings, warehouse: Warehouse) -> Iterator:
    tables = warehouse.tables()
    facts = _stored(tables, FACTS_TABLE)
    if facts is None:
        raise dg.Failure("no energy_facts stored yet: materialize a source first")
    intensity = _stored(tables, INTENSITY_TABLE)
    if intensity is None:  # not read yet: every fact is reported without carbon
        intensity = empty_intensity()
    accounts = account(facts, intensity,
                       accounting.carbon_settings(), accounting.time_zone,
                       _stored(tables, JOBS_TABLE))
    missing = accounts.missing
    shown = _table(missing.head(MISSING_SHOWN))
    tables.write_table(DAILY_TABLE, accounts.daily)
    yield dg.MaterializeResult(asset_key=accounting_daily.key, metadata={
        **table_metadata(accounts.daily, DAILY_SCHEMA),
        "time_zone": accounting.time_zone,
        "energy_and_co2_per_day": dg.MetadataValue.md(daily_plots(accounts.daily)),
    })
    tables.write_table(MONTHLY_TABLE, accounts.monthly)
    yield dg.MaterializeResult(asset_key=accounting_monthly.key,
                               metadata=table_metadata(accounts.monthly, MONTHLY_SCHEMA))
    tables.write_table(CARBON_TABLE, accounts.carbon)
    yield dg.MaterializeResult(asset_key=carbon_per_fact.key, metadata={
        **table_metadata(accounts.carbon, CARBON_SCHEMA),
        "facts_without_carbon": dg.MetadataValue.int(len(missing)),
        "zones": dg.MetadataValue.json(dict(accounting.zones)),
        "pue": dg.MetadataValue.float(accounting.pue),
        "total_co2_kg": dg.MetadataValue.float(float(accounts.carbon["co2_g"].sum() / 1e3)),
    })
    yield dg.AssetCheckResult(
        check_name=COVERED_CHECK, asset_key=carbon_per_fact.key, passed=missing.empty,
        severity=dg.AssetCheckSeverity.WARN,
        description=(None if missing.empty else
                     f"{len(missing)} of {len(accounts.carbon)} facts without carbon"),
        metadata={"facts_without_carbon": dg.MetadataValue.int(len(missing)),
                  **({"missing": shown} if len(missing) else {})})


ACCOUNTING_ASSETS = [carbon_intensity, accounting]
