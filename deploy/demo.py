"""Materialize every GPU asset on a data root and print the per-setting energy table.

    python deploy/demo.py [DATA_ROOT] [--warehouse DIR]

The sources are those the centre under ``defs/`` declares (the bundled examples;
``docs/configuration.md``), read with the definitions' own loader; the demo only waits for
no quiet period and keeps its tables and TAUdb beside each other under ``--warehouse``.
Uses the Dagster instance in ``$DAGSTER_HOME`` (the Makefile sets it to
``.dagster_home/``; without it, ``.dagster_home/`` is used too). The same
sensor that watches a data root in production registers the days of every
complete repetition as partitions (quiet period 0: the demo does not wait) and
asks for its runs; they execute here, in-process: one run over all
repetitions for a fresh data root. The bundled TAU profiles, PowerAPI
reports, GEOPM reports (``examples/geopm``) and the ClusterCockpit job
archive (``examples/clustercockpit/archive``) go the same way (their sensors
ticked once, one run each); the PowerAPI energy per report and target is
printed with the estimates' error against the measurement (its TAUdb trials, one per sensor
and day, built in a run of their own), and the
ClusterCockpit energy per job and metric with cc-backend's figure beside it
and the number of its jobs' TAUdb trials. Last, the accounting tables are built from
every source's energy_facts and the bundled grid intensity (``examples/intensity``), and
the daily rollup with carbon is printed (UTC days, each source in its primary method),
then every TAUdb trial of the demo.
Exits non-zero if any run failed.
"""

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from assets.accounting import (
    CARBON_TABLE,
    COST_TABLE,
    DAILY_TABLE,
    accounting,
    carbon_intensity,
    tariffs,
)
from assets.clustercockpit import JOB_ENERGY_TABLE
from assets.geopm import REPORT_TABLE
from assets.gpu import SETTING_TABLE
from assets.powerapi import REPORT_ENERGY_TABLE, WINDOW_TABLE
from assets.taudb import powerapi_trials
from definitions import build_definitions
from definitions import defs as centre
from joulehouse.accounting.rollups import UTC, primary
from joulehouse.taudb.loader import list_trials
from resources import DataRoot, TaudbResource, Warehouse, embedded_taudb_url
from sensors.clustercockpit import JOB_NAME as CC_JOB
from sensors.clustercockpit import SENSOR_NAME as CC_SENSOR
from sensors.geopm import JOB_NAME as GEOPM_JOB
from sensors.geopm import SENSOR_NAME as GEOPM_SENSOR
from sensors.gpu_repetitions import JOB_NAME, sensor_name
from sensors.local import launch_in_process, tick
from sensors.powerapi import JOB_NAME as POWERAPI_JOB
from sensors.powerapi import SENSOR_NAME as POWERAPI_SENSOR
from sensors.tau_profiles import JOB_NAME as TAU_JOB
from sensors.tau_profiles import SENSOR_NAME as TAU_SENSOR

# The columns printed: (column, header, factor); energies in kJ.
SHOWN = [
    ("data_root", "data_root", None), ("experiment", "experiment", None),
    ("benchmark", "benchmark", None), ("run", "setting", None),
    ("repetitions", "reps", None),
    ("duration_s_mean", "time s", 1.0), ("duration_s_std", "± s", 1.0),
    ("gpu_energy_j_mean", "GPU kJ", 1e-3), ("gpu_energy_j_std", "± kJ", 1e-3),
    ("gpu_energy_counter_j_mean", "counter kJ", 1e-3),
    ("gpu_energy_power_j_mean", "power kJ", 1e-3),
    ("gpu_energy_samples_j_mean", "samples kJ", 1e-3),
    ("external_energy_j_mean", "external kJ", 1e-3),
    ("gpu_mean_power_counter_w", "GPU W", 1.0),
    ("edp_js", "EDP kJ·s", 1e-3),
]
#: The demo's PowerAPI energy windows: short, so that the plot of the bundled 10 s shows a
#: few points.
POWERAPI_WINDOW = "2s"
# The GEOPM columns printed, per report (Application Totals over its hosts); energies in kJ.
GEOPM_SHOWN = [
    ("report", "report", None), ("host_count", "hosts", None),
    ("runtime_s", "runtime host·s", 1.0), ("package_energy_j", "package kJ", 1e-3),
    ("dram_energy_j", "DRAM kJ", 1e-3), ("gpu_energy_j", "GPU kJ", 1e-3),
    ("power_w", "package W/host", 1.0),
]

