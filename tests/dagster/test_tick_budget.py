"""A tick's cap from its time budget, the paced cursor, and large hand-outs written by the
tick itself (sensors/tick_budget.py), on SQLite and PostgreSQL, through the sensors."""

import time

import dagster as dg
import pytest

from assets.gpu import gpu_repetition_days, gpu_repetition_files
from joulehouse.gpu.scan import ScanState
from sensors import tick_budget
from sensors.gpu_repetitions import sensor_name
from sensors.partition_runs import DATA_VERSION_TAG, RETRY_OF_TAG, RUN_KEY_METADATA
from sensors.tick_budget import FIRST_CAP, Pace, Tick, hand_out, paced, unpaced
from tests.dagster.conftest import DAY
from tests.dagster.test_dagster_sensor import ALL_KEYS, Ticker, _cancel, covered


def test_the_cap_fills_the_budget_at_the_measured_pace():
    assert Pace().cap(20, 50_000) == FIRST_CAP and Pace().cap(20, 10) == 10
    assert Pace(0.004).cap(20, 50_000) == 5000
    # the run's creation counts: the tick and the daemon's work after it fill 60 s
    assert Pace(0.001, after_s=0.011).cap(20, 50_000) == 5000
    assert Pace(0.002, after_s=0.001).cap(20, 50_000) == 10_000  # the tick fills 20 s
    assert Pace(0.004).cap(20, 3000) == 3000
    # a landing sensor lists every entry each tick: that time is off the budget
    assert Pace(0.001, fixed_s=15.0).cap(20, 50_000) == 5000
    assert Pace(0.001, fixed_s=40.0).cap(20, 50_000) == 5000  # a quarter of it at least
    assert Pace(30.0).cap(20, 50_000) == 1  # one at least, however slow
    started = time.time() - 2.0
    assert Pace(0.004).after(started, 1000, cut=False) == Pace(0.004)  # not full: kept
    assert Pace(0.004).after(started, 0, cut=True) == Pace(0.004)
    measured = Pace(0.004, after_s=0.01).after(started, 1000, cut=True, now=started + 2.5)
    assert measured.tick_s == pytest.approx(0.0025) and measured.seconds == pytest.approx(2.5)
    assert (measured.after_s, measured.started, measured.handed_out) == (0.01, started, 1000)
    listed = Pace().after(started, 1000, cut=True, fixed_s=1.5, now=started + 2.5)
    assert listed.tick_s == pytest.approx(0.001) and listed.fixed_s == 1.5


def test_the_next_tick_sees_the_daemons_work_after_the_last():
    last = Pace(0.002, after_s=0.01, started=1000.0, seconds=2.0, handed_out=1000)
    # the next tick began 62 s later, past the 30 s interval: the daemon worked 60 s
    assert last.seen_at(1062.0, 30) == Pace(0.002, after_s=0.06, seconds=2.0,
                                            handed_out=1000)
    # it began on time: the work fitted in the interval (35 s at most)
    assert last.seen_at(1030.0, 30).after_s == 0.01
    assert Pace(0.002, 0.06, 1000.0, 2.0, 1000).seen_at(1030.0, 30).after_s == 0.035
    # a day later: the sensor was stopped, nothing learnt
    assert last.seen_at(1000.0 + 86_400, 30) == Pace(0.002, 0.01, None, 2.0, 1000)
    assert Pace(0.002).seen_at(5000.0, 30) == Pace(0.002)


def test_the_pace_travels_in_the_cursor_around_the_sensors_own():
    state = ScanState().to_json()  # base64, the GPU sensor's own cursor
    pace = Pace(0.01, 0.02, 1000.0, 2.0, 200)
    assert unpaced(paced(state, pace)) == (state, pace)
    assert unpaced(paced('{"seen": {}}', Pace())) == ('{"seen": {}}', Pace())
    # cursors written before the pace was kept are the sensor's own, unmeasured
    assert unpaced(state) == (state, Pace())
    assert unpaced('{"seen": {"a/x": "f"}, "sizes": {}}') == (
        '{"seen": {"a/x": "f"}, "sizes": {}}', Pace())
    assert unpaced(None) == (None, Pace())
    # a field this code's Pace does not have (written by other code) is dropped
    renamed = '{"pace": {"tick_s": 0.01, "budget_s": 20}, "state": "s"}'
    assert unpaced(renamed) == ("s", Pace(0.01))


