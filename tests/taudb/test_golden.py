"""Every peer-data profile set, read and loaded, equals the rows TAU's own loader wrote.

On SQLite and on a real PostgreSQL server (the ``postgres_url`` fixture).
What is not compared is listed in ``golden.py``: ids, secondary-metadata
UUIDs, and the primary metadata the loader adds (source_key, fingerprint).
Two settings of TAU's command line are applied as TAU's loader had them:
the trial name (``-n``) and, for trial1, ``-a hatchet -x cpi``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from golden import (
    COMMAND_LINE_METADATA,
    GOLDEN_SETS,
    compare,
    export_trial,
    read_golden,
    trial_from_golden,
)

from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import load_trial
from joulehouse.taudb.read import read_trial_source


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def database(request, tmp_path_factory):
    """One TAUdb per backend for this module (PostgreSQL: its own schema)."""
    if request.param == "sqlite":
        url, schema = f"sqlite:///{tmp_path_factory.mktemp('golden')}/taudb.sqlite", None
    else:
        url, schema = request.getfixturevalue("postgres_url"), "golden"
    with TaudbDatabase(url, schema) as db:
        yield db


def _golden_folder(peer_data: Path, folder: str) -> Path:
    return peer_data / "tau" / "taudb-golden" / folder


@pytest.mark.parametrize("folder", list(GOLDEN_SETS))
def test_read_and_loaded_rows_equal_taus(database, peer_data, folder):
    golden_folder = _golden_folder(peer_data, folder)
    expected = read_golden(golden_folder)
    trial = read_trial_source(peer_data / "tau" / "profiles" / GOLDEN_SETS[folder])
    trial.name = expected["trial.csv"]["name"].iloc[0]
    trial.trial_metadata.update(COMMAND_LINE_METADATA.get(folder, {}))

    trial_id = load_trial(database, trial)

    assert compare(expected, export_trial(database, trial_id)) == []


@pytest.mark.parametrize("folder", list(GOLDEN_SETS))
def test_loader_alone_derives_taus_rows_from_the_golden_real_threads(tmp_path, peer_data, folder):
    """The loader's half, without the readers: golden real-thread rows in, every golden row out."""
    golden_folder = _golden_folder(peer_data, folder)
    trial = trial_from_golden(golden_folder)
    trial.trial_metadata.update(COMMAND_LINE_METADATA.get(folder, {}))
    with TaudbDatabase(f"sqlite:///{tmp_path}/taudb.sqlite") as db:
        trial_id = load_trial(db, trial)
        assert compare(read_golden(golden_folder), export_trial(db, trial_id)) == []


def test_compare_reports_a_changed_value(tmp_path, peer_data):
    """The comparison can fail: one percent changed by 1e-6 relative is reported."""
    golden_folder = _golden_folder(peer_data, "trial12_tau2_wrap_mpi2")
    with TaudbDatabase(f"sqlite:///{tmp_path}/taudb.sqlite") as db:
        trial_id = load_trial(db, trial_from_golden(golden_folder))
        db.query("UPDATE timer_value SET inclusive_percent = inclusive_percent * (1 + 1e-6) "
                 "WHERE rowid = (SELECT min(rowid) FROM timer_value)")
        problems = compare(read_golden(golden_folder), export_trial(db, trial_id))
    assert len(problems) == 1 and "inclusive_percent: 1 values differ" in problems[0]
