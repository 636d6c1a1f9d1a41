"""The trial that a reader or a source mapping hands to the TAUdb loader.

Frames hold *real* threads only (node, context, thread >= 0). The loader
derives TAU's statistics threads (-1..-7), the percents and all ids, so every
source (TAU profiles, GPU benchmark runs, later GEOPM, ClusterCockpit,
PowerAPI) produces this one shape and shares one loader, which holds every
trial to what TAU's tools need beyond the DDL (:mod:`joulehouse.taudb.rules`).

Names are already normalised as TAU's loader does (runs of two or more spaces
collapsed to one, then trimmed); a callpath name joins its frames with
``" => "``. Values keep the source's units (TAU: microseconds for TIME).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from joulehouse.leftout import LeftOut

THREAD_COLUMNS = ["node_rank", "context_rank", "thread_rank"]

#: Joins the frames of a callpath name: ``"main => foo => bar"``.
CALLPATH_SEPARATOR = " => "

#: data_source ids of seed 004's ``data_source`` table.
DATA_SOURCE_PPK = 0
DATA_SOURCE_TAU_PROFILES = 1
DATA_SOURCE_OTHER = 999


@dataclass
class TrialData:
    """One trial, before derived threads.

    - ``threads``: ``node_rank, context_rank, thread_rank`` (int), one row per
      real thread, sorted; TAU's ``thread_index`` is the row position.
    - ``timers``: one row per (thread, timer or callpath) the thread entered:
      ``THREAD_COLUMNS + [name, group_names, calls, subroutines]``;
      ``group_names`` is TAU's ``"A|B"`` string (may be empty).
    - ``timer_values``: ``THREAD_COLUMNS + [name, metric, inclusive, exclusive]``,
      one row per (thread, timer, metric).
    - ``counters``: TAU user events (atomic events) per thread:
      ``THREAD_COLUMNS + [name, sample_count, maximum, minimum, mean, sum_squares]``.
    - ``metadata``: ``THREAD_COLUMNS + [name, value]``, one row per attribute
      per thread, as the thread's profile states it (strings).
    - ``source_key``: what the trial was loaded from (a path, a run key); a
      later load with the same key replaces this trial.
    - ``fingerprint``: a digest of the source's content.
    """

    name: str
    data_source: int
    metrics: list[str]
    threads: pd.DataFrame
    timers: pd.DataFrame
    timer_values: pd.DataFrame
    counters: pd.DataFrame
    metadata: pd.DataFrame
    source_key: str
    fingerprint: str
    trial_metadata: dict[str, str] = field(default_factory=dict)
    """Extra trial-level attributes (primary metadata), e.g. the fingerprint."""
    left_out: list[LeftOut] = field(default_factory=list)
    """What the source held that the trial does not (``joulehouse/leftout.py``), e.g. a TAU
    text profile's timer lines with 0 calls; the loader ignores it."""
