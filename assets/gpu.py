"""GPU benchmark assets: from a landed repetition to energy tables.

One dynamic partition per data root and UTC day of the repetitions' start
(``gpu_repetition_days``, key ``<root name>/<YYYY-MM-DD>``; ``joulehouse.gpu.days``): a
root's decade is 3,650 partitions, where one per repetition passed Dagster's 100,000
within a year at a centre's rate (docs/ARCHITECTURE.md, "Partitions over a decade").
The sensor (``sensors/gpu_repetitions.py``) names the repetitions it hands out per day
in the run config (:class:`GpuHandOut`): a run processes those alone; a day of the run
that names none (a backfill, a materialization from the UI, the weekly re-validation)
is read whole: every complete repetition of its root whose day it is.

Everything stored stays keyed per repetition (``<root name>/<experiment>/<benchmark>/<run>/<repetition>``,
see ``resources/gpu.py``): frames, energy, ``left_out``, the facts. This module holds
the assets' specs and what computes each; ``assets/pipeline.py`` runs them as ONE step
over every repetition of a run (``BackfillPolicy.single_run``), writing Parquet through
``joulehouse.warehouse``. The per-setting and per-benchmark tables are kept per
setting (``joulehouse/gpu/tables.py``): a run recomputes the settings and benchmarks
of its repetitions only; a run without partitions rebuilds them whole, from the stored
repetitions still in their data root's tree (:func:`stored_energy_keys`).

A bad repetition fails its day, the day's other repetitions are stored: see
``assets/pipeline.py``. A method of a repetition that gives no ``energy_facts`` row (its
source file missing, unbridged gaps: ``joulehouse.gpu.energy.left_out``) makes its day's
``energy_computed`` check a WARN and is stored in the warehouse table ``left_out``
(``gpu-benchmark/energy/<key>``).
"""

import os
from collections.abc import Callable, Generator, Mapping
from concurrent.futures import Executor
from functools import cache, partial
from typing import Any, ClassVar

import dagster as dg
import pandas as pd
import pandera.pandas as pa

from assets.blocks import (
    DayHandOut,
    DayReports,
    DaysOf,
    Outcome,
    RunDays,
    hand_out_field,
    run_entries,
    run_entries_both,
)
from assets.facts import OwnedFacts, write_facts
from assets.plot_cadence import plot_metadata
from assets.reporting import (
    FRAMES_FAILED,
    BothOutcome,
    Stored,
    column_schema,
    partition_check_spec,
    partitions_per_task,
    returned,
    table_metadata,
    verdict,
)
from joulehouse import entry_sync, entry_table
from joulehouse.accounting.repetition import FIGURES, figures_rows, with_reading_figures
from joulehouse.accounting.waste import GPU_IDLE
from joulehouse.errors import InputError
from joulehouse.gpu import aggregate
from joulehouse.gpu import tables as gpu_tables
from joulehouse.gpu.days import repetitions_of_days
from joulehouse.gpu.energy import (
    FACTS_OWNERSHIP,
    FACTS_SOURCE,
    energy_facts_rows,
    left_out,
    repetition_energy,
)
from joulehouse.gpu.layout import RepetitionRef, find_repetitions, holds_repetitions, subdirs
from joulehouse.gpu.readers import POWER_SAMPLES, Repetition, read_repetition
from joulehouse.gpu.schemas import (
    BENCHMARK_SCHEMA,
    EXTERNAL_POWER_SCHEMA,
    GPU_POWER_SCHEMA,
    POWER_SAMPLES_SCHEMA,
    REPETITION_ENERGY_SCHEMA,
    SAMPLES_SCHEMA,
    SETTING_SCHEMA,
    SYSTEM_INFO_SCHEMA,
    TIMESTAMPS_SCHEMA,
)
from joulehouse.gpu.store import (
    SAMPLES_PREFIX,
    load_repetition,
    repetition_frames,
    save_repetition,
)
from joulehouse.gpu.tables import BENCHMARK_TABLE, SETTING_TABLE
from joulehouse.leftout import store_left_out
from joulehouse.plots import Series, markdown_image, scatter_png
from joulehouse.validation import validate, validate_each
from joulehouse.warehouse import Warehouse as Tables
from resources import GpuBenchmarkSource

