"""What the soak's landers write without a stack (``benchmarks/soak_landers.py``): a seeded
history's start times, and intensity and tariff files that carry on from a kept history's
without overlap or gap, as the accounting reads them."""

from __future__ import annotations

import pandas as pd
from soak_landers import AccountingLander, history_starts, utc_now

from joulehouse.accounting import intensity, tariff

DAY, HOUR = pd.Timedelta(days=1), pd.Timedelta(hours=1)
ZONE = "Europe/Berlin"  # the tariff files' (soak_landers: write_tariff's default)


def test_a_history_spreads_its_starts_evenly_over_the_days_before_today():
    today = pd.Timestamp(utc_now()).normalize()
    assert [pd.Timestamp(start) - today for start in history_starts(4, 2)] == [
        -42 * HOUR, -30 * HOUR, -18 * HOUR, -6 * HOUR]


def _covered(table: pd.DataFrame, by: str) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """The intervals of ``table`` merged where they touch, per ``by`` value."""
    merged: list[list[pd.Timestamp]] = []
    for start, end in table.sort_values("interval_start")[["interval_start",
                                                           "interval_end"]].itertuples(
            index=False):
        if merged and merged[-1][1] == start:
            merged[-1][1] = end
        else:
            merged.append([start, end])
    assert table[by].nunique() == 1
    return [tuple(pair) for pair in merged]


def test_a_later_run_lands_intensity_and_tariffs_from_where_a_kept_history_ends(tmp_path):
    folders = tmp_path / "intensity", tmp_path / "tariffs"
    for folder in folders:
        folder.mkdir()
    kept = AccountingLander(*folders, 1.0, utc_now_day() - 4 * DAY, "history")
    assert len(kept.land()) == 2  # the history's days to tomorrow
    later = AccountingLander(*folders, 1.0, kept.tomorrow, "soak")
    later.tomorrow = kept.tomorrow + 2 * DAY  # the run two days after the history was made
    assert [row.source for row in later.land()] == ["intensity", "tariffs"]
    assert [row.source for row in later.land()] == ["intensity", "tariffs"]  # 2 hours on

    hours = intensity.read_folder(folders[0])  # raises on two files overlapping
    for basis in ("lca", "direct"):
        assert _covered(hours[hours["basis"] == basis], "zone") == [
            (kept.covers_from, later.tomorrow + 2 * HOUR)]
    days = tariff.read_folder(folders[1])  # valid on local dates of the site's zone
    assert [(start.tz_convert(ZONE).date(), end.tz_convert(ZONE).date())
            for start, end in _covered(days, "site")] == [
        (kept.covers_from.date(), (later.tomorrow + DAY).date())]


def test_a_run_on_the_day_a_history_was_kept_lands_nothing_before_tomorrow(tmp_path):
    folders = tmp_path / "intensity", tmp_path / "tariffs"
    same_day = AccountingLander(*folders, 1.0, utc_now_day() + DAY, "soak")
    assert same_day.land() == []
    assert not folders[0].exists() or not any(folders[0].iterdir())
    landed = same_day.land()
    assert [row.entry.rsplit("/", 1)[-1] for row in landed] == [
        "DE_soak-0001.csv", "hpc-centre-soak-0001.csv"]


def utc_now_day() -> pd.Timestamp:
    return pd.Timestamp(utc_now()).normalize()
