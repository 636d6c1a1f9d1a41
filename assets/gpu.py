"""GPU benchmark assets: from a landed repetition to energy tables.

One dynamic partition per repetition (key ``<root name>/<experiment>/<benchmark>/<run>/<repetition>``,
see ``resources/gpu.py``). The partitioned assets process every partition of
a run in one step (``BackfillPolicy.single_run``) and write Parquet through
``joulehouse.warehouse``; the tables over all repetitions are rebuilt from
the warehouse when their inputs change (``AutomationCondition``).

A bad repetition fails only itself: its error is recorded, the others of the
same run are stored and reported as materialized, and nothing stored for the
bad one is replaced. The partitioned assets then report materializations for
the good partitions only, so the bad one shows as failed in the UI.
"""

from collections.abc import Iterator

import dagster as dg
import pandas as pd

from assets.reporting import PartitionBatch, table_metadata
from joulehouse.gpu import aggregate
from joulehouse.gpu.energy import FACTS_SOURCE, energy_facts_rows, repetition_energy
from joulehouse.gpu.readers import read_repetition
from joulehouse.gpu.schemas import REPETITION_ENERGY_SCHEMA
from joulehouse.gpu.store import load_repetition, save_repetition
from joulehouse.plots import Series, markdown_image, scatter_svg
from joulehouse.validation import validate
from joulehouse.warehouse import Warehouse as Tables
from resources import GpuBenchmarkSource, Warehouse

GROUP = "gpu_benchmarks"
ENERGY_TABLE = "gpu_repetition_energy"
SETTING_TABLE = "gpu_setting_energy"
BENCHMARK_TABLE = "gpu_benchmark_energy"
FACTS_TABLE = "energy_facts"
VALID_CHECK = "pandera_valid"

#: Code version of ``gpu_repetition_energy``: raise it when what a partition stores changes
#: ("2": the ``data_root`` column), so the UI marks partitions stored by older code stale.
ENERGY_CODE_VERSION = "2"
#: Partition keys a failure names in its description (then "and N more").
KEYS_SHOWN = 5

gpu_repetitions = dg.DynamicPartitionsDefinition(name="gpu_repetitions")

gpu_repetition_files = dg.AssetSpec(
    "gpu_repetition_files",
    description=(
        "The raw files of one benchmark repetition (timestamps.csv, gpu-power.csv, "
        "power-external.csv, *_samples.csv, system_info.json) as the writer left them. "
        "Observed by the data-root sensor; the data version is the folder's fingerprint "
        "(names, sizes, mtimes)."
    ),
    group_name=GROUP,
    partitions_def=gpu_repetitions,
    kinds={"csv", "json"},
    tags={"source": "gpu-benchmark"},
)

# Tables over all repetitions: rebuilt when any repetition's energy changes,
# even while some repetition has none (a bad one must not hold the rest back).
TABLE_AUTOMATION = dg.AutomationCondition.eager().without(
    ~dg.AutomationCondition.any_deps_missing()
)

#: What the per-repetition assets share: one dynamic partition per repetition,
#: every partition of a run in one step (``PartitionBatch``), and no output
#: for a partition that failed, so it shows as failed rather than stored.
PER_REPETITION = {
    "group_name": GROUP,
    "partitions_def": gpu_repetitions,
    "backfill_policy": dg.BackfillPolicy.single_run(),
    "output_required": False,
    "tags": {"source": "gpu-benchmark"},
}

#: Concurrency pool of the assets that rebuild a whole table or TAUdb's GPU
#: trials: the instance configs (deploy/) limit it to 1, so two runs never
#: rebuild them at once, whoever launched the runs (sensor, backfill, automation).
TABLES_POOL = "joulehouse_tables"

#: What the assets that rebuild a whole table share: the automation and the pool.
WHOLE_TABLE = {"automation_condition": TABLE_AUTOMATION, "pool": TABLES_POOL}


