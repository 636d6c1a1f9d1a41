"""A throwaway PostgreSQL server on loopback, for tests and benchmarks.

Trust authentication, fsync off, its own socket folder and a free port; the
server and its files are gone when the context exits. ``initdb`` refuses to
run as root, so as root the server's commands run as the ``postgres`` user.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PG_BIN = Path(os.environ.get("JOULEHOUSE_PG_BIN", "/usr/lib/postgresql/15/bin"))
#: A bound, not a timing: how long the server may take to accept connections.
READY_TIMEOUT_S = 30.0


def missing_requirement() -> str | None:
    """Why no server can be started here, or None when one can."""
    if not (PG_BIN / "initdb").exists():
        return f"PostgreSQL server binaries not found under {PG_BIN}"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: cannot start PostgreSQL"
    return None


def free_port() -> int:
    """A TCP port on loopback that is free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_postgres_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@dataclass
class PostgresServer:
    """A running server: its data folder and port; databases are created on it by name."""

    workdir: Path
    port: int

    @property
    def datadir(self) -> Path:
        return self.workdir / "data"

    def url(self, database: str) -> str:
        """The SQLAlchemy-style URL of ``database`` on this server (user ``postgres``)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, database: str) -> str:
        """Create ``database``; returns its URL."""
        subprocess.run([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                        "-U", "postgres", database], check=True, capture_output=True)
        return self.url(database)

    def start(self) -> None:
        """Start the server on its data folder and port; returns once it accepts
        connections (fails after ``READY_TIMEOUT_S``)."""
        subprocess.run(
            _as_postgres_user([str(PG_BIN / "pg_ctl"), "-D", str(self.datadir), "-w", "-l",
                               str(self.workdir / "server.log"), "-o",
                               (f"-p {self.port} -k {self.workdir} "
                                "-c listen_addresses=127.0.0.1 -c fsync=off"), "start"]),
            check=True, capture_output=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while subprocess.run([str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p",
                              str(self.port)], check=False, capture_output=True).returncode:
            if time.monotonic() > deadline:
                raise TimeoutError(f"PostgreSQL on port {self.port} not ready after "
                                   f"{READY_TIMEOUT_S} s; log: {self.workdir / 'server.log'}")
            time.sleep(0.2)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``pg_ctl -m mode``: ``fast`` ends the sessions and checkpoints,
        ``immediate`` does not)."""
        subprocess.run(_as_postgres_user([str(PG_BIN / "pg_ctl"), "-D", str(self.datadir),
                                          "-m", mode, "stop"]),
                       check=False, capture_output=True)


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A new server on a free port, started; stopped and its files removed on exit."""
    workdir = Path(tempfile.mkdtemp(prefix="joulehouse-pg-"))
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres", "postgres")
    server = PostgresServer(workdir, free_port())
    subprocess.run(
        _as_postgres_user([str(PG_BIN / "initdb"), "-D", str(server.datadir), "-U", "postgres",
                           "--auth=trust", "--no-sync", "-E", "UTF8"]),
        check=True, capture_output=True)
    try:
        server.start()
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def throwaway_postgres(database: str = "joulehouse_test") -> Iterator[str]:
    """Start a server, create ``database``; yield its SQLAlchemy-style URL."""
    with postgres_server() as server:
        yield server.create_database(database)
