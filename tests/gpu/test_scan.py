"""The bounded scan (Dagster-free): the cap, the resumable first walk, the rolling rescan,
the cursor size. Trees of tiny repetitions (two small files each) keep these fast."""

import dataclasses
import os
import shutil
import time
from pathlib import Path

import joulehouse.gpu.scan as scan_module
from joulehouse.gpu.scan import ScanState, scan
from joulehouse.treescan import probe

TIMESTAMPS = ("timestamp,event,data\n2020-11-16 13:49:17,experiment_begin,0\n"
              "2020-11-16 13:59:17,experiment_end,0\n")
LATER = 10**10  # a clock far past every file's last change: everything is quiet


def write_repetition(folder: Path, timestamps: str = TIMESTAMPS) -> None:
    """A tiny repetition in ``folder`` (complete with the default ``timestamps``)."""
    folder.mkdir(parents=True)
    (folder / "timestamps.csv").write_text(timestamps)
    (folder / "gpu-power.csv").write_text(",timestamp,power\n0,2020-11-16,45\n")


def write_tree(root: Path, benchmarks: int, runs: int, repetitions: int) -> list[str]:
    """``e/b<i>/<run>W/<rep>`` tiny complete repetitions; their keys, sorted."""
    keys = []
    for b in range(benchmarks):
        for r in range(runs):
            for i in range(repetitions):
                key = f"e/b{b}/{100 + r}W/{i}"
                write_repetition(root / key)
                keys.append(key)
    return sorted(keys)


def scan_until_done(root: Path, state: ScanState, cap: int, now: float = LATER):
    """Scan until a tick reports nothing; the keys reported by each tick."""
    per_tick = []
    while True:
        result = scan(root, state, quiet_s=1, full_rescan_s=None, max_repetitions=cap, now=now)
        state = ScanState.from_json(result.state.to_json())
        if not result.ready:
            return per_tick, state, result
        per_tick.append([r.ref.key for r in result.ready])


def test_a_tree_larger_than_the_cap_is_reported_over_several_ticks(tmp_path):
    keys = write_tree(tmp_path, benchmarks=2, runs=5, repetitions=3)  # 30
    per_tick, _, last = scan_until_done(tmp_path, ScanState(), cap=7)
    assert [len(t) for t in per_tick] == [7, 7, 7, 7, 2]
    reported = [k for t in per_tick for k in t]
    assert sorted(reported) == keys and len(set(reported)) == len(reported)
    assert last.pending == last.unlisted == 0


def test_the_first_walk_lists_only_enough_run_folders_for_the_cap(tmp_path, monkeypatch):
    write_tree(tmp_path, benchmarks=1, runs=20, repetitions=5)
    listed = []
    real = scan_module.subdirs
    monkeypatch.setattr(scan_module, "subdirs",
                        lambda path, **kw: listed.append(path) or real(path, **kw))
    result = scan(tmp_path, ScanState(), quiet_s=1, max_repetitions=10, now=LATER)
    assert len(result.ready) == 10 and result.unlisted == 18
    assert sum(p.parent.name == "b0" for p in listed) == 2  # two run folders of 5


def test_folders_removed_while_the_scan_walks_are_left_out(tmp_path, monkeypatch):
    keys = write_tree(tmp_path, benchmarks=2, runs=2, repetitions=2)
    real = scan_module.subdirs

    def removed_once_stated(path, **kw):  # the folder goes between its stat and its listing
        if path.name in ("b1", "101W"):
            shutil.rmtree(path)
        return real(path, **kw)

    monkeypatch.setattr(scan_module, "subdirs", removed_once_stated)
    result = scan(tmp_path, ScanState(), quiet_s=1, now=LATER)
    assert [r.ref.key for r in result.ready] == [k for k in keys if k.startswith("e/b0/100W/")]
    assert result.state.tree["e/b1"] == [] and result.state.runs["e/b0/101W"].names == set()


def test_ready_repetitions_over_the_cap_wait_oldest_first(tmp_path):
    keys = write_tree(tmp_path, benchmarks=1, runs=1, repetitions=4)
    result = scan(tmp_path, ScanState(), quiet_s=1, max_repetitions=3, now=LATER)
    assert len(result.ready) == 3 and result.deferred == 1 and result.pending == 1
    ages = [r.last_change for r in result.ready]
    assert ages == sorted(ages)
    again = scan(tmp_path, result.state, quiet_s=1, max_repetitions=3, now=LATER)
    assert [r.ref.key for r in again.ready] == sorted(
        set(keys) - {r.ref.key for r in result.ready})


