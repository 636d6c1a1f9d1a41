"""Issue 28: what Dagster 1.13 does with GEOPM's dynamic partitions, a decade of them.

For each size N (``--sizes``), on a fresh DAGSTER_HOME holding the project's local
instance file (``deploy/dagster.yaml``: SQLite through the project's batching storage)
or, with ``--postgres``, ``deploy/production/dagster.yaml`` on a throwaway PostgreSQL
server (``tests/postgres_server.py``, as the tests start it), with the project's real
definitions (``definitions.build_definitions``) and GEOPM's partitions
(``assets/geopm.py``, ``geopm_days``, one partition per landing folder and UTC day:
3,650 are a decade of one landing folder, 36,500 a decade of ten; the figures of one
partition per report, 10,000 to 1,000,000 of them, were measured by this script before
the days, benchmarks/README.md "A decade of partitions"):

1. register: N keys shaped as the GEOPM sensor makes them (``<landing>/<YYYY-MM-DD>``:
   the ten years of days up to 2020-04-01 of folder ``landing``, then of ``landing01``
   ...) added with ``instance.add_dynamic_partitions`` in batches of ``--batch``; then
   ``--materialized`` of them (spread evenly; all at small N) get a materialization of
   ``geopm_validated_frames`` (``report_runless_asset_event``, one by one), so that the
   partitions page has something to show;
2. ``instance.get_dynamic_partitions("geopm_days")``, which the sensors and assets
   call at every tick and run: wall time (best of 3) and memory (tracemalloc's peak
   during one call, and the keys' size);
3. one tick of the real GEOPM sensor (``sensors/geopm.py``) that finds 10 new reports
   of one day (2020-04-01, the newest registered: the steady state, today's day
   registered by an earlier tick) in a landing folder, applied as the daemon applies it
   (``sensors/local.tick``: each key checked with ``has_dynamic_partition``, then added;
   its asset events stored): wall and CPU seconds, and the run request;
4. run creation: that request created as the daemon creates it
   (``create_run_for_job`` with its tags and run config, the hand-out; the planned
   events of its partition);
5. the UI: ``dagster-webserver`` on that instance (``tests/dagster/webserver.py``);
   headless Chromium (``tests/e2e/browser.py``) opens the asset page, the partitions
   page (of ``geopm_validated_frames``) and the GEOPM group's asset graph, twice each
   (the first pays the asset status cache); a page's time runs from ``goto`` until it
   shows no "Loading..." and its last GraphQL answer has come (the issue's target: 5 s).
   The GraphQL operations each page issued are recorded and then replayed alone with
   ``urllib`` (the server's time without the browser); the run of step 4 is also launched
   through GraphQL (``launchRun``, as the UI's "Materialize" does: queued, no daemon).
   Without Chromium, or with ``--no-browser``, the operations captured at an earlier
   size (or none) are replayed.

Run: ``.venv/bin/python benchmarks/partition_scale.py [--quick] [--sizes 3650,36500]
[--postgres] [--no-browser] [--json FILE]``. Each size's data lives in a temporary folder
under ``benchmarks/.data/`` and is removed after it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from contextlib import contextmanager, suppress
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests")]

from backfill import instance_config
from machine import describe, load_average

from assets.geopm import GeopmHandOut, geopm_days, geopm_validated_frames
from definitions import EXAMPLE_GEOPM_REPORTS, build_definitions
from resources import DataRoot, GeopmReportSource, GpuBenchmarkSource, Warehouse
from sensors.geopm import SENSOR_NAME
from sensors.partition_runs import RANGE_END, RANGE_START, RUN_KEY_TAG
from tests.dagster import webserver
from tests.e2e import browser

DATA = ROOT / "benchmarks" / ".data"
NEW = 10
QUIET_S = 0.5
LANDING = "landing"  # the landing folder's name: the first part of every key
EXAMPLE = EXAMPLE_GEOPM_REPORTS / "geopmbench_1host.legacy.report"
NEWEST_DAY = date(2020, 4, 1)  # the example report's Start Time: the day the tick hands out
DECADE = 3650  # days of one landing folder
ASSET = geopm_validated_frames.key.to_user_string()
LOCATION, REPOSITORY = "joulehouse", "__repository__"
PAGES = {"asset page": f"/assets/{ASSET}",
         "partitions page": f"/assets/{ASSET}?view=partitions",
         "asset graph": f"/locations/{LOCATION}/asset-groups/geopm/lineage"}
PAGE_LIMIT_S = 180.0
QUIET_UI_S = 2.0  # a page has settled once no GraphQL answer came for this long
LOCATIONS = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
LAUNCH_RUN = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId status } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
  }
}"""


