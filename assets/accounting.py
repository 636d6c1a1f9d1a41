"""Accounting assets: grid intensity and tariffs as sources, rollups per day and month,
carbon and cost per fact.

1. ``carbon_intensity`` and ``tariffs``: every file of the intensity (tariff) landing
   folder read to one table, when missing and by the daily schedule ``daily_rollups``;
   the data version is the digest of the files' digests, so what changed upstream of a
   carbon or cost figure is visible as lineage. An intensity row (or OWID year) with an
   empty intensity cell makes the check ``rows_read`` of ``carbon_intensity`` a WARN,
   one record per file, zone and basis, stored in the warehouse table ``left_out``
   (partition ``intensity/read``).
2. ``accounting`` (one step, ``joulehouse.accounting.incremental.update``): from every
   source's ``energy_facts/<source>``, ``cc_jobs`` (users, projects), the intensity and
   the tariffs, ``accounting_daily``, ``accounting_monthly``, ``carbon_per_fact`` and
   ``cost_per_fact``, kept equal to ``accounts.account`` from scratch by recomputing what
   changed in energy_facts (the days and months it touches; everything when the intensity,
   tariffs or settings changed: the metadata ``recomputed`` says which and why); run when
   any input changes, even while a source's run is in flight (``ACCOUNTING_AUTOMATION``,
   in its own pool ``assets.pools.ACCOUNTING_POOL``), and by the daily schedule ``daily_rollups``
   (``sensors/schedules.py``, stopped by default). Facts without carbon (cost) are counted
   and listed in the metadata, and fail the WARN check ``carbon_covered`` of
   ``carbon_per_fact`` (``cost_covered`` of ``cost_per_fact``). The tables are then
   compacted and vacuumed when due (``joulehouse.accounting.compaction``; the metadata
   ``compacted`` says what was merged and vacuumed), as are those of 3. by their steps.
3. ``trust_checks``, ``waste_step`` (``waste``, ``waste_weekly``) and ``fact_quality``: kept
   equal to the core's whole computation (``trust.py``, ``waste.py``, ``quality.py``) by
   recomputing the repetitions, jobs, sensors and facts whose inputs changed
   (``joulehouse.accounting.kept``; the metadata ``recomputed`` says what, and why when
   whole); their metadata from the Delta log and small reads, never the whole table. They
   are asked for as the accounting is, at most every few minutes (``DERIVED_AUTOMATION``,
   ``assets/follow_cadence.py``), in a pool of their own (``assets.pools.DERIVED_POOL``),
   so the accounting never waits for them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import dagster as dg
import pandas as pd

from assets.clustercockpit import (
    cc_block_tables,
    cc_energy_facts,
    cc_job_energy,
    cc_jobs,
)
from assets.follow_cadence import at_most_every
from assets.geopm import geopm_energy_facts
from assets.gpu import energy_facts as gpu_energy_facts
from assets.gpu import (
    gpu_repetition_energy,
    gpu_validated_frames,
)
from assets.plot_cadence import plot_metadata
from assets.pools import ACCOUNTING_POOL, DERIVED_POOL
from assets.powerapi import powerapi_energy_facts, powerapi_window_energy
from assets.reporting import STEP_RETRY, left_out_check, table_metadata, verdict
from joulehouse import entry_table
from joulehouse.accounting import compaction, incremental, kept, trust, waste
from joulehouse.accounting.incremental import (
    CARBON_TABLE,
    COST_TABLE,
    DAILY_TABLE,
    FACTS_TABLE,
    MONTHLY_TABLE,
)
from joulehouse.accounting.intensity import LEFT_OUT_SOURCE as INTENSITY_SOURCE
from joulehouse.accounting.intensity import empty_intensity
from joulehouse.accounting.months import MEMBERS_TABLE
from joulehouse.accounting.rollups import UTC, primary
from joulehouse.accounting.schemas import (
    CARBON_SCHEMA,
    COST_SCHEMA,
    DAILY_SCHEMA,
    INTENSITY_SCHEMA,
    MONTHLY_SCHEMA,
    QUALITY_SCHEMA,
    TARIFF_SCHEMA,
    TRUST_SCHEMA,
    WASTE_SCHEMA,
    WASTE_WEEKLY_SCHEMA,
)
from joulehouse.accounting.stepseries import J_PER_KWH
from joulehouse.accounting.tariff import empty_tariffs
from joulehouse.errors import InputError
from joulehouse.leftout import LeftOut, store_left_out
from joulehouse.plots import Series, bars_png, markdown_image
from joulehouse.warehouse import Warehouse as Tables
from resources import AccountingSettings, Warehouse

GROUP = "accounting"
INTENSITY_TABLE = "carbon_intensity"
ROWS_READ_CHECK = "rows_read"
TARIFF_TABLE = "tariffs"
COST_CHECK = "cost_covered"
#: The columns of a fact without carbon (cost) the coverage checks list, per key column.
MISSING_COLUMNS = {key: ["source", "entity", "component", "method", "window_start",
                         "window_end", key, "missing"] for key in ("zone", "site")}
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


def read_landed(read: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """``read()``, a step-series landing folder read; its ``InputError`` (a bad file, with
    file and line) raised as a verdict: read again, it fails the same (not retried)."""
    try:
        return read()
    except InputError as error:
        raise verdict(str(error)) from error


def landed_series(table: pd.DataFrame, schema, folder: str, keys: list[str],
                  tables: Tables, name: str,
                  checks: list[dg.AssetCheckResult] | None = None) -> dg.MaterializeResult:
    """Write a step-series source's ``table`` (rows naming their ``file`` and ``digest``)
    as ``name`` and describe it: its data version is the digest of its files' digests;
    ``coverage`` gives rows, first start and last end per ``keys``; ``checks``: the
    asset's check results.

    Raises a verdict (not retried) if ``folder`` is not a folder (unmounted, mistyped): the
    stored table is kept rather than replaced by an empty one, which would leave every fact
    without a value.
    """
    if not Path(folder).is_dir():
        raise verdict(f"{folder}: no such landing folder (unmounted or mistyped?); the "
                      f"stored {name} table is kept")
    tables.write_table(name, table)
    files = table.drop_duplicates("file")[["file", "digest"]]
    version = hashlib.sha256("".join(files["digest"]).encode()).hexdigest()
    coverage = table.groupby(keys).agg(
        rows=("file", "size"), start=("interval_start", "min"), end=("interval_end", "max"))
    return dg.MaterializeResult(data_version=dg.DataVersion(version), metadata={
        **table_metadata(table, schema),
        "landing_folder": dg.MetadataValue.path(folder),
        "files": dg.MetadataValue.json(dict(zip(files["file"], files["digest"], strict=True))),
        "coverage": _table(coverage.reset_index()),
    }, check_results=checks)


ROWS_READ_SPEC = dg.AssetCheckSpec(
    ROWS_READ_CHECK, asset=INTENSITY_TABLE,
    description="Every row of every intensity file gives an interval: a WARN names each "
    "file, zone and basis with rows whose intensity cell is empty (holes), with counts.")


@dg.asset(
    retry_policy=STEP_RETRY,
    name=INTENSITY_TABLE,
    group_name=GROUP,
    kinds={"csv", "parquet"},
    automation_condition=dg.AutomationCondition.on_missing(),
    check_specs=[ROWS_READ_SPEC],
    description=("Grid carbon intensity (gCO2e/kWh) per zone and interval, from the files "
                 "of the intensity landing folder (Electricity Maps exports, OWID yearly "
                 "figures), each row naming its file and the file's SHA-256."),
)
def carbon_intensity(accounting: AccountingSettings,
                     warehouse: Warehouse) -> dg.MaterializeResult:
    left_out: list[LeftOut] = []
    table = read_landed(lambda: accounting.read_intensity(left_out))
    tables = warehouse.tables()
    result = landed_series(table, INTENSITY_SCHEMA, accounting.intensity_landing,
                           ["zone", "basis", "kind"], tables, INTENSITY_TABLE,
                           [left_out_check(ROWS_READ_SPEC, left_out)])
    store_left_out(tables, INTENSITY_SOURCE, "read", "", left_out,
                   now=pd.Timestamp.now(tz="UTC"))
    return result


@dg.asset(
    retry_policy=STEP_RETRY,
    name=TARIFF_TABLE,
    group_name=GROUP,
    kinds={"csv", "parquet"},
    automation_condition=dg.AutomationCondition.on_missing(),
    description=("Time-of-use electricity prices (currency/kWh) per site and UTC interval, "
                 "from the tariff files of the tariff landing folder (local weekday and "
                 "time-of-day bands), each row naming its file and the file's SHA-256."),
)
def tariffs(accounting: AccountingSettings, warehouse: Warehouse) -> dg.MaterializeResult:
    return landed_series(read_landed(accounting.read_tariffs), TARIFF_SCHEMA,
                         accounting.tariff_landing,
                         ["site", "currency"], warehouse.tables(), TARIFF_TABLE)


#: When an accounting step runs: once an input changed (or it is missing) since the
#: automation last asked for it, and it is not running; unlike ``TABLE_AUTOMATION`` it does
#: not wait for the runs in flight of its inputs (five sources landing all day always have
#: one), and an input written while it runs asks for it again when it ends (eager's
#: ``since_last_handled`` takes the step's own materialization for handled, so a source's
#: write landing after the running step read its inputs was left unaccounted until some
#: other input changed). An input written between the request and the automation's next
#: evaluation does not count as handled by that request either (the step may have read
#: its inputs before), so the price is at most one run more than needed: for a write
#: that landed before the step read it. A step whose run failed after its retries (a full
#: disk, a bug) leaves what it was asked for unaccounted: it is asked for again at each
#: full hour (``ACCOUNTING_RETRY_CRON``) while its latest execution failed, so the writes
#: that asked for it are not left until the next input change (a cancelled run is left
#: to the operator who cancelled it, until that change).
ACCOUNTING_RETRY_CRON = "0 * * * *"
ACCOUNTING_AUTOMATION = (
    dg.AutomationCondition.in_latest_time_window()
    & (dg.AutomationCondition.newly_missing() | dg.AutomationCondition.any_deps_updated()
       | (dg.AutomationCondition.cron_tick_passed(ACCOUNTING_RETRY_CRON)
          & dg.AutomationCondition.execution_failed())
       ).since((dg.AutomationCondition.newly_requested()
                & ~dg.AutomationCondition.any_deps_updated())
               | dg.AutomationCondition.initial_evaluation())
    & ~dg.AutomationCondition.in_progress()
).with_label("inputs changed since last asked, in flight or not")

_TABLE = {"group_name": GROUP, "automation_condition": ACCOUNTING_AUTOMATION, "skippable": True,
          "kinds": {"pandas", "parquet"}}
#: When the tables derived beside the accounting are asked for: as the accounting, at most
#: once every few minutes (``assets/follow_cadence.py``): no one's freshness target, each
#: request a run of its own.
DERIVED_AUTOMATION = at_most_every(ACCOUNTING_AUTOMATION)
_DERIVED_TABLE = {**_TABLE, "automation_condition": DERIVED_AUTOMATION}
_INPUTS = [*FACT_ASSETS, cc_jobs, carbon_intensity, tariffs]

accounting_daily = dg.AssetSpec(
    DAILY_TABLE, deps=_INPUTS, **_TABLE,
    description=("Energy per day (UTC and the site's local days: column calendar), source, "
                 "group, partition, user, project, component and method: J, kWh, "
                 "entity-hours, facts, entities, mean power (energy / time), gCO2e, and cost "
                 "with its currency (energy_without_tariff_j: what had no price). Facts "
                 "across midnight are split by time."))
accounting_monthly = dg.AssetSpec(
    MONTHLY_TABLE, deps=_INPUTS, **_TABLE,
    description="The same per month (facts split at month boundaries).")
carbon_per_fact = dg.AssetSpec(
    CARBON_TABLE, deps=_INPUTS, **_TABLE,
    description=("gCO2e of each energy fact, integrated at the intensity's own resolution, "
                 "times the site PUE; zone, basis, intensity files and digests per row; "
                 "NaN and the reason where no intensity covers the fact."))
cost_per_fact = dg.AssetSpec(
    COST_TABLE, deps=_INPUTS, **_TABLE,
    description=("Energy cost of each energy fact at its site's time-of-use tariff, "
                 "integrated at the tariff's bands, times the site PUE; site, currency, "
                 "tariff files and digests per row; NaN and the reason where no band "
                 "covers the fact."))
COVERED_SPEC = dg.AssetCheckSpec(
    COVERED_CHECK, asset=carbon_per_fact.key,
    description="Every fact has carbon: the intensity covers its window and its zone is "
                "configured. Fails (WARN) listing the facts without.")
COST_SPEC = dg.AssetCheckSpec(
    COST_CHECK, asset=cost_per_fact.key,
    description="Every fact has a cost: its site's tariff covers its window and a site is "
                "configured. Fails (WARN) listing the facts without.")


def _stored(tables: Tables, table: str) -> pd.DataFrame | None:
    return tables.read_table(table) if tables.partition_keys(table) else None


#: UTC months whose days the daily plot shows: the latest month stored and those before.
PLOTTED_MONTHS = 3


def daily_plots(daily: pd.DataFrame) -> str:
    """Markdown: energy (kWh), CO2 (kg) and cost (per currency) per UTC day, stacked by
    source, each source in its primary method (``rollups.PRIMARY_METHOD``)."""
    shown = primary(daily[daily["calendar"] == UTC])
    plotted = [("energy_kwh", "energy (kWh)", 1.0, shown), ("co2_g", "CO2e (kg)", 1e-3, shown)]
    plotted += [("cost", f"cost ({currency})", 1.0, rows)
                for currency, rows in shown.groupby("currency") if currency]
    images = []
    for column, label, factor, rows in plotted:
        per_day = rows.groupby(["day", "source"])[column].sum(min_count=1).unstack("source")
        days = [day.strftime("%Y-%m-%d") for day in per_day.index]
        values = per_day.fillna(0.0) * factor
        series = [Series(str(source), days, values[source].tolist()) for source in values]
        png = bars_png(days, series, title=f"{label} per UTC day", y_label=label)
        images.append(markdown_image(png, f"{label} per day"))
    return "\n\n".join(images)


def coverage_check(check: str, asset: dg.AssetKey, without: pd.DataFrame, of: int,
                   what: str) -> dg.AssetCheckResult:
    """The WARN check that every fact has a ``what`` (carbon, cost): ``without`` lists the
    facts that have none (the first MISSING_SHOWN in the metadata), of ``of`` facts."""
    name = f"facts_without_{what}"
    return dg.AssetCheckResult(
        check_name=check, asset_key=asset, passed=without.empty,
        severity=dg.AssetCheckSeverity.WARN,
        description=None if without.empty else f"{len(without)} of {of} facts without {what}",
        metadata={name: dg.MetadataValue.int(len(without)),
                  **({"missing": _table(without.head(MISSING_SHOWN))} if len(without) else {})})


def _totals(monthly: pd.DataFrame, column: str, by: list[str]) -> pd.Series:
    """``column`` summed over the UTC calendar's monthly rows that have it (a row with any
    energy lacking it is NaN and left out), per ``by``: the tables' totals without a
    read of the per-fact tables."""
    rows = monthly[monthly["calendar"] == UTC]
    return rows.groupby(by)[column].sum() if by else pd.Series({"": rows[column].sum()})


def _compacted(done: dict[str, dict], *tables: str) -> dict:
    """The metadata ``compacted``: what ``compaction.compact_if_due`` did (``done``) to
    ``tables``, by table (the files a merge added and merged, and whose; the files
    vacuumed: ``removed``); None when nothing."""
    return {"compacted": dg.MetadataValue.json(
        {table: done[table] for table in tables if table in done} or None)}


def _logged_metadata(tables: Tables, table: str, schema) -> tuple[dict, int]:
    """``table``'s row count (from the Delta log's statistics) and column schema, without
    reading its rows; and that count."""
    rows = entry_table.count(tables, table, {})
    head = entry_table.read_files(tables, table, [])
    return {**table_metadata(head, schema), "dagster/row_count": dg.MetadataValue.int(rows)}, rows


@dg.multi_asset(
    retry_policy=STEP_RETRY,
    name="accounting",
    specs=[accounting_daily, accounting_monthly, carbon_per_fact, cost_per_fact],
    check_specs=[COVERED_SPEC, COST_SPEC],
    pool=ACCOUNTING_POOL,
    description="The accounting tables in one step, kept current from what changed in "
                "energy_facts (joulehouse/accounting/incremental.py); see "
                "assets/accounting.py.",
)
def accounting(context, accounting: AccountingSettings, warehouse: Warehouse) -> Iterator:
    # context unannotated: this module's annotations are strings, which Dagster refuses there
    tables = warehouse.tables()
    if not tables.files(FACTS_TABLE):
        raise verdict("no energy_facts stored yet: materialize a source first")
    # not read yet: every fact is reported without carbon (cost)
    intensity = _stored(tables, INTENSITY_TABLE)
    prices = _stored(tables, TARIFF_TABLE)
    updated = incremental.update(tables, incremental.Inputs(
        intensity=empty_intensity() if intensity is None else intensity,
        tariffs=empty_tariffs() if prices is None else prices,
        carbon=accounting.carbon_settings(), cost=accounting.cost_settings(),
        time_zone=accounting.time_zone))
    recomputed = {"recomputed": dg.MetadataValue.json({
        "whole": updated.whole or None, "entities_changed": updated.changed,
        "entities_removed": updated.removed, "days": updated.days, "months": updated.months,
        "facts_read": updated.facts_read, "jobs_changed": updated.jobs_changed,
        "jobs_read": updated.jobs_read})}
    compacted = compaction.compact_if_due(tables, compaction.ACCOUNTING)
    monthly = tables.read_table(MONTHLY_TABLE)  # read whole: small (docs/ARCHITECTURE.md)
    yield dg.MaterializeResult(asset_key=accounting_daily.key, metadata={
        **_logged_metadata(tables, DAILY_TABLE, DAILY_SCHEMA)[0], **recomputed,
        **_compacted(compacted, DAILY_TABLE), "time_zone": accounting.time_zone,
        **plot_metadata(context, accounting_daily.key, "energy_co2_and_cost_per_day",
                        lambda: daily_plots(incremental.recent_days(tables, monthly,
                                                                    PLOTTED_MONTHS)),
                        carry=True),
    })
    yield dg.MaterializeResult(asset_key=accounting_monthly.key,
                               metadata={**table_metadata(monthly, MONTHLY_SCHEMA), **recomputed,
                                         **_compacted(compacted, MONTHLY_TABLE,
                                                      MEMBERS_TABLE)})
    metadata, facts = _logged_metadata(tables, CARBON_TABLE, CARBON_SCHEMA)
    missing = incremental.stored_missing(tables, CARBON_TABLE, "co2_g", MISSING_COLUMNS["zone"])
    yield dg.MaterializeResult(asset_key=carbon_per_fact.key, metadata={
        **metadata, **recomputed, **_compacted(compacted, CARBON_TABLE),
        "facts_without_carbon": dg.MetadataValue.int(len(missing)),
        "zones": dg.MetadataValue.json(dict(accounting.zones)),
        "pue": dg.MetadataValue.float(accounting.pue),
        "total_co2_kg": dg.MetadataValue.float(float(_totals(monthly, "co2_g", []).sum() / 1e3)),
    })
    yield coverage_check(COVERED_CHECK, carbon_per_fact.key, missing, facts, "carbon")
    metadata, facts = _logged_metadata(tables, COST_TABLE, COST_SCHEMA)
    unpriced = incremental.stored_missing(tables, COST_TABLE, "cost", MISSING_COLUMNS["site"])
    totals = _totals(monthly, "cost", ["currency"])
    yield dg.MaterializeResult(asset_key=cost_per_fact.key, metadata={
        **metadata, **recomputed, **_compacted(compacted, COST_TABLE),
        "facts_without_cost": dg.MetadataValue.int(len(unpriced)),
        "sites": dg.MetadataValue.json(dict(accounting.tariff_sites)),
        "pue": dg.MetadataValue.float(accounting.pue),
        "total_cost": dg.MetadataValue.json({c: round(float(v), 2)
                                             for c, v in totals.items() if c}),
    })
    yield coverage_check(COST_CHECK, cost_per_fact.key, unpriced, facts, "cost")


TRUST_TABLE = "trust_checks"


@dg.asset(
    retry_policy=STEP_RETRY,
    name=TRUST_TABLE,
    deps=[*FACT_ASSETS, cc_jobs],
    check_specs=[dg.AssetCheckSpec(rule.id, asset=TRUST_TABLE, description=(
        f"v{rule.version}: {rule.compared} / {rule.reference} in [{rule.low}, {rule.high}] "
        "wherever both exist (joulehouse/accounting/trust.py)")) for rule in trust.RULES],
    pool=DERIVED_POOL,
    group_name=GROUP,
    automation_condition=DERIVED_AUTOMATION,
    kinds={"pandas", "parquet"},
    description=("Energy facts checked across methods and sources where they overlap (GPU "
                 "counter vs integrated power, external meter vs GPU, SmartWatts vs RAPL, "
                 "GEOPM vs ClusterCockpit): rule, version, entity, window, both figures, "
                 "their ratio and the verdict; one WARN check per rule."),
)
def trust_checks(warehouse: Warehouse) -> Iterator:
    tables = warehouse.tables()
    if not tables.files(FACTS_TABLE):
        raise verdict("no energy_facts stored yet: materialize a source first")
    updated = kept.update_trust(tables)
    compacted = compaction.compact_if_due(tables, [TRUST_TABLE])
    summary, failed = kept.trust_summary(tables)
    yield dg.MaterializeResult(metadata={
        **_logged_metadata(tables, TRUST_TABLE, TRUST_SCHEMA)[0], **_recomputed(updated),
        **_compacted(compacted, TRUST_TABLE),
        "rules": _table(summary)})
    for rule in summary.itertuples():
        failing = failed[failed["rule"] == rule.rule] if len(failed) else failed
        yield dg.AssetCheckResult(
            check_name=rule.rule, passed=not rule.failed, severity=dg.AssetCheckSeverity.WARN,
            description=(f"{rule.failed} of {rule.pairs} pairs outside the bounds"
                         if rule.failed else f"{rule.pairs} pairs within the bounds"
                         if rule.pairs else "no overlapping figures to compare"),
            metadata={"version": dg.MetadataValue.int(int(rule.version)),
                      "pairs": dg.MetadataValue.int(int(rule.pairs)),
                      "failed": dg.MetadataValue.int(int(rule.failed)),
                      **({"failing": _table(failing[["entity", "window_start", "reference_j",
                                                     "compared_j", "ratio"]]
                                            .head(MISSING_SHOWN))} if rule.failed else {})})


def _recomputed(updated: kept.Updated) -> dict:
    """The metadata ``recomputed``: why the table was recomputed whole (None: only the keys
    that changed were), the keys (source, entity) recomputed and the rows written."""
    return {"recomputed": dg.MetadataValue.json({
        "whole": updated.whole or None, "keys": updated.keys, "rows_written": updated.rows,
        **({"weeks": updated.weeks} if isinstance(updated, kept.WasteUpdated) else {})})}


WASTE_TABLE = "waste"
WASTE_WEEKLY_TABLE = "waste_weekly"
#: Users (and weeks) shown in the waste plot: the most idle energy first.
WASTE_SHOWN = 8
_WASTE_INPUTS = [*FACT_ASSETS, cc_jobs, gpu_repetition_energy, gpu_validated_frames,
                 cc_block_tables]
waste_table = dg.AssetSpec(
    WASTE_TABLE, deps=_WASTE_INPUTS, **_DERIVED_TABLE,
    description=("Energy spent idle per GPU repetition (utilisation below the threshold, "
                 "default 10 %) and per ClusterCockpit job (CPU use below the threshold): "
                 "each row names its rule, version and threshold "
                 "(joulehouse/accounting/waste.py)."))
waste_weekly = dg.AssetSpec(
    WASTE_WEEKLY_TABLE, deps=[waste_table], **_DERIVED_TABLE,
    description="Per UTC week and user: energy, GPU-hours, energy spent idle and its share, "
                "ranked by idle energy (1 = most).")


def waste_plot(weekly: pd.DataFrame) -> str:
    """Markdown: idle energy (kWh) per week, stacked by user (the WASTE_SHOWN users with the
    most idle energy; '' shown as '(no user)')."""
    top = (weekly.groupby("user")["idle_energy_j"].sum().nlargest(WASTE_SHOWN).index)
    shown = weekly[weekly["user"].isin(top)]
    per_week = (shown.pivot_table(index="week", columns="user", values="idle_energy_j",
                                  aggfunc="sum").fillna(0.0) / J_PER_KWH)
    weeks = [week.strftime("%Y-%m-%d") for week in per_week.index]
    series = [Series(user or "(no user)", weeks, per_week[user].tolist()) for user in per_week]
    png = bars_png(weeks, series, title="energy spent idle per week", y_label="kWh")
    return markdown_image(png, "idle energy per week")


@dg.multi_asset(
    retry_policy=STEP_RETRY,
    name="waste_step",
    specs=[waste_table, waste_weekly],
    pool=DERIVED_POOL,
    description="The waste tables in one step; see joulehouse/accounting/waste.py.",
)
def waste_step(context, warehouse: Warehouse) -> Iterator:  # context: see accounting()
    tables = warehouse.tables()
    if not tables.files(FACTS_TABLE):
        raise verdict("no energy_facts stored yet: materialize a source first")
    updated = kept.update_waste(tables)
    compacted = compaction.compact_if_due(tables, [WASTE_TABLE, WASTE_WEEKLY_TABLE])
    weekly = tables.read_table(WASTE_WEEKLY_TABLE)  # read whole: per week and user, small
    # GPU repetitions gpu_idle could not judge (of those recomputed): no utilisation
    # readings, or no frame stored
    unjudged = list(updated.unjudged)
    yield dg.MaterializeResult(asset_key=waste_table.key, metadata={
        **_logged_metadata(tables, WASTE_TABLE, WASTE_SCHEMA)[0], **_recomputed(updated),
        **_compacted(compacted, WASTE_TABLE),
        "flagged": dg.MetadataValue.int(entry_table.count(tables, WASTE_TABLE,
                                                          {"flagged": True})),
        "gpu_repetitions_not_judged_in_this_run": dg.MetadataValue.int(len(unjudged)),
        **({"not_judged_in_this_run": dg.MetadataValue.json(
            {"reason": "gpu-power has no utilisation readings (or no frame is stored)",
             "repetitions": unjudged[:MISSING_SHOWN]})} if unjudged else {}),
        "idle_energy_kwh": dg.MetadataValue.float(
            float(weekly["idle_energy_j"].sum()) / J_PER_KWH if len(weekly) else 0.0),
        "rules": dg.MetadataValue.json({r.id: {"version": r.version, "threshold": r.threshold}
                                        for r in (waste.GPU_IDLE, waste.CPU_LOW_LOAD)}),
    })
    yield dg.MaterializeResult(asset_key=waste_weekly.key, metadata={
        **table_metadata(weekly, WASTE_WEEKLY_SCHEMA), **_recomputed(updated),
        **_compacted(compacted, WASTE_WEEKLY_TABLE),
        **({**plot_metadata(context, waste_weekly.key, "idle_energy_per_week",
                            partial(waste_plot, weekly), carry=True),
            "ranking": _table(weekly.sort_values(["week", "rank"], ascending=[False, True])
                              .head(MISSING_SHOWN))} if len(weekly) else {}),
    })


QUALITY_TABLE = "fact_quality"


@dg.asset(
    retry_policy=STEP_RETRY,
    name=QUALITY_TABLE,
    deps=[*FACT_ASSETS, cc_job_energy, cc_block_tables, powerapi_window_energy],
    pool=DERIVED_POOL,
    group_name=GROUP,
    automation_condition=DERIVED_AUTOMATION,
    kinds={"pandas", "parquet"},
    description=("How each energy fact was measured: method, component, the median step "
                 "between its readings and the share of its window they cover, from its "
                 "source's tables (a GPU repetition's from gpu_repetition_figures, which "
                 "energy_facts/gpu writes; NaN where the source does not say; "
                 "joulehouse/accounting/quality.py)."),
)
def fact_quality(warehouse: Warehouse) -> dg.MaterializeResult:
    tables = warehouse.tables()
    if not tables.files(FACTS_TABLE):
        raise verdict("no energy_facts stored yet: materialize a source first")
    updated = kept.update_quality(tables)
    compacted = compaction.compact_if_due(tables, [QUALITY_TABLE])
    known, least = kept.quality_summary(tables)
    return dg.MaterializeResult(metadata={
        **_logged_metadata(tables, QUALITY_TABLE, QUALITY_SCHEMA)[0], **_recomputed(updated),
        **_compacted(compacted, QUALITY_TABLE),
        "known_per_source": _table(known),
        "least_covered": dg.MetadataValue.float(least),
    })


ACCOUNTING_ASSETS = [carbon_intensity, tariffs, accounting, trust_checks, waste_step,
                     fact_quality]
