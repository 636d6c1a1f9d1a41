"""A step's plots drawn at most once per ``$JOULEHOUSE_PLOT_EVERY_S`` (``assets/plot_cadence.py``):
carried over from the asset's latest materialization, or left out, in between; through
Dagster's own instance and materializations."""

from __future__ import annotations

import time

import dagster as dg
import pytest

from assets import plot_cadence
from assets.geopm import REGION_PLOT, geopm_host_energy
from assets.plot_cadence import PLOT_EVERY_ENV, drawn_at_key, plot_every_s, plot_metadata
from tests.dagster.conftest import settle
from tests.dagster.test_geopm_assets import DAYS, Pipeline, _land, _latest

DRAWN: list[int] = []


def _draw() -> str:
    DRAWN.append(1)
    return f"plot {len(DRAWN)}"


def _asset(carry: bool) -> dg.AssetsDefinition:
    @dg.asset(name="plotted")
    def plotted(context) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata=plot_metadata(
            context, dg.AssetKey("plotted"), "per_day", _draw, carry=carry))

    return plotted


def _materialize(instance: dg.DagsterInstance, carry: bool) -> dict:
    assert dg.materialize([_asset(carry)], instance=instance).success
    event = instance.get_latest_materialization_event(dg.AssetKey("plotted"))
    return event.asset_materialization.metadata


@pytest.fixture(autouse=True)
def _drawn():
    DRAWN.clear()


@pytest.mark.parametrize("carry", [True, False])
def test_without_a_cadence_every_run_draws(monkeypatch, carry):
    monkeypatch.delenv(PLOT_EVERY_ENV, raising=False)
    with dg.instance_for_test() as instance:
        shown = [_materialize(instance, carry)["per_day"].value for _ in range(3)]
    assert shown == ["plot 1", "plot 2", "plot 3"]


def test_within_the_cadence_a_table_plot_is_carried_over_then_drawn_again(monkeypatch):
    monkeypatch.setenv(PLOT_EVERY_ENV, "600")
    now = [1_000_000.0]
    monkeypatch.setattr(plot_cadence.time, "time", lambda: now[0])
    with dg.instance_for_test() as instance:
        first = _materialize(instance, carry=True)
        now[0] += 599
        second = _materialize(instance, carry=True)
        now[0] += 1
        third = _materialize(instance, carry=True)
    assert len(DRAWN) == 2
    assert (first["per_day"].value, first[drawn_at_key("per_day")].value) == (
        "plot 1", 1_000_000.0)
    assert second["per_day"].value == "plot 1"  # carried, with when it was drawn
    assert second[drawn_at_key("per_day")].value == 1_000_000.0
    assert (third["per_day"].value, third[drawn_at_key("per_day")].value) == (
        "plot 2", 1_000_600.0)


def test_within_the_cadence_a_plot_of_the_runs_rows_is_left_out(monkeypatch):
    monkeypatch.setenv(PLOT_EVERY_ENV, "600")
    now = [1_000_000.0]
    monkeypatch.setattr(plot_cadence.time, "time", lambda: now[0])
    with dg.instance_for_test() as instance:
        _materialize(instance, carry=False)
        now[0] += 300
        second = _materialize(instance, carry=False)
        now[0] += 300
        third = _materialize(instance, carry=False)
    assert "per_day" not in second
    assert second[drawn_at_key("per_day")].value == 1_000_000.0  # the last drawing's
    assert third["per_day"].value == "plot 2"
    assert len(DRAWN) == 2


def test_a_geopm_run_draws_its_days_plots_or_none_deciding_once(monkeypatch, instance,
                                                                 tmp_path):
    """GEOPM's per-day plot of energy per region is of the run's own rows: one decision per
    run, from the asset's latest materialization of any day; within the cadence no day's
    plot is drawn and each day says when the last was; its regions table is always shown."""
    pipeline = Pipeline(instance, _land(tmp_path / "landing"), tmp_path / "warehouse")
    settle()
    [request] = pipeline.tick().run_requests  # both days, the two bundled reports
    monkeypatch.setenv(PLOT_EVERY_ENV, "600")
    clock, ahead = time.time, [0.0]  # the real clock, moved ahead (a frozen one could hang)
    monkeypatch.setattr(plot_cadence.time, "time", lambda: clock() + ahead[0])

    def days_shown() -> dict[str, dict]:
        assert pipeline.launch(request).success
        return {day: _latest(instance, geopm_host_energy.key, day).metadata for day in DAYS}

    before = time.time()
    first = days_shown()
    ahead[0] = 300.0
    second = days_shown()
    ahead[0] = 600.0
    third = days_shown()
    drawn = {day: shown[drawn_at_key(REGION_PLOT)].value for day, shown in first.items()}
    [first_drawn] = set(drawn.values())  # one decision for the run's days
    assert before <= first_drawn
    assert all(REGION_PLOT in shown and "regions" in shown for shown in first.values())
    assert all(REGION_PLOT not in shown and "regions" in shown for shown in second.values())
    assert {day: shown[drawn_at_key(REGION_PLOT)].value for day, shown in second.items()} == (
        drawn)  # the last drawing's
    assert all(REGION_PLOT in shown and "regions" in shown for shown in third.values())
    [third_drawn] = {shown[drawn_at_key(REGION_PLOT)].value for shown in third.values()}
    assert third_drawn >= first_drawn + 600
    assert third[DAYS[0]][REGION_PLOT].value.startswith(
        f"![energy per region of {DAYS[0]}](data:image/png;base64,")


@pytest.mark.parametrize("value, seconds", [("", 0.0), (" 600 ", 600.0), ("0.5", 0.5)])
def test_the_cadence_is_read_from_the_environment(monkeypatch, value, seconds):
    monkeypatch.setenv(PLOT_EVERY_ENV, value)
    assert plot_every_s() == seconds


@pytest.mark.parametrize("value", ["-1", "ten", "nan"])
def test_a_bad_cadence_names_its_variable(monkeypatch, value):
    monkeypatch.setenv(PLOT_EVERY_ENV, value)
    with pytest.raises(ValueError, match=PLOT_EVERY_ENV):
        plot_every_s()
