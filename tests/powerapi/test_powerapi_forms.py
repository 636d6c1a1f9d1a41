"""One data set in every form: the same frames, the same energy; streaming and cut-off files."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from joulehouse.powerapi import energy, layout, readers
from joulehouse.powerapi.reports import combine, read_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "powerapi"
FIXTURE_J = 12.19696044921875  # sum of the ten RAPL_ENERGY_PKG values x 2^-32
COLUMNS = ["timestamp", "sensor", "target", "group", "socket", "cpu", "event", "value"]


def _sorted(counters: pd.DataFrame) -> pd.DataFrame:
    frame = counters[COLUMNS].astype({name: str for name in ("sensor", "target", "group",
                                                             "event")})
    return frame.sort_values(COLUMNS, ignore_index=True)


@pytest.fixture(scope="module")
def reports() -> list[dict]:
    text = (EXAMPLES / "smartwatts_timeline.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture(scope="module")
def from_lines() -> pd.DataFrame:
    return readers.read_hwpc(EXAMPLES / "smartwatts_timeline.jsonl")


def _write_forms(folder: Path, reports: list[dict]) -> dict[str, Path]:
    forms = {
        "array": json.dumps(reports),
        "pretty array": json.dumps(reports, indent=2),
        "wrapped": json.dumps({"reports": reports}, indent=1),
        "pretty objects": "\n".join(json.dumps(report, indent=4) for report in reports),
        "mongo export": "\n".join(json.dumps({
            **report, "_id": {"$oid": f"{index:024x}"},
            "timestamp": {"$date": report["timestamp"] + "Z"}}) for index, report in
            enumerate(reports)),
        "epoch ms": "\n".join(json.dumps({
            **report, "timestamp": int(pd.Timestamp(report["timestamp"], tz="UTC").value
                                       // 1_000_000)}) for report in reports),
        "mongo epoch": "\n".join(json.dumps({**report, "timestamp": {"$date": {
            "$numberLong": str(pd.Timestamp(report["timestamp"], tz="UTC").value
                               // 1_000_000)}}}) for report in reports),
        "zoned": "\n".join(json.dumps({
            **report, "timestamp": report["timestamp"] + "+00:00"}) for report in reports),
        "paris": "\n".join(json.dumps({**report, "timestamp": pd.Timestamp(
            report["timestamp"], tz="UTC").tz_convert("Europe/Paris").isoformat()})
            for report in reports),
    }
    paths = {}
    for name, text in forms.items():
        paths[name] = folder / (name.replace(" ", "_") + ".json")
        paths[name].write_text(text)
    return paths


def test_every_json_form_reads_the_same(tmp_path, reports, from_lines):
    expected = _sorted(from_lines)
    for name, path in _write_forms(tmp_path, reports).items():
        pd.testing.assert_frame_equal(_sorted(readers.read_hwpc(path)), expected, obj=name)


def test_csv_form_reads_the_same(from_lines):
    csv = readers.concat_counters([readers.read_hwpc(path)
                                   for path in sorted((EXAMPLES / "hwpc-csv").glob("*.csv"))])
    pd.testing.assert_frame_equal(_sorted(csv), _sorted(from_lines))
    for counters in (csv, from_lines):
        rapl = readers.rapl_energy(counters)
        assert rapl["energy_j"].sum() == pytest.approx(FIXTURE_J, rel=1e-15)
        table = energy.window_energy(rapl, None, "1min")
        assert table["energy_j"].tolist() == pytest.approx([FIXTURE_J], rel=1e-12)


def test_csv_without_extension(tmp_path, from_lines):
    (tmp_path / "rapl").write_bytes((EXAMPLES / "hwpc-csv" / "rapl.csv").read_bytes())
    counters = readers.read_hwpc(tmp_path / "rapl")
    assert set(counters["group"]) == {"rapl"} and len(counters) == 30
    assert readers.rapl_energy(counters)["energy_j"].sum() == pytest.approx(FIXTURE_J, rel=1e-15)


def test_naive_times_in_a_configured_zone(tmp_path, reports):
    path = tmp_path / "local.jsonl"
    path.write_text("\n".join(json.dumps(report) for report in reports[:2]))
    counters = readers.read_hwpc(path, timezone="Europe/Paris")
    assert counters["timestamp"].iloc[0] == pd.Timestamp("2021-01-13T08:51:22.630", tz="UTC")


@pytest.mark.parametrize("block_bytes", [1500, 20_000])
@pytest.mark.parametrize("form", ["array", "pretty array", "wrapped", "pretty objects", "lines"])
def test_streamed_blocks_add_up(tmp_path, reports, from_lines, form, block_bytes):
    path = (EXAMPLES / "smartwatts_timeline.jsonl" if form == "lines"
            else _write_forms(tmp_path, reports)[form])
    blocks = list(readers.iter_hwpc(path, block_bytes=block_bytes))
    assert len(blocks) > 2
    assert all(block.complete for block in blocks)
    assert blocks[-1].end == path.stat().st_size or not path.read_bytes()[
        blocks[-1].end:].strip(b" \n]}")
    streamed = readers.concat_counters([block.counters for block in blocks])
    pd.testing.assert_frame_equal(_sorted(streamed), _sorted(from_lines))


@pytest.mark.parametrize("form", ["lines", "array", "pretty array", "wrapped"])
def test_last_report_cut_short_keeps_the_complete_ones(tmp_path, reports, form):
    if form == "lines":
        text = (EXAMPLES / "smartwatts_timeline.jsonl").read_text()
    else:
        text = _write_forms(tmp_path, reports)[form].read_text()
    last_start = text.rindex('"timestamp"')
    path = tmp_path / "growing.json"
    path.write_text(text[: last_start + 40])  # the 40th report cut inside
    blocks = list(readers.iter_hwpc(path))
    assert not blocks[-1].complete
    counters = readers.concat_counters([block.counters for block in blocks])
    expected = _sorted(readers.read_hwpc(EXAMPLES / "smartwatts_timeline.jsonl"))
    complete = expected[~((expected["timestamp"] == expected["timestamp"].max())
                          & (expected["target"] == reports[-1]["target"]))]
    pd.testing.assert_frame_equal(_sorted(counters), complete.reset_index(drop=True))


def test_growing_jsonl_read_from_the_last_end(tmp_path, reports):
    lines = [json.dumps(report) for report in reports]
    path = tmp_path / "growing.jsonl"
    path.write_text("\n".join(lines[:25]) + "\n" + lines[25][:100])
    first = list(readers.iter_hwpc(path))
    assert not first[-1].complete
    path.write_text("\n".join(lines) + "\n")
    rest = list(readers.iter_hwpc(path, start=first[-1].end))
    assert rest[-1].complete and rest[-1].end == path.stat().st_size
    both = readers.concat_counters([block.counters for block in first + rest])
    whole = readers.read_hwpc(path)
    pd.testing.assert_frame_equal(_sorted(both), _sorted(whole))


def test_csv_last_line_cut_short(tmp_path):
    text = (EXAMPLES / "hwpc-csv" / "rapl.csv").read_text()
    path = tmp_path / "rapl.csv"
    path.write_text(text[:-20])
    blocks = list(readers.iter_hwpc(path))
    assert not blocks[-1].complete
    assert len(blocks[-1].counters) == 27  # nine complete rows of three events


def test_example_power_reports_estimate_ten_percent_under(from_lines):
    rapl = readers.rapl_energy(from_lines)
    power = readers.read_power(EXAMPLES / "power.jsonl")
    assert len(power) == 40 and set(power["target"]) == {
        "rapl", "influxdb", "mongo", "powerapi-sensor"}
    table = energy.window_energy(rapl, power, "1min")
    measured = table[table["method"] == "measured"]
    assert measured["energy_j"].tolist() == pytest.approx([FIXTURE_J], rel=1e-12)
    estimated = table[table["method"] == "estimated"].set_index("target")["energy_j"]
    assert estimated["rapl"] == pytest.approx(FIXTURE_J, rel=1e-5)  # rounded powers
    cgroups = estimated.drop("rapl").sum()
    assert cgroups == pytest.approx(0.9 * FIXTURE_J, rel=1e-5)
    assert table["relative_error"].tolist() == pytest.approx([-0.1] * 5, abs=1e-5)
    facts = energy.energy_facts_rows(table)
    assert facts[["entity", "method"]].values.tolist() == [
        ["sensor_test/all", "measured"], ["sensor_test/influxdb", "estimated"],
        ["sensor_test/mongo", "estimated"], ["sensor_test/powerapi-sensor", "estimated"]]
    # the formula's own whole-machine estimate (target rapl) is no fact: the measurement is
    estimated_facts = facts.loc[facts["method"] == "estimated", "energy_j"].sum()
    assert estimated_facts == pytest.approx(0.9 * FIXTURE_J, rel=1e-5)
    assert set(facts["component"]) == {"cpu"} and set(facts["source"]) == {"powerapi"}


def test_windows_split_ticks_in_proportion(from_lines):
    rapl = readers.rapl_energy(from_lines)
    table = energy.window_energy(rapl, None, "2s")
    assert len(table) == 6
    assert table["energy_j"].sum() == pytest.approx(FIXTURE_J, rel=1e-12)
    assert table["duration_s"].tolist() == pytest.approx([0.374, 2, 2, 2, 2, 1.667])
    first_tick_j = 5709496320 * 2**-32
    assert table["energy_j"].iloc[0] == pytest.approx(first_tick_j * 0.374 / 1.004, rel=1e-9)


def test_csv_streamed_in_blocks_and_from_an_offset(tmp_path, from_lines):
    path = EXAMPLES / "hwpc-csv" / "core.csv"
    whole = readers.read_hwpc(path)
    blocks = list(readers.iter_hwpc(path, block_bytes=2000))
    assert len(blocks) > 5 and blocks[-1].end == path.stat().st_size
    pd.testing.assert_frame_equal(readers.concat_counters([b.counters for b in blocks]), whole)
    rest = readers.concat_counters([b.counters for b in readers.iter_hwpc(
        path, start=blocks[2].end)])
    pd.testing.assert_frame_equal(
        rest, readers.concat_counters([b.counters for b in blocks[3:]]))


def test_types_beyond_the_sample_are_read(tmp_path, reports):
    """A file larger than the type sample: new fields and floats after integers are kept."""
    repeated = [{**report, "timestamp": report["timestamp"].replace(":51:", f":{copy + 10}:")}
                for copy in range(20) for report in reports]  # about 1.1 MB
    index = max(i for i, report in enumerate(repeated) if report["target"] == "all")
    last = json.loads(json.dumps(repeated[index]))  # rapl + msr
    replaced = last["groups"]["rapl"]["0"]["7"]["RAPL_ENERGY_PKG"]
    last["groups"]["rapl"]["0"]["7"]["RAPL_ENERGY_PKG"] = 4294967296.5
    last["groups"]["rapl"]["1"] = {"15": {"RAPL_ENERGY_PKG": 2**32}}
    repeated[index] = last
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(report) + "\n" for report in repeated))
    assert path.stat().st_size > 1 << 20
    rapl = readers.rapl_energy(readers.read_hwpc(path))
    assert len(rapl) == 201
    assert rapl["energy_j"].sum() == pytest.approx(
        20 * FIXTURE_J - replaced * 2**-32 + 1 + 2**-33 + 1, rel=1e-12)


def test_estimates_of_sockets_covering_different_times_are_summed_per_window(tmp_path):
    """Socket 1's reports start a tick after socket 0's: one row per window, the union."""
    lines = []
    for tick in range(5):
        stamp = 1_610_531_482_000 + 1000 * tick  # 2021-01-13 09:51:22 UTC, 1 s ticks
        for socket in (0, 1):
            if socket == 1 and tick == 0:
                continue
            lines.append(json.dumps({"timestamp": stamp, "sensor": "s", "target": "job",
                                     "power": 10.0 + socket, "metadata": {
                                         "scope": "cpu", "socket": socket}}))
    path = tmp_path / "power.jsonl"
    path.write_text("\n".join(lines) + "\n")
    table = energy.window_energy(None, readers.read_power(path), window="1min")
    assert len(table) == 1
    row = table.iloc[0]
    assert row["window_start"] == pd.Timestamp("2021-01-13 09:51:21", tz="UTC")
    assert row["window_end"] == pd.Timestamp("2021-01-13 09:51:26", tz="UTC")
    assert row["energy_j"] == pytest.approx(5 * 10.0 + 4 * 11.0)


@pytest.mark.parametrize("order", ["reversed", "halves swapped", "shuffled"])
def test_power_reports_in_any_order_give_the_same_estimates(tmp_path, from_lines, order):
    """Ticks are taken in time order, whatever order the reports (or files) come in."""
    rapl = readers.rapl_energy(from_lines)
    power = readers.read_power(EXAMPLES / "power.jsonl")
    half = len(power) // 2
    given = {"reversed": power.iloc[::-1],
             "halves swapped": pd.concat([power.iloc[half:], power.iloc[:half]]),
             "shuffled": power.sample(frac=1.0, random_state=7)}[order].reset_index(drop=True)
    for window in ("1min", "2s"):
        expected = energy.window_energy(rapl, power, window)
        pd.testing.assert_frame_equal(energy.window_energy(rapl, given, window), expected)
    # the same reports in two files, the later one read first
    lines = (EXAMPLES / "power.jsonl").read_text().splitlines()
    (tmp_path / "a.jsonl").write_text("\n".join(lines[20:]) + "\n")
    (tmp_path / "b.jsonl").write_text("\n".join(lines[:20]) + "\n")
    combined = combine([read_file(layout.classify(tmp_path / name))
                        for name in ("a.jsonl", "b.jsonl")])
    table = energy.window_energy(rapl, combined.power, "2s")
    estimated = table[table["method"] == "estimated"]
    assert (estimated["energy_j"] >= 0).all()
    assert estimated["energy_j"].sum() == pytest.approx(
        expected[expected["method"] == "estimated"]["energy_j"].sum(), rel=1e-12)


def _utc(seconds: str) -> pd.Timestamp:
    """A time of the fixture's minute (2021-01-13 09:51), UTC."""
    return pd.Timestamp(f"2021-01-13 09:51:{seconds}", tz="UTC")


