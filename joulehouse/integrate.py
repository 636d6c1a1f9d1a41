"""Energy arithmetic shared by every source: counters and power series.

Units are explicit: times in seconds (float, any common origin), power in W,
energy in J. Invariants, for every function here:

- windows are ``[start, end]`` with ``start <= end``; sample times are sorted
  (strictly increasing) and finite; a series needs two samples at least
  (else every window gets NaN energy and is one gap);
- a stretch of a window not covered by samples (between two consecutive
  samples, or between a window edge and the first/last sample) is bridged
  only when it lasts at most ``max_gap_s``; a longer stretch contributes no
  energy and is reported in ``gap_count`` / ``gap_s``;
- energies and durations add up over windows, hosts, devices and
  repetitions; mean power is always a total energy divided by a total time,
  never an average of powers.

Both methods build the cumulative energy at the samples once and read it at
the window edges, so many windows cost O(samples + windows · log samples).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WindowEnergy:
    """Energy of one series over windows, one array element per window.

    ``energy_j``: J over the bridged part of each window; ``gap_count`` /
    ``gap_s``: stretches left out (not bridged) and their total seconds;
    ``counter_resets``: counter decreases inside the window (0 for power).
    """

    energy_j: np.ndarray
    gap_count: np.ndarray
    gap_s: np.ndarray
    counter_resets: np.ndarray


class _Cumulative:
    """A series' cumulative energy at its samples, and its flagged intervals.

    ``bridged``: per interval, whether it is short enough to bridge;
    ``events``: per interval, a flag to count per window (counter resets).
    Flagged intervals are rare, so they are kept as sorted index arrays.
    """

    def __init__(self, times: np.ndarray, dt: np.ndarray, energy: np.ndarray,
                 bridged: np.ndarray, events: np.ndarray) -> None:
        self.times, self.energy, self.bridged = times, energy, bridged
        self.gaps = np.flatnonzero(~bridged)
        self.gap_time = np.concatenate(([0.0], np.cumsum(dt[self.gaps])))
        self.events = np.flatnonzero(events)

    def interval(self, x: np.ndarray) -> np.ndarray:
        """Index k of the interval [times[k], times[k+1]] holding each ``x`` (clipped)."""
        return np.clip(np.searchsorted(self.times, x, "right") - 1, 0, len(self.times) - 2)

    def gap_time_at(self, x: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Seconds of unbridged intervals from the first sample to ``x`` (in interval k)."""
        before = self.gap_time[np.searchsorted(self.gaps, k)]
        return before + np.where(self.bridged[k], 0.0, x - self.times[k])

    def count_in(self, flagged: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """How many intervals listed in ``flagged`` overlap each window."""
        times = self.times
        first = self.interval(starts)
        last = np.clip(np.searchsorted(times, ends, "left") - 1, 0, len(times) - 2)
        inside = (ends > times[0]) & (starts < times[-1]) & (last >= first)
        count = np.searchsorted(flagged, last, "right") - np.searchsorted(flagged, first, "left")
        return np.where(inside, count, 0)


def _per_window(series: _Cumulative, value_at, edge_rates, starts, ends, max_gap_s) -> WindowEnergy:
    """Energy, gaps and events of each window from a cumulative series.

    ``value_at(x, k)``: cumulative energy at ``x`` (in interval k) within the
    coverage; ``edge_rates``: (W before the first sample, W after the last)
    for bridged edges.
    """
    times = series.times
    starts, ends = np.asarray(starts, dtype="float64"), np.asarray(ends, dtype="float64")
    inner = np.clip(np.concatenate((starts, ends)), times[0], times[-1])
    k = series.interval(inner)
    energy_at, gap_at = value_at(inner, k), series.gap_time_at(inner, k)
    count = len(starts)
    lead = np.clip(np.minimum(times[0], ends) - starts, 0, None)
    trail = np.clip(ends - np.maximum(times[-1], starts), 0, None)
    lead_ok, trail_ok = lead <= max_gap_s, trail <= max_gap_s
    energy = (energy_at[count:] - energy_at[:count] + np.where(lead_ok, lead * edge_rates[0], 0)
              + np.where(trail_ok, trail * edge_rates[1], 0))
    gap_s = gap_at[count:] - gap_at[:count] + np.where(lead_ok, 0, lead) + np.where(
        trail_ok, 0, trail)
    gap_count = (series.count_in(series.gaps, starts, ends)
                 + (~lead_ok & (lead > 0)) + (~trail_ok & (trail > 0)))
    resets = series.count_in(series.events, starts, ends)
    return WindowEnergy(energy, gap_count.astype("int64"), gap_s, resets.astype("int64"))


def _missing(starts, ends) -> WindowEnergy:
    """Every window a gap without energy (a series of fewer than two samples)."""
    starts, ends = np.asarray(starts, dtype="float64"), np.asarray(ends, dtype="float64")
    count = len(starts)
    return WindowEnergy(np.full(count, np.nan), np.ones(count, "int64"), ends - starts,
                        np.zeros(count, "int64"))


def trapezoid_energy(
    times_s: np.ndarray, power_w: np.ndarray, starts_s, ends_s, max_gap_s: float
) -> WindowEnergy:
    """Trapezoid integral (J) of a power series (W) over each window.

    Power at a window edge is interpolated linearly between the neighbouring
    samples, so a piecewise-linear power with breakpoints at the samples
    integrates exactly. An uncovered window edge (before the first or after
    the last sample) is bridged with the nearest sample's power.
    """
    if len(times_s) < 2:
        return _missing(starts_s, ends_s)
    dt = np.diff(times_s)
    bridged = dt <= max_gap_s
    energy = np.empty(len(times_s))  # cumulative J at each sample, built in place
    energy[0] = 0.0
    steps = energy[1:]
    np.add(power_w[:-1], power_w[1:], out=steps)
    steps *= dt
    steps *= 0.5
    steps[~bridged] = 0.0
    np.cumsum(steps, out=steps)
    series = _Cumulative(times_s, dt, energy, bridged, np.zeros(len(dt), bool))

    def value_at(x: np.ndarray, k: np.ndarray) -> np.ndarray:
        slope = (power_w[k + 1] - power_w[k]) / dt[k]
        power_x = power_w[k] + slope * (x - times_s[k])
        partial = (x - times_s[k]) * (power_w[k] + power_x) / 2
        return series.energy[k] + np.where(bridged[k], partial, 0.0)

    return _per_window(series, value_at, (power_w[0], power_w[-1]), starts_s, ends_s, max_gap_s)


def unwrap_counter(counter_j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Make a cumulative energy counter (J) monotonic across resets.

    A decrease is a reset (driver reload): the counter restarted from zero,
    so the increment over that interval is the new reading itself (the
    energy between the last reading before and the reset itself is lost;
    at most one polling interval's worth). Returns the cumulative energy
    since the first reading and a boolean array, one per interval, True
    where a reset happened.
    """
    steps = np.diff(counter_j)
    resets = steps < 0
    steps[resets] = counter_j[1:][resets]
    return np.concatenate(([0.0], np.cumsum(steps))), resets


def counter_energy(
    times_s: np.ndarray, counter_j: np.ndarray, starts_s, ends_s, max_gap_s: float
) -> WindowEnergy:
    """Energy (J) over each window from a cumulative counter, aware of resets.

    Between readings the counter is interpolated linearly; it keeps counting
    between readings, so only uncovered window edges can be gaps. A bridged
    edge is extrapolated at the rate of the nearest interval.
    """
    if len(times_s) < 2:
        return _missing(starts_s, ends_s)
    cumulative, resets = unwrap_counter(np.asarray(counter_j, dtype="float64"))
    dt = np.diff(times_s)
    series = _Cumulative(times_s, dt, cumulative, np.ones(len(resets), bool), resets)
    rates = np.diff(cumulative) / dt

    def value_at(x: np.ndarray, k: np.ndarray) -> np.ndarray:
        return cumulative[k] + rates[k] * (x - times_s[k])

    return _per_window(series, value_at, (rates[0], rates[-1]), starts_s, ends_s, max_gap_s)
