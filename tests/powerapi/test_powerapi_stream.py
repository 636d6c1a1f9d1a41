"""Growing report files read on from where the last read ended: pieces, progress, re-reads."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

from joulehouse.errors import InputError
from joulehouse.powerapi import energy, layout, readers
from joulehouse.powerapi.reports import read_reports
from joulehouse.powerapi.stream import ReportStore
from joulehouse.warehouse import Warehouse

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "powerapi"
FIXTURE_J = 12.19696044921875  # the ten-tick SmartWatts fixture's RAPL energy
WRITING = {"quiet_s": 3600.0}  # every file changed within the hour: still being written


def _ingest(store: ReportStore, key: str, entry: Path, quiet_s: float) -> dict[str, int]:
    piece = store.ingest(key, entry, now=time.time(), quiet_s=quiet_s)
    return {name: len(frame) for name, frame in piece.frames.items()}


def _stored(store: ReportStore, key: str, name: str) -> pd.DataFrame:
    return store.read(name, [key])


def test_a_json_lines_file_written_in_three_steps_is_read_once(tmp_path):
    """Step 2 ends inside a report: that report waits for step 3; nothing is read twice."""
    lines = (EXAMPLES / "smartwatts_timeline.jsonl").read_text().splitlines(keepends=True)
    counts = [len(readers.read_hwpc(_write(tmp_path / f"part{i}.jsonl", part)))
              for i, part in enumerate((lines[:12], lines[12:25], lines[25:]))]
    assert sum(counts) == 1870 and all(counts)
    store = ReportStore(Warehouse(tmp_path / "warehouse"))
    path = tmp_path / "landing" / "hwpc.jsonl"
    path.parent.mkdir()
    cut = len(lines[25]) // 2

    _write(path, lines[:12])
    assert _ingest(store, "landing/hwpc.jsonl", path, **WRITING)["counters"] == counts[0]
    with path.open("a") as file:
        file.write("".join(lines[12:25]) + lines[25][:cut])  # the last report cut short
    assert _ingest(store, "landing/hwpc.jsonl", path, **WRITING)["counters"] == counts[1]
    progress = store.progress("landing/hwpc.jsonl")
    assert progress.files["hwpc.jsonl"].read_to_byte == len("".join(lines[:25]).encode())
    assert (progress.generation, progress.pieces) == (0, 2)
    with path.open("a") as file:
        file.write(lines[25][cut:] + "".join(lines[26:]))
    assert _ingest(store, "landing/hwpc.jsonl", path, **WRITING)["counters"] == counts[2]
    assert _ingest(store, "landing/hwpc.jsonl", path, **WRITING)["counters"] == 0  # nothing new
    assert store.progress("landing/hwpc.jsonl").pieces == 3  # no empty piece stored

    counters = _stored(store, "landing/hwpc.jsonl", "counters")
    assert len(counters) == 1870  # each report once
    rapl = _stored(store, "landing/hwpc.jsonl", "rapl_energy")
    assert len(rapl) == 10 and rapl["energy_j"].sum() == pytest.approx(FIXTURE_J, rel=1e-15)
    whole = readers.rapl_energy(readers.read_hwpc(path))
    pd.testing.assert_frame_equal(energy.window_energy(rapl, None, "2s"),
                                  energy.window_energy(whole, None, "2s"))


def test_a_csv_folder_written_in_three_steps_waits_for_a_line_end(tmp_path):
    """hwpc-sensor's CSV output folder, its three files growing: a last line cut inside a
    number has every field (``...,57``) and would read as whole, so while the files are
    written a read stops at the last line end."""
    entry = tmp_path / "landing" / "hwpc-csv"
    entry.mkdir(parents=True)
    texts = {path.name: path.read_text().splitlines(keepends=True)
             for path in sorted((EXAMPLES / "hwpc-csv").iterdir())}
    steps = [{name: lines[:1 + (len(lines) - 1) * step // 3] for name, lines in texts.items()}
             for step in (1, 2, 3)]
    store = ReportStore(Warehouse(tmp_path / "warehouse"))
    rapl_lines = texts["rapl.csv"]
    (entry / "pcu.csv").touch()  # a group file just created: not read while empty
    seen = []
    for step, wanted in enumerate(steps):
        for name, lines in wanted.items():
            _write(entry / name, lines)
        if step == 1:  # rapl.csv's next line, cut inside its energy value
            with (entry / "rapl.csv").open("a") as file:
                file.write(rapl_lines[len(wanted["rapl.csv"])][:40])
        seen.append(_ingest(store, "landing/hwpc-csv", entry, **WRITING))
    ticks = [len(step["rapl.csv"]) - 1 for step in steps]  # rapl lines: one tick each
    assert [rows["rapl_energy"] for rows in seen] == [ticks[0], ticks[1] - ticks[0],
                                                     ticks[2] - ticks[1]] == [3, 3, 4]
    assert sum(rows["counters"] for rows in seen) == 1870
    assert sorted(store.progress("landing/hwpc-csv").files) == [
        "hwpc-csv/core.csv", "hwpc-csv/msr.csv", "hwpc-csv/rapl.csv"]
    rapl = _stored(store, "landing/hwpc-csv", "rapl_energy")
    assert rapl["energy_j"].sum() == pytest.approx(FIXTURE_J, rel=1e-15)
    assert len(_stored(store, "landing/hwpc-csv", "counters")) == 1870
    whole = read_reports(layout.discover(EXAMPLES / "hwpc-csv"))
    pd.testing.assert_frame_equal(energy.window_energy(rapl, None, "2s"),
                                  whole.window_energy("2s"))


def test_a_quiet_file_is_read_to_its_last_whole_report_without_a_line_end(tmp_path):
    path = tmp_path / "landing" / "power.jsonl"
    path.parent.mkdir()
    lines = (EXAMPLES / "power.jsonl").read_text().splitlines(keepends=True)
    _write(path, [*lines[:-1], lines[-1].rstrip("\n")])
    store = ReportStore(Warehouse(tmp_path / "warehouse"))
    assert _ingest(store, "landing/power.jsonl", path, **WRITING)["power_reports"] == 39
    assert _ingest(store, "landing/power.jsonl", path, quiet_s=0)["power_reports"] == 1
    assert len(_stored(store, "landing/power.jsonl", "power_reports")) == 40


def test_a_quiet_json_lines_report_without_a_line_end_is_read_on_after_it(tmp_path):
    """A report read without its line end is not read again when the line end comes, with
    ``\r\n`` line ends too; one whose line goes on instead makes the entry be read whole."""
    path = tmp_path / "landing" / "power.jsonl"
    path.parent.mkdir()
    lines = [line + "\r\n" for line in (EXAMPLES / "power.jsonl").read_text().splitlines()]
    store = ReportStore(Warehouse(tmp_path / "warehouse"))
    key = "landing/power.jsonl"
    _write(path, [*lines[:19], lines[19][:-2]])
    assert _ingest(store, key, path, quiet_s=0)["power_reports"] == 20
    assert store.progress(key).files["power.jsonl"].tail_bytes == len(lines[19]) - 2
    with path.open("a") as file:
        file.write("\r\n" + "".join(lines[20:39]) + lines[39][:-2])
    assert _ingest(store, key, path, quiet_s=0)["power_reports"] == 20
    assert (store.progress(key).generation, store.progress(key).pieces) == (0, 2)
    stored = _stored(store, key, "power_reports")
    assert len(stored) == len(stored.drop_duplicates()) == 40
    with path.open("a") as file:
        file.write(" ")  # the last line went on: read whole again
    assert _ingest(store, key, path, quiet_s=0)["power_reports"] == 40
    assert (store.progress(key).generation, len(_stored(store, key, "power_reports"))) == (1, 40)


def test_a_file_truncated_or_rewritten_is_read_whole_again(tmp_path):
    path = tmp_path / "landing" / "hwpc.jsonl"
    path.parent.mkdir()
    lines = (EXAMPLES / "smartwatts_timeline.jsonl").read_text().splitlines(keepends=True)
    store = ReportStore(Warehouse(tmp_path / "warehouse"))
    key = "landing/hwpc.jsonl"
    _write(path, lines)
    _ingest(store, key, path, **WRITING)
    _write(path, lines[:20])  # truncated and written again (a sensor restarted)
    assert _ingest(store, key, path, **WRITING)["counters"] == len(readers.read_hwpc(path))
    progress = store.progress(key)
    assert (progress.generation, progress.pieces) == (1, 1)
    assert len(_stored(store, key, "counters")) == len(readers.read_hwpc(path)) < 1870
    # rotated: a longer file whose prefix is not what was read (later timestamps)
    shifted = [json.dumps({**json.loads(line), "timestamp": json.loads(line)["timestamp"]
                           .replace("09:51:", "10:51:")}) + "\n" for line in lines]
    _write(path, shifted)
    assert _ingest(store, key, path, **WRITING)["counters"] == 1870
    assert (store.progress(key).generation, store.progress(key).pieces) == (2, 1)
    rapl = _stored(store, key, "rapl_energy")
    assert len(rapl) == 10 and rapl["energy_j"].sum() == pytest.approx(FIXTURE_J, rel=1e-15)
    assert rapl["timestamp"].min() == pd.Timestamp("2021-01-13 10:51:22.630", tz="UTC")
    # an array file (not line-based) that changed is read whole again too
    array = tmp_path / "landing" / "power.json"
    power_lines = (EXAMPLES / "power.jsonl").read_text().splitlines()
    array.write_text("[" + ",".join(power_lines[:20]) + "]")
    assert _ingest(store, "landing/power.json", array, **WRITING)["power_reports"] == 20
    assert _ingest(store, "landing/power.json", array, **WRITING)["power_reports"] == 0
    array.write_text("[" + ",".join(power_lines) + "]")
    assert _ingest(store, "landing/power.json", array, **WRITING)["power_reports"] == 40
    assert len(_stored(store, "landing/power.json", "power_reports")) == 40


def test_a_bad_report_in_the_new_lines_stores_nothing(tmp_path):
    path = tmp_path / "landing" / "power.jsonl"
    path.parent.mkdir()
    lines = (EXAMPLES / "power.jsonl").read_text().splitlines(keepends=True)
    store = ReportStore(Warehouse(tmp_path / "warehouse"))
    _write(path, lines[:20])
    _ingest(store, "landing/power.jsonl", path, **WRITING)
    before = store.progress("landing/power.jsonl")
    with path.open("a") as file:
        file.write("".join(lines[20:30]) + lines[30].replace('"power":', '"power":-'))
    with pytest.raises(InputError, match=r"power\.jsonl:31: power: negative"):
        _ingest(store, "landing/power.jsonl", path, **WRITING)
    assert store.progress("landing/power.jsonl") == before
    shutil.copy(EXAMPLES / "power.jsonl", path)  # fixed in place: same prefix, read on
    assert _ingest(store, "landing/power.jsonl", path, **WRITING)["power_reports"] == 20
    assert store.progress("landing/power.jsonl").generation == 0


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(lines))
    return path


def test_an_entry_whose_files_are_all_empty_stores_nothing(tmp_path):
    entry = tmp_path / "landing" / "hwpc-csv"
    entry.mkdir(parents=True)
    (entry / "rapl.csv").touch()
    store = ReportStore(Warehouse(tmp_path / "warehouse"))
    assert _ingest(store, "landing/hwpc-csv", entry, **WRITING)["counters"] == 0
    assert store.progress("landing/hwpc-csv") is None and store.stored_keys() == []
    shutil.copy(EXAMPLES / "hwpc-csv" / "rapl.csv", entry / "rapl.csv")
    assert _ingest(store, "landing/hwpc-csv", entry, **WRITING)["rapl_energy"] == 10
    assert store.progress("landing/hwpc-csv").generation == 0


@pytest.mark.parametrize("quiet_s", [3600.0, 0.0], ids=["writing", "quiet"])
def test_a_json_lines_file_first_seen_inside_its_first_line_is_read_once(tmp_path, quiet_s):
    """Half a first line is no JSON object, so the file is read as not line-based (no report);
    once its first line is whole it is JSON lines: the entry is read whole again, each report
    stored once."""
    lines = (EXAMPLES / "smartwatts_timeline.jsonl").read_text().splitlines(keepends=True)
    path = tmp_path / "landing" / "hwpc.jsonl"
    path.parent.mkdir()
    store = ReportStore(Warehouse(tmp_path / "warehouse"))
    key = "landing/hwpc.jsonl"
    cut = len(lines[0]) // 2
    path.write_text(lines[0][:cut])
    assert _ingest(store, key, path, quiet_s)["counters"] == 0
    with path.open("a") as file:
        file.write(lines[0][cut:] + "".join(lines[1:]))
    assert _ingest(store, key, path, **WRITING)["counters"] == 1870
    assert (store.progress(key).generation, store.progress(key).pieces) == (1, 1)
    assert _ingest(store, key, path, quiet_s=0)["counters"] == 0  # quiet now: nothing new
    counters = _stored(store, key, "counters")
    assert len(counters) == len(counters.drop_duplicates()) == 1870
    rapl = _stored(store, key, "rapl_energy")
    assert len(rapl) == 10 and rapl["energy_j"].sum() == pytest.approx(FIXTURE_J, rel=1e-15)


def _csv_folder_with_an_unterminated_row(entry: Path, cut_back: int) -> dict[str, list[str]]:
    """hwpc-sensor's CSV folder written up to row 6 of each file, its last ``cut_back`` bytes
    (line end included) not yet written: the rest of each file's lines, by name."""
    entry.mkdir(parents=True)
    rest = {}
    for source in sorted((EXAMPLES / "hwpc-csv").iterdir()):
        lines = source.read_text().splitlines(keepends=True)
        (entry / source.name).write_text("".join(lines[:6]) + lines[6][:-cut_back])
        rest[source.name] = [lines[6][-cut_back:], *lines[7:]]
    return rest