GROUP = "gpu_benchmarks"
ENERGY_TABLE = "gpu_repetition_energy"
FACTS_TABLE = "energy_facts"
VALID_CHECK = "pandera_valid"
COMPUTED_CHECK = "energy_computed"

#: Code version of ``gpu_repetition_energy``: raise it when what a partition stores changes
#: ("2": the ``data_root`` column; "3": the readings' figures of
#: ``joulehouse.accounting.repetition``, with the waste rule that judged them), so the UI
#: marks partitions stored by older code stale.
ENERGY_CODE_VERSION = f"3-{GPU_IDLE.id}-v{GPU_IDLE.version}-{GPU_IDLE.threshold}"
#: Partition keys a failure names in its description (then "and N more").
KEYS_SHOWN = 5
#: The verdict of a run without partitions over a store without per-repetition energy.
NO_ENERGY = "no per-repetition energy stored yet: materialize gpu_repetition_energy"
#: Rows of gpu_benchmark_energy shown inline in its metadata (``settings``).
SETTINGS_SHOWN = 100
#: Its columns shown there: each setting's point of the plot and what was chosen.
SETTINGS_COLUMNS = ["data_root", "experiment", "benchmark", "run", "duration_s", "energy_j",
                    "pareto_optimal", "least_energy", "least_edp"]

gpu_repetition_days = dg.DynamicPartitionsDefinition(name="gpu_repetition_days")


class GpuHandOut(DayHandOut):
    """The repetitions the data-root sensors handed out, by day partition (``DayHandOut``)."""

    OP: ClassVar[str] = "gpu_pipeline"
    repetitions: dict[str, list[str]] = hand_out_field(
        "the keys (<root name>/<experiment>/<benchmark>/<run>/<repetition>) of the "
        "repetitions")


gpu_repetition_files = dg.AssetSpec(
    "gpu_repetition_files",
    description=(
        "The raw files of benchmark repetitions (timestamps.csv, gpu-power.csv, "
        "power-external.csv, *_samples.csv, system_info.json) as the writer left them, one "
        "partition per data root and UTC day of the repetitions' start. Written outside "
        "Dagster: the data-root sensor reports a materialization per day per tick that "
        "handed out complete, quiet repetitions of it (metadata 'repetitions': their keys "
        "and fingerprints, each the folder's names, sizes and mtimes; data version: a "
        "digest of them)."
    ),
    group_name=GROUP,
    partitions_def=gpu_repetition_days,
    kinds={"csv", "json"},
    tags={"source": "gpu-benchmark"},
)

# Tables over all repetitions: rebuilt when any repetition's energy changes,
# even while some repetition has none (a bad one must not hold the rest back).
TABLE_AUTOMATION = dg.AutomationCondition.eager().without(
    ~dg.AutomationCondition.any_deps_missing()
)

#: What the per-repetition assets share: one dynamic partition per data root and day, and
#: no materialization for a day that failed, so it shows as failed.
PER_REPETITION = {"group_name": GROUP, "partitions_def": gpu_repetition_days, "skippable": True,
                  "tags": {"source": "gpu-benchmark"}}


#: What the tables over all repetitions share.
WHOLE_TABLE = {"group_name": GROUP, "automation_condition": TABLE_AUTOMATION,
               "skippable": True, "tags": {"source": "gpu-benchmark"}}

gpu_validated_frames = dg.AssetSpec(
    "gpu_validated_frames",
    description=(
        "Every file of a repetition read, converted to SI units and UTC, and validated "
        "with pandera; one Parquet partition per repetition and frame under "
        "gpu_validated_frames/. A file that fails validation fails the check "
        "'pandera_valid' of its day, naming file and line; the stored frames of that "
        "repetition stay as they were, its energy is skipped, the other repetitions of "
        "the run go on."
    ),
    **PER_REPETITION,
    deps=[gpu_repetition_files],
    kinds={"pandas", "parquet", "pandera"},
)

