"""Energy arithmetic shared by every source: counters and power series.

Units are explicit: times in seconds (float, any common origin), power in W,
energy in J. Invariants, for every function here:

- the window is ``[t0, t1]`` with ``t0 <= t1``; sample times are sorted
  (strictly increasing) and finite;
- a stretch of the window not covered by samples (between two consecutive
  samples, or between a window edge and the first/last sample) is bridged
  only when it lasts at most ``max_gap_s``; a longer stretch contributes no
  energy and is reported in ``gap_count`` / ``gap_s``;
- energies and durations add up over windows, hosts, devices and
  repetitions; mean power is always a total energy divided by a total time,
  never an average of powers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WindowEnergy:
    """Energy of one series over one window.

    ``energy_j``: J over the bridged part of the window; ``gap_count`` /
    ``gap_s``: stretches left out (not bridged) and their total seconds;
    ``counter_resets``: counter decreases inside the window (counters only).
    """

    energy_j: float
    gap_count: int
    gap_s: float
    counter_resets: int = 0


def _window_grid(times_s: np.ndarray, t0: float, t1: float) -> np.ndarray:
    """``t0``, the sample times strictly inside ``(t0, t1)``, and ``t1``."""
    inside = times_s[np.searchsorted(times_s, t0, "right") : np.searchsorted(times_s, t1, "left")]
    return np.concatenate(([t0], inside, [t1]))


def _bridged(times_s: np.ndarray, grid: np.ndarray, max_gap_s: float) -> np.ndarray:
    """For each grid segment: True when the stretch of samples around it is short enough.

    A segment inside ``(times_s[k-1], times_s[k])`` is bridged when that whole
    interval lasts at most ``max_gap_s``; a segment before the first or after
    the last sample when the segment itself does.
    """
    seg = np.diff(grid)
    k = np.searchsorted(times_s, (grid[:-1] + grid[1:]) / 2)
    interior = (k > 0) & (k < len(times_s))
    span = seg.copy()
    span[interior] = times_s[k[interior]] - times_s[k[interior] - 1]
    return span <= max_gap_s


def trapezoid_energy(
    times_s: np.ndarray, power_w: np.ndarray, t0: float, t1: float, max_gap_s: float
) -> WindowEnergy:
    """Trapezoid integral (J) of a power series (W) over ``[t0, t1]``.

    Power at the window edges is interpolated linearly between the
    neighbouring samples (held at the nearest sample outside the coverage),
    so a piecewise-linear power with breakpoints at the samples integrates
    exactly. An empty series yields NaN energy and the whole window as a gap.
    """
    if len(times_s) == 0:
        return WindowEnergy(float("nan"), 1, t1 - t0)
    grid = _window_grid(times_s, t0, t1)
    power = np.interp(grid, times_s, power_w)
    seg = np.diff(grid)
    bridged = _bridged(times_s, grid, max_gap_s)
    energy = float(np.sum(0.5 * (power[:-1] + power[1:]) * seg, where=bridged))
    gaps = seg[~bridged & (seg > 0)]
    return WindowEnergy(energy, len(gaps), float(gaps.sum()))


def unwrap_counter(counter_j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Make a cumulative energy counter (J) monotonic across resets.

    A decrease is a reset (driver reload): the counter restarted from zero,
    so the increment over that interval is the new reading itself (the
    energy between the last reading before and the reset itself is lost).
    Returns the cumulative energy since the first reading and a boolean
    array, one per interval, True where a reset happened.
    """
    steps = np.diff(counter_j)
    resets = steps < 0
    steps[resets] = counter_j[1:][resets]
    return np.concatenate(([0.0], np.cumsum(steps))), resets


def counter_energy(
    times_s: np.ndarray, counter_j: np.ndarray, t0: float, t1: float, max_gap_s: float
) -> WindowEnergy:
    """Energy (J) over ``[t0, t1]`` from a cumulative counter, aware of resets.

    Between readings the counter is interpolated linearly; it keeps counting
    between readings, so only uncovered window edges can be gaps. An edge
    stretch of at most ``max_gap_s`` is extrapolated at the rate of the
    nearest interval; a longer one is left out and reported. Needs two
    readings at least (else NaN, the whole window a gap).
    """
    if len(times_s) < 2:
        return WindowEnergy(float("nan"), 1, t1 - t0)
    cumulative, resets = unwrap_counter(np.asarray(counter_j, dtype="float64"))
    first, last = times_s[0], times_s[-1]
    gap_count, gap_s = 0, 0.0
    start, end = t0, t1
    if first - t0 > max_gap_s:
        gap_count, gap_s, start = gap_count + 1, gap_s + min(first, t1) - t0, min(first, t1)
    if t1 - last > max_gap_s:
        gap_count, gap_s, end = gap_count + 1, gap_s + t1 - max(last, t0), max(last, t0)
    values = _interp_extrapolated(np.array([start, end]), times_s, cumulative)
    window_resets = int(np.count_nonzero(resets & (times_s[1:] > t0) & (times_s[:-1] < t1)))
    return WindowEnergy(float(values[1] - values[0]), gap_count, gap_s, window_resets)


def _interp_extrapolated(x: np.ndarray, xp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """Linear interpolation, extended linearly beyond both ends."""
    y = np.interp(x, xp, fp)
    before, after = x < xp[0], x > xp[-1]
    y[before] = fp[0] + (x[before] - xp[0]) * (fp[1] - fp[0]) / (xp[1] - xp[0])
    y[after] = fp[-1] + (x[after] - xp[-1]) * (fp[-1] - fp[-2]) / (xp[-1] - xp[-2])
    return y