def cpu_s() -> float:
    """CPU seconds of this process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def key(index: int, n: int) -> str:
    """The ``index``-th of ``n`` registered keys, shaped as the GEOPM sensor's
    (folder/day): the last is ``landing/2020-04-01``, the decade before it precedes it,
    and the decades of folders ``landing01``, ``landing02`` ... before those."""
    back = n - 1 - index
    folder, days = divmod(back, DECADE)
    return f"{LANDING}{f'{folder:02d}' if folder else ''}/{NEWEST_DAY - timedelta(days=days)}"


def register(instance: dg.DagsterInstance, n: int, batch: int) -> dict:
    """N keys added in batches: seconds, and the slowest batch."""
    started, slowest = time.perf_counter(), 0.0
    for first in range(0, n, batch):
        at = time.perf_counter()
        instance.add_dynamic_partitions(
            geopm_days.name, [key(i, n) for i in range(first, min(n, first + batch))])
        slowest = max(slowest, time.perf_counter() - at)
    wall = time.perf_counter() - started
    return {"partitions": n, "wall_s": wall, "per_key_ms": 1000 * wall / n,
            "slowest_batch_s": slowest, "batch": batch, "load": load_average()}


def materialize(instance: dg.DagsterInstance, n: int, count: int) -> dict:
    """``count`` of the N keys, spread evenly, materialized (one runless event each)."""
    count = min(n, count)
    step = n / count if count else 1
    started = time.perf_counter()
    for i in range(count):
        instance.report_runless_asset_event(dg.AssetMaterialization(
            geopm_validated_frames.key, partition=key(int(i * step), n)))
    wall = time.perf_counter() - started
    return {"materialized": count, "wall_s": wall,
            "per_event_ms": 1000 * wall / count if count else 0.0, "load": load_average()}


def get_partitions(instance: dg.DagsterInstance, n: int) -> dict:
    """``get_dynamic_partitions``: best of 3 (wall, CPU), tracemalloc's peak in one call."""
    walls, cpus = [], []
    for _ in range(3):
        at, cpu = time.perf_counter(), cpu_s()
        keys = instance.get_dynamic_partitions(geopm_days.name)
        walls.append(time.perf_counter() - at)
        cpus.append(cpu_s() - cpu)
    assert len(keys) == n, (len(keys), n)
    size = sys.getsizeof(keys) + sum(sys.getsizeof(k) for k in keys)
    del keys
    tracemalloc.start()
    instance.get_dynamic_partitions(geopm_days.name)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"wall_s": min(walls), "cpu_s": min(cpus), "walls_s": walls,
            "peak_mib": peak / 2**20, "result_mib": size / 2**20, "load": load_average()}


def landing_folder(base: Path) -> Path:
    """A landing folder of NEW GEOPM reports (copies of the bundled one-host report), aged
    past the quiet period."""
    folder = base / LANDING
    folder.mkdir(parents=True)
    for i in range(NEW):
        shutil.copyfile(EXAMPLE, folder / f"new{i:02d}.report")
    time.sleep(QUIET_S + 0.2)
    return folder


