"""From ready partitions to what a sensor returns: new dynamic partitions and run requests.

Shared by the sensors over dynamic partitions. New keys are appended to the
partition set, so a tick's new partitions form one contiguous range; ready
partitions elsewhere in the set (fixed ones) may need more ranges, at most
``max_runs``, merged where closest (a merged range recomputes the unchanged
partitions in between). A run key is ``<prefix>:<digest of the range's ready
(key, fingerprint) pairs>``, so changed content asks again.
"""

from __future__ import annotations

import dagster as dg

from joulehouse.digest import digest_pairs
from joulehouse.ranges import contiguous_ranges

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


def range_run_requests(
    instance: dg.DagsterInstance,
    partitions_def: dg.DynamicPartitionsDefinition,
    fingerprints: dict[str, str],
    *,
    job_name: str,
    run_key_prefix: str,
    max_runs: int,
    tags: dict[str, str],
) -> tuple[list[dg.RunRequest], list[dg.AddDynamicPartitionsRequest], int]:
    """Run requests covering the ready ``fingerprints`` (key -> fingerprint), the request
    adding the new keys (fetched once from ``instance``), and how many keys are new."""
    existing = instance.get_dynamic_partitions(partitions_def.name)
    known = set(existing)
    new_keys = [key for key in fingerprints if key not in known]
    order = [*existing, *new_keys]
    position = {key: index for index, key in enumerate(order)}
    run_requests = []
    for start, end in contiguous_ranges(order, fingerprints, max_runs):
        covered = order[position[start]:position[end] + 1]
        ready = {key: fingerprints[key] for key in covered if key in fingerprints}
        run_requests.append(dg.RunRequest(
            run_key=f"{run_key_prefix}:{digest_pairs(ready)}",
            job_name=job_name,
            tags={RANGE_START: start, RANGE_END: end, "joulehouse/partitions": str(len(ready)),
                  **tags},
        ))
    additions = [partitions_def.build_add_request(new_keys)] if new_keys else []
    return run_requests, additions, len(new_keys)
