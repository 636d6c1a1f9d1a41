"""The environment the soak starts its stack with (``benchmarks/soak.py``), without a stack."""

from __future__ import annotations

from soak import parse_args, stack_settings

READY = ("JOULEHOUSE_CC_READY_WHEN_COMPLETE", "JOULEHOUSE_GPU_READY_WHEN_COMPLETE")


def test_complete_jobs_and_repetitions_are_handed_out_at_once_unless_told_otherwise(tmp_path):
    settings = stack_settings(parse_args(["--out", str(tmp_path)]))
    assert [settings[name] for name in READY] == ["true", "true"]
    assert settings["JOULEHOUSE_QUIET_PERIOD_S"] == "10"  # still the other sources' wait
    waiting = stack_settings(parse_args(["--out", str(tmp_path), "--no-ready-when-complete"]))
    assert [waiting[name] for name in READY] == ["false", "false"]
