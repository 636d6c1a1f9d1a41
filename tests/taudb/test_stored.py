"""A trial read back from TAUdb (joulehouse.taudb.stored) loads again with the same rows, and
so does its packed profile (write_ppk, read_ppk): how a trial of the SQLite TAUdb reaches
ParaProf. TAU's own reader opening that file is in test_tau_reader.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from small_trial import BAR, FOO, small_trial

from joulehouse.taudb.connect import TaudbDatabase, TaudbUnavailable
from joulehouse.taudb.loader import derive_rows, list_trials, load_trial
from joulehouse.taudb.ppk import read_ppk, write_ppk
from joulehouse.taudb.read import read_trial_source
from joulehouse.taudb.schema import ensure_schema
from joulehouse.taudb.stored import callpath_names, read_stored_trial

PROJECT_ROOT = Path(__file__).resolve().parents[2]

#: Tables equal row for row; secondary_metadata without its random ids.
TABLES = ["metric", "thread", "timer", "timer_group", "timer_parameter", "timer_callpath",
          "counter", "counter_value", "timer_call_data", "timer_value"]


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def _assert_same_rows(expected: dict, actual: dict, tables: list[str]) -> None:
    for table in tables:
        left, right = _sorted(expected[table]), _sorted(actual[table])
        pd.testing.assert_frame_equal(left, right, check_dtype=False, obj=table)


@pytest.fixture
def sqlite_db(tmp_path):
    with TaudbDatabase(f"sqlite:///{tmp_path}/taudb.sqlite") as db:
        yield db


def _sources(peer_data: Path) -> dict:
    tau = peer_data / "tau" / "profiles"
    return {
        "small": small_trial,
        "gpu": lambda: read_trial_source(PROJECT_ROOT / "examples/gpu-data/power-limit/bert/150W"),
        "userevents": lambda: read_trial_source(tau / "tau2_xmain_mpi8_userevents"),
        "callpath": lambda: read_trial_source(tau / "hatchet_tau_cpi_mpi_callpath"),
        "ppk": lambda: read_trial_source(tau / "tau2_ppk_examples" / "LoadImbalance_2.ppk"),
    }


@pytest.mark.parametrize("source", ["small", "gpu", "userevents", "callpath", "ppk"])
def test_a_stored_trial_and_its_packed_profile_load_with_the_same_rows(
        sqlite_db, peer_data, tmp_path, source):
    trial = _sources(peer_data)[source]()
    trial_id = load_trial(sqlite_db, trial)

    stored = read_stored_trial(sqlite_db, trial_id)
    expected, actual = derive_rows(trial), derive_rows(stored)
    _assert_same_rows(expected, actual, TABLES + ["trial", "primary_metadata"])
    for rows in (expected, actual):
        rows["secondary_metadata"] = rows["secondary_metadata"].drop(columns="id")
    _assert_same_rows(expected, actual, ["secondary_metadata"])

    write_ppk(stored, tmp_path / "trial.ppk")
    back = read_ppk(tmp_path / "trial.ppk")
    assert back.trial_metadata == stored.trial_metadata
    packed = derive_rows(back)
    packed["secondary_metadata"] = packed["secondary_metadata"].drop(columns="id")
    _assert_same_rows(actual, packed, TABLES + ["secondary_metadata"])


def test_callpath_names_join_every_frame(sqlite_db):
    trial_id = load_trial(sqlite_db, small_trial())
    names = set(callpath_names(sqlite_db, trial_id).values())
    main, foo, bar = (part for part in small_trial().timers["name"].iloc[3].split(" => "))
    assert names == {main, foo, bar, f"{main} => {foo}", f"{main} => {foo} => {bar}"}


def test_a_trial_that_is_not_there_is_a_key_error(sqlite_db):
    ensure_schema(sqlite_db)
    with pytest.raises(KeyError, match="no trial 7"):
        read_stored_trial(sqlite_db, 7)


def test_reading_creates_no_schema_and_a_mistyped_path_read_only_creates_nothing(tmp_path):
    url = f"sqlite:///{tmp_path}/empty.sqlite"
    with TaudbDatabase(url) as db:  # a database without the TAUdb schema
        assert list_trials(db) == []
        with pytest.raises(TaudbUnavailable, match="no TAUdb schema"):
            read_stored_trial(db, 1)
        assert db.query("SELECT count(*) FROM sqlite_master") == [(0,)]
    with pytest.raises(TaudbUnavailable, match="no such database file"):
        TaudbDatabase(f"sqlite:///{tmp_path}/typo.sqlite", read_only=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.sqlite"]


def test_names_in_javas_modified_utf8_read_back(tmp_path):
    # a NUL (C0 80 in Java's writeUTF) and a character outside the BMP (a surrogate pair)
    trial = small_trial()
    trial.metadata.loc[0, "value"] = "n1\x00 \U0001d11e \u00b0C"
    write_ppk(trial, tmp_path / "trial.ppk")
    assert read_ppk(tmp_path / "trial.ppk").metadata.set_index(["node_rank", "name"]).loc[
        (0, "Hostname"), "value"] == "n1\x00 \U0001d11e \u00b0C"


def test_a_packed_function_has_the_union_of_its_entries_groups_as_the_loader_takes(tmp_path):
    timers = small_trial().timers
    timers.loc[(timers["name"] == FOO) & (timers["node_rank"] == 1), "group_names"] = "IO"
    trial = small_trial(timers=timers)
    write_ppk(trial, tmp_path / "trial.ppk")
    back = read_ppk(tmp_path / "trial.ppk").timers
    assert set(back.loc[back["name"] == FOO, "group_names"]) == {"TAU_USER|MPI|IO"}
    assert set(back.loc[back["name"] == BAR, "group_names"]) == {""}  # no group stated
