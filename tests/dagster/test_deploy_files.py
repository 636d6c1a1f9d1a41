"""deploy/'s systemd units, container image, compose file and Helm values, checked as far as
they can be without systemd running them, a container engine or Kubernetes (none runs
here): they parse (systemd's own `systemd-analyze verify`), they install and start the
project the way the project does, they mount the data read-only, they name only settings
the Helm chart has, and no file of the repository holds a secret."""

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import dagster as dg
import yaml
from dagster._grpc.utils import default_schedule_grpc_timeout, default_sensor_grpc_timeout

from assets.plot_cadence import PLOT_EVERY_ENV
from tests.conftest import skip_or_fail

PROJECT = Path(__file__).resolve().parents[2]
DEPLOY = PROJECT / "deploy"
SYSTEMD = DEPLOY / "systemd"
UNITS = ["joulehouse-code-server.service", "joulehouse-daemon.service",
         "joulehouse-webserver.service"]
DROP_IN = SYSTEMD / "joulehouse-.service.d" / "joulehouse.conf"
#: The command every way of running starts the code server with (deploy/README.md).
CODE_SERVER = ["dagster", "code-server", "start", "-f", "definitions.py", "--location-name",
               "joulehouse"]
DATA = "/srv/joulehouse/data"


def unit_entries(path: Path) -> list[tuple[str, str, str]]:
    """(section, key, value) of a systemd unit or drop-in, in order, continuation lines
    joined (systemd's syntax: a key may repeat)."""
    entries, section = [], ""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
        else:
            key, value = line.split("=", 1)
            entries.append((section, key.strip(), value.strip()))
    return entries


def environment(entries: list[tuple[str, str, str]]) -> dict[str, str]:
    """The variables the Environment= lines set."""
    return dict(pair.split("=", 1) for _, key, value in entries if key == "Environment"
                for pair in value.split())


