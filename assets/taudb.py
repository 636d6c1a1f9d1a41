"""TAUdb trials: GPU runs and PowerAPI sensor days from the warehouse, TAU profile sets.

``taudb_trials`` keeps one trial per GPU benchmark run (mapping:
``docs/taudb-mapping.md``). It follows the per-repetition energy eagerly and
reloads only the runs whose stored repetitions changed: a run's fingerprint
digests, per repetition, the size and mtime of its stored validated-frames
manifest and energy partition (rewritten on every successful store), and is
compared with the fingerprint saved in the trial's primary metadata. A
reload replaces the run's trial (same source_key: the run folder).

``tau_profile_trials`` loads TAU profile sets, one dynamic partition per landing folder
and UTC day of the sets' start (``tau_profile_days``, ``<landing name>/<YYYY-MM-DD>``,
``joulehouse/taudb/days.py``): a set a minute is 3,650 partitions in a decade, not 5.3 M
(docs/ARCHITECTURE.md, "Partitions over a decade"). The landing sensor
(``sensors/tau_profiles.py``) names the sets it hands out per day in the run config
(:class:`TauHandOut`): the run loads those alone; a day it does not name (a backfill, a
materialization from the UI, the weekly re-validation) is read whole. Each set is still
one trial of its own, keyed by its set (source key: its resolved path), loaded in its own
transaction (:func:`load_entry_trials`); a set whose content digest equals its stored
trial's is not loaded again. A bad set fails the check ``loads`` of its day, naming file
and line, and loads nothing, while the day's other sets load; the step then fails, so
the run does and the day's status is *failed* (``assets/reporting.py``), and it records
per day which sets failed (``assets/blocks.block_outcomes``), so the day's next hand-out
rechecks them. What TAU's rules skip in a set's text profiles (timer lines with 0 calls,
user events with 0 samples) makes its day's check a WARN, one record each with the
count, stored per set in the warehouse table ``left_out`` (partition
``tau/read/<set key>``).

``powerapi_trials`` keeps one trial per PowerAPI sensor and UTC day, from the
PowerAPI pipeline's stored tables (the window table ``powerapi_window_energy``, and the
power reports of every stored entry still landed, a report landed twice kept once). It
reads only the sensor-days whose windows or power reports changed since the trials were
last loaded (``joulehouse/powerapi/trial_days.py``: a hidden state, as the accounting
keeps; every sensor-day on the first run, without a state, or when the window setting,
the TAUdb or the warehouse's location changed), and a day's fingerprint digests its windows' and power reports' values, so
only the days that changed are rebuilt, each replacing its trial. It runs in a pool of its
own (``TRIALS_POOL``, limit 1), never beside another of its runs: two runs at once could
each load a day from different inputs and the one whose state is written last may not be
the one whose trial stays. It runs beside the PowerAPI pipeline step, which writes what
it reads: its state records what it read no later than it read it (each table's
snapshot before its rows), so a write in between is read again by the next run. In
PowerAPI's pool, the source's runs waited behind its runs (the soak,
benchmarks/README.md).

What every trial asset shares: :class:`TrialLoads` (a trial replaces those of
its source key; one whose fingerprint equals the stored trial's, primary
metadata, is not loaded again, and not even built when its fingerprint is
known beforehand; :meth:`TrialLoads.outcome` and :func:`trials_metadata`: what a block
of them shows). GEOPM reports use them too (``assets/geopm.py``).
"""

from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Executor
from contextlib import suppress
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import dagster as dg
import pandas as pd