@dg.asset(
    description=(
        "Every file of a repetition read, converted to SI units and UTC, and validated "
        "with pandera; one Parquet partition per frame under gpu_validated_frames/. A file "
        "that fails validation fails the blocking check 'pandera_valid', naming file and "
        "line; the stored frames of that repetition stay as they were."
    ),
    **PER_REPETITION,
    deps=[gpu_repetition_files],
    check_specs=[dg.AssetCheckSpec(
        VALID_CHECK, asset="gpu_validated_frames", blocking=True,
        description="Every file of the repetition parses and passes its pandera schema.",
    )],
    kinds={"pandas", "parquet", "pandera"},
)
def gpu_validated_frames(
    context: dg.AssetExecutionContext, gpu_source: GpuBenchmarkSource, warehouse: Warehouse
) -> Iterator:
    tables = warehouse.tables()

    def validate(key: str) -> dict[str, pd.DataFrame]:
        root, ref = gpu_source.resolve(key)
        rep = read_repetition(ref, timezone=root.timezone,
                              external_power_unit=root.external_power_unit)
        return save_repetition(tables, key, rep)

    yield from PartitionBatch.run(context, validate).results(context, check_name=VALID_CHECK)


@dg.asset(
    description=(
        "Energy of each repetition per window (experiment, train, each epoch), measured "
        "four ways: the total-energy counter, integrated gpu-power, integrated 50 Hz power "
        "samples and the external meter; with mean powers, gaps, EDP and how far the "
        "methods disagree. One Parquet partition per repetition."
    ),
    **PER_REPETITION,
    deps=[gpu_validated_frames],
    automation_condition=dg.AutomationCondition.eager(),
    code_version=ENERGY_CODE_VERSION,
    kinds={"pandas", "parquet"},
)
def gpu_repetition_energy(
    context: dg.AssetExecutionContext, gpu_source: GpuBenchmarkSource, warehouse: Warehouse
) -> Iterator:
    tables = warehouse.tables()

    def compute(key: str) -> dict[str, pd.DataFrame]:
        root, ref = gpu_source.resolve(key)
        frame = validate(REPETITION_ENERGY_SCHEMA, repetition_energy(
            load_repetition(tables, key, ref), data_root=root.key_prefix,
            max_gap_s=gpu_source.max_gap_s), key)
        tables.write_partition(ENERGY_TABLE, key, frame)
        return {ENERGY_TABLE: frame}

    yield from PartitionBatch.run(context, compute).results(context)


def stored_energy_keys(context: dg.AssetExecutionContext, tables: Tables) -> list[str]:
    """The registered ``gpu_repetitions`` partitions whose energy is stored, in table order.

    Partitions deleted from ``gpu_repetitions`` drop out; a repetition whose
    latest version failed keeps its last good energy.
    """
    registered = set(context.instance.get_dynamic_partitions(gpu_repetitions.name))
    return [key for key in tables.partition_keys(ENERGY_TABLE) if key in registered]


def _stored_energy(context: dg.AssetExecutionContext, warehouse: Warehouse) -> pd.DataFrame:
    """The stored per-repetition energy of every registered partition.

    Raises ``dg.Failure`` naming the partitions stored before the ``data_root``
    column (code version 1), which must be materialized again.
    """
    tables = warehouse.tables()
    keys = stored_energy_keys(context, tables)
    if not keys:
        raise dg.Failure("no per-repetition energy stored yet: materialize gpu_repetition_energy")
    frame = tables.read_partitions(ENERGY_TABLE, keys)
    if "data_root" in frame.columns and frame["data_root"].notna().all():
        return frame
    outdated = tables.partitions_without(ENERGY_TABLE, keys, "data_root")
    if outdated:
        shown = ", ".join(outdated[:KEYS_SHOWN])
        more = f" and {len(outdated) - KEYS_SHOWN} more" if len(outdated) > KEYS_SHOWN else ""
        raise dg.Failure(
            description=(
                f"{len(outdated)} stored partition(s) of {ENERGY_TABLE} have no data_root "
                f"(stored by code older than the column): {shown}{more}. Materialize "
                f"{ENERGY_TABLE} again for them (a backfill of those partitions; the UI "
                f"marks them stale), then this asset."),
            metadata={"partitions": dg.MetadataValue.json(outdated)},
        )
    return frame