def test_systemd_verifies_the_units(tmp_path):
    """`systemd-analyze verify` reads the units with their shared drop-in and reports
    nothing (the venv path pointed at this machine's, which it checks exists)."""
    if shutil.which("systemd-analyze") is None:
        skip_or_fail("systemd-analyze not found (Debian's systemd package)")
    shutil.copytree(SYSTEMD, tmp_path / "systemd")
    for unit in UNITS:
        path = tmp_path / "systemd" / unit
        path.write_text(path.read_text().replace("/opt/joulehouse/.venv/bin",
                                                 str(Path(sys.executable).parent)))
    done = subprocess.run(["systemd-analyze", "verify", "--man=no",
                           *(str(tmp_path / "systemd" / unit) for unit in UNITS)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
    # the drop-in is read: a key systemd does not know is reported
    drop_in = tmp_path / "systemd" / "joulehouse-.service.d" / "joulehouse.conf"
    drop_in.write_text(drop_in.read_text() + "NoSuchKey=1\n")
    done = subprocess.run(["systemd-analyze", "verify", "--man=no",
                           str(tmp_path / "systemd" / UNITS[0])],
                          capture_output=True, text=True, timeout=120, check=False)
    assert "Unknown key 'NoSuchKey'" in done.stderr


def test_the_units_bind_loopback_and_read_the_data_read_only():
    shared = unit_entries(DROP_IN)
    settings = {key: value for _, key, value in shared}
    assert settings["ProtectSystem"] == "strict"
    assert f"-{DATA}" in settings["ReadOnlyPaths"].split()
    assert settings["User"] == "joulehouse"
    assert [value for _, key, value in shared if key == "EnvironmentFile"] == [
        "/etc/joulehouse/joulehouse.env", "-/etc/joulehouse/secrets.env"]
    units = {unit: unit_entries(SYSTEMD / unit) for unit in UNITS}
    starts = {unit: next(value for _, key, value in entries if key == "ExecStart").split()
              for unit, entries in units.items()}
    web = units["joulehouse-webserver.service"]
    assert environment(web)["JOULEHOUSE_WEBSERVER_HOST"] == "127.0.0.1"
    assert starts["joulehouse-webserver.service"][1:] == [
        "-w", "deploy/production/workspace.yaml", "-h", "${JOULEHOUSE_WEBSERVER_HOST}", "-p",
        "${JOULEHOUSE_WEBSERVER_PORT}"]
    code_server = starts["joulehouse-code-server.service"]
    assert [Path(code_server[0]).name, *code_server[1:3], *code_server[7:]] == CODE_SERVER
    assert environment(units["joulehouse-code-server.service"])[
        "JOULEHOUSE_CODE_SERVER_HOST"] == "127.0.0.1"
    assert starts["joulehouse-daemon.service"][1:] == [
        "run", "-w", "deploy/production/workspace.yaml"]
    env = dict(line.split("=", 1) for line in (SYSTEMD / "joulehouse.env").read_text()
               .splitlines() if line and not line.startswith("#"))
    assert env["JOULEHOUSE_WEBSERVER_HOST"] == env["JOULEHOUSE_CODE_SERVER_HOST"] == "127.0.0.1"
    assert not {"DAGSTER_PG_PASSWORD", "JOULEHOUSE_TAUDB_URL"} & set(env)  # secrets.env
    data_variables = [name for name in env if name.startswith("JOULEHOUSE_") and
                      name.endswith(("_DATA_ROOTS", "_LANDING", "_ARCHIVE"))]
    assert len(data_variables) == 6
    assert all(env[name].startswith(DATA + "/") for name in data_variables)


def test_the_tick_timeout_is_the_variable_dagster_reads(monkeypatch):
    """Sensor and schedule ticks may take 180 s in every deployment: the variables the
    daemon's gRPC client reads (Dagster's default 60 s)."""
    env = dict(line.split("=", 1) for line in (SYSTEMD / "joulehouse.env").read_text()
               .splitlines() if line and not line.startswith("#"))
    compose = yaml.safe_load((DEPLOY / "container" / "compose.yaml").read_text())
    helm = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())["dagsterDaemon"]["env"]
    for settings in (env, compose["services"]["daemon"]["environment"], helm):
        for name in ("DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS",
                     "DAGSTER_SCHEDULE_GRPC_TIMEOUT_SECONDS"):
            monkeypatch.setenv(name, settings[name])
        assert (default_sensor_grpc_timeout(), default_schedule_grpc_timeout()) == (180, 180)


def test_every_deployment_batches_the_runs_events_spaces_their_plots_and_bounds_arenas():
    """The runs' materializations are stored in batches, and their plots drawn at most every
    10 minutes (``assets/plot_cadence.py``): the variables set where the runs get their
    environment (the daemon's for systemd and compose, the run pods' through the user
    deployment on Kubernetes)."""
    env = dict(line.split("=", 1) for line in (SYSTEMD / "joulehouse.env").read_text()
               .splitlines() if line and not line.startswith("#"))
    compose = yaml.safe_load((DEPLOY / "container" / "compose.yaml").read_text())
    helm = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())
    deployment, = helm["dagster-user-deployments"]["deployments"]
    for settings in (env, compose["services"]["daemon"]["environment"], deployment["env"]):
        assert int(settings["DAGSTER_EVENT_BATCH_SIZE"]) == 1000
        assert float(settings[PLOT_EVERY_ENV]) == 600
    # malloc arenas bounded: every process's (systemd), the daemon's and the code server's and
    # its runs' (compose), the code server's and the run pods' and the daemon's (Helm)
    for settings in (env, compose["services"]["daemon"]["environment"],
                     compose["services"]["code-server"]["environment"], deployment["env"],
                     helm["dagsterDaemon"]["env"]):
        assert settings["MALLOC_ARENA_MAX"] == "2"


