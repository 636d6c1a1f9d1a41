"""Energy arithmetic: trapezoid, counters, resets and gaps, with exact expectations."""

import numpy as np
import pytest

from joulehouse.integrate import counter_energy, trapezoid_energy, unwrap_counter


def one(result, field):
    return getattr(result, field)[0]


def test_trapezoid_exact_for_piecewise_linear_power_with_interpolated_edges():
    times = np.array([0.0, 1.0, 2.0, 4.0])
    power = np.array([100.0, 200.0, 200.0, 0.0])
    # [0.5, 3]: 0.5 s from 150 to 200 W, 1 s at 200 W, 1 s from 200 to 100 W
    result = trapezoid_energy(times, power, [0.5], [3.0], max_gap_s=5.0)
    assert one(result, "energy_j") == pytest.approx(0.5 * 175 + 200 + 150)
    assert one(result, "gap_count") == 0 and one(result, "gap_s") == 0


def test_trapezoid_many_windows_at_once():
    times = np.arange(0.0, 11.0)
    power = np.full(11, 10.0)
    result = trapezoid_energy(times, power, [0.0, 2.5, 9.0], [10.0, 3.5, 9.25], 5.0)
    np.testing.assert_allclose(result.energy_j, [100.0, 10.0, 2.5])


def test_long_gap_is_not_bridged_and_is_reported():
    times = np.array([0.0, 1.0, 9.0, 10.0])  # an 8 s hole between 1 and 9
    power = np.full(4, 100.0)
    result = trapezoid_energy(times, power, [0.0, 0.5], [10.0, 5.0], max_gap_s=5.0)
    np.testing.assert_allclose(result.energy_j, [200.0, 50.0])
    np.testing.assert_array_equal(result.gap_count, [1, 1])
    np.testing.assert_allclose(result.gap_s, [8.0, 4.0])


def test_short_gap_is_bridged():
    times = np.array([0.0, 1.0, 4.0, 5.0])
    result = trapezoid_energy(times, np.full(4, 100.0), [0.0], [5.0], max_gap_s=5.0)
    assert one(result, "energy_j") == pytest.approx(500.0)
    assert one(result, "gap_count") == 0


def test_uncovered_window_edges_bridged_when_short_else_gaps():
    times = np.array([10.0, 11.0, 12.0])
    power = np.array([100.0, 100.0, 50.0])
    short = trapezoid_energy(times, power, [9.0], [13.0], max_gap_s=5.0)
    assert one(short, "energy_j") == pytest.approx(100 + 100 + 75 + 50)
    far = trapezoid_energy(times, power, [0.0], [12.0], max_gap_s=5.0)
    assert one(far, "energy_j") == pytest.approx(175.0)
    assert (one(far, "gap_count"), one(far, "gap_s")) == (1, pytest.approx(10.0))


def test_unwrap_counter_counts_resets_and_restarts_from_zero():
    cumulative, resets = unwrap_counter(np.array([1000.0, 1100.0, 30.0, 80.0]))
    np.testing.assert_allclose(cumulative, [0.0, 100.0, 130.0, 180.0])
    np.testing.assert_array_equal(resets, [False, True, False])


def test_counter_delta_interpolates_at_edges_and_reports_resets():
    times = np.array([0.0, 1.0, 2.0, 3.0])
    counter = np.array([5000.0, 5100.0, 40.0, 140.0])  # reset between 1 s and 2 s
    result = counter_energy(times, counter, [0.5, 2.0], [3.0, 3.0], max_gap_s=5.0)
    np.testing.assert_allclose(result.energy_j, [50 + 40 + 100, 100.0])
    np.testing.assert_array_equal(result.counter_resets, [1, 0])
    np.testing.assert_array_equal(result.gap_count, [0, 0])


def test_counter_keeps_counting_over_long_reading_gaps_but_reports_far_edges():
    times = np.array([0.0, 100.0])
    counter = np.array([0.0, 1000.0])
    inside = counter_energy(times, counter, [0.0], [100.0], max_gap_s=5.0)
    assert one(inside, "energy_j") == pytest.approx(1000.0) and one(inside, "gap_count") == 0
    beyond = counter_energy(times, counter, [0.0], [110.0], max_gap_s=5.0)
    assert one(beyond, "energy_j") == pytest.approx(1000.0)
    assert (one(beyond, "gap_count"), one(beyond, "gap_s")) == (1, pytest.approx(10.0))
    near = counter_energy(times, counter, [-2.0], [100.0], max_gap_s=5.0)
    assert one(near, "energy_j") == pytest.approx(1020.0)  # extrapolated at 10 W


def test_too_few_samples_give_nan_and_a_whole_window_gap():
    result = trapezoid_energy(np.array([1.0]), np.array([5.0]), [0.0], [4.0], 5.0)
    assert np.isnan(one(result, "energy_j"))
    assert (one(result, "gap_count"), one(result, "gap_s")) == (1, 4.0)
