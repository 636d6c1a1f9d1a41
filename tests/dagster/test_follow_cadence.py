"""The followers' cadence (assets/follow_cadence.py): at most one request per tick."""

from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

from assets.accounting import ACCOUNTING_AUTOMATION, DERIVED_AUTOMATION
from assets.follow_cadence import FOLLOWERS_EVERY_ENV, at_most_every, followers_every_min
from assets.taudb import POWERAPI_TRIALS_AUTOMATION

NOON = datetime(2026, 11, 30, 12, tzinfo=UTC)


def test_a_follower_is_asked_for_once_per_tick_whatever_changed_in_between(monkeypatch):
    monkeypatch.setenv(FOLLOWERS_EVERY_ENV, "5")

    @dg.asset
    def facts() -> None:
        pass

    @dg.asset(deps=[facts], automation_condition=at_most_every(ACCOUNTING_AUTOMATION))
    def follower() -> None:
        pass

    defs = dg.Definitions(assets=[facts, follower])
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize([facts, follower], instance=instance).success
    cursor = None
    asked = []
    # (minutes past noon, facts written before the evaluation)
    for minutes, written in ((1, False), (2, True), (3, True), (4, False), (6, False),
                             (7, True), (9, True), (10.5, False), (11, False), (16, False),
                             (17, True)):
        if written:
            instance.report_runless_asset_event(dg.AssetMaterialization(facts.key))
        result = dg.evaluate_automation_conditions(
            defs=defs, instance=instance, cursor=cursor,
            evaluation_time=NOON + timedelta(minutes=minutes))
        cursor = result.cursor
        asked.append(result.get_num_requested(follower.key))
    # three writes before 12:05 ask once, after its tick; two before 12:10 once, after it;
    # the write after 12:15, its tick passed with nothing to ask for, at once
    assert asked == [0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1]


def test_the_cadence_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv(FOLLOWERS_EVERY_ENV, raising=False)
    assert followers_every_min() == 5
    monkeypatch.setenv(FOLLOWERS_EVERY_ENV, "0")
    assert at_most_every(ACCOUNTING_AUTOMATION) is ACCOUNTING_AUTOMATION
    monkeypatch.setenv(FOLLOWERS_EVERY_ENV, "15")
    assert at_most_every(ACCOUNTING_AUTOMATION).get_label() == (
        "inputs changed since last asked, in flight or not, at most every 15 min")
    monkeypatch.setenv(FOLLOWERS_EVERY_ENV, "60")
    assert followers_every_min() == 60
    for wrong in ("7", "61", "-1", "five", "²"):
        monkeypatch.setenv(FOLLOWERS_EVERY_ENV, wrong)
        with pytest.raises(ValueError, match=FOLLOWERS_EVERY_ENV):
            followers_every_min()


def test_the_followers_are_labelled_with_their_cadence():
    """What the UI shows of the followers' conditions (the default cadence at import)."""
    assert DERIVED_AUTOMATION.get_label() == (
        "inputs changed since last asked, in flight or not, at most every 5 min")
    assert POWERAPI_TRIALS_AUTOMATION.get_label() == (
        "eager, once the window table is stored, at most every 5 min")
