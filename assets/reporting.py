"""Dagster reporting for partitioned steps: per-partition results and checks, the failure.

A step that processes many partitions calls :meth:`PartitionBatch.run`; an
``InputError`` of one partition is recorded and the next partition goes on.
:meth:`PartitionBatch.results` then reports the outcome of each partition:

* an ``AssetMaterialization`` for each stored partition only (the assets are
  ``skippable``); when every partition was stored, one ``MaterializeResult``
  instead, which also records data and code versions (and which Dagster hands
  the storage as one batch where ``DAGSTER_EVENT_BATCH_SIZE`` is set: one write
  with the instance's storage, ``resources/instance_storage.py``). Each carries its partition's own metadata and the
  column schema (the UI shows the latest materialization's; its bytes cost
  little beside the event itself, ``benchmarks/run_costs.py``);
* one evaluation of the asset's per-partition check for EVERY partition
  (``AssetCheckEvaluation`` with its ``partition``): passed, or failed with
  the partition, file, line and field of its error in the description and
  metadata; a partition stored although an input left something out
  (:class:`Stored`'s ``left_out``, ``joulehouse/leftout.py``) is a WARN
  failure of the check, with the counts and the first records.

The per-partition work runs in an executor (``resources/workers.py``: worker
processes, or in-process); only what each partition stored comes back
(:class:`Stored`), and every event is written by the step's own process.

A passed check evaluation per partition stays: a planned partition with no
evaluation reads *execution failed* in a failed run and *skipped* in a
successful one (``AssetCheckExecutionRecord.resolve_status``), so one result
per run for the passed ones would show them wrong.

Once every asset of the step is reported, the step raises :func:`failure`
(``N of M partition(s) failed``) if any partition failed: on Dagster's
open-source storages (SQLite, PostgreSQL) a partition shows as *failed*
only when it was planned in a run that failed and was not materialized
there (an ``AssetMaterializationFailure`` cannot be yielded by a step, and
those storages do not keep one), so the run must fail, and must fail last.
"""

import math
import re
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pandas as pd
import pandera.pandas as pa
from dagster._core.execution.context.metadata_logging import (
    AssetMetadataHandle,
    OutputMetadataAccumulator,
)

from joulehouse.errors import InputError
from joulehouse.leftout import LeftOut, summary
from resources.workers import InProcessExecutor

MAX_ERRORS_SHOWN = 20
#: Left-out records of a partition quoted in its check's description.
LEFT_OUT_SHOWN = 3


#: The run tag asking a step that reads only what changed since its partitions were stored
#: (ClusterCockpit's blocks: ``assets/clustercockpit.py``) to read every entry again, its
#: value :data:`REREAD_ALL`: set by the weekly re-validation (``sensors/schedules.py``) and by
#: an operator launching a run with it (the UI's launchpad, a backfill's tags).
REREAD_TAG = "joulehouse/reread"
REREAD_ALL = "all"


def reread_all(context: dg.AssetExecutionContext) -> bool:
    """Whether the run is tagged to read every entry of its partitions again
    (:data:`REREAD_TAG` = :data:`REREAD_ALL`)."""
    return context.run.tags.get(REREAD_TAG) == REREAD_ALL


def run_partitions(context: dg.AssetExecutionContext) -> list[str] | None:
    """The partition keys of the run, or None in a run without partitions."""
    if context.has_partition_key or context.has_partition_key_range:
        return list(context.partition_keys)
    return None


def partition_count(context: dg.AssetExecutionContext) -> int | None:
    """How many partitions the run covers, or None in a run without partitions (what
    ``StepWorkers.pool`` sizes its processes by)."""
    keys = run_partitions(context)
    return None if keys is None else len(keys)


def column_description(schema: pa.DataFrameSchema | None, column: str) -> str | None:
    """The description of ``column`` in ``schema`` (its own column or the regex column
    matching it, as pandera matches them), or None."""
    for name, spec in (schema.columns.items() if schema is not None else ()):
        if name == column or (spec.regex and re.match(name, column)):
            return spec.description
    return None


#: Frame name -> the pandera schema its columns follow (None: not described).
SchemaOf = Callable[[str], pa.DataFrameSchema | None]


def column_schema(frames: Mapping[str, pd.DataFrame], schema_of: SchemaOf) -> dg.TableSchema:
    """The columns of ``frames``, described as the pandera schema of their frame says;
    names are prefixed with the frame name when there are several."""
    prefix = len(frames) > 1
    return dg.TableSchema(columns=[
        dg.TableColumn(f"{name}.{column}" if prefix else str(column), str(dtype),
                       description=column_description(schema_of(name), str(column)))
        for name, frame in frames.items() for column, dtype in frame.dtypes.items()
    ])


