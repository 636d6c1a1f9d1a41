"""A sensor on the TAU profile landing folders: complete new or changed sets -> one run.

Each tick lists the landing folders (profile sets are few and flat: one
``stat`` per profile file, see ``joulehouse.taudb.landing``), takes the sets
that are new or changed since they were last handed out (cursor: a
watermark and the sets changed after it, ``joulehouse.landing.LandingState``)
and quiet for ``quiet_period_s``, registers the new ones as
``tau_profile_sets`` partitions (the existing set is fetched once per tick)
and asks for ONE run of ``tau_profile_trials`` covering exactly them
(``sensors/partition_runs.py``: changed older sets are moved to the end of
the partition set with the new ones). Each set handed out is reported as a
materialization of ``tau_profile_files`` (its data version the fingerprint).

Every set folder is fingerprinted at every tick, so a set whose load failed and
that is fixed in place (new fingerprint) is asked for again one tick after
its quiet period; the run key digests the sets' keys and fingerprints. A set
still being written waits for a later tick.
"""

import dagster as dg

from assets.taudb import tau_profile_files, tau_profile_sets, tau_profile_trials
from joulehouse.taudb.landing import profile_set_files
from resources.taudb import TauProfileSource
from sensors.partition_runs import LandingSensor
from sensors.settings import sensor_interval_s

SENSOR_NAME = "tau_profile_landing"
JOB_NAME = "tau_profiles_job"

tau_profiles_job = dg.define_asset_job(
    JOB_NAME, selection=[tau_profile_trials],
    description="Load landed TAU profile sets into TAUdb, many sets per run.",
    tags={"joulehouse/pipeline": "tau-profiles"},
)


LANDING = LandingSensor(profile_set_files, tau_profile_sets, tau_profile_files.key,
                        job_name=JOB_NAME, run_key_prefix="tau-profiles",
                        entries="profile set(s)")


@dg.sensor(
    name=SENSOR_NAME,
    job=tau_profiles_job,
    minimum_interval_seconds=sensor_interval_s(),
    default_status=dg.DefaultSensorStatus.STOPPED,
    description=("Registers complete, quiet TAU profile sets in the landing folders as "
                 "partitions and asks for one run loading them into TAUdb."),
)
def tau_profile_sensor(context: dg.SensorEvaluationContext, tau_profiles: TauProfileSource):
    return LANDING.evaluate(context, tau_profiles)