def test_a_tick_keeps_the_pace_when_it_skips_and_the_whole_cursor_when_it_waits():
    cursor = paced("own", Pace(0.004))
    tick = Tick.begin(cursor, 50_000)
    assert (tick.cursor, tick.own, tick.pace, tick.cap) == (cursor, "own", Pace(0.004), 5000)
    assert Tick.begin(None, 10).cap == 10 and Tick.begin(None, 10).own is None
    skipped = tick.skip("new", "nothing ready")
    assert unpaced(skipped.cursor) == ("new", Pace(0.004))
    assert skipped.skip_reason.skip_message == "nothing ready"
    waited = tick.wait("runs in flight")
    assert (waited.cursor, waited.skip_reason.skip_message) == (cursor, "runs in flight")


def _events(keys: list[str]) -> list[dg.AssetMaterialization]:
    return [dg.AssetMaterialization(gpu_repetition_files.key, partition=key,
                                    tags={DATA_VERSION_TAG: f"fp-{key}"},
                                    metadata={RUN_KEY_METADATA: "lab:123"}) for key in keys]


def _assert_handed_out(instance: dg.DagsterInstance, keys: list[str]) -> None:
    assert instance.get_dynamic_partitions(gpu_repetition_days.name) == keys
    materialized = instance.get_materialized_partitions(gpu_repetition_files.key)
    assert materialized == set(keys)
    for key in (keys[0], keys[-1]):
        record = instance.get_latest_data_version_record(
            gpu_repetition_files.key, is_source=False, partition_key=key)
        event = record.asset_materialization
        assert event.tags[DATA_VERSION_TAG] == f"fp-{key}"
        assert event.metadata[RUN_KEY_METADATA].value == "lab:123"


@pytest.mark.parametrize("storage", ["sqlite", "postgres"])
def test_a_large_hand_out_is_registered_and_stored_by_the_tick(storage, request):
    overrides = {}
    if storage == "postgres":
        url = request.getfixturevalue("postgres_url")
        overrides = {"storage": {"postgres": {
            "postgres_url": url.replace("postgresql://", "postgresql+psycopg2://")}}}
    keys = [f"lab/2020-11-16/{i}" for i in range(tick_budget.BULK_AT + 1)]
    with dg.instance_for_test(overrides=overrides) as instance:
        instance.add_dynamic_partitions(gpu_repetition_days.name, keys[:3])  # registered already
        additions = [gpu_repetition_days.build_add_request(keys)]
        assert hand_out(instance, additions, _events(keys)) == ([], [])
        _assert_handed_out(instance, keys)
        # a small hand-out is the daemon's to apply: returned as given, nothing written
        few = _events(["lab/2020-11-17"])
        assert hand_out(instance, [gpu_repetition_days.build_add_request(["lab/2020-11-17"])],
                        few)[1] == few
        assert not instance.has_dynamic_partition(gpu_repetition_days.name, "lab/2020-11-17")


def test_the_gpu_sensor_writes_a_large_first_registration_itself(sensor, instance, source,
                                                                 defs, monkeypatch):
    monkeypatch.setattr(tick_budget, "BULK_AT", 0)
    ticker = Ticker(sensor, instance, source)
    data = ticker()
    assert data.dynamic_partitions_requests == [] and data.asset_events == []
    assert ticker.partitions() == [DAY]
    [request] = data.run_requests
    assert covered(ticker, request) == ALL_KEYS
    event = instance.get_latest_data_version_record(
        gpu_repetition_files.key, is_source=False, partition_key=DAY).asset_materialization
    assert event.metadata[RUN_KEY_METADATA].value == request.run_key
    assert sorted(event.metadata["repetitions"].value) == ALL_KEYS
    assert len(event.tags[DATA_VERSION_TAG]) == 20
    assert ticker().run_requests == []
    # the guarantees hold: a cancelled run's repetitions are asked for again, once
    _cancel(instance, defs, request)
    [again] = ticker().run_requests
    assert again.tags[RETRY_OF_TAG] == request.run_key
    assert covered(ticker, again) == ALL_KEYS
    assert ticker().run_requests == []


def test_a_tick_the_cap_cut_measures_the_pace_and_the_next_fills_the_budget(
        instance, source, warehouse, monkeypatch):
    from definitions import build_definitions

    monkeypatch.setattr(tick_budget, "FIRST_CAP", 4)
    sensor = build_definitions(source, warehouse).resolve_sensor_def(sensor_name("lab"))
    ticker = Ticker(sensor, instance, source)
    first = ticker()
    assert len(covered(ticker, first.run_requests[0])) == 4  # unmeasured: FIRST_CAP
    pace = unpaced(first.cursor)[1]
    assert pace.tick_s > 0 and pace.handed_out == 4
    second = ticker()  # the budget (20 s) at that pace: every one left
    assert len(covered(ticker, second.run_requests[0])) == 2
    assert unpaced(second.cursor)[1].tick_s == pace.tick_s  # not cut: the pace is kept
    assert ticker.partitions() == [DAY]
