"""Where the test suite's CPU goes: per kind of process and per test file.

The suite's wall time on a 2-CPU VM is bound by its CPU, and the VM's speed drifts by more
than a change saves, so a change to the suite is measured here in CPU seconds, per kind of
process, not in wall time. The command (default: ``CI=true bash .ci/run``, the README's
test command as CI runs it) runs with:

- Linux process accounting on (``acct(2)``, root only): a record of every process of the
  host that ends, with its CPU; those of the command are told from the rest by their
  parents, this process being the subreaper of the command's (``PR_SET_CHILD_SUBREAPER``:
  a daemon PostgreSQL or Slurm leaves, a process no test waits for, is still counted if
  it ends before the command does; one still running then has no record);
- the command lines of the processes, sampled every half second (a record holds only the
  first 15 characters of the program's name), to tell a run worker from a code server;
- a pytest plugin in every test process (``-p benchmarks.suite_cpu``): the CPU of each test file's
  tests (setup, call and teardown) in the test process, and in the children it waited for.

Writes ``DIR/report.md`` (printed too): the host's busy, idle and stolen seconds; CPU
seconds per kind of process; the test files taking the most. Figures and how to read them:
benchmarks/README.md, "The suite's CPU".

    sudo .venv/bin/python benchmarks/suite_cpu.py --out DIR [--top 30] [-- COMMAND ...]
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import os
import resource
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
#: ``struct acct_v3`` (linux/acct.h), 64 bytes: flag, version, tty, exit code, uid, gid,
#: pid, parent's pid, start (epoch s), elapsed (float, ticks), user and system CPU (comp_t,
#: ticks), then mem, io, rw, minflt, majflt, swaps (comp_t), and the program's name.
ACCT_V3 = struct.Struct("<BBHIIIIIIf8H16s")
ACCT_HZ = 100
PR_SET_CHILD_SUBREAPER = 36
#: What each kind of process is, by a piece of its command line (the first that matches),
#: for Python processes; any other process is its program's name.
KINDS = (("spawn_main", "run worker, or a dask task process (multiprocessing spawn)"),
         ("exec(eval(sys.stdin.readline()))", "pytest-xdist worker"),
         ("-m pytest", "pytest"),
         ("api grpc", "code server (dagster api grpc)"),
         ("code-server start", "code server (dagster code-server)"),
         ("dagster-daemon", "dagster-daemon"),
         ("dagster-webserver", "dagster-webserver"),
         ("moto.server", "moto (S3 test server)"),
         ("watch_orphans.py", "Dagster compute-log watcher"),
         ("benchmarks/soak.py", "soak harness"),
         ("distributed.cli", "dask"),
         ("bin/joulehouse", "joulehouse CLI"),
         ("bin/dg ", "dg CLI"),
         ("bin/dagster ", "dagster CLI"))


def _accounting(path: Path | None) -> None:
    """Process accounting into ``path``; off with None."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(str(path).encode() if path else None) != 0:
        raise OSError(ctypes.get_errno(), "acct(2) refused (root only)", str(path))


def _adopt_orphans() -> None:
    """Become the parent of every orphan among this process's descendants (Linux's child
    subreaper), so that each descendant's parent at its end is one of them."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) refused")


def descendants(processes: list[dict], root: int) -> list[dict]:
    """The records of ``processes`` below pid ``root`` (by each one's parent at its end)."""
    children = collections.defaultdict(list)
    for record in processes:
        children[record["ppid"]].append(record)
    found, below = [], [root]
    while below:
        for record in children.pop(below.pop(), []):
            found.append(record)
            below.append(record["pid"])
    return found


class Reaper(threading.Thread):
    """Reaps the orphans this process adopts (every 0.2 s), as init would: a test
    waiting for a process to be gone does not find it a zombie. The command's own process
    is left to ``subprocess`` to wait for."""

    def __init__(self, command_pid: int) -> None:
        super().__init__(daemon=True)
        self.command_pid = command_pid
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.2):
            while True:
                try:  # look without reaping: the command's end is subprocess's
                    ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:
                    break
                if ended is None or ended.si_pid == self.command_pid:
                    break
                os.waitpid(ended.si_pid, 0)


def _seconds(comp: int) -> float:
    """A ``comp_t`` (13-bit mantissa, 3-bit base-8 exponent) in ticks, as seconds."""
    return ((comp & 0x1FFF) << (3 * (comp >> 13))) / ACCT_HZ


def records(path: Path) -> list[dict]:
    """The processes ``path`` (version 3 records) holds: pid, parent, name, CPU seconds."""
    data = path.read_bytes()
    found = []
    for offset in range(0, len(data) - ACCT_V3.size + 1, ACCT_V3.size):
        fields = ACCT_V3.unpack_from(data, offset)
        if fields[1] != 3:
            continue
        found.append({"pid": fields[6], "ppid": fields[7],
                      "name": fields[18].split(b"\0", 1)[0].decode(errors="replace"),
                      "cpu_s": _seconds(fields[10]) + _seconds(fields[11])})
    return found


