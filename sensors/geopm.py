"""A sensor on the GEOPM report landing folders: complete new or changed reports -> their
days -> one run.

Each tick lists the landing folders (``joulehouse.landing.find_landed`` with
``joulehouse.geopm.layout.identify_report``): one ``stat`` per file, and for
a file changed after the folder's watermark a read of its first 4 KiB, which
tells a report from other files. It takes the reports that are new or
changed since they were last handed out (cursor: a watermark per folder and
the few reports changed after it, ``joulehouse.landing.LandingState``) and
quiet for ``quiet_period_s`` (GEOPM writes a report when the job ends: a
file still being written, or copied in, waits), groups them by landing folder and UTC
day of their start (``joulehouse.geopm.days``: read from the same 4 KiB), registers the
new days as ``geopm_days`` partitions, reports each day's hand-out as a
materialization of ``geopm_report_files`` (metadata ``reports``: key -> fingerprint;
data version: their digest) and asks for ONE run of ``geopm_job`` covering exactly those
days, its run config naming the reports handed out in each (``GeopmHandOut``): the run
processes those alone (``sensors/blocks.BlockLandingSensor``, ``sensors/partition_runs.py``).

A report changed after the watermark is fingerprinted at every tick (one
unchanged behind it costs a ``stat``), so a report that failed and is fixed in place
(a new ctime; its fingerprint too, or not: ``cp -p``) is asked for one tick after its
quiet period, in the same one run as the rest, and so is one whose mode alone changed
(``chmod``: one idempotent re-run). Every run over days records which reports of each
day failed (``assets/blocks.block_outcomes``); a day's next hand-out lists again those
its latest record names and that are still there, and every report of its previous
hand-out if that one's run ended without success and without a record
(``sensors/blocks.BlockHandOuts.unsettled``; no report is handed out while the sensor's
own run is in flight: ``partition_runs.own_run_in_flight``),
so the day stays failed, and visible, until its bad reports are fixed; its good reports
are not read again. The reports of a CANCELED run still there are asked for again once,
failed day or not (``partition_runs.cancelled_hand_outs``).

On an upgrade from one partition per report (``geopm_reports``), the cursor written then
is not taken: every report present is handed out again, at the tick's pace, into its day
(docs/geopm.md, "Upgrading").
"""

import dagster as dg

from assets.geopm import (
    GeopmHandOut,
    geopm_days,
    geopm_host_energy,
    geopm_pipeline,
    geopm_report_files,
    geopm_trials,
    geopm_validated_frames,
)
from joulehouse.geopm.days import start_day
from joulehouse.geopm.layout import identify_report
from joulehouse.landing_days import item_day_key
from resources import GeopmReportSource
from sensors.blocks import BlockHandOuts, BlockLandingSensor
from sensors.settings import sensor_interval_s

SENSOR_NAME = "geopm_report_landing"
JOB_NAME = "geopm_job"
#: The metadata of a ``geopm_report_files`` day listing the reports handed out.
REPORTS_METADATA = "reports"

geopm_job = dg.define_asset_job(
    JOB_NAME, selection=dg.AssetSelection.assets(geopm_pipeline),
    description=("The whole GEOPM pipeline, from each landed report's validated frames to "
                 "the tables over all reports and energy_facts/geopm, over the days of "
                 "the reports handed out."),
    tags={"joulehouse/pipeline": "geopm"},
)


LANDING = BlockLandingSensor(
    identify_report, geopm_days, geopm_report_files.key, job_name=JOB_NAME,
    run_key_prefix="geopm", entries="GEOPM report(s)",
    blocks=BlockHandOuts(geopm_days, geopm_report_files.key,
                         (geopm_validated_frames.key, geopm_host_energy.key,
                          geopm_trials.key), REPORTS_METADATA),
    block_of=lambda item, source: item_day_key(item, start_day(source.timezone)),
    run_config=GeopmHandOut.run_config_of)


@dg.sensor(
    name=SENSOR_NAME,
    job=geopm_job,
    minimum_interval_seconds=sensor_interval_s(),
    default_status=dg.DefaultSensorStatus.STOPPED,
    description=("Registers the days (per landing folder) of complete, quiet GEOPM reports "
                 "in the landing folders as partitions and asks for one run of the GEOPM "
                 "pipeline over the reports handed out."),
)
def geopm_report_sensor(context: dg.SensorEvaluationContext, geopm_source: GeopmReportSource):
    return LANDING.evaluate(context, geopm_source)
