"""GEOPM report assets: one dynamic partition per landing folder and UTC day, the tables
over all reports.

Partition key ``<landing name>/<YYYY-MM-DD>`` (``geopm_days``), the UTC day of each
report's own start (``joulehouse.geopm.days``): 1,000 reports a day are 3,650 partitions
in a decade, not 3.65 M (docs/ARCHITECTURE.md, "Partitions over a decade"). The landing
sensor (``sensors/geopm.py``) registers the days holding new or changed reports and asks
for ONE run over them whose run config names the reports handed out per day
(:class:`GeopmHandOut`): the run processes those alone, so a landing of k reports costs
work in proportion to k. A day of the run that names no report (a backfill, a
materialization from the UI) is read whole: every report of its landing folder whose day
it is. Everything stored stays keyed per report (``<landing name>/<file name>``): frames,
host energy, trials, the tables' rows and the facts, so a day's run replaces only its
reports'. ``geopm_pipeline`` is ONE subsettable step over every report of a run, for the
reason ``assets/pipeline.py`` gives. In order:

1. ``geopm_validated_frames``: each report read (any shape) and its five frames stored;
   a report that fails is not stored (what was stored for it before stays) and fails its
   day, whose ``pandera_valid`` result names its file and line (``assets/blocks.py``);
   the day's other reports go on;
2. ``geopm_host_energy``: per report, host and region (and totals section) energy, for
   the reports that passed; each day's plot of energy per region drawn at most every
   ``$JOULEHOUSE_PLOT_EVERY_S`` (one decision for the run's days: ``assets/plot_cadence.py``);
3. ``geopm_trials``: each report that passed as one TAUdb trial (replacing the report's
   trial), built from its stored frames, a day's trials written in one transaction; a
   report whose landing fingerprint and ``timezone`` setting equal its stored trial's
   (their digest) is not loaded again; a report the mapping refuses fails the check
   ``loads`` of its day and keeps its earlier trial;
4. the tables over every stored report (``geopm_region_energy``, ``geopm_report_energy``,
   kept per report: ``joulehouse.geopm.tables``; a run rewrites its reports and those
   sharing their content) and this source's rows of ``energy_facts``
   (``energy_facts/geopm``, of the same reports), from the stored frames; a report given
   twice (the same content landed under two names) counts once, under its first key
   (``reports_given_twice`` in their metadata, among the reports the run looked at);
5. then, if any day failed, the step fails (``assets/reporting.py``).

The per-report work of 1. and 2., and the building of 3.'s trials, runs in the
``workers`` resource's processes (``resources/workers.py``).
"""

from collections.abc import Collection, Generator, Iterator
from concurrent.futures import Executor
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import dagster as dg
import numpy as np
import pandas as pd

from assets.blocks import (
    DayHandOut,
    DayReports,
    Outcome,
    RunDays,
    block_outcomes,
    hand_out_field,
    run_entries,
    run_entries_both,
)
from assets.facts import write_facts, write_owned_facts
from assets.gpu import COMPUTED_CHECK, TABLE_AUTOMATION, VALID_CHECK
from assets.plot_cadence import PlotTurn, plot_turn
from assets.pools import tables_pool
from assets.reporting import (
    STEP_RETRY,
    BothOutcome,
    Stored,
    backfills,
    failure,
    partition_check_spec,
    partitions_per_task,
    returned,
    run_partitions,
    table_metadata,
    verdict,
)
from assets.taudb import GROUP as TAUDB_GROUP
from assets.taudb import LOADS_CHECK, TrialLoads, trials_metadata
from joulehouse.digest import digest_pairs
from joulehouse.entry_sync import Written
from joulehouse.errors import InputError
from joulehouse.facts import ENERGY_FACTS_COLUMNS
from joulehouse.geopm import energy, schemas
from joulehouse.geopm import tables as geopm_tables
from joulehouse.geopm.days import start_day
from joulehouse.geopm.layout import identify_report
from joulehouse.geopm.plots import COMPONENTS, kj_column, region_energy_kj, region_energy_png
from joulehouse.geopm.readers import Report, read_report
from joulehouse.geopm.store import FRAME_SCHEMAS, load_frames, load_report, save_report
from joulehouse.geopm.store import TABLE as FRAMES_TABLE
from joulehouse.landing import read_landed_item, still_landed
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

geopm_days = dg.DynamicPartitionsDefinition(name="geopm_days")


class GeopmHandOut(DayHandOut):
    """The reports the landing sensor handed out, by day partition (``DayHandOut``)."""

    OP: ClassVar[str] = "geopm_pipeline"
    reports: dict[str, list[str]] = hand_out_field(
        "the keys (<landing name>/<file name>) of the reports")


