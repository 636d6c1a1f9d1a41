"""How often a step draws its plots: at most once per ``$JOULEHOUSE_PLOT_EVERY_S`` seconds.

Drawing a plot in a run's metadata costs matplotlib's import in the run worker (a fresh
process per run) and the PNG. In the soak on the seeded history (benchmarks/README.md)
that was most of a run: the accounting step spent 30-43 s of its 35-66 s drawing its
per-day plots, ``waste_step`` 14 of 15 s, a GPU run 21-23 s of 45-56 s, under a 2-CPU
host's load, once per landing. A centre landing all day needs the tables current, not a
plot per landing.

So, with ``$JOULEHOUSE_PLOT_EVERY_S`` > 0 (default 0: every run draws, as a site landing
now and then wants), a step draws a plot only when the asset's latest materialization
carries no plot of that name drawn within that many seconds (its ``<name>_drawn_at``);
otherwise:

- a plot of the whole table (``carry``: the accounting per day, the waste per week) is
  carried over from that materialization, with when it was drawn, so the asset's page
  always shows one, at most that old;
- a plot of the run's own rows (GPU benchmarks recomputed, PowerAPI streams,
  ClusterCockpit's days the run landed) is left out, and ``<name>_drawn_at`` says when
  the last was drawn.

Read when a step runs (``dg.DagsterInstance.get_latest_materialization_event``: one query of
the instance's event log per plot).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import dagster as dg

PLOT_EVERY_ENV = "JOULEHOUSE_PLOT_EVERY_S"


def plot_every_s() -> float:
    """The least seconds between two drawings of one plot of one asset (0: every run);
    raises ValueError naming the variable when it holds no number >= 0."""
    value = os.environ.get(PLOT_EVERY_ENV, "").strip()
    try:
        seconds = float(value) if value else 0.0
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also NaN
        raise ValueError(f"{PLOT_EVERY_ENV} must be a number of seconds >= 0, not {value!r}")
    return seconds


def drawn_at_key(name: str) -> str:
    """The metadata key of when plot ``name`` was drawn."""
    return f"{name}_drawn_at"


def plot_metadata(context: dg.AssetExecutionContext, asset_key: dg.AssetKey, name: str,
                  draw: Callable[[], str], *, carry: bool) -> dict[str, dg.MetadataValue]:
    """The metadata of plot ``name`` of ``asset_key`` (Markdown from ``draw()``) and when it
    was drawn: drawn now, or, within ``plot_every_s()`` of the last drawing recorded on the
    asset's latest materialization, that one carried over (``carry``) or left out."""
    every, now = plot_every_s(), time.time()
    if every > 0:
        latest = context.instance.get_latest_materialization_event(asset_key)
        materialization = latest.asset_materialization if latest is not None else None
        metadata = materialization.metadata if materialization is not None else {}
        drawn = metadata.get(drawn_at_key(name))
        if isinstance(drawn, dg.TimestampMetadataValue) and 0 <= now - drawn.value < every:
            carried = {name: metadata[name]} if carry and name in metadata else {}
            return {**carried, drawn_at_key(name): drawn}
    return {name: dg.MetadataValue.md(draw()),
            drawn_at_key(name): dg.MetadataValue.timestamp(now)}
