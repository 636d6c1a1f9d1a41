"""What a benchmark ran on: CPU count and model, the load, and the versions that matter;
and the CPU seconds a process of this machine has used (from /proc)."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from types import ModuleType


def describe(*packages: ModuleType, extra: str = "") -> str:
    """``2 CPUs (AMD EPYC ...); Python 3.11.7, pandas 2.3.3, ...`` plus ``extra``."""
    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    versions = "".join(f", {package.__name__} {package.__version__}" for package in packages)
    text = f"{os.cpu_count()} CPUs ({model}); Python {platform.python_version()}{versions}"
    return f"{text}; {extra}" if extra else text


def load_average() -> str:
    """The 1, 5 and 15-minute load averages, from /proc/loadavg."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the process's name (which may hold spaces and
    parentheses): the state is ``[0]``, the parent's pid ``[1]``, utime, stime, cutime
    and cstime ``[11:15]``."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def parent_pid(pid: int) -> int:
    """The pid of process ``pid``'s parent."""
    return int(_stat(pid)[1])


def cpu_seconds(pid: int, children: bool = False) -> float:
    """CPU seconds (user + system) process ``pid`` has used; with ``children``, plus those
    of its ended children it has waited for."""
    fields = [int(field) for field in _stat(pid)[11:15]]
    return sum(fields if children else fields[:2]) / os.sysconf("SC_CLK_TCK")


def code_root(default: Path) -> Path:
    """The checkout whose code a benchmark measures: ``--code DIR`` of the command line, read
    before the benchmark imports it (its ``--help`` names the option), else ``default``."""
    if "--code" in sys.argv:
        return Path(sys.argv[sys.argv.index("--code") + 1]).resolve()
    return default