geopm_report_files = dg.AssetSpec(
    "geopm_report_files",
    description=(
        "GEOPM report files as GEOPM wrote them at the end of each job (1.x text, 2.x/3.x "
        "YAML, or geopmsession reports), one partition per landing folder and UTC day of "
        "the reports' start. Found by the GEOPM landing sensor once a file did not change "
        "for the quiet period; one materialization per day per tick that handed out reports "
        "of it (metadata 'reports': their keys and fingerprints; data version: a digest of "
        "them)."
    ),
    group_name=GROUP,
    partitions_def=geopm_days,
    kinds={"yaml"},
    tags=TAGS,
)

#: What the per-day assets share: no materialization for a day that failed.
PER_DAY = {"group_name": GROUP, "partitions_def": geopm_days, "skippable": True,
           "tags": TAGS}
#: What the tables over all reports share.
WHOLE_TABLE = {"automation_condition": TABLE_AUTOMATION, "skippable": True, "tags": TAGS,
               "kinds": {"pandas", "parquet"}}

geopm_validated_frames = dg.AssetSpec(
    "geopm_validated_frames",
    description=(
        "A report read into its frames (header, totals and regions per host, other fields "
        "as signals, geopmsession statistics), SI units and UTC, validated with pandera; "
        "one Parquet partition per report and frame under geopm_validated_frames/. A "
        "report that fails fails its day's check 'pandera_valid', naming file and line; "
        "what was stored for it before stays, the other reports of the run go on."
    ),
    **PER_DAY,
    deps=[geopm_report_files],
    kinds={"pandas", "parquet", "pandera"},
)

geopm_host_energy = dg.AssetSpec(
    HOST_TABLE,
    description=(
        "Energy per report, host and region, and per host and totals section (application, "
        "epoch, unmarked): times and energies as the report wrote them, power recomputed as "
        "package energy / sync-runtime. One Parquet partition per report; a day's metadata "
        "has its reports' hosts, regions and total energy, and a plot of energy per region."
    ),
    **PER_DAY,
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
        "trial was loaded is not loaded again. A report that fails fails its day's check "
        "'loads' and keeps its earlier trial."
    ),
    group_name=TAUDB_GROUP,
    partitions_def=geopm_days,
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
    geopm_validated_frames.key, VALID_CHECK, geopm_days,
    "Every report of the day processed in the run parses and its frames pass their "
    "pandera schemas (one result per day; a failed one names each failed report, the "
    "first with file and line; their energy in the same run is skipped).")
COMPUTED_SPEC = partition_check_spec(
    geopm_host_energy.key, COMPUTED_CHECK, geopm_days,
    "The host energy of every report of the day processed in the run was computed and "
    "stored (one result per day; not computed when a report's validated frames failed in "
    "the same run).")
LOADS_SPEC = partition_check_spec(
    geopm_trials.key, LOADS_CHECK, geopm_days,
    "Every report of the day processed in the run was loaded as a TAUdb trial, or its "
    "trial is current (one result per day; a failed one names the report, file and line; "
    "not loaded when its frames failed in the same run).")

GEOPM_TABLES = [geopm_region_energy, geopm_report_energy, geopm_energy_facts]


#: Reports listed, with their energy, in a day's host-energy metadata.
REPORTS_SHOWN = 200


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


def _report_table(figures: dict[str, dict[str, Any]]) -> dg.TableMetadataValue:
    """Per report of a day (the first :data:`REPORTS_SHOWN`): hosts, regions and the total
    energy of its Application Totals (kJ)."""
    columns = [dg.TableColumn("report", "string"), dg.TableColumn("hosts", "int"),
               dg.TableColumn("regions", "int"),
               dg.TableColumn("total_energy_kj", "float", description="package + DRAM + GPU "
                              "energy of the Application Totals over all hosts (kJ)")]
    records = [dg.TableRecord({"report": key, "hosts": one["host_count"],
                               "regions": one["region_count"],
                               "total_energy_kj": one["total_energy_j"] / 1e3})
               for key, one in sorted(figures.items())[:REPORTS_SHOWN]]
    return dg.MetadataValue.table(records, dg.TableSchema(columns=columns))


def report_figures(report: Report) -> dict[str, Any]:
    """What a day's host-energy partition shows of one report (picklable, from a worker):
    hosts, regions, total energy (J) and its region roll-up."""
    return {"hosts": report.totals["host"].drop_duplicates().tolist(),
            "host_count": int(report.header["host_count"].iloc[0]),
            "region_count": int(report.header["region_count"].iloc[0]),
            "total_energy_j": energy.total_energy_j(report),
            "rollup": energy.region_rollup(report)}


