"""`make dev` (deploy/dev.sh): the webserver and daemon start with no warning, serve on
loopback, and both stop (code servers too) on Ctrl-C."""

import re
import shutil
import signal
import time

from tests.dagster.webserver import (
    PROJECT,
    STOP_TIMEOUT_S,
    free_port,
    group_alive,
    started,
    wait_until_serving,
)

DAEMON_STARTED = "Instance is configured with the following daemons"
#: A bound, not a timing: on SIGTERM a code server stops "once all current RPC calls terminate
#: or 60 seconds pass" (its log), so a stop during a sensor or automation tick on a loaded
#: machine may take the whole 60 s and then the processes' exit (seen: 60 s passed in CI).
DEV_STOP_TIMEOUT_S = 2 * STOP_TIMEOUT_S


def test_make_dev_serves_without_warnings_and_stops_on_ctrl_c(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    port = free_port()
    env = {"DAGSTER_HOME": str(home), "JOULEHOUSE_DEV_PORT": str(port),
           "JOULEHOUSE_WAREHOUSE": str(tmp_path / "warehouse")}
    log = tmp_path / "dev.log"
    with started(["bash", "deploy/dev.sh"], env, log) as dev:
        info = wait_until_serving(dev, port, log)
        assert info["dagster_version"] == "1.13.27"
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while DAEMON_STARTED not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        dev.send_signal(signal.SIGINT)  # what Ctrl-C sends the script
        assert dev.wait(DEV_STOP_TIMEOUT_S) == 130
        deadline = time.monotonic() + DEV_STOP_TIMEOUT_S
        while group_alive(dev.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not group_alive(dev.pid)  # webserver, daemon and their code servers
    output = log.read_text()
    assert DAEMON_STARTED in output
    assert f"Serving dagster-webserver on http://127.0.0.1:{port}" in output
    assert not re.search(r"Warning|Traceback", output), output
