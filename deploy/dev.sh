#!/usr/bin/env bash
# `make dev`: the Dagster webserver and daemon over workspace.yaml, started together as
# `dagster dev` would (which Dagster 1.13 deprecates with a warning at every start).
# Ctrl-C (or SIGTERM) stops both; if one of them ends, the other is stopped too.
#
# DAGSTER_HOME must be set (the Makefile sets it). JOULEHOUSE_DEV_HOST (default 127.0.0.1,
# loopback only) and JOULEHOUSE_DEV_PORT (default 3000) say where the webserver listens;
# DAGSTER_BIN (default .venv/bin) where the Dagster commands are.
set -u
: "${DAGSTER_HOME:?DAGSTER_HOME must be set (make dev sets it)}"
bin=${DAGSTER_BIN:-.venv/bin}
# Batches of asset events (a run's planned events, its materializations) stored as one
# write by the instance's storage (deploy/dagster.yaml); the runs inherit it.
export DAGSTER_EVENT_BATCH_SIZE=${DAGSTER_EVENT_BATCH_SIZE:-1000}

# The instance's databases created once, before the daemon and the webserver start
# together: both creating a fresh SQLite home at once race on its schema (an
# IntegrityError on alembic_version in one of them, which then does not start).
"$bin/dagster" instance info >/dev/null

# Background jobs of a non-interactive shell ignore SIGINT, so the traps below stop them.
"$bin/dagster-daemon" run -w workspace.yaml &
daemon=$!
"$bin/dagster-webserver" -w workspace.yaml -h "${JOULEHOUSE_DEV_HOST:-127.0.0.1}" \
    -p "${JOULEHOUSE_DEV_PORT:-3000}" &
webserver=$!

stop() {
    kill -TERM "$daemon" "$webserver" 2>/dev/null
    wait "$daemon" "$webserver"
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM

wait -n "$daemon" "$webserver"
status=$?
stop
exit "$status"