def _stored_equals_whole(store: ReportStore, key: str, entry: Path) -> None:
    """Every counter stored once, with the values of the entry's files read whole now."""
    def rows(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.astype({name: object for name in frame.select_dtypes("category")})
        return frame.sort_values(list(frame.columns), ignore_index=True)
    pd.testing.assert_frame_equal(rows(_stored(store, key, "counters")),
                                  rows(read_reports(layout.discover(entry)).counters))
    assert len(_stored(store, key, "rapl_energy")) == 10


def test_a_quiet_csv_row_cut_inside_a_number_is_read_again_whole_when_continued(tmp_path):
    """A quiet file's last row without a line end is taken when it has every field, but
    ``...,6028271`` may be ``...,6028271234`` cut short: when the file goes on with that row
    (no line end where the row ended) the entry is read whole again, the wrong value gone."""
    entry = tmp_path / "landing" / "hwpc-csv"
    rest = _csv_folder_with_an_unterminated_row(entry, cut_back=4)  # inside the last number
    store = ReportStore(Warehouse(tmp_path / "warehouse"))
    key = "landing/hwpc-csv"
    assert _ingest(store, key, entry, quiet_s=0)["rapl_energy"] == 6  # the cut row taken
    assert store.progress(key).files["hwpc-csv/rapl.csv"].read_to_byte == len(
        "".join((EXAMPLES / "hwpc-csv" / "rapl.csv").read_text().splitlines(True)[:6]))
    assert _ingest(store, key, entry, quiet_s=0)["counters"] == 0  # unchanged: nothing new
    for name, lines in rest.items():
        with (entry / name).open("a") as file:
            file.write("".join(lines))
    assert _ingest(store, key, entry, **WRITING)["rapl_energy"] == 10
    assert (store.progress(key).generation, store.progress(key).pieces) == (1, 1)
    _stored_equals_whole(store, key, entry)


def test_a_quiet_csv_row_without_a_line_end_is_read_on_when_the_line_end_follows(tmp_path):
    """The row was whole: the file goes on with its line end, read on after it (not again)."""
    entry = tmp_path / "landing" / "hwpc-csv"
    rest = _csv_folder_with_an_unterminated_row(entry, cut_back=1)  # the line end only
    store = ReportStore(Warehouse(tmp_path / "warehouse"))
    key = "landing/hwpc-csv"
    assert _ingest(store, key, entry, quiet_s=0)["rapl_energy"] == 6
    for name, lines in rest.items():
        with (entry / name).open("a") as file:
            file.write(lines[0])  # the line end alone: nothing new
    assert _ingest(store, key, entry, **WRITING)["counters"] == 0
    for name, lines in rest.items():
        with (entry / name).open("a") as file:
            file.write("".join(lines[1:]))
    assert _ingest(store, key, entry, **WRITING)["rapl_energy"] == 4
    assert (store.progress(key).generation, store.progress(key).pieces) == (0, 2)
    _stored_equals_whole(store, key, entry)


def test_progress_stored_without_line_based_makes_the_entry_be_read_whole_again(tmp_path):
    """Progress kept before ``line_based`` and ``tail_bytes`` cannot say where a line-based
    read may go on: the entry is read whole again once, each report stored once."""
    path = tmp_path / "landing" / "power.jsonl"
    path.parent.mkdir()
    shutil.copy(EXAMPLES / "power.jsonl", path)
    store = ReportStore(Warehouse(tmp_path / "warehouse"))
    key = "landing/power.jsonl"
    _ingest(store, key, path, quiet_s=0)
    old = store.progress(key).frame().drop(columns=["line_based", "tail_bytes"])
    store.tables.write_partition("powerapi_validated_frames/progress", key, old)
    assert store.progress(key).files["power.jsonl"].line_based is None
    assert _ingest(store, key, path, quiet_s=0)["power_reports"] == 40
    assert (store.progress(key).generation, store.progress(key).pieces) == (1, 1)
    assert len(_stored(store, key, "power_reports")) == 40