gpu_repetition_energy = dg.AssetSpec(
    "gpu_repetition_energy",
    description=(
        "Energy of each repetition per window (experiment, train, each epoch), measured "
        "four ways: the total-energy counter, integrated gpu-power, integrated 50 Hz power "
        "samples and the external meter; with mean powers, gaps, EDP and how far the "
        "methods disagree. One Parquet partition per repetition; a day's metadata names "
        "the repetitions the run computed in it."
    ),
    **PER_REPETITION,
    deps=[gpu_validated_frames],
    automation_condition=dg.AutomationCondition.eager(),
    code_version=ENERGY_CODE_VERSION,
    kinds={"pandas", "parquet"},
)

VALID_SPEC = partition_check_spec(
    gpu_validated_frames.key, VALID_CHECK, gpu_repetition_days,
    "Every file of every repetition of the day processed in the run parses and passes its "
    "pandera schema (one result per day; a failed one names each failed repetition, the "
    "first with file and line, and their energy in the same run is skipped).")
COMPUTED_SPEC = partition_check_spec(
    gpu_repetition_energy.key, COMPUTED_CHECK, gpu_repetition_days,
    "The energy of every repetition of the day processed in the run was computed and "
    "stored (one result per day; not computed when a repetition's validated frames "
    "failed in the same run; a WARN names each method that gives no energy_facts row: "
    "its file missing, or unbridged gaps).")


_FRAME_SCHEMAS = {"timestamps": TIMESTAMPS_SCHEMA, "gpu_power": GPU_POWER_SCHEMA,
                  "external_power": EXTERNAL_POWER_SCHEMA, "system_info": SYSTEM_INFO_SCHEMA}


def frame_schema(name: str) -> pa.DataFrameSchema:
    """The pandera schema of a stored frame, by its table name (``joulehouse.gpu.store``)."""
    if name.startswith(SAMPLES_PREFIX):
        power = name == SAMPLES_PREFIX + POWER_SAMPLES
        return POWER_SAMPLES_SCHEMA if power else SAMPLES_SCHEMA
    return _FRAME_SCHEMAS[name]


def store_repetition(tables: Tables, key: str, ref: RepetitionRef, timezone: str,
                     external_power_unit: str) -> Stored:
    """Read, validate and store one repetition's frames (a worker's task: picklable
    arguments, no Dagster)."""
    rep = read_repetition(ref, timezone=timezone, external_power_unit=external_power_unit)
    return Stored.of(save_repetition(tables, key, rep))


def store_energy(tables: Tables, key: str, ref: RepetitionRef, data_root: str,
                 max_gap_s: float) -> Stored:
    """Compute and store one repetition's energy from its stored frames (a worker's task)."""
    return _store_energy_of(tables, key, load_repetition(tables, key, ref), data_root,
                            max_gap_s)


def store_repetitions_and_energy(tasks: list[tuple]) -> list[BothOutcome]:
    """For each ``(tables, key, ref, timezone, external_power_unit, data_root, max_gap_s)``:
    :func:`store_repetition`, then the energy of the frames just read (not read back),
    stored as :func:`store_energy` stores it, the task's energies validated together
    (:func:`validate_each`: one pass for all of them where the CLI makes one for the
    whole tree). A worker's task of ``assets.blocks.run_entries_both``: the ``InputError``
    of a repetition's frames or energy, or any error of its energy, is returned in its
    place, not raised, so that the task's other repetitions are reported."""
    outcomes: dict[str, BothOutcome] = {}
    energies: dict[str, pd.DataFrame] = {}
    task_refs = {task[1]: task[2] for task in tasks}
    for tables, key, ref, timezone, external_power_unit, data_root, max_gap_s in tasks:
        try:
            rep = read_repetition(ref, timezone=timezone, external_power_unit=external_power_unit)
            saved = save_repetition(tables, key, rep)
        except InputError as err:
            outcomes[key] = (err, None)
            continue
        frames = Stored.of(saved)
        outcomes[key] = (frames, None)
        try:
            energies[key] = with_reading_figures(
                repetition_energy(rep, data_root=data_root, max_gap_s=max_gap_s), saved)
        except Exception as err:  # noqa: BLE001 - returned: run_entries_both's caller raises it
            outcomes[key] = (frames, returned(err))
    try:
        checked = validate_each(REPETITION_ENERGY_SCHEMA, energies)
    except Exception as err:  # noqa: BLE001 - a bug: returned for each, as below
        checked = dict.fromkeys(energies, returned(err))
    for key, energy in checked.items():
        frames = outcomes[key][0]
        if isinstance(energy, Exception):
            outcomes[key] = (frames, energy)
            continue
        try:
            outcomes[key] = (frames, _energy_stored(tables, key, energy, task_refs[key]))
        except Exception as err:  # noqa: BLE001 - returned, as above
            outcomes[key] = (frames, returned(err))
    return [outcomes[task[1]] for task in tasks]