def test_the_rolling_rescan_finds_an_in_place_rewrite_within_one_pass(tmp_path):
    write_tree(tmp_path, benchmarks=2, runs=10, repetitions=2)  # 20 run folders
    _, state, _ = scan_until_done(tmp_path, ScanState(), cap=100, now=LATER)
    rewritten = tmp_path / "e/b0/103W/1/gpu-power.csv"
    rewritten.write_text(rewritten.read_text() + "1,2020-11-16,46\n")
    # 20 folders, a pass every 100 s, a tick every 10 s: 2 folders per tick, 10 ticks a pass
    found_at, rescanned = None, []
    for n in range(1, 11):
        result = scan(tmp_path, state, quiet_s=1, full_rescan_s=100, max_repetitions=100,
                      now=LATER + 10 * n)
        state = result.state
        rescanned.append(result.rescanned)
        if result.ready:
            found_at = found_at or n
            # one digest per run folder: the whole run folder is reported again
            assert sorted(r.ref.key for r in result.ready) == ["e/b0/103W/0", "e/b0/103W/1"]
    assert found_at is not None and rescanned[1:] == [2] * 9


def test_the_cursor_keeps_a_few_bytes_per_run_folder(tmp_path):
    write_tree(tmp_path, benchmarks=10, runs=50, repetitions=10)  # 5,000 in 500 run folders
    _, state, _ = scan_until_done(tmp_path, ScanState(), cap=5000)
    assert len(state.recent) == 500 + 10 + 2  # every folder changed within the clock margin
    state.recent = {}  # ... a minute later, as on a tree that is not all brand new
    size = len(state.to_json())
    # ~8 bytes per run folder: 100,000 repetitions in 10,000 run folders stay under 100 KB
    assert size < 10 * 500, size
    assert ScanState.from_json(state.to_json()).runs == state.runs


def test_repetitions_left_without_experiment_end_never_starve_the_scan(tmp_path, monkeypatch):
    # three repetitions a killed collector left without experiment_end, more than the cap,
    # older than a complete one in another run folder
    abandoned = write_tree(tmp_path, benchmarks=1, runs=1, repetitions=3)
    for key in abandoned:
        (tmp_path / key / "timestamps.csv").write_text(TIMESTAMPS.rsplit("2020", 1)[0])
    complete = tmp_path / "e/b0/300W/0"
    shutil.copytree(tmp_path / abandoned[0], complete)
    (complete / "timestamps.csv").write_text(TIMESTAMPS)
    asked = []
    tree = scan_module.TREE
    monkeypatch.setattr(scan_module, "TREE", dataclasses.replace(
        tree, is_complete=lambda path: asked.append(path.name) or tree.is_complete(path)))
    state, reported = ScanState(), []
    for _ in range(3):
        result = scan(tmp_path, ScanState.from_json(state.to_json()), quiet_s=1,
                      max_repetitions=2, now=LATER)
        state = result.state
        reported += [r.ref.key for r in result.ready]
    assert reported == ["e/b0/300W/0"]
    assert result.pending == result.incomplete == 3 and result.unlisted == 0
    assert len(asked) == 3 + 1  # each abandoned one asked once, then not while unchanged
    # completed later: asked again and reported
    (tmp_path / abandoned[0] / "timestamps.csv").write_text(TIMESTAMPS)
    again = scan(tmp_path, state, quiet_s=1, max_repetitions=2, now=LATER)
    assert [r.ref.key for r in again.ready] == [abandoned[0]] and again.incomplete == 2


def test_an_unreadable_run_folder_is_reported_and_the_scan_goes_on(tmp_path, monkeypatch):
    keys = write_tree(tmp_path, benchmarks=1, runs=2, repetitions=2)
    denied = tmp_path / "e/b0/100W"
    real = os.scandir

    def scandir(path="."):  # what a 0700 folder of another user gives
        if Path(path) == denied:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    first = scan(tmp_path, ScanState(), quiet_s=1, now=LATER)
    assert [r.ref.key for r in first.ready] == keys[2:]
    assert [e.path for e in first.errors] == [str(denied)]
    monkeypatch.setattr(os, "scandir", real)
    again = scan(tmp_path, first.state, quiet_s=1, now=LATER)
    assert [r.ref.key for r in again.ready] == keys[:2]


