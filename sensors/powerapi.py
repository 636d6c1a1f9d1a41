"""A sensor on the PowerAPI landing folders: complete new or changed report files -> one run.

Each tick lists the landing folders (one ``stat`` per file, and the first
64 KiB of each file to tell report files from others:
``joulehouse.powerapi.landing``), takes the entries that are new or changed
since they were last handed out (cursor: key -> fingerprint) and quiet for
``quiet_period_s``, registers the new ones as ``powerapi_reports``
partitions and asks for ONE run of ``powerapi_job`` covering exactly them
(``sensors/partition_runs.py``).

Every entry is fingerprinted at every tick, so an entry whose partition
failed and that is fixed in place is asked for again one tick after its
quiet period. A file still being written (a growing report stream) changes
at every tick and waits; once quiet it is read whole, its last report left
out if cut short. Run keys digest the entries' keys and fingerprints.
"""

import json
import time

import dagster as dg

from assets.powerapi import powerapi_pipeline, powerapi_reports
from joulehouse.landing import scan_landings
from joulehouse.powerapi.landing import find_report_entries
from resources import PowerapiSource
from sensors.partition_runs import ready_run_request
from sensors.settings import sensor_interval_s

SENSOR_NAME = "powerapi_landing"
JOB_NAME = "powerapi_job"

powerapi_job = dg.define_asset_job(
    JOB_NAME, selection=dg.AssetSelection.assets(powerapi_pipeline),
    description=("The PowerAPI pipeline over landed report files, many per run: validated "
                 "frames, energy per report file, the window table and energy_facts."),
    tags={"joulehouse/pipeline": "powerapi"},
)


def evaluate(context: dg.SensorEvaluationContext, source: PowerapiSource) -> dg.SensorResult:
    """One tick over every landing folder of ``source``."""
    entries = [found for name, folder in source.landings().items()
               for found in find_report_entries(folder, name)]
    scan = scan_landings(entries, json.loads(context.cursor or "{}"), source.quiet_period_s,
                         time.time())
    cursor = json.dumps(scan.seen, sort_keys=True)
    if not scan.ready:
        return dg.SensorResult(cursor=cursor, skip_reason=dg.SkipReason(
            f"no new or changed report file ready ({scan.waiting} waiting)"))
    run_request, additions, new = ready_run_request(
        context.instance, context.instance.get_dynamic_partitions(powerapi_reports.name),
        powerapi_reports, {found.key: found.fingerprint for found in scan.ready},
        job_name=JOB_NAME, run_key_prefix="powerapi", tags={})
    context.log.info(f"{len(scan.ready)} report entries ready ({new} new), "
                     f"{scan.waiting} waiting")
    return dg.SensorResult(run_requests=[run_request], dynamic_partitions_requests=additions,
                           cursor=cursor)


@dg.sensor(
    name=SENSOR_NAME,
    job=powerapi_job,
    minimum_interval_seconds=sensor_interval_s(),
    default_status=dg.DefaultSensorStatus.STOPPED,
    description=("Registers complete, quiet PowerAPI report files (or folders of them) in the "
                 "landing folders as partitions and asks for one run of the PowerAPI pipeline."),
)
def powerapi_sensor(context: dg.SensorEvaluationContext, powerapi_source: PowerapiSource):
    return evaluate(context, powerapi_source)