def _store_energy_of(tables: Tables, key: str, rep: Repetition, data_root: str,
                     max_gap_s: float) -> Stored:
    energy = repetition_energy(rep, data_root=data_root, max_gap_s=max_gap_s)
    frame = validate(REPETITION_ENERGY_SCHEMA,
                     with_reading_figures(energy, repetition_frames(rep)), key)
    return _energy_stored(tables, key, frame, rep.ref)


def _energy_stored(tables: Tables, key: str, energy: pd.DataFrame, ref: RepetitionRef
                   ) -> Stored:
    """Store one repetition's validated ``energy`` and what it gives no ``energy_facts`` row
    of (``energy.left_out``: table ``left_out``, partition ``gpu-benchmark/energy/<key>``,
    in place of the earlier; the check ``energy_computed`` warns)."""
    tables.write_partition(ENERGY_TABLE, key, energy)
    records = left_out(energy, str(ref.path))
    store_left_out(tables, FACTS_SOURCE, "energy", key, records, now=pd.Timestamp.now(tz="UTC"))
    return Stored.of({ENERGY_TABLE: energy}, records)


def repetition_days_of(source: GpuBenchmarkSource) -> DaysOf:
    """The :data:`~assets.blocks.DaysOf` of ``source``'s data roots: a root's days read
    whole from its tree (``joulehouse.gpu.days.repetitions_of_days``), the keys prefixed
    with the root's name."""

    def days_of(name: str, dates: list[str]) -> dict[str, list[str]]:
        root = source.roots_by_name().get(name)
        if root is None:
            raise InputError(name, "no such GPU data root configured")
        found = repetitions_of_days(root.path, dates, root.timezone)
        return {date: [f"{name}/{key}" for key in keys] for date, keys in found.items()}

    return days_of


def validate_frames(run: RunDays, gpu_source: GpuBenchmarkSource, tables: Tables,
                    executor: Executor) -> dict[str, Outcome]:
    """Read, validate and store every repetition of the run, in ``executor``: repetition
    -> what it stored, or its InputError."""

    def arguments(key: str) -> tuple:
        root, ref = gpu_source.resolve(key)
        return tables, key, ref, root.timezone, root.external_power_unit

    return run_entries(run.entries, store_repetition, arguments, executor)


def compute_energy(run: RunDays, gpu_source: GpuBenchmarkSource, tables: Tables,
                   skip: Mapping[str, str], executor: Executor) -> dict[str, Outcome]:
    """Compute and store the energy of every repetition of the run but those in ``skip``,
    in ``executor``: repetition -> what it stored, or its InputError."""

    def arguments(key: str) -> tuple:
        root, ref = gpu_source.resolve(key)
        return tables, key, ref, root.key_prefix, gpu_source.max_gap_s

    return run_entries(run.entries, store_energy, arguments, executor, skip=skip)