def test_an_emptied_data_root_keeps_the_state_and_nothing_comes_back(tmp_path):
    root = tmp_path / "lab"
    keys = write_tree(root, benchmarks=1, runs=2, repetitions=2)
    reported = scan(root, ScanState(), quiet_s=1, now=LATER)
    assert [r.ref.key for r in reported.ready] == keys
    (root / "e").rename(tmp_path / "away")  # unmounted: an empty mount point
    unmounted = scan(root, reported.state, quiet_s=1, now=LATER)
    assert unmounted.ready == [] and unmounted.state == reported.state
    assert [e.path for e in unmounted.errors] == [str(root)]
    (tmp_path / "away").rename(root / "e")
    assert scan(root, unmounted.state, quiet_s=1, now=LATER).ready == []


def test_abandoned_repetitions_remembered_are_bounded(tmp_path):
    abandoned = write_tree(tmp_path, benchmarks=1, runs=4, repetitions=5)  # 20
    for key in abandoned:
        (tmp_path / key / "timestamps.csv").write_text(TIMESTAMPS.rsplit("2020", 1)[0])
    state = ScanState()
    for tick in range(3):
        result = scan(tmp_path, ScanState.from_json(state.to_json()), quiet_s=1,
                      full_rescan_s=None, max_repetitions=50, now=LATER + tick,
                      max_incomplete=6)
        state = result.state
        assert result.ready == [] and result.pending == result.incomplete == 6
    newest = sorted(abandoned, key=lambda k: (probe(tmp_path / k)[0], k))[-6:]
    assert sorted(state.incomplete) == sorted(state.pending) == sorted(newest)
    # a forgotten one completed later is found when its run folder is listed again
    (tmp_path / abandoned[0] / "timestamps.csv").write_text(TIMESTAMPS)
    rescan = scan(tmp_path, state, quiet_s=1, full_rescan_s=0, max_repetitions=50,
                  now=LATER + 3, max_incomplete=6)
    assert [r.ref.key for r in rescan.ready] == [abandoned[0]]
    assert rescan.pending == rescan.incomplete == 6


#: A quiet period no repetition written by a test gets out of.
LONG_QUIET_S = 600.0
#: Without experiment_end: what a collector still measuring has written.
UNFINISHED = TIMESTAMPS.rsplit("2020", 1)[0]


def count_completeness_asks(monkeypatch) -> list[str]:
    """The keys the scan asks ``is_complete`` of, in order (``e/b/run/rep``)."""
    asked = []
    tree = scan_module.TREE
    monkeypatch.setattr(scan_module, "TREE", dataclasses.replace(
        tree, is_complete=lambda path: asked.append("/".join(path.parts[-4:]))
        or tree.is_complete(path)))
    return asked


def test_with_ready_when_complete_a_complete_repetition_is_ready_inside_its_quiet_period(
        tmp_path):
    keys = write_tree(tmp_path, benchmarks=1, runs=1, repetitions=2)
    waiting = scan(tmp_path, ScanState(), quiet_s=LONG_QUIET_S)
    assert waiting.ready == [] and waiting.pending == 2 and waiting.incomplete == 0
    at_once = scan(tmp_path, ScanState(), quiet_s=LONG_QUIET_S, ready_when_complete=True)
    assert [r.ref.key for r in at_once.ready] == keys and at_once.pending == 0
    # from the state of the tick that waited, too
    assert [r.ref.key for r in scan(tmp_path, waiting.state, quiet_s=LONG_QUIET_S,
                                    ready_when_complete=True).ready] == keys