# The ClusterCockpit columns printed, per job and energy metric; energies in kWh.
CC_SHOWN = [
    ("job", "job", None), ("metric", "metric", None), ("hosts", "hosts", None),
    ("duration_s", "duration s", 1.0), ("energy_j", "energy kWh", 1 / 3.6e6),
    ("covered_fraction", "covered", 1.0), ("energy_cc_kwh", "cc-backend kWh", 1.0),
]

# The accounting columns printed, per UTC day and key (primary methods only).
ACCOUNTING_SHOWN = [
    ("day", "day", None), ("source", "source", None), ("group", "group", None),
    ("partition", "partition", None), ("user", "user", None), ("project", "project", None), ("component", "component", None),
    ("method", "method", None), ("entities", "entities", None),
    ("duration_h", "hours", 1.0), ("energy_kwh", "kWh", 1.0), ("mean_power_w", "W", 1.0),
    ("co2_g", "gCO2e", 1.0), ("cost", "cost", 1.0), ("currency", "currency", None),
]


def _launch(job: dg.JobDefinition, instance: dg.DagsterInstance, requests: list,
            sensor: str) -> None:
    """Execute the run requests of ``sensor`` in-process, tagged as that sensor's runs (so
    that, turned on, it does not ask for them again); raises RuntimeError naming the
    failed runs."""
    failed = [result.run_id for result in
              (launch_in_process(job, instance, request, sensor, log_level="WARNING")
               for request in requests)
              if not result.success]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(requests)} {job.name} run(s) failed: "
                           f"{', '.join(failed)} (see them in the UI: `make dev`)")


#: Run config of the demo's own runs: console logs from WARNING (the event log keeps all).
QUIET_RUN = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def updated(resource: dg.ConfigurableResource, fields: dict[str, Any]
            ) -> dg.ConfigurableResource:
    """A new ``resource`` of the same type with ``fields`` changed (built anew: a copy would
    keep the configuration Dagster took from the original)."""
    return type(resource)(**{**{name: getattr(resource, name)
                                for name in type(resource).model_fields}, **fields})


def demo_resources(declared: dict[str, Any], data_root: Path | None, warehouse: Path
                   ) -> dict[str, Any]:
    """The ``declared`` resources of the centre under ``defs/`` (environment overrides
    applied), for the demo: no quiet period and no rolling rescan, short PowerAPI windows,
    the tables and the embedded TAUdb under ``warehouse``, and ``data_root`` in place of the
    declared GPU data roots where given."""
    quiet = {"quiet_period_s": 0}
    gpu = {**quiet, "full_rescan_s": None}
    if data_root is not None:
        gpu["data_roots"] = [DataRoot(path=str(data_root))]
    return {**declared,
            "gpu_source": updated(declared["gpu_source"], gpu),
            "tau_profiles": updated(declared["tau_profiles"], quiet),
            "powerapi_source": updated(declared["powerapi_source"],
                                       {**quiet, "window": POWERAPI_WINDOW}),
            "geopm_source": updated(declared["geopm_source"], quiet),
            "cc_archive": updated(declared["cc_archive"], quiet),
            "warehouse": Warehouse(root=str(warehouse)),
            "taudb": TaudbResource(url=embedded_taudb_url(warehouse))}


