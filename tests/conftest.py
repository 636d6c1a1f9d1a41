"""Shared fixtures: peer data and a throwaway PostgreSQL server.

Tests that need ``../shared/peer-data`` or the PostgreSQL binaries skip with
a reason on a user's machine without them; under CI (``CI=true``) such a skip
is an error instead, so CI cannot pass by skipping.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PEER_DATA = PROJECT_ROOT.parent / "shared" / "peer-data"
PG_BIN = Path(os.environ.get("JOULEHOUSE_PG_BIN", "/usr/lib/postgresql/15/bin"))


def skip_or_fail(reason: str) -> None:
    """Skip the test, or fail it when running in CI (CI=true)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def peer_data() -> Path:
    """The shared peer-data folder (real files written by the reference tools)."""
    if not PEER_DATA.is_dir():
        skip_or_fail(f"peer data not found at {PEER_DATA}")
    return PEER_DATA


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_postgres_user(cmd: list[str]) -> list[str]:
    """initdb refuses root: run the server's commands as the postgres user then."""
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A SQLAlchemy-style URL of a throwaway PostgreSQL 15 server on loopback."""
    initdb = PG_BIN / "initdb"
    if not initdb.exists():
        skip_or_fail(f"PostgreSQL server binaries not found under {PG_BIN}")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        skip_or_fail("running as root without runuser: cannot start PostgreSQL")
    workdir = Path(tempfile.mkdtemp(prefix="joulehouse-pg-"))
    datadir = workdir / "data"
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres", "postgres")
    port = _free_port()
    run = dict(check=True, capture_output=True, text=True)
    subprocess.run(
        _as_postgres_user([str(initdb), "-D", str(datadir), "-U", "postgres",
                           "--auth=trust", "--no-sync", "-E", "UTF8"]), **run)
    subprocess.run(
        _as_postgres_user([str(PG_BIN / "pg_ctl"), "-D", str(datadir), "-w", "-l",
                           str(workdir / "server.log"), "-o",
                           f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1 -c fsync=off",
                           "start"]), **run)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ready = subprocess.run([str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p",
                                    str(port)], capture_output=True)
            if ready.returncode == 0:
                break
            time.sleep(0.2)
        subprocess.run([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(port),
                        "-U", "postgres", "joulehouse_test"], **run)
        yield f"postgresql://postgres@127.0.0.1:{port}/joulehouse_test"
    finally:
        subprocess.run(_as_postgres_user([str(PG_BIN / "pg_ctl"), "-D", str(datadir),
                                          "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)
