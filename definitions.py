"""The Dagster definitions of Joulehouse; ``workspace.yaml`` (and ``dg``) load ``defs``.

A centre declares its sources and its site as component instances under ``defs/``, one
``defs.yaml`` each (types in ``components/``; ``docs/configuration.md``); the bundled
examples are declared there. ``defs`` merges their definitions (the resources and one
sensor per GPU data root, built by the ``components.Site`` instance from every instance)
with the Pythonic ones (assets, jobs, schedules, the other sensors), as Dagster's guide
"Combining Components with Pythonic definitions" does. A bad configuration is refused when
the definitions load, naming the file, the line and the key.

Environment variables override the YAML (``docs/configuration.md`` lists them all):

- a source kind's folder variable replaces its instances' folders: ``JOULEHOUSE_GPU_DATA_ROOTS``
  (see ``resources/gpu.py``), ``JOULEHOUSE_TAU_LANDING``, ``JOULEHOUSE_GEOPM_LANDING``,
  ``JOULEHOUSE_POWERAPI_LANDING``, ``JOULEHOUSE_CC_ARCHIVE`` (folders separated by
  ``os.pathsep``), ``JOULEHOUSE_INTENSITY_LANDING``, ``JOULEHOUSE_TARIFF_LANDING``;
- each setting's variable its value: ``JOULEHOUSE_QUIET_PERIOD_S`` and
  ``JOULEHOUSE_FULL_RESCAN_S`` (shared by the sources), ``JOULEHOUSE_GEOPM_TIMEZONE``,
  ``JOULEHOUSE_POWERAPI_TIMEZONE`` (``_EPOCH_ZONE``, ``_WINDOW``...), ``JOULEHOUSE_CC_*``,
  ``JOULEHOUSE_SITE_TIMEZONE``, ``_CARBON_ZONES``, ``_PUE``, ``_INTENSITY_BASIS``,
  ``_INTENSITY_FALLBACK``, ``_TARIFF_SITES`` (``resources/accounting.py``);
- ``JOULEHOUSE_WAREHOUSE``: the warehouse folder, or ``s3://bucket/prefix`` on an
  S3-compatible object store (``resources/warehouse.py``), default ``warehouse/``;
- ``JOULEHOUSE_TAUDB_URL`` (and ``JOULEHOUSE_TAUDB_SCHEMA``): TAUdb, a secret read at run
  time (``dg.EnvVar``); default the site's ``taudb_url``, else the SQLite file
  ``taudb.sqlite`` beside the warehouse tables;
- ``JOULEHOUSE_STEP_WORKERS``: processes for the per-partition work of a step, default
  one per CPU, at most one per ``JOULEHOUSE_STEP_PARTITIONS_PER_WORKER`` partitions of the
  step (default 8; ``resources/workers.py``); 1: in the step's own process. Or Dask workers:
  ``JOULEHOUSE_STEP_CLUSTER`` (``local``, ``slurm``) with ``_SETTINGS`` (a JSON object;
  ``docs/scale-out.md``).

Schedules (``sensors/schedules.py``, stopped by default): ``daily_rollups`` and one
``weekly_revalidation_<partitions>`` per source.
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
    geopm_days,
    gpu_pipeline,
    gpu_repetition_days,
    powerapi_days,
    tau_profile_days,
)
from assets.clustercockpit import BLOCKS_PER_RUN
from components.centre import centre_definitions
from joulehouse.errors import InputError
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
    accounting_inputs_sensor,
    cc_archive_sensor,
    cc_job,
    geopm_job,
    geopm_report_sensor,
    powerapi_job,
    powerapi_sensor,
    tau_profile_sensor,
    tau_profiles_job,
)
from sensors.automation import automation_sensors
from sensors.gpu_repetitions import JOB_NAME as GPU_JOB
from sensors.schedules import (
    DAYS_REVALIDATED,
    daily_rollups,
    weekly_revalidation,
)

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

#: Every run's steps in the run worker's own process. A source's run is one step over all
#: its partitions, spread over the step workers (``resources/workers.py``); the multiprocess
#: executor would start a second process per step only to import the code again (seen in
#: the end-to-end test's logs as the time from a run's start to its step's). The
#: accounting run's four small steps run one after the other. A run worker killed in a step is then a dead run worker, which
#: run monitoring fails and ``run_retries`` re-executes, where a killed step process was a
#: step failure, not retried (deploy/production/dagster.yaml).
RUN_EXECUTOR = dg.in_process_executor

ASSETS = [*GPU_ASSETS, *TAUDB_ASSETS, *POWERAPI_ASSETS, *GEOPM_ASSETS, *CC_ASSETS,
          *ACCOUNTING_ASSETS]
#: Each source's job, the partitions it runs over, and how many of the newest of them the
#: weekly re-validation runs it over (ClusterCockpit: one backfill run's blocks; GPU, TAU,
#: PowerAPI and GEOPM: a week of days).
SOURCE_JOBS = [(gpu_energy_job, gpu_repetition_days, DAYS_REVALIDATED),
               (tau_profiles_job, tau_profile_days, DAYS_REVALIDATED),
               (powerapi_job, powerapi_days, DAYS_REVALIDATED),
               (geopm_job, geopm_days, DAYS_REVALIDATED),
               (cc_job, cc_job_blocks, BLOCKS_PER_RUN)]
SCHEDULES = [daily_rollups(ASSETS), *(weekly_revalidation(job, partitions, newest)
                                      for job, partitions, newest in SOURCE_JOBS)]



def pythonic_definitions() -> dg.Definitions:
    """The definitions that do not follow the configuration: every asset, job and schedule,
    the sensors of the sources with one sensor each, and the automation sensors (a function:
    a module holds one Definitions object, ``defs``)."""
    return dg.Definitions(
        assets=ASSETS,
        executor=RUN_EXECUTOR,
        jobs=[job for job, _, _ in SOURCE_JOBS],
        sensors=[tau_profile_sensor, powerapi_sensor, geopm_report_sensor, cc_archive_sensor,
                 accounting_inputs_sensor, *automation_sensors(ASSETS)],
        schedules=SCHEDULES,
    )


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
    examples), and the worker processes of the steps (default: one per CPU); for the tests
    and tools that configure Joulehouse in Python rather than under ``defs/``."""
    return dg.Definitions.merge(pythonic_definitions(), centre_definitions({
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
    }))


def load_centre(project_root: Path = PROJECT_ROOT) -> dg.Definitions:
    """The definitions of the centre declared under ``defs/`` of the dg project at
    ``project_root`` (``pyproject.toml``'s ``[tool.dg.project]``): the component instances'
    definitions (the resources and the GPU sensors, from ``components.Site``) merged with
    the Pythonic ones, as Dagster's guide "Combining Components with Pythonic definitions"
    does. A bad configuration raises InputError naming the file, the line and the key (not
    Dagster's error around it, which names only the component whose build refused it)."""
    try:
        declared = dg.load_from_defs_folder(path_within_project=project_root)
    except Exception as err:
        if isinstance(err.__cause__, InputError):
            raise err.__cause__ from None
        raise
    return dg.Definitions.merge(pythonic_definitions(), declared)


defs = load_centre()
