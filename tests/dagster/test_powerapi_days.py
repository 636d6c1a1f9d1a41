"""PowerAPI report entries in day partitions (``powerapi_days``): a run processes the entries
handed out alone, a day named by none is read whole, a growing stream stays in its day and
is read on, a bad file keeps its day failed and rechecked until fixed alone, a cancelled
hand-out is asked again once, and the upgrade from one partition per entry hands every
entry out again into its day."""

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from assets.powerapi import (
    REPORT_ENERGY_TABLE,
    VALID_CHECK,
    WINDOW_TABLE,
    PowerapiHandOut,
    powerapi_report_files,
)
from joulehouse import landing as landing_module
from joulehouse.powerapi import layout
from joulehouse.powerapi.landing import report_entry_files
from joulehouse.powerapi.reports import read_reports
from joulehouse.powerapi.stream import ReportStore
from sensors.partition_runs import RETRY_OF_TAG
from tests.dagster.conftest import settle
from tests.dagster.source_runs import FirstRun, Saved, instance_in
from tests.dagster.test_powerapi_assets import (
    DATE,
    EXAMPLES,
    FIXTURE_J,
    VALID,
    Landing,
    _measured,
    frames_of,
)

DAY = f"landing/{DATE}"
OTHER_DAY = "landing/2021-01-14"
POWER, HWPC, BAD = "landing/power.jsonl", "landing/hwpc.jsonl", "landing/broken.jsonl"
#: The growing stream's quiet period (s): longer than a tick on a loaded machine takes.
STREAM_QUIET_S = 5.0

#: Plots drawn as deployed (tests/dagster/conftest.py): no test here looks at a plot.
pytestmark = pytest.mark.usefixtures("plots_as_deployed")


def _folder(parent: Path) -> Path:
    """A landing folder ``parent / "landing"`` holding the bundled fixture's HWPC and power
    reports (day DATE)."""
    path = parent / "landing"
    path.mkdir()
    shutil.copy(EXAMPLES / "smartwatts_timeline.jsonl", path / "hwpc.jsonl")
    shutil.copy(EXAMPLES / "power.jsonl", path / "power.jsonl")
    return path


@pytest.fixture
def folder(tmp_path) -> Path:
    """:func:`_folder` in this test's folder."""
    return _folder(tmp_path)


def next_day(source: Path, target: Path, sensor: str = "sensor_two") -> Path:
    """``source``'s reports a day later, as ``sensor``, at ``target``."""
    target.write_text(source.read_text().replace(DATE, "2021-01-14")
                      .replace("sensor_test", sensor))
    return target


def broken_power(path: Path) -> Path:
    """The bundled power reports with a negative power on line 3."""
    lines = (EXAMPLES / "power.jsonl").read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace('"power":0.531164', '"power":-0.531164')
    path.write_text("".join(lines))
    return path


def pieces(landing: Landing, key: str) -> int:
    return ReportStore(landing.tables()).progress(key).pieces


def _first_run(base: Path, broken: bool) -> FirstRun:
    """The landing folder (:func:`_folder`) in ``base / "root"``, with the bad power reports
    ``broken.jsonl`` (:func:`broken_power`) when ``broken``, quiet, and the run of the
    sensor's first tick over it, which fails or succeeds, as the tests make them."""
    with instance_in(Saved.storage(base)) as instance:
        folder = _folder(base / "root")
        if broken:
            broken_power(folder / "broken.jsonl")
        landing = Landing(instance, folder, base / "root")
        settle()
        [first] = landing.tick().run_requests
        result = landing.launch(first)
        assert result.success is not broken
    return FirstRun(Saved.save(base, landing.cursor), result)


@pytest.fixture(scope="module")
def ran_once(tmp_path_factory) -> FirstRun:
    """The run of the first tick over the landing folder: once per module."""
    return _first_run(tmp_path_factory.mktemp("powerapi"), broken=False)


@pytest.fixture(scope="module")
def failed_once(tmp_path_factory) -> FirstRun:
    """The failed run of the first tick over the landing folder and ``broken.jsonl``: once
    per module."""
    return _first_run(tmp_path_factory.mktemp("powerapi-bad"), broken=True)