def table_metadata(frame: pd.DataFrame, schema: pa.DataFrameSchema) -> dict[str, Any]:
    """Row count and column schema (described by its pandera ``schema``) of one table."""
    return {"dagster/row_count": dg.MetadataValue.int(len(frame)),
            "dagster/column_schema": column_schema({"table": frame}, lambda name: schema)}


#: The retry of every step for what is not a verdict on its input: a file system full or
#: unreachable, the object store or TAUdb down. The step runs again every 15 s, eight times,
#: in the same run (120 s of waits in all); it is idempotent (every write replaces,
#: atomically). A constant wait, not a growing one: a step runs again at most 15 s after
#: the fault has passed (10, 30, then 70 s before: a warehouse full for 60 s held the steps
#: failed in it 45-57 s after its space was back; benchmarks/README.md, "A full warehouse
#: for a minute"). A step's own ``dg.Failure`` (bad input: ``failure``; nothing stored
#: yet: ``verdict``) is raised with ``allow_retries=False`` and fails at once. A bug is
#: retried too: the whole step eight times more and 120 s of waits, the step's pool slot
#: held meanwhile.
STEP_RETRY = dg.RetryPolicy(max_retries=8, delay=15)


@contextmanager
def backfills(partitions_per_run: int | None = None) -> Iterator[dg.BackfillPolicy]:
    """The backfill policy of the asset decorators inside the block: every partition of a
    backfill in one run (``BackfillPolicy.single_run()``), or, given
    ``partitions_per_run``, at most that many per run (``BackfillPolicy.multi_run``).

    Dagster 1.13 calls an asset's ``backfill_policy`` parameter beta and warns at every
    load of the definitions; that one warning is silenced in the block, nothing else.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Parameter `backfill_policy` of function",
                                category=dg.BetaWarning)
        yield (dg.BackfillPolicy.single_run() if partitions_per_run is None else
               dg.BackfillPolicy.multi_run(partitions_per_run))


def partition_check_spec(asset: dg.AssetKey, name: str, partitions_def: dg.PartitionsDefinition,
                         description: str) -> dg.AssetCheckSpec:
    """The spec of a check evaluated once per partition (see the module docstring).

    Dagster 1.13 marks ``partitions_def`` on a check spec as a preview and warns
    on every load; that one warning is silenced here, where it is asked for.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*partitions_def on an AssetCheckSpec",
                                category=dg.PreviewWarning)
        return dg.AssetCheckSpec(name, asset=asset, partitions_def=partitions_def,
                                 description=description)


def add_partitions_metadata(context: dg.AssetExecutionContext, asset_key: dg.AssetKey,
                            metadata: Mapping[str, Mapping[str, Any]]) -> None:
    """``context.add_asset_metadata(metadata[key], asset_key=asset_key, partition_key=key)``
    for every key of ``metadata`` at once: each partition's materialization of the run
    carries its own.

    Dagster 1.13's call, once per partition, asks the instance for both ends of the run's
    range (two queries) and copies its whole accumulator of the run's metadata: linear in
    the run's partitions per call, so quadratic in all (benchmarks/README.md, "Second
    cut"). Here the keys are checked against the run's once and added in
    one copy, into the same accumulator of the step (``StepExecutionContext``'s, from
    which Dagster's materializations take their metadata); tested against Dagster's own
    call (``tests/dagster/test_partition_batch.py``)."""
    if asset_key not in context.assets_def.keys:
        raise dg.DagsterInvariantViolationError(
            f"metadata for asset {asset_key.to_user_string()}, not materialized by this step")
    outside = metadata.keys() - set(context.partition_keys)
    if outside:
        raise dg.DagsterInvariantViolationError(
            f"metadata for partition(s) not targeted by this run: {sorted(outside)[:5]}")
    step = context._step_execution_context
    current = step._metadata_accumulator.per_output_metadata
    added = {}
    for key, values in metadata.items():
        handle = AssetMetadataHandle(asset_key=asset_key, partition_key=key)
        added[handle] = {**current.get(handle, {}), **values}
    step._metadata_accumulator = OutputMetadataAccumulator(
        per_output_metadata={**current, **added})