#: The per-day plot of a day's host-energy partition, drawn at most every
#: ``$JOULEHOUSE_PLOT_EVERY_S`` (``assets/plot_cadence.py``).
REGION_PLOT = "energy_per_region"


def day_energy_metadata(day: str, done: dict[str, Stored], plot: PlotTurn) -> dict[str, Any]:
    """What a day's host-energy partition shows besides its rows, of the reports the run
    computed in it: how many, their hosts, total energy (J), energy per report, and energy
    per region across them (a table, and :data:`REGION_PLOT` if the run draws it, ``plot``,
    else when it was last drawn; neither for a day with no report left)."""
    figures = {key: stored.metadata for key, stored in done.items()}
    rollup = (pd.concat([one["rollup"] for one in figures.values()], ignore_index=True)
              if figures else pd.DataFrame())
    metadata = {
        "reports": dg.MetadataValue.int(len(figures)),
        "hosts": dg.MetadataValue.json(sorted({host for one in figures.values()
                                               for host in one["hosts"]})),
        "total_energy_j": dg.MetadataValue.float(
            float(sum(one["total_energy_j"] for one in figures.values()))),
        "energy_per_report": _report_table(figures),
    }
    if len(rollup):
        metadata |= {"regions": _region_table(rollup), **plot.metadata(
            lambda: markdown_image(region_energy_png(rollup, day), f"energy per region of {day}"),
            carry=False)}
    return metadata


def store_report(tables: Tables, key: str, path: Path, timezone: str) -> Stored:
    """Read, validate and store one report's frames, and what the report leaves out of the
    facts (``energy.left_out``: table ``left_out``, partition ``geopm/read/<key>``, in place
    of the earlier; the check warns; a worker's task: picklable arguments, no Dagster); a
    report gone since it was handed out fails with its path (another OSError, e.g. EIO or
    ESTALE on NFS, propagates: the step's retry may mend it, a data error would not)."""
    return _read_and_store(tables, key, path, timezone)[1]


def _read_and_store(tables: Tables, key: str, path: Path, timezone: str
                    ) -> tuple[Report, Stored]:
    """:func:`store_report`, with the report read."""
    try:
        report = read_report(path, report=key, timezone=timezone)
    except (FileNotFoundError, NotADirectoryError) as err:
        raise InputError(path, "no GEOPM report here any more") from err
    records = energy.left_out(report, path)
    frames = save_report(tables, key, report)
    store_left_out(tables, energy.FACTS_SOURCE, "read", key, records,
                   now=pd.Timestamp.now(tz="UTC"))
    return report, Stored.of(frames, records)


def store_host_energy(tables: Tables, key: str, path: Path) -> Stored:
    """Compute and store one report's host energy from its stored frames, with what its
    day shows of it (:func:`report_figures`; a worker's task); a report with no frames
    stored fails with its path."""
    try:
        report = load_report(tables, key, path, names=["totals", "regions"])
    except OSError as err:
        raise InputError(path, "no validated frames stored") from err
    return _host_energy_stored(tables, key, report)


def _host_energy_stored(tables: Tables, key: str, report: Report) -> Stored:
    """Compute and store ``report``'s host energy as partition ``key``."""
    table = energy.host_energy(report)
    tables.write_partition(HOST_TABLE, key, table)
    return Stored.of({HOST_TABLE: table}, **report_figures(report))


def store_reports_and_host_energy(tasks: list[tuple]) -> list[BothOutcome]:
    """For each ``(tables, key, path, timezone)``: :func:`store_report`, then the host energy
    of the report just read (not read back from its stored frames), stored as
    :func:`store_host_energy` stores it. A worker's task of
    ``assets.blocks.run_entries_both``: a report's ``InputError``, or any error of its
    host energy, is returned in its place, not raised, so that the task's other reports
    are reported."""
    outcomes: list[BothOutcome] = []
    for tables, key, path, timezone in tasks:
        try:
            report, frames = _read_and_store(tables, key, path, timezone)
        except InputError as err:
            outcomes.append((err, None))
            continue
        try:
            outcomes.append((frames, _host_energy_stored(tables, key, report)))
        except Exception as err:  # noqa: BLE001 - returned: run_entries_both's caller raises it
            outcomes.append((frames, returned(err)))
        del report  # one report in memory at a time
    return outcomes


def build_trial(tables: Tables, key: str, path: Path, fingerprint: str) -> TrialData:
    """The TAUdb trial of one report from its stored frames (a worker's task: picklable
    arguments, no Dagster)."""
    return report_trial(load_report(tables, key, path), fingerprint)


