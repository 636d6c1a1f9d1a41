"""Cost per fact against a time-of-use tariff: exact, split at band changes, gaps reported."""

import hashlib

import numpy as np
import pandas as pd
import pytest

from joulehouse.accounting import accounts, carbon, cost, entities, generator, intensity, tariff
from joulehouse.errors import InputError
from tests.accounting.facts import facts_of

#: Weekdays 07:00-20:00 local 0.30, the rest of a weekday 0.10, weekends 0.05 (EUR/kWh).
BANDS = [("Mon-Fri", "00:00", "07:00", 0.10), ("Mon-Fri", "07:00", "20:00", 0.30),
         ("Mon-Fri", "20:00", "24:00", 0.10), ('"Sat,Sun"', "00:00", "24:00", 0.05)]


def write_tariff(folder, name="site-a.csv", site="site-a", valid=("2024-01-01", "2024-05-01"),
                 bands=BANDS, zone="Europe/Berlin", currency="EUR"):
    return generator.write_tariff(folder / name, site, valid, bands, zone=zone,
                                  currency=currency)


def price_at(local: pd.Timestamp) -> float:
    """The test tariff's price at a local time, written independently of the reader."""
    if local.weekday() >= 5:
        return 0.05
    return 0.30 if 7 <= local.hour < 20 else 0.10