def test_dev_binds_loopback_unless_told():
    assert 'JOULEHOUSE_DEV_HOST:-127.0.0.1' in (DEPLOY / "dev.sh").read_text()


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    return [tuple(line.strip().split(None, 1)) for line in text.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def test_the_image_installs_the_project_with_its_own_steps():
    instructions = dockerfile_instructions(DEPLOY / "container" / "Dockerfile")
    project = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]
    base = next(argument for name, argument in instructions if name == "FROM")
    assert re.fullmatch(r"python:3\.11-slim-\w+", base)  # requires-python >= 3.11
    assert project["requires-python"] == ">=3.11"
    runs = [argument for name, argument in instructions if name == "RUN"]
    installs = [run for run in runs if "pip" in run or "apt" in run]
    # the one install: the project from pyproject.toml, with an optional extra of its own
    assert installs == ['pip install --no-cache-dir ".${JOULEHOUSE_EXTRAS}"']
    # the copy the processes import from, compiled (they cannot write its bytecode)
    assert ("RUN", "python -m compileall -q /opt/joulehouse") in instructions
    assert ("ARG", 'JOULEHOUSE_EXTRAS=""') in instructions
    assert set(project["optional-dependencies"]) >= {"k8s"}
    assert ("COPY", ". /opt/joulehouse") in instructions
    assert ("WORKDIR", "/opt/joulehouse") in instructions
    assert ("USER", "joulehouse") in instructions
    copied = re.findall(r"install -m 644 (\S+) ", " ".join(runs))
    assert copied == ["deploy/production/dagster.yaml"] and (PROJECT / copied[0]).is_file()
    command = yaml.safe_load(next(argument for name, argument in instructions if name == "CMD"))
    assert [part for part in command if part not in ("-h", "0.0.0.0", "-p", "4000")] == (
        CODE_SERVER)
    ignored = (DEPLOY / "container" / "Dockerfile.dockerignore").read_text().split()
    assert {".git", ".venv", "warehouse", ".dagster_home"} <= set(ignored)


