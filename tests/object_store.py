"""A throwaway S3-compatible object store for the tests: moto's server on loopback.

:func:`throwaway_object_store` starts ``python -m moto.server`` (``moto[server]``, the dev
extra) as a subprocess on a free loopback port, waits until it answers, yields its
:class:`ObjectStoreServer` and stops the process by its id whatever happens. moto keeps
everything in memory: nothing is left on disk. The credentials are made-up test values
that moto accepts; they are handed over through the environment, as in production.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow.fs as pafs
from postgres_server import free_port
from processes import stop

from joulehouse.warehouse import ObjectStore

START_TIMEOUT_S = 30.0
ACCESS_KEY = "joulehouse-test"
SECRET_KEY = "joulehouse-test-secret"  # moto's server accepts any; no real secret


def missing_requirement() -> str | None:
    """Why the object store cannot start here, or None."""
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
        return "moto's server is not installed (pip install 'moto[server]', the dev extra)"
    return None


@dataclass(frozen=True)
class ObjectStoreServer:
    """A running server: its endpoint URL and the credentials' environment."""

    endpoint: str

    @property
    def environment(self) -> dict[str, str]:
        """The variables a process needs to reach it (``JOULEHOUSE_S3_ENDPOINT``, AWS's)."""
        return {"JOULEHOUSE_S3_ENDPOINT": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1"}

    @property
    def store(self) -> ObjectStore:
        """How the warehouse reaches it."""
        return ObjectStore(endpoint=self.endpoint, region="us-east-1", access_key=ACCESS_KEY,
                           secret_key=SECRET_KEY)

    def new_bucket(self) -> str:
        """A new empty bucket's name."""
        name = f"joulehouse-{uuid.uuid4().hex[:12]}"
        pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                          endpoint_override=self.endpoint, region="us-east-1",
                          allow_bucket_creation=True).create_dir(name)
        return name


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@contextmanager
def throwaway_object_store(log_path: str | None = None) -> Iterator[ObjectStoreServer]:
    """moto's S3-compatible server on a free loopback port while inside; its request log
    (a line per request) goes to ``log_path`` where given (a benchmark counts requests)."""
    port = free_port()
    with (open(log_path, "w+b") if log_path else tempfile.TemporaryFile()) as log:
        # its request log: an unread pipe would fill up
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _answers(port):
                if process.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"moto's server exited with {process.returncode}: "
                                       f"{log.read().decode(errors='replace')[-2000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto's server did not answer on port {port} "
                                       f"within {START_TIMEOUT_S:.0f} s")
                time.sleep(0.1)
            yield ObjectStoreServer(endpoint=f"http://127.0.0.1:{port}")
        finally:
            stop(process)
