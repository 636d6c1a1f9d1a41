"""Starting Dagster's processes for a test: a free loopback port, waiting for the webserver,
stopping the whole process group (code servers included) however the test ends; asking the
webserver what the UI reads (partition statuses, check executions) through GraphQL."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.postgres_server import free_port

PROJECT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
WEBSERVER = Path(sys.executable).parent / "dagster-webserver"
#: Bounds, not timings: a webserver loads the definitions in a code server first.
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0


def wait_for_code_server(process: subprocess.Popen, port: int, log: Path,
                         timeout_s: float = START_TIMEOUT_S) -> None:
    """Returns once the gRPC code server on ``port`` answers a ping (in this process); fails
    if it ends first or ``timeout_s`` passes."""
    from dagster._core.errors import DagsterUserCodeUnreachableError
    from dagster._grpc.client import DagsterGrpcClient

    client = DagsterGrpcClient(host=HOST, port=port)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"ended with {process.returncode}:\n{log.read_text()}")
        try:
            assert client.ping("joulehouse")["echo"] == "joulehouse"
            return
        except DagsterUserCodeUnreachableError:
            time.sleep(0.5)
    raise AssertionError(f"not serving after {timeout_s} s:\n{log.read_text()}")


#: ``command`` as a terminal's shell starts it: SIGHUP, SIGINT, SIGQUIT and SIGTERM at their
#: default, and SIGPIPE and SIGXFSZ (which Python ignores) too, then ``exec``. A test runner
#: started in the background (``cmd &``) or under ``nohup``, or a library in the worker, may
#: have left them ignored; an ignored signal is inherited across ``exec``, and a
#: non-interactive bash cannot trap a signal ignored when it started (``make dev``'s Ctrl-C
#: then never reaches its trap). Python, not ``env --default-signal``: coreutils before 8.31
#: (RHEL 8) lack it.
AS_FROM_A_TERMINAL = [sys.executable, "-c", (
    "import os, signal, sys\n"
    "for name in ('SIGHUP', 'SIGINT', 'SIGQUIT', 'SIGTERM', 'SIGPIPE', 'SIGXFSZ'):\n"
    "    signal.signal(getattr(signal, name), signal.SIG_DFL)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])")]


@contextmanager
def started(command: list[str], env: dict[str, str], log: Path, append: bool = False
            ) -> Iterator[subprocess.Popen]:
    """``command`` run in the project root as from a terminal (:data:`AS_FROM_A_TERMINAL`),
    in a process group of its own, output to ``log`` (appended to it with ``append``);
    the group is killed on the way out if it is still there."""
    with log.open("ab" if append else "wb") as out:
        process = subprocess.Popen([*AS_FROM_A_TERMINAL, *command], cwd=PROJECT,
                                   env={**os.environ, **env}, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield process
    finally:
        if process.poll() is None or group_alive(process.pid):
            kill_group(process)


def kill_group(process: subprocess.Popen) -> None:
    """``kill -9`` of ``process``'s process group (one started by :func:`started`), then
    its exit waited for."""
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


LAUNCH_BACKFILL = """
mutation Backfill($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
    ... on PartitionKeysNotFoundError { message }
    ... on InvalidSubsetError { message }
  }
}"""


def launch_backfill(port: int, params: dict) -> str:
    """Launch a partition backfill as the UI does (``params``: GraphQL's
    ``LaunchBackfillParams``, e.g. ``assetSelection`` and ``partitionNames`` or
    ``allPartitions``); returns its id, fails naming the answer if it was not launched."""
    answer = graphql(port, LAUNCH_BACKFILL, {"params": params})["launchPartitionBackfill"]
    assert answer["__typename"] == "LaunchBackfillSuccess", answer
    return answer["backfillId"]


def dagster_home(tmp_path: Path, monkeypatch) -> Path:
    """A DAGSTER_HOME under ``tmp_path`` with the project's local instance configuration,
    set in the environment (``DagsterInstance.get()`` and the webserver read it)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


@contextmanager
def webserver(env: dict[str, str], log: Path) -> Iterator[int]:
    """A ``dagster-webserver`` over the project's ``workspace.yaml`` (its definitions
    configured by ``env``) and the instance of DAGSTER_HOME, serving on a free loopback
    port; yields the port once it answers."""
    port = free_port()
    command = [str(WEBSERVER), "-w", "workspace.yaml", "-h", HOST, "-p", str(port)]
    with started(command, env, log) as process:
        wait_until_serving(process, port, log)
        yield port


STATUSES = """
query Statuses($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    ... on AssetNode {
      partitionStats { numMaterialized numPartitions numFailed }
      assetPartitionStatuses {
        ... on DefaultPartitionStatuses { materializedPartitions failedPartitions }
      }
    }
  }
}"""

CHECK = """
query Check($path: [String!]!, $check: String!, $partition: String!) {
  assetCheckExecutions(assetKey: {path: $path}, checkName: $check, partition: $partition,
                       limit: 1) {
    status
    evaluation {
      partition
      severity
      description
      metadataEntries {
        label
        ... on TextMetadataEntry { text }
        ... on PathMetadataEntry { path }
        ... on IntMetadataEntry { intValue }
        ... on JsonMetadataEntry { jsonString }
      }
    }
  }
}"""


def statuses(port: int, asset: str) -> dict:
    """The asset's ``partitionStats`` and ``assetPartitionStatuses``, as the UI reads them."""
    return graphql(port, STATUSES, {"path": [asset]})["assetNodeOrError"]


def check_execution(port: int, asset: str, check: str, partition: str) -> dict:
    """The latest execution of the check ``check`` on ``asset`` for ``partition`` ('' for an
    unpartitioned asset): its ``status`` and ``evaluation``, whose metadata is also given
    as ``entries`` (label -> text, path, int or parsed JSON)."""
    [execution] = graphql(port, CHECK, {"path": [asset], "check": check,
                                        "partition": partition})["assetCheckExecutions"]
    evaluation = execution["evaluation"]
    if evaluation is not None:
        evaluation["entries"] = {entry["label"]: _entry_value(entry)
                                 for entry in evaluation["metadataEntries"]}
    return execution


def warning(port: int, asset: str, check: str, partition: str) -> dict:
    """The evaluation of :func:`check_execution`, which must be a WARN: status FAILED,
    severity WARN (what an input left out, ``joulehouse/leftout.py``); ``partition`` ''
    for an unpartitioned asset's check."""
    execution = check_execution(port, asset, check, partition)
    assert execution["status"] == "FAILED", (asset, check, partition, execution)
    assert execution["evaluation"]["severity"] == "WARN", (asset, check, partition, execution)
    return execution["evaluation"]


def _entry_value(entry: dict):
    if "jsonString" in entry:
        return json.loads(entry["jsonString"])
    return next((entry[name] for name in ("text", "path", "intValue") if name in entry), None)