def test_compose_mounts_the_data_read_only_and_names_files_that_exist():
    folder = DEPLOY / "container"
    compose = yaml.safe_load((folder / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "code-server", "webserver", "daemon"}
    for name in ("code-server", "webserver", "daemon"):
        service = services[name]
        build = service["build"]
        assert (folder / build["context"] / build["dockerfile"]).resolve() == (
            folder / "Dockerfile").resolve()
        mounts = [volume.rsplit(":", 2) for volume in service["volumes"]]
        [data] = [mount for mount in mounts if mount[1] == DATA]
        assert data[2] == "ro", name
        source = re.fullmatch(r"\$\{\w+:-(.+)\}", data[0]).group(1)  # the default
        assert (folder / source).resolve() == PROJECT / "examples"
        for mount in mounts:  # every bind mount's source exists; the rest are volumes
            if mount[1] != DATA:
                assert mount[0] in compose["volumes"], mount
        env = service["environment"]
        for variable in ("JOULEHOUSE_GPU_DATA_ROOTS", "JOULEHOUSE_TAU_LANDING",
                         "JOULEHOUSE_GEOPM_LANDING", "JOULEHOUSE_POWERAPI_LANDING",
                         "JOULEHOUSE_CC_ARCHIVE", "JOULEHOUSE_INTENSITY_LANDING"):
            inside = Path(env[variable]).relative_to(DATA)
            assert (PROJECT / "examples" / inside).is_dir(), variable
        assert env["DAGSTER_PG_PASSWORD"] == "${DAGSTER_PG_PASSWORD:?set DAGSTER_PG_PASSWORD}"
        command = service.get("command", [])
        for argument in command:
            if argument.endswith(".yaml"):
                assert (PROJECT / argument).is_file(), argument
    assert services["webserver"]["ports"] == ["127.0.0.1:3000:3000"]
    assert "ports" not in services["code-server"] and "ports" not in services["postgres"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith(
        "${DAGSTER_PG_PASSWORD:?")


def key_paths(value, prefix: str = "") -> list[str]:
    """Every key path of a YAML value: ``a.b``, ``a[].c`` for the items of a list."""
    paths = []
    if isinstance(value, dict):
        for key, child in value.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            paths += [path, *key_paths(child, path)]
    elif isinstance(value, list):
        for item in value:
            paths += key_paths(item, f"{prefix}[]")
    return paths


def test_the_helm_values_name_only_settings_the_chart_has():
    values = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())
    listed = [line for line in (DEPLOY / "helm" / "chart-keys.txt").read_text().splitlines()
              if line and not line.startswith("#")]
    exact = {line for line in listed if not line.endswith(".*")}
    free = {line[:-2] for line in listed if line.endswith(".*")}

    def known(path: str) -> bool:
        return (path in exact
                or any(path == f or path.startswith((f + ".", f + "[]")) for f in free)
                or any(line.startswith((path + ".", path + "[]")) for line in listed))

    paths = key_paths(values)
    assert len(paths) > 80
    assert [path for path in paths if not known(path)] == []
    assert not known("dagsterDaemon.runCoordinator.config.queuedRunCoordinator.maxRuns")
    assert not known("concurrency")  # not in the chart's schema of that commit


def test_the_helm_values_configure_the_instance_as_production_does(tmp_path):
    """The instance settings the chart writes from the values (its configmap-instance.yaml
    template, by hand here) load as a Dagster instance and mean what
    deploy/production/dagster.yaml means."""
    values = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())
    production = yaml.safe_load((DEPLOY / "production" / "dagster.yaml").read_text())
    daemon = values["dagsterDaemon"]
    queued = daemon["runCoordinator"]["config"]["queuedRunCoordinator"]

    def snake(settings: dict) -> dict:
        return {re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower(): value
                for key, value in settings.items()}

    instance = {
        "storage": {"sqlite": {"base_dir": str(tmp_path)}},
        "run_coordinator": {"module": "dagster._core.run_coordinator",
                            "class": "QueuedRunCoordinator", "config": snake(queued)},
        "run_monitoring": snake(daemon["runMonitoring"]),
        "sensors": snake(daemon["sensors"]), "schedules": snake(daemon["schedules"]),
        "retention": {kind: {"purge_after_days": values["retention"][kind]["purgeAfterDays"]}
                      for kind in ("sensor", "schedule")},
        "telemetry": values["telemetry"],
        **values["additionalInstanceConfig"],
    }
    assert not daemon["runRetries"]["enabled"]  # else the chart writes a second run_retries
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(instance))
    with dg.DagsterInstance.from_config(str(tmp_path)) as loaded:
        concurrency = loaded.get_concurrency_config()
        runs = production["concurrency"]["runs"]
        assert concurrency.run_queue_config.max_concurrent_runs == runs["max_concurrent_runs"]
        assert concurrency.run_queue_config.tag_concurrency_limits == runs[
            "tag_concurrency_limits"]
        assert concurrency.pool_config.default_pool_limit == production["concurrency"][
            "pools"]["default_limit"]
        dequeue = production["run_coordinator"]["config"]  # a pass's launches in threads
        assert (loaded.run_coordinator.dequeue_use_threads,
                loaded.run_coordinator.dequeue_num_workers) == (
            dequeue["dequeue_use_threads"], dequeue["dequeue_num_workers"]) == (True, 4)
        assert loaded.get_settings("run_retries") == production["run_retries"]
        # as production's, but the start timeout: a pod's start (scheduling, an image
        # pulled) takes longer than a run worker process's
        monitoring = loaded.get_settings("run_monitoring")
        assert monitoring.pop("start_timeout_seconds") == 300
        assert monitoring == {name: value for name, value in production["run_monitoring"].items()
                              if name != "start_timeout_seconds"}
        for daemon_settings in ("sensors", "schedules", "backfills", "auto_materialize"):
            assert loaded.get_settings(daemon_settings) == production[daemon_settings]
        assert loaded.get_settings("retention")["schedule"] == production["retention"][
            "schedule"]
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    [deployment] = values["dagster-user-deployments"]["deployments"]
    assert [part for part in deployment["codeServerArgs"]] == CODE_SERVER[3:]
    [data] = [v for v in deployment["volumes"] if v["name"] == "data"]
    assert data["persistentVolumeClaim"]["readOnly"] is True
    assert {m["name"]: m.get("readOnly", False) for m in deployment["volumeMounts"]} == {
        "data": True, "warehouse": False}
    assert deployment["includeConfigInLaunchedRuns"] == {"enabled": True}  # runs mount them
    assert values["postgresql"]["postgresqlScheme"] == production["storage"]["custom"][
        "config"]["postgres_db"]["scheme"]
    assert "postgresqlPassword" not in values["postgresql"]
    assert values["generatePostgresqlPasswordSecret"] is False


