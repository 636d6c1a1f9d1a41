"""Every source's whole pipeline with the warehouse on an object store (moto's S3-compatible
server): the sensor's runs succeed, and every table reads back equal to the same pipeline's
on a path, as do the TAUdb trials."""

import shutil
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from assets.clustercockpit import cc_job_blocks
from assets.geopm import geopm_days
from assets.gpu import gpu_repetition_days
from assets.powerapi import powerapi_days
from definitions import EXAMPLE_CC_ARCHIVE, build_definitions
from joulehouse.gpu.generator import write_data_root
from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import list_trials
from resources import (
    ClusterCockpitArchive,
    DataRoot,
    GeopmReportSource,
    GpuBenchmarkSource,
    PowerapiSource,
    TaudbResource,
    Warehouse,
)
from resources.warehouse import ACCESS_KEY_ENV, ENV
from sensors import clustercockpit, geopm, powerapi
from sensors import gpu_repetitions as gpu_sensors
from tests.dagster.conftest import QUIET_S, REPETITIONS, RUNS, SMALL, settle
from tests.dagster.source_runs import SourceRuns
from tests.dagster_sqlite import empty_instance

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: Plots drawn as deployed (tests/dagster/conftest.py): no test here looks at a plot.
pytestmark = pytest.mark.usefixtures("plots_as_deployed")


def _gpu(data: Path) -> tuple[str, dg.ConfigurableResource, str, str, dg.PartitionsDefinition]:
    """(resource key, source, sensor, job, partitions) of one source over example data."""
    write_data_root(data / "lab", RUNS, repetitions=REPETITIONS, base=SMALL)
    return ("gpu_source", GpuBenchmarkSource(data_roots=[DataRoot(path=str(data / "lab"))],
                                             quiet_period_s=QUIET_S, full_rescan_s=None),
            gpu_sensors.sensor_name("lab"), gpu_sensors.JOB_NAME, gpu_repetition_days)


def _geopm(data: Path) -> tuple:
    (data / "landing").mkdir(parents=True)
    for report in ("geopmbench_1host.legacy.report", "fm_stream_dgemm_2host.yaml.report"):
        shutil.copy(EXAMPLES / "geopm" / report, data / "landing" / report)
    return ("geopm_source", GeopmReportSource(landing_folders=[str(data / "landing")],
                                              quiet_period_s=QUIET_S),
            geopm.SENSOR_NAME, geopm.JOB_NAME, geopm_days)


def _powerapi(data: Path) -> tuple:
    shutil.copytree(EXAMPLES / "powerapi", data / "powerapi")
    return ("powerapi_source", PowerapiSource(landing_folders=[str(data / "powerapi")],
                                              quiet_period_s=QUIET_S),
            powerapi.SENSOR_NAME, powerapi.JOB_NAME, powerapi_days)


def _clustercockpit(data: Path) -> tuple:
    shutil.copytree(EXAMPLE_CC_ARCHIVE, data / "archive")
    return ("cc_archive", ClusterCockpitArchive(archive_roots=[str(data / "archive")],
                                                quiet_period_s=QUIET_S, full_rescan_s=None),
            clustercockpit.SENSOR_NAME, clustercockpit.JOB_NAME, cc_job_blocks)


SOURCES = {"gpu": _gpu, "geopm": _geopm, "powerapi": _powerapi,
           "clustercockpit": _clustercockpit}


def _materialize(setup: tuple, data: Path, warehouse: Warehouse, taudb: Path) -> None:
    """Tick the source's sensor once in a fresh instance and run every run it asks for."""
    resource_key, source, sensor, job, partitions = setup
    resources = {"gpu_source": GpuBenchmarkSource(data_roots=[DataRoot(path=str(data))]),
                 resource_key: source}
    defs = build_definitions(warehouse=warehouse, taudb=TaudbResource(url=f"sqlite:///{taudb}"),
                             **resources)
    with empty_instance() as instance:
        runs = SourceRuns(instance, defs, sensor, job, resource_key, source, partitions)
        requests = runs.tick().run_requests
        assert requests
        for request in requests:
            assert runs.launch(request).success


def _trials(taudb: Path) -> list[str]:
    with TaudbDatabase(f"sqlite:///{taudb}") as db:
        return sorted(trial["name"] for trial in list_trials(db))


@pytest.mark.parametrize("name", SOURCES)
def test_the_pipeline_on_the_object_store_stores_the_tables_of_the_path(
        name, object_store, s3_warehouse, tmp_path, monkeypatch):
    data = tmp_path / "data"
    setup = SOURCES[name](data)
    settle()
    local = Warehouse(root=str(tmp_path / "warehouse"))
    _materialize(setup, data, local, tmp_path / "local-taudb.sqlite")

    for variable, value in {**object_store.environment, ENV: s3_warehouse}.items():
        monkeypatch.setenv(variable, value)
    remote = Warehouse.from_env(tmp_path / "unused")
    assert remote.access_key_id == dg.EnvVar(ACCESS_KEY_ENV)  # the name, never the value
    _materialize(setup, data, remote, tmp_path / "remote-taudb.sqlite")

    here, there = local.tables(), remote.tables()
    assert not there.is_local
    tables = here.table_files()
    assert tables and list(there.table_files()) == list(tables)
    for table in tables:
        pd.testing.assert_frame_equal(there.read_table(table), here.read_table(table),
                                      obj=f"{name}: {table}")
    assert _trials(tmp_path / "remote-taudb.sqlite") == _trials(tmp_path / "local-taudb.sqlite")
    assert not (tmp_path / "unused").exists()
