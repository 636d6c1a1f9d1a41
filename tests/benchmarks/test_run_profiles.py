"""Where a profiled run worker spent its time (``benchmarks/run_profiles.py``), from
collapsed stacks written here as py-spy writes them."""

from __future__ import annotations

from run_profiles import inclusive, steps_of

COMPUTE = "execute (dagster/x.py:1);_yield_compute_results (dagster/_core/compute.py:157)"
STACKS = [
    (f"{COMPUTE};accounting (assets/accounting.py:340);daily_plots (assets/accounting.py:270);"
    "bars_png (joulehouse/plots.py:80) 30"),
    (f"{COMPUTE};accounting (assets/accounting.py:336);update "
    "(joulehouse/accounting/incremental.py:380) 10"),
    ("<module> (definitions.py:5);_find_and_load (<frozen importlib._bootstrap>:1165);"
    "<module> (assets/accounting.py:3);_find_and_load (<frozen importlib._bootstrap>:1165) 8"),
]


def test_frames_are_counted_once_per_stack_whatever_their_line(tmp_path):
    profile = tmp_path / "1.txt"
    profile.write_text("\n".join(STACKS) + "\n")
    frames, total = inclusive(profile)
    assert total == 48
    assert frames["accounting (assets/accounting.py)"] == 40  # two lines, one frame
    assert frames["_find_and_load (<frozen importlib._bootstrap>)"] == 8  # twice in a stack
    assert frames["bars_png (joulehouse/plots.py)"] == 30
    assert steps_of(profile) == ["accounting"]  # not the module imported under definitions