@dataclass(frozen=True)
class Stored:
    """What one partition's work stored, as small as the step needs to report it: rows
    per frame, the frames' columns (empty frames: names and dtypes) and metadata of its
    own (picklable values), so that it comes back cheaply from a worker process;
    ``left_out``: what its inputs left out (its check warns)."""

    rows: dict[str, int]
    columns: dict[str, pd.DataFrame]
    metadata: dict[str, Any] = field(default_factory=dict)
    left_out: list[LeftOut] = field(default_factory=list)

    @classmethod
    def of(cls, frames: Mapping[str, pd.DataFrame], left_out: list[LeftOut] | None = None,
           **metadata: Any) -> "Stored":
        return cls({name: len(frame) for name, frame in frames.items()},
                   {name: frame.iloc[:0] for name, frame in frames.items()}, metadata,
                   list(left_out or []))


#: One partition's work: returns what it stored, by frame name (or as :class:`Stored`).
Work = Callable[..., Mapping[str, pd.DataFrame] | Stored]


def stored(work: Work, *arguments: Any) -> Stored:
    """``work(*arguments)`` as :class:`Stored` (what a worker sends back)."""
    outcome = work(*arguments)
    return outcome if isinstance(outcome, Stored) else Stored.of(outcome)


#: Most entries in a task of ``assets.blocks.run_entries_both``: enough that a task's fixed
#: costs (one energy validation for all of them, the round trip to the worker) are spread.
PARTITIONS_PER_TASK = 16


def partitions_per_task(partitions: int, workers: int) -> int:
    """Entries per task for a run of ``partitions`` entries over ``workers`` processes: at
    most :data:`PARTITIONS_PER_TASK`, and few enough that each worker gets two tasks or
    more."""
    return max(1, min(PARTITIONS_PER_TASK, math.ceil(partitions / (2 * max(workers, 1)))))


def returned(error: Exception) -> Exception:
    """``error``, being handled, with its traceback as a note unless it is an InputError
    (bad input, named by its file and place): an error a worker returns rather than raises
    (``run_entries_both``'s tasks: a bug, raised by the step) loses its traceback when
    pickled back, where a raised one keeps it as the remote traceback."""
    if not isinstance(error, InputError):
        error.add_note(traceback.format_exc())
    return error


#: One entry's outcome in a task of ``assets.blocks.run_entries_both``: what the first
#: asset stored or the ``InputError`` that failed it, then what the second stored or the
#: error that failed it alone (None when the first failed).
BothOutcome = tuple[Stored | InputError, Stored | Exception | None]


@dataclass
class PartitionBatch:
    """What happened to each partition of one multi-partition step."""

    stored: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> metadata
    failed: dict[str, InputError] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # key -> why (upstream failed)
    left_out: dict[str, list[LeftOut]] = field(default_factory=dict)  # stored, yet left out
    schema: dg.TableSchema | None = None
    check_metadata: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> more

    @classmethod
    def run(
        cls,
        context: dg.AssetExecutionContext,
        work: Work,
        schema_of: SchemaOf,
        skip: Mapping[str, str] | None = None,
        arguments: Callable[[str], tuple] = lambda key: (key,),
        executor: Executor | None = None,
    ) -> "PartitionBatch":
        """Call ``work(*arguments(key))`` for every partition of the run but those in
        ``skip`` (key -> why: an upstream partition failed in this run), submitted to
        ``executor`` (default: in this process, one after the other): with worker
        processes, ``work`` is a module-level function and its arguments are picklable.
        ``work`` returns the frames it stored, by name, whose columns ``schema_of``
        describes; an ``InputError`` fails its partition only."""
        batch = cls()
        executor = executor or InProcessExecutor()
        futures: dict[str, Future] = {}
        for key in context.partition_keys:
            if skip and key in skip:
                batch.skipped[key] = skip[key]
                continue
            try:
                futures[key] = executor.submit(stored, work, *arguments(key))
            except InputError as err:
                batch._fail(context, key, err)
        for key, future in futures.items():
            try:
                batch._store(key, future.result(), schema_of)
            except InputError as err:
                batch._fail(context, key, err)
        return batch

    def _store(self, key: str, outcome: Stored, schema_of: SchemaOf) -> None:
        self.stored[key] = {"dagster/row_count": dg.MetadataValue.int(
            sum(outcome.rows.values())), **outcome.metadata}
        if len(outcome.rows) > 1:
            self.stored[key]["rows"] = dg.MetadataValue.json(outcome.rows)
        if outcome.left_out:
            self.left_out[key] = outcome.left_out
            self.stored[key]["left_out"] = dg.MetadataValue.int(len(outcome.left_out))
        self.schema = self.schema or column_schema(outcome.columns, schema_of)

    def _fail(self, context: dg.AssetExecutionContext, key: str, err: InputError) -> None:
        context.log.error(f"{key}: {err}")
        self.failed[key] = err

    def results(self, context: dg.AssetExecutionContext, check: dg.AssetCheckSpec
                ) -> Iterator[Any]:
        """The events of the batch for the asset ``check`` is on (see the module docstring)."""
        # Each partition's own metadata only: the run's totals are in its outcome.
        common = {} if self.schema is None else {"dagster/column_schema": self.schema}
        asset_key = check.asset_key
        if not self.failed and not self.skipped:
            add_partitions_metadata(context, asset_key, self.stored)
            yield dg.MaterializeResult(asset_key=asset_key, metadata=common)
        else:
            for key, metadata in self.stored.items():
                yield dg.AssetMaterialization(asset_key, partition=key,
                                              metadata={**common, **metadata})
        if check.key in context.selected_asset_check_keys:
            yield dg.Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(
                check.key))
            for key in context.partition_keys:
                yield self._evaluation(check.key, key)

    def errors(self) -> dict[str, str]:
        """Partition -> why, for every partition that failed or was skipped."""
        return {**{key: str(err) for key, err in self.failed.items()},
                **{key: f"not computed, {why}" for key, why in self.skipped.items()}}

    def _evaluation(self, check_key: dg.AssetCheckKey, key: str) -> dg.AssetCheckEvaluation:
        err = self.failed.get(key)
        metadata: dict[str, Any] = {"partition": key}
        left_out = self.left_out.get(key, [])
        severity = dg.AssetCheckSeverity.ERROR
        if err is not None:  # a failure is an ERROR whatever else was left out
            description = f"{key}: {err}"
            metadata |= {"file": err.path, "line": err.line, "field": err.field,
                         "error": err.reason}
        elif left_out:
            severity = dg.AssetCheckSeverity.WARN
            said, shown = left_out_warning(left_out)
            description = f"{key}: {said}"
            metadata |= shown
        elif key in self.skipped:
            description = f"{key}: not computed, {self.skipped[key]}"
        else:
            description = f"{key}: passed"
        metadata |= self.check_metadata.get(key, {})
        return dg.AssetCheckEvaluation(
            asset_key=check_key.asset_key, check_name=check_key.name,
            passed=key in self.stored and not left_out, severity=severity, partition=key,
            description=description,
            metadata={name: value for name, value in metadata.items() if value is not None},
        )


