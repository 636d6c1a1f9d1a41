"""GEOPM report assets: one dynamic partition per landed report, the tables over all reports.

Partition key ``<landing name>/<file name>`` (``resources/geopm.py``), registered
by the landing sensor (``sensors/geopm.py``). ``geopm_pipeline`` is ONE
subsettable step over every partition of a run, for the reason
``assets/pipeline.py`` gives: a bad report fails only itself. In order:

1. ``geopm_validated_frames``: each report read (any shape) and its five
   frames stored per partition; a report that fails is not stored (what was
   stored before stays) and its ``pandera_valid`` result names file and line;
2. ``geopm_host_energy``: per report, host and region (and totals section)
   energy, for the reports that passed;
3. ``geopm_trials``: each report that passed as one TAUdb trial (its own
   transaction, replacing the report's trial), from its stored frames; a
   report whose landing fingerprint and ``timezone`` setting equal its stored
   trial's (their digest) is not loaded again; a report the mapping refuses fails the check ``loads`` of its
   partition and leaves its earlier trial;
4. the tables over every registered report whose energy is stored
   (``geopm_region_energy``, ``geopm_report_energy``, kept per report:
   ``joulehouse.geopm.tables``; a run rewrites its reports and those sharing their
   content) and this source's rows of ``energy_facts`` (``energy_facts/geopm``, of
   the same reports), from the stored frames; a report given twice (the
   same content landed under two names) counts once, under its first key
   (``reports_given_twice`` in their metadata, among the reports the run looked at);
5. then, if any partition failed, the step fails (``assets/reporting.py``).

The per-report work of 1. and 2., and the building of 3.'s trials (a few ahead
of their loads, which stay in the step's process), runs in the ``workers``
resource's processes (``resources/workers.py``).
"""

from collections.abc import Iterator
from concurrent.futures import Executor
from functools import cache
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pandas as pd

from assets.facts import write_facts, write_owned_facts
from assets.gpu import COMPUTED_CHECK, TABLE_AUTOMATION, TABLES_POOL, VALID_CHECK
from assets.reporting import (
    STEP_RETRY,
    PartitionBatch,
    Stored,
    backfills,
    failure,
    frames_then_energy,
    partition_check_spec,
    partition_count,
    run_partitions,
    table_metadata,
    verdict,
)
from assets.taudb import GROUP as TAUDB_GROUP
from assets.taudb import LOADS_CHECK, load_partition_trials
from joulehouse.digest import digest_pairs
from joulehouse.entry_sync import Written
from joulehouse.errors import InputError
from joulehouse.facts import ENERGY_FACTS_COLUMNS
from joulehouse.geopm import energy, schemas
from joulehouse.geopm import tables as geopm_tables
from joulehouse.geopm.layout import identify_report
from joulehouse.geopm.plots import COMPONENTS, kj_column, region_energy_kj, region_energy_png
from joulehouse.geopm.readers import Report, read_report
from joulehouse.geopm.store import (
    FRAME_SCHEMAS,
    load_frames,
    load_report,
    save_report,
    stored_frame_keys,
)
from joulehouse.landing import read_landed_item
from joulehouse.leftout import store_left_out
from joulehouse.plots import markdown_image
from joulehouse.taudb.mapping.geopm import report_trial
from joulehouse.taudb.model import TrialData
from joulehouse.warehouse import Warehouse as Tables
from resources import GeopmReportSource, StepWorkers, TaudbResource, Warehouse

GROUP = "geopm"
HOST_TABLE = "geopm_host_energy"
REGION_TABLE = "geopm_region_energy"
REPORT_TABLE = "geopm_report_energy"
FACTS_TABLE = "energy_facts"
TAGS = {"source": "geopm"}

geopm_reports = dg.DynamicPartitionsDefinition(name="geopm_reports")

geopm_report_files = dg.AssetSpec(
    "geopm_report_files",
    description=(
        "GEOPM report files as GEOPM wrote them at the end of each job (1.x text, 2.x/3.x "
        "YAML, or geopmsession reports). Found by the GEOPM landing sensor once the file "
        "did not change for the quiet period."
    ),
    group_name=GROUP,
    partitions_def=geopm_reports,
    kinds={"yaml"},
    tags=TAGS,
)