def test_windows_around_a_gap_claim_only_the_covered_time(from_lines):
    """Three ticks of the fixture missing (09:51:26.647-28.655): a gap of four ticks.

    Every row's interval is the covered one (clipped to the first tick start and the last
    tick end inside the window) and says how much of it ticks cover; energy_facts takes the
    fully covered rows over that interval and leaves out the one window with the gap inside.
    """
    rapl = readers.rapl_energy(from_lines)
    times = rapl["timestamp"].unique()
    kept = rapl[~rapl["timestamp"].isin(times[4:7])]
    tick_j = kept["energy_j"].tolist()  # ticks 0-3 and 7-9

    minute = energy.window_energy(kept, None, "1min")
    assert minute[["window_start", "window_end"]].values.tolist() == [[_utc("21.626"),
                                                                       _utc("31.667")]]
    assert minute["duration_s"].tolist() == pytest.approx([10.041])
    assert minute["covered_s"].tolist() == pytest.approx([4.017 + 3.012])  # the gap: 3.012 s
    assert minute["energy_j"].tolist() == pytest.approx([sum(tick_j)], rel=1e-12)
    assert energy.energy_facts_rows(minute).empty  # a gap inside: no fact claims the minute

    table = energy.window_energy(kept, None, "2s")
    assert table[["window_start", "window_end"]].values.tolist() == [
        [_utc("21.626"), _utc("22")], [_utc("22"), _utc("24")], [_utc("24"), _utc("25.643")],
        [_utc("28.655"), _utc("30")], [_utc("30"), _utc("31.667")]]  # 26-28: no tick, no row
    assert table["duration_s"].tolist() == pytest.approx([0.374, 2, 1.643, 1.345, 1.667])
    assert table["covered_s"].tolist() == pytest.approx(table["duration_s"].tolist())
    share = 0.639 / 1.005  # of tick 2 (23.634-24.639) after 24 s
    assert table["energy_j"].tolist() == pytest.approx([
        tick_j[0] * 0.374 / 1.004, tick_j[0] * 0.630 / 1.004 + tick_j[1] + tick_j[2] * (1 - share),
        tick_j[2] * share + tick_j[3],
        tick_j[4] + tick_j[5] * 0.341 / 1.004, tick_j[5] * 0.663 / 1.004 + tick_j[6]],
        rel=1e-9)
    facts = energy.energy_facts_rows(table)
    assert facts["window_end"].tolist() == table["window_end"].tolist()
    assert facts["duration_s"].tolist() == pytest.approx([0.374, 2, 1.643, 1.345, 1.667])
    mean_w = facts["energy_j"].sum() / facts["duration_s"].sum()
    assert mean_w == pytest.approx(sum(tick_j) / 7.029, rel=1e-12)  # not over 10.041 s


def test_estimates_summed_over_sockets_covering_different_times_are_no_fact(tmp_path):
    """Socket 1 misses the first tick: the summed row spans both, covers 4 of its 5 s."""
    lines = [json.dumps({"timestamp": 1_610_531_482_000 + 1000 * tick, "sensor": "s",
                         "target": "job", "power": 10.0 + socket,
                         "metadata": {"scope": "cpu", "socket": socket}})
             for tick in range(5) for socket in (0, 1) if (socket, tick) != (1, 0)]
    path = tmp_path / "power.jsonl"
    path.write_text("\n".join(lines) + "\n")
    table = energy.window_energy(None, readers.read_power(path), window="1min")
    assert table[["duration_s", "covered_s"]].values.tolist() == [[5.0, 4.0]]
    assert energy.energy_facts_rows(table).empty
