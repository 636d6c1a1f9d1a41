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
transaction. A bad set fails the check ``loads`` of its own partition, naming
file and line, and loads nothing, while the other sets of the run load; the
step then fails, so the run does and the bad set's status is *failed*
(``assets/reporting.py``).
"""

from collections.abc import Iterator

import dagster as dg
import pandas as pd

from assets.gpu import (
    ENERGY_TABLE,
    TABLE_AUTOMATION,
    gpu_repetition_energy,
    gpu_validated_frames,
    stored_energy_keys,
)
from assets.reporting import PartitionBatch, failure, partition_check_spec, single_run_backfills
from joulehouse.gpu.layout import RepetitionRef
from joulehouse.gpu.store import load_repetition, stored_version
from joulehouse.taudb.loader import list_trials, load_trial
from joulehouse.taudb.mapping.gpu import MeasuredRepetition, run_fingerprint, run_trial
from joulehouse.taudb.model import TrialData
from joulehouse.taudb.read import read_trial_source
from joulehouse.warehouse import Warehouse as Tables
from resources import GpuBenchmarkSource
from resources.taudb import TaudbResource, TauProfileSource

GROUP = "taudb"
LOADS_CHECK = "loads"

tau_profile_sets = dg.DynamicPartitionsDefinition(name="tau_profile_sets")

tau_profile_files = dg.AssetSpec(
    "tau_profile_files",
    description=(
        "The files of one TAU profile set as TAU wrote them: profile.N.C.T text profiles "
        "(also in MULTI__<metric> folders) or a packed .ppk file. Written outside Dagster: "
        "the profile landing sensor reports a materialization once no file changed for the "
        "quiet period; the data version is the set's fingerprint."
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


taudb_trials = dg.AssetSpec(
    "taudb_trials",
    description=(
        "One TAUdb trial per GPU benchmark run (threads = repetitions, timers = experiment, "
        "train and epochs, metrics = time and energy by each method, user events = power, "
        "clocks, temperature, utilisation; docs/taudb-mapping.md), built from the stored "
        "validated frames and per-repetition energy. Only runs whose repetitions were stored "
        "anew since their last load are reloaded; a reload replaces the run's trial."
    ),
    group_name=GROUP,
    deps=[gpu_validated_frames, gpu_repetition_energy],
    automation_condition=TABLE_AUTOMATION,
    skippable=True,
    kinds={"taudb"},
    tags={"source": "gpu-benchmark"},
)


def load_gpu_trials(context: dg.AssetExecutionContext, gpu_source: GpuBenchmarkSource,
                    tables: Tables, taudb: TaudbResource) -> dg.MaterializeResult:
    """(Re)load the trial of every GPU run whose stored repetitions changed."""
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
    return dg.MaterializeResult(asset_key=taudb_trials.key, metadata={
        "dagster/row_count": dg.MetadataValue.int(len(trial_ids)),
        "trial_ids": dg.MetadataValue.json(trial_ids),
        "runs_loaded": dg.MetadataValue.int(len(rows)),
        "runs_unchanged": dg.MetadataValue.int(len(trial_ids) - len(rows)),
        "rows_loaded": dg.MetadataValue.json(rows),
        "taudb": dg.MetadataValue.text(db.backend),
    })


LOADS_SPEC = partition_check_spec(
    dg.AssetKey("tau_profile_trials"), LOADS_CHECK, tau_profile_sets,
    "The profile set was read and loaded as a trial (one result per partition; a "
    "failed one names file and line).")


with single_run_backfills() as single_run:
    @dg.asset(
        description=(
            "TAU profile sets (a folder of profile.N.C.T files, MULTI__<metric> folders, or a "
            ".ppk file) landed in the watched folders, each loaded as one TAUdb trial in one "
            "transaction (a reload replaces it). One dynamic partition per set; the trial id "
            "is in each partition's metadata. A bad set fails the check 'loads' of its "
            "partition, naming file and line, and leaves nothing in TAUdb; the others still "
            "load, then the run fails."
        ),
        group_name=GROUP,
        partitions_def=tau_profile_sets,
        backfill_policy=single_run,
        deps=[tau_profile_files],
        check_specs=[LOADS_SPEC],
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

            # TrialData's frames have no pandera schema yet: their columns go undescribed.
            batch = PartitionBatch.run(context, load, lambda name: None)
        for key, trial_id in trial_ids.items():
            batch.stored[key]["taudb/trial_id"] = dg.MetadataValue.int(trial_id)
        yield from batch.results(context, LOADS_SPEC)
        if batch.failed:
            raise failure(len(context.partition_keys), batch.errors())


TAUDB_ASSETS = [tau_profile_files, tau_profile_trials]
