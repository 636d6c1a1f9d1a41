"""Landing folders (joulehouse.landing): which entries a tick hands out, and a cursor that
stays small: a ctime watermark per folder with the few entries changed after it."""

import json
import os
import time
from dataclasses import replace

import pytest

from joulehouse import landing
from joulehouse.landing import (
    LandedItem,
    LandingState,
    find_landed,
    list_landings,
    scan_landings,
)


def _item(key: str, last_change: float, fingerprint: str = "f", size: int = 0) -> LandedItem:
    return LandedItem(key, None, fingerprint, last_change, size)


def _tick(folder, state, identify=lambda path: [path], **scan):
    """One tick over ``folder`` (named 'in'), as the landing sensors do."""
    found = find_landed(folder, "in", identify, state.since.get("in"), state.sizes)
    return scan_landings(found, state, now=time.time(), **{"quiet_s": 0.0, **scan})


def _ctime(path) -> float:
    return os.lstat(path).st_ctime


def test_a_scan_hands_out_at_most_the_cap_oldest_first():
    items = [_item("in/a", 30.0), _item("in/b", 10.0), _item("in/c", 20.0), _item("in/d", 5.0)]
    first = scan_landings(items, LandingState(), quiet_s=1.0, now=100.0, cap=2)
    assert [i.key for i in first.ready] == ["in/b", "in/d"]  # the oldest, in the order given
    assert (first.waiting, first.deferred) == (2, 2)
    assert first.state.seen == {"in/b": "f", "in/d": "f"}  # the others are not handed out yet
    second = scan_landings(items, first.state, quiet_s=1.0, now=100.0, cap=2)
    assert [i.key for i in second.ready] == ["in/a", "in/c"] and second.deferred == 0
    third = scan_landings(items, second.state, quiet_s=1.0, now=100.0, cap=2)
    assert third.ready == [] and third.waiting == 0
    changed = [_item("in/a", 50.0, "g"), _item("in/b", 40.0, "g")]
    deferred = scan_landings(changed, third.state, quiet_s=1.0, now=100.0, cap=1)
    assert [i.key for i in deferred.ready] == ["in/b"] and deferred.waiting == 1
    again = scan_landings(changed, deferred.state, quiet_s=1.0, now=100.0, cap=1)
    assert [i.key for i in again.ready] == ["in/a"]


def test_the_cursor_stays_small_and_sees_every_later_change(tmp_path, monkeypatch):
    """100 files handed out over ticks of 30: the cursor ends holding the newest only (no
    clock step allowed here); a file rewritten in place (its mtime set back) or landing
    later is handed out, one unchanged behind the watermark is not even identified."""
    monkeypatch.setattr(landing, "CLOCK_MARGIN_S", 0.0)
    identified = []

    def identify(path):
        identified.append(path.name)
        return [path]

    for number in range(100):
        (tmp_path / f"r{number:03}.report").write_text(str(number))
    state, handed = LandingState(), []
    for _ in range(4):
        scan = _tick(tmp_path, state, identify, cap=30)
        handed += [item.key for item in scan.ready]
        state = scan.state
    assert sorted(handed) == [f"in/r{n:03}.report" for n in range(100)]  # each once
    changes = {f"in/{path.name}": _ctime(path) for path in tmp_path.iterdir()}
    assert state.since == state.newest == {"in": max(changes.values())}  # nothing waits
    assert set(state.seen) == {key for key, at in changes.items() if at == state.since["in"]}
    assert LandingState.from_json(state.to_json()) == state
    identified.clear()
    time.sleep(0.05)
    (tmp_path / "r007.report").write_text("rewritten")
    os.utime(tmp_path / "r007.report", (0, 0))  # its mtime set back: the ctime still moved
    (tmp_path / "new.report").write_text("late")
    later = _tick(tmp_path, state, identify)
    assert sorted(item.key for item in later.ready) == ["in/new.report", "in/r007.report"]
    assert set(identified) - {"new.report", "r007.report"} <= {  # the newest, looked at again
        key.removeprefix("in/") for key in state.seen}
    after = _tick(tmp_path, later.state, identify)
    assert after.ready == [] and after.waiting == 0
    assert set(after.state.seen) <= {"in/new.report", "in/r007.report"}


