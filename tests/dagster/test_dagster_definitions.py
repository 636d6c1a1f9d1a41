"""The definitions load, and the asset graph is what the docs say (a snapshot)."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import dagster as dg
import pytest

from assets.gpu import energy_facts
from assets.reporting import STEP_RETRY, backfills, failure, verdict
from definitions import build_definitions, defs
from resources import DataRoot, GpuBenchmarkSource, TaudbResource, Warehouse
from resources.taudb import URL_ENV
from sensors import gpu_repetition_sensors
from sensors.automation import AUTOMATION_PREFIX
from tests.dagster.automation_sensors import AUTOMATION

PROJECT_ROOT = Path(__file__).resolve().parents[2]

ACCOUNTING_INPUTS = {"energy_facts/gpu", "energy_facts/geopm", "energy_facts/powerapi",
                     "energy_facts/clustercockpit", "cc_jobs", "carbon_intensity",
                     "tariffs"}
ACCOUNTING = {"carbon_intensity", "tariffs", "accounting_daily", "accounting_monthly",
              "carbon_per_fact", "cost_per_fact", "trust_checks", "waste", "waste_weekly",
              "fact_quality"}
# asset -> (deps, partitioned, checks)
GRAPH = {
    "gpu_repetition_files": (set(), True, set()),
    "gpu_validated_frames": ({"gpu_repetition_files"}, True, {"pandera_valid"}),
    "gpu_repetition_energy": ({"gpu_validated_frames"}, True, {"energy_computed"}),
    "gpu_setting_energy": ({"gpu_repetition_energy"}, False, set()),
    "gpu_benchmark_energy": ({"gpu_setting_energy"}, False, set()),
    "energy_facts/gpu": ({"gpu_repetition_energy"}, False, set()),
    "taudb_trials": ({"gpu_validated_frames", "gpu_repetition_energy"}, False, set()),
    "tau_profile_files": (set(), True, set()),
    "tau_profile_trials": ({"tau_profile_files"}, True, {"loads"}),
    "powerapi_report_files": (set(), True, set()),
    "powerapi_validated_frames": ({"powerapi_report_files"}, True, {"pandera_valid"}),
    "powerapi_report_energy": ({"powerapi_validated_frames"}, True, {"energy_computed"}),
    "powerapi_window_energy": ({"powerapi_validated_frames"}, False, set()),
    "energy_facts/powerapi": ({"powerapi_window_energy"}, False, set()),
    "geopm_report_files": (set(), True, set()),
    "geopm_validated_frames": ({"geopm_report_files"}, True, {"pandera_valid"}),
    "geopm_host_energy": ({"geopm_validated_frames"}, True, {"energy_computed"}),
    "geopm_region_energy": ({"geopm_host_energy"}, False, set()),
    "geopm_report_energy": ({"geopm_host_energy"}, False, set()),
    "energy_facts/geopm": ({"geopm_host_energy"}, False, set()),
    "geopm_trials": ({"geopm_validated_frames"}, True, {"loads"}),
    "powerapi_trials": ({"powerapi_validated_frames", "powerapi_window_energy"}, False, set()),
    "cc_job_files": (set(), True, set()),
    "cc_block_tables": ({"cc_job_files"}, True, {"jobs_read", "schema_conformance"}),
    "cc_job_trials": ({"cc_block_tables"}, True, {"loads"}),
    "cc_jobs": ({"cc_block_tables"}, False, set()),
    "cc_job_energy": ({"cc_block_tables"}, False, set()),
    "cc_rollup": ({"cc_block_tables"}, False, set()),
    "energy_facts/clustercockpit": ({"cc_block_tables"}, False, set()),
    "carbon_intensity": (set(), False, {"rows_read"}),
    "tariffs": (set(), False, set()),
    **{name: (ACCOUNTING_INPUTS, False, checks) for name, checks in (
        ("accounting_daily", set()), ("accounting_monthly", set()),
        ("carbon_per_fact", {"carbon_covered"}), ("cost_per_fact", {"cost_covered"}))},
    "trust_checks": (ACCOUNTING_INPUTS - {"carbon_intensity", "tariffs"}, False,
                     {"gpu_counter_vs_power", "external_at_least_gpu", "smartwatts_vs_rapl",
                      "geopm_vs_clustercockpit"}),
    "waste": (ACCOUNTING_INPUTS - {"carbon_intensity", "tariffs"}
              | {"gpu_repetition_energy", "gpu_validated_frames", "cc_block_tables"}, False,
              set()),
    "waste_weekly": ({"waste"}, False, set()),
    "fact_quality": (ACCOUNTING_INPUTS - {"carbon_intensity", "tariffs", "cc_jobs"}
                     | {"cc_job_energy", "cc_block_tables", "powerapi_window_energy"}, False,
                     set()),
}
POWERAPI_JOB = {"powerapi_validated_frames", "powerapi_report_energy", "powerapi_window_energy",
                "energy_facts/powerapi"}
GEOPM_JOB = {name for name in GRAPH if name.startswith("geopm_") or name == "energy_facts/geopm"}
CC_JOB = {name for name in GRAPH if name.startswith("cc_") or name == "energy_facts/clustercockpit"}


def test_definitions_are_loadable():
    dg.Definitions.validate_loadable(defs)


def test_backfills_gives_one_run_or_bounded_runs_without_the_beta_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with backfills() as one_run:
            assert one_run == dg.BackfillPolicy.single_run()
        with backfills(partitions_per_run=12) as bounded:
            assert bounded == dg.BackfillPolicy.multi_run(12)


def test_every_step_is_retried_in_its_run_but_for_its_verdicts():
    """Every step that computes something runs again after an error that is not about its
    input (a file system full, a store down); its own verdicts are not retried."""
    steps = {asset.node_def.name: asset.node_def.retry_policy for asset in defs.assets
             if isinstance(asset, dg.AssetsDefinition) and asset.is_executable}
    assert len(steps) >= 12
    assert {name for name, policy in steps.items() if policy != STEP_RETRY} == set()
    assert failure(2, {"a": "bad"}).allow_retries is False
    assert verdict("nothing stored yet").allow_retries is False


def test_asset_graph_snapshot():
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == set(GRAPH)
    for name, (deps, partitioned, checks) in GRAPH.items():
        node = graph.get(dg.AssetKey.from_user_string(name))
        assert {k.to_user_string() for k in node.parent_keys} == deps, name
        assert (node.partitions_def is not None) == partitioned, name
        assert {k.name for k in node.check_keys} == checks, name
        spec = next(s for s in defs.resolve_all_asset_specs() if s.key == node.key)
        assert spec.description and spec.group_name and spec.kinds, name
    assert "gpu_repetition_figures" in energy_facts.description  # the other table it writes
    for name in ("gpu_validated_frames", "gpu_repetition_energy", "tau_profile_trials",
                 "powerapi_validated_frames", "powerapi_report_energy",
                 "geopm_validated_frames", "geopm_host_energy"):
        assert graph.get(dg.AssetKey.from_user_string(name)).backfill_policy == dg.BackfillPolicy.single_run()
    for name in ("cc_block_tables", "cc_job_trials"):  # bounded runs: 12 blocks (jobs/1000) each
        assert graph.get(dg.AssetKey.from_user_string(name)).backfill_policy == (
            dg.BackfillPolicy.multi_run(12))
    for name in ("gpu_repetition_energy", "gpu_setting_energy", "gpu_benchmark_energy",
                 "energy_facts/gpu", "taudb_trials", "powerapi_report_energy",
                 "powerapi_window_energy", "energy_facts/powerapi", "geopm_host_energy",
                 "geopm_region_energy", "geopm_report_energy", "energy_facts/geopm",
                 "geopm_trials", "powerapi_trials",
                 "cc_job_trials", "cc_jobs", "cc_job_energy", "cc_rollup",
                 "energy_facts/clustercockpit", "carbon_intensity", "tariffs",
                 "accounting_daily", "accounting_monthly", "carbon_per_fact", "cost_per_fact",
                 "trust_checks", "waste", "waste_weekly", "fact_quality"):
        assert graph.get(dg.AssetKey.from_user_string(name)).automation_condition is not None, name
    for name in ("gpu_validated_frames", "gpu_repetition_energy", "tau_profile_trials",
                 "powerapi_validated_frames", "powerapi_report_energy",
                 "geopm_validated_frames", "geopm_host_energy", "geopm_trials", "cc_block_tables",
                 "cc_job_trials"):
        for check in graph.get(dg.AssetKey.from_user_string(name)).check_keys:  # per partition
            assert graph.get_check_spec(check).partitions_def == graph.get(
                check.asset_key).partitions_def


def test_job_sensors_and_resources():
    job = defs.resolve_job_def("gpu_energy_job")
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == (
        set(GRAPH) - {"gpu_repetition_files", "tau_profile_files", "tau_profile_trials",
                      "powerapi_report_files", "powerapi_trials"} - POWERAPI_JOB - GEOPM_JOB - CC_JOB
        - ACCOUNTING)
    job = defs.resolve_job_def("powerapi_job")
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == POWERAPI_JOB
    job = defs.resolve_job_def("geopm_job")
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == (
        GEOPM_JOB - {"geopm_report_files"})
    job = defs.resolve_job_def("cc_job")
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == (
        CC_JOB - {"cc_job_files"})
    sensors = {s.name: s for s in defs.sensors}
    assert set(sensors) == {"gpu_repetitions_gpu_data", "tau_profile_landing",
                            "powerapi_landing", "geopm_report_landing", "cc_job_archive",
                            "intensity_and_tariff_landing", *AUTOMATION}
    for name in ("tau_profile_landing", "gpu_repetitions_gpu_data", "powerapi_landing",
                 "geopm_report_landing", "cc_job_archive", "intensity_and_tariff_landing"):
        assert sensors[name].default_status == dg.DefaultSensorStatus.STOPPED, name
    # the queue launches the automation's runs (accounting, trials) before new landings'
    for name in AUTOMATION:
        assert sensors[name].run_tags == {"dagster/priority": "1"}, name
        assert sensors[name].default_status == dg.DefaultSensorStatus.RUNNING, name
    assert set(defs.resources) == {"gpu_source", "warehouse", "taudb", "tau_profiles",
                                   "powerapi_source", "geopm_source", "cc_archive", "accounting",
                                   "workers"}
    schedule = defs.resolve_schedule_def("daily_rollups")  # the others: test_schedules.py
    job = defs.resolve_job_def(schedule.job_name)
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} == {
        name for name, (_, partitioned, _) in GRAPH.items() if not partitioned} - {
        "taudb_trials", "powerapi_trials"}
    assert ACCOUNTING < {k.to_user_string() for k in job.asset_layer.executable_asset_keys}
    # every run executes its steps in the run worker itself, the automation's asset runs too
    assert {job.executor_def.name for job in defs.resolve_all_job_defs()} == {"in_process"}


def test_dagster_cli_validates_the_workspace(tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate",
         "-w", "workspace.yaml"],
        check=False, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation successful" in done.stdout + done.stderr


@pytest.mark.parametrize(("variables", "expected"), [
    ({}, "30 30"), ({"JOULEHOUSE_SENSOR_INTERVAL_S": "7"}, "7 7"),
    ({"JOULEHOUSE_SENSOR_INTERVAL_S": "7", "JOULEHOUSE_AUTOMATION_INTERVAL_S": "20"}, "20 7")])
def test_the_automation_is_evaluated_as_often_as_the_sensors_tick_unless_told(
        variables, expected):
    """The automation sensors' least interval (one for all) is the landing sensors'
    (Dagster's own is 30 s whatever they are), or its own variable's; read when the
    definitions load, so in a process of its own."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("JOULEHOUSE_SENSOR_INTERVAL_S", "JOULEHOUSE_AUTOMATION_INTERVAL_S")}
    script = ("import definitions as d; print(*{s.minimum_interval_seconds for s in d.defs.sensors"
              f" if s.name.startswith({AUTOMATION_PREFIX!r})}}, "
              "d.geopm_report_sensor.minimum_interval_seconds)")
    done = subprocess.run(
        [sys.executable, "-c", script],
        check=False, cwd=PROJECT_ROOT, env={**env, **variables}, capture_output=True,
        text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == expected.split()


def test_the_embedded_taudb_lives_beside_the_warehouse(tmp_path, monkeypatch):
    monkeypatch.delenv(URL_ENV, raising=False)
    assert TaudbResource.from_env() is None
    built = build_definitions(GpuBenchmarkSource(data_roots=[DataRoot(path=str(tmp_path))]),
                              Warehouse(root=str(tmp_path / "tables")), TaudbResource.from_env())
    assert built.resources["taudb"].url == f"sqlite:///{tmp_path / 'tables' / 'taudb.sqlite'}"


def test_data_roots_whose_sensor_names_clash_are_refused(tmp_path):
    roots = [DataRoot(path=str(tmp_path), name="a-b"), DataRoot(path=str(tmp_path), name="a.b")]
    with pytest.raises(ValueError, match="same sensor name 'gpu_repetitions_a_b'"):
        gpu_repetition_sensors(GpuBenchmarkSource(data_roots=roots))