def left_out_warning(records: list[LeftOut]) -> tuple[str, dict[str, Any]]:
    """The description and metadata of a check that warns of ``records`` (a partition's, or
    an unpartitioned asset's): the counts and the first records."""
    return summary(records, LEFT_OUT_SHOWN), {
        "left_out": len(records), "inputs_left_out": len({record.input for record in records}),
        "first_left_out": dg.MetadataValue.json(
            [str(record) for record in records[:MAX_ERRORS_SHOWN]])}


def left_out_check(spec: dg.AssetCheckSpec, records: list[LeftOut]) -> dg.AssetCheckResult:
    """The result of an unpartitioned asset's check ``spec``: passed, or a WARN of what its
    inputs left out (``records``), as a partition's is (:meth:`PartitionBatch.results`)."""
    if not records:
        return dg.AssetCheckResult(check_name=spec.name, asset_key=spec.asset_key, passed=True,
                                   description="passed")
    description, metadata = left_out_warning(records)
    return dg.AssetCheckResult(check_name=spec.name, asset_key=spec.asset_key, passed=False,
                               severity=dg.AssetCheckSeverity.WARN, description=description,
                               metadata=metadata)


#: Why a partition's energy is not computed in a run in which its frames failed.
FRAMES_FAILED = "its validated frames failed in this run"


def verdict(description: str, metadata: Mapping[str, Any] | None = None) -> dg.Failure:
    """A step's failure that running it again cannot mend (nothing stored yet to compute
    from, a landing folder missing): not retried (STEP_RETRY)."""
    return dg.Failure(description, metadata=metadata, allow_retries=False)


def failure(planned: int, failed: Mapping[str, str]) -> dg.Failure:
    """The step's failure: ``N of M partition(s) failed``, then the first errors, one a
    line; the failed keys in its metadata."""
    shown = [f"{key}: {why}" for key, why in list(failed.items())[:MAX_ERRORS_SHOWN]]
    more = len(failed) - len(shown)
    return dg.Failure(
        allow_retries=False,
        description="\n".join([f"{len(failed)} of {planned} partition(s) failed:", *shown,
                               *([f"... and {more} more"] if more > 0 else [])]),
        metadata={"partitions_failed": len(failed),
                  "partitions": dg.MetadataValue.json(sorted(failed))})