from assets.blocks import DayHandOut, Outcome, RunDays, block_outcomes, hand_out_field
from assets.follow_cadence import at_most_every
from assets.gpu import (
    ENERGY_TABLE,
    TABLE_AUTOMATION,
    gpu_repetition_energy,
    gpu_validated_frames,
    stored_energy_keys_of_run,
)
from assets.pools import TRIALS_POOL
from assets.powerapi import WINDOW_TABLE as POWERAPI_WINDOW_TABLE
from assets.powerapi import (
    powerapi_validated_frames,
    powerapi_window_energy,
)
from assets.reporting import (
    STEP_RETRY,
    Stored,
    backfills,
    failure,
    partition_check_spec,
    verdict,
)
from joulehouse import entry_table
from joulehouse.errors import InputError
from joulehouse.gpu.layout import RepetitionRef
from joulehouse.gpu.store import load_repetition, stored_version
from joulehouse.landing import StillLanded
from joulehouse.leftout import store_left_out, stored_left_out
from joulehouse.powerapi.trial_days import SensorDay, trial_days
from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.days import profile_set_start_day
from joulehouse.taudb.landing import profile_set_files
from joulehouse.taudb.loader import load_prepared, prepare_trial, trials_by_source_key
from joulehouse.taudb.mapping.gpu import (
    TRIAL_FRAMES,
    MeasuredRepetition,
    run_fingerprint,
    run_trial,
)
from joulehouse.taudb.mapping.powerapi import session_trials
from joulehouse.taudb.model import TrialData
from joulehouse.taudb.profiles import LEFT_OUT_SOURCE
from joulehouse.taudb.read import read_trial_source
from joulehouse.warehouse import Warehouse as Tables
from resources import GpuBenchmarkSource, PowerapiSource, StepWorkers, Warehouse
from resources.taudb import TaudbResource, TauProfileSource
from resources.workers import in_order

GROUP = "taudb"
#: Trials (GPU runs, partitions) built in the worker processes ahead of their loads (each
#: held whole).
TRIALS_AHEAD = 4
LOADS_CHECK = "loads"

tau_profile_days = dg.DynamicPartitionsDefinition(name="tau_profile_days")


class TauHandOut(DayHandOut):
    """The profile sets the landing sensor handed out, by day partition (``DayHandOut``)."""

    OP: ClassVar[str] = "tau_profile_trials"
    sets: dict[str, list[str]] = hand_out_field(
        "the keys (<landing name>/<set name>) of the profile sets")


tau_profile_files = dg.AssetSpec(
    "tau_profile_files",
    description=(
        "TAU profile sets as TAU wrote them (folders of profile.N.C.T text profiles, also in "
        "MULTI__<metric> folders, or packed .ppk files), one partition per landing folder "
        "and UTC day of the sets' start (their first thread's Starting Timestamp). Found by "
        "the profile landing sensor once no file of a set changed for the quiet period; one "
        "materialization per day per tick that handed out sets of it (metadata 'sets': "
        "their keys and fingerprints; data version: a digest of them)."
    ),
    group_name=GROUP,
    partitions_def=tau_profile_days,
    kinds={"tau"},
    tags={"source": "tau-profiles"},
)


def trial_frames(trial: TrialData) -> dict[str, pd.DataFrame]:
    """The frames of ``trial`` a materialization reports (rows and columns)."""
    return {"threads": trial.threads, "timer_values": trial.timer_values,
            "counters": trial.counters}