def trial_known(source: GeopmReportSource, key: str) -> tuple[str, str]:
    """The source key and fingerprint of report ``key``'s trial, before it is built: the
    report file's path, and a digest of its landing fingerprint (name, size, mtime, as
    the sensor sees it) and of the ``timezone`` its naive timestamps were read in, so
    changing either reloads the trial."""
    path = source.resolve(key)
    item = read_landed_item(path, key, identify_report)
    if item is None:
        raise InputError(path, "no GEOPM report here any more")
    return str(path.resolve()), digest_pairs({"report": item.fingerprint,
                                              "timezone": source.timezone})


def load_trials(run: RunDays, source: GeopmReportSource, tables: Tables,
                taudb: TaudbResource, skip: Collection[str], executor: Executor
                ) -> dict[str, Outcome]:
    """Report -> its trial load (the trial's frames, empty when unchanged, with
    ``trial_id`` in its metadata), or its InputError, for every report of the run but
    those in ``skip``. The trials that changed are built in ``executor``, a day at a
    time, and each day's are written in one transaction (``TrialLoads.load_many``: a
    report that cannot be built or mapped loads nothing, the day's others load)."""
    outcomes: dict[str, Outcome] = {}
    knowns: dict[str, tuple[str, str]] = {}
    for key in run.keys:
        if key in skip:
            continue
        try:
            knowns[key] = trial_known(source, key)
        except InputError as err:
            outcomes[key] = err
    with taudb.open() as db:
        loads = TrialLoads.into(db, (known[0] for known in knowns.values()))
        for keys in run.entries.values():
            changed = {key: executor.submit(build_trial, tables, key, source.resolve(key),
                                            knowns[key][1])
                       for key in keys if key in knowns and not loads.unchanged(key, *knowns[key])}
            loaded = loads.load_many((key, future.result, knowns[key])
                                     for key, future in changed.items())
            for key in keys:
                if key not in knowns:
                    continue
                trial = loaded.get(key)
                if isinstance(trial, InputError):
                    outcomes[key] = trial
                    continue
                outcomes[key] = loads.outcome(key, trial)
    return outcomes


def stored_report_keys(source: GeopmReportSource, tables: Tables) -> list[str]:
    """The reports whose host energy is stored and whose file is still in its configured
    landing folder, in table order (a report whose latest version failed keeps its last
    good tables; ``joulehouse.landing.still_landed``: a folder that cannot be listed, or
    lists nothing, keeps every report of it)."""
    return still_landed(tables.partition_keys(HOST_TABLE), source.landings())


def whole_tables(context: dg.AssetExecutionContext, tables: Tables, selected: set[dg.AssetKey],
                 every: list[str] | None, reports: list[str]) -> Iterator[dg.MaterializeResult]:
    """Keep the tables over every report per entry (``joulehouse.geopm.tables``): a run over
    days rewrites the rows of its ``reports`` and of those sharing their content; a run
    without partitions (``every``: every stored report) brings the tables in line with
    every stored report, writing what differs. A report given twice (same content under
    two keys) counts once, under its first key. The region and report tables are written
    together whichever is selected; the facts per entry (``assets/facts.py``). Figures
    named ``run_*`` are of the reports the write looked at (every stored one, in a run
    without partitions), not of the whole table."""
    facts: list[dg.MaterializeResult] = []  # the facts' write, in the tables' (the last try's)

    def write_facts_of(landed: geopm_tables.Landed) -> None:
        if geopm_energy_facts.key in selected:
            facts.append(facts_result(context, tables, landed, every is not None,
                                      len(reports)))

    if every is not None:
        landed = geopm_tables.rebuild(tables, every, then=write_facts_of)
    else:
        landed = geopm_tables.land(tables, reports, [
            key for key in reports if tables.has_partition(HOST_TABLE, key)],
            then=write_facts_of)
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
                 landed: geopm_tables.Landed, every: bool, run_reports: int
                 ) -> dg.MaterializeResult:
    """Write the facts of what the tables' write ``landed`` (before the digests, so that a
    stop between them leaves the next run the same groups to write): a report given twice
    counts once, so the facts of every report whose rows the write replaced (the run's
    ``run_reports`` and those sharing their content); in a run without partitions
    (``every``) every fact is compared (``assets/facts.py``)."""
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
        f"the facts of the run's {run_reports} report(s) and of those sharing their "
        "content", metadata)