#: What the per-report assets share: no materialization for a partition that failed.
PER_REPORT = {"group_name": GROUP, "partitions_def": geopm_reports, "skippable": True,
              "tags": TAGS}
#: What the tables over all reports share.
WHOLE_TABLE = {"automation_condition": TABLE_AUTOMATION, "skippable": True, "tags": TAGS,
               "kinds": {"pandas", "parquet"}}

geopm_validated_frames = dg.AssetSpec(
    "geopm_validated_frames",
    description=(
        "A report read into its frames (header, totals and regions per host, other fields "
        "as signals, geopmsession statistics), SI units and UTC, validated with pandera; "
        "one Parquet partition per frame under geopm_validated_frames/. A report that "
        "fails fails the check 'pandera_valid' of its partition, naming file and line; "
        "what was stored for it before stays, the other reports of the run go on."
    ),
    **PER_REPORT,
    deps=[geopm_report_files],
    kinds={"pandas", "parquet", "pandera"},
)

geopm_host_energy = dg.AssetSpec(
    HOST_TABLE,
    description=(
        "Energy per report, host and region, and per host and totals section (application, "
        "epoch, unmarked): times and energies as the report wrote them, power recomputed as "
        "package energy / sync-runtime. One Parquet partition per report; its metadata has "
        "the hosts, regions, total energy and a plot of energy per region."
    ),
    **PER_REPORT,
    deps=[geopm_validated_frames],
    automation_condition=dg.AutomationCondition.eager(),
    kinds={"pandas", "parquet"},
)

geopm_trials = dg.AssetSpec(
    "geopm_trials",
    description=(
        "One TAUdb trial per report (threads = hosts, timers = regions and the totals "
        "sections, metrics = time and energy fields, user events = power, frequency and "
        "signals; a geopmsession report: one timer per host, its signals' statistics; "
        "docs/taudb-mapping.md), built from the stored frames and loaded in one transaction "
        "that replaces the report's trial. A report whose file did not change since its "
        "trial was loaded is not loaded again. A report that fails fails the check 'loads' "
        "of its partition and keeps its earlier trial."
    ),
    group_name=TAUDB_GROUP,
    partitions_def=geopm_reports,
    skippable=True,
    tags=TAGS,
    deps=[geopm_validated_frames],
    automation_condition=dg.AutomationCondition.eager(),
    kinds={"taudb"},
)

geopm_region_energy = dg.AssetSpec(
    REGION_TABLE,
    description=(
        "Per report and region across its hosts: energies and times summed (J, "
        "host-seconds), power and frequency derived from the sums (never a mean of powers)."
    ),
    group_name=GROUP,
    deps=[geopm_host_energy],
    **WHOLE_TABLE,
)

geopm_report_energy = dg.AssetSpec(
    REPORT_TABLE,
    description=(
        "Per report and totals section (application, epoch, unmarked) across its hosts, "
        "summed as geopm_region_energy."
    ),
    group_name=GROUP,
    deps=[geopm_host_energy],
    **WHOLE_TABLE,
)

geopm_energy_facts = dg.AssetSpec(
    dg.AssetKey([FACTS_TABLE, energy.FACTS_SOURCE]),
    description=(
        "This source's rows of the cross-source energy table (energy_facts, kept per "
        "entry: only the reports whose facts changed are written): per report and host, the "
        "Application Totals' package and DRAM energy (method "
        "rapl) and GPU energy (counter), the window from the report's Start Time over the "
        "application's runtime."
    ),
    group_name=FACTS_TABLE,
    deps=[geopm_host_energy],
    **WHOLE_TABLE,
)

VALID_SPEC = partition_check_spec(
    geopm_validated_frames.key, VALID_CHECK, geopm_reports,
    "The report parses and its frames pass their pandera schemas (one result per "
    "partition; a failed one names file and line, and the report's energy in the same run "
    "is skipped).")
COMPUTED_SPEC = partition_check_spec(
    geopm_host_energy.key, COMPUTED_CHECK, geopm_reports,
    "The report's host energy was computed and stored (one result per partition; not "
    "computed when its validated frames failed in the same run).")