#: Names whose literal value would be a secret.
SECRET_NAME = r"[A-Za-z0-9_]*(?:password|passwd|secret|token|api_?key|access_?key)"
SECRET_ASSIGNMENT = re.compile(
    rf"(?i)(?<![\w{{]){SECRET_NAME}\b['\"]?\s*[:=]\s*"
    r"(?:(['\"])(?P<quoted>[^'\"]+)\1|(?P<bare>[^\s'\"#,)}\]]+))")
URL_CREDENTIALS = re.compile(r"\w+://[^/\s:@'\"]+:(?P<password>[^/\s@'\"{]+)@")
#: Not secrets: how a value names where the secret comes from (an attribute, a type
#: annotation), or a placeholder.
REFERENCE = re.compile(r"^(\$\{?|\.\.\.|\*\*\*|<|env\b|os\.|dg\.|url\[|parsed\.|re\.|self\.|str$|"
                       r"true$|false$|none$|null$|~$|[A-Z_]+$)")
#: Made-up credentials: the tests that check a password is masked in messages, and this
#: file's check of the check.
MADE_UP = {"tests/test_cli_conventions.py": {"s3cret", "pw", "hunter2", "p%40s", "p"},
           "tests/dagster/test_deploy_files.py": {"hunter2", "abc123"},
           # the throwaway S3 server's credentials (moto accepts any)
           "tests/object_store.py": {"joulehouse-test"},
           # the throwaway PostgreSQL trusts loopback: the variable is set, never checked
           "tests/e2e/stack.py": {"trust-auth-needs-none"}}


def test_no_file_of_the_repository_holds_a_secret():
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=PROJECT, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in files:
        path = PROJECT / name
        if not path.is_file() or name.startswith("examples/"):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            values = [match.group("quoted") or match.group("bare")
                      for match in SECRET_ASSIGNMENT.finditer(line)]
            values += [match["password"] for match in URL_CREDENTIALS.finditer(line)]
            found += [f"{name}:{number}: {line.strip()}" for value in values
                      if not REFERENCE.match(value) and value not in MADE_UP.get(name, ())]
    assert found == []
    assert len(files) > 300  # the whole tree was read


def test_the_secret_check_finds_secrets():
    assert SECRET_ASSIGNMENT.search('DAGSTER_PG_PASSWORD=hunter2')
    assert SECRET_ASSIGNMENT.search('    postgresqlPassword: "hunter2"')
    assert SECRET_ASSIGNMENT.search("api_key = 'abc123'")
    assert URL_CREDENTIALS.search("postgresql://me:hunter2@db/x")
    assert REFERENCE.match(SECRET_ASSIGNMENT.search("password: ${PG_PASSWORD}").group("bare"))
    assert SECRET_ASSIGNMENT.search('access_key = "AKIAEXAMPLE"')
    assert REFERENCE.match(SECRET_ASSIGNMENT.search("access_key: str | None = None")["bare"])
    [match] = SECRET_ASSIGNMENT.finditer("POSTGRES_PASSWORD: ${DAGSTER_PG_PASSWORD:?set it}")
    assert REFERENCE.match(match.group("bare"))
