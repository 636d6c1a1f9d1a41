"""The GPU pipeline as ONE Dagster step: per-repetition assets, the tables, TAUdb's trials.

The run's partitions are days of data roots (``assets/gpu.py``): the repetitions its
config names per day, a day named by none read whole (``assets/blocks.RunDays``); each
repetition's work is done on its own, each day reported as one partition
(``assets/blocks.py``).

Why one step: a step over many partitions either yields its asset's output,
which Dagster records as a materialization of EVERY partition of the run
(the bad one included), or does not, and then Dagster skips every step
downstream of it, for all partitions (as a failed blocking check does).
Neither lets a bad partition fail alone while the others reach the tables
in the same run. So one subsettable multi-asset computes, in order, the
selected assets of the run:

1. ``gpu_validated_frames`` for every repetition of the run; a repetition whose
   files fail is not stored (what was stored before stays) and fails its day, whose
   ``pandera_valid`` result names its file and line; the day's other repetitions
   are stored;
2. ``gpu_repetition_energy`` for the repetitions that passed (a day with one that
   did not: its ``energy_computed`` result says why it was not computed); with both
   selected, each repetition's energy is computed in the same task as its
   frames, from the frames in memory, as ``joulehouse energy gpu`` does (alone,
   from the stored frames);
3. the tables over all repetitions and TAUdb's GPU trials, from what is
   stored (a bad repetition keeps its last good energy there, if any);
4. each day of the run observed as a partition of ``gpu_repetition_files`` naming
   its repetitions that failed (``assets/blocks.block_outcomes``), which the sensor
   rechecks with the day's next hand-out;
5. then, if any day failed, the step raises ``N of M partition(s)
   failed: ...`` so the run fails and Dagster marks exactly the days
   it did not materialize as failed; the good ones are materialized.

The per-repetition work of 1. and 2., and the building of the trials, runs in the
``workers`` resource's processes
(``resources/workers.py``); every event is written here. Each per-repetition
asset reports a materialization per stored partition only
(``assets/reporting.py``). The whole step is in the GPU's pool
(``tables_pool("gpu")``), so two runs never rebuild the GPU tables at once.
"""

from collections.abc import Iterator

import dagster as dg

from assets.blocks import RunDays, block_outcomes
from assets.gpu import (
    COMPUTED_SPEC,
    GPU_TABLES,
    VALID_SPEC,
    GpuHandOut,
    benchmark_energy,
    energy_facts,
    facts,
    gpu_benchmark_energy,
    gpu_repetition_energy,
    gpu_repetition_files,
    gpu_setting_energy,
    gpu_validated_frames,
    per_repetition_assets,
    repetition_days_of,
    setting_energy,
)
from assets.pools import tables_pool
from assets.reporting import STEP_RETRY, backfills, failure, run_partitions
from assets.taudb import load_gpu_trials, taudb_trials
from resources import GpuBenchmarkSource, StepWorkers, TaudbResource, Warehouse

with backfills() as single_run:
    @dg.multi_asset(
        retry_policy=STEP_RETRY,
        name="gpu_pipeline",
        specs=[gpu_validated_frames, gpu_repetition_energy, *GPU_TABLES, taudb_trials],
        check_specs=[VALID_SPEC, COMPUTED_SPEC],
        can_subset=True,
        backfill_policy=single_run,
        pool=tables_pool("gpu"),
        description="The GPU pipeline in one step; see assets/pipeline.py.",
    )
    def gpu_pipeline(context: dg.AssetExecutionContext, config: GpuHandOut,
                     gpu_source: GpuBenchmarkSource, warehouse: Warehouse,
                     taudb: TaudbResource, workers: StepWorkers) -> Iterator:
        selected = context.selected_asset_keys
        tables = warehouse.tables()
        run = RunDays.of(context, config, repetition_days_of(gpu_source))
        keys = run.keys if run_partitions(context) is not None else None
        repetitions = None if keys is None else len(keys)
        with workers.pool(repetitions) as executor:
            failed, bad = yield from per_repetition_assets(
                context, run, gpu_source, tables, executor, workers.workers(repetitions))
            if gpu_validated_frames.key in selected:  # only a run that read them again
                yield from block_outcomes(gpu_repetition_files.key, run.entries, bad)
            if gpu_setting_energy.key in selected:
                yield setting_energy(gpu_source, tables, keys)
            if gpu_benchmark_energy.key in selected:
                yield benchmark_energy(context, tables, keys)
            if energy_facts.key in selected:
                yield facts(context, gpu_source, tables, keys)
            if taudb_trials.key in selected:
                yield load_gpu_trials(context, gpu_source, tables, taudb, executor, keys)
        if failed:
            raise failure(len(context.partition_keys), failed)
