"""What the soak's landers write without a stack (``benchmarks/soak_landers.py``): a seeded
history's start times, intensity and tariff files that carry on from a kept history's
without overlap or gap, as the accounting reads them, and GPU repetitions written by one
collector process per lander, its CPU counted."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
from soak_landers import (
    PROJECT,
    SERVE_COLLECTOR,
    AccountingLander,
    Collector,
    GpuLander,
    collector_cpu_s,
    history_starts,
    utc_now,
)

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


def _collectors() -> list[int]:
    """The ids of this process's collector processes (``serve_collector.py``)."""
    return [child.pid for child in psutil.Process().children()
            if SERVE_COLLECTOR.name in " ".join(child.cmdline())]


def _files(folder: Path) -> set[str]:
    return {path.relative_to(folder).as_posix() for path in folder.rglob("*")
            if path.is_file()}


def test_a_gpu_lander_writes_its_repetitions_in_one_collector_process_its_cpu_counted(
        tmp_path):
    """Two repetitions, the second bad (its power no number), by one collector process,
    each with the files a collector process of its own writes; the process ends with the
    landing, its CPU seconds counted."""
    gpu = tmp_path / "gpu"
    gpu.mkdir()
    lander = GpuLander(gpu, 1.0, 0.5)  # entry 1 bad
    lander.COMMAND_S = 0.5
    before = collector_cpu_s()
    try:
        [good] = lander.land()
        pids = _collectors()
        [bad] = lander.land()
        assert len(pids) == 1 and _collectors() == pids
        during = collector_cpu_s()
    finally:
        lander.close()
    assert _collectors() == [] and before < during <= collector_cpu_s()
    assert (good.expected, bad.expected) == ("ok", "bad")
    assert "not-a-number" in (Path(bad.entry) / "gpu-power.csv").read_text()

    alone = tmp_path / "alone"
    subprocess.run([sys.executable, str(SERVE_COLLECTOR.parent / "run_collector.py"),
                    "collect", "--data-root", str(alone), "--experiment", "soak",
                    "--benchmark", "bench", "--run", "r000000", "--interval", "0.1", "--",
                    "sleep", "0.5"], check=True, cwd=SERVE_COLLECTOR.parent,
                   env={**os.environ, "FAKE_NVML": "{}", "PYTHONPATH": str(PROJECT)})
    expected = _files(alone / "soak" / "bench" / "r000000" / "0")
    assert _files(Path(good.entry)) == _files(Path(bad.entry)) == expected


def test_a_failed_collect_raises_with_its_output_and_a_collector_that_died_is_started_again():
    collector = Collector()
    try:
        with pytest.raises(subprocess.CalledProcessError) as failed:
            collector.run(["collect", "--no-such-option"])
        assert failed.value.returncode == 2 and b"arguments are required" in failed.value.output
        [first] = _collectors()
        used = collector.cpu_s()
        psutil.Process(first).kill()
        while os.waitid(os.P_PID, first, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            time.sleep(0.01)  # until it is gone, every thread of it (not waited for)
        collector.run(["collect", "--help"])  # in a new process
        [second] = _collectors()
        times = psutil.Process(second).cpu_times()  # idle now: its answer is written
        assert second != first
        assert collector.cpu_s() >= used + times.user + times.system  # the first one's kept
    finally:
        collector.close()
