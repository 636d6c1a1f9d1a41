"""A sensor on the PowerAPI landing folders: complete new or changed report entries -> their
days -> one run.

Each tick lists the landing folders (one ``stat`` per file, and for an entry
changed after the folder's watermark, or a growing one, the first 64 KiB of
each file to tell report files from others: ``joulehouse.powerapi.landing``),
takes the entries that are new or changed since they were last handed out
(cursor: a watermark per folder, the fingerprints of the few entries changed
after it and the sizes of growing ones: ``joulehouse.landing.LandingState``)
and quiet for ``quiet_period_s``, groups them by landing folder and UTC day of their
first report (``joulehouse.powerapi.days``: read from the same 64 KiB of each of the
entry's report files), registers the new days as ``powerapi_days`` partitions, reports
each day's hand-out as a materialization of ``powerapi_report_files`` (metadata
``entries``: key -> fingerprint; data version: their digest) and asks for ONE run of
``powerapi_job`` covering exactly those days, its run config naming the entries handed
out in each (``PowerapiHandOut``): the run processes those alone
(``sensors/blocks.BlockLandingSensor``, ``sensors/partition_runs.py``).

Growing files: a live hwpc-sensor or formula appends to its file for days
and is never quiet. Such an entry is handed out anyway once its files grew
by ``grown_bytes`` (default 1 MiB) since it was last handed out, or once
``grown_wait_s`` (default 60 s) passed since a tick first saw it grown, however
little, and then once more when it goes quiet. It stays in the day it started (its head,
and so its first report, does not change as it grows); each run reads only the complete
reports written since the last (``joulehouse.powerapi.stream``: the offset and a
fingerprint of what was read are kept in the warehouse per entry, so a file cut or
rewritten is read whole again). Between two hand-outs a file that grew by less than ``grown_bytes`` waits up to
``grown_wait_s``, so a stream costs at most one run per ``grown_bytes`` written or per
``grown_wait_s`` (and per tick), and its reports reach the tables within
``grown_wait_s``, two ticks and a run of their writing.

Every entry but a file unchanged behind the watermark is fingerprinted at every tick, so
an entry that failed and is fixed in place is asked for again one tick after its quiet
period. Every run over days records which entries of each day failed
(``assets/blocks.block_outcomes``); a day's next hand-out lists again those its latest
record names and that are still there, and every entry of its previous hand-out if that
one's run ended without success and without a record
(``sensors/blocks.BlockHandOuts.unsettled``; no entry is handed out while the sensor's own
run is in flight: ``partition_runs.own_run_in_flight``), so the day stays failed, and
visible, until its bad files are fixed; its good entries are not read again (a growing
one listed again reads what is new, if anything). The entries of a CANCELED run still
there are asked for again once, failed day or not
(``partition_runs.cancelled_hand_outs``).

On an upgrade from one partition per entry (``powerapi_reports``), the cursor written then
is not taken: every entry present is handed out again, at the tick's pace, into its day
(docs/powerapi.md, "Upgrading").
"""

import dagster as dg

from assets.powerapi import (
    PowerapiHandOut,
    powerapi_days,
    powerapi_pipeline,
    powerapi_report_energy,
    powerapi_report_files,
    powerapi_validated_frames,
)
from joulehouse.landing_days import item_day_key
from joulehouse.powerapi.days import start_day
from joulehouse.powerapi.landing import report_entry_files
from resources import PowerapiSource
from sensors.blocks import BlockHandOuts, BlockLandingSensor
from sensors.settings import sensor_interval_s

SENSOR_NAME = "powerapi_landing"
JOB_NAME = "powerapi_job"
#: The metadata of a ``powerapi_report_files`` day listing the entries handed out.
ENTRIES_METADATA = "entries"

powerapi_job = dg.define_asset_job(
    JOB_NAME, selection=dg.AssetSelection.assets(powerapi_pipeline),
    description=("The PowerAPI pipeline over the days of the landed report entries handed "
                 "out: validated frames and energy per entry, the window table and "
                 "energy_facts."),
    tags={"joulehouse/pipeline": "powerapi"},
)


LANDING = BlockLandingSensor(
    report_entry_files, powerapi_days, powerapi_report_files.key, job_name=JOB_NAME,
    run_key_prefix="powerapi", entries="PowerAPI report file(s)",
    blocks=BlockHandOuts(powerapi_days, powerapi_report_files.key,
                         (powerapi_validated_frames.key, powerapi_report_energy.key),
                         ENTRIES_METADATA),
    block_of=lambda item, source: item_day_key(item, start_day(source.timezone,
                                                               source.epoch_zone)),
    run_config=PowerapiHandOut.run_config_of)


@dg.sensor(
    name=SENSOR_NAME,
    job=powerapi_job,
    minimum_interval_seconds=sensor_interval_s(),
    default_status=dg.DefaultSensorStatus.STOPPED,
    description=("Registers the days (per landing folder) of complete, quiet PowerAPI report "
                 "files (or folders of them) in the landing folders, and of growing ones each "
                 "time they grew by grown_bytes or waited grown_wait_s, as partitions, and "
                 "asks for one run of the PowerAPI pipeline over the entries handed out."),
)
def powerapi_sensor(context: dg.SensorEvaluationContext, powerapi_source: PowerapiSource):
    return LANDING.evaluate(context, powerapi_source)
