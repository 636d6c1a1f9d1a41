"""pandera schemas of the PowerAPI frames; units in column names, described per column.

Frames, all with a tz-aware UTC ``timestamp``:

- counters (long form): one row per report, group, socket, cpu and event;
- RAPL energy: J per tick, socket and RAPL domain (one cpu entry per socket);
- power reports: SmartWatts' (or any formula's) power estimates in W;
- windowed energy: measured and estimated J per sensor, target, component
  and window, and the estimate's relative error against the measurement;
- progress: how far each file of a growing entry was read (``stream.py``).
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa

UTC_TIME = pd.DatetimeTZDtype("ns", "UTC")
#: Largest plausible RAPL energy of one socket and tick (J): 5 kW for 10 s.
MAX_RAPL_TICK_J = 50_000.0
#: Largest plausible power of one report (W): a whole node of 10 kW.
MAX_POWER_W = 10_000.0

COUNTERS_COLUMNS = ["timestamp", "sensor", "target", "group", "socket", "cpu", "event", "value"]


def _time(description: str) -> pa.Column:
    return pa.Column(UTC_TIME, nullable=False, description=description)


def _label(description: str, category: bool = False) -> pa.Column:
    return pa.Column("category" if category else str, nullable=False, description=description)


COUNTERS_SCHEMA = pa.DataFrameSchema(
    {
        "timestamp": _time("end of the sensor's tick, UTC"),
        "sensor": _label("sensor name of the report", category=True),
        "target": _label("cgroup (or the machine-level target, 'all' or 'system', for the "
                         "machine) the counters belong to",
                         category=True),
        "group": _label("events group as the sensor is configured (rapl, msr, core, ...)",
                        category=True),
        "socket": pa.Column("int64", pa.Check.ge(0), description="CPU socket id"),
        "cpu": pa.Column("int64", pa.Check.ge(0), description="logical CPU id"),
        "event": _label("hardware event or time_enabled / time_running (ns)", category=True),
        "value": pa.Column(float, pa.Check.in_range(0, 2.0**64, include_max=False),
                           description="raw counter value as reported (count; RAPL in 2^-32 J; "
                                       "time_enabled / time_running in ns)"),
    },
    strict=True,
    ordered=True,
    name="counters",
)

RAPL_SCHEMA = pa.DataFrameSchema(
    {
        "timestamp": _time("end of the tick, UTC"),
        "sensor": _label("sensor name"),
        "target": _label("target of the report (RAPL is machine-wide: the machine-level "
                         "target, 'all' or 'system')"),
        "socket": pa.Column("int64", pa.Check.ge(0), description="CPU socket id"),
        "cpu": pa.Column("int64", pa.Check.ge(0), description="the one cpu read for the socket"),
        "domain": _label("RAPL domain: pkg, dram, psys, pp0, pp1"),
        "energy_j": pa.Column(float, pa.Check.in_range(0, MAX_RAPL_TICK_J),
                              description="energy of the socket and domain over the tick, J "
                                          "(value x 2^-32)"),
    },
    unique=["timestamp", "sensor", "target", "socket", "domain"],
    strict=True,
    ordered=True,
    name="rapl_energy",
)

POWER_SCHEMA = pa.DataFrameSchema(
    {
        "timestamp": _time("end of the tick the power is estimated for, UTC"),
        "sensor": _label("sensor whose reports the formula used"),
        "target": _label("cgroup, 'rapl' (measured), 'global' (modelled total) ..."),
        "power_w": pa.Column(float, pa.Check.in_range(0, MAX_POWER_W),
                             description="estimated (or measured, target 'rapl') power, W"),
        "scope": pa.Column(object, nullable=True, description="cpu or dram; None if not given"),
        "socket": pa.Column("Int64", nullable=True, description="CPU socket id, NA if not given"),
        "formula": pa.Column(object, nullable=True, description="formula id (hash) or event"),
        "ratio": pa.Column(float, nullable=True,
                           description="target's share of the socket's power, 0-1 (NaN if "
                                       "not given)"),
        "metadata": pa.Column(str, description="other metadata as a JSON object text"),
    },
    strict=True,
    ordered=True,
    name="power_reports",
)

WINDOW_ENERGY_COLUMNS = [
    "sensor", "target", "component", "window_start", "window_end", "duration_s", "covered_s",
    "energy_j", "method", "measured_j", "estimated_total_j", "relative_error",
]

WINDOW_ENERGY_SCHEMA = pa.DataFrameSchema(
    {
        "sensor": _label("sensor name"),
        "target": _label("the machine-level target ('all', 'system') for the "
                         "measurement, else the estimated cgroup"),
        "component": _label("cpu (RAPL package), dram, or another RAPL domain"),
        "window_start": pa.Column(UTC_TIME, description="start of the window, or the first "
                                                        "tick start inside it if later, UTC"),
        "window_end": pa.Column(UTC_TIME, description="end of the window, or the last tick end "
                                                      "inside it if earlier, UTC"),
        "duration_s": pa.Column(float, pa.Check.gt(0), description="window_end - window_start, "
                                                                  "s"),
        "covered_s": pa.Column(float, pa.Check.gt(0),
                               description="time of [window_start, window_end] covered by the "
                                           "reports' ticks, s: duration_s unless a gap lies "
                                           "inside (summed sockets: the least covered one's); "
                                           "only fully covered rows become energy_facts"),
        "energy_j": pa.Column(float, pa.Check.ge(0), description="energy over the window, J"),
        "method": pa.Column(str, pa.Check.isin(["measured", "estimated"]),
                            description="measured (RAPL) or estimated (power x tick)"),
        "measured_j": pa.Column(float, pa.Check.ge(0), nullable=True,
                                description="RAPL energy of the sensor and component in the "
                                            "window, J (NaN without one)"),
        "estimated_total_j": pa.Column(float, pa.Check.ge(0), nullable=True,
                                       description="sum of the cgroup estimates in the window, "
                                                   "J (NaN without any)"),
        "relative_error": pa.Column(float, nullable=True,
                                    description="(estimated_total_j - measured_j) / measured_j, "
                                                "a fraction (NaN without both)"),
    },
    checks=[pa.Check(lambda df: df["window_end"] > df["window_start"], name="window_ordered"),
            pa.Check(lambda df: df["covered_s"] <= df["duration_s"], name="covered_within")],
    unique=["sensor", "target", "component", "window_start", "method"],
    strict=True,
    ordered=True,
    name="powerapi_window_energy",
)

PROGRESS_SCHEMA = pa.DataFrameSchema(
    {
        "file": _label("report file of the entry, relative to the entry's landing folder"),
        "read_to_byte": pa.Column("int64", pa.Check.ge(0),
                                  description="byte after the last line end read (a file read "
                                              "whole each time: its size), bytes"),
        "prefix_digest": _label("fingerprint of the bytes read (read_to_byte + tail_bytes): "
                                "their length and their first and last 64 KiB (blake2b)"),
        "line_based": pa.Column("bool", description="whether the file was read as line-based "
                                "(CSV, JSON lines: read on from read_to_byte) or whole"),
        "tail_bytes": pa.Column("int64", pa.Check.ge(0),
                                description="a last report read after read_to_byte without a "
                                            "line end (a quiet file; 0: none), bytes: the file "
                                            "going on without a line end there is read whole "
                                            "again"),
        "generation": pa.Column("int64", pa.Check.ge(0),
                                description="how many times the entry was read whole again "
                                            "(its file cut, rotated or rewritten)"),
        "pieces": pa.Column("int64", pa.Check.ge(1),
                            description="stored pieces of the generation (one per read that "
                                        "found new reports)"),
    },
    unique=["file"],
    strict=True,
    ordered=True,
    name="progress",
)