def _restored(first: FirstRun, tmp_path: Path) -> Iterator[tuple[Landing, Path]]:
    """The landing after ``first``, put back for this test, and its landing folder; quiet
    again, as after the run (the copies put back are new files: their ctimes now)."""
    with first.saved.restored_source(tmp_path, lambda instance, root: Landing(
            instance, root / "landing", root)) as landing:
        settle()
        yield landing, first.saved.root / "landing"


@pytest.fixture
def ran(ran_once: FirstRun, tmp_path) -> Iterator[tuple[Landing, Path]]:
    """The landing after the run of its first tick over the landing folder
    (:func:`ran_once`, put back for this test), and its landing folder."""
    yield from _restored(ran_once, tmp_path)


@pytest.fixture
def failed(failed_once: FirstRun, tmp_path) -> Iterator[tuple[Landing, Path]]:
    """The landing after the failed run of its first tick over the landing folder and
    ``broken.jsonl`` (:func:`failed_once`, put back for this test), and its landing
    folder."""
    yield from _restored(failed_once, tmp_path)


def test_an_entry_landing_in_a_stored_day_is_processed_alone(ran):
    """A file landing in a day already stored (by the first run: :func:`ran`) is handed out
    alone: its run reads it alone (the day's other entries get no new piece) and
    recomputes the window rows of its sensor only."""
    landing, folder = ran
    next_day(folder / "hwpc.jsonl", folder / "two.jsonl")
    shutil.copy(EXAMPLES / "power.jsonl", folder / "again.jsonl")  # its day: DATE
    settle()
    [request] = landing.tick().run_requests
    assert PowerapiHandOut.named_in(request.run_config) == {
        DAY: ["landing/again.jsonl"], OTHER_DAY: ["landing/two.jsonl"]}
    result = landing.launch(request)
    assert result.success
    assert frames_of(result, DAY)["entry_keys"].value == ["landing/again.jsonl"]
    assert (pieces(landing, HWPC), pieces(landing, POWER)) == (1, 1)
    [window] = [m for m in result.asset_materializations_for_node("powerapi_pipeline")
                if m.asset_key == dg.AssetKey(WINDOW_TABLE)]
    assert window.metadata["sensors_recomputed"].value == 2
    table = landing.tables().read_table(WINDOW_TABLE)
    assert {sensor: _measured(rows) for sensor, rows in table.groupby("sensor")} == pytest.approx(
        {"sensor_test": FIXTURE_J, "sensor_two": FIXTURE_J}, rel=1e-12)
    assert sorted(landing.partitions()) == [DAY, OTHER_DAY]


def test_a_day_named_by_no_hand_out_is_read_whole(instance, tmp_path, folder):
    """A run over a day from the UI or a backfill (no entry named) reads every entry of its
    landing folder whose day it is, and no other."""
    next_day(folder / "power.jsonl", folder / "later.jsonl")
    landing = Landing(instance, folder, tmp_path, quiet_s=0)
    [request] = landing.tick().run_requests
    assert PowerapiHandOut.named_in(request.run_config) == {
        DAY: [HWPC, POWER], OTHER_DAY: ["landing/later.jsonl"]}
    assert landing.launch(request).success
    whole = landing.run_whole(partition_key=DAY)
    assert whole.success
    frames = frames_of(whole, DAY)
    assert frames["entry_keys"].value == [HWPC, POWER]
    assert sorted(frames["reads"].value) == [HWPC, POWER]  # read on: nothing new
    assert (pieces(landing, HWPC), pieces(landing, POWER)) == (1, 1)


