"""The suite's CPU report (``benchmarks/suite_cpu.py``) from process accounting records
written here as Linux writes them (``struct acct_v3``): their CPU decoded, only the
command's processes kept, each told by its command line."""

from __future__ import annotations

from suite_cpu import ACCT_V3, descendants, kind, records

#: pid, parent's pid, name, user and system ticks as ``comp_t``: 0x2001 is 1 << 3 = 8.
PROCESSES = [(10, 1, b"python", 150, 50), (11, 10, b"python", 0x2001, 2),
             (12, 11, b"postgres", 7, 0), (13, 10, b"python", 0, 0), (20, 1, b"python", 99, 0)]


def _written(path) -> None:
    path.write_bytes(b"".join(
        ACCT_V3.pack(0, 3, 0, 0, 0, 0, pid, ppid, 0, 0.0, user, system, 0, 0, 0, 0, 0, 0, name)
        for pid, ppid, name, user, system in PROCESSES) + ACCT_V3.pack(
        0, 2, *([0] * 7), 0.0, *([0] * 8), b"v2 record"))  # another version: left out


def test_records_decode_cpu_and_keep_the_commands_processes(tmp_path):
    _written(tmp_path / "pacct")
    found = records(tmp_path / "pacct")
    assert [(r["pid"], r["ppid"], r["name"], r["cpu_s"]) for r in found] == [
        (10, 1, "python", 2.0), (11, 10, "python", 0.1), (12, 11, "postgres", 0.07),
        (13, 10, "python", 0.0), (20, 1, "python", 0.99)]
    below = descendants(found, 10)
    assert sorted(r["pid"] for r in below) == [11, 12, 13]  # not 10 itself, nor 20's
    spawned = ("/v/bin/python -c from multiprocessing.spawn import spawn_main; "
               "spawn_main(tracker_fd=16) --multiprocessing-fork")
    lines = {11: (10, spawned),
             13: (10, "/v/bin/python /v/bin/dagster-daemon run -w workspace.yaml")}
    assert [kind(r, lines) for r in sorted(below, key=lambda r: r["pid"])] == [
        "run worker, or a dask task process (multiprocessing spawn)", "postgres", "dagster-daemon"]
    assert kind(found[-1], {}) == "other Python"  # never sampled: its name says Python