def sensor_tick(instance: dg.DagsterInstance, defs: dg.Definitions, source) -> tuple[dict, object]:
    """One tick of the GEOPM sensor from an empty cursor, applied as ``sensors/local.tick``
    applies it (the daemon's order); its evaluation and its application timed apart."""
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    at, cpu = time.perf_counter(), cpu_s()
    with dg.build_sensor_context(instance=instance, resources={"geopm_source": source},
                                 sensor_name=sensor.name) as context:
        data = sensor.evaluate_tick(context)
    evaluated, evaluated_cpu = time.perf_counter() - at, cpu_s() - cpu
    for event in data.asset_events:
        instance.report_runless_asset_event(event)
    for request in data.dynamic_partitions_requests:
        assert isinstance(request, dg.AddDynamicPartitionsRequest), request
        instance.add_dynamic_partitions(request.partitions_def_name, [
            k for k in request.partition_keys
            if not instance.has_dynamic_partition(request.partitions_def_name, k)])
    wall, cpu = time.perf_counter() - at, cpu_s() - cpu
    assert len(data.run_requests) == 1, data.run_requests
    [run] = data.run_requests
    assert run.tags["joulehouse/partitions"] == "1", run.tags  # the reports' one day
    [handed] = GeopmHandOut.named_in(run.run_config).values()
    assert len(handed) == NEW, handed
    return {"wall_s": wall, "cpu_s": cpu, "evaluate_s": evaluated,
            "evaluate_cpu_s": evaluated_cpu, "apply_s": wall - evaluated,
            "run_request": {"job": run.job_name, "run_key": run.run_key,
                            RANGE_START: run.tags[RANGE_START],
                            RANGE_END: run.tags[RANGE_END],
                            "partitions": int(run.tags["joulehouse/partitions"])},
            "load": load_average()}, run


def create_run(instance: dg.DagsterInstance, defs: dg.Definitions, request) -> dict:
    """The run request created as the daemon creates it (``create_run_for_job``)."""
    at, cpu = time.perf_counter(), cpu_s()
    run = instance.create_run_for_job(defs.resolve_job_def(request.job_name),
                                      run_config=request.run_config,
                                      tags={**request.tags, RUN_KEY_TAG: request.run_key})
    wall, cpu = time.perf_counter() - at, cpu_s() - cpu
    planned = len(instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
        limit=10_000).records)
    return {"wall_s": wall, "cpu_s": cpu, "planned_events": planned, "load": load_average()}


def post(port: int, body: dict, timeout_s: float = PAGE_LIMIT_S) -> tuple[float, int, bool]:
    """A GraphQL POST as the browser sent it: (seconds, bytes of the answer, errors?)."""
    request = urllib.request.Request(f"http://{webserver.HOST}:{port}/graphql",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    at = time.perf_counter()
    with urllib.request.urlopen(request, timeout=timeout_s) as reply:
        raw = reply.read()
    seconds = time.perf_counter() - at
    return seconds, len(raw), bool(json.loads(raw).get("errors"))


def open_page(page, base_url: str, path: str) -> dict:
    """Open ``path``; its time until it shows no "Loading..." and the first answer of each
    GraphQL operation it issued has come (an operation the UI polls, the same query and
    variables again, counts once), and the operations, with their times. It is waited for
    until no answer came for ``QUIET_UI_S``."""
    from playwright.sync_api import expect

    started = time.perf_counter()
    operations, pending = [], {}

    def sent(request):
        if request.url.endswith("/graphql") or "/graphql?" in request.url:
            pending[request] = time.perf_counter()

    def finished(request):
        if request in pending:
            body = request.post_data_json or {}
            operations.append({"operation": body.get("operationName"), "body": body,
                               "browser_s": time.perf_counter() - pending.pop(request),
                               "done_at_s": time.perf_counter() - started})

    page.on("request", sent)
    page.on("requestfinished", finished)
    page.on("requestfailed", finished)
    error = None
    try:
        page.goto(base_url + path, timeout=PAGE_LIMIT_S * 1000, wait_until="networkidle")
        expect(page.get_by_text("Loading...")).to_have_count(
            0, timeout=max(1000, int(1000 * (PAGE_LIMIT_S - (time.perf_counter() - started)))))
        # settled: GraphQL answered, then none asked or answered for QUIET_UI_S (a page still
        # blank when the network first idles has asked nothing yet)
        while time.perf_counter() - started < PAGE_LIMIT_S:
            page.wait_for_timeout(250)
            last = max([op["done_at_s"] for op in operations], default=0.0)
            if operations and not pending and time.perf_counter() - started - last >= QUIET_UI_S:
                break
        else:
            error = f"still asking GraphQL after {PAGE_LIMIT_S:g} s"
    except Exception as err:  # noqa: BLE001 - a page that does not settle in time is the finding
        error = f"{type(err).__name__}: {str(err).splitlines()[0]}"
    finally:
        page.remove_listener("request", sent)
        page.remove_listener("requestfinished", finished)
        page.remove_listener("requestfailed", finished)
    first: dict[str, float] = {}  # a polled operation (the same query again) counts once
    for op in operations:
        first.setdefault(json.dumps(op["body"], sort_keys=True), op["done_at_s"])
    settled = max(first.values(), default=time.perf_counter() - started)
    text = page.inner_text("body")
    return {"seconds": settled, "until_idle_s": time.perf_counter() - started,
            "error": error, "operations": operations, "text": text}


def group_rss_mib(pid: int) -> float:
    """Resident memory of a process and its children (the webserver and its code server)."""
    try:
        parent = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [parent, *parent.children(recursive=True)]
                   ) / 2**20
    except psutil.NoSuchProcess:
        return 0.0


