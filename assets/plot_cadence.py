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
  ClusterCockpit's days the run landed, GEOPM's energy per region of each day the run
  computed) is left out, and ``<name>_drawn_at`` says when the last was drawn.

Read when a step runs (``dg.DagsterInstance.get_latest_materialization_event``: one query of
the instance's event log per plot; a plot drawn per partition, GEOPM's per day, is decided
once for the step's partitions, from the latest materialization of any: :func:`plot_turn`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

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


@dataclass(frozen=True)
class PlotTurn:
    """Whether a step draws plot ``name`` of an asset: ``last`` is None when it does, with
    ``drawn_at`` now; else ``last`` is the metadata of the asset's latest materialization,
    which records the plot drawn within ``plot_every_s()`` at ``drawn_at`` (its
    ``<name>_drawn_at``, seconds since the epoch)."""

    name: str
    drawn_at: dg.TimestampMetadataValue
    last: Mapping[str, dg.MetadataValue] | None

    def metadata(self, draw: Callable[[], str], *, carry: bool) -> dict[str, dg.MetadataValue]:
        """The plot (Markdown from ``draw()``) and when it was drawn: drawn now, or the last
        drawing carried over (``carry``) or left out."""
        if self.last is None:
            return {self.name: dg.MetadataValue.md(draw()), drawn_at_key(self.name): self.drawn_at}
        carried = {self.name: self.last[self.name]} if carry and self.name in self.last else {}
        return {**carried, drawn_at_key(self.name): self.drawn_at}


def plot_turn(context: dg.AssetExecutionContext, asset_key: dg.AssetKey, name: str
              ) -> PlotTurn:
    """Whether the step draws plot ``name`` of ``asset_key`` now: unless the asset's latest
    materialization (any partition; one query, only with ``plot_every_s()`` > 0) records
    it drawn within ``plot_every_s()``."""
    every, now = plot_every_s(), time.time()
    if every > 0:
        latest = context.instance.get_latest_materialization_event(asset_key)
        materialization = latest.asset_materialization if latest is not None else None
        metadata = materialization.metadata if materialization is not None else {}
        drawn = metadata.get(drawn_at_key(name))
        if isinstance(drawn, dg.TimestampMetadataValue) and 0 <= now - drawn.value < every:
            return PlotTurn(name, drawn, metadata)
    return PlotTurn(name, dg.MetadataValue.timestamp(now), None)


def plot_metadata(context: dg.AssetExecutionContext, asset_key: dg.AssetKey, name: str,
                  draw: Callable[[], str], *, carry: bool) -> dict[str, dg.MetadataValue]:
    """The metadata of plot ``name`` of ``asset_key`` (Markdown from ``draw()``) and when it
    was drawn: drawn now, or, within ``plot_every_s()`` of the last drawing recorded on the
    asset's latest materialization, that one carried over (``carry``) or left out
    (:func:`plot_turn`)."""
    return plot_turn(context, asset_key, name).metadata(draw, carry=carry)
