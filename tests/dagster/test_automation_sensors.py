"""The automation: one sensor per concurrency pool (sensors/automation.py)."""

from datetime import UTC, datetime, timedelta

import dagster as dg

from definitions import defs
from tests.dagster.automation_sensors import AUTOMATED, POOLS

#: A time to evaluate the automation from (UTC).
NOON = datetime(2026, 11, 30, 12, tzinfo=UTC)


def _pool(key: dg.AssetKey) -> str | None:
    return defs.resolve_assets_def(key).get_op_def_for_asset_key(key).pool


def _sensors() -> dict[str, dg.AutomationConditionSensorDefinition]:
    return {sensor.name: sensor for sensor in defs.sensors
            if isinstance(sensor, dg.AutomationConditionSensorDefinition)}


def test_each_pool_has_an_automation_sensor_over_its_steps_alone():
    graph = defs.resolve_asset_graph()
    targets = {name: sensor.asset_selection.resolve(graph) for name, sensor in _sensors().items()}
    assert {name: {key.to_user_string() for key in keys}
            for name, keys in targets.items()} == AUTOMATED
    # a sensor's runs hold its pool alone; the assets of no pool are the accounting's
    for name, keys in targets.items():
        pools = {_pool(key) for key in keys}
        assert pools == ({POOLS[name], None} if name == "joulehouse_automation_accounting"
                         else {POOLS[name]}), name
    # every automated asset is evaluated by one of them, so Dagster adds no default sensor
    automated = {key for key in graph.get_all_asset_keys()
                 if graph.get(key).automation_condition is not None}
    assert automated == set().union(*targets.values())
    assert {sensor.name for sensor in defs.get_repository_def().sensor_defs
            if isinstance(sensor, dg.AutomationConditionSensorDefinition)} == set(AUTOMATED)


def test_a_write_asks_each_pool_for_its_own_steps_in_its_own_evaluation_once():
    """Each sensor evaluated alone, as the daemon does (its own cursor): on a store where
    everything is current, nothing is asked for; after a source writes its facts and
    PowerAPI its windows, each sensor asks for its own steps (so their runs hold one pool
    each): the accounting's at once, as PowerAPI's for its facts; the derived tables' and
    PowerAPI's trials at the next tick of their cadence; then nothing."""
    graph = defs.resolve_asset_graph()
    instance = dg.DagsterInstance.ephemeral()
    for key in graph.get_all_asset_keys():
        if graph.get(key).is_materializable and graph.get(key).partitions_def is None:
            instance.report_runless_asset_event(dg.AssetMaterialization(key))
    sensors = _sensors()

    def evaluate(cursors: dict, minutes: int) -> dict[str, set[str]]:
        asked = {}
        for name, sensor in sensors.items():
            result = dg.evaluate_automation_conditions(
                defs=defs, instance=instance, asset_selection=sensor.asset_selection,
                cursor=cursors.get(name), evaluation_time=NOON + timedelta(minutes=minutes))
            cursors[name] = result.cursor
            asked[name] = {key.to_user_string() for key in graph.get_all_asset_keys()
                           if result.get_num_requested(key)}
        return asked

    cursors: dict = {}
    nothing = dict.fromkeys(AUTOMATED, frozenset())
    assert evaluate(cursors, 1) == nothing
    instance.report_runless_asset_event(dg.AssetMaterialization(["energy_facts", "gpu"]))
    instance.report_runless_asset_event(dg.AssetMaterialization("powerapi_window_energy"))
    accounting = {"accounting_daily", "accounting_monthly", "carbon_per_fact", "cost_per_fact"}
    assert evaluate(cursors, 2) == {**nothing, "joulehouse_automation_accounting": accounting,
                                    "joulehouse_automation_powerapi": {"energy_facts/powerapi"}}
    # the followers (derived tables, PowerAPI trials) once the cadence's tick has passed
    # (assets/follow_cadence.py: 5 minutes by default)
    assert evaluate(cursors, 3) == nothing
    asked = evaluate(cursors, 6)
    assert asked == {**nothing,
                     "joulehouse_automation_derived": AUTOMATED["joulehouse_automation_derived"],
                     "joulehouse_automation_trials": {"powerapi_trials"}}
    for name, keys in asked.items():
        assert {_pool(dg.AssetKey.from_user_string(key)) for key in keys} <= {POOLS[name]}, name
    assert evaluate(cursors, 7) == nothing
    assert evaluate(cursors, 11) == nothing  # a tick passed, nothing changed
