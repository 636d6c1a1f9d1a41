"""Carbon per fact against a time-varying intensity: exact, split at changes, gaps reported."""

import numpy as np
import pandas as pd
import pytest

from joulehouse.accounting import carbon, entities, generator, intensity, rollups
from tests.accounting.facts import facts_of

LCA = intensity.EM_BASES["lca"][0]


def series(tmp_path, zone, start, end, step="1h", **cycle):
    frame = generator.electricity_maps_frame(zone, zone, start, end, step=step, **cycle)
    return frame, generator.write_csv(frame, tmp_path / f"{zone}_{step}.csv")


def test_generated_facts_exact_to_a_thousandth(tmp_path):
    frame, path = series(tmp_path, "DE", "2022-03-01", "2022-03-08")
    table = intensity.read_folder(tmp_path)
    facts = entities.attribute(generator.facts(300, "2022-03-01", "6D", seed=3))
    result = carbon.carbon_per_fact(facts, table, carbon.CarbonSettings(zones={"*": "DE"},
                                                                        pue=1.3))
    # Independently: per fact, sum over each hour of power x overlap x that hour's value.
    hours = pd.to_datetime(frame["Datetime (UTC)"], utc=True)
    values = frame[LCA].to_numpy()
    expected = []
    for row in facts.itertuples():
        power = row.energy_j / row.duration_s
        total = 0.0
        for hour, value in zip(hours, values, strict=True):
            overlap = (min(row.window_end, hour + pd.Timedelta("1h"))
                       - max(row.window_start, hour)).total_seconds()
            total += max(overlap, 0.0) * power * 1.3 * value / 3.6e6
        expected.append(total)
    np.testing.assert_allclose(result["co2_g"], expected, rtol=1e-3)
    assert result["missing"].eq("").all() and result["zone"].eq("DE").all()
    assert result["pue"].eq(1.3).all() and result["intensity_kind"].eq("series").all()
    assert result["intensity_files"].eq(path.name).all()


def test_fact_across_an_intensity_change_is_split_at_it(tmp_path):
    frame = pd.DataFrame({"Datetime (UTC)": ["2022-01-01 00:00:00", "2022-01-01 01:00:00"],
                          "Zone Id": "DE", LCA: [100.0, 400.0]})
    generator.write_csv(frame, tmp_path / "de.csv")
    facts = facts_of(("c/1/1", "2022-01-01 00:30", "2022-01-01 02:00", 5.4e6))  # 1 kW, 1.5 h
    row = carbon.carbon_per_fact(facts, intensity.read_folder(tmp_path),
                                 carbon.CarbonSettings(zones={"clustercockpit": "DE"})).iloc[0]
    # 0.5 kWh at 100 g/kWh, then 1 kWh at 400 g/kWh.
    assert row["co2_g"] == pytest.approx(50.0 + 400.0)
    assert row["intensity_g_per_kwh"] == pytest.approx(450.0 / 1.5)


def test_missing_window_is_reported_not_filled_unless_yearly_fallback_is_configured(tmp_path):
    series(tmp_path, "DE", "2022-01-01", "2022-01-02")
    generator.write_csv(generator.owid_frame({("Germany", "DEU"): {2022: 385.0}}),
                        tmp_path / "owid.csv")
    table = intensity.read_folder(tmp_path)
    facts = facts_of(("c/1/1", "2022-01-01 12:00", "2022-01-01 13:00", 3.6e6),
                     ("c/2/1", "2022-01-01 23:30", "2022-01-02 00:30", 3.6e6),
                     ("c/3/1", "2022-01-05 10:00", "2022-01-05 11:00", 3.6e6))
    strict = carbon.carbon_per_fact(facts, table, carbon.CarbonSettings(zones={"*": "DE"}))
    assert strict["co2_g"].notna().tolist() == [True, False, False]
    missing = carbon.missing_carbon(strict)
    assert missing["entity"].tolist() == ["c/2/1", "c/3/1"]
    assert missing["missing"].tolist() == [
        "DE (lca) intensity does not cover 2022-01-02T00:00:00+00:00..2022-01-02T00:30:00+00:00",
        "DE (lca) intensity does not cover 2022-01-05T10:00:00+00:00..2022-01-05T11:00:00+00:00"]
    filled = carbon.carbon_per_fact(facts, table, carbon.CarbonSettings(
        zones={"*": "DE"}, yearly_fallback={"DE": "DEU"}))
    assert filled["intensity_kind"].tolist() == ["series", "series+yearly", "yearly"]
    assert filled["co2_g"].iloc[2] == pytest.approx(385.0)
    last_hour = generator.cycle(pd.DatetimeIndex([pd.Timestamp("2022-01-01 23:00")]), 350, 100)
    assert filled["co2_g"].iloc[1] == pytest.approx(0.5 * round(last_hour[0], 2) + 0.5 * 385.0)
    assert filled["intensity_files"].iloc[1] == "DE_1h.csv;owid.csv"


def test_fact_without_a_zone_is_reported():
    facts = facts_of(("c/1/1", "2022-01-01 12:00", "2022-01-01 13:00", 3.6e6))
    empty = intensity.read_folder("/nonexistent-folder")
    row = carbon.carbon_per_fact(facts, empty, carbon.CarbonSettings(zones={"geopm": "DE"})).iloc[0]
    assert np.isnan(row["co2_g"]) and row["zone"] == ""
    assert row["missing"] == "no zone configured for clustercockpit/c"


def test_daily_rollup_with_carbon_splits_a_fact_across_midnight(tmp_path):
    frame = pd.DataFrame({"Datetime (UTC)": ["2022-01-01 23:00:00", "2022-01-02 00:00:00"],
                          "Zone Id": "DE", LCA: [200.0, 300.0]})
    generator.write_csv(frame, tmp_path / "de.csv")
    facts = facts_of(("c/1/1", "2022-01-01 23:00", "2022-01-02 01:00", 7.2e6))  # 1 kW, 2 h
    pieces = rollups.day_pieces(facts, "UTC")
    pieces["co2_g"] = carbon.integrate(pieces, intensity.read_folder(tmp_path),
                                       carbon.CarbonSettings(zones={"*": "DE"}))["co2_g"]
    day = rollups.daily(pieces)
    assert day["energy_kwh"].tolist() == pytest.approx([1.0, 1.0])
    assert day["co2_g"].tolist() == pytest.approx([200.0, 300.0])
