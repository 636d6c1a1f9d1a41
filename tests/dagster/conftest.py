"""Fixtures of the Dagster-layer tests: a generated data root, an instance, definitions, and
the README's demo run once."""

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from unittest import mock

import dagster as dg
import pytest

from assets.plot_cadence import PLOT_EVERY_ENV
from definitions import build_definitions
from joulehouse.gpu.generator import RepetitionSpec, write_data_root, write_repetition
from joulehouse.gpu.layout import find_repetitions
from resources import DataRoot, GpuBenchmarkSource, Warehouse
from sensors.gpu_repetitions import sensor_name
from tests.dagster_sqlite import BATCHING, empty_instance

QUIET_S = 1.0  # the quiet period: ctime counts, which only waiting can age
RUNS = {"power-limit": {"bert": ["150W", "250W"], "resnet": ["200W"]}}
REPETITIONS = 2
SMALL = RepetitionSpec(duration_s=8.0, epochs=2)
#: The day partition of the generated repetitions of root ``lab``: they all start on the
#: generator's day (``RepetitionSpec.start_utc``).
DAY = "lab/2020-11-16"


def write_started_on(folder: Path, day: str, seed: int = 0) -> None:
    """A repetition like the generated ones (:data:`SMALL`) written into ``folder`` (its
    files replaced) that started at 10:00 UTC on ``day`` (``YYYY-MM-DD``)."""
    write_repetition(folder, replace(SMALL, start_utc=f"{day} 10:00:00"), seed=seed)


def repetition_keys(root: Path, name: str | None = None) -> list[str]:
    """The keys (``<root name>/<experiment>/<benchmark>/<run>/<repetition>``) of every
    repetition under ``root`` (named ``name``, default its folder's), sorted."""
    return [f"{name or root.name}/{ref.key}" for ref in find_repetitions(root)]


@pytest.fixture
def plots_as_deployed() -> Iterator[None]:
    """Plots drawn at most every 600 s, as every deployment sets (``JOULEHOUSE_PLOT_EVERY_S``,
    tests/dagster/test_deploy_files.py; assets/plot_cadence.py): a test's first run of an
    asset draws them, its later runs within 600 s do not (matplotlib's PNGs were a fifth of
    some files' CPU). For the tests that look at no later run's plot; the default, every
    run drawing, is tested in tests/dagster/test_plot_cadence.py. Set apart from the test's
    ``monkeypatch``, which some tests undo halfway: the variable stayed set for the next
    files of the worker (an instance's ``patch.dict`` put it back after the undo)."""
    with mock.patch.dict(os.environ, {PLOT_EVERY_ENV: "600"}):
        yield


def settle() -> None:
    """Wait out the quiet period."""
    time.sleep(QUIET_S + 0.1)


def lab_data_root(folder: Path) -> Path:
    """A generated data root ``folder / "lab"``: 3 runs x 2 repetitions, quiet."""
    root = folder / "lab"
    write_data_root(root, RUNS, repetitions=REPETITIONS, base=SMALL)
    settle()
    return root


def lab_source(data_root: Path) -> GpuBenchmarkSource:
    """The GPU source over ``data_root`` as the tests read it (the tests' quiet period, no
    full rescan)."""
    return GpuBenchmarkSource(data_roots=[DataRoot(path=str(data_root))],
                              quiet_period_s=QUIET_S, full_rescan_s=None)


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    """:func:`lab_data_root` in this test's folder."""
    return lab_data_root(tmp_path)


@pytest.fixture
def instance(request):
    """A test instance on the storage the project runs with (deploy/dagster.yaml's batching
    storage, with event batches); parametrized indirectly with ``DAGSTER_SQLITE``, on
    Dagster's own SQLite storage."""
    with empty_instance(getattr(request, "param", None) or BATCHING) as test_instance:
        yield test_instance


@pytest.fixture
def source(data_root: Path) -> GpuBenchmarkSource:
    return lab_source(data_root)


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    return Warehouse(root=str(tmp_path / "warehouse"))


@pytest.fixture
def defs(source: GpuBenchmarkSource, warehouse: Warehouse) -> dg.Definitions:
    return build_definitions(source, warehouse)


@pytest.fixture
def sensor(defs: dg.Definitions) -> dg.SensorDefinition:
    return defs.resolve_sensor_def(sensor_name("lab"))


PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: A bound, not a timing: the demo runs every source's job, each a run in its process; made
#: once in the suite now (30-80 s on a quiet machine; over 600 s only with two other test
#: suites and a second demo on the same 2 CPUs).
DEMO_TIMEOUT_S = 600


@dataclass(frozen=True)
class DemoRun:
    """Where ``deploy/demo.py`` ran: its Dagster home and warehouse, and what it printed."""

    home: Path
    warehouse: Path
    stdout: str


@pytest.fixture(scope="session")
def demo_once(tmp_path_factory) -> DemoRun:
    """``deploy/demo.py`` run once (per test worker) on the bundled examples, in a fresh
    Dagster home with ``make demo``'s instance (deploy/dagster.yaml) and a fresh warehouse;
    tests take copies (:func:`demo`), so each starts from what the demo left, whatever ran
    before."""
    tmp = tmp_path_factory.mktemp("demo")
    home, warehouse = tmp / "home", tmp / "warehouse"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "deploy" / "dagster.yaml", home)  # as make demo does
    done = subprocess.run([sys.executable, "deploy/demo.py", "--warehouse", str(warehouse)],
                          check=False, cwd=PROJECT_ROOT,
                          env={**os.environ, "DAGSTER_HOME": str(home)}, capture_output=True,
                          text=True, timeout=DEMO_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    return DemoRun(home, warehouse, done.stdout)


@pytest.fixture
def demo(demo_once: DemoRun, tmp_path: Path, monkeypatch) -> DemoRun:
    """A copy of the demo's Dagster home and warehouse, for this test alone (its
    ``DAGSTER_HOME``: the instance's storage is configured from it)."""
    copy = DemoRun(tmp_path / "demo" / "home", tmp_path / "demo" / "warehouse", demo_once.stdout)
    shutil.copytree(demo_once.home, copy.home)
    shutil.copytree(demo_once.warehouse, copy.warehouse)
    monkeypatch.setenv("DAGSTER_HOME", str(copy.home))
    return copy
