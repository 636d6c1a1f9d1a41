"""TAUdb trials: GPU benchmark runs from the warehouse, and TAU profile sets as a source.

``taudb_trials`` keeps one trial per GPU benchmark run (mapping:
``docs/taudb-mapping.md``). It follows the per-repetition energy eagerly and
reloads only the runs whose stored repetitions changed: a run's fingerprint
digests, per repetition, the size and mtime of its stored validated-frames
manifest and energy partition (rewritten on every successful store), and is
compared with the fingerprint saved in the trial's primary metadata. A
reload replaces the run's trial (same source_key: the run folder).

``tau_profile_trials`` loads TAU profile sets (one dynamic partition each,
registered by the landing sensor), many per run; each set is one trial in one
transaction. A bad set fails the blocking check ``loads`` naming file and
line and loads nothing, while the other sets of the run load.
"""

from collections.abc import Iterator

import dagster as dg
import pandas as pd

from assets.gpu import (
    ENERGY_TABLE,
    WHOLE_TABLE,
    gpu_repetition_energy,
    gpu_validated_frames,
    stored_energy_keys,
)
from assets.reporting import PartitionBatch
from joulehouse.gpu.layout import RepetitionRef
from joulehouse.gpu.store import load_repetition, stored_version
from joulehouse.taudb.loader import list_trials, load_trial
from joulehouse.taudb.mapping.gpu import MeasuredRepetition, run_fingerprint, run_trial
from joulehouse.taudb.model import TrialData
from joulehouse.taudb.read import read_trial_source
from resources import GpuBenchmarkSource, Warehouse
from resources.taudb import TaudbResource, TauProfileSource

GROUP = "taudb"
LOADS_CHECK = "loads"

tau_profile_sets = dg.DynamicPartitionsDefinition(name="tau_profile_sets")

tau_profile_files = dg.AssetSpec(
    "tau_profile_files",
    description=(
        "The files of one TAU profile set as TAU wrote them: profile.N.C.T text profiles "
        "(also in MULTI__<metric> folders) or a packed .ppk file. Found by the profile "
        "landing sensor once no file changed for the quiet period."
    ),
    group_name=GROUP,
    partitions_def=tau_profile_sets,
    kinds={"tau"},
    tags={"source": "tau-profiles"},
)


def _trial_rows(trial: TrialData) -> dict[str, int]:
    return {"threads": len(trial.threads), "timers": len(trial.timers),
            "timer_values": len(trial.timer_values), "counters": len(trial.counters),
            "metadata": len(trial.metadata)}


@dg.asset(
    description=(
        "One TAUdb trial per GPU benchmark run (threads = repetitions, timers = experiment, "
        "train and epochs, metrics = time and energy by each method, user events = power, "
        "clocks, temperature, utilisation; docs/taudb-mapping.md), built from the stored "
        "validated frames and per-repetition energy. Only runs whose repetitions were stored "
        "anew since their last load are reloaded; a reload replaces the run's trial."
    ),
    group_name=GROUP,
    deps=[gpu_validated_frames, gpu_repetition_energy],
    **WHOLE_TABLE,
    kinds={"taudb"},
    tags={"source": "gpu-benchmark"},
)
def taudb_trials(context: dg.AssetExecutionContext, gpu_source: GpuBenchmarkSource,
                 warehouse: Warehouse, taudb: TaudbResource) -> dg.MaterializeResult:
    tables = warehouse.tables()
    runs: dict[str, dict[str, RepetitionRef]] = {}  # run key -> partition key -> repetition
    for key in stored_energy_keys(context, tables):
        root, ref = gpu_source.resolve(key)
        runs.setdefault(gpu_source.run_key(root, ref), {})[key] = ref
    trial_ids, rows = {}, {}
    with taudb.open() as db:
        loaded = {trial["source_key"]: trial for trial in list_trials(db)}
        for run, members in sorted(runs.items()):
            run_dir = next(iter(members.values())).run_dir.resolve()
            versions = {key: stored_version(tables, key, ENERGY_TABLE) for key in members}
            previous = loaded.get(str(run_dir))
            if previous and previous["fingerprint"] == run_fingerprint(
                    {ref.key: versions[key] for key, ref in members.items()}):
                trial_ids[run] = previous["id"]
                continue
            trial = run_trial(run_dir, [
                MeasuredRepetition(load_repetition(tables, key, ref),
                                   tables.read_partitions(ENERGY_TABLE, [key]), versions[key])
                for key, ref in members.items()])
            trial_ids[run] = load_trial(db, trial)
            rows[run] = _trial_rows(trial)
            context.log.info(f"{run}: trial {trial_ids[run]} ({len(members)} repetitions)")
    return dg.MaterializeResult(metadata={
        "dagster/row_count": dg.MetadataValue.int(len(trial_ids)),
        "trial_ids": dg.MetadataValue.json(trial_ids),
        "runs_loaded": dg.MetadataValue.int(len(rows)),
        "runs_unchanged": dg.MetadataValue.int(len(trial_ids) - len(rows)),
        "rows_loaded": dg.MetadataValue.json(rows),
        "taudb": dg.MetadataValue.text(db.backend),
    })


@dg.asset(
    description=(
        "TAU profile sets (a folder of profile.N.C.T files, MULTI__<metric> folders, or a "
        ".ppk file) landed in the watched folders, each loaded as one TAUdb trial in one "
        "transaction (a reload replaces it). One dynamic partition per set; the trial id "
        "is in each partition's metadata. A bad set fails the blocking check 'loads', "
        "naming file and line, and leaves nothing in TAUdb; the others still load."
    ),
    group_name=GROUP,
    partitions_def=tau_profile_sets,
    backfill_policy=dg.BackfillPolicy.single_run(),
    deps=[tau_profile_files],
    check_specs=[dg.AssetCheckSpec(
        LOADS_CHECK, asset="tau_profile_trials", blocking=True,
        description="Every profile set of the run was read and loaded as a trial.")],
    output_required=False,
    kinds={"taudb"},
    tags={"source": "tau-profiles"},
)
def tau_profile_trials(context: dg.AssetExecutionContext, tau_profiles: TauProfileSource,
                       taudb: TaudbResource) -> Iterator:
    trial_ids: dict[str, int] = {}
    with taudb.open() as db:

        def load(key: str) -> dict[str, pd.DataFrame]:
            trial = read_trial_source(tau_profiles.resolve(key))
            trial_ids[key] = load_trial(db, trial)
            return {"threads": trial.threads, "timer_values": trial.timer_values,
                    "counters": trial.counters}

        batch = PartitionBatch.run(context, load)
    for key, trial_id in trial_ids.items():
        batch.stored[key]["taudb/trial_id"] = dg.MetadataValue.int(trial_id)
    yield from batch.results(context, check_name=LOADS_CHECK)


TAUDB_ASSETS = [tau_profile_files, taudb_trials, tau_profile_trials]
