"""A sensor on the TAU profile landing folders: complete new or changed sets -> their days ->
one run.

Each tick lists the landing folders (profile sets are few and flat: one ``stat`` per
profile file, see ``joulehouse.taudb.landing``), takes the sets that are new or changed
since they were last handed out (cursor: a watermark per folder and the sets changed
after it, ``joulehouse.landing.LandingState``) and quiet for ``quiet_period_s`` (a set
still being written, or copied in, waits), groups them by landing folder and UTC day of
their start (``joulehouse.taudb.days``: the first thread's Starting Timestamp, from the
head of one file of each set handed out), registers the new days as
``tau_profile_days`` partitions, reports each day's hand-out as a materialization of
``tau_profile_files`` (metadata ``sets``: key -> fingerprint; data version: their digest)
and asks for ONE run of ``tau_profiles_job`` covering exactly those days, its run config
naming the sets handed out in each (``TauHandOut``): the run loads those alone
(``sensors/blocks.BlockLandingSensor``, ``sensors/partition_runs.py``).

Every set folder is fingerprinted at every tick, so a set whose load failed and that is
fixed in place (new fingerprint) is asked for one tick after its quiet period. Every run
records which sets of each day failed (``assets/blocks.block_outcomes``); a day's next
hand-out lists again those its latest record names and that are still there, and every
set of its previous hand-out if that one's run ended without success and without a record
(``sensors/blocks.BlockHandOuts.unsettled``; no set is handed out while the sensor's own
run is in flight: ``partition_runs.own_run_in_flight``), so the day stays failed, and visible, until
its bad sets are fixed; its good sets are not loaded again. The sets of a CANCELED run
still there are asked for again once (``partition_runs.cancelled_hand_outs``).

On an upgrade from one partition per set (``tau_profile_sets``), the cursor written then
is not taken: every set present is handed out again, at the tick's pace, into its day
(docs/tau-profiles.md, "Upgrading").
"""

import dagster as dg

from assets.taudb import TauHandOut, tau_profile_days, tau_profile_files, tau_profile_trials
from joulehouse.landing_days import item_day_key
from joulehouse.taudb.days import profile_set_start_day
from joulehouse.taudb.landing import profile_set_files
from resources.taudb import TauProfileSource
from sensors.blocks import BlockHandOuts, BlockLandingSensor
from sensors.settings import sensor_interval_s

SENSOR_NAME = "tau_profile_landing"
JOB_NAME = "tau_profiles_job"
#: The metadata of a ``tau_profile_files`` day listing the sets handed out.
SETS_METADATA = "sets"

tau_profiles_job = dg.define_asset_job(
    JOB_NAME, selection=[tau_profile_trials],
    description="Load landed TAU profile sets into TAUdb, the sets handed out per day.",
    tags={"joulehouse/pipeline": "tau-profiles"},
)


LANDING = BlockLandingSensor(
    profile_set_files, tau_profile_days, tau_profile_files.key, job_name=JOB_NAME,
    run_key_prefix="tau-profiles", entries="profile set(s)",
    blocks=BlockHandOuts(tau_profile_days, tau_profile_files.key, (tau_profile_trials.key,),
                         SETS_METADATA),
    block_of=lambda item, source: item_day_key(item, profile_set_start_day),
    run_config=TauHandOut.run_config_of)


@dg.sensor(
    name=SENSOR_NAME,
    job=tau_profiles_job,
    minimum_interval_seconds=sensor_interval_s(),
    default_status=dg.DefaultSensorStatus.STOPPED,
    description=("Registers the days (per landing folder) of complete, quiet TAU profile sets "
                 "in the landing folders as partitions and asks for one run loading the sets "
                 "handed out into TAUdb."),
)
def tau_profile_sensor(context: dg.SensorEvaluationContext, tau_profiles: TauProfileSource):
    return LANDING.evaluate(context, tau_profiles)
