"""The GPU pipeline as ONE Dagster step: per-repetition assets, the tables, TAUdb's trials.

Why one step: a step over many partitions either yields its asset's output,
which Dagster records as a materialization of EVERY partition of the run
(the bad one included), or does not, and then Dagster skips every step
downstream of it, for all partitions (as a failed blocking check does).
Neither lets a bad partition fail alone while the others reach the tables
in the same run. So one subsettable multi-asset computes, in order, the
selected assets of the run:

1. ``gpu_validated_frames`` for every partition of the run; a partition whose
   files fail is not stored (what was stored before stays) and its
   ``pandera_valid`` result, scoped to its partition, names file and line;
2. ``gpu_repetition_energy`` for the partitions that passed (the others'
   ``energy_computed`` result says why they were not computed); with both
   selected, each repetition's energy is computed in the same task as its
   frames, from the frames in memory, as ``joulehouse energy gpu`` does (alone,
   from the stored frames);
3. the tables over all repetitions and TAUdb's GPU trials, from what is
   stored (a bad repetition keeps its last good energy there, if any);
4. then, if any partition failed, the step raises ``N of M partition(s)
   failed: ...`` so the run fails and Dagster marks exactly the partitions
   it did not materialize as failed; the good ones are materialized.

The per-repetition work of 1. and 2., and the building of the trials, runs in the
``workers`` resource's processes
(``resources/workers.py``); every event is written here. Each per-repetition
asset reports a materialization per stored partition only
(``assets/reporting.py``). The whole step is in the ``joulehouse_tables``
pool, so two runs never rebuild the tables at once.
"""

from collections.abc import Iterator

import dagster as dg

from assets.gpu import (
    COMPUTED_SPEC,
    GPU_TABLES,
    TABLES_POOL,
    VALID_SPEC,
    benchmark_energy,
    compute_energy,
    energy_facts,
    facts,
    frames_and_energy,
    gpu_benchmark_energy,
    gpu_repetition_energy,
    gpu_setting_energy,
    gpu_validated_frames,
    setting_energy,
    validate_frames,
)
from assets.reporting import (
    STEP_RETRY,
    backfills,
    failure,
    frames_then_energy,
    partition_count,
)
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
        pool=TABLES_POOL,
        description="The GPU pipeline in one step; see assets/pipeline.py.",
    )
    def gpu_pipeline(context: dg.AssetExecutionContext, gpu_source: GpuBenchmarkSource,
                     warehouse: Warehouse, taudb: TaudbResource,
                     workers: StepWorkers) -> Iterator:
        selected = context.selected_asset_keys
        tables = warehouse.tables()
        partitions = partition_count(context)
        with workers.pool(partitions) as executor:
            failed = yield from frames_then_energy(
                context, lambda: validate_frames(context, gpu_source, tables, executor),
                VALID_SPEC,
                lambda skip: compute_energy(context, gpu_source, tables, skip, executor),
                COMPUTED_SPEC,
                together=lambda: frames_and_energy(context, gpu_source, tables, executor,
                                                  workers.workers(partitions)))
            if gpu_setting_energy.key in selected:
                yield setting_energy(context, tables)
            if gpu_benchmark_energy.key in selected:
                yield benchmark_energy(context, tables)
            if energy_facts.key in selected:
                yield facts(context, tables)
            if taudb_trials.key in selected:
                yield load_gpu_trials(context, gpu_source, tables, taudb, executor)
        if failed:
            raise failure(len(context.partition_keys), failed)