def group_cpu_s(pid: int) -> float:
    """CPU seconds so far of a process and its children (the webserver, its code server)."""
    try:
        parent = psutil.Process(pid)
        return sum(sum(p.cpu_times()[:2]) for p in [parent, *parent.children(recursive=True)])
    except psutil.NoSuchProcess:
        return 0.0


def ui(home: Path, env: dict[str, str], request, use_browser: bool, captured: dict,
       shots: Path) -> dict:
    """The webserver on the instance: the pages in Chromium (twice each), the GraphQL
    operations replayed alone, the run launched through GraphQL."""
    result: dict = {"pages": {}, "graphql": {}}
    log = home / "webserver.log"
    port = webserver.free_port()
    command = [str(webserver.WEBSERVER), "-w", "workspace.yaml", "-h", webserver.HOST,
               "-p", str(port)]
    at = time.perf_counter()
    with webserver.started(command, env, log) as process:
        webserver.wait_until_serving(process, port, log)
        deadline = time.monotonic() + 300
        while not any(e["loadStatus"] == "LOADED" for e in webserver.graphql(
                port, LOCATIONS)["workspaceOrError"]["locationEntries"]):
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
        result["start_s"] = time.perf_counter() - at
        if use_browser:
            with browser.chromium(f"http://{webserver.HOST}:{port}", shots,
                                  home / "profile") as view:
                for name, path in PAGES.items():
                    for attempt in ("first", "second"):
                        cpu = group_cpu_s(process.pid)
                        opened = open_page(view.page, view.base_url, path)
                        cpu = group_cpu_s(process.pid) - cpu
                        for op in opened["operations"]:
                            if op["body"]:
                                captured.setdefault(name, {})[json.dumps(
                                    op["body"], sort_keys=True)] = op["body"]
                        with suppress(Exception):  # a screenshot, to look at afterwards
                            view.shot(f"{name.replace(' ', '-')}-{attempt}")
                        result["pages"][f"{name} ({attempt})"] = {
                            "seconds": opened["seconds"], "until_idle_s": opened["until_idle_s"],
                            "error": opened["error"], "text": opened["text"][:600],
                            "server_cpu_s": cpu,
                            "operations": [(op["operation"], round(op["browser_s"], 3))
                                           for op in opened["operations"]],
                            "load": load_average()}
                        print(f"    {name} ({attempt}): {opened['seconds']:.1f} s, server "
                              f"CPU {cpu:.1f} s"
                              f"{' ' + opened['error'] if opened['error'] else ''}; "
                              f"{len(opened['operations'])} GraphQL operations; "
                              f"load {load_average()}", flush=True)
        for name, bodies in captured.items():
            for body in bodies.values():
                label = f"{name}: {body.get('operationName')}"
                label += f" #{sum(k.startswith(label) for k in result['graphql']) + 1}"
                try:
                    cpu = group_cpu_s(process.pid)
                    seconds, size, errors = post(port, body)
                    result["graphql"][label] = {"seconds": seconds, "bytes": size,
                                                "server_cpu_s": group_cpu_s(process.pid) - cpu,
                                                "errors": errors, "load": load_average()}
                except Exception as err:  # noqa: BLE001 - the failure is the figure
                    result["graphql"][label] = {"error": f"{type(err).__name__}: {err}"}
        at = time.perf_counter()
        answer = webserver.graphql(port, LAUNCH_RUN, {"params": {
            "selector": {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY,
                         "jobName": request.job_name},
            "runConfigData": request.run_config,
            "executionMetadata": {"tags": [
                {"key": k, "value": v} for k, v in request.tags.items()]}}})["launchRun"]
        result["launch_run"] = {"seconds": time.perf_counter() - at,
                                "answer": answer["__typename"], "load": load_average()}
        if answer["__typename"] != "LaunchRunSuccess":
            result["launch_run"]["message"] = answer.get("message", "")[:500]
        result["webserver_rss_mib"] = group_rss_mib(process.pid)
    return result


