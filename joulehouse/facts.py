"""``energy_facts``: the one cross-source table of measured energy.

Every source (GPU benchmarks now; GEOPM, ClusterCockpit, PowerAPI later)
adds rows of the same shape, so energy can be compared and summed across
sources without knowing where it came from:

- ``source``: which source wrote the row, e.g. ``"gpu-benchmark"``,
  ``"geopm"``, ``"clustercockpit"``, ``"powerapi"``.
- ``entity``: what was measured, unique within the source: a GPU
  repetition's partition key (``root/experiment/benchmark/run/repetition``),
  a job id, a host, a process.
- ``component``: the part of the system the energy belongs to: ``"gpu"``,
  ``"cpu"``, ``"dram"``, ``"node"``, ``"external"`` (a meter outside the
  machine) ...
- ``window_start`` / ``window_end``: the measured window, tz-aware UTC;
  ``duration_s`` = their difference in seconds.
- ``energy_j``: energy over the window in J, never a mean power.
- ``method``: how it was measured, e.g. ``"counter"`` (delta of a cumulative
  energy counter), ``"power"`` / ``"samples"`` (integrated power readings),
  ``"external"`` (external meter), ``"rapl"`` ...

Rules for a new source: one row per (entity, component, window, method);
report several methods as several rows rather than picking one; sum energy
over components or devices into separate rows only when the source itself
does not; compute mean power as sum(energy_j) / sum(duration_s), never as an
average of powers. Each source fills whole, non-overlapping windows per
entity (GPU benchmarks: the experiment window of each repetition, so no
phase column is needed). A fact covers its whole window: energy measured
over only part of it (a gap in the readings left unbridged) is no fact.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa

ENERGY_FACTS_COLUMNS = [
    "source",
    "entity",
    "component",
    "window_start",
    "window_end",
    "duration_s",
    "energy_j",
    "method",
]

_UTC = pd.DatetimeTZDtype("ns", "UTC")

ENERGY_FACTS_SCHEMA = pa.DataFrameSchema(
    {
        "source": pa.Column(str, description="Source that wrote the row, e.g. gpu-benchmark."),
        "entity": pa.Column(str, description="What was measured, unique within the source "
                                             "(a repetition's partition key, a job, a host)."),
        "component": pa.Column(str, description="Part of the system: gpu, cpu, dram, node, "
                                                "external ..."),
        "window_start": pa.Column(_UTC, description="Start of the measured window (UTC)."),
        "window_end": pa.Column(_UTC, description="End of the measured window (UTC)."),
        "duration_s": pa.Column(float, pa.Check.ge(0), description="Window length (s)."),
        "energy_j": pa.Column(float, pa.Check.ge(0),
                              description="Energy over the whole window (J), never a mean power."),
        "method": pa.Column(str, description="How it was measured: counter, power, samples, "
                                             "external, rapl ..."),
    },
    checks=pa.Check(lambda df: df["window_end"] >= df["window_start"], name="window_ordered"),
    unique=["source", "entity", "component", "window_start", "window_end", "method"],
    strict=True,
    ordered=True,
    name="energy_facts",
)
