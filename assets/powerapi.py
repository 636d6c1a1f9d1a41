"""PowerAPI assets: from landed report files to windowed energy and ``energy_facts``.

One dynamic partition per landing folder and UTC day of the entries' first report
(``powerapi_days``, key ``<landing name>/<YYYY-MM-DD>``; ``joulehouse.powerapi.days``): a
landing folder's decade is 3,650 partitions, where one per landed entry passed Dagster's
100,000 within a year at a centre's rate (docs/ARCHITECTURE.md, "Partitions over a
decade"). The landing sensor (``sensors/powerapi.py``) names the entries it hands out per
day in the run config (:class:`PowerapiHandOut`): a run processes those alone; a day of
the run that names none (a backfill, a materialization from the UI, the weekly
re-validation) is read whole: every entry of its landing folder whose day it is.
Everything stored stays keyed per entry (``<landing name>/<entry name>``: one report file,
or one folder of report files, see ``resources/powerapi.py``): the pieces and their
progress, each entry's own energy, ``left_out``, the window table's holders. Like the GPU
pipeline (see ``assets/pipeline.py`` for why it is one step), ONE subsettable step,
``powerapi_pipeline``, computes the selected assets of a run:

1. ``powerapi_validated_frames``: what is new in each entry's report files read and
   validated, and stored as a new piece of the entry (``counters``, ``rapl_energy`` and
   ``power_reports``, a kind the entry lacks stored empty) with how far each file was
   read (``joulehouse/powerapi/stream.py``): a file that keeps growing is read on from
   where its complete reports ended, never again from its start; one cut, rotated or
   rewritten is read whole again, and its new first piece replaces the earlier ones. A
   bad file stores nothing for its entry and fails its day, whose check ``pandera_valid``
   names the file and line (``assets/blocks.py``); the day's other entries are stored;
2. ``powerapi_report_energy``: each entry's own windowed energy, reported per day;
3. ``powerapi_window_energy``: the whole-source table, kept per sensor
   (``joulehouse/powerapi/windows.py``): the sensors of the run's entries are
   recomputed from the stored RAPL and power reports of every stored entry still in its
   landing folder holding them (a window may straddle two files, and the measurement
   and the estimates usually come from different files); a report stored by two entries
   (one data set landed in two forms) counts once; a run without partitions rebuilds
   every sensor from the stored entries still landed (``landing.still_landed``: a
   removed file leaves the tables, a landing folder that cannot be listed or lists
   nothing keeps its own);
4. ``energy_facts/powerapi``: the recomputed sensors' rows in ``energy_facts``
   (every row, synced, after a rebuild);

then, if any day failed, the step fails last (``assets/reporting.py``).
What an entry left out (a report cut short in a quiet file, RAPL energy of a target that
is not machine-level, power reports of one timestamp: ``joulehouse/leftout.py``) makes
its day's check of 1. or 2. a WARN, and is stored in the warehouse table ``left_out``
(partitions ``powerapi/read/<entry key>`` and ``powerapi/energy/<entry key>``).
The per-entry work of 1. and 2. runs in the ``workers`` resource's processes
(``resources/workers.py``); only what each entry stored comes back to the step.
In a run without partitions with no stored entry still landed (and none failed) the
tables are emptied where the window table exists (every entry was removed: no row stays
that a rebuild would not write); where it does not, nothing was ever landed, and the
step raises a ``Failure`` saying so.
"""

import time
from collections.abc import Generator, Iterator
from concurrent.futures import Executor
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import dagster as dg
import pandas as pd
import pandera.pandas as pa

