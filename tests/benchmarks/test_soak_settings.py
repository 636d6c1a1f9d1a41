"""The environment the soak starts its stack with (``benchmarks/soak.py``), without a stack;
its landing cut short; a warehouse's tmpfs too large for the memory refused."""

from __future__ import annotations

import argparse
import os
import time

import pytest
import soak
from soak import Landing, parse_args, sensor_wait, stack_settings
from soak_landers import Landed, Lander

READY = ("JOULEHOUSE_CC_READY_WHEN_COMPLETE", "JOULEHOUSE_GPU_READY_WHEN_COMPLETE")


def test_complete_jobs_and_repetitions_are_handed_out_at_once_unless_told_otherwise(tmp_path):
    settings = stack_settings(parse_args(["--out", str(tmp_path)]))
    assert [settings[name] for name in READY] == ["true", "true"]
    assert settings["JOULEHOUSE_QUIET_PERIOD_S"] == "10"  # still the other sources' wait
    assert settings["JOULEHOUSE_PLOT_EVERY_S"] == "600"  # as deployed
    assert settings["MALLOC_ARENA_MAX"] == "2"  # as deployed
    assert settings["JOULEHOUSE_FOLLOWERS_EVERY_MIN"] == "5"  # the default, as deployed
    waiting = stack_settings(parse_args(["--out", str(tmp_path), "--no-ready-when-complete"]))
    assert [waiting[name] for name in READY] == ["false", "false"]


def test_the_sensor_wait_is_set_against_each_sources_own_median(tmp_path):
    freshness = {"clustercockpit": {"to_facts": {"n": 9, "p50_s": 20.0}},
                 "gpu-benchmark": {"to_facts": {"n": 9, "p50_s": 50.0}},
                 "geopm": {"to_facts": {"n": 9, "p50_s": 30.0}},
                 "powerapi": {"to_facts": {"n": 9, "p50_s": 70.0}},
                 "tau": {"to_facts": {"n": 0}},
                 "all_fact_sources": {"to_facts": {"n": 36, "p50_s": 40.0}}}
    args = parse_args(["--out", str(tmp_path)])  # quiet 10 s, interval 10 s, grown wait 30 s
    sources = sensor_wait({"freshness": freshness}, args)["sources"]
    assert {source: (figures["expected_wait_s"], figures["share_of_median_to_facts"])
            for source, figures in sources.items()} == {
        "clustercockpit": (5.0, 0.25), "gpu-benchmark": (5.0, 0.1),  # the tick alone
        "geopm": (15.0, 0.5), "tau": (15.0, None),  # the quiet period; no median
        "powerapi": (35.0, 0.5)}  # grown_wait_s
    waiting = sensor_wait({"freshness": {"clustercockpit": freshness["clustercockpit"]}},
                          parse_args(["--out", str(tmp_path), "--no-ready-when-complete"]))
    assert waiting["sources"]["clustercockpit"]["expected_wait_s"] == 15.0
    assert list(waiting["sources"]) == ["clustercockpit"]  # only the sources landed


class _Counting(Lander):
    """A lander that writes nothing, one entry every 10 ms, and says when it was closed."""

    source = "counting"
    closed = False

    def write(self, index: int, bad: bool) -> list[Landed]:
        return []

    def close(self) -> None:
        self.closed = True


def test_a_landing_cut_short_stops_its_landers_and_closes_them(tmp_path):
    """The soak stopped by an error mid-landing: its landers' threads end and each closes
    its lander (the GPU collector's process), rather than landing on for the hour."""
    lander = _Counting(tmp_path, rate_per_s=100.0, bad_fraction=0.0)
    landing = Landing([lander], [], time.monotonic() + 3600, [])
    with pytest.raises(RuntimeError), landing.running() as threads:
        deadline = time.monotonic() + 30
        while not lander.count and time.monotonic() < deadline:  # landing, then cut short
            time.sleep(0.01)
        raise RuntimeError("the stack went down")
    assert not threads[0].is_alive() and lander.closed and lander.count >= 1


def test_a_warehouse_tmpfs_the_memory_cannot_hold_beside_the_stack_is_refused_before_mounting(
        tmp_path, monkeypatch):
    """What the warehouse holds (nothing) and --warehouse-mb 4, and the stack's reserve, in
    one MiB less than they need: refused, nothing mounted (no root needed)."""
    monkeypatch.setattr(soak.psutil, "virtual_memory", lambda: argparse.Namespace(
        available=(soak.STACK_RESERVE_MB + 3) * 2**20))
    args = argparse.Namespace(fault=["warehouse-full@60"], warehouse_mb=4, outage_s=0)
    refused = rf"4 MiB .* and the stack {soak.STACK_RESERVE_MB} MiB: more than the " \
              rf"{soak.STACK_RESERVE_MB + 3}"
    with pytest.raises(RuntimeError, match=refused), \
            soak.warehouse_file_system(args, tmp_path / "warehouse", tmp_path):
        pass
    assert not os.path.ismount(tmp_path / "warehouse")
