"""A sensor on the TAU profile landing folders: complete new or changed sets -> one run.

Each tick lists the landing folders (profile sets are few and flat: one
``stat`` per profile file, see ``joulehouse.taudb.landing``), takes the sets
that are new or changed since they were last handed out (cursor: key ->
fingerprint) and quiet for ``quiet_period_s``, registers the new ones as
``tau_profile_sets`` partitions (the existing set is fetched once per tick)
and asks for ONE run of ``tau_profile_trials`` covering exactly them
(``sensors/partition_runs.py``: changed older sets are moved to the end of
the partition set with the new ones). Each set handed out is reported as a
materialization of ``tau_profile_files`` (its data version the fingerprint).

Every set is fingerprinted at every tick, so a set whose load failed and
that is fixed in place (new fingerprint) is asked for again one tick after
its quiet period; the run key digests the sets' keys and fingerprints. A set
still being written waits for a later tick.
"""

import json
import time

import dagster as dg

from assets.taudb import tau_profile_files, tau_profile_sets, tau_profile_trials
from joulehouse.landing import scan_landings
from joulehouse.taudb.landing import find_profile_sets
from resources.taudb import TauProfileSource
from sensors.partition_runs import files_landed, ready_run_request
from sensors.settings import sensor_interval_s

SENSOR_NAME = "tau_profile_landing"
JOB_NAME = "tau_profiles_job"

tau_profiles_job = dg.define_asset_job(
    JOB_NAME, selection=[tau_profile_trials],
    description="Load landed TAU profile sets into TAUdb, many sets per run.",
    tags={"joulehouse/pipeline": "tau-profiles"},
)


def evaluate(context: dg.SensorEvaluationContext, source: TauProfileSource) -> dg.SensorResult:
    """One tick over every landing folder of ``source``."""
    sets = [found for name, folder in source.landings().items()
            for found in find_profile_sets(folder, name)]
    scan = scan_landings(sets, json.loads(context.cursor or "{}"), source.quiet_period_s,
                         time.time())
    cursor = json.dumps(scan.seen, sort_keys=True)
    if not scan.ready:
        return dg.SensorResult(cursor=cursor, skip_reason=dg.SkipReason(
            f"no new or changed profile set ready ({scan.waiting} waiting)"))
    fingerprints = {found.key: found.fingerprint for found in scan.ready}
    run_request, additions, new = ready_run_request(
        context.instance, context.instance.get_dynamic_partitions(tau_profile_sets.name), tau_profile_sets,
        fingerprints,
        job_name=JOB_NAME, run_key_prefix="tau-profiles", tags={})
    context.log.info(f"{len(scan.ready)} profile set(s) ready ({new} new), "
                     f"{scan.waiting} waiting")
    return dg.SensorResult(
        run_requests=[run_request],
        dynamic_partitions_requests=additions,
        asset_events=files_landed(tau_profile_files.key, fingerprints),
        cursor=cursor,
    )


@dg.sensor(
    name=SENSOR_NAME,
    job=tau_profiles_job,
    minimum_interval_seconds=sensor_interval_s(),
    default_status=dg.DefaultSensorStatus.STOPPED,
    description=("Registers complete, quiet TAU profile sets in the landing folders as "
                 "partitions and asks for one run loading them into TAUdb."),
)
def tau_profile_sensor(context: dg.SensorEvaluationContext, tau_profiles: TauProfileSource):
    return evaluate(context, tau_profiles)