def frames_and_energy(run: RunDays, gpu_source: GpuBenchmarkSource, tables: Tables,
                      executor: Executor, workers: int
                      ) -> tuple[dict[str, Outcome], dict[str, Outcome], Exception | None]:
    """Read, validate and store every repetition of the run and compute its energy from
    the frames in memory, in tasks of several repetitions (:func:`partitions_per_task`
    over ``workers`` processes; :func:`store_repetitions_and_energy`) in ``executor``.
    Returns repetition -> its frames' outcome; repetition -> its energy's, for those whose
    frames were stored; and the first error of an energy that is no bad input (a bug:
    raised once the frames are reported)."""

    def arguments(key: str) -> tuple:
        root, ref = gpu_source.resolve(key)
        return (tables, key, ref, root.timezone, root.external_power_unit, root.key_prefix,
                gpu_source.max_gap_s)

    return run_entries_both(run.entries, store_repetitions_and_energy, arguments, executor,
                            partitions_per_task(len(run.keys), workers))


def per_repetition_assets(context: dg.AssetExecutionContext, run: RunDays,
                          gpu_source: GpuBenchmarkSource, tables: Tables,
                          executor: Executor, workers: int
                          ) -> Generator[Any, None, tuple[dict[str, str], set[str]]]:
    """The per-repetition assets of the run's repetitions, each if selected: validated
    frames, then the energy of the repetitions whose frames did not fail here (with both
    selected, each repetition's energy from its frames in memory: :func:`frames_and_energy`
    over ``workers`` processes); each reported per day (``RunDays.batch``). Yields their
    events; returns day -> why, for each day that failed or was not computed, and the
    repetitions that failed."""
    selected = context.selected_asset_keys
    days = DayReports(context, run, "repetition", FRAMES_FAILED)

    def energy_schema(name: str) -> pa.DataFrameSchema:
        return REPETITION_ENERGY_SCHEMA

    if {gpu_validated_frames.key, gpu_repetition_energy.key} <= selected:
        frames, energy, error = frames_and_energy(run, gpu_source, tables, executor, workers)
        yield from days.report(frames, VALID_SPEC, frame_schema)
        if error is not None:
            raise error
        yield from days.report(energy, COMPUTED_SPEC, energy_schema)
        return days.failed_days, days.bad
    if gpu_validated_frames.key in selected:
        yield from days.report(validate_frames(run, gpu_source, tables, executor), VALID_SPEC,
                               frame_schema)
    if gpu_repetition_energy.key in selected:
        yield from days.report(compute_energy(run, gpu_source, tables, days.skipped, executor),
                               COMPUTED_SPEC, energy_schema)
    return days.failed_days, days.bad


def stored_energy_keys(gpu_source: GpuBenchmarkSource, tables: Tables) -> list[str]:
    """The repetitions whose energy is stored and whose folder is still in its configured
    data root's tree, in table order (a repetition whose latest version failed keeps its
    last good energy): what a run without partitions brings the tables in line with. A
    repetition removed from its tree, or of a root no longer configured, leaves them; a
    root that cannot be listed, or lists no repetition at all while repetitions of it
    are stored (an NFS mount point not mounted), keeps every repetition of it. One
    listing of each root's tree."""
    stored = tables.partition_keys(ENERGY_TABLE)
    roots = gpu_source.roots_by_name()
    present: dict[str, set[str] | None] = {}  # root name -> its repetitions; None: kept
    for name in {key.partition("/")[0] for key in stored}:
        if name not in roots:
            present[name] = set()
            continue
        try:
            present[name] = {f"{name}/{ref.key}" for ref in find_repetitions(
                roots[name].path)} or None
        except OSError:
            present[name] = None
    return [key for key in stored
            if (there := present[key.partition("/")[0]]) is None or key in there]


