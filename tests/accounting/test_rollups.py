"""Daily and monthly rollups: split at midnight, local days, methods apart, sums then divide."""

import numpy as np
import pandas as pd
import pytest

from joulehouse.accounting import entities, generator, rollups
from joulehouse.facts import ENERGY_FACTS_COLUMNS


def fact(entity, start, end, energy_j, source="gpu-benchmark", method="counter",
         component="gpu"):
    start, end = pd.Timestamp(start, tz="UTC"), pd.Timestamp(end, tz="UTC")
    return {"source": source, "entity": entity, "component": component, "window_start": start,
            "window_end": end, "duration_s": (end - start).total_seconds(),
            "energy_j": float(energy_j), "method": method}


def frame(*rows):
    return entities.attribute(pd.DataFrame(list(rows), columns=ENERGY_FACTS_COLUMNS))


def daily(facts, zone="UTC"):
    return rollups.daily(rollups.day_pieces(facts, zone))


def monthly(facts, zone="UTC"):
    pieces = rollups.day_pieces(facts, zone)
    return rollups.monthly(rollups.daily(pieces), rollups.month_counts(pieces))


def test_fact_across_midnight_is_split_by_time_between_two_days():
    facts = frame(fact("root/exp/b/r/0", "2021-03-01 23:00", "2021-03-02 02:00", 3000.0))
    table = daily(facts)
    assert table["day"].dt.strftime("%Y-%m-%d").tolist() == ["2021-03-01", "2021-03-02"]
    assert table["energy_j"].tolist() == pytest.approx([1000.0, 2000.0])
    assert table["duration_h"].tolist() == pytest.approx([1.0, 2.0])
    assert table["entities"].tolist() == [1, 1]
    assert table["energy_j"].sum() == pytest.approx(3000.0)


def test_local_day_splits_at_local_midnight():
    # 22:30-23:30 UTC on 1 July is 00:30-01:30 on 2 July in Paris (UTC+2).
    facts = frame(fact("root/exp/b/r/0", "2021-07-01 21:30", "2021-07-01 22:30", 3600.0))
    utc, paris = daily(facts), daily(facts, "Europe/Paris")
    assert utc["day"].dt.strftime("%Y-%m-%d").tolist() == ["2021-07-01"]
    assert paris["day"].dt.strftime("%Y-%m-%d").tolist() == ["2021-07-01", "2021-07-02"]
    assert paris["energy_j"].tolist() == pytest.approx([1800.0, 1800.0])
    assert set(paris["calendar"]) == {"Europe/Paris"}


def test_methods_are_not_summed_and_mean_power_is_energy_over_time():
    facts = frame(
        fact("root/exp/b/r/0", "2021-03-01 10:00", "2021-03-01 11:00", 360_000.0),  # 100 W
        fact("root/exp/b/r/1", "2021-03-01 12:00", "2021-03-01 15:00", 3_240_000.0),  # 300 W
        fact("root/exp/b/r/0", "2021-03-01 10:00", "2021-03-01 11:00", 370_000.0, method="power"),
    )
    table = daily(facts).set_index("method")
    assert table.loc["counter", "energy_j"] == pytest.approx(3_600_000.0)
    assert table.loc["counter", "energy_kwh"] == pytest.approx(1.0)
    assert table.loc["counter", "mean_power_w"] == pytest.approx(3_600_000.0 / (4 * 3600))
    assert table.loc["counter", "entities"] == 2
    assert table.loc["power", "energy_j"] == pytest.approx(370_000.0)
    assert table.loc["counter", "project"] == "exp" and table.loc["counter", "group"] == "root"


def test_monthly_splits_at_month_end_and_counts_distinct_entities():
    facts = frame(fact("root/exp/b/r/0", "2021-01-31 18:00", "2021-02-01 06:00", 1200.0),
                  fact("root/exp/b/r/0", "2021-02-10 00:00", "2021-02-10 01:00", 100.0))
    table = monthly(facts)
    assert table["month"].dt.strftime("%Y-%m").tolist() == ["2021-01", "2021-02"]
    assert table["energy_j"].tolist() == pytest.approx([600.0, 700.0])
    assert table["entities"].tolist() == [1, 1]
    assert table["facts"].tolist() == [1, 2]


def test_attribution_of_each_source_and_cc_jobs():
    facts = pd.DataFrame([
        fact("gpu-data/clock-limit/bert/877MHz/0", "2021-01-01", "2021-01-01 00:01", 1.0),
        fact("geopm/a.report/host1", "2021-01-01", "2021-01-01 00:01", 1.0, source="geopm"),
        fact("sensor1/mongo", "2021-01-01", "2021-01-01 00:01", 1.0, source="powerapi"),
        fact("fritz/1/1675954353", "2021-01-01", "2021-01-01 00:01", 1.0,
             source="clustercockpit"),
        fact("x/y", "2021-01-01", "2021-01-01 00:01", 1.0, source="unknown"),
    ], columns=ENERGY_FACTS_COLUMNS)
    jobs = pd.DataFrame({"job": ["fritz/1/1675954353", "fritz/2/1"], "hpc_user": ["alice", "b"],
                         "project": ["p1", "p2"], "cluster_partition": ["main", None]})
    facts.loc[len(facts)] = {**facts.iloc[3].to_dict(), "entity": "fritz/2/1"}
    table = entities.attribute(facts, jobs).set_index("entity")[entities.ATTRIBUTES]
    assert table.loc["fritz/2/1"].tolist() == ["fritz", "", "b", "p2"]  # no partition: ""
    assert table.loc["gpu-data/clock-limit/bert/877MHz/0"].tolist() == [
        "gpu-data", "", "", "clock-limit"]
    assert table.loc["geopm/a.report/host1"].tolist() == ["geopm", "", "", "a.report"]
    assert table.loc["sensor1/mongo"].tolist() == ["sensor1", "", "", ""]
    assert table.loc["fritz/1/1675954353"].tolist() == ["fritz", "main", "alice", "p1"]
    assert table.loc["x/y"].tolist() == ["", "", "", ""]  # a source not known