def _written(written: Written) -> dict[str, Any]:
    """What a table's write did: reports whose rows were written, removed, rows written."""
    return {"reports_written": dg.MetadataValue.int(written.entities),
            "reports_removed": dg.MetadataValue.int(written.removed),
            "rows_written": dg.MetadataValue.int(written.rows)}


def per_report_assets(context: dg.AssetExecutionContext, run: RunDays,
                      source: GeopmReportSource, tables: Tables, taudb: TaudbResource,
                      executor: Executor, workers: int
                      ) -> Generator[Any, None, tuple[dict[str, str], set[str]]]:
    """The per-report assets of the run's reports, each if selected: validated frames, then
    host energy of the reports whose frames did not fail here (with both selected, from
    each report as read, in tasks of several reports over ``workers`` processes:
    :func:`store_reports_and_host_energy`), then the trials of those whose energy did not
    fail either; each reported per day. Yields their events; returns day -> why, for each
    day that failed or was not computed, and the reports that failed."""
    selected = context.selected_asset_keys
    days = DayReports(context, run, "report", "an earlier asset failed in this run")
    host_metadata = (partial(day_energy_metadata, plot=plot_turn(
        context, geopm_host_energy.key, REGION_PLOT)) if geopm_host_energy.key in selected
        else None)  # one decision for every day of the run

    def arguments(key: str) -> tuple:
        return tables, key, source.resolve(key), source.timezone

    if {geopm_validated_frames.key, geopm_host_energy.key} <= selected:
        frames, host, error = run_entries_both(
            run.entries, store_reports_and_host_energy, arguments, executor,
            partitions_per_task(len(run.keys), workers))
        yield from days.report(frames, VALID_SPEC, FRAME_SCHEMAS.get)
        if error is not None:
            raise error
        yield from days.report(host, COMPUTED_SPEC, lambda name: schemas.HOST_ENERGY_SCHEMA,
                               host_metadata)
    elif geopm_validated_frames.key in selected:
        yield from days.report(run_entries(run.entries, store_report, arguments, executor),
                               VALID_SPEC, FRAME_SCHEMAS.get)
    elif geopm_host_energy.key in selected:
        yield from days.report(run_entries(run.entries, store_host_energy, lambda key: (
            tables, key, source.resolve(key)), executor, skip=days.skipped),
            COMPUTED_SPEC, lambda name: schemas.HOST_ENERGY_SCHEMA, host_metadata)
    if geopm_trials.key in selected:
        days.skipped |= {key: "no validated frames stored" for key in run.keys
                         if key not in days.skipped and not tables.has_partition(
                             f"{FRAMES_TABLE}/header", key)}
        yield from days.report(load_trials(run, source, tables, taudb, days.skipped, executor),
                               LOADS_SPEC, lambda name: None, trials_metadata("reports"))
    return days.failed_days, days.bad


with backfills() as single_run:
    @dg.multi_asset(
        retry_policy=STEP_RETRY,
        name="geopm_pipeline",
        specs=[geopm_validated_frames, geopm_host_energy, geopm_trials, *GEOPM_TABLES],
        check_specs=[VALID_SPEC, COMPUTED_SPEC, LOADS_SPEC],
        can_subset=True,
        backfill_policy=single_run,
        pool=tables_pool("geopm"),
        description="The GEOPM pipeline in one step; see assets/geopm.py.",
    )
    def geopm_pipeline(context: dg.AssetExecutionContext, config: GeopmHandOut,
                       geopm_source: GeopmReportSource, warehouse: Warehouse,
                       taudb: TaudbResource, workers: StepWorkers) -> Iterator:
        selected = context.selected_asset_keys
        tables = warehouse.tables()
        run = RunDays.of_landings(context, config, geopm_source.landings(), identify_report,
                                  start_day(geopm_source.timezone), "GEOPM")
        reports = len(run.keys) if run_partitions(context) is not None else None
        with workers.pool(reports) as executor:
            failed, bad = yield from per_report_assets(context, run, geopm_source, tables,
                                                       taudb, executor, workers.workers(reports))
        if geopm_validated_frames.key in selected:  # only a run that read the reports again
            yield from block_outcomes(geopm_report_files.key, run.entries, bad)
        if selected & {spec.key for spec in GEOPM_TABLES}:
            every = (stored_report_keys(geopm_source, tables) if run_partitions(context) is None
                     or not geopm_tables.is_kept(tables) else None)
            if every == [] and not failed:
                raise verdict("no GEOPM report stored yet: materialize geopm_host_energy")
            if every != []:
                yield from whole_tables(context, tables, selected, every, run.keys)
        if failed:
            raise failure(len(context.partition_keys), failed)


GEOPM_ASSETS = [geopm_report_files, geopm_pipeline]