@dg.asset(
    description=(
        "Per setting (benchmark run) of each data root: number of repetitions and mean, "
        "standard deviation, min and max of time and of energy by each method, over the "
        "experiment window."
    ),
    group_name=GROUP,
    deps=[gpu_repetition_energy],
    **WHOLE_TABLE,
    kinds={"pandas", "parquet"},
    tags={"source": "gpu-benchmark"},
)
def gpu_setting_energy(
    context: dg.AssetExecutionContext, warehouse: Warehouse
) -> dg.MaterializeResult:
    per_repetition = _stored_energy(context, warehouse)
    table = aggregate.setting_table(per_repetition)
    warehouse.tables().write_table(SETTING_TABLE, table)
    return dg.MaterializeResult(metadata={
        **table_metadata(table),
        "repetitions": dg.MetadataValue.int(
            len(per_repetition.drop_duplicates(["data_root", "repetition"]))),
    })


@dg.asset(
    description=(
        "Per benchmark of each data root: the time-energy Pareto front over its settings "
        "and the setting with least energy, least energy-delay product, and least energy "
        "within 10% of the fastest setting's time. Metadata: energy against time per "
        "setting."
    ),
    group_name=GROUP,
    deps=[gpu_setting_energy],
    **WHOLE_TABLE,
    kinds={"pandas", "parquet"},
    tags={"source": "gpu-benchmark"},
)
def gpu_benchmark_energy(warehouse: Warehouse) -> dg.MaterializeResult:
    tables = warehouse.tables()
    settings = tables.read_table(SETTING_TABLE)
    table = aggregate.benchmark_table(settings)
    tables.write_table(BENCHMARK_TABLE, table)
    return dg.MaterializeResult(metadata={
        **table_metadata(table),
        "energy_vs_time": dg.MetadataValue.md(_plots(settings)),
    })


def _plots(settings: pd.DataFrame) -> str:
    """Markdown with one SVG scatter per benchmark of each data root: mean energy against
    mean time per setting."""
    images = []
    for (root, experiment, benchmark), group in settings.groupby(aggregate.BENCHMARK_KEY):
        series = [Series(str(run), [row.duration_s_mean], [row.gpu_energy_j_mean])
                  for run, row in zip(group["run"], group.itertuples())]
        title = f"{root} / {experiment} / {benchmark}"
        svg = scatter_svg(series, title=title, x_label="time (s)", y_label="GPU energy (J)")
        images.append(f"### {title}\n\n{markdown_image(svg, title)}")
    return "\n\n".join(images)


@dg.asset(
    description=(
        "The cross-source energy table (source, entity, component, window in UTC, "
        "duration_s, energy_j, method). This asset writes the GPU-benchmark rows: the "
        "experiment window of each repetition, one row per measuring method."
    ),
    group_name="energy_facts",
    deps=[gpu_repetition_energy],
    **WHOLE_TABLE,
    kinds={"pandas", "parquet"},
)
def energy_facts(
    context: dg.AssetExecutionContext, warehouse: Warehouse
) -> dg.MaterializeResult:
    rows = energy_facts_rows(_stored_energy(context, warehouse))
    warehouse.tables().write_partition(FACTS_TABLE, FACTS_SOURCE, rows)
    return dg.MaterializeResult(metadata={
        **table_metadata(rows),
        "sources": dg.MetadataValue.json(sorted(rows["source"].unique().tolist())),
    })


GPU_PIPELINE = [gpu_validated_frames, gpu_repetition_energy, gpu_setting_energy,
                gpu_benchmark_energy, energy_facts]
GPU_ASSETS = [gpu_repetition_files, *GPU_PIPELINE]
