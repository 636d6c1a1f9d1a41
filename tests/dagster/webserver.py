"""Starting Dagster's processes for a test: a free loopback port, waiting for the webserver,
stopping the whole process group (code servers included) however the test ends."""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
#: Bounds, not timings: a webserver loads the definitions in a code server first.
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


@contextmanager
def started(command: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """``command`` run in the project root, in a process group of its own, output to
    ``log``; the group is killed on the way out if it is still there."""
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=PROJECT, env={**os.environ, **env},
                                   stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        yield process
    finally:
        if process.poll() is None or group_alive(process.pid):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until_serving(process: subprocess.Popen, port: int, log: Path) -> dict:
    """The webserver's /server_info once it answers; fails if the process ends first or
    ``START_TIMEOUT_S`` passes."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"ended with {process.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/server_info", timeout=5) as reply:
                return json.load(reply)
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.5)
    raise AssertionError(f"not serving after {START_TIMEOUT_S} s:\n{log.read_text()}")


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    """The ``data`` of a GraphQL query to the webserver (fails on errors)."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(f"http://{HOST}:{port}/graphql", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        answer = json.load(reply)
    assert not answer.get("errors"), answer["errors"]
    return answer["data"]