def stored_energy_keys_of_run(gpu_source: GpuBenchmarkSource, tables: Tables,
                              keys: list[str] | None) -> list[str]:
    """The repetitions the run's tables and trials are made from, sorted: in a run over
    the repetitions ``keys``, the repetitions of the settings (run folders) they belong
    to whose energy is stored (a listing of each run folder and a stat each, not the whole
    table's listing: issue 28; a run folder that cannot be listed, or is missing while its
    root lists no repetition at all (an NFS mount point not mounted: as
    :func:`stored_energy_keys`), the table's stored repetitions of it, so that a failed
    load deletes nothing stored); in a run without partitions (``keys`` None), every
    stored one still in its tree (:func:`stored_energy_keys`)."""
    if keys is None:
        return stored_energy_keys(gpu_source, tables)
    roots = gpu_source.roots_by_name()
    mounted = cache(lambda root: holds_repetitions(roots[root].path))  # once per root
    stored = cache(lambda: tables.partition_keys(ENERGY_TABLE))  # listed once, if needed
    found: list[str] = []
    for setting in sorted({gpu_tables.setting_of(key) for key in keys}):
        name, experiment, benchmark, run = setting
        try:
            try:
                names = subdirs(os.path.join(roots[name].path, experiment, benchmark, run))
            except FileNotFoundError:
                if not mounted(name):
                    raise  # unmounted: keep what is stored
                names = []  # removed from a root that is there
            candidates = [f"{name}/{experiment}/{benchmark}/{run}/{rep}" for rep in names]
        except (OSError, KeyError):
            candidates = [key for key in stored() if gpu_tables.setting_of(key) == setting]
        found += [key for key in candidates if tables.has_partition(ENERGY_TABLE, key)]
    return sorted(found)


def _energy_of(tables: Tables, keys: list[str]) -> pd.DataFrame:
    """The stored per-repetition energy of the partitions ``keys`` (stored, at least one).

    Raises ``dg.Failure`` naming the partitions stored before the ``data_root``
    column (code version 1), which must be materialized again.
    """
    frame = tables.read_partitions(ENERGY_TABLE, keys)
    if "data_root" in frame.columns and frame["data_root"].notna().all():
        return frame
    outdated = tables.partitions_without(ENERGY_TABLE, keys, "data_root")
    if outdated:
        shown = ", ".join(outdated[:KEYS_SHOWN])
        more = f" and {len(outdated) - KEYS_SHOWN} more" if len(outdated) > KEYS_SHOWN else ""
        raise verdict(
            (
                f"{len(outdated)} stored partition(s) of {ENERGY_TABLE} have no data_root "
                f"(stored by code older than the column): {shown}{more}. Materialize "
                f"{ENERGY_TABLE} again for them (a backfill of those partitions; the UI "
                f"marks them stale), then the tables."),
            metadata={"partitions": dg.MetadataValue.json(outdated)},
        )
    return frame


gpu_setting_energy = dg.AssetSpec(
    "gpu_setting_energy",
    description=(
        "Per setting (benchmark run) of each data root: number of repetitions and mean, "
        "standard deviation, min and max of time and of energy by each method, over the "
        "experiment window. Kept per setting (Delta Lake): a run rewrites the settings of "
        "its repetitions only."
    ),
    deps=[gpu_repetition_energy],
    **WHOLE_TABLE,
    kinds={"pandas", "parquet"},
)

gpu_benchmark_energy = dg.AssetSpec(
    "gpu_benchmark_energy",
    description=(
        "Per benchmark of each data root: the time-energy Pareto front over its settings "
        "and the setting with least energy, least energy-delay product, and least energy "
        "within 10% of the fastest setting's time. Kept per setting: a run rewrites the "
        "benchmarks of its repetitions only. Metadata: energy against time per setting, "
        "for the benchmarks the run recomputed."
    ),
    deps=[gpu_setting_energy],
    **WHOLE_TABLE,
    kinds={"pandas", "parquet"},
)

energy_facts = dg.AssetSpec(
    ["energy_facts", "gpu"],  # each source's rows are its own asset: energy_facts/<source>
    description=(
        "The cross-source energy table (source, entity, component, window in UTC, "
        "duration_s, energy_j, method), kept per entry. This asset writes the GPU-benchmark "
        "rows, a run its repetitions': the experiment window of each repetition, one row "
        "per measuring method. Also writes gpu_repetition_figures (what fact_quality "
        "takes of each repetition, kept per repetition), before the facts."
    ),
    deps=[gpu_repetition_energy],
    **{**WHOLE_TABLE, "group_name": "energy_facts", "tags": {}},
    kinds={"pandas", "parquet"},
)


