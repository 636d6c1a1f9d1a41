"""A sensor on the GEOPM report landing folders: complete new or changed reports -> one run.

Each tick lists the landing folders (``joulehouse.geopm.layout.find_reports``:
per file one ``stat`` and a read of its first 4 KiB, which tells a report
from other files), takes the reports that are new or
changed since they were last handed out (cursor: key -> fingerprint) and
quiet for ``quiet_period_s`` (GEOPM writes a report when the job ends: a
file still being written, or copied in, waits), registers the new ones as
``geopm_reports`` partitions and asks for ONE run of ``geopm_job`` covering
exactly them (``sensors/partition_runs.py``).

Every report is fingerprinted at every tick, so a report whose partition
failed is looked at again each tick: fixed in place (new fingerprint), it is
asked for one tick after its quiet period, in the same one run as the rest;
the run key digests the reports' keys and fingerprints.
"""

import json
import time

import dagster as dg

from assets.geopm import geopm_pipeline, geopm_reports
from joulehouse.geopm.layout import find_reports
from joulehouse.landing import scan_landings
from resources import GeopmReportSource
from sensors.partition_runs import ready_run_request
from sensors.settings import sensor_interval_s

SENSOR_NAME = "geopm_report_landing"
JOB_NAME = "geopm_job"

geopm_job = dg.define_asset_job(
    JOB_NAME, selection=dg.AssetSelection.assets(geopm_pipeline),
    description=("The whole GEOPM pipeline, from each landed report's validated frames to "
                 "the tables over all reports and energy_facts/geopm."),
    tags={"joulehouse/pipeline": "geopm"},
)


def evaluate(context: dg.SensorEvaluationContext, source: GeopmReportSource) -> dg.SensorResult:
    """One tick over every landing folder of ``source``."""
    reports = [found for name, folder in source.landings().items()
               for found in find_reports(folder, name)]
    scan = scan_landings(reports, json.loads(context.cursor or "{}"), source.quiet_period_s,
                         time.time())
    cursor = json.dumps(scan.seen, sort_keys=True)
    if not scan.ready:
        return dg.SensorResult(cursor=cursor, skip_reason=dg.SkipReason(
            f"no new or changed GEOPM report ready ({scan.waiting} waiting for the "
            f"{source.quiet_period_s:g} s quiet period)"))
    run_request, additions, new = ready_run_request(
        context.instance, context.instance.get_dynamic_partitions(geopm_reports.name),
        geopm_reports, {found.key: found.fingerprint for found in scan.ready},
        job_name=JOB_NAME, run_key_prefix="geopm", tags={})
    context.log.info(f"{len(scan.ready)} GEOPM report(s) ready ({new} new), "
                     f"{scan.waiting} waiting")
    return dg.SensorResult(run_requests=[run_request], dynamic_partitions_requests=additions,
                           cursor=cursor)


@dg.sensor(
    name=SENSOR_NAME,
    job=geopm_job,
    minimum_interval_seconds=sensor_interval_s(),
    default_status=dg.DefaultSensorStatus.STOPPED,
    description=("Registers complete, quiet GEOPM reports in the landing folders as "
                 "partitions and asks for one run of the GEOPM pipeline over them."),
)
def geopm_report_sensor(context: dg.SensorEvaluationContext, geopm_source: GeopmReportSource):
    return evaluate(context, geopm_source)
