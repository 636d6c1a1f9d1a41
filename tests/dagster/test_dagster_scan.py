"""The incremental scan behind the sensor (Dagster-free)."""

import shutil
import time

import joulehouse.gpu.scan as scan_module
from joulehouse import treescan
from joulehouse.gpu.generator import RepetitionSpec, write_data_root
from joulehouse.gpu.scan import ScanState, scan

SMALL = RepetitionSpec(duration_s=4.0, epochs=1)


def test_scan_lists_only_changed_run_folders(tmp_path, monkeypatch):
    runs = {"e": {"b": [f"{w}W" for w in range(100, 200, 10)]}}
    write_data_root(tmp_path, runs, repetitions=1, base=SMALL)
    first = scan(tmp_path, ScanState(), quiet_s=0)
    assert len(first.ready) == 10 and first.unlisted == 0
    write_data_root(tmp_path, {"e": {"b": ["150W"]}}, repetitions=3, base=SMALL)  # adds 1, 2
    listed = []
    real = scan_module.subdirs
    monkeypatch.setattr(scan_module, "subdirs",
                        lambda path, **kw: listed.append(path) or real(path, **kw))
    later = time.time() + 1  # past the quiet period of 0.5 s
    second = scan(tmp_path, ScanState.from_json(first.state.to_json()), quiet_s=0.5, now=later)
    assert sorted(r.ref.key for r in second.ready) == ["e/b/150W/0", "e/b/150W/1", "e/b/150W/2"]
    assert [p.name for p in listed] == ["150W"]  # the other folders were only stat'ed


def test_state_is_compact_json(tmp_path):
    runs = {"e": {b: ["100W", "200W"] for b in ("b1", "b2")}}
    write_data_root(tmp_path, runs, repetitions=2, base=SMALL)
    result = scan(tmp_path, ScanState(), quiet_s=0)
    text = result.state.to_json()
    assert text.isascii() and len(text) < 600
    again = ScanState.from_json(text)
    assert again.runs == result.state.runs and again.tree == result.state.tree
    assert ScanState.from_json(None).tree == {}


def test_removed_folders_are_forgotten_once_absent_for_forget_after_s(tmp_path):
    write_data_root(tmp_path, {"e": {"b": ["100W", "200W"]}}, repetitions=1, base=SMALL)
    now = time.time() + 1
    first = scan(tmp_path, ScanState(), quiet_s=0, now=now)
    shutil.rmtree(tmp_path / "e/b/200W")
    second = scan(tmp_path, first.state, quiet_s=0, now=now)
    assert second.ready == [] and "e/b/200W" in second.state.runs  # kept a while
    third = scan(tmp_path, second.state, quiet_s=0, now=now + treescan.FORGET_AFTER_S)
    assert third.ready == [] and "e/b/200W" not in third.state.runs
    assert "200W" not in third.state.tree["e/b"] and third.state.gone == {}