def setting_energy(gpu_source: GpuBenchmarkSource, tables: Tables, keys: list[str] | None
                   ) -> dg.MaterializeResult:
    """Recompute the settings of the run's repetitions ``keys`` from the stored energy of
    those settings' repetitions, or every setting in a run without partitions (``keys``
    None), and write their rows (``joulehouse/gpu/tables.py``)."""
    candidates = stored_energy_keys_of_run(gpu_source, tables, keys)
    if keys is None and not candidates:
        raise verdict(NO_ENERGY)
    written = gpu_tables.refresh_settings(tables, candidates, partial(_energy_of, tables), keys)
    return dg.MaterializeResult(asset_key=gpu_setting_energy.key, metadata={
        **_refreshed(tables, written, SETTING_SCHEMA, SETTING_TABLE),
        "settings_recomputed": dg.MetadataValue.int(written.recomputed),
        "repetitions_read": dg.MetadataValue.int(written.read),
    })


def benchmark_energy(context: dg.AssetExecutionContext, tables: Tables, keys: list[str] | None
                     ) -> dg.MaterializeResult:
    """Recompute the benchmarks of the run's repetitions ``keys`` (every benchmark in a run
    without partitions: ``keys`` None) from their rows of the per-setting table, write
    their rows, and draw them (at most every ``$JOULEHOUSE_PLOT_EVERY_S``:
    ``assets/plot_cadence.py``)."""
    settings = None if keys is None else pd.DataFrame(
        [gpu_tables.setting_of(key) for key in keys], columns=aggregate.SETTING_KEY)
    written = gpu_tables.refresh_benchmarks(tables, settings)
    return dg.MaterializeResult(asset_key=gpu_benchmark_energy.key, metadata={
        **_refreshed(tables, written, BENCHMARK_SCHEMA, BENCHMARK_TABLE),
        "benchmarks_recomputed": dg.MetadataValue.int(written.recomputed),
        "settings": _settings_shown(written.rows),
        **plot_metadata(context, gpu_benchmark_energy.key, "energy_vs_time",
                        partial(_plots, written.rows), carry=False),
    })


def _refreshed(tables: Tables, written: gpu_tables.Refreshed, schema: pa.DataFrameSchema,
               table: str) -> dict:
    """The column schema of the rows written, and the table's rows after the write (from
    the Delta log's statistics: no row is read)."""
    return {**table_metadata(written.rows, schema),
            "dagster/row_count": dg.MetadataValue.int(gpu_tables.stored_rows(tables, table))}


def _settings_shown(table: pd.DataFrame) -> dg.TableMetadataValue:
    """The first ``SETTINGS_SHOWN`` rows of the benchmark table, the plots' points: the UI
    shows a table metadata value inline, where a plot is behind "[Show Markdown]"."""
    shown = table.reindex(columns=SETTINGS_COLUMNS).head(SETTINGS_SHOWN)
    return dg.MetadataValue.table(
        records=[dg.TableRecord(record) for record in shown.to_dict("records")],
        schema=column_schema({"settings": shown}, lambda name: BENCHMARK_SCHEMA))


def _plots(benchmarks: pd.DataFrame) -> str:
    """Markdown with one PNG scatter per benchmark of ``benchmarks`` (rows of the
    per-benchmark table: those a run recomputed): mean energy against mean time per
    setting."""
    if benchmarks.empty:
        return "no benchmark recomputed"
    images = []
    for (root, experiment, benchmark), group in benchmarks.groupby(aggregate.BENCHMARK_KEY):
        series = [Series(str(run), [row.duration_s], [row.energy_j])
                  for run, row in zip(group["run"], group.itertuples())]
        title = f"{root} / {experiment} / {benchmark}"
        png = scatter_png(series, title=title, x_label="time (s)", y_label="GPU energy (J)")
        images.append(f"### {title}\n\n{markdown_image(png, title)}")
    return "\n\n".join(images)


