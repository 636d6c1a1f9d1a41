"""Every kind of trial Joulehouse writes opens in TAU's own reader as written.

TAU's Java reader (PerfDMF's ``DBDataSource.load()``, the path ParaProf takes;
``tau_java.py``) opens each trial that Joulehouse loaded into a PostgreSQL
TAUdb: its threads, function names, metrics, per-thread values, TAU's own
TOTAL and MEAN, user events and metadata must equal what Joulehouse wrote.
TAU's packed export of it (``DataSourceExport.writePacked``), read back by
Joulehouse's ``.ppk`` reader, must give the same rows. A trial loaded into the
SQLite TAUdb (which ParaProf cannot open), read back and written as a ``.ppk``,
must open in TAU's ``PackedProfileDataSource`` with the values written.

A new source mapping joins by adding its example data to :data:`TRIAL_SOURCES`.
Without ``java``/``javac``, TAU's jars, the peer data or PostgreSQL these tests
skip, and fail under ``CI=true``.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pandas as pd
import psycopg2
import pytest
from tau_java import TauReader, written_user_events, written_values

from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import derive_rows, load_trial
from joulehouse.taudb.model import THREAD_COLUMNS
from joulehouse.taudb.ppk import read_ppk, write_ppk
from joulehouse.taudb.read import read_trial_source
from joulehouse.taudb.stored import callpath_names, read_stored_trial

PROJECT_ROOT = Path(__file__).resolve().parents[2]

#: One entry per trial source: ``peer:`` paths are in ../shared/peer-data, ``example:`` paths
#: in examples/. Every TAU profile set of the peer data and the example data of every source
#: mapping; a new mapping adds its examples here.
TRIAL_SOURCES = [
    "peer:tau/profiles/hatchet_tau_cpi_mpi_callpath",
    "peer:tau/profiles/tau2_reader2_mpi4",
    "peer:tau/profiles/tau2_taudbc_openmp_2threads",
    "peer:tau/profiles/tau2_wrap_mpi2",
    "peer:tau/profiles/tau2_wrf16_callpath_text_exported",
    "peer:tau/profiles/tau2_xmain_mpi8_userevents",
    "peer:tau/profiles/tau2_ppk_examples/DrawGraph_2.ppk",
    "peer:tau/profiles/tau2_ppk_examples/LoadImbalance_2.ppk",
    "peer:tau/profiles/tau2_ppk_examples/wrf-callpath.ppk",
    # GPU benchmark runs (mapping/gpu.py)
    "example:gpu-data/power-limit/bert/150W",
    "example:gpu-data/power-limit/bert/200W",
    "example:gpu-data/power-limit/bert/250W",
    "example:gpu-data/clock-limit/bert/877MHz,1065MHz",
    # GEOPM reports (mapping/geopm.py)
    "example:geopm/geopmbench_1host.legacy.report",
    "example:geopm/fm_stream_dgemm_2host.yaml.report",
    "peer:geopm/geopmsession-doc-example_3.x.session-report.yaml",
    # ClusterCockpit jobs (mapping/clustercockpit.py)
    "example:clustercockpit/archive/emmy/1403/244/1608923076",
    "example:clustercockpit/archive/fritz/398/764/1675954353",
    "example:clustercockpit/archive/fritz/398/955/1675956725",
    "example:clustercockpit/archive/taurus/20639/587/1635856524",
    # PowerAPI reports: a sensor and day (mapping/powerapi.py)
    "example:powerapi",
]

#: The SQLite route (stored trial -> .ppk) depends on the trial, not on its source's format:
#: the text-exported WRF set holds the same profiles as wrf-callpath.ppk, so it is left out
#: there (the two largest trials, ~12 s each).
SQLITE_PPK_SOURCES = [source for source in TRIAL_SOURCES
                      if source != "peer:tau/profiles/tau2_wrf16_callpath_text_exported"]

#: Tables compared after the round trip; the trial row (name, data_source) and the
#: metadata are what a packed export cannot keep (see the test).
ROUND_TRIP_TABLES = ["metric", "thread", "timer", "timer_group", "timer_parameter",
                     "timer_callpath", "counter", "counter_value", "timer_call_data",
                     "timer_value"]


@pytest.fixture(scope="module")
def tau_reader_url(postgres_url):
    """A database of its own on the throwaway server: TAU's reader reads the public schema."""
    admin = psycopg2.connect(postgres_url)
    try:
        admin.autocommit = True
        with admin.cursor() as cursor:
            cursor.execute("CREATE DATABASE tau_reader")
    finally:
        admin.close()
    return postgres_url.rsplit("/", 1)[0] + "/tau_reader"


