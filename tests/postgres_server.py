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
from pathlib import Path

PG_BIN = Path(os.environ.get("JOULEHOUSE_PG_BIN", "/usr/lib/postgresql/15/bin"))


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


@contextmanager
def throwaway_postgres(database: str = "joulehouse_test") -> Iterator[str]:
    """Start a server, create ``database``; yield its SQLAlchemy-style URL."""
    workdir = Path(tempfile.mkdtemp(prefix="joulehouse-pg-"))
    datadir = workdir / "data"
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres", "postgres")
    port = free_port()
    subprocess.run(
        _as_postgres_user([str(PG_BIN / "initdb"), "-D", str(datadir), "-U", "postgres",
                           "--auth=trust", "--no-sync", "-E", "UTF8"]),
        check=True, capture_output=True)
    subprocess.run(
        _as_postgres_user([str(PG_BIN / "pg_ctl"), "-D", str(datadir), "-w", "-l",
                           str(workdir / "server.log"), "-o",
                           f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1 -c fsync=off",
                           "start"]),
        check=True, capture_output=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ready = subprocess.run([str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p",
                                    str(port)], check=False, capture_output=True)
            if ready.returncode == 0:
                break
            time.sleep(0.2)
        subprocess.run([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(port),
                        "-U", "postgres", database], check=True, capture_output=True)
        yield f"postgresql://postgres@127.0.0.1:{port}/{database}"
    finally:
        subprocess.run(_as_postgres_user([str(PG_BIN / "pg_ctl"), "-D", str(datadir),
                                          "-m", "immediate", "stop"]),
                       check=False, capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)
