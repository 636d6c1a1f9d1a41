"""The Dagster definitions of Joulehouse; ``workspace.yaml`` loads ``defs``.

Configuration (defaults are for a fresh clone):

- ``JOULEHOUSE_GPU_DATA_ROOTS``: GPU data roots (see ``resources/gpu.py``),
  default ``examples/gpu-data``;
- ``JOULEHOUSE_WAREHOUSE``: the warehouse folder, or ``s3://bucket/prefix`` on an
  S3-compatible object store (``resources/warehouse.py``), default ``warehouse/``;
- ``JOULEHOUSE_TAUDB_URL`` (and ``JOULEHOUSE_TAUDB_SCHEMA``): TAUdb, default the SQLite
  file ``taudb.sqlite`` beside the warehouse tables; the URL is read at run time (``dg.EnvVar``);
- ``JOULEHOUSE_TAU_LANDING``: folders where TAU profile sets land, default
  ``examples/tau-profiles``;
- ``JOULEHOUSE_GEOPM_LANDING`` (and ``JOULEHOUSE_GEOPM_TIMEZONE``): folders where GEOPM
  reports land, default ``examples/geopm``;
- ``JOULEHOUSE_POWERAPI_LANDING`` (and ``JOULEHOUSE_POWERAPI_TIMEZONE``, ``_EPOCH_ZONE``,
  ``_WINDOW``): folders where PowerAPI report files land, default ``examples/powerapi``.
- ``JOULEHOUSE_CC_ARCHIVE`` (and ``JOULEHOUSE_CC_MAX_JOBS_PER_TICK``, ``_MAX_MISSING``,
  ``_CHECK_SCHEMA``): ClusterCockpit job archive roots (separated by ``os.pathsep``),
  default ``examples/clustercockpit/archive``.
- ``JOULEHOUSE_INTENSITY_LANDING`` (and ``JOULEHOUSE_SITE_TIMEZONE``, ``_CARBON_ZONES``,
  ``_PUE``, ``_INTENSITY_BASIS``, ``_INTENSITY_FALLBACK``): the grid carbon-intensity
  folder and how facts become carbon (``resources/accounting.py``), default
  ``examples/intensity``.
- Schedules (``sensors/schedules.py``, stopped by default): ``daily_rollups`` and one
  ``weekly_revalidation_<partitions>`` per source.
- ``JOULEHOUSE_STEP_WORKERS``: processes for the per-partition work of a step, default
  one per CPU (``resources/workers.py``); 1: in the step's own process. Or Dask workers:
  ``JOULEHOUSE_STEP_CLUSTER`` (``local``, ``slurm``) with ``_SETTINGS`` (a JSON object;
  ``docs/scale-out.md``).
- ``JOULEHOUSE_QUIET_PERIOD_S`` and ``JOULEHOUSE_FULL_RESCAN_S``: the sensors' quiet period
  and rolling-rescan period, shared by the sources.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from assets import (
    ACCOUNTING_ASSETS,
    CC_ASSETS,
    GEOPM_ASSETS,
    GPU_ASSETS,
    POWERAPI_ASSETS,
    TAUDB_ASSETS,
    cc_job_blocks,
    geopm_reports,
    gpu_pipeline,
    gpu_repetitions,
    powerapi_reports,
    tau_profile_sets,
)
from assets.clustercockpit import BLOCKS_PER_RUN
from resources import (
    AccountingSettings,
    ClusterCockpitArchive,
    GeopmReportSource,
    GpuBenchmarkSource,
    PowerapiSource,
    StepWorkers,
    TaudbResource,
    TauProfileSource,
    Warehouse,
    embedded_taudb_url,
)
from sensors import (
    cc_archive_sensor,
    cc_job,
    geopm_job,
    geopm_report_sensor,
    gpu_repetition_sensors,
    powerapi_job,
    powerapi_sensor,
    tau_profile_sensor,
    tau_profiles_job,
)
from sensors.gpu_repetitions import JOB_NAME as GPU_JOB
from sensors.schedules import NEWEST_PARTITIONS, daily_rollups, weekly_revalidation

PROJECT_ROOT = Path(__file__).resolve().parent
EXAMPLE_GPU_DATA = PROJECT_ROOT / "examples" / "gpu-data"
EXAMPLE_TAU_PROFILES = PROJECT_ROOT / "examples" / "tau-profiles"
EXAMPLE_GEOPM_REPORTS = PROJECT_ROOT / "examples" / "geopm"
EXAMPLE_POWERAPI = PROJECT_ROOT / "examples" / "powerapi"
EXAMPLE_CC_ARCHIVE = PROJECT_ROOT / "examples" / "clustercockpit" / "archive"
EXAMPLE_INTENSITY = PROJECT_ROOT / "examples" / "intensity"
DEFAULT_WAREHOUSE = PROJECT_ROOT / "warehouse"

gpu_energy_job = dg.define_asset_job(
    GPU_JOB,
    selection=dg.AssetSelection.assets(gpu_pipeline),
    description=("The whole GPU-benchmark pipeline, from validated frames to energy_facts "
                 "and the runs' TAUdb trials."),
    tags={"joulehouse/pipeline": "gpu"},
)

automation = dg.AutomationConditionSensorDefinition(
    "joulehouse_automation",
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=("Evaluates the assets' automation conditions: per-repetition energy follows "
                 "its validated frames, the tables over all repetitions follow any change."),
)


#: Every run's steps in the run worker's own process. A source's run is one step over all
#: its partitions, spread over the step workers (``resources/workers.py``); the multiprocess
#: executor would start a second process per step only to import the code again (8-30 s
#: of a 2-CPU machine's time under load, per run). The accounting run's four small steps
#: run one after the other. A run worker killed in a step is then a dead run worker, which
#: run monitoring fails and ``run_retries`` re-executes, where a killed step process was a
#: step failure, not retried (deploy/production/dagster.yaml).
RUN_EXECUTOR = dg.in_process_executor

ASSETS = [*GPU_ASSETS, *TAUDB_ASSETS, *POWERAPI_ASSETS, *GEOPM_ASSETS, *CC_ASSETS,
          *ACCOUNTING_ASSETS]
#: Each source's job, the partitions it runs over, and how many of the newest of them the
#: weekly re-validation runs it over (ClusterCockpit: one backfill run's blocks).
SOURCE_JOBS = [(gpu_energy_job, gpu_repetitions, NEWEST_PARTITIONS),
               (tau_profiles_job, tau_profile_sets, NEWEST_PARTITIONS),
               (powerapi_job, powerapi_reports, NEWEST_PARTITIONS),
               (geopm_job, geopm_reports, NEWEST_PARTITIONS),
               (cc_job, cc_job_blocks, BLOCKS_PER_RUN)]
SCHEDULES = [daily_rollups(ASSETS), *(weekly_revalidation(job, partitions, newest)
                                      for job, partitions, newest in SOURCE_JOBS)]


def build_definitions(gpu_source: GpuBenchmarkSource, warehouse: Warehouse,
                      taudb: TaudbResource | None = None,
                      tau_profiles: TauProfileSource | None = None,
                      powerapi_source: PowerapiSource | None = None,
                      geopm_source: GeopmReportSource | None = None,
                      cc_archive: ClusterCockpitArchive | None = None,
                      accounting: AccountingSettings | None = None,
                      workers: StepWorkers | None = None) -> dg.Definitions:
    """The definitions over the given data roots, warehouse, TAUdb (default: the embedded
    SQLite file beside the warehouse tables), TAU profile, PowerAPI and GEOPM landing
    folders, ClusterCockpit archive and accounting settings (default: the bundled
    examples), and the worker processes of the steps (default: one per CPU)."""
    return dg.Definitions(
        assets=ASSETS,
        executor=RUN_EXECUTOR,
        jobs=[job for job, _, _ in SOURCE_JOBS],
        sensors=[*gpu_repetition_sensors(gpu_source), tau_profile_sensor, powerapi_sensor,
                 geopm_report_sensor, cc_archive_sensor,
                 automation],
        schedules=SCHEDULES,
        resources={
            "gpu_source": gpu_source, "warehouse": warehouse,
            "taudb": taudb or TaudbResource(url=embedded_taudb_url(warehouse.root)),
            "tau_profiles": tau_profiles or TauProfileSource(
                landing_folders=[str(EXAMPLE_TAU_PROFILES)]),
            "powerapi_source": powerapi_source or PowerapiSource(
                landing_folders=[str(EXAMPLE_POWERAPI)]),
            "geopm_source": geopm_source or GeopmReportSource(
                landing_folders=[str(EXAMPLE_GEOPM_REPORTS)]),
            "cc_archive": cc_archive or ClusterCockpitArchive(
                archive_roots=[str(EXAMPLE_CC_ARCHIVE)]),
            "accounting": accounting or AccountingSettings(
                intensity_landing=str(EXAMPLE_INTENSITY)),
            "workers": workers or StepWorkers(),
        },
    )


defs = build_definitions(
    GpuBenchmarkSource.from_env(EXAMPLE_GPU_DATA),
    Warehouse.from_env(DEFAULT_WAREHOUSE),
    TaudbResource.from_env(),
    TauProfileSource.from_env(EXAMPLE_TAU_PROFILES),
    PowerapiSource.from_env(EXAMPLE_POWERAPI),
    GeopmReportSource.from_env(EXAMPLE_GEOPM_REPORTS),
    ClusterCockpitArchive.from_env(EXAMPLE_CC_ARCHIVE),
    AccountingSettings.from_env(EXAMPLE_INTENSITY),
    StepWorkers.from_env(),
)