def test_monthly_counts_a_fact_across_days_of_one_month_once():
    facts = frame(fact("root/exp/b/r/0", "2021-03-01 18:00", "2021-03-03 06:00", 3600.0),
                  fact("root/exp/b/r/1", "2021-03-02 00:00", "2021-03-02 01:00", 100.0))
    table = monthly(facts)
    assert table[["facts", "entities"]].values.tolist() == [[2, 2]]
    assert table["energy_j"].tolist() == pytest.approx([3700.0])
    days = daily(facts)
    assert days["facts"].tolist() == [1, 2, 1]


@pytest.mark.parametrize("order", ["runs", "sorted", "shuffled"])
def test_distinct_per_group_equals_a_hashed_count(order):
    rng = np.random.default_rng(4)
    ids = np.repeat(rng.integers(0, 300, 2000), rng.integers(1, 4, 2000))  # runs, ids repeat
    group = np.sort(rng.integers(0, 50, len(ids)))
    if order == "sorted":  # each id one run, its groups going back and forth
        ids, group = np.sort(ids), rng.integers(0, 50, len(ids))
    if order == "shuffled":
        at = rng.permutation(len(ids))
        ids, group = ids[at], group[at]
    counts = rollups.distinct_per_group(group, ids, 52)
    expected = pd.Series(ids).groupby(group).nunique().reindex(range(52), fill_value=0)
    assert counts.tolist() == expected.tolist()
    assert rollups.distinct_per_group(np.array([], int), np.array([], int), 3).tolist() == [0] * 3


def test_groups_and_projects_of_several_lengths_and_non_ascii_names():
    facts = pd.DataFrame([
        fact("grüne-daten/exp1/b/r/0", "2021-01-01", "2021-01-01 00:01", 1.0),
        fact("g/e/b/r/0", "2021-01-01", "2021-01-01 00:01", 1.0),
        fact("nofield", "2021-01-01", "2021-01-01 00:01", 1.0),
        fact("/lead/x", "2021-01-01", "2021-01-01 00:01", 1.0),
        fact("cluster-ä/7/1", "2021-01-01", "2021-01-01 00:01", 1.0, source="clustercockpit"),
    ], columns=ENERGY_FACTS_COLUMNS)
    table = entities.attribute(facts)
    assert table["group"].tolist() == ["grüne-daten", "g", "nofield", "", "cluster-ä"]
    assert table["project"].tolist() == ["exp1", "e", "", "lead", ""]
    assert table[entities.ENTITY_ID].tolist() == [0, 1, 2, 3, 4]


def test_a_month_sums_its_days_in_day_order_and_counts_its_members():
    """A month's row from its days read back in any order is the same to the last bit; its
    facts and entities are the distinct ones of its pieces, counted from them or from the
    members alike."""
    facts = entities.attribute(generator.facts(300, "2024-01-20", "20D", seed=2,
                                               sources=("gpu-benchmark", "clustercockpit")))
    pieces = rollups.day_pieces(facts, "Europe/Berlin")
    days, months = rollups.daily(pieces), rollups.members(pieces)
    table = rollups.monthly(days, rollups.counts(months))
    pd.testing.assert_frame_equal(
        rollups.month_counts(pieces).sort_values(rollups.MONTH_KEYS, ignore_index=True),
        rollups.counts(months))
    shuffled = days.sample(frac=1, random_state=1).reset_index(drop=True)
    pd.testing.assert_frame_equal(rollups.monthly(shuffled, rollups.counts(months)), table,
                                  check_exact=True)
    keys = [rollups.MONTH_KEYS[0], *rollups.MONTH_KEYS[2:]]
    month = pieces["day"].dt.to_period("M").dt.start_time.rename("month")
    grouped = pieces.astype({name: str for name in keys}).groupby([*keys, month])
    expected = pd.DataFrame({"facts": grouped[rollups.FACT].nunique(),
                             "entities": grouped[entities.ENTITY_ID].nunique()}).reset_index()
    pd.testing.assert_frame_equal(
        table[rollups.MONTH_KEYS + ["facts", "entities"]].sort_values(rollups.MONTH_KEYS,
                                                                      ignore_index=True),
        expected[rollups.MONTH_KEYS + ["facts", "entities"]].sort_values(
            rollups.MONTH_KEYS, ignore_index=True), check_dtype=False)
    assert table["energy_j"].sum() == pytest.approx(facts["energy_j"].sum(), rel=1e-12)
    assert set(table["month"].dt.strftime("%Y-%m")) == {"2024-01", "2024-02"}
