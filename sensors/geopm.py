"""A sensor on the GEOPM report landing folders: complete new or changed reports -> one run.

Each tick lists the landing folders (``joulehouse.landing.find_landed`` with
``joulehouse.geopm.layout.identify_report``): one ``stat`` per file, and for
a file changed after the folder's watermark a read of its first 4 KiB, which
tells a report from other files. It takes the reports that are new or
changed since they were last handed out (cursor: a watermark per folder and
the few reports changed after it, ``joulehouse.landing.LandingState``) and
quiet for ``quiet_period_s`` (GEOPM writes a report when the job ends: a
file still being written, or copied in, waits), registers the new ones as
``geopm_reports`` partitions and asks for ONE run of ``geopm_job`` covering
exactly them (``sensors/partition_runs.py``).

A report changed after the watermark is fingerprinted at every tick (one
unchanged behind it costs a ``stat``), so a report whose partition failed
and that is fixed in place (a new ctime; its fingerprint too, or not: ``cp -p``)
is asked for one tick after its quiet period, in the same one run as the
rest, and so is one whose mode alone changed (``chmod``: one idempotent
re-run). The run key digests the reports' keys and fingerprints, so a report
fixed by ``cp -p`` that failed alone in its run is asked for with that run's
key, which the daemon does not run twice: a known limitation
(``sensors/partition_runs.retry_request``).
"""

import dagster as dg

from assets.geopm import geopm_pipeline, geopm_report_files, geopm_reports
from joulehouse.geopm.layout import identify_report
from resources import GeopmReportSource
from sensors.partition_runs import LandingSensor
from sensors.settings import sensor_interval_s

SENSOR_NAME = "geopm_report_landing"
JOB_NAME = "geopm_job"

geopm_job = dg.define_asset_job(
    JOB_NAME, selection=dg.AssetSelection.assets(geopm_pipeline),
    description=("The whole GEOPM pipeline, from each landed report's validated frames to "
                 "the tables over all reports and energy_facts/geopm."),
    tags={"joulehouse/pipeline": "geopm"},
)


LANDING = LandingSensor(identify_report, geopm_reports, geopm_report_files.key,
                        job_name=JOB_NAME, run_key_prefix="geopm", entries="GEOPM report(s)")


@dg.sensor(
    name=SENSOR_NAME,
    job=geopm_job,
    minimum_interval_seconds=sensor_interval_s(),
    default_status=dg.DefaultSensorStatus.STOPPED,
    description=("Registers complete, quiet GEOPM reports in the landing folders as "
                 "partitions and asks for one run of the GEOPM pipeline over them."),
)
def geopm_report_sensor(context: dg.SensorEvaluationContext, geopm_source: GeopmReportSource):
    return LANDING.evaluate(context, geopm_source)