def test_an_mtime_in_the_future_does_not_move_the_watermark(tmp_path):
    """A report copied with its writer's mtime an hour ahead (cp -p, a clock ahead): the
    watermark follows ctimes, so the reports landing after it are still handed out."""
    ahead = tmp_path / "ahead.report"
    ahead.write_text("x")
    os.utime(ahead, (time.time() + 3600, time.time() + 3600))
    first = _tick(tmp_path, LandingState())
    assert [item.key for item in first.ready] == ["in/ahead.report"]
    second = _tick(tmp_path, first.state)
    assert second.state.since["in"] <= time.time()
    time.sleep(0.05)
    (tmp_path / "later.report").write_text("y")
    assert [item.key for item in _tick(tmp_path, second.state).ready] == ["in/later.report"]


def test_a_new_link_to_an_old_report_is_handed_out(tmp_path, monkeypatch):
    monkeypatch.setattr(landing, "CLOCK_MARGIN_S", 0.0)
    outside = tmp_path / "archive"
    outside.mkdir()
    (outside / "old.report").write_text("x")
    (outside / "old_set").mkdir()
    (outside / "old_set" / "profile.0.0.0").write_text("y")
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "first.report").write_text("z")
    time.sleep(0.05)
    state = _tick(folder, _tick(folder, LandingState()).state).state  # the watermark set
    assert state.since["in"] > _ctime(outside / "old.report")
    time.sleep(0.05)
    (folder / "link.report").symlink_to(outside / "old.report")
    (folder / "link_set").symlink_to(outside / "old_set", target_is_directory=True)
    linked = _tick(folder, state, lambda path: [path, *path.glob("*")])
    assert sorted(item.key for item in linked.ready) == ["in/link.report", "in/link_set"]


def test_each_landing_folder_has_its_own_watermark():
    """Folder 'a' is on a server whose clock runs 600 s ahead of folder 'b''s: b's reports
    landing after a's are still handed out; a name pointed at another folder starts
    afresh, and one no longer configured is forgotten."""
    items = [_item("a/x", 1600.0), _item("b/y", 1000.0)]
    first = scan_landings(items, LandingState(), quiet_s=0.0, now=2000.0)
    second = scan_landings(items, first.state, quiet_s=0.0, now=2000.0)
    assert second.state.since == {"a": 1480.0, "b": 880.0}
    later = [*items, _item("b/z", 1030.0)]
    assert [i.key for i in scan_landings(later, second.state, quiet_s=0.0,
                                         now=2000.0).ready] == ["b/z"]
    state = replace(second.state, folders={"a": "/mnt/a", "b": "/mnt/b"})
    moved = state.over({"a": "/mnt/a", "b": "/mnt/elsewhere/b"})
    assert (moved.since, moved.seen.keys()) == ({"a": 1480.0}, {"a/x"})
    assert moved.over({"a": "/mnt/a"}).folders == {"a": "/mnt/a"}
    assert [i.key for i in scan_landings(items, moved, quiet_s=0.0,
                                         now=2000.0).ready] == ["b/y"]  # the new b's


def test_a_clock_ahead_or_a_link_to_another_device_does_not_carry_the_watermark():
    """A report whose ctime is an hour ahead (a server clock ahead, then set back) moves
    the watermark no further than the tick's time; an entry on another device is compared
    by fingerprint, whatever the watermark."""
    first = scan_landings([_item("in/ahead", 5600.0)], LandingState(), quiet_s=0.0,
                          now=2000.0)
    second = scan_landings([_item("in/ahead", 5600.0)], first.state, quiet_s=0.0, now=2010.0)
    assert second.state.newest == {"in": 2010.0} and second.state.since == {"in": 1880.0}
    landed = [_item("in/ahead", 5600.0), _item("in/next", 2020.0)]
    assert [i.key for i in scan_landings(landed, second.state, quiet_s=0.0,
                                         now=2030.0).ready] == ["in/next"]
    linked = replace(_item("in/linked", 10.0), foreign=True)
    handed = scan_landings([linked], second.state, quiet_s=0.0, now=2030.0)
    assert handed.ready == [linked] and "in/linked" in handed.state.seen
    assert scan_landings([linked], handed.state, quiet_s=0.0, now=2040.0).ready == []
    rewritten = replace(linked, fingerprint="g")
    assert scan_landings([rewritten], handed.state, quiet_s=0.0,
                         now=2040.0).ready == [rewritten]