LOADS_SPEC = partition_check_spec(
    geopm_trials.key, LOADS_CHECK, geopm_reports,
    "The report was loaded as a TAUdb trial, or its trial is current (one result per "
    "partition; a failed one names file and line; not loaded when its frames failed in the "
    "same run).")

GEOPM_TABLES = [geopm_region_energy, geopm_report_energy, geopm_energy_facts]


def _region_plot(rollup: pd.DataFrame, key: str) -> str:
    """Markdown showing the plot of energy per region of one report (a PNG data URI)."""
    return markdown_image(region_energy_png(rollup, key), f"energy per region of {key}")


def _region_table(rollup: pd.DataFrame) -> dg.TableMetadataValue:
    """The plotted energy per region as a table value (Dagster 1.13 shows tables inline,
    while a Markdown image opens from a link)."""
    drawn = region_energy_kj(rollup)
    columns = [dg.TableColumn("region", "string"),
               *(dg.TableColumn(kj_column(column), "float", description=f"{label} energy "
                                "summed over hosts (kJ)") for column, label in COMPONENTS)]
    records = [dg.TableRecord({"region": str(region), **{
        name: None if pd.isna(value) else float(value) for name, value in row.items()}})
               for region, row in drawn.iterrows()]
    return dg.MetadataValue.table(records, dg.TableSchema(columns=columns))


def _report_metadata(report: Report) -> dict[str, Any]:
    """What a report's host-energy partition shows besides its rows: hosts, regions, total
    energy (J) and the energy per region (a table, and a plot)."""
    rollup = energy.region_rollup(report)
    return {
        "hosts": dg.MetadataValue.json(report.totals["host"].drop_duplicates().tolist()),
        "host_count": dg.MetadataValue.int(int(report.header["host_count"].iloc[0])),
        "region_count": dg.MetadataValue.int(int(report.header["region_count"].iloc[0])),
        "total_energy_j": dg.MetadataValue.float(energy.total_energy_j(report)),
        "regions": _region_table(rollup),
        "energy_per_region": dg.MetadataValue.md(_region_plot(rollup, report.report)),
    }


def store_report(tables: Tables, key: str, path: Path, timezone: str) -> Stored:
    """Read, validate and store one report's frames, and what the report leaves out of the
    facts (``energy.left_out``: table ``left_out``, partition ``geopm/read/<key>``, in place
    of the earlier; the check warns; a worker's task: picklable arguments, no Dagster)."""
    report = read_report(path, report=key, timezone=timezone)
    records = energy.left_out(report, path)
    frames = save_report(tables, key, report)
    store_left_out(tables, energy.FACTS_SOURCE, "read", key, records,
                   now=pd.Timestamp.now(tz="UTC"))
    return Stored.of(frames, records)


def store_host_energy(tables: Tables, key: str, path: Path) -> Stored:
    """Compute and store one report's host energy from its stored frames, with what its
    partition shows (a worker's task)."""
    report = load_report(tables, key, path, names=["totals", "regions"])
    table = energy.host_energy(report)
    tables.write_partition(HOST_TABLE, key, table)
    return Stored.of({HOST_TABLE: table}, **_report_metadata(report))


def validate_frames(context: dg.AssetExecutionContext, source: GeopmReportSource,
                    tables: Tables, executor: Executor) -> PartitionBatch:
    """Read, validate and store every report of the run, in ``executor``."""
    return PartitionBatch.run(
        context, store_report, FRAME_SCHEMAS.get, executor=executor,
        arguments=lambda key: (tables, key, source.resolve(key), source.timezone))


def compute_energy(context: dg.AssetExecutionContext, source: GeopmReportSource,
                   tables: Tables, skip: dict[str, str], executor: Executor) -> PartitionBatch:
    """Compute and store the host energy of every report of the run but those in ``skip``,
    from its stored frames, in ``executor``."""
    return PartitionBatch.run(
        context, store_host_energy, lambda name: schemas.HOST_ENERGY_SCHEMA, skip=skip,
        executor=executor, arguments=lambda key: (tables, key, source.resolve(key)))