@pytest.fixture(scope="module")
def tau_reader(java_tools, tau_java_classpath, tmp_path_factory) -> Iterator[TauReader]:
    reader = TauReader(java_tools, tau_java_classpath, tmp_path_factory.mktemp("tau-java"))
    yield reader
    reader.close()


def _source_path(peer_data: Path, source: str) -> Path:
    kind, _, relative = source.partition(":")
    return (peer_data if kind == "peer" else PROJECT_ROOT / "examples") / relative


@pytest.fixture(scope="module")
def opened(tau_reader, peer_data, tau_reader_url, tmp_path_factory):
    """source -> (trial, trial id, what TAU's reader read, its packed export), once per source."""
    db = TaudbDatabase(tau_reader_url)

    @cache
    def open_source(source: str):
        trial = read_trial_source(_source_path(peer_data, source))
        trial_id = load_trial(db, trial)
        read, ppk = tau_reader.read(tau_reader_url, trial_id, tmp_path_factory.mktemp("read"))
        return trial, trial_id, read, ppk

    open_source.db = db
    yield open_source
    db.close()


@pytest.fixture(scope="module")
def sqlite_taudb(tmp_path_factory):
    with TaudbDatabase(f"sqlite:///{tmp_path_factory.mktemp('sqlite')}/taudb.sqlite") as db:
        yield db


def _assert_values_equal(read: dict, written: dict, what: str, derived: bool = False) -> None:
    """Real threads exactly; TAU's own TOTAL and MEAN to 1e-9 (another summation order),
    their calls truncated as TAUdb's INT columns hold them."""
    assert set(read) == set(written), what
    if not derived:
        assert read == written, what
        return
    for name, expected in written.items():
        got = read[name]
        for field in ("calls", "subroutines"):
            assert math.trunc(got[field]) == expected[field], (what, name, field)
        for field in ("inclusive", "exclusive"):
            assert got[field] == pytest.approx(expected[field], rel=1e-9, abs=1e-9), (
                what, name, field)


def _assert_read_as_written(read: dict, db: TaudbDatabase, trial_id: int,
                            metrics: list[str], threads: list[tuple[int, int, int]]) -> None:
    """TAU's metrics, threads, values (real threads, its own TOTAL and MEAN) and user events
    equal the rows Joulehouse wrote for trial ``trial_id`` of ``db``."""
    assert read["metrics"] == metrics
    assert sorted(map(tuple, read["threads"])) == threads
    written = written_values(db, trial_id, metrics)
    for node, context, thread in threads:
        key = f"{node},{context},{thread}"
        _assert_values_equal(read["values"][key], written[key], key)
    # TAU computes its own TOTAL and MEAN (over all threads) from the real threads' values:
    # they equal the TOTAL (-2) and MEAN (-6) rows Joulehouse wrote; a callpath node that no
    # thread entered (a missing intermediate path) reads as zeros
    zeros = {"calls": 0.0, "subroutines": 0.0, "inclusive": [0.0] * len(metrics),
             "exclusive": [0.0] * len(metrics)}
    for derived, code in (("total", "-2"), ("mean", "-6")):
        expected = {name: written[code].get(name, zeros) for name in read["functions"]}
        _assert_values_equal(read["values"][derived], expected, derived, derived=True)
    events = written_user_events(db, trial_id)
    assert read["user_events"] == {f"{n},{c},{t}": events.get(f"{n},{c},{t}", {})
                                   for n, c, t in threads}


def _written_groups(db: TaudbDatabase, trial_id: int) -> dict[str, set[str]]:
    groups: dict[str, set[str]] = {}
    for name, group in db.query("SELECT t.name, g.group_name FROM timer_group g "
                                "JOIN timer t ON g.timer = t.id WHERE t.trial = ?", (trial_id,)):
        groups.setdefault(name, set()).add(group)
    return groups


