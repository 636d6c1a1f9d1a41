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
  partition and stage (``<source>/<stage>/<partition key>``: ``powerapi/read/...``,
  ``gpu-benchmark/energy/...``; ``<source>/<stage>`` for an unpartitioned asset), its
  rows naming the stage and partition key too, written with what it is about
  (:func:`store_left_out`): the records of the inputs' current state, rewritten at each
  read.

A case left out by rule, not by accident (TAU's loader skips a text profile's timer
lines with 0 calls) is one record per input with a count, not one per line.
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
LEFT_OUT_COLUMNS = ["source", "stage", "partition_key", "input", "part", "reason",
                    "recorded_at"]

LEFT_OUT_SCHEMA = pa.DataFrameSchema(
    {
        "source": pa.Column(str, description="the source: powerapi, geopm, ..."),
        "stage": pa.Column(str, description="the step that left it out: read (the input "
                           "read), energy (its energy computed), load (its trial loaded)"),
        "partition_key": pa.Column(str, description="the Dagster partition of the source "
                                   "whose check warned ('' for an unpartitioned asset)"),
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


def left_out_frame(records: Iterable[LeftOut], stage: str, partition_key: str,
                   recorded_at: pd.Timestamp) -> pd.DataFrame:
    """``records`` as rows of :data:`LEFT_OUT_SCHEMA`, each of ``stage`` and
    ``partition_key``, recorded at ``recorded_at`` (UTC)."""
    records = list(records)
    frame = pd.DataFrame({
        "source": pd.Series([r.source for r in records], dtype=object),
        "stage": pd.Series([stage] * len(records), dtype=object),
        "partition_key": pd.Series([partition_key] * len(records), dtype=object),
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


def left_out_key(source: str, stage: str, partition_key: str) -> str:
    """The partition of :data:`LEFT_OUT_TABLE` of a source's partition and stage:
    ``<source>/<stage>/<partition_key>``, ``<source>/<stage>`` for an unpartitioned asset
    (``partition_key`` '')."""
    return "/".join(part for part in (source, stage, partition_key) if part)


def store_left_out(tables: Warehouse, source: str, stage: str, partition_key: str,
                   records: list[LeftOut], *, now: pd.Timestamp) -> None:
    """The partition of :data:`LEFT_OUT_TABLE` of ``source``'s ``partition_key`` and
    ``stage`` (:func:`left_out_key`): ``records``, recorded at ``now``, in place of the ones
    stored there before. The caller gives what the current state of its inputs leaves out
    (no appends: a read again of the same state gives the same records, a state that leaves
    nothing out none). Nothing is written when there are none and none are stored."""
    key = left_out_key(source, stage, partition_key)
    if records or tables.has_partition(LEFT_OUT_TABLE, key):
        tables.write_partition(LEFT_OUT_TABLE, key,
                               left_out_frame(records, stage, partition_key, now))


def stored_left_out(tables: Warehouse, source: str, stage: str,
                    partition_key: str) -> list[LeftOut]:
    """The records stored by :func:`store_left_out` for ``source``'s ``partition_key`` and
    ``stage`` (none when nothing is stored): what an input not read again, being
    unchanged, still leaves out."""
    key = left_out_key(source, stage, partition_key)
    if not tables.has_partition(LEFT_OUT_TABLE, key):
        return []
    frame = tables.read_partitions(LEFT_OUT_TABLE, [key])
    return [LeftOut(*row) for row in
            frame[["source", "input", "part", "reason"]].itertuples(index=False)]