@contextmanager
def fresh_instance(storage: str, home: Path):
    """A DAGSTER_HOME ``home`` with the project's instance file for ``storage``; yields the
    instance and the environment the webserver needs."""
    with instance_config(storage, home) as env:
        os.environ.update({"DAGSTER_HOME": str(home), **env})
        with dg.DagsterInstance.get() as instance:
            yield instance, {"DAGSTER_HOME": str(home), **env}


def measure(storage: str, n: int, args, captured: dict) -> dict:
    """Every step at size ``n`` on a fresh instance; the figures."""
    DATA.mkdir(parents=True, exist_ok=True)
    result: dict = {"size": n, "storage": storage, "load_before": load_average()}
    with tempfile.TemporaryDirectory(dir=DATA, prefix="partition-scale-") as tmp:
        base = Path(tmp)
        home = base / "home"
        home.mkdir()
        warehouse = base / "warehouse"
        source = GeopmReportSource(landing_folders=[str(landing_folder(base))],
                                   quiet_period_s=QUIET_S)
        defs = build_definitions(GpuBenchmarkSource(data_roots=[DataRoot(
            path=str(base), name="unused")]), Warehouse(root=str(warehouse)),
            geopm_source=source)
        with fresh_instance(storage, home) as (instance, env):
            def step(name, function, *arguments):
                print(f"  {name} ...", flush=True)
                figures = function(*arguments)
                result[name] = figures
                shown = {k: (round(v, 3) if isinstance(v, float) else v)
                         for k, v in figures.items() if k not in ("walls_s",)}
                print(f"  {name}: {shown}", flush=True)
                return figures

            step("register", register, instance, n, args.batch)
            step("materialize", materialize, instance, n, args.materialized)
            step("get_dynamic_partitions", get_partitions, instance, n)
            print("  tick ...", flush=True)
            tick, request = sensor_tick(instance, defs, source)
            result["tick"] = tick
            print(f"  tick: {tick}", flush=True)
            step("create_run", create_run, instance, defs, request)
            if not args.no_ui:
                print("  ui ...", flush=True)
                env = {**env, "JOULEHOUSE_WAREHOUSE": str(warehouse),
                       "JOULEHOUSE_GEOPM_LANDING": str(base / LANDING)}
                use_browser = not args.no_browser and browser.missing_requirement() is None
                try:
                    result["ui"] = ui(home, env, request, use_browser, captured,
                                      DATA / "partition-scale-shots" / f"{storage}-{n}")
                except Exception as err:  # noqa: BLE001 - a UI that fails is a finding
                    result["ui"] = {"error": f"{type(err).__name__}: {str(err)[:2000]}"}
                print(f"  ui: {json.dumps(result['ui'], default=str)[:3000]}", flush=True)
    result["load_after"] = load_average()
    return result


def slowest(replayed: dict, operation: str) -> str:
    """The slowest replay of ``operation`` (any page's): seconds (the server's CPU)."""
    runs = [(v["seconds"], v.get("server_cpu_s", float("nan")))
            for k, v in replayed.items() if f": {operation} #" in k and "seconds" in v]
    return f"{max(runs)[0]:.2f} s ({max(runs)[1]:.2f} s)" if runs else "-"


