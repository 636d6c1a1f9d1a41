"""The automation: one sensor per concurrency pool (sensors/automation.py)."""

import dagster as dg

from definitions import defs

#: Each automation sensor and the assets it evaluates: those whose step holds its pool.
AUTOMATED = {
    "joulehouse_automation_gpu": {"gpu_repetition_energy", "gpu_setting_energy",
                                  "gpu_benchmark_energy", "energy_facts/gpu", "taudb_trials"},
    "joulehouse_automation_powerapi": {"powerapi_report_energy", "powerapi_window_energy",
                                       "energy_facts/powerapi", "powerapi_trials"},
    "joulehouse_automation_geopm": {"geopm_host_energy", "geopm_trials", "geopm_region_energy",
                                    "geopm_report_energy", "energy_facts/geopm"},
    "joulehouse_automation_clustercockpit": {"cc_job_trials", "cc_jobs", "cc_job_energy",
                                             "cc_rollup", "energy_facts/clustercockpit"},
    # the grid intensity and tariffs hold no pool: automated with the accounting
    "joulehouse_automation_accounting": {"carbon_intensity", "tariffs", "accounting_daily",
                                         "accounting_monthly", "carbon_per_fact",
                                         "cost_per_fact"},
    "joulehouse_automation_derived": {"trust_checks", "waste", "waste_weekly", "fact_quality"},
}
#: The automation sensors' names.
AUTOMATION = tuple(AUTOMATED)
POOLS = {"joulehouse_automation_gpu": "joulehouse_tables_gpu",
         "joulehouse_automation_powerapi": "joulehouse_tables_powerapi",
         "joulehouse_automation_geopm": "joulehouse_tables_geopm",
         "joulehouse_automation_clustercockpit": "joulehouse_tables_clustercockpit",
         "joulehouse_automation_accounting": "joulehouse_accounting",
         "joulehouse_automation_derived": "joulehouse_derived"}


def _pool(key: dg.AssetKey) -> str | None:
    return defs.resolve_assets_def(key).get_op_def_for_asset_key(key).pool


def test_each_pool_has_an_automation_sensor_over_its_steps_alone():
    graph = defs.resolve_asset_graph()
    sensors = {sensor.name: sensor for sensor in defs.sensors
               if isinstance(sensor, dg.AutomationConditionSensorDefinition)}
    targets = {name: sensor.asset_selection.resolve(graph) for name, sensor in sensors.items()}
    assert {name: {key.to_user_string() for key in keys}
            for name, keys in targets.items()} == AUTOMATED
    # a sensor's runs hold its pool alone (the accounting's also the assets of no pool)
    for name, keys in targets.items():
        assert {_pool(key) for key in keys} - {None} == {POOLS[name]}, name
    # every automated asset is evaluated by one of them, so Dagster adds no default sensor
    automated = {key for key in graph.get_all_asset_keys()
                 if graph.get(key).automation_condition is not None}
    assert automated == set().union(*targets.values())
    assert {sensor.name for sensor in defs.get_repository_def().sensor_defs
            if isinstance(sensor, dg.AutomationConditionSensorDefinition)} == set(AUTOMATED)