from assets.blocks import (
    ENTRIES_SHOWN,
    DayHandOut,
    DayReports,
    RunDays,
    block_outcomes,
    hand_out_field,
    run_entries,
    run_entries_both,
    stored_entries_metadata,
)
from assets.facts import write_facts, write_owned_facts
from assets.gpu import TABLE_AUTOMATION
from assets.plot_cadence import plot_metadata
from assets.pools import tables_pool
from assets.reporting import (
    FRAMES_FAILED,
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
from joulehouse import entry_table
from joulehouse.errors import InputError
from joulehouse.facts_entries import Ownership
from joulehouse.landing import StillLanded, still_landed
from joulehouse.leftout import store_left_out
from joulehouse.plots import Series, lines_png, markdown_image
from joulehouse.powerapi import report_energy, schemas, windows
from joulehouse.powerapi.days import start_day
from joulehouse.powerapi.energy import (
    FACTS_SOURCE,
    energy_facts_rows,
    left_out,
    sensor_input,
)
from joulehouse.powerapi.landing import report_entry_files
from joulehouse.powerapi.stream import FRAME_SCHEMAS, Piece, Progress, ReportStore
from joulehouse.powerapi.windows import WINDOW_TABLE, combined
from joulehouse.validation import empty_frame
from joulehouse.warehouse import Warehouse as Tables
from resources import PowerapiSource, StepWorkers, Warehouse

GROUP = "powerapi"
REPORT_ENERGY_TABLE = report_energy.TABLE
VALID_CHECK = "pandera_valid"
COMPUTED_CHECK = "energy_computed"
#: Sensor and component pairs drawn in powerapi_window_energy's metadata: a plot costs
#: 0.1-0.2 s and 20-30 KB of the event, so a landing of 500 sensors drew 1,000 (about
#: 2 min, 14 MB in one event) before; the table has every window.
PLOTS_SHOWN = 10
TAGS = {"source": "powerapi"}

powerapi_days = dg.DynamicPartitionsDefinition(name="powerapi_days")


class PowerapiHandOut(DayHandOut):
    """The report entries the landing sensor handed out, by day partition (``DayHandOut``)."""

    OP: ClassVar[str] = "powerapi_pipeline"
    entries: dict[str, list[str]] = hand_out_field(
        "the keys (<landing name>/<entry name>) of the report files, or folders of them,")


powerapi_report_files = dg.AssetSpec(
    "powerapi_report_files",
    description=(
        "PowerAPI report files as they landed: hwpc-sensor's HWPC reports (JSON, JSON lines, "
        "MongoDB exports, CSV per group) and formulas' power reports (CSV, JSON, JSON lines), "
        "entries of one file or one folder of them, one partition per landing folder and UTC "
        "day of the entries' first report. Found by the landing sensor once no file of an "
        "entry changed for the quiet period, or, for a file still growing, once it grew by "
        "the source's grown_bytes since it was last handed out or had waited its "
        "grown_wait_s since a tick saw it grown; one materialization per day "
        "per tick that handed out entries of it (metadata 'entries': their keys and "
        "fingerprints; data version: a digest of them)."
    ),
    group_name=GROUP, partitions_def=powerapi_days, kinds={"json", "csv"}, tags=TAGS,
)

#: What the per-day assets share: no materialization for a day that failed.
PER_PARTITION = {"group_name": GROUP, "partitions_def": powerapi_days, "skippable": True,
                 "tags": TAGS}

powerapi_validated_frames = dg.AssetSpec(
    "powerapi_validated_frames",
    description=(
        "The new reports of each entry's files read and validated with pandera: counters "
        "in long form, RAPL energy per tick and socket (J, value x 2^-32) and power reports "
        "(W), UTC; stored as a new piece of the entry (one Parquet file per frame under "
        "powerapi_validated_frames/), a growing file read on from where its complete reports "
        "ended (rows: this run's pieces), one cut or rewritten read whole again. A bad file "
        "fails its day's check 'pandera_valid', naming file and line; what was stored for "
        "its entry before stays, and the day's other entries go on."
    ),
    **PER_PARTITION, deps=[powerapi_report_files], kinds={"pandas", "parquet", "pandera"},
)

powerapi_report_energy = dg.AssetSpec(
    "powerapi_report_energy",
    description=(
        "The windowed energy of each entry's reports alone: measured (RAPL of the "
        "machine-level target: 'all', 'system' or the setting) and estimated (power x "
        "tick) J per sensor, target, component and window; one Parquet partition per entry, "
        "a day's metadata names the entries the run computed in it."
    ),
    **PER_PARTITION, deps=[powerapi_validated_frames],
    automation_condition=dg.AutomationCondition.eager(), kinds={"pandas", "parquet"},
)

WHOLE_TABLE = {"automation_condition": TABLE_AUTOMATION, "skippable": True}

powerapi_window_energy = dg.AssetSpec(
    "powerapi_window_energy",
    description=(
        "Energy per sensor, target, component and window over every stored entry: the "
        "measured RAPL energy (the machine-level target) and each cgroup's estimated energy "
        "as separate rows, with the sum of the estimates and its relative error against the "
        "measurement per window. A report landed in two entries counts once. Metadata: measured "
        "against estimated power over time."
    ),
    group_name=GROUP, deps=[powerapi_validated_frames], **WHOLE_TABLE, tags=TAGS,
    kinds={"pandas", "parquet"},
)

powerapi_energy_facts = dg.AssetSpec(
    dg.AssetKey(["energy_facts", "powerapi"]),
    description=(
        "The PowerAPI rows of the cross-source energy table (energy_facts, kept per entry: "
        "only the entities whose facts changed are written): entity '<sensor>/<target>', "
        "one row per component, window and method (measured, "
        "estimated)."
    ),
    group_name="energy_facts", deps=[powerapi_window_energy], **WHOLE_TABLE,
    kinds={"pandas", "parquet"},
)

VALID_SPEC = partition_check_spec(
    powerapi_validated_frames.key, VALID_CHECK, powerapi_days,
    "Every report file of every entry of the day processed in the run parses and passes "
    "its pandera schema (one result per day; a failed one names each failed entry, the "
    "first with file and line, and their energy in the same run is skipped).")
COMPUTED_SPEC = partition_check_spec(
    powerapi_report_energy.key, COMPUTED_CHECK, powerapi_days,
    "The windowed energy of every entry of the day processed in the run was computed and "
    "stored (one result per day; not computed when an entry's frames failed in the same "
    "run).")

#: What a day's partition shows of the entries the run stored in it (``entries``,
#: ``entry_keys``).
DAY_ENTRIES = stored_entries_metadata("entry", "entries")


def store_piece(tables: Tables, key: str, path: Path, now: float, quiet_s: float,
                timezone: str, epoch_zone: str | None) -> Stored:
    """Read what is new in one entry's files, validate it and store it as a piece (a
    worker's task: picklable arguments, no Dagster); its metadata says how it was read
    (``read``: whole or new reports only, ``generation``, ``pieces``, ``read_to_byte`` per
    file) and its rows are those of the piece."""
    return read_piece(ReportStore(tables).ingest(key, path, now=now, quiet_s=quiet_s,
                                                 timezone=timezone, epoch_zone=epoch_zone))


def read_piece(piece: Piece) -> Stored:
    """What :func:`store_piece` reports of a stored ``piece``."""
    return Stored.of(
        piece.frames, piece.reports.left_out,
        read="whole" if piece.whole else "new reports only",
        generation=piece.progress.generation, pieces=piece.progress.pieces,
        read_to_byte={name: read.read_to_byte for name, read in piece.progress.files.items()})


def frames_metadata(day: str, done: dict[str, Stored]) -> dict[str, Any]:
    """What a day's validated-frames partition shows: the entries the run stored in it
    and, for the first :data:`~assets.blocks.ENTRIES_SHOWN`, how each was read (``reads``:
    entry -> :func:`store_piece`'s metadata)."""
    return {**DAY_ENTRIES(day, done), "reads": dg.MetadataValue.json(
        {key: done[key].metadata for key in sorted(done)[:ENTRIES_SHOWN]})}


def stored_frame(tables: Tables, name: str, keys: list[str],
                 progress: dict[str, Progress] | None = None
                 ) -> tuple[pd.DataFrame | None, int]:
    """The stored frame ``name`` of ``keys`` together, every piece (None when it has no
    rows), validated, and how many rows were given twice (``windows.combined``);
    ``progress``: the keys', where already read."""
    return combined(name, [ReportStore(tables).read(name, keys, progress)] if keys else [])


def store_report_energy(tables: Tables, key: str, entry: Path, window: str,
                        targets: tuple[str, ...], piece: Piece | None = None) -> Stored:
    """Compute and store one entry's own windowed energy from its stored pieces
    (``joulehouse.powerapi.report_energy``), and what it left out (each record's input:
    the entry, and the sensor), in place of the earlier (a worker's task: picklable
    arguments, no Dagster). ``piece``: the entry's read just stored, whose frames are taken
    in memory where it is the first of its generation and stored (then every stored frame
    of it; a read of no file stores nothing, so its energy is of what is stored)."""
    if piece is not None and piece.whole and piece.progress.files:
        progress = piece.progress
        rapl, power = (combined(name, [piece.frames[name]])[0]
                       for name in ("rapl_energy", "power_reports"))
    else:
        progress = ReportStore(tables).progress(key)
        rapl, power = (stored_frame(tables, name, [key], {key: progress})[0]
                       for name in ("rapl_energy", "power_reports"))
    table = report_energy.store(tables, key, progress, rapl, power, window, targets)
    records = left_out(rapl, power, targets, lambda sensor: f"{entry} ({sensor_input(sensor)})")
    store_left_out(tables, FACTS_SOURCE, "energy", key, records,
                   now=pd.Timestamp.now(tz="UTC"))
    return Stored.of({REPORT_ENERGY_TABLE: table}, records)


def store_pieces_and_energy(tasks: list[tuple]) -> list[BothOutcome]:
    """For each ``(tables, key, path, now, quiet_s, timezone, epoch_zone, window, targets)``:
    :func:`store_piece`, then :func:`store_report_energy` with the piece just read (its
    frames not read back where they are all the entry's). A worker's task of
    ``assets.blocks.run_entries_both``: the ``InputError`` of an entry's frames or energy,
    or any error of its energy, is returned in its place, not raised, so that the task's
    other entries are reported."""
    outcomes: list[BothOutcome] = []
    for tables, key, path, now, quiet_s, timezone, epoch_zone, window, targets in tasks:
        try:
            piece = ReportStore(tables).ingest(key, path, now=now, quiet_s=quiet_s,
                                               timezone=timezone, epoch_zone=epoch_zone)
        except InputError as err:
            outcomes.append((err, None))
            continue
        try:
            energy: Stored | Exception = store_report_energy(tables, key, path, window,
                                                             targets, piece)
        except Exception as err:  # noqa: BLE001 - returned: run_entries_both's caller raises it
            energy = returned(err)
        outcomes.append((read_piece(piece), energy))
    return outcomes


def per_entry_assets(context: dg.AssetExecutionContext, run: RunDays,
                     source: PowerapiSource, tables: Tables, executor: Executor, workers: int
                     ) -> Generator[Any, None, tuple[dict[str, str], set[str]]]:
    """The per-entry assets of the run's entries, each if selected: validated frames (what
    is new in each entry, ``joulehouse.powerapi.stream``), then the own energy of the
    entries whose frames did not fail here (with both selected, in the same task as the
    frames, several entries a task over ``workers`` processes:
    :func:`store_pieces_and_energy`); each reported per day (``RunDays.batch``), in
    ``executor``. Yields their events; returns day -> why, for each day that failed or was
    not computed, and the entries that failed."""
    selected = context.selected_asset_keys
    days = DayReports(context, run, "entry", FRAMES_FAILED)
    now = time.time()

    def read(key: str) -> tuple:
        return (tables, key, source.resolve(key), now, source.quiet_period_s, source.timezone,
                source.epoch_zone)

    def energy_schema(name: str) -> pa.DataFrameSchema:
        return schemas.WINDOW_ENERGY_SCHEMA

    if {powerapi_validated_frames.key, powerapi_report_energy.key} <= selected:
        frames, energy, error = run_entries_both(
            run.entries, store_pieces_and_energy,
            lambda key: (*read(key), source.window, source.targets), executor,
            partitions_per_task(len(run.keys), workers))
        yield from days.report(frames, VALID_SPEC, FRAME_SCHEMAS.get, frames_metadata)
        if error is not None:
            raise error
        yield from days.report(energy, COMPUTED_SPEC, energy_schema, DAY_ENTRIES)
        return days.failed_days, days.bad
    if powerapi_validated_frames.key in selected:
        yield from days.report(run_entries(run.entries, store_piece, read, executor),
                               VALID_SPEC, FRAME_SCHEMAS.get, frames_metadata)
    if powerapi_report_energy.key in selected:
        yield from days.report(run_entries(run.entries, store_report_energy, lambda key: (
            tables, key, source.resolve(key), source.window, source.targets), executor,
            skip=days.skipped), COMPUTED_SPEC, energy_schema, DAY_ENTRIES)
    return days.failed_days, days.bad


def stored_keys(source: PowerapiSource, tables: Tables) -> list[str]:
    """The entries whose frames are stored and that are still in their configured landing
    folder, in table order (an entry whose latest read failed keeps its last good frames;
    ``landing.still_landed``: a folder that cannot be listed, or lists nothing, keeps
    every entry of it)."""
    return still_landed(ReportStore(tables).stored_keys(), source.landings())


def whole_tables(context: dg.AssetExecutionContext, tables: Tables, source: PowerapiSource,
                 selected: set[dg.AssetKey], touched: list[str] | None
                 ) -> Iterator[dg.MaterializeResult]:
    """Recompute the window rows of the sensors of the run's entries ``touched`` (every
    sensor in a run without partitions: None) from the stored entries still landed
    (``landing.StillLanded``: each landing folder listed once, the stored entries not) and
    write them and their facts, then settle which entry holds which sensor
    (``joulehouse/powerapi/windows.py``)."""
    refreshed = None
    if powerapi_window_energy.key in selected:
        refreshed = windows.refresh(tables, StillLanded(source.landings()), touched,
                                    source.window, source.targets)
        yield window_table(context, tables, refreshed)
    if powerapi_energy_facts.key in selected:
        yield facts(context, tables, source.targets, refreshed)
    if refreshed is not None:
        windows.settle(tables, refreshed)


def window_table(context: dg.AssetExecutionContext, tables: Tables,
                 refreshed: windows.Refreshed) -> dg.MaterializeResult:
    """The materialization of the window table after ``refreshed`` wrote it: the rows
    written, their sensors drawn (at most every ``$JOULEHOUSE_PLOT_EVERY_S``:
    ``assets/plot_cadence.py``), the table's rows from the Delta log's statistics."""
    rows = refreshed.rows
    return dg.MaterializeResult(asset_key=powerapi_window_energy.key, metadata={
        **table_metadata(rows, schemas.WINDOW_ENERGY_SCHEMA),
        "dagster/row_count": dg.MetadataValue.int(entry_table.count(tables, WINDOW_TABLE, {})),
        "sensors_recomputed": dg.MetadataValue.int(
            len(refreshed.sensors) if refreshed.sensors is not None
            else rows["sensor"].nunique() if len(rows) else 0),
        "partitions": dg.MetadataValue.int(refreshed.partitions),
        "reports_given_twice": dg.MetadataValue.json(refreshed.given_twice),
        **plot_metadata(context, powerapi_window_energy.key, "power_over_time",
                        partial(power_plots, rows), carry=False),
    })


def power_plots(table: pd.DataFrame) -> str:
    """Markdown with one PNG per sensor and component, for the first ``PLOTS_SHOWN`` of
    them in sensor order (then a line saying how many more the table has): measured power
    (RAPL) and the sum of the cgroup estimates over time, each window's energy over its
    duration (W) drawn across the window."""
    if table.empty:
        return "no measured window yet"
    measured = table[table["method"] == "measured"]
    pairs = list(measured.groupby(["sensor", "component"], sort=True))
    images = []
    for (sensor, component), rows in pairs[:PLOTS_SHOWN]:
        series = [_across_windows("measured (RAPL)", rows, rows["energy_j"]),
                  _across_windows("sum of the estimates", rows, rows["estimated_total_j"])]
        title = f"{sensor} / {component}"
        png = lines_png(series, title=title, x_label="time (UTC)", y_label="power (W)")
        images.append(f"### {title}\n\n{markdown_image(png, title)}")
    if len(pairs) > PLOTS_SHOWN:
        images.append(f"... and {len(pairs) - PLOTS_SHOWN} more sensor and component pairs, "
                      "not drawn: every window is in the table")
    return "\n\n".join(images) or "no measured window yet"


def _across_windows(label: str, rows: pd.DataFrame, energy_j: pd.Series) -> Series:
    """One horizontal segment per window at its mean power (energy / duration), apart from
    the next (a NaN point breaks the line)."""
    power = (energy_j / rows["duration_s"]).to_numpy()
    starts, ends = rows["window_start"].to_numpy(), rows["window_end"].to_numpy()
    xs = [x for start, end in zip(starts, ends) for x in (start, end, end)]
    ys = [y for value in power for y in (value, value, float("nan"))]
    return Series(label, xs, ys)


#: A PowerAPI fact's entity is ``<sensor>/<target>``: the sensor owns it (a sensor name
#: holds no '/'; a target, a cgroup path, may).
SENSOR_OWNS = Ownership(prefix=lambda sensor: f"{sensor}/",
                        owner_of=lambda entity: entity.split("/", 1)[0])


def _stored_windows(tables: Tables) -> pd.DataFrame:
    """The window table, or no rows with its columns before its first write (a first run
    whose every file failed)."""
    stored = tables.read_table(WINDOW_TABLE)
    return stored if len(stored.columns) else empty_frame(schemas.WINDOW_ENERGY_SCHEMA)


def facts(context: dg.AssetExecutionContext, tables: Tables, targets: tuple[str, ...],
          refreshed: windows.Refreshed | None) -> dg.MaterializeResult:
    """Write the PowerAPI rows of energy_facts per entry (``assets/facts.py``), the window
    table's made with the machine-level ``targets``: where this run ``refreshed`` some
    sensors' windows, those sensors' facts (each sensor owns its ``<sensor>/<target>``
    entities); otherwise every fact, synced with the stored ones."""
    sensors = None if refreshed is None else refreshed.sensors
    if sensors is None or any("/" in sensor for sensor in sensors):
        return write_facts(context, tables, powerapi_energy_facts.key, FACTS_SOURCE,
                           lambda: energy_facts_rows(_stored_windows(tables), targets))
    return write_owned_facts(
        context, tables, powerapi_energy_facts.key, FACTS_SOURCE,
        energy_facts_rows(refreshed.rows, targets), sensors, SENSOR_OWNS,
        f"the facts of the run's {len(sensors)} sensor(s)")


with backfills() as single_run:
    @dg.multi_asset(
        retry_policy=STEP_RETRY,
        name="powerapi_pipeline",
        specs=[powerapi_validated_frames, powerapi_report_energy, powerapi_window_energy,
               powerapi_energy_facts],
        check_specs=[VALID_SPEC, COMPUTED_SPEC],
        can_subset=True,
        backfill_policy=single_run,
        pool=tables_pool("powerapi"),
        description="The PowerAPI pipeline in one step; see assets/powerapi.py.",
    )
    def powerapi_pipeline(context: dg.AssetExecutionContext, config: PowerapiHandOut,
                          powerapi_source: PowerapiSource, warehouse: Warehouse,
                          workers: StepWorkers) -> Iterator:
        selected = context.selected_asset_keys
        tables = warehouse.tables()
        run = RunDays.of_landings(
            context, config, powerapi_source.landings(), report_entry_files,
            start_day(powerapi_source.timezone, powerapi_source.epoch_zone), "PowerAPI")
        partitioned = run_partitions(context) is not None
        entries = len(run.keys) if partitioned else None
        with workers.pool(entries) as executor:
            failed, bad = yield from per_entry_assets(context, run, powerapi_source, tables,
                                                      executor, workers.workers(entries))
        if powerapi_validated_frames.key in selected:  # only a run that read the entries
            yield from block_outcomes(powerapi_report_files.key, run.entries, bad)
        if selected & {powerapi_window_energy.key, powerapi_energy_facts.key}:
            if partitioned:
                if run.keys:  # a day of no entry touches no sensor
                    yield from whole_tables(context, tables, powerapi_source, selected,
                                            run.keys)
            elif (stored_keys(powerapi_source, tables)
                  or entry_table.is_entry_table(tables, WINDOW_TABLE)):
                yield from whole_tables(context, tables, powerapi_source, selected, None)
            elif not failed:
                raise verdict("no PowerAPI report stored yet: materialize "
                              "powerapi_validated_frames for a day first")
        if failed:
            raise failure(len(context.partition_keys), failed)


POWERAPI_ASSETS = [powerapi_report_files, powerapi_pipeline]