def test_with_ready_when_complete_an_unfinished_repetition_is_asked_again_once_changed(
        tmp_path, monkeypatch):
    key = "e/b0/100W/0"
    write_repetition(tmp_path / key, UNFINISHED)
    asked = count_completeness_asks(monkeypatch)
    state = ScanState()
    for written in (False, False, True):
        if written:  # the collector still measuring
            with (tmp_path / key / "gpu-power.csv").open("a") as power:
                power.write("1,2020-11-16,46\n")
        result = scan(tmp_path, ScanState.from_json(state.to_json()), quiet_s=LONG_QUIET_S,
                      ready_when_complete=True)
        state = result.state
        assert result.ready == [] and result.pending == 1 and result.incomplete == 0
        assert state.pending == {key} and state.incomplete == {}
        assert state.early_incomplete == {key: probe(tmp_path / key)[1]}
    assert asked == [key] * 2  # not asked again while unchanged
    # once quiet, the rules of a quiet one: remembered incomplete, not asked again
    quiet = scan(tmp_path, state, quiet_s=1, now=LATER, ready_when_complete=True)
    assert quiet.ready == [] and quiet.incomplete == 1 and key in quiet.state.incomplete
    assert quiet.state.early_incomplete == {}
    assert scan(tmp_path, quiet.state, quiet_s=1, now=LATER + 1,
                ready_when_complete=True).incomplete == 1
    assert asked == [key] * 3
    # experiment_end written: ready at the next tick, long before its quiet period ends
    (tmp_path / key / "timestamps.csv").write_text(TIMESTAMPS)
    done = scan(tmp_path, state, quiet_s=LONG_QUIET_S, ready_when_complete=True)
    assert [r.ref.key for r in done.ready] == [key] and done.pending == 0
    assert done.state.early_incomplete == {}
    assert time.time() - done.ready[0].last_change < LONG_QUIET_S


def test_with_ready_when_complete_at_most_max_incomplete_unfinished_ones_are_remembered(
        tmp_path):
    unfinished = ["e/b0/100W/0", "e/b0/100W/1", "e/b0/100W/2"]
    for key in unfinished:
        write_repetition(tmp_path / key, UNFINISHED)
        time.sleep(0.01)
    result = scan(tmp_path, ScanState(), quiet_s=LONG_QUIET_S, max_incomplete=2,
                  ready_when_complete=True)
    assert sorted(result.state.early_incomplete) == unfinished[1:]  # those changed last
    assert result.pending == 3 and result.incomplete == 0  # all still pending, asked


def test_with_ready_when_complete_the_cap_takes_quiet_repetitions_first_oldest_first(
        tmp_path, monkeypatch):
    quiet = write_tree(tmp_path, benchmarks=1, runs=1, repetitions=2)  # e/b0/100W/0, 1
    time.sleep(0.2)
    fresh = ["e/b0/100W/2", "e/b0/100W/3"]  # in the same run folder: listed together
    for key in fresh:
        write_repetition(tmp_path / key)
    changes = {key: probe(tmp_path / key)[0] for key in quiet + fresh}
    now = min(changes[key] for key in fresh) / 1e9 + 0.01  # only the first two are quiet
    assert max(changes[key] for key in quiet) / 1e9 < now - 0.1
    asked = count_completeness_asks(monkeypatch)
    capped = scan(tmp_path, ScanState(), quiet_s=0.1, max_repetitions=3, now=now,
                  ready_when_complete=True)
    oldest_fresh = min(fresh, key=lambda k: (changes[k], k))
    assert [r.ref.key for r in capped.ready] == [*quiet, oldest_fresh] == asked
    # a fresh one left over, not asked: unasked, not deferred (it may be incomplete)
    assert capped.pending == capped.unasked == 1 and capped.deferred == 0
    # a cap below the quiet ones: the quiet ones first, the fresh ones not asked
    asked.clear()
    below = scan(tmp_path, ScanState(), quiet_s=0.1, max_repetitions=1, now=now,
                 ready_when_complete=True)
    assert [r.ref.key for r in below.ready] == quiet[:1] == asked
    assert below.pending == 3 and below.deferred == 1 and below.unasked == 2


def test_with_ready_when_complete_a_repetition_finished_while_asked_is_handed_out_once(
        tmp_path, monkeypatch):
    key = "e/b0/100W/0"
    write_repetition(tmp_path / key, UNFINISHED)
    tree, asked = scan_module.TREE, []

    def finished_when_first_asked(path: Path) -> bool:  # experiment_end lands in the gap
        if not asked:
            (path / "timestamps.csv").write_text(TIMESTAMPS)
        asked.append(path)
        return tree.is_complete(path)

    monkeypatch.setattr(scan_module, "TREE", dataclasses.replace(
        tree, is_complete=finished_when_first_asked))
    state = ScanState()
    per_tick = []
    for _ in range(3):  # the rolling rescan re-lists the run folder every tick
        result = scan(tmp_path, ScanState.from_json(state.to_json()), quiet_s=LONG_QUIET_S,
                      full_rescan_s=0, ready_when_complete=True)
        state = result.state
        per_tick.append([(r.ref.key, r.fingerprint) for r in result.ready])
    # complete, but not as probed before the ask: handed out at the next tick, as it is
    assert per_tick == [[], [(key, probe(tmp_path / key)[1])], []]