def test_an_earlier_cursor_is_read_and_a_stream_keeps_its_size_until_quiet():
    fingerprints = {"in/a": "f", "in/b": "f"}
    assert LandingState.from_json(json.dumps(fingerprints)) == LandingState(seen=fingerprints)
    earlier = json.dumps({"seen": fingerprints, "sizes": {"in/a": 5}})
    assert LandingState.from_json(earlier) == LandingState(seen=fingerprints)
    stream = _item("in/s", 99.0, "f1", size=2000)
    grown = scan_landings([stream], LandingState(), quiet_s=1000.0, now=100.0,
                          grown_bytes=1000)
    assert grown.ready == [stream] and grown.state.sizes == {"in/s": 2000}
    # Other reports land while it is not quiet: the watermark passes it, its size is kept.
    other = _item("in/o", 300.0)
    state = grown.state
    for now in (310.0, 320.0):
        state = scan_landings([stream, other], state, quiet_s=1000.0, now=now,
                              grown_bytes=1000).state
    assert state.since["in"] > stream.last_change and state.sizes == {"in/s": 2000}
    small = replace(stream, fingerprint="f2", last_change=329.0, size=2010)
    waits = scan_landings([small, other], state, quiet_s=1000.0, now=330.0, grown_bytes=1000)
    assert waits.ready == []  # 10 bytes more: it waits (the other report is not quiet yet)
    assert waits.state.sizes == {"in/s": 2000}
    quiet = scan_landings([small, other], waits.state, quiet_s=1000.0, now=1400.0,
                          grown_bytes=1000)
    assert quiet.ready == [small, other] and quiet.state.sizes == {}  # whole, quiet


def test_a_stream_grown_by_less_than_grown_bytes_is_handed_out_grown_wait_s_after_seen():
    """A stream that never goes quiet and grows slowly waits ``grown_wait_s`` from the tick
    that first saw it changed, however little it grew; the wait starts again after each
    hand-out, is kept in the cursor (and across a tick its folder was not listed), and only
    a source with ``grown_wait_s`` keeps it."""
    scan = {"quiet_s": 1000.0, "grown_bytes": 1 << 20, "grown_wait_s": 30.0}
    stream = _item("in/s", 99.0, "f1", size=200)
    first = scan_landings([stream], LandingState(), now=100.0, **scan)
    assert first.ready == [] and first.waiting == 1 and first.state.pending == {"in/s": 100.0}
    grown = replace(stream, fingerprint="f2", last_change=125.0, size=300)
    almost = scan_landings([grown], first.state, now=129.0, **scan)
    assert almost.ready == [] and almost.state.pending == {"in/s": 100.0}  # not a new wait
    restored = LandingState.from_json(almost.state.to_json())
    assert restored == almost.state
    kept = scan_landings([], restored, now=131.0, unlisted={"in"}, **scan)
    assert kept.state.pending == {"in/s": 100.0}  # its folder not listed this tick
    handed = scan_landings([grown], kept.state, now=131.0, **scan)
    assert handed.ready == [grown] and handed.state.pending == {}
    assert handed.state.sizes == {"in/s": 300}
    more = replace(grown, fingerprint="f3", last_change=140.0, size=310)
    again = scan_landings([more], handed.state, now=141.0, **scan)
    assert again.ready == [] and again.state.pending == {"in/s": 141.0}
    assert scan_landings([more], again.state, now=171.0, **scan).ready == [more]
    without = scan_landings([stream], LandingState(), now=100.0, quiet_s=1000.0,
                            grown_bytes=1 << 20)
    assert without.ready == [] and without.state.pending == {}
    earlier = json.loads(first.state.to_json())
    del earlier["pending"]  # a cursor written before waits were kept: the wait starts again
    assert LandingState.from_json(json.dumps(earlier)).pending == {}


def test_waits_are_forgotten_with_their_entry_kept_over_the_cap_and_bounded(monkeypatch):
    """An entry gone forgets its wait; one held back by the cap keeps the time its wait
    started; a folder now pointing elsewhere forgets its entries' waits; a burst keeps
    the PENDING_MAX longest waits, and a later tick adds no newer one past the bound."""
    scan = {"quiet_s": 1000.0, "grown_wait_s": 30.0}
    a, b = _item("in/a", 99.0, "fa"), _item("in/b", 98.0, "fb")
    first = scan_landings([a, b], LandingState(folders={"in": "/x"}), now=100.0, **scan)
    assert first.state.pending == {"in/a": 100.0, "in/b": 100.0}
    assert scan_landings([a], first.state, now=110.0, **scan).state.pending == {"in/a": 100.0}
    capped = scan_landings([a, b], first.state, now=130.0, cap=1, **scan)
    assert capped.ready == [b] and capped.deferred == 1
    assert capped.state.pending == {"in/a": 100.0}  # its wait is not started again
    assert capped.state.over({"in": "/y"}).pending == {}
    assert capped.state.over({"in": "/x"}).pending == {"in/a": 100.0}
    monkeypatch.setattr(landing, "PENDING_MAX", 2)
    burst = [_item(f"in/n{n}", 120.0 + n, f"f{n}") for n in range(4)]
    waits = scan_landings([a, *burst], capped.state, now=125.0, **scan).state.pending
    assert waits == {"in/a": 100.0, "in/n0": 125.0}
    late = _item("in/late", 125.5, "fl")
    assert scan_landings([a, *burst, late], LandingState(pending=waits, folders={"in": "/x"}),
                         now=126.0, **scan).state.pending == waits


