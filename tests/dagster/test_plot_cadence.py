"""A step's plots drawn at most once per ``$JOULEHOUSE_PLOT_EVERY_S`` (``assets/plot_cadence.py``):
carried over from the asset's latest materialization, or left out, in between; through
Dagster's own instance and materializations."""

from __future__ import annotations

import dagster as dg
import pytest

from assets import plot_cadence
from assets.plot_cadence import PLOT_EVERY_ENV, drawn_at_key, plot_every_s, plot_metadata

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


@pytest.mark.parametrize("value, seconds", [("", 0.0), (" 600 ", 600.0), ("0.5", 0.5)])
def test_the_cadence_is_read_from_the_environment(monkeypatch, value, seconds):
    monkeypatch.setenv(PLOT_EVERY_ENV, value)
    assert plot_every_s() == seconds


@pytest.mark.parametrize("value", ["-1", "ten", "nan"])
def test_a_bad_cadence_names_its_variable(monkeypatch, value):
    monkeypatch.setenv(PLOT_EVERY_ENV, value)
    with pytest.raises(ValueError, match=PLOT_EVERY_ENV):
        plot_every_s()
