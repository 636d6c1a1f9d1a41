"""Dagster reporting for partitioned steps: per-partition results, metadata, failures.

A step that processes many partitions calls :meth:`PartitionBatch.run`; an
``InputError`` of one partition is recorded and the next partition goes on.
:meth:`PartitionBatch.results` then reports the outcome:

* all stored: one ``MaterializeResult`` for every partition of the run, with
  each partition's row counts as partition-scoped metadata;
* some failed: an ``AssetMaterialization`` for each stored partition only
  (the asset is declared ``output_required=False``), so the failed ones
  show as failed, not as materialized; then the failure itself, as a failed
  blocking check (with ``check_name``) or a ``Failure``, which fails the
  step and skips its downstream in this run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pandas as pd

from joulehouse.errors import InputError

MAX_ERRORS_SHOWN = 20


def column_schema(frames: Mapping[str, pd.DataFrame]) -> dg.TableSchema:
    """The columns of ``frames``; names are prefixed with the frame name when there are several."""
    prefix = len(frames) > 1
    return dg.TableSchema(columns=[
        dg.TableColumn(f"{name}.{column}" if prefix else str(column), str(dtype))
        for name, frame in frames.items() for column, dtype in frame.dtypes.items()
    ])


def table_metadata(frame: pd.DataFrame) -> dict[str, Any]:
    """Row count and column schema of one table."""
    return {"dagster/row_count": dg.MetadataValue.int(len(frame)),
            "dagster/column_schema": column_schema({"table": frame})}


@dataclass
class PartitionBatch:
    """What happened to each partition of one multi-partition step."""

    stored: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> metadata
    failed: dict[str, InputError] = field(default_factory=dict)
    schema: dg.TableSchema | None = None

    @classmethod
    def run(
        cls,
        context: dg.AssetExecutionContext,
        work: Callable[[str], Mapping[str, pd.DataFrame]],
    ) -> PartitionBatch:
        """Call ``work(key)`` for every partition of the run; it returns the frames it stored."""
        batch = cls()
        for key in context.partition_keys:
            try:
                frames = work(key)
            except InputError as err:
                context.log.error(f"{key}: {err}")
                batch.failed[key] = err
                continue
            rows = {name: len(frame) for name, frame in frames.items()}
            batch.stored[key] = {"dagster/row_count": dg.MetadataValue.int(sum(rows.values()))}
            if len(rows) > 1:
                batch.stored[key]["rows"] = dg.MetadataValue.json(rows)
            batch.schema = batch.schema or column_schema(frames)
        return batch

    def results(self, context: dg.AssetExecutionContext, check_name: str | None = None
                ) -> Iterator[dg.MaterializeResult | dg.AssetMaterialization | dg.AssetCheckResult]:
        """The events of the batch (see the module docstring)."""
        common = {"partitions_stored": dg.MetadataValue.int(len(self.stored)),
                  "partitions_failed": dg.MetadataValue.int(len(self.failed))}
        if self.schema is not None:
            common["dagster/column_schema"] = self.schema
        checks = [self._check_result(check_name)] if check_name else []
        if not self.failed:
            for key, metadata in self.stored.items():
                context.add_asset_metadata(metadata, partition_key=key)
            yield dg.MaterializeResult(metadata=common, check_results=checks)
            return
        for key, metadata in self.stored.items():
            yield dg.AssetMaterialization(context.asset_key, partition=key,
                                          metadata={**common, **metadata})
        if checks:
            yield from checks
        else:
            raise dg.Failure(description=self._summary(), metadata=self._error_metadata())

    def _check_result(self, check_name: str) -> dg.AssetCheckResult:
        return dg.AssetCheckResult(
            check_name=check_name,
            passed=not self.failed,
            description=self._summary() if self.failed else "every partition is valid",
            metadata={"partitions_checked": len(self.stored) + len(self.failed),
                      **self._error_metadata()},
        )

    def _summary(self) -> str:
        shown = [f"{key}: {err}" for key, err in list(self.failed.items())[:MAX_ERRORS_SHOWN]]
        more = len(self.failed) - len(shown)
        return "\n".join(shown + ([f"... and {more} more"] if more > 0 else []))

    def _error_metadata(self) -> dict[str, Any]:
        if not self.failed:
            return {"partitions_failed": 0}
        return {
            "partitions_failed": len(self.failed),
            "errors": dg.MetadataValue.json([
                {"partition": key, "file": err.path, "line": err.line, "field": err.field,
                 "error": err.reason}
                for key, err in self.failed.items()
            ]),
        }
