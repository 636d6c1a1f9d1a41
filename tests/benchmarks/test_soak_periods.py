"""A soak's freshness per period and its runs' waits per job (``benchmarks/soak_periods.py``),
from a ``landed.csv`` and a ``runs.csv`` made here, with known delays."""

from __future__ import annotations

import pandas as pd
from soak_periods import ASSET_JOB, fault_windows, periods, run_phases

T0 = pd.Timestamp("2026-11-30 06:00", tz="UTC")
SECOND = pd.Timedelta(seconds=1)


def _landed(rows: list[tuple[str, str, float, float | None, float | None]]) -> pd.DataFrame:
    """(source, expected, landed at, to the facts, to the accounting), seconds from T0 and
    from landing."""
    return pd.DataFrame([{
        "source": source, "expected": expected, "landed_at": T0 + landed * SECOND,
        "in_facts_at": None if facts is None else T0 + (landed + facts) * SECOND,
        "in_accounting_at": None if accounting is None else T0 + (landed + accounting) * SECOND,
    } for source, expected, landed, facts, accounting in rows]).astype(
        {"in_facts_at": "datetime64[ns, UTC]", "in_accounting_at": "datetime64[ns, UTC]"})


def test_the_delays_are_taken_per_period_of_the_landing_and_over_all_of_it():
    landed = _landed([
        ("clustercockpit", "ok", 0, 10, 20),
        ("geopm", "ok", 30, 30, 60),
        ("clustercockpit", "bad", 40, None, None),  # bad: left out
        ("tau-profiles", "ok", 50, None, None),  # no facts: left out
        ("gpu-benchmark", "ok", 70, 40, None),  # never accounted: left out of that figure
        ("powerapi", "ok", 110, 50, 100),
    ])
    rows = periods(landed, 1)
    assert [(name, count) for name, count, _, _ in rows] == [("0-1", 2), ("1-2", 2),
                                                              ("all", 4)]
    facts, accounting = rows[0][2], rows[0][3]
    assert (facts["n"], facts["p50_s"], facts["max_s"]) == (2, 20.0, 30.0)
    assert (accounting["n"], accounting["p50_s"], accounting["max_s"]) == (2, 40.0, 60.0)
    assert rows[1][3] == {"n": 1, "p50_s": 100.0, "p95_s": 100.0, "p99_s": 100.0,
                          "max_s": 100.0}
    facts, accounting = rows[2][2], rows[2][3]
    assert (facts["n"], facts["p50_s"], accounting["n"], accounting["p50_s"]) == (
        4, 35.0, 3, 60.0)


def test_a_faults_window_holds_the_entries_landed_from_two_minutes_before_to_its_recovery():
    landed = _landed([
        ("clustercockpit", "ok", 0, 10, 20),  # more than 120 s before the fault: out
        ("geopm", "ok", 100, 30, 300),
        ("clustercockpit", "bad", 150, None, None),  # bad: out
        ("powerapi", "ok", 250, 50, 100),
        ("gpu-benchmark", "ok", 330, 40, 50),  # after the recovery: out
        ("clustercockpit", "ok", 400, 40, 60),
    ])
    at = (T0 + 200 * SECOND).isoformat()
    [(name, count, accounting)] = fault_windows(
        landed, [{"name": "postgres-stop", "at": at, "recovery_s": 120}])
    assert (name, count) == (f"postgres-stop@{at}", 2)
    assert (accounting["n"], accounting["max_s"]) == (2, 300.0)
    # never recovered: every entry from 120 s before it to the last one landed
    [(_, count, accounting)] = fault_windows(
        landed, [{"name": "postgres-stop", "at": at, "recovery_s": None}])
    assert (count, accounting["max_s"]) == (4, 300.0)


def test_the_runs_are_taken_per_job_and_the_automations_per_the_steps_they_ran(tmp_path):
    def log(run_id: str, *steps: str) -> None:
        folder = tmp_path / run_id / "compute_logs"
        folder.mkdir(parents=True)
        (folder / "x.err").write_text("".join(
            f'... - {step} - STEP_START - Started execution of step "{step}".\n'
            for step in steps))

    runs = pd.DataFrame([
        ("a", ASSET_JOB, 0, 90, 115), ("b", ASSET_JOB, 10, 110, 140),
        ("c", ASSET_JOB, 20, 25, 30), ("d", "cc_job", 0, 15, 75),
        ("e", "cc_job", 5, None, None),  # never started: left out
        ("f", "cc_job", 10, 20, None),  # not ended: its wait only
    ], columns=["run_id", "job", "created", "started", "ended"])
    for column in ("created", "started", "ended"):
        runs[column] = T0 + runs[column].astype(float) * SECOND
    log("a", "accounting")
    log("b", "accounting")
    log("c", "trust_checks", "fact_quality")
    rows = {name: (count, waited, ran) for name, count, waited, ran in run_phases(runs, tmp_path)}
    assert set(rows) == {f"{ASSET_JOB} accounting", f"{ASSET_JOB} fact_quality+trust_checks",
                         "cc_job"}
    count, waited, ran = rows[f"{ASSET_JOB} accounting"]
    assert (count, waited["p50_s"], ran["p50_s"]) == (2, 95.0, 27.5)
    count, waited, ran = rows["cc_job"]
    assert (count, waited["p50_s"], ran["n"], ran["p50_s"]) == (2, 12.5, 1, 60.0)
    assert {name for name, *_ in run_phases(runs)} == {ASSET_JOB, "cc_job"}
