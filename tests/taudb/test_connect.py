"""TaudbDatabase on PostgreSQL: text COPY keeps every string exactly; schema names."""

from __future__ import annotations

import pandas as pd
import pytest
from small_trial import small_trial

from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import load_trial

#: Values that COPY's CSV or text format would mangle unless escaped.
ODD = ["\\N", "a\tb", "line\nbreak", "back\\slash", 'say "hi"', "one,two", "cr\rlf",
       "\\\\N", "\\t", ""]


def test_copy_keeps_odd_strings_exactly(postgres_url):
    rows = []
    for i, value in enumerate(ODD):
        rows += [(0, f"same {i}", value), (1, f"same {i}", value),  # primary: on every rank
                 (0, f"differs {i}", value), (1, f"differs {i}", value + "!")]  # secondary
    metadata = pd.DataFrame(rows, columns=["node_rank", "name", "value"])
    metadata[["context_rank", "thread_rank"]] = 0
    trial = small_trial(metadata=metadata, trial_metadata={"App\\N": "\\N"})
    with TaudbDatabase(postgres_url, "connect_odd") as db:
        trial_id = load_trial(db, trial)
        primary = dict(db.query("SELECT name, value FROM primary_metadata WHERE trial = ?",
                                (trial_id,)))
        secondary = set(db.query("SELECT name, value FROM secondary_metadata WHERE trial = ?",
                                 (trial_id,)))
    assert primary["App\\N"] == "\\N"
    for i, value in enumerate(ODD):
        assert primary[f"same {i}"] == value
    assert secondary == {(f"differs {i}", v) for i, value in enumerate(ODD)
                         for v in (value, value + "!")}


def test_schema_name_must_be_lower_case(postgres_url):
    with pytest.raises(ValueError, match="lower-case"):
        TaudbDatabase(postgres_url, "MySchema")