@pytest.mark.parametrize("source", TRIAL_SOURCES)
def test_taus_reader_opens_the_trial_as_written(opened, source):
    trial, trial_id, read, _ = opened(source)
    db = opened.db
    threads = sorted(map(tuple, trial.threads.to_numpy().tolist()))

    _assert_read_as_written(read, db, trial_id, trial.metrics, threads)
    # every callpath node is a function (flat timers are the roots), with its timer's groups
    assert set(read["functions"]) == set(callpath_names(db, trial_id).values())
    groups = _written_groups(db, trial_id)
    assert {name: set(read["functions"][name].split(" | ")) for name in groups} == groups
    primary = dict(db.query("SELECT name, value FROM primary_metadata WHERE trial = ?",
                            (trial_id,)))
    assert read["trial_metadata"] == primary
    secondary = {name for (name,) in db.query(
        "SELECT DISTINCT name FROM secondary_metadata WHERE trial = ?", (trial_id,))}
    assert set(read["trial_uncommon_metadata"]) == secondary
    # per-thread values of the secondary metadata are not read (docs/taudb.md)
    assert read["thread_metadata"] == {f"{n},{c},{t}": {} for n, c, t in threads}


@pytest.mark.parametrize("source", SQLITE_PPK_SOURCES)
def test_a_trial_of_the_sqlite_taudb_opens_in_taus_reader_as_a_packed_profile(
        tau_reader, sqlite_taudb, peer_data, tmp_path, source):
    """ParaProf cannot open a SQLite TAUdb; the trial read back (stored.read_stored_trial) and
    written as a .ppk (write_ppk) opens with the values written, per-thread metadata too."""
    trial_id = load_trial(sqlite_taudb, read_trial_source(_source_path(peer_data, source)))
    stored = read_stored_trial(sqlite_taudb, trial_id)
    write_ppk(stored, tmp_path / "trial.ppk")

    read = tau_reader.read_file(tmp_path / "trial.ppk", tmp_path)

    threads = sorted(map(tuple, stored.threads.to_numpy().tolist()))
    _assert_read_as_written(read, sqlite_taudb, trial_id, stored.metrics, threads)
    assert set(read["functions"]) == set(stored.timers["name"])
    groups = _written_groups(sqlite_taudb, trial_id)
    assert {name: set(read["functions"][name].split(" | ")) for name in groups} == groups
    assert stored.trial_metadata.items() <= read["trial_metadata"].items()
    per_thread = {f"{n},{c},{t}": {} for n, c, t in threads}
    for n, c, t, name, value in stored.metadata[THREAD_COLUMNS + ["name", "value"]].itertuples(
            index=False):
        per_thread[f"{n},{c},{t}"][name] = value
    assert read["thread_metadata"] == per_thread


@pytest.mark.parametrize("source", TRIAL_SOURCES)
def test_taus_packed_export_reads_back_with_the_same_rows(opened, source):
    trial, _, _, ppk = opened(source)
    back = read_ppk(ppk)

    expected, actual = derive_rows(trial), derive_rows(back)
    for table in ROUND_TRIP_TABLES:  # ids are local row numbers; only the row order may differ
        left, right = (_sorted(rows[table]) for rows in (expected, actual))
        assert list(left.columns) == list(right.columns), table
        assert len(left) == len(right), table
        for column in left.columns:
            a, b = left[column].tolist(), right[column].tolist()
            if left[column].dtype.kind == "f":
                assert a == pytest.approx(b, rel=0, abs=0, nan_ok=True), (table, column)
            else:
                assert a == b, (table, column)
    assert expected["trial"].drop(columns=["name", "data_source"]).equals(
        actual["trial"].drop(columns=["name", "data_source"]))


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


@pytest.mark.parametrize(("ci", "outcome"), [("", "1 skipped"),
                                              ("true", "required in CI: java and javac")])
def test_without_java_the_reader_test_skips_and_fails_under_ci(ci, outcome):
    no_java = [folder for folder in os.environ["PATH"].split(os.pathsep)
               if not any((Path(folder) / tool).exists() for tool in ("java", "javac"))]
    env = {**os.environ, "PATH": os.pathsep.join(no_java), "CI": ci}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", __file__, "-q", "-rsf", "-p", "no:cacheprovider",
         "-k", "opens_the_trial_as_written and tau2_wrap_mpi2"],
        cwd=PROJECT_ROOT, env=env, check=False, capture_output=True, text=True, timeout=300)
    assert outcome in done.stdout, done.stdout
    assert (done.returncode == 0) == (ci == ""), done.stdout
    assert "java and javac not found on PATH" in done.stdout
