"""What a benchmark ran on: CPU count and model, the load, and the versions that matter."""

from __future__ import annotations

import os
import platform
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
