"""Shared fixtures: peer data, a throwaway PostgreSQL server and object store.

Tests that need ``../shared/peer-data``, the PostgreSQL binaries or moto's
server skip with a reason on a user's machine without them; under CI (``CI=true``) such a skip
is an error instead, so CI cannot pass by skipping.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from object_store import ObjectStoreServer, throwaway_object_store
from object_store import missing_requirement as object_store_missing
from postgres_server import missing_requirement, throwaway_postgres

from joulehouse.warehouse import Warehouse

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PEER_DATA = PROJECT_ROOT.parent / "shared" / "peer-data"


def in_ci() -> bool:
    """Whether this is a CI run (``CI=true``, as ``.ci/run`` sets)."""
    return os.environ.get("CI", "").lower() == "true"


def skip_or_fail(reason: str) -> None:
    """Skip the test, or fail it when running in CI (CI=true)."""
    if in_ci():
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


#: The modules that start whole stacks of processes (longest first), collected first so that
#: pytest-xdist (``--dist loadfile --no-loadscope-reorder``, pyproject.toml) hands them out
#: first and the short modules fill in beside them, not after them.
LONGEST_MODULES = ("benchmarks/test_soak.py", "e2e/test_whole_stack.py",
                   "dagster/test_dagster_webserver.py", "dagster/test_dagster_demo.py",
                   "dagster/test_dagster_webserver_sources.py", "test_left_out_sources.py",
                   "powerapi/test_powerapi_left_out.py", "cluster/test_dask_executor.py",
                   "taudb/test_tau_reader.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """:data:`LONGEST_MODULES` first, in that order; the others as collected."""
    tests = Path(__file__).parent
    rank = {tests / module: place for place, module in enumerate(LONGEST_MODULES)}
    missing = [str(path) for path in rank if not path.is_file()]
    assert not missing, f"LONGEST_MODULES names modules that are gone: {missing}"
    items.sort(key=lambda item: rank.get(item.path, len(rank)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI a run that skipped any test fails (a skip not through :func:`skip_or_fail`
    too), as does one that ran none (pytest's own exit code 5)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if not in_ci() or hasattr(session.config, "workerinput") or reporter is None:
        return  # an xdist worker: its reports go to the controller, which decides
    skipped = reporter.stats.get("skipped", [])
    if skipped and exitstatus == pytest.ExitCode.OK:
        reporter.line("")
        reporter.write_sep("=", f"CI=true: {len(skipped)} skipped, so the run fails", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def peer_data() -> Path:
    """The shared peer-data folder (real files written by the reference tools)."""
    if not PEER_DATA.is_dir():
        skip_or_fail(f"peer data not found at {PEER_DATA}")
    return PEER_DATA


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A SQLAlchemy-style URL of a throwaway PostgreSQL 15 server on loopback."""
    reason = missing_requirement()
    if reason:
        skip_or_fail(reason)
    with throwaway_postgres() as url:
        yield url


@pytest.fixture(scope="session")
def object_store() -> ObjectStoreServer:
    """A throwaway S3-compatible object store (moto's server) on loopback."""
    reason = object_store_missing()
    if reason:
        skip_or_fail(reason)
    with throwaway_object_store() as server:
        yield server


@pytest.fixture
def s3_warehouse(object_store: ObjectStoreServer) -> str:
    """The URL of a warehouse in a new, empty bucket of :func:`object_store`."""
    return f"s3://{object_store.new_bucket()}/warehouse"


@pytest.fixture(params=["path", "object store"])
def empty_warehouse(request, tmp_path) -> Warehouse:
    """An empty warehouse in a folder, then one in a bucket of :func:`object_store`."""
    if request.param == "path":
        return Warehouse(tmp_path / "warehouse")
    server = request.getfixturevalue("object_store")
    return Warehouse(request.getfixturevalue("s3_warehouse"), server.store)


@pytest.fixture(scope="session")
def java_tools() -> dict[str, str]:
    """Paths of ``java`` and ``javac`` (a JDK, 11 or later) for tests that run Java tools."""
    tools = {name: shutil.which(name) for name in ("java", "javac")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        skip_or_fail(f"{' and '.join(missing)} not found on PATH (a JDK: Debian's "
                     "openjdk-17-jdk-headless)")
    return tools


#: TAU's Java tools (PerfDMF, ParaProf's reader) as the peer data holds them.
TAU_JARS = ("perfdmf.jar", "tau-common.jar", "postgresql.jar", "xerces.jar", "jargs.jar",
            "gson-2.1.jar", "jfreechart-1.0.12.jar", "jcommon-1.0.15.jar")


@pytest.fixture(scope="session")
def tau_java_classpath(peer_data, java_tools) -> str:
    """The class path of TAU's Java tools in ``peer-data/tau/tau-java``."""
    folder = peer_data / "tau" / "tau-java"
    missing = [jar for jar in TAU_JARS if not (folder / jar).is_file()]
    if missing:
        skip_or_fail(f"TAU's jars {missing} not found in {folder}")
    return os.pathsep.join(str(folder / jar) for jar in TAU_JARS)