@dataclass
class TrialLoads:
    """The trials one step loads into one TAUdb. Each replaces the trials of its source key;
    one whose fingerprint equals the stored trial's (primary metadata) is not loaded again.

    Only the source keys the step may load are looked up (:meth:`look_up`, in batches; a
    key not looked up beforehand is looked up alone when its trial is built), never every
    trial of TAUdb.

    ``ids``: name (a run, a partition key, a sensor's day) -> trial id, loaded or unchanged;
    ``rows``: name -> rows of each table, for the trials loaded by this step only.
    """

    db: TaudbDatabase
    stored: dict[str, dict | None] = field(default_factory=dict)  # source_key -> id, fingerprint
    ids: dict[str, int] = field(default_factory=dict)
    rows: dict[str, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def into(cls, db: TaudbDatabase, source_keys: Iterable[str] = ()) -> "TrialLoads":
        """Loads into ``db``, the stored trials of ``source_keys`` looked up now."""
        loads = cls(db)
        loads.look_up(source_keys)
        return loads

    def look_up(self, source_keys: Iterable[str]) -> None:
        """Read the stored trial (id, fingerprint) of each of ``source_keys`` not read yet."""
        wanted = {key for key in source_keys if key not in self.stored}
        found = trials_by_source_key(self.db, wanted)
        self.stored |= {key: found.get(key) for key in wanted}

    def load(self, name: str, build: Callable[[], TrialData],
             known: tuple[str, str] | None = None) -> TrialData | None:
        """Load ``build()`` unless the stored trial of its source key has its fingerprint;
        ``known``: the (source key, fingerprint) it will have, when cheaper than building
        it, so an unchanged trial is not even built. Returns the trial loaded, or None when
        unchanged. An error of ``build`` or of the load leaves TAUdb as it was."""
        outcome = self.load_many([(name, build, known)])[name]
        if isinstance(outcome, InputError):
            raise outcome
        return outcome

    def load_many(self, items: Iterable[tuple[str, Callable[[], TrialData],
                                              tuple[str, str] | None]]
                  ) -> dict[str, TrialData | None | InputError]:
        """:meth:`load` of each ``(name, build, known)``, the trials that changed written in
        ONE transaction (``joulehouse.taudb.loader.load_prepared``: many small trials cost
        one transaction and one bulk write per table). Name -> the trial loaded, None when
        unchanged, or the InputError of its build or rows: that trial loads nothing, the
        others load. Any other error (the database's) loads none of them."""
        outcomes: dict[str, TrialData | None | InputError] = {}
        prepared = []
        for name, build, known in items:
            try:
                if known is not None and self.unchanged(name, *known):
                    outcomes[name] = None
                    continue
                trial = build()
                if self.unchanged(name, trial.source_key, trial.fingerprint):
                    outcomes[name] = None
                    continue
                prepared.append((name, prepare_trial(trial)))
                outcomes[name] = trial  # in the order of ``items``
            except InputError as err:
                outcomes[name] = err
        ids = load_prepared(self.db, [one for _, one in prepared])
        for (name, one), trial_id in zip(prepared, ids, strict=True):
            trial = one.trial
            self.ids[name] = trial_id
            self.stored[trial.source_key] = {"id": trial_id, "fingerprint": trial.fingerprint}
            self.rows[name] = {"threads": len(trial.threads), "timers": len(trial.timers),
                               "timer_values": len(trial.timer_values),
                               "counters": len(trial.counters), "metadata": len(trial.metadata)}
        return outcomes

    def unchanged(self, name: str, source_key: str, fingerprint: str) -> bool:
        """Whether the stored trial of ``source_key`` has ``fingerprint``: then it is
        ``name``'s trial (in ``ids``) and nothing is loaded. An empty fingerprint (none
        could be taken: a folder that cannot be listed) is never unchanged."""
        if not fingerprint:
            return False
        self.look_up([source_key])
        previous = self.stored[source_key]
        if previous is None or previous["fingerprint"] != fingerprint:
            return False
        self.ids[name] = previous["id"]
        return True

    def outcome(self, name: str, trial: TrialData | None) -> Stored:
        """What loading ``name``'s ``trial`` (None: unchanged, nothing loaded) stored, as an
        entry of a block reports it (``assets/blocks.py``): the trial's frames, what it left
        out, metadata ``trial_id`` and ``loaded``."""
        return Stored.of(trial_frames(trial) if trial is not None else {},
                         trial.left_out if trial is not None else [],
                         trial_id=self.ids[name], loaded=trial is not None)

    def metadata(self, what: str) -> dict[str, Any]:
        """The metadata of a step that loaded trials of ``what`` (runs, days): trial ids,
        how many were loaded and unchanged, the rows loaded, the backend."""
        return {
            "dagster/row_count": dg.MetadataValue.int(len(self.ids)),
            "trial_ids": dg.MetadataValue.json(self.ids),
            f"{what}_loaded": dg.MetadataValue.int(len(self.rows)),
            f"{what}_unchanged": dg.MetadataValue.int(len(self.ids) - len(self.rows)),
            "rows_loaded": dg.MetadataValue.json(self.rows),
            "taudb": dg.MetadataValue.text(self.db.backend),
        }


def load_entry_trials(db: TaudbDatabase, keys: Iterable[str], build: Callable[..., TrialData],
                      arguments: Callable[[str], tuple], executor: Executor,
                      source_key: Callable[[str], str]) -> dict[str, Outcome]:
    """Entry -> the load of its trial ``build(*arguments(key))`` (:meth:`TrialLoads.outcome`),
    or its InputError, for each of ``keys``, each loaded in its own transaction in key
    order, the stored trials of their ``source_key`` looked up in one batch first. The
    trials are built in ``executor`` (a module-level ``build``, picklable arguments:
    worker processes), :data:`TRIALS_AHEAD` ahead of the loads (``in_order``: the trials
    held at once stay bounded). An InputError of one entry (from ``arguments``, ``build``
    or its load) loads nothing for it; the others go on."""
    outcomes: dict[str, Outcome] = {}
    calls: dict[str, tuple] = {}  # key -> arguments of its build, in key order
    for key in sorted(keys):
        try:
            calls[key] = arguments(key)
        except InputError as err:
            outcomes[key] = err
    wanted = []
    for key in calls:
        with suppress(InputError, OSError):  # its build raises it
            wanted.append(source_key(key))
    loads = TrialLoads.into(db, wanted)
    for key, future in zip(calls, in_order(executor, build, calls.values(), ahead=TRIALS_AHEAD)):
        try:
            outcomes[key] = loads.outcome(key, loads.load(key, future.result))
        except InputError as err:
            outcomes[key] = err
    return outcomes


def trials_metadata(what: str) -> Callable[[str, Mapping[str, Stored]], dict[str, Any]]:
    """What a block's trials partition shows of its ``what`` (e.g. ``"reports"``) loaded in
    the run (:meth:`TrialLoads.outcome`): each one's trial id, how many were loaded and how
    many were current already."""

    def metadata(block: str, done: Mapping[str, Stored]) -> dict[str, Any]:
        loaded = sum(1 for stored in done.values() if stored.metadata["loaded"])
        return {"trial_ids": dg.MetadataValue.json(
                    {key: stored.metadata["trial_id"] for key, stored in sorted(done.items())}),
                f"{what}_loaded": dg.MetadataValue.int(loaded),
                f"{what}_unchanged": dg.MetadataValue.int(len(done) - loaded)}

    return metadata


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


def _run_trial(tables: Tables, run_dir: Path, members: dict[str, RepetitionRef],
               versions: dict[str, str]) -> TrialData:
    """The trial of one GPU run from its repetitions' stored frames and energy."""
    return run_trial(run_dir, [
        MeasuredRepetition(load_repetition(tables, key, ref, frames=TRIAL_FRAMES),
                           tables.read_partitions(ENERGY_TABLE, [key]), versions[key])
        for key, ref in members.items()])


def load_gpu_trials(context: dg.AssetExecutionContext, gpu_source: GpuBenchmarkSource,
                    tables: Tables, taudb: TaudbResource, executor: Executor,
                    keys: list[str] | None) -> dg.MaterializeResult:
    """(Re)load the trial of every GPU run whose stored repetitions changed, of the run's
    repetitions ``keys`` (None: of every stored one, ``stored_energy_keys_of_run``): the
    trials are built from the stored frames in ``executor`` (a few ahead of the loads) and
    loaded here, one transaction each, in run order."""
    runs: dict[str, dict[str, RepetitionRef]] = {}  # run key -> repetition key -> repetition
    for key in stored_energy_keys_of_run(gpu_source, tables, keys):
        root, ref = gpu_source.resolve(key)
        runs.setdefault(gpu_source.run_key(root, ref), {})[key] = ref
    with taudb.open() as db:
        loads = TrialLoads.into(db, (str(next(iter(members.values())).run_dir.resolve())
                                     for members in runs.values()))
        known, builds = {}, {}
        for run, members in sorted(runs.items()):
            versions = {key: stored_version(tables, key, ENERGY_TABLE) for key in members}
            run_dir = next(iter(members.values())).run_dir.resolve()
            known[run] = (str(run_dir), run_fingerprint(
                {ref.key: versions[key] for key, ref in members.items()}))
            if not loads.unchanged(run, *known[run]):
                builds[run] = (tables, run_dir, members, versions)
        for run, built in zip(builds, in_order(executor, _run_trial, builds.values(),
                                               ahead=TRIALS_AHEAD)):
            if loads.load(run, built.result, known[run]) is not None:
                context.log.info(f"{run}: trial {loads.ids[run]} ({len(runs[run])} repetitions)")
    return dg.MaterializeResult(asset_key=taudb_trials.key, metadata=loads.metadata("runs"))


LOADS_SPEC = partition_check_spec(
    dg.AssetKey("tau_profile_trials"), LOADS_CHECK, tau_profile_days,
    "Every profile set of the day processed in the run was read and loaded as a trial, or "
    "its trial is current (one result per day; a failed one names each failed set, the "
    "first with file and line).")


with backfills() as single_run:
    @dg.asset(
        retry_policy=STEP_RETRY,
        description=(
            "TAU profile sets (a folder of profile.N.C.T files, MULTI__<metric> folders, or a "
            ".ppk file) landed in the watched folders, each loaded as one TAUdb trial in one "
            "transaction (a reload replaces it). One dynamic partition per landing folder and "
            "UTC day of the sets' start; a run loads the sets its config names per day, a day "
            "named by none whole. Each day's metadata has its sets' trial ids. A bad set fails "
            "the check 'loads' of its day, naming file and line, and leaves nothing in TAUdb; "
            "the day's other sets still load, then the run fails. What TAU's rules skip "
            "(timer lines with 0 calls, user events with 0 samples) makes the check a WARN, "
            "with the counts."
        ),
        group_name=GROUP,
        partitions_def=tau_profile_days,
        backfill_policy=single_run,
        deps=[tau_profile_files],
        check_specs=[LOADS_SPEC],
        output_required=False,
        kinds={"taudb"},
        tags={"source": "tau-profiles"},
    )
    def tau_profile_trials(context: dg.AssetExecutionContext, config: TauHandOut,
                           tau_profiles: TauProfileSource, taudb: TaudbResource,
                           warehouse: Warehouse, workers: StepWorkers) -> Iterator:
        run = RunDays.of_landings(context, config, tau_profiles.landings(), profile_set_files,
                                  profile_set_start_day, "TAU profile")
        with taudb.open() as db, workers.pool(len(run.keys)) as executor:
            outcomes = load_entry_trials(
                db, run.keys, read_trial_source, lambda key: (tau_profiles.resolve(key),),
                executor, lambda key: str(tau_profiles.resolve(key).resolve()))
        outcomes = profile_sets_left_out(warehouse.tables(), outcomes)
        batch = run.batch(context, outcomes, lambda name: None, trials_metadata("sets"), {},
                          entry="profile set")
        yield from batch.results(context, LOADS_SPEC)
        yield from block_outcomes(tau_profile_files.key, run.entries, {
            key for key, outcome in outcomes.items() if isinstance(outcome, InputError)})
        if batch.failed:
            raise failure(len(context.partition_keys), batch.errors())


def profile_sets_left_out(tables: Tables, outcomes: Mapping[str, Outcome]
                          ) -> dict[str, Outcome]:
    """``outcomes`` with what each profile set loaded left out (TAU's rules: timer lines
    with 0 calls, user events with 0 samples) stored in the warehouse table ``left_out``
    (partition ``tau/read/<set key>``, in place of the earlier); a set not read again,
    being unchanged, leaves out what is stored, which its day's check says again."""
    now = pd.Timestamp.now(tz="UTC")
    said: dict[str, Outcome] = {}
    for key, outcome in outcomes.items():
        if isinstance(outcome, Stored) and not outcome.metadata["loaded"]:
            outcome = replace(outcome, left_out=stored_left_out(tables, LEFT_OUT_SOURCE,
                                                                "read", key))
        elif isinstance(outcome, Stored):
            store_left_out(tables, LEFT_OUT_SOURCE, "read", key, outcome.left_out, now=now)
        said[key] = outcome
    return said


# --- PowerAPI: one trial per sensor and UTC day ---------------------------------------------

def _day_trial(day: SensorDay, **settings) -> TrialData:
    """The one trial of a sensor's day (``session_trials`` of its rows alone)."""
    [trial] = session_trials(day.windows, day.power, **settings)
    return trial


#: The tables' automation, once the window table has been stored (before that, e.g. the first
#: run failed on a landing's only file being bad, a new frames partition would start a run
#: whose only outcome is the verdict "no PowerAPI window energy stored yet"), at most every
#: few minutes (``assets/follow_cadence.py``): each request is a run that reads every
#: changed sensor-day whole.
POWERAPI_TRIALS_AUTOMATION = at_most_every((
    TABLE_AUTOMATION & ~dg.AutomationCondition.any_deps_match(dg.AutomationCondition.missing())
    .allow(dg.AssetSelection.assets(powerapi_window_energy.key))
).with_label("eager, once the window table is stored"))


@dg.asset(
    retry_policy=STEP_RETRY,
    description=(
        "One TAUdb trial per PowerAPI sensor and UTC day (threads = targets, one timer per "
        "window, metrics = time and measured and estimated energy, user events = power and "
        "the estimates' error; docs/taudb-mapping.md), from the stored window table and "
        "power reports of every stored entry still landed (a report landed twice counts "
        "once). "
        "Only the days whose windows or power reports changed since the last load are read "
        "(every day on the first run), and rebuilt where they differ; a rebuild replaces "
        "the day's trial. A window table stored empty loads nothing and succeeds."
    ),
    group_name=GROUP,
    deps=[powerapi_validated_frames, powerapi_window_energy],
    automation_condition=POWERAPI_TRIALS_AUTOMATION,
    pool=TRIALS_POOL,
    kinds={"taudb"},
    tags={"source": "powerapi"},
)
def powerapi_trials(context: dg.AssetExecutionContext, powerapi_source: PowerapiSource,
                    warehouse: Warehouse, taudb: TaudbResource) -> dg.MaterializeResult:
    tables = warehouse.tables()
    if (not entry_table.is_entry_table(tables, POWERAPI_WINDOW_TABLE)
            and tables.read_table(POWERAPI_WINDOW_TABLE).empty):
        raise verdict("no PowerAPI window energy stored yet: materialize "
                      "powerapi_window_energy")
    window = powerapi_source.window
    run = trial_days(tables, StillLanded(powerapi_source.landings()), window, taudb.url,
                     taudb.schema_name)
    source = tables.location(POWERAPI_WINDOW_TABLE)
    run.begin(tables)
    with taudb.open() as db:
        loads = TrialLoads.into(db, (f"{source}#{day.name}" for day in run.days))
        loads.ids.update(run.ids)
        for day in run.days:
            fingerprint = day.fingerprint(window)
            loads.load(day.name, partial(_day_trial, day, window=window, source=source,
                                         fingerprint=fingerprint),
                       (f"{source}#{day.name}", fingerprint))
    run.commit(tables, loads.ids)
    context.log.info(f"PowerAPI: {len(loads.rows)} of {len(loads.ids)} sensor day(s) loaded, "
                     f"{len(run.days)} read ({run.whole or 'those changed'})")
    return dg.MaterializeResult(metadata={**loads.metadata("days"),
                                          "days_read": dg.MetadataValue.int(len(run.days)),
                                          "read_whole": dg.MetadataValue.text(run.whole)})


TAUDB_ASSETS = [tau_profile_files, tau_profile_trials, powerapi_trials]
