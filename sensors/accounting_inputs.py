"""The sensor over the intensity and tariff landing folders: a file new or changed is read.

``carbon_intensity`` and ``tariffs`` read every file of their landing folder
(``AccountingSettings.intensity_landing``, ``tariff_landing``); the accounting follows them
(eager). Without this sensor they were read when missing and by the daily schedule only,
so a fact landed after the last file read had no carbon or cost until the next day (the
soak's facts had none). Each tick lists both folders (every ``*.csv`` under them, as the
assets read them: path, size, mtime in ns; a few files) and asks for ONE run of the assets
whose folder's listing changed since it last asked and has been quiet (no ctime newer)
for the sources' quiet period (``$JOULEHOUSE_QUIET_PERIOD_S``, default 60 s). A folder
that cannot be listed (missing, unreadable) is named in the tick's message and its
listing kept, so nothing is asked for it until it is back. The cursor holds each folder's
listing digest, so a listing is asked for once; the run key is the digests and the
tick's time, so a listing seen before (a file moved away and back) is read again.

A change of the intensity or the tariffs makes the accounting recompute every fact
(``joulehouse/accounting/incremental.py``: its inputs' digest changed), the cost of a
figure that may change any fact's carbon or cost.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import dagster as dg

from joulehouse.accounting.stepseries import landed_csvs
from resources import AccountingSettings
from sensors.settings import quiet_period_s, sensor_interval_s

SENSOR_NAME = "intensity_and_tariff_landing"
INTENSITY = dg.AssetKey("carbon_intensity")
TARIFFS = dg.AssetKey("tariffs")


def listing(folder: Path) -> tuple[str, float]:
    """A digest of the files ``folder`` lands (``stepseries.landed_csvs``: every ``*.csv``
    under it, the files the assets read: relative paths, sizes, mtimes in ns) and the
    newest ctime among them and the folder (s). Raises OSError if it cannot be listed."""
    rows, newest = [], folder.stat().st_ctime
    for path in landed_csvs(folder):
        info = path.stat()
        rows.append(f"{path.relative_to(folder)}\0{info.st_size}\0{info.st_mtime_ns}")
        newest = max(newest, info.st_ctime, path.parent.stat().st_ctime)
    return hashlib.sha256("\n".join(rows).encode()).hexdigest(), newest


def evaluate(context: dg.SensorEvaluationContext, accounting: AccountingSettings,
             quiet_s: float) -> dg.SensorResult:
    """One tick over both folders, each read once quiet for ``quiet_s`` (see the module)."""
    cursor: dict[str, str] = json.loads(context.cursor or "{}")
    now, changed, told = time.time(), [], []
    for asset, folder in ((INTENSITY, accounting.intensity_landing),
                          (TARIFFS, accounting.tariff_landing)):
        name = asset.to_user_string()
        try:
            digest, newest = listing(Path(folder))
        except OSError as error:
            context.log.warning(f"{name}: landing folder {folder} cannot be listed "
                                f"({error.strerror or error}); kept as last listed")
            told.append(f"{name}: {folder} cannot be listed ({error.strerror or error})")
            continue
        if digest == cursor.get(name):
            continue
        if now - newest < quiet_s:
            told.append(f"{name}: {folder} changed, waiting for its {quiet_s:g} s quiet "
                        "period")
            continue
        cursor[name] = digest
        changed.append(asset)
    if not changed:
        return dg.SensorResult(cursor=json.dumps(cursor, sort_keys=True),
                               skip_reason=dg.SkipReason(
                                   "; ".join(told) or "no intensity or tariff file changed"))
    # the time as well: a listing seen before (a file moved away and back) is read again
    run_key = ":".join([*(cursor[asset.to_user_string()] for asset in changed), f"{now:.3f}"])
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=run_key, asset_selection=changed)],
        cursor=json.dumps(cursor, sort_keys=True))


@dg.sensor(
    name=SENSOR_NAME,
    minimum_interval_seconds=sensor_interval_s(),
    asset_selection=[INTENSITY, TARIFFS],
    default_status=dg.DefaultSensorStatus.STOPPED,
    description=("Reads the grid intensity and the tariffs again when a file of their landing "
                 "folder is added, changed or removed and quiet (JOULEHOUSE_QUIET_PERIOD_S); "
                 "the accounting follows. See sensors/accounting_inputs.py."),
)
def accounting_inputs_sensor(context: dg.SensorEvaluationContext,
                             accounting: AccountingSettings) -> dg.SensorResult:
    return evaluate(context, accounting, quiet_period_s())
