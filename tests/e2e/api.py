"""What the end-to-end test asks the webserver's GraphQL API, as the UI does: the code
location loaded, sensors turned on and off, runs and their statuses, a backfill launched and
followed. (Partition statuses and check results: ``tests/dagster/webserver.py``.)"""

from __future__ import annotations

import urllib.error
from collections.abc import Callable, Iterable
from typing import TypeVar

from tests.dagster import webserver
from tests.dagster.webserver import graphql
from tests.e2e.stack import LOCATION, REPOSITORY, wait_for

T = TypeVar("T")

#: Run statuses of a run not yet ended.
IN_FLIGHT = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")

LOCATION_STATUS = """
query Location {
  workspaceOrError {
    ... on Workspace {
      locationEntries {
        name
        loadStatus
        locationOrLoadError {
          __typename
          ... on PythonError { message }
          ... on RepositoryLocation { repositories { name sensors { name } } }
        }
      }
    }
  }
}"""

START_SENSOR = """
mutation Start($selector: SensorSelector!) {
  startSensor(sensorSelector: $selector) {
    __typename
    ... on Sensor { name sensorState { status } }
    ... on PythonError { message }
  }
}"""

SENSOR_ID = """
query Sensor($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) {
    __typename
    ... on Sensor { id }
    ... on PythonError { message }
  }
}"""

SENSOR_STATE = """
query SensorState($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) {
    ... on Sensor { sensorState { status ticks(limit: 1) { status } } }
  }
}"""

STOP_SENSOR = """
mutation Stop($id: String!) {
  stopSensor(id: $id) {
    __typename
    ... on StopSensorMutationResult { instigationState { status } }
    ... on PythonError { message }
  }
}"""

RUNS = """
query Runs($filter: RunsFilter) {
  runsOrError(filter: $filter) {
    ... on Runs {
      results { runId status jobName tags { key value } }
    }
  }
}"""

GROUP_ASSETS = """
query Group($group: AssetGroupSelector!) {
  assetNodes(group: $group) { assetKey { path } }
}"""

BACKFILL = """
query Backfill($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    ... on PartitionBackfill {
      status
      numPartitions
      runs { runId status }
    }
  }
}"""


def sensors_loaded(port: int) -> list[str] | None:
    """The sensor names of the code location once it is loaded, else None (fails if it
    failed to load)."""
    [entry] = graphql(port, LOCATION_STATUS)["workspaceOrError"]["locationEntries"]
    location = entry["locationOrLoadError"]
    if location is None or entry["loadStatus"] != "LOADED":
        return None
    assert location["__typename"] == "RepositoryLocation", location
    [repository] = location["repositories"]
    return [sensor["name"] for sensor in repository["sensors"]]


def _sensor_selector(name: str) -> dict:
    """The GraphQL ``SensorSelector`` of the sensor ``name`` of the code location."""
    return {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY,
            "sensorName": name}


def start_sensor(port: int, name: str) -> None:
    """Turn the sensor ``name`` on, as its toggle in the UI does."""
    answer = graphql(port, START_SENSOR, {"selector": _sensor_selector(name)})["startSensor"]
    assert answer.get("sensorState", {}).get("status") == "RUNNING", answer


def stop_sensor(port: int, name: str) -> None:
    """Turn the sensor ``name`` off, as its toggle in the UI does (a sensor running by
    default, as the automation sensors, included)."""
    sensor = graphql(port, SENSOR_ID, {"selector": _sensor_selector(name)})["sensorOrError"]
    assert sensor["__typename"] == "Sensor", sensor
    answer = graphql(port, STOP_SENSOR, {"id": sensor["id"]})["stopSensor"]
    assert (answer.get("instigationState") or {}).get("status") == "STOPPED", answer


def stop_sensors(port: int, names: Iterable[str], timeout_s: float) -> None:
    """Turn the sensors ``names`` off and wait until they stay off: each reads STOPPED with no
    tick in flight at two polls in a row (one turned on again is turned off again). A tick
    of the daemon that read a sensor's state just before it was turned off may write it back
    as running at its end (seen under load: an automation sensor and a landing sensor
    ticking, and asking for runs, until the last test, after the second had turned them
    off); fails after ``timeout_s``."""
    names = list(names)
    for name in names:
        stop_sensor(port, name)
    settled: list[bool] = []

    def stayed_off() -> bool:
        states = {name: graphql(port, SENSOR_STATE, {"selector": _sensor_selector(name)})[
            "sensorOrError"]["sensorState"] for name in names}
        for name, state in states.items():
            if state["status"] != "STOPPED":
                stop_sensor(port, name)
        settled.append(all(state["status"] == "STOPPED" and not any(
            tick["status"] == "STARTED" for tick in state["ticks"]) for state in states.values()))
        return settled[-2:] == [True, True]

    wait_for(f"the sensors {names} to stay off", stayed_off, timeout_s)


def runs(port: int, **run_filter) -> list[dict]:
    """The runs matching ``run_filter`` (a GraphQL ``RunsFilter``), newest first; each with
    its tags as a dict."""
    results = graphql(port, RUNS, {"filter": run_filter})["runsOrError"]["results"]
    for run in results:
        run["tags"] = {tag["key"]: tag["value"] for tag in run["tags"]}
    return results


def launch_backfill(port: int, assets: list[str]) -> str:
    """A backfill of every partition of ``assets``, as the UI's "Materialize all" launches
    it; returns its id."""
    return webserver.launch_backfill(port, {
        "assetSelection": [{"path": [asset]} for asset in assets],
        "allPartitions": True, "title": "end-to-end backfill"})


def backfill(port: int, backfill_id: str) -> dict:
    """The backfill's ``status``, ``numPartitions`` and ``runs``."""
    return graphql(port, BACKFILL, {"id": backfill_id})["partitionBackfillOrError"]


def group_assets(port: int, group: str) -> list[str]:
    """The names of the assets of the asset group ``group`` as its graph shows them (the
    last part of each key: ``energy_facts/gpu`` shows as ``gpu``), sorted."""
    nodes = graphql(port, GROUP_ASSETS, {"group": {
        "groupName": group, "repositoryName": REPOSITORY,
        "repositoryLocationName": LOCATION}})["assetNodes"]
    return sorted(node["assetKey"]["path"][-1] for node in nodes)


def unless_unavailable(ask: Callable[[], T]) -> T | None:
    """``ask()``, or None while the webserver answers 5xx (its storage reconnecting after a
    restart of PostgreSQL): for polling with ``stack.wait_for``."""
    try:
        return ask()
    except urllib.error.HTTPError as error:
        if error.code < 500:
            raise
        return None