def test_fact_across_a_band_change_is_split_at_it_in_local_time(tmp_path):
    path = write_tariff(tmp_path)
    # Monday 2024-01-15 05:30-06:30 UTC = 06:30-07:30 in Berlin (UTC+1): 1 kW over 1 h.
    facts = facts_of(("c/1/1", "2024-01-15 05:30", "2024-01-15 06:30", 3.6e6))
    row = cost.cost_per_fact(facts, tariff.read_folder(tmp_path),
                             cost.CostSettings(sites={"*": "site-a"}, pue=1.2)).iloc[0]
    # 0.5 kWh off-peak at 0.10, 0.5 kWh peak at 0.30, times the PUE.
    assert row["cost"] == pytest.approx((0.05 + 0.15) * 1.2)
    assert row["price_per_kwh"] == pytest.approx(0.20)
    assert (row["currency"], row["site"], row["missing"]) == ("EUR", "site-a", "")
    assert row["tariff_files"] == path.name
    assert row["tariff_digests"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_generated_facts_exact_to_a_thousandth(tmp_path):
    write_tariff(tmp_path)
    facts = entities.attribute(generator.facts(200, "2024-03-25", "10D", seed=5))
    result = cost.cost_per_fact(facts, tariff.read_folder(tmp_path),
                                cost.CostSettings(sites={"*": "site-a"}, pue=1.1))
    # Independently: the bands change on whole local hours and Berlin is a whole number of
    # hours from UTC (the DST change of 2024-03-31 included), so the price is constant in
    # every UTC hour: sum power x overlap x the price of that hour.
    expected = []
    for row in facts.itertuples():
        power = row.energy_j / row.duration_s
        total = 0.0
        for hour in pd.date_range(row.window_start.floor("h"), row.window_end, freq="h"):
            overlap = (min(row.window_end, hour + pd.Timedelta("1h"))
                       - max(row.window_start, hour)).total_seconds()
            total += max(overlap, 0.0) * power * 1.1 * price_at(
                hour.tz_convert("Europe/Berlin")) / 3.6e6
        expected.append(total)
    np.testing.assert_allclose(result["cost"], expected, rtol=1e-3)
    assert result["missing"].eq("").all() and result["currency"].eq("EUR").all()


def test_a_weekend_band_follows_daylight_saving(tmp_path):
    write_tariff(tmp_path)
    table = tariff.read_folder(tmp_path)
    sunday = table[table["interval_start"] == pd.Timestamp("2024-03-30 23:00", tz="UTC")]
    assert (sunday["interval_end"] - sunday["interval_start"]).tolist() == [pd.Timedelta("23h")]
    # Saturday 00:00 local to Monday 00:00 local (47 h): wholly at the weekend price.
    facts = facts_of(("c/1/1", "2024-03-29 23:00", "2024-03-31 22:00", 47 * 3.6e6))
    row = cost.cost_per_fact(facts, table, cost.CostSettings(sites={"*": "site-a"})).iloc[0]
    assert row["cost"] == pytest.approx(47 * 0.05)


def test_uncovered_window_and_unconfigured_site_get_no_cost_and_are_reported(tmp_path):
    write_tariff(tmp_path, bands=BANDS[:2])  # no weekday evening band: a hole every day
    facts = facts_of(("c/1/1", "2024-01-15 10:00", "2024-01-15 11:00", 3.6e6),
                     ("c/2/1", "2024-01-15 18:30", "2024-01-15 19:30", 3.6e6),
                     ("c/3/1", "2024-06-03 10:00", "2024-06-03 11:00", 3.6e6))
    facts = pd.concat([facts, facts_of(("g/x/1", "2024-01-15 10:00", "2024-01-15 11:00",
                                        3.6e6), source="geopm")], ignore_index=True)
    table = cost.cost_per_fact(facts, tariff.read_folder(tmp_path),
                               cost.CostSettings(sites={"clustercockpit": "site-a"}))
    assert table["cost"].iloc[0] == pytest.approx(0.30)
    missing = cost.missing_cost(table)
    assert missing["entity"].tolist() == ["c/2/1", "c/3/1", "g/x/1"]
    assert missing["missing"].tolist() == [
        "site site-a's tariff does not cover 2024-01-15T19:00:00+00:00..2024-01-15T19:30:00+00:00",
        "site site-a's tariff does not cover 2024-06-03T10:00:00+00:00..2024-06-03T11:00:00+00:00",
        "no tariff site configured for geopm/g"]
    assert table["currency"].tolist() == ["EUR", "EUR", "EUR", ""]


@pytest.mark.parametrize(("bands", "line", "field", "says"), [
    ([("Mon-Fri", "00:00", "08:00", 0.1), ("Mon-Fri", "07:00", "20:00", 0.3)], 3, None,
     "overlaps that of line 2"),
    ([("Mon-Fry", "00:00", "08:00", 0.1)], 2, "weekdays", "not weekdays"),
    ([("*", "20:00", "07:00", 0.1)], 2, "end", "over midnight is two rows"),
    ([("*", "00:00", "24:00", "cheap")], 2, "price_per_kwh", "cheap"),
])
def test_bad_band_names_file_line_and_field(tmp_path, bands, line, field, says):
    path = write_tariff(tmp_path, bands=bands)
    with pytest.raises(InputError) as caught:
        tariff.read_folder(tmp_path)
    assert (caught.value.path, caught.value.line, caught.value.field) == (str(path), line, field)
    assert says in str(caught.value)


def test_two_files_overlapping_or_in_two_currencies_are_an_error_naming_both(tmp_path):
    write_tariff(tmp_path / "a")
    write_tariff(tmp_path / "a", name="site-b.csv", valid=("2024-04-01", "2024-06-01"))
    with pytest.raises(InputError, match="overlaps site-a.csv"):
        tariff.read_folder(tmp_path / "a")
    write_tariff(tmp_path / "b")
    write_tariff(tmp_path / "b", name="later.csv", valid=("2024-05-01", "2024-06-01"),
                 currency="CHF")
    with pytest.raises(InputError, match="priced in EUR and CHF"):
        tariff.read_folder(tmp_path / "b")


def test_daily_cost_sums_the_facts_and_marks_a_day_with_unpriced_energy(tmp_path):
    write_tariff(tmp_path / "tariffs", valid=("2024-01-01", "2024-01-16"))
    generator.write_csv(generator.electricity_maps_frame("DE", "DE", "2024-01-01",
                                                         "2024-02-01"), tmp_path / "i/de.csv")
    # One fact inside the tariff, one across its end at midnight Berlin (23:00 UTC).
    facts = facts_of(("c/1/1", "2024-01-15 05:30", "2024-01-15 06:30", 3.6e6),
                     ("c/2/1", "2024-01-15 22:00", "2024-01-16 00:00", 7.2e6))
    result = accounts.account(facts, intensity.read_folder(tmp_path / "i"),
                              carbon.CarbonSettings(zones={"*": "DE"}), "Europe/Berlin",
                              tariffs=tariff.read_folder(tmp_path / "tariffs"),
                              cost_settings=cost.CostSettings(sites={"*": "site-a"}))
    assert result.cost["cost"].iloc[0] == pytest.approx(0.20)
    assert np.isnan(result.cost["cost"].iloc[1])
    local = result.daily[result.daily["calendar"] == "Europe/Berlin"].set_index("day")
    # Berlin's 2024-01-15: the first fact and 22:00-23:00 UTC of the second (0.10/kWh).
    assert local.loc["2024-01-15", "cost"] == pytest.approx(0.20 + 0.10)
    assert local.loc["2024-01-15", "currency"] == "EUR"
    assert np.isnan(local.loc["2024-01-16", "cost"])
    assert local.loc["2024-01-16", "energy_without_tariff_j"] == pytest.approx(3.6e6)
    # In UTC the second fact is one piece, partly unpriced: all of it is without a price.
    utc = result.daily[result.daily["calendar"] == "UTC"].set_index("day")
    assert np.isnan(utc.loc["2024-01-15", "cost"])
    assert utc.loc["2024-01-15", "energy_without_tariff_j"] == pytest.approx(7.2e6)
    assert result.unpriced["entity"].tolist() == ["c/2/1"]


def test_bundled_tariff_covers_the_bundled_examples_years():
    table = tariff.read_folder("examples/tariffs")
    assert table["site"].unique().tolist() == ["hpc-centre"]
    assert table["interval_start"].min() == pd.Timestamp("2018-12-31 23:00", tz="UTC")
    assert table["interval_end"].max() == pd.Timestamp("2023-12-31 23:00", tz="UTC")
    # Contiguous: every interval ends where the next begins.
    assert (table["interval_start"].iloc[1:].to_numpy()
            == table["interval_end"].iloc[:-1].to_numpy()).all()


def test_a_file_that_is_not_a_tariff_is_an_error_naming_it(tmp_path):
    (tmp_path / "prices.csv").write_text("site,price\nsite-a,0.3\n")
    with pytest.raises(InputError, match=r"prices.csv:1: not a tariff: no column\(s\)") as caught:
        tariff.read_folder(tmp_path)
    assert caught.value.line == 1


def test_two_sites_of_one_currency(tmp_path):
    write_tariff(tmp_path)
    write_tariff(tmp_path, name="site-b.csv", site="site-b", bands=[("*", "00:00", "24:00", 0.2)])
    facts = facts_of(("c/1/1", "2024-01-15 05:30", "2024-01-15 06:30", 3.6e6),
                     ("d/1/1", "2024-01-15 05:30", "2024-01-15 06:30", 3.6e6))
    table = cost.cost_per_fact(facts, tariff.read_folder(tmp_path), cost.CostSettings(
        sites={"clustercockpit/c": "site-a", "clustercockpit/d": "site-b"}))
    assert table["site"].tolist() == ["site-a", "site-b"]
    assert table["currency"].tolist() == ["EUR", "EUR"]
    assert table["cost"].tolist() == pytest.approx([0.05 + 0.15, 0.2])