def build_trial(tables: Tables, key: str, path: Path, fingerprint: str) -> TrialData:
    """The TAUdb trial of one report from its stored frames (a worker's task: picklable
    arguments, no Dagster)."""
    return report_trial(load_report(tables, key, path), fingerprint)


def load_trials(context: dg.AssetExecutionContext, source: GeopmReportSource, tables: Tables,
                taudb: TaudbResource, skip: dict[str, str], executor: Executor) -> PartitionBatch:
    """Load the trial of every report of the run but those in ``skip`` (and those with no
    stored frames), built from its stored frames in ``executor``; fingerprint: a digest of
    the report file's landing fingerprint (name, size, mtime, as the sensor sees it) and of
    the ``timezone`` its naive timestamps were read in, so changing either reloads the
    trial."""
    stored = set(stored_frame_keys(tables))
    skip = skip | {key: "no validated frames stored" for key in context.partition_keys
                   if key not in stored and key not in skip}

    @cache  # asked again for the arguments of the report's build
    def known(key: str) -> tuple[str, str]:
        path = source.resolve(key)
        item = read_landed_item(path, key, identify_report)
        if item is None:
            raise InputError(path, "no GEOPM report here any more")
        return str(path.resolve()), digest_pairs({"report": item.fingerprint,
                                                   "timezone": source.timezone})

    with taudb.open() as db:
        return load_partition_trials(
            context, db, build_trial,
            lambda key: (tables, key, source.resolve(key), known(key)[1]), executor,
            known=known, skip=skip)


def stored_report_keys(context: dg.AssetExecutionContext, tables: Tables) -> list[str]:
    """The registered ``geopm_reports`` partitions whose host energy is stored, in table
    order (a report whose latest version failed keeps its last good tables)."""
    registered = set(context.instance.get_dynamic_partitions(geopm_reports.name))
    return [key for key in tables.partition_keys(HOST_TABLE) if key in registered]


def whole_tables(context: dg.AssetExecutionContext, tables: Tables, selected: set[dg.AssetKey],
                 every: list[str] | None) -> Iterator[dg.MaterializeResult]:
    """Keep the tables over every report per entry (``joulehouse.geopm.tables``): a run over
    reports rewrites the rows of its reports and of those sharing their content; a run
    without partitions (``every``: every stored report) brings the tables in line with
    every stored report, writing what differs. A report given twice (same content under
    two keys) counts once, under its first key. The region and report tables are written
    together whichever is selected; the facts per entry (``assets/facts.py``). Figures
    named ``run_*`` are of the reports the write looked at (every stored one, in a run
    without partitions), not of the whole table."""
    facts: list[dg.MaterializeResult] = []  # the facts' write, in the tables' (the last try's)

    def write_facts_of(landed: geopm_tables.Landed) -> None:
        if geopm_energy_facts.key in selected:
            facts.append(facts_result(context, tables, landed, every is not None))

    if every is not None:
        landed = geopm_tables.rebuild(tables, every, then=write_facts_of)
    else:
        keys = context.partition_keys
        landed = geopm_tables.land(tables, keys, [
            key for key in keys if tables.has_partition(HOST_TABLE, key)], then=write_facts_of)
    summary = _summary(landed)
    if geopm_region_energy.key in selected:
        table = landed.regions_rows
        yield dg.MaterializeResult(asset_key=geopm_region_energy.key, metadata={
            **table_metadata(table, schemas.REGION_ROLLUP_SCHEMA), **summary,
            **_written(landed.regions),
            "dagster/row_count": dg.MetadataValue.int(geopm_tables.REGIONS.count(tables)),
            "run_regions": dg.MetadataValue.int(table["region"].nunique())})
    if geopm_report_energy.key in selected:
        table = landed.sections_rows
        application = table[table["section"] == "application"]
        yield dg.MaterializeResult(asset_key=geopm_report_energy.key, metadata={
            **table_metadata(table, schemas.REPORT_ROLLUP_SCHEMA), **summary,
            **_written(landed.reports),
            "dagster/row_count": dg.MetadataValue.int(geopm_tables.REPORTS.count(tables)),
            "run_total_energy_j": dg.MetadataValue.float(float(np.nansum(
                application[[column for column, _, _ in energy.FACT_COMPONENTS]].to_numpy())))})
    yield from facts[-1:]


