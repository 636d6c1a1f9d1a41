"""A sensor on the PowerAPI landing folders: complete new or changed report files -> one run.

Each tick lists the landing folders (one ``stat`` per file, and for an entry
changed after the folder's watermark, or a growing one, the first 64 KiB of
each file to tell report files from others: ``joulehouse.powerapi.landing``),
takes the entries that are new or changed since they were last handed out
(cursor: a watermark per folder, the fingerprints of the few entries changed
after it and the sizes of growing ones: ``joulehouse.landing.LandingState``)
and quiet for ``quiet_period_s``, registers the new ones as ``powerapi_reports``
partitions and asks for ONE run of ``powerapi_job`` covering exactly them
(``sensors/partition_runs.py``).

Growing files: a live hwpc-sensor or formula appends to its file for days
and is never quiet. Such an entry is handed out anyway once its files grew
by ``grown_bytes`` (default 1 MiB) since it was last handed out, and then
once more when it goes quiet. The partition stays the file (one key per
landed entry, as for a finished file: a day's stream is one file, and the
window table is rebuilt over every partition anyway); each run reads only
the complete reports written since the last (``joulehouse.powerapi.stream``:
the offset and a fingerprint of what was read are kept in the warehouse, so
a file cut or rewritten is read whole again). Between two hand-outs a file
that grew by less than ``grown_bytes`` waits, so a stream costs at most one
run per ``grown_bytes`` written (and per tick).

Every entry but a file unchanged behind the watermark is fingerprinted at
every tick, so an entry whose partition failed and that is fixed in place
is asked for again one tick after its quiet period. Run keys digest the entries' keys and fingerprints.
"""

import dagster as dg

from assets.powerapi import powerapi_pipeline, powerapi_report_files, powerapi_reports
from joulehouse.powerapi.landing import report_entry_files
from resources import PowerapiSource
from sensors.partition_runs import LandingSensor
from sensors.settings import sensor_interval_s

SENSOR_NAME = "powerapi_landing"
JOB_NAME = "powerapi_job"

powerapi_job = dg.define_asset_job(
    JOB_NAME, selection=dg.AssetSelection.assets(powerapi_pipeline),
    description=("The PowerAPI pipeline over landed report files, many per run: validated "
                 "frames, energy per report file, the window table and energy_facts."),
    tags={"joulehouse/pipeline": "powerapi"},
)


LANDING = LandingSensor(report_entry_files, powerapi_reports, powerapi_report_files.key,
                        job_name=JOB_NAME, run_key_prefix="powerapi",
                        entries="PowerAPI report file(s)")


@dg.sensor(
    name=SENSOR_NAME,
    job=powerapi_job,
    minimum_interval_seconds=sensor_interval_s(),
    default_status=dg.DefaultSensorStatus.STOPPED,
    description=("Registers complete, quiet PowerAPI report files (or folders of them) in the "
                 "landing folders as partitions, and growing ones each time they grew by "
                 "grown_bytes, and asks for one run of the PowerAPI pipeline."),
)
def powerapi_sensor(context: dg.SensorEvaluationContext, powerapi_source: PowerapiSource):
    return LANDING.evaluate(context, powerapi_source)