def test_a_folder_that_cannot_be_listed_keeps_its_cursor_and_the_others_are_scanned(
        tmp_path, monkeypatch):
    """Landing folder 'b' goes missing (an NFS mount briefly absent), then is an empty mount
    point, then is not a folder: each time it is named with why, 'a' is still scanned, and
    b's cursor is kept, so that nothing of b is handed out again once it is back."""
    monkeypatch.setattr(landing, "CLOCK_MARGIN_S", 0.0)
    folders = {"a": tmp_path / "a", "b": tmp_path / "b"}
    for name, folder in folders.items():
        folder.mkdir()
        for number in range(3):
            (folder / f"{name}{number}.report").write_text(str(number))

    def tick(state):
        listing = list_landings(folders, state, lambda path: [path])
        return listing, scan_landings(listing.items, state, quiet_s=0.0, now=time.time(),
                                      unlisted=listing.unlisted, devices=listing.devices)

    state = LandingState()
    for _ in range(2):  # the second moves the watermarks past every report
        state = tick(state)[1].state
    assert set(state.since) == {"a", "b"}
    (tmp_path / "b").rename(tmp_path / "b.away")
    time.sleep(0.05)
    (folders["a"] / "late.report").write_text("late")
    listing, missing = tick(state)
    assert list(listing.unlisted) == ["b"]
    assert listing.unlisted["b"].startswith(f"landing folder 'b' ({folders['b']}) cannot be "
                                            "listed (No such file or directory)")
    assert [item.key for item in missing.ready] == ["a/late.report"]
    for field_ in ("since", "newest"):
        assert getattr(missing.state, field_)["b"] == getattr(state, field_)["b"]
    assert {k: f for k, f in missing.state.seen.items() if k.startswith("b/")} == {
        k: f for k, f in state.seen.items() if k.startswith("b/")}

    folders["b"].mkdir()  # the empty mount point: the device of the folder below it
    device = landing._device
    with monkeypatch.context() as patch:
        patch.setattr(landing, "_device", lambda path: device(path) + (path == folders["b"]))
        listing, empty = tick(missing.state)
    assert listing.unlisted["b"] == (f"landing folder 'b' ({folders['b']}) lists no entry where "
                                     "entries were seen before, on another device (a file "
                                     "system not mounted?)")
    assert empty.ready == [] and empty.state.since["b"] == state.since["b"]
    assert empty.state.devices == state.devices == {"a": device(folders["a"]),
                                                    "b": device(tmp_path / "b.away")}
    folders["b"].rmdir()
    (tmp_path / "b").write_text("not a folder")
    listing, _ = tick(empty.state)
    assert "cannot be listed (Not a directory)" in listing.unlisted["b"]
    (tmp_path / "b").unlink()

    (tmp_path / "b.away").rename(tmp_path / "b")  # back: nothing handed out again
    listing, back = tick(empty.state)
    assert listing.unlisted == {} and back.ready == [] and back.waiting == 0


def test_an_entry_whose_ctime_alone_moved_is_handed_out_again_once(tmp_path, monkeypatch):
    """'a.report' was handed out and the watermark passed it: a chmod moves its ctime, not
    its fingerprint, and it is handed out again once (one idempotent re-run, the known
    cost); 'b.report', untouched, is not."""
    monkeypatch.setattr(landing, "CLOCK_MARGIN_S", 0.0)
    (tmp_path / "a.report").write_text("a")
    time.sleep(0.05)
    (tmp_path / "b.report").write_text("b")
    first = _tick(tmp_path, LandingState())
    assert sorted(item.key for item in first.ready) == ["in/a.report", "in/b.report"]
    state = _tick(tmp_path, first.state).state  # the watermark passes a.report
    assert list(state.seen) == ["in/b.report"]
    assert state.since["in"] == _ctime(tmp_path / "b.report") > _ctime(tmp_path / "a.report")
    time.sleep(0.05)
    fingerprint = next(i.fingerprint for i in first.ready if i.key == "in/a.report")
    os.chmod(tmp_path / "a.report", 0o600)
    again = _tick(tmp_path, state)
    assert [(item.key, item.fingerprint) for item in again.ready] == [
        ("in/a.report", fingerprint)]
    assert _tick(tmp_path, again.state).ready == []


