"""What an input left out: one record per input (or part of one) that gave no row, and why.

A reader or energy function returns, beside its rows, a :class:`LeftOut` for
each input (a file, a report, a job, a repetition, a profile set) that
contributed nothing, or part of which was not used, although it was not bad
enough to be refused (an :class:`~joulehouse.errors.InputError`): a report
file cut short inside its last report, power reports that all carry one
timestamp (no tick, so no energy), RAPL counters of a target that is not the
machine-level one. Being left out is said as loudly as failing:

- the command line prints each on stderr (``joulehouse: <input>: left out
  <part>: <reason>``) and chooses the exit code
  (``joulehouse.commands.conventions.report_left_out``, docs/cli.md);
- a Dagster run says it in the partition's check (WARN, with the counts and the
  first reasons) and stores the records in the warehouse table
  :data:`LEFT_OUT_TABLE` (columns :data:`LEFT_OUT_SCHEMA`) beside
  ``energy_facts``, so ``joulehouse sql`` lists them: one partition per source
  partition and stage (``<source>/read/<partition>``, ``<source>/energy/<partition>``),
  written with what it is about (:func:`store_left_out`): the records of the
  inputs' current state, rewritten at each read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd
import pandera.pandas as pa

from joulehouse.validation import validate
from joulehouse.warehouse import Warehouse

#: The warehouse table of what was left out (one partition per source partition).
LEFT_OUT_TABLE = "left_out"
LEFT_OUT_COLUMNS = ["source", "input", "part", "reason", "recorded_at"]

LEFT_OUT_SCHEMA = pa.DataFrameSchema(
    {
        "source": pa.Column(str, description="the source: powerapi, geopm, ..."),
        "input": pa.Column(str, description="the input that gave no row or lost a part: a "
                           "file path, or what stands for it (sensor 'x' for reports of "
                           "several files)"),
        "part": pa.Column(str, description="what of it was left out (the whole input, a "
                          "report, a target's reports ...)"),
        "reason": pa.Column(str, description="why it was left out"),
        "recorded_at": pa.Column(pd.DatetimeTZDtype("ns", "UTC"),
                                 description="when the read that left it out ran (UTC)"),
    },
    strict=True, ordered=True, name=LEFT_OUT_TABLE,
)


@dataclass(frozen=True)
class LeftOut:
    """An input (``input``: a path, or what stands for it) of ``source`` of which ``part``
    gave no row, for ``reason``."""

    source: str
    input: str
    part: str
    reason: str

    def __str__(self) -> str:
        return f"{self.input}: left out {self.part}: {self.reason}"


def left_out_frame(records: Iterable[LeftOut], recorded_at: pd.Timestamp) -> pd.DataFrame:
    """``records`` as rows of :data:`LEFT_OUT_SCHEMA`, each recorded at ``recorded_at`` (UTC)."""
    records = list(records)
    frame = pd.DataFrame({
        "source": pd.Series([r.source for r in records], dtype=object),
        "input": pd.Series([r.input for r in records], dtype=object),
        "part": pd.Series([r.part for r in records], dtype=object),
        "reason": pd.Series([r.reason for r in records], dtype=object),
        "recorded_at": pd.Series([recorded_at.tz_convert("UTC")] * len(records),
                                 dtype="datetime64[ns, UTC]"),
    })
    return validate(LEFT_OUT_SCHEMA, frame, LEFT_OUT_TABLE)


def summary(records: list[LeftOut], shown: int) -> str:
    """``N input(s) left something out: `` then the first ``shown`` records, ``; ``-separated,
    and how many more."""
    inputs = len({record.input for record in records})
    first = "; ".join(map(str, records[:shown]))
    more = f"; ... and {len(records) - shown} more" if len(records) > shown else ""
    return f"{inputs} input(s) left something out ({len(records)} record(s)): {first}{more}"


def store_left_out(tables: Warehouse, key: str, records: list[LeftOut], *,
                   now: pd.Timestamp) -> None:
    """Partition ``key`` of :data:`LEFT_OUT_TABLE`: ``records``, recorded at ``now``, in place
    of the ones stored there before. The caller gives what the current state of its inputs
    leaves out (no appends: a read again of the same state gives the same records, a state
    that leaves nothing out none). Nothing is written when there are none and none are
    stored."""
    if records or tables.has_partition(LEFT_OUT_TABLE, key):
        tables.write_partition(LEFT_OUT_TABLE, key, left_out_frame(records, now))