def run_demo(resources: dict[str, Any], instance: dg.DagsterInstance
             ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Materialize the pipeline on the GPU data roots (its runs also become TAUdb trials),
    load the TAU profiles and materialize the PowerAPI reports and their TAUdb trials (one
    per sensor and day); returns the per-setting table and the PowerAPI energy per report
    and target.

    Raises RuntimeError naming the failed runs.
    """
    source, store, taudb = (resources[key] for key in ("gpu_source", "warehouse", "taudb"))
    tau_profiles, powerapi = resources["tau_profiles"], resources["powerapi_source"]
    defs = build_definitions(**resources)
    data = []
    for root in source.data_roots:
        gpu_sensor = sensor_name(root.key_prefix)
        ticked = tick(defs.resolve_sensor_def(gpu_sensor), instance, {"gpu_source": source})
        if not ticked.run_requests:
            raise RuntimeError(f"no complete repetition under {root.path}")
        _launch(defs.resolve_job_def(JOB_NAME), instance, ticked.run_requests, gpu_sensor)
        data.extend(ticked.run_requests)
    profiles = tick(defs.resolve_sensor_def(TAU_SENSOR), instance,
                    {"tau_profiles": tau_profiles})
    _launch(defs.resolve_job_def(TAU_JOB), instance, profiles.run_requests, TAU_SENSOR)
    reports = tick(defs.resolve_sensor_def(POWERAPI_SENSOR), instance,
                   {"powerapi_source": powerapi})
    _launch(defs.resolve_job_def(POWERAPI_JOB), instance, reports.run_requests,
            POWERAPI_SENSOR)
    days = dg.materialize([powerapi_trials], instance=instance, raise_on_error=False,
                          run_config=QUIET_RUN,
                          resources={"powerapi_source": powerapi, "warehouse": store,
                                     "taudb": taudb})
    if not days.success:
        raise RuntimeError(f"the PowerAPI trials run failed: {days.run_id}")
    runs = len(data) + len(profiles.run_requests) + len(reports.run_requests) + 1
    print(f"{runs} run(s) in "
          f"{instance.root_directory}; tables in {store.root}; TAUdb {taudb.url}")
    return store.tables().read_table(SETTING_TABLE), powerapi_summary(store)


def taudb_trials(warehouse: Path) -> pd.DataFrame:
    """Every trial of the demo's TAUdb (the embedded SQLite file beside the tables)."""
    with TaudbResource(url=embedded_taudb_url(warehouse)).open() as db:
        trials = pd.DataFrame(list_trials(db))
    return trials[["id", "name", "data_source", "total_threads", "source_key"]]


def powerapi_summary(store: Warehouse) -> pd.DataFrame:
    """PowerAPI energy per report entry (file or folder), sensor, target, component and method
    over all its windows (J, and mean W = energy / time), with the error of the sum of the
    cgroup estimates of all reports against the measurement, per sensor and component."""
    tables = store.tables()
    per_report = pd.concat([
        tables.read_partitions(REPORT_ENERGY_TABLE, [key]).assign(report=key.partition("/")[2])
        for key in tables.partition_keys(REPORT_ENERGY_TABLE)], ignore_index=True)
    key = ["report", "sensor", "target", "component", "method"]
    summary = per_report.groupby(key, as_index=False)[["energy_j", "duration_s"]].sum()
    summary["mean_w"] = summary["energy_j"] / summary["duration_s"]
    whole = tables.read_table(WINDOW_TABLE)
    measured = whole[whole["method"] == "measured"].groupby(["sensor", "component"])[
        ["measured_j", "estimated_total_j"]].sum()
    error = (measured["estimated_total_j"] - measured["measured_j"]) / measured["measured_j"]
    summary = summary.join(error.rename("estimates_error"), on=["sensor", "component"])
    return summary.drop(columns="duration_s")


def run_geopm(resources: dict[str, Any], instance: dg.DagsterInstance) -> pd.DataFrame:
    """Materialize the GEOPM pipeline on the landed reports (one run, through the landing
    sensor); returns the per-report table's Application Totals rows.

    Raises RuntimeError naming the failed run.
    """
    source, store = resources["geopm_source"], resources["warehouse"]
    defs = build_definitions(**resources)
    data = tick(defs.resolve_sensor_def(GEOPM_SENSOR), instance, {"geopm_source": source})
    _launch(defs.resolve_job_def(GEOPM_JOB), instance, data.run_requests, GEOPM_SENSOR)
    print(f"{len(data.run_requests)} GEOPM run over {', '.join(source.landing_folders)}")
    table = store.tables().read_table(REPORT_TABLE)
    return table[table["section"] == "application"]


def run_clustercockpit(resources: dict[str, Any], instance: dg.DagsterInstance
                       ) -> tuple[pd.DataFrame, int]:
    """Materialize the ClusterCockpit pipeline on the job archives (one run, through the
    archive sensor); returns the per-job energy table and the number of its jobs' TAUdb
    trials.

    Raises RuntimeError naming the failed run.
    """
    source, store, taudb = (resources[key] for key in ("cc_archive", "warehouse", "taudb"))
    defs = build_definitions(**resources)
    data = tick(defs.resolve_sensor_def(CC_SENSOR), instance, {"cc_archive": source})
    _launch(defs.resolve_job_def(CC_JOB), instance, data.run_requests, CC_SENSOR)
    print(f"{len(data.run_requests)} ClusterCockpit run over {', '.join(source.archive_roots)}")
    table = store.tables().read_table(JOB_ENERGY_TABLE)
    with taudb.open() as db:
        trials = sum(trial["name"] in set(table["job"]) for trial in list_trials(db))
    return table, trials


def run_accounting(resources: dict[str, Any], instance: dg.DagsterInstance
                   ) -> tuple[pd.DataFrame, int, int]:
    """Materialize the grid intensity and tariff and the accounting tables over every
    source's energy_facts (one run); returns the daily rollup (UTC days, primary methods) and
    the numbers of facts without carbon and without cost.

    Raises RuntimeError if the run failed.
    """
    settings, store = resources["accounting"], resources["warehouse"]
    result = dg.materialize([carbon_intensity, tariffs, accounting], instance=instance,
                            resources={"accounting": settings, "warehouse": store},
                            run_config=QUIET_RUN, raise_on_error=False)
    if not result.success:
        raise RuntimeError(f"the accounting run failed: {result.run_id}")
    print(f"1 accounting run over {settings.intensity_landing} (zones {dict(settings.zones)}, "
          f"PUE {settings.pue}) and the tariff {settings.tariff_landing}")
    tables = store.tables()
    daily = tables.read_table(DAILY_TABLE)
    without_carbon = int(tables.read_table(CARBON_TABLE)["co2_g"].isna().sum())
    without_cost = int(tables.read_table(COST_TABLE)["cost"].isna().sum())
    return primary(daily[daily["calendar"] == UTC]), without_carbon, without_cost


def readable(table: pd.DataFrame, shown: list = SHOWN) -> pd.DataFrame:
    """The printed subset ``shown`` of a table, in readable units."""
    return pd.DataFrame({
        header: table[column] * factor if factor else table[column]
        for column, header, factor in shown if column in table.columns
    })


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_root", nargs="?", type=Path,
                        help="a GPU data root in place of those defs/ declares")
    parser.add_argument("--warehouse", type=Path,
                        help="the tables and TAUdb (default: the warehouse defs/ declares)")
    args = parser.parse_args(argv)
    os.environ.setdefault("DAGSTER_HOME", str(PROJECT_ROOT / ".dagster_home"))
    # Batches of asset events stored as one write (deploy/dagster.yaml's storage).
    os.environ.setdefault("DAGSTER_EVENT_BATCH_SIZE", "1000")
    Path(os.environ["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
    declared = dict(centre.resources)  # loaded once, when definitions was imported
    warehouse = (args.warehouse or Path(declared["warehouse"].root)).resolve()
    with dg.DagsterInstance.get() as instance:
        try:
            resources = demo_resources(declared, args.data_root and args.data_root.resolve(),
                                       warehouse)
            table, powerapi = run_demo(resources, instance)
            geopm = run_geopm(resources, instance)
            cc_energy, cc_trials = run_clustercockpit(resources, instance)
            daily, without_carbon, without_cost = run_accounting(resources, instance)
        except RuntimeError as err:
            print(f"demo failed: {err}", file=sys.stderr)
            return 1
    with pd.option_context("display.width", 200, "display.max_columns", None,
                           "display.float_format", "{:.3f}".format):
        print(readable(table).to_string(index=False))
        print(f"\nPowerAPI energy per report and target ({POWERAPI_WINDOW} windows; "
              "estimates_error: the sum of the cgroup estimates of all reports against the "
              "measured RAPL energy):")
        print(powerapi.to_string(index=False))
        print("\nGEOPM reports (Application Totals summed over hosts):")
        print(readable(geopm, GEOPM_SHOWN).to_string(index=False))
        print("\nClusterCockpit jobs (energy per job and metric, summed over hosts; "
              "cc-backend's own figure beside it):")
        print(readable(cc_energy, CC_SHOWN).to_string(index=False))
        print(f"\nTAUdb: {cc_trials} ClusterCockpit job trials")
        print("\nTAUdb trials (data_source 1: TAU profiles; 999: Joulehouse's mappings: GPU "
              "benchmark runs, GEOPM reports, ClusterCockpit jobs, PowerAPI sensor days):")
        print(taudb_trials(warehouse).to_string(index=False))
        print("\nEnergy and carbon per UTC day (accounting_daily; each source in its primary "
              "method, facts across midnight split by time):")
        print(readable(daily.assign(day=daily["day"].dt.strftime("%Y-%m-%d")),
                       ACCOUNTING_SHOWN).to_string(index=False))
        print(f"\nFacts without carbon (no intensity or zone): {without_carbon}; "
              f"without cost (no tariff band): {without_cost}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