def facts(context: dg.AssetExecutionContext, gpu_source: GpuBenchmarkSource, tables: Tables,
          keys: list[str] | None) -> dg.MaterializeResult:
    """Write the GPU rows of energy_facts per entry (``assets/facts.py``): the run's
    repetitions' ``keys`` from their stored energy, or, in a run without partitions,
    every stored repetition's still in its tree (:func:`stored_energy_keys`). Their
    ``gpu_repetition_figures`` first, from the same energy read once
    (:func:`write_figures`): two Delta tables, two commits; a step killed between them
    leaves figures newer than the facts, which its next run over those repetitions (or
    a run without partitions) writes again. Every verdict comes before either write."""
    energy_of = cache(lambda owners: _energy_of(tables, list(owners)) if owners
                      else pd.DataFrame())
    stored = cache(lambda: tuple(stored_energy_keys(gpu_source, tables)))
    if keys is None:  # every fact, and its verdicts, before anything is written
        if not stored():
            raise verdict(NO_ENERGY)
        rows = energy_facts_rows(energy_of(stored()))
    figures, skipped = write_figures(tables, keys, stored, energy_of)
    if skipped:
        context.log.warning(
            f"gpu_repetition_figures: {len(skipped)} stored partition(s) of {ENERGY_TABLE} "
            f"have no data_root (stored by code older than the column), written without "
            f"figures (fact_quality gives NaN for them): {', '.join(skipped[:KEYS_SHOWN])}. "
            f"Materialize {ENERGY_TABLE} again for them (a backfill of those partitions).")
    return write_facts(context, tables, energy_facts.key, FACTS_SOURCE, lambda: rows,
                       owned=OwnedFacts(FACTS_OWNERSHIP, ENERGY_TABLE, lambda owners:
                                        energy_facts_rows(energy_of(tuple(owners)))),
                       owners=keys, metadata={
                           "figures_written": dg.MetadataValue.int(figures.entities),
                           "figures_removed": dg.MetadataValue.int(figures.removed),
                           "figures_skipped": dg.MetadataValue.json(skipped[:KEYS_SHOWN]),
                           "figures_skipped_count": dg.MetadataValue.int(len(skipped))})


def write_figures(tables: Tables, keys: list[str] | None, stored: Callable[[], tuple[str, ...]],
                  energy_of: Callable[[tuple[str, ...]], pd.DataFrame]
                  ) -> tuple[entry_sync.Written, list[str]]:
    """Write what fact_quality takes of the run's repetitions ``keys`` (those whose energy
    is stored: ``energy_of`` reads it), kept per repetition (``repetition.FIGURES``), in one
    commit (``entry_sync.replace_owned``); in a run without partitions (``keys`` None), or
    before the table was first written (a warehouse of older code: the migration), those
    of every stored repetition still in its tree (``stored``), compared with the stored
    rows (``entry_sync.sync``: a repetition removed from its tree loses its row, as its
    facts do). Then the table is compacted when due. Returns the write and the stored
    repetitions outside the run the migration left without figures (energy stored
    before the ``data_root`` column: a backfill of them writes theirs), so that such a
    repetition fails no run but its own."""
    skipped: list[str] = []
    if keys is not None and entry_table.is_entry_table(tables, FIGURES.table):
        owners = tuple(key for key in keys if tables.has_partition(ENERGY_TABLE, key))
        written = entry_sync.replace_owned(
            tables, FIGURES, FIGURES.ready(figures_rows(energy_of(owners), tables)), owners,
            FACTS_OWNERSHIP)
    else:
        every = stored()
        if keys is not None:  # the migration: a run's own repetitions are current
            skipped = [key for key in tables.partitions_without(ENERGY_TABLE, every,
                                                                "data_root")
                       if key not in keys]
            every = tuple(key for key in every if key not in skipped)
        written = entry_sync.sync(tables, FIGURES,
                                  FIGURES.ready(figures_rows(energy_of(every), tables)),
                                  FIGURES.stored(tables))
    entry_sync.compact_each(tables, [FIGURES])
    return written, skipped


GPU_TABLES = [gpu_setting_energy, gpu_benchmark_energy, energy_facts]