def test_an_unreadable_entry_leaves_its_folder_unlisted_with_its_cursor_kept(tmp_path):
    """'in/locked' cannot be read (identify's PermissionError: a folder of another user's,
    mode 0700): the whole folder is left out, named with the entry and why, and its cursor
    is kept byte for byte, so 'late.report' landing meanwhile waits; once readable,
    'locked' and 'late.report' are handed out once, nothing else again. A handed-out
    entry unreadable for one tick (a stale handle) is not handed out again, and an entry
    holding a dangling link is named the same way."""
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("a.report", "b.report"):
        (folder / name).write_text(name)
    unreadable = {}

    def identify(path):
        if path.name in unreadable:
            raise unreadable[path.name](path)
        return [path, *path.iterdir()] if path.is_dir() else [path]

    def tick(state):
        listing = list_landings({"in": folder}, state, identify)
        return listing, scan_landings(listing.items, state, quiet_s=0.0, now=time.time(),
                                      unlisted=listing.unlisted, devices=listing.devices)

    listing, first = tick(LandingState())
    assert [item.key for item in first.ready] == ["in/a.report", "in/b.report"]
    state = tick(first.state)[1].state
    time.sleep(0.05)
    (folder / "locked").write_text("locked")
    (folder / "late.report").write_text("late")
    unreadable["locked"] = lambda path: PermissionError(13, "Permission denied", str(path))
    with pytest.raises(landing.UnreadableEntry):
        find_landed(folder, "in", identify)
    for _ in range(2):
        listing, scan = tick(state)
        assert listing.items == [] and listing.unlisted == {"in": (
            f"landing folder 'in' ({folder}) not listed: entry 'in/locked' "
            f"({folder / 'locked'}) cannot be read (Permission denied); its cursor is kept")}
        assert scan.ready == [] and scan.state.to_json() == state.to_json()
    del unreadable["locked"]
    listing, readable = tick(state)
    assert listing.unlisted == {}
    assert [item.key for item in readable.ready] == ["in/late.report", "in/locked"]
    state = readable.state
    assert tick(state)[1].ready == []

    unreadable["a.report"] = lambda path: OSError(116, "Stale file handle", str(path))
    listing, blip = tick(state)
    assert "entry 'in/a.report'" in listing.unlisted["in"]
    assert blip.state.to_json() == state.to_json()
    del unreadable["a.report"]
    assert tick(blip.state)[1].ready == []

    (folder / "set").mkdir()
    (folder / "set" / "profile.0").symlink_to(tmp_path / "nowhere")
    listing, dangling = tick(state)
    assert listing.unlisted == {"in": (
        f"landing folder 'in' ({folder}) not listed: entry 'in/set' ({folder / 'set'}) "
        f"holds a dangling link {folder / 'set' / 'profile.0'}; its cursor is kept")}
    assert dangling.state.to_json() == state.to_json()
    (tmp_path / "nowhere").write_text("0")
    time.sleep(0.05)
    assert [item.key for item in tick(state)[1].ready] == ["in/set"]


def test_a_folder_emptied_on_its_own_device_is_just_empty(tmp_path, monkeypatch):
    """Every report of 'in' archived away: the folder is on the device it was on, so it is
    empty, not unmounted (listed, nothing named), and what lands next is handed out."""
    monkeypatch.setattr(landing, "CLOCK_MARGIN_S", 0.0)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "old.report").write_text("old")

    def tick(state):
        listing = list_landings({"in": folder}, state, lambda path: [path])
        return listing, scan_landings(listing.items, state, quiet_s=0.0, now=time.time(),
                                      unlisted=listing.unlisted, devices=listing.devices)

    listing, first = tick(LandingState())
    assert [item.key for item in first.ready] == ["in/old.report"]
    assert first.state.devices == {"in": os.stat(folder).st_dev}
    assert LandingState.from_json(first.state.to_json()) == first.state
    (folder / "old.report").unlink()
    for _ in range(2):
        listing, empty = tick(first.state)
        assert listing.unlisted == {} and empty.ready == [] and empty.waiting == 0
    time.sleep(0.05)
    (folder / "new.report").write_text("new")
    listing, new = tick(empty.state)
    assert [item.key for item in new.ready] == ["in/new.report"]