def test_a_growing_stream_stays_in_its_day_read_on_once_grown_and_once_quiet(
        instance, tmp_path, folder):
    """A live sensor's JSON lines (reports of about 1.1 kB) handed out in its one day once
    grown by grown_bytes, then, grown by less, once more when quiet: each run reads only
    what is new since the last (a piece each), each report is stored once, and the window
    table equals the landing folder's read whole."""
    (folder / "hwpc.jsonl").unlink()
    path = folder / "stream.jsonl"
    lines = (EXAMPLES / "smartwatts_timeline.jsonl").read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:20]))
    # a quiet period a tick on a loaded machine does not outlast between an append and it
    landing = Landing(instance, folder, tmp_path, quiet_s=STREAM_QUIET_S, grown_bytes=4096)
    time.sleep(STREAM_QUIET_S + 0.1)
    assert landing.launch(landing.tick().run_requests[0]).success  # the day's first hand-out
    key = "landing/stream.jsonl"
    for added, handed in ((lines[20:36], "grown"), (lines[36:38], "quiet")):
        with path.open("a") as file:
            file.write("".join(added))
        if handed == "quiet":
            assert landing.tick().run_requests == []  # grown by less than grown_bytes
            time.sleep(STREAM_QUIET_S + 0.1)
        [request] = landing.tick().run_requests
        assert PowerapiHandOut.named_in(request.run_config) == {DAY: [key]}, handed
        result = landing.launch(request)
        assert result.success
        read = frames_of(result, DAY)["reads"].value[key]
        assert read["read"] == "new reports only", handed
        assert read["read_to_byte"] == {"stream.jsonl": path.stat().st_size}, handed
    assert pieces(landing, key) == 3
    assert landing.tick().run_requests == []
    assert landing.partitions() == [DAY]
    whole = read_reports(layout.discover(path))
    stored = ReportStore(landing.tables()).read("counters", [key])
    assert len(stored) == len(whole.counters) > 0  # each report once
    pd.testing.assert_frame_equal(  # the stream and the power reports beside it, read whole
        landing.tables().read_table(WINDOW_TABLE),
        read_reports(layout.discover(folder)).window_energy(landing.source.window),
        check_exact=False, rtol=1e-12)


def test_a_slow_stream_is_handed_out_grown_wait_s_after_a_tick_saw_it_grown(
        instance, tmp_path, folder):
    """A stream far below grown_bytes and never quiet (nor, under a 600 s quiet period, the
    power reports beside it) is handed out in its day once grown_wait_s passed since a
    tick first saw it changed, then again after the next wait for the little it grew: each
    run reads only what is new, each report stored once."""
    (folder / "hwpc.jsonl").unlink()
    path = folder / "stream.jsonl"
    lines = (EXAMPLES / "smartwatts_timeline.jsonl").read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:20]))
    landing = Landing(instance, folder, tmp_path, quiet_s=600, grown_bytes=1 << 20,
                      grown_wait_s=STREAM_QUIET_S)
    key = "landing/stream.jsonl"
    for added, read, named in ((lines[20:20], "whole", [POWER, key]),
                               (lines[20:22], "new reports only", [key])):
        with path.open("a") as file:
            file.write("".join(added))
        assert landing.tick().run_requests == []  # its wait starts at this tick
        time.sleep(STREAM_QUIET_S + 0.1)
        [request] = landing.tick().run_requests
        assert PowerapiHandOut.named_in(request.run_config) == {DAY: named}, read
        result = landing.launch(request)
        assert result.success
        frames = frames_of(result, DAY)["reads"].value
        assert frames[key]["read"] == read
        assert frames[key]["read_to_byte"] == {"stream.jsonl": path.stat().st_size}
    assert landing.tick().run_requests == []
    stored = ReportStore(landing.tables()).read("counters", [key])
    assert len(stored) == len(read_reports(layout.discover(path)).counters) > 0


def test_a_bad_file_keeps_its_day_failed_and_is_rechecked_until_fixed_alone(
        failed, failed_once):
    """A bad file fails its day naming file and line (the first run: :func:`failed_once`),
    the day's other entries stored; each later hand-out of the day lists it again with the
    new ones, so the day stays failed; fixed in place, it is handed out alone and the day
    passes."""
    landing, folder = failed
    bad = folder / "broken.jsonl"
    result = failed_once.result
    assert not result.success
    [check] = [c for c in result.get_asset_check_evaluations() if c.check_name == VALID_CHECK]
    assert (check.partition, check.passed) == (DAY, False)
    assert (check.metadata["file"].value, check.metadata["line"].value) == (str(bad), 3)
    assert ReportStore(landing.tables()).stored_keys() == [HWPC, POWER]

    shutil.copy(EXAMPLES / "power.jsonl", folder / "new.jsonl")
    settle()
    [request] = landing.tick().run_requests
    assert PowerapiHandOut.named_in(request.run_config) == {DAY: [BAD, "landing/new.jsonl"]}
    assert not landing.launch(request).success
    assert landing.status(VALID) == {DAY: dg.AssetPartitionStatus.FAILED}
    assert landing.tables().has_partition(REPORT_ENERGY_TABLE, "landing/new.jsonl")

    bad.write_text((EXAMPLES / "power.jsonl").read_text())
    settle()
    [fixed] = landing.tick().run_requests
    assert PowerapiHandOut.named_in(fixed.run_config) == {DAY: [BAD]}
    assert landing.launch(fixed).success
    assert landing.status(VALID) == {DAY: dg.AssetPartitionStatus.MATERIALIZED}
    assert ReportStore(landing.tables()).stored_keys() == [BAD, HWPC, "landing/new.jsonl", POWER]
    assert landing.tick().run_requests == []