class CommandLines(threading.Thread):
    """pid -> (parent's pid, command line) of every process seen, sampled every 0.5 s."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: dict[int, tuple[int, str]] = {}
        self.stopped = threading.Event()

    def run(self) -> None:
        import psutil

        while not self.stopped.wait(0.5):
            for process in psutil.process_iter(["pid", "ppid", "cmdline"]):
                line = " ".join(process.info["cmdline"] or [])
                if line and process.info["pid"] not in self.seen:
                    self.seen[process.info["pid"]] = (process.info["ppid"], line)


def kind(record: dict, lines: dict[int, tuple[int, str]]) -> str:
    """What the process of ``record`` was (:data:`KINDS`)."""
    line = lines.get(record["pid"], (0, ""))[1]
    if "python" in line.split(" ", 1)[0] or record["name"].startswith("python"):
        return next((name for piece, name in KINDS if piece in line), "other Python")
    return record["name"]


def host_seconds() -> dict[str, float]:
    """The host's busy, idle and stolen CPU seconds since boot (/proc/stat)."""
    user, nice, system, idle, iowait, irq, softirq, steal = (
        int(value) / os.sysconf("SC_CLK_TCK")
        for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9])
    return {"busy": user + nice + system + irq + softirq, "idle": idle + iowait,
            "stolen": steal}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--top", type=int, default=30, help="test files listed")
    parser.add_argument("command", nargs="*", default=["bash", ".ci/run"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pacct, files = args.out / "pacct", args.out / "files"
    pacct.write_bytes(b"")
    files.mkdir(exist_ok=True)
    environment = {**os.environ, "CI": os.environ.get("CI", "true"),
                   "SUITE_CPU_FILES": str(files),
                   # the plugin's module, as ``benchmarks.suite_cpu``
                   "PYTHONPATH": os.pathsep.join(filter(None, [
                       str(PROJECT), os.environ.get("PYTHONPATH")])),
                   "PYTEST_ADDOPTS": " ".join(filter(None, [
                       os.environ.get("PYTEST_ADDOPTS"), "-p benchmarks.suite_cpu"]))}
    lines = CommandLines()
    lines.start()
    _adopt_orphans()
    before, started = host_seconds(), time.monotonic()
    _accounting(pacct)
    try:
        command = subprocess.Popen(args.command, cwd=PROJECT, env=environment)
        reaper = Reaper(command.pid)
        reaper.start()
        returncode = command.wait()
    finally:
        _accounting(None)
        lines.stopped.set()
    reaper.stopped.set()
    lines.join()
    after, wall = host_seconds(), time.monotonic() - started
    report = render(descendants(records(pacct), os.getpid()), lines.seen, files, args.top,
                    {name: after[name] - before[name] for name in after}, wall,
                    returncode)
    (args.out / "report.md").write_text(report)
    print(report)
    sys.exit(returncode)


def render(processes: list[dict], lines: dict[int, tuple[int, str]], files: Path, top: int,
           host: dict[str, float], wall: float, returncode: int) -> str:
    """The report: the host, CPU per kind of process, the costliest test files."""
    kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for record in processes:
        totals = kinds[kind(record, lines)]
        totals[0] += record["cpu_s"]
        totals[1] += 1
    accounted = sum(total for total, _ in kinds.values())
    head = (f"command exit {returncode}; wall {wall:.0f} s; host CPU-s: busy "
            f"{host['busy']:.0f}, idle {host['idle']:.0f}, stolen {host['stolen']:.0f}; "
            f"the command's {len(processes)} processes ended, {accounted:.0f} CPU-s")
    out = [head, "", "| kind of process | CPU-s | share | processes |", "|---|---:|---:|---:|"]
    for name, (total, count) in sorted(kinds.items(), key=lambda item: -item[1][0]):
        if total >= 1:
            out.append(f"| {name} | {total:.1f} | {100 * total / accounted:.1f} % | {count} |")
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for written in files.glob("*.json"):
        for name, values in json.loads(written.read_text()).items():
            by_file[name] = [a + b for a, b in zip(by_file[name], values, strict=True)]
    columns = (f"| test file (the {top} costliest) | CPU-s in the test process | in the "
               "children it waited for | wall s | tests |")
    out += ["", columns, "|---|---:|---:|---:|---:|"]
    for name, (own, children, seconds, tests) in sorted(
            by_file.items(), key=lambda item: -(item[1][0] + item[1][1]))[:top]:
        out.append(f"| {name} | {own:.1f} | {children:.1f} | {seconds:.1f} | {tests:.0f} |")
    return "\n".join(out) + "\n"


# --- the pytest plugin (``-p benchmarks.suite_cpu`` in every test process) -----------------

_by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])


def _now() -> tuple[float, float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime,
            time.monotonic())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Times each test's protocol (setup, call, teardown)."""
    start = _now()
    yield
    end = _now()
    totals = _by_file[item.nodeid.split("::", 1)[0]]
    for index in range(3):
        totals[index] += end[index] - start[index]
    totals[3] += 1


def pytest_sessionfinish(session):
    """Writes this test process's figures per test file, for the report."""
    folder = os.environ.get("SUITE_CPU_FILES")
    if folder:
        name = os.environ.get("PYTEST_XDIST_WORKER", f"pid{os.getpid()}")
        (Path(folder) / f"{name}.json").write_text(json.dumps(_by_file))


if __name__ == "__main__":
    main()