def _summary(landed: geopm_tables.Landed) -> dict[str, Any]:
    return {"reports": dg.MetadataValue.int(len(landed.counted)),
            "reports_given_twice": dg.MetadataValue.int(len(landed.twice)),
            "given_twice": dg.MetadataValue.json(landed.twice)}


def facts_result(context: dg.AssetExecutionContext, tables: Tables,
                 landed: geopm_tables.Landed, every: bool) -> dg.MaterializeResult:
    """Write the facts of what the tables' write ``landed`` (before the digests, so that a
    stop between them leaves the next run the same groups to write): a report given twice
    counts once, so the facts of every report whose rows the write replaced (the run's
    and those sharing their content); in a run without partitions (``every``) every fact
    is compared (``assets/facts.py``)."""
    counted = landed.counted
    rows = (energy.facts_rows(load_frames(tables, "header", counted),
                              load_frames(tables, "totals", counted)) if counted
            else pd.DataFrame(columns=ENERGY_FACTS_COLUMNS))
    metadata = {**_summary(landed), "run_total_energy_j": dg.MetadataValue.float(
        float(rows["energy_j"].sum()))}
    if every:
        return write_facts(context, tables, geopm_energy_facts.key, energy.FACTS_SOURCE,
                           lambda: rows, metadata=metadata)
    return write_owned_facts(
        context, tables, geopm_energy_facts.key, energy.FACTS_SOURCE, rows,
        landed.owners, energy.FACTS_OWNERSHIP,
        f"the facts of the run's {len(context.partition_keys)} report(s) and of "
        "those sharing their content", metadata)


def _written(written: Written) -> dict[str, Any]:
    """What a table's write did: reports whose rows were written, removed, rows written."""
    return {"reports_written": dg.MetadataValue.int(written.entities),
            "reports_removed": dg.MetadataValue.int(written.removed),
            "rows_written": dg.MetadataValue.int(written.rows)}


with backfills() as single_run:
    @dg.multi_asset(
        retry_policy=STEP_RETRY,
        name="geopm_pipeline",
        specs=[geopm_validated_frames, geopm_host_energy, geopm_trials, *GEOPM_TABLES],
        check_specs=[VALID_SPEC, COMPUTED_SPEC, LOADS_SPEC],
        can_subset=True,
        backfill_policy=single_run,
        pool=TABLES_POOL,
        description="The GEOPM pipeline in one step; see assets/geopm.py.",
    )
    def geopm_pipeline(context: dg.AssetExecutionContext, geopm_source: GeopmReportSource,
                       warehouse: Warehouse, taudb: TaudbResource,
                       workers: StepWorkers) -> Iterator:
        selected = context.selected_asset_keys
        tables = warehouse.tables()
        with workers.pool(partition_count(context)) as executor:
            failed = yield from frames_then_energy(
                context, lambda: validate_frames(context, geopm_source, tables, executor),
                VALID_SPEC,
                lambda skip: compute_energy(context, geopm_source, tables, skip, executor),
                COMPUTED_SPEC)
            if geopm_trials.key in selected:
                skip = {key: "an earlier asset of its report failed in this run"
                        for key in failed}
                trials = load_trials(context, geopm_source, tables, taudb, skip, executor)
                yield from trials.results(context, LOADS_SPEC)
                failed = trials.errors() | failed  # a report's first error stays the one shown
        if selected & {spec.key for spec in GEOPM_TABLES}:
            every = (stored_report_keys(context, tables) if run_partitions(context) is None
                     or not geopm_tables.is_kept(tables) else None)
            if every == [] and not failed:
                raise verdict("no GEOPM report stored yet: materialize geopm_host_energy")
            if every != []:
                yield from whole_tables(context, tables, selected, every)
        if failed:
            raise failure(len(context.partition_keys), failed)


GEOPM_ASSETS = [geopm_report_files, geopm_pipeline]
