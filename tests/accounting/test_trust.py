"""Trust rules across methods and sources: pairs, ratios and verdicts on known facts."""

import json

import numpy as np
import pandas as pd
import pytest

from joulehouse.accounting import trust
from joulehouse.facts import ENERGY_FACTS_COLUMNS

T0 = "2024-01-15 10:00"


def fact(source, entity, component, method, energy, start=T0, seconds=3600.0):
    begin = pd.Timestamp(start, tz="UTC")
    return {"source": source, "entity": entity, "component": component,
            "window_start": begin, "window_end": begin + pd.Timedelta(seconds=seconds),
            "duration_s": seconds, "energy_j": float(energy), "method": method}


def frame(*rows):
    return pd.DataFrame(list(rows), columns=ENERGY_FACTS_COLUMNS)


def test_gpu_rules_pair_methods_of_one_repetition_and_window():
    facts = frame(
        fact("gpu-benchmark", "r/e/b/run/0", "gpu", "counter", 1000.0),
        fact("gpu-benchmark", "r/e/b/run/0", "gpu", "power", 1030.0),  # +3%: passes
        fact("gpu-benchmark", "r/e/b/run/0", "external", "external", 990.0),  # below the GPU
        fact("gpu-benchmark", "r/e/b/run/1", "gpu", "counter", 1000.0),
        fact("gpu-benchmark", "r/e/b/run/1", "gpu", "power", 1100.0),  # +10%: fails
        fact("gpu-benchmark", "r/e/b/run/1", "external", "external", 2500.0),
        fact("gpu-benchmark", "r/e/b/run/2", "gpu", "counter", 1000.0))  # nothing to pair
    table = trust.trust_checks(facts)
    rows = table.set_index(["rule", "entity"])
    assert len(table) == 4 and table["version"].eq(1).all()
    assert rows.loc[("gpu_counter_vs_power", "r/e/b/run/0"), "ratio"] == pytest.approx(1.03)
    assert rows.loc[("gpu_counter_vs_power", "r/e/b/run/0"), "passed"]
    assert not rows.loc[("gpu_counter_vs_power", "r/e/b/run/1"), "passed"]
    assert not rows.loc[("external_at_least_gpu", "r/e/b/run/0"), "passed"]
    assert rows.loc[("external_at_least_gpu", "r/e/b/run/1"), "ratio"] == pytest.approx(2.5)
    assert rows.loc[("external_at_least_gpu", "r/e/b/run/1"), "passed"]


def test_smartwatts_estimates_summed_per_sensor_and_window_against_rapl():
    facts = frame(
        fact("powerapi", "s1/all", "cpu", "measured", 100.0),
        fact("powerapi", "s1/a", "cpu", "estimated", 50.0),
        fact("powerapi", "s1/b", "cpu", "estimated", 40.0),
        fact("powerapi", "s1/all", "cpu", "measured", 100.0, start="2024-01-15 11:00"),
        fact("powerapi", "s1/a", "cpu", "estimated", 70.0, start="2024-01-15 11:00"),
        fact("powerapi", "s1/b", "cpu", "estimated", 60.0, start="2024-01-15 11:00"))
    table = trust.trust_checks(facts)
    assert table["entity"].tolist() == ["s1", "s1"]
    np.testing.assert_allclose(table["compared_j"], [90.0, 130.0])
    assert table["passed"].tolist() == [True, False]


def test_geopm_on_a_jobs_host_is_compared_with_the_job_prorated_to_the_report():
    # A 2 h ClusterCockpit job on n1 and n2 at 400 W of CPU; a GEOPM report on both hosts
    # for the middle half hour: 1800 s x 400 W = 720 kJ expected, GEOPM says 700 kJ.
    facts = frame(
        fact("clustercockpit", "c/7/1705312800", "cpu", "power", 400.0 * 7200, seconds=7200),
        fact("geopm", "g/run.report/n1", "cpu", "rapl", 380e3, start="2024-01-15 10:30",
             seconds=1800),
        fact("geopm", "g/run.report/n2", "cpu", "rapl", 320e3, start="2024-01-15 10:30",
             seconds=1800),
        fact("geopm", "g/other.report/n9", "cpu", "rapl", 1e6, start="2024-01-15 10:30",
             seconds=1800))  # not a host of the job
    jobs = pd.DataFrame({"job": ["c/7/1705312800"],
                         "resources": [json.dumps([{"hostname": "n1"}, {"hostname": "n2"}])]})
    table = trust.trust_checks(facts, jobs)
    assert len(table) == 1
    row = table.iloc[0]
    assert (row["rule"], row["entity"]) == ("geopm_vs_clustercockpit", "c/7/1705312800")
    assert row["reference_j"] == pytest.approx(720e3)
    assert row["compared_j"] == pytest.approx(700e3)
    assert row["ratio"] == pytest.approx(700 / 720) and row["passed"]
    assert trust.trust_checks(facts)["rule"].tolist() == []  # no jobs table: no pairs
    # a report on one of the job's two hosts is compared with that host's half of the job
    one_host = facts[facts["entity"] != "g/run.report/n2"]
    row = trust.trust_checks(one_host, jobs).iloc[0]
    assert (row["version"], row["reference_j"], row["compared_j"]) == (2, 360e3, 380e3)
    assert row["passed"]


def test_summary_lists_every_rule_judged_or_not():
    facts = frame(fact("gpu-benchmark", "r/e/b/run/0", "gpu", "counter", 1000.0),
                  fact("gpu-benchmark", "r/e/b/run/0", "gpu", "power", 0.0))
    summary = trust.summary(trust.trust_checks(facts)).set_index("rule")
    assert list(summary.index) == [rule.id for rule in trust.RULES]
    assert summary.loc["gpu_counter_vs_power", ["pairs", "failed"]].tolist() == [1, 1]
    assert summary.loc["smartwatts_vs_rapl", "pairs"] == 0