def table(results: list[dict]) -> str:
    """A Markdown table, one column per size, of the main figures."""
    def fmt(value, unit="s"):
        return "-" if value is None else f"{value:.2f} {unit}".strip()

    rows = {
        "register N (add_dynamic_partitions)": lambda r: fmt(r["register"]["wall_s"]),
        "materializations recorded": lambda r: f"{r['materialize']['materialized']:,}",
        "get_dynamic_partitions wall (CPU)": lambda r: (
            f"{r['get_dynamic_partitions']['wall_s']:.3f} s "
            f"({r['get_dynamic_partitions']['cpu_s']:.3f} s)"),
        "get_dynamic_partitions peak memory": lambda r: fmt(
            r["get_dynamic_partitions"]["peak_mib"], "MiB"),
        "GEOPM tick, 10 new: wall (CPU)": lambda r: (
            f"{r['tick']['wall_s']:.2f} s ({r['tick']['cpu_s']:.2f} s)"),
        "run creation (create_run_for_job): wall (CPU)": lambda r: (
            f"{r['create_run']['wall_s']:.2f} s ({r['create_run']['cpu_s']:.2f} s)"),
    }
    first = next((r for r in results if "ui" in r and "pages" in r["ui"]), None)
    if first is not None:
        for page in first["ui"]["pages"]:
            rows[f"{page} in Chromium (server CPU)"] = lambda r, p=page: (
                fmt(r["ui"]["pages"][p]["seconds"])
                + f" ({r['ui']['pages'][p].get('server_cpu_s', float('nan')):.1f} s)"
                + (" (did not settle)" if r["ui"]["pages"][p]["error"] else "")
            ) if p in r.get("ui", {}).get("pages", {}) else "-"
        for operation in ("PartitionHealthQuery", "AssetViewDefinitionQuery",
                          "AssetGraphLiveQuery"):
            rows[f"{operation} replayed, slowest (server CPU)"] = (
                lambda r, o=operation: slowest(r["ui"]["graphql"], o))
        rows["launchRun through GraphQL"] = lambda r: fmt(
            r["ui"].get("launch_run", {}).get("seconds")) if "ui" in r else "-"
        rows["webserver + code server RSS"] = lambda r: fmt(
            r["ui"].get("webserver_rss_mib"), "MiB") if "ui" in r else "-"
    header = "| | " + " | ".join(f"{r['size']:,} ({r['storage']})" for r in results) + " |"
    lines = [header, "|---" * (len(results) + 1) + "|"]
    for name, cell in rows.items():
        cells = []
        for r in results:
            try:
                cells.append(cell(r))
            except (KeyError, TypeError):
                cells.append("-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| load average during the size | " + " | ".join(
        f"{r['load_before']} -> {r['load_after']}" for r in results) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="3650,36500",
                        help="partition counts, comma-separated")
    parser.add_argument("--quick", action="store_true", help="sizes 365,3650")
    parser.add_argument("--postgres", action="store_true",
                        help="also on a throwaway PostgreSQL server")
    parser.add_argument("--only-postgres", action="store_true", help="PostgreSQL alone")
    parser.add_argument("--batch", type=int, default=10_000,
                        help="keys per add_dynamic_partitions call")
    parser.add_argument("--materialized", type=int, default=10_000,
                        help="partitions given a materialization (at most N)")
    parser.add_argument("--no-ui", action="store_true", help="no webserver")
    parser.add_argument("--no-browser", action="store_true",
                        help="GraphQL only (the operations captured at an earlier size)")
    parser.add_argument("--json", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    sizes = [365, DECADE] if args.quick else [int(s) for s in args.sizes.split(",")]
    storages = (["postgres"] if args.only_postgres
                else ["sqlite", "postgres"] if args.postgres else ["sqlite"])
    print(f"machine: {describe(dg)}; load {load_average()}", flush=True)
    results, captured = [], {}
    for storage in storages:
        for n in sizes:
            print(f"{n:,} partitions on {storage}: load {load_average()}", flush=True)
            results.append(measure(storage, n, args, captured))
            if args.json:
                args.json.write_text(json.dumps({"machine": describe(dg),
                                                 "results": results}, indent=1, default=str))
    print(table(results))
    print(f"machine: {describe(dg)}; load {load_average()}")


if __name__ == "__main__":
    main()