def test_a_cancelled_hand_out_into_a_failed_day_is_asked_again_once(failed):
    """The entries handed out to a CANCELED run are asked for again once though their day
    FAILED (on a bad file: :func:`failed`), with the day's failed file rechecked beside
    them."""
    landing, folder = failed
    shutil.copy(EXAMPLES / "power.jsonl", folder / "new.jsonl")
    settle()
    [request] = landing.tick().run_requests
    landing.cancel(request)
    [retry] = landing.tick().run_requests
    assert PowerapiHandOut.named_in(retry.run_config) == {DAY: [BAD, "landing/new.jsonl"]}
    assert retry.tags[RETRY_OF_TAG] == request.run_key
    assert not landing.launch(retry).success
    assert landing.tables().has_partition(REPORT_ENERGY_TABLE, "landing/new.jsonl")
    assert landing.tick().run_requests == []  # once


def test_a_whole_day_of_an_unmounted_landing_folder_fails_and_keeps_what_is_stored(ran):
    """A day read whole (after the first run: :func:`ran`) while its landing folder lists
    nothing (a mount point with nothing mounted) fails, naming the folder, and every
    stored row stays."""
    landing, folder = ran
    table = landing.tables().read_table(WINDOW_TABLE)
    folder.rename(folder.with_name("unmounted"))
    folder.mkdir()
    result = landing.run_whole(partition_key=DAY)
    assert not result.success
    [check] = [c for c in result.get_asset_check_evaluations() if c.check_name == VALID_CHECK]
    assert check.metadata["file"].value == str(folder)
    assert "lists no entry at all" in check.description
    assert landing.tables().read_table(WINDOW_TABLE).equals(table)
    assert ReportStore(landing.tables()).stored_keys() == [HWPC, POWER]


def test_a_cursor_of_one_partition_per_entry_is_not_taken(ran):
    """Upgrading from one partition per entry (powerapi_reports): the sensor's cursor then (a
    landing state saying every entry was handed out) is not taken, so every entry present
    (stored by the first run: :func:`ran`) is handed out again, into its day; what was
    stored per entry is read on, not again (no new piece: nothing new), and the window
    table stays as it was."""
    landing, folder = ran
    table = landing.tables().read_table(WINDOW_TABLE)
    landing.cursor = landing_module.LandingState(seen={
        key: landing_module.read_landed_item(folder / key.partition("/")[2], key,
                                             report_entry_files).fingerprint
        for key in (HWPC, POWER)}).to_json()
    [request] = landing.tick().run_requests
    assert PowerapiHandOut.named_in(request.run_config) == {DAY: [HWPC, POWER]}
    assert landing.launch(request).success
    assert (pieces(landing, HWPC), pieces(landing, POWER)) == (1, 1)
    assert landing.tables().read_table(WINDOW_TABLE).equals(table)
    assert landing.tick().run_requests == []


def test_a_run_cancelled_before_the_upgrade_makes_no_later_run_a_retry(instance, tmp_path,
                                                                      folder):
    """A hand-out of the old per-entry partitions whose run was cancelled before the upgrade
    is no hand-out of a day: the first run over the days is no retry, so when it is
    cancelled in turn it is asked for again, once."""
    landing = Landing(instance, folder, tmp_path)
    landing.cancelled_before_days(powerapi_report_files.key, POWER, "powerapi-old")
    settle()
    _, retry = landing.cancelled_and_retried()
    assert PowerapiHandOut.named_in(retry.run_config) == {DAY: [HWPC, POWER]}
    landing.cancel(retry)
    assert landing.tick().run_requests == []  # once
