"""Data-root layout: run names, repetition discovery, completeness, fingerprints."""

import os

import pytest

from joulehouse.gpu.layout import (
    RepetitionRef,
    RunSettings,
    find_repetitions,
    fingerprint,
    folder_level,
    is_complete,
    parse_settings,
    root_name,
    run_repetitions,
    subdirs,
)


@pytest.mark.parametrize(
    ("run", "experiment", "expected"),
    [
        ("877MHz,1065MHz", "clock-limit", RunSettings("877MHz,1065MHz", 877, 1065)),
        ("250W", "whatever", RunSettings("250W", power_limit_w=250.0)),
        ("162.5W", "power-limit", RunSettings("162.5W", power_limit_w=162.5)),
        ("250", "power-limit", RunSettings("250", power_limit_w=250.0)),
        ("250", "clock-limit", RunSettings("250")),
        ("baseline-run", "power-limit", RunSettings("baseline-run")),
    ],
)
def test_parse_settings(run, experiment, expected):
    assert parse_settings(run, experiment) == expected


def test_find_repetitions_four_levels_sorted(tmp_path):
    for key in ["b/x/250W/1", "a/x/150W/0", "b/x/250W/0", "a/x/150W/.hidden"]:
        (tmp_path / key).mkdir(parents=True)
    (tmp_path / "a" / "x" / "stray.txt").write_text("not a run")
    refs = find_repetitions(tmp_path)
    assert [r.key for r in refs] == ["a/x/150W/0", "b/x/250W/0", "b/x/250W/1"]
    assert refs[1] == RepetitionRef(tmp_path, "b/x/250W/0", "b", "x", "250W", "0")
    assert refs[1].path == tmp_path / "b" / "x" / "250W" / "0"
    assert refs[1].run_dir == refs[1].path.parent and refs[1].run_key == "b/x/250W"
    assert run_repetitions(tmp_path / "b/x/250W") == refs[1:]


def test_subdirs_sorted_without_hidden_or_files_and_missing_only_when_allowed(tmp_path):
    for name in ("b", "a", ".hidden"):
        (tmp_path / name).mkdir()
    (tmp_path / "c.txt").write_text("")
    assert subdirs(tmp_path) == subdirs(tmp_path, missing_ok=True) == ["a", "b"]
    with pytest.raises(FileNotFoundError):
        subdirs(tmp_path / "gone")
    assert subdirs(tmp_path / "gone", missing_ok=True) == []


def test_root_name_is_the_resolved_folder_name(tmp_path, monkeypatch):
    (tmp_path / "lab").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "lab")
    monkeypatch.chdir(tmp_path / "lab")
    assert root_name(".") == root_name(tmp_path / "link") == root_name("../lab/") == "lab"


def test_folder_level_is_told_by_where_timestamps_are(tmp_path):
    (tmp_path / "e/x/250W/0").mkdir(parents=True)
    assert folder_level(tmp_path / "e/x/250W") is None
    (tmp_path / "e/x/250W/0/timestamps.csv").write_text("")
    levels = [folder_level(tmp_path / rel) for rel in ("e/x/250W/0", "e/x/250W", "e/x", "e")]
    assert levels == ["repetition", "run", "benchmark", None]
    assert folder_level(tmp_path / "missing") is None


def test_is_complete_reads_the_end_event(tmp_path):
    assert not is_complete(tmp_path)
    timestamps = tmp_path / "timestamps.csv"
    timestamps.write_text(",timestamp,event,data\n0,2020-11-16 13:49:17,experiment_begin,0\n")
    assert not is_complete(tmp_path)
    filler = "".join(f"{i},2020-11-16 13:49:18,batch_end,{i}\n" for i in range(1, 500))
    timestamps.write_text(timestamps.read_text() + filler
                          + "500,2020-11-16 13:50:17,experiment_end,0\n")
    assert is_complete(tmp_path)


def test_fingerprint_changes_with_any_file(repetition):
    ref, _ = repetition
    before = fingerprint(ref.path)
    assert before == fingerprint(ref.path) and len(before) == 16
    info = ref.path / "system_info.json"
    stat = info.stat()
    os.utime(info, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1000))
    touched = fingerprint(ref.path)
    assert touched != before
    (ref.path / "extra.csv").write_text("x\n")
    assert fingerprint(ref.path) != touched
