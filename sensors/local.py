"""Run a sensor tick in-process, applying its result as the Dagster daemon would.

The demo and the tests use this: ``build_sensor_context`` evaluates a sensor
but does not apply its dynamic-partition requests or report its asset
events, and in-process execution has no daemon to launch its run requests.
"""

import dagster as dg
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG


def tick(sensor: dg.SensorDefinition, instance: dg.DagsterInstance, resources: dict,
         cursor: str | None = None):
    """Evaluate one tick of ``sensor``, register its partitions and report its events, one
    by one as the daemon does (``dagster/_daemon/sensor.py``: the events first).

    Returns the tick's data (``run_requests``, ``cursor`` ...); the run requests
    are not launched.
    """
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources,
                                 sensor_name=sensor.name) as context:
        data = sensor.evaluate_tick(context)
    for event in data.asset_events:
        instance.report_runless_asset_event(event)
    for request in data.dynamic_partitions_requests:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            # the daemon asks for each key whether it exists, then adds the others at once
            instance.add_dynamic_partitions(request.partitions_def_name, [
                key for key in request.partition_keys
                if not instance.has_dynamic_partition(request.partitions_def_name, key)])
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
    return data


def launch_in_process(job: dg.JobDefinition, instance: dg.DagsterInstance,
                      request: dg.RunRequest, sensor_name: str | None = None,
                      log_level: str = "DEBUG") -> dg.ExecuteInProcessResult:
    """Execute ``request`` with ``job`` in this process (no daemon: run keys are not checked),
    over the request's asset selection if it names one.

    With ``sensor_name``, the run carries the sensor's name and the request's run key as
    the daemon's runs do, so once that sensor runs in the daemon it does not ask for the
    same run again. ``log_level`` is the console log level of the run; the event log keeps
    everything.
    """
    tags = dict(request.tags)
    if sensor_name is not None and request.run_key:
        tags |= {RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: sensor_name}
    run_config = {**request.run_config,
                  "loggers": {"console": {"config": {"log_level": log_level}}}}
    return job.execute_in_process(instance=instance, tags=tags, run_config=run_config,
                                  asset_selection=request.asset_selection,
                                  raise_on_error=False)
