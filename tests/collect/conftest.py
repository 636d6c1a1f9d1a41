"""Fixtures for the collector tests: the fake NVML in place of pynvml, in this process
or in a collector subprocess (``run_collector.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_nvml import FakeNvml

import joulehouse.collect.nvml as nvml_boundary

HERE = Path(__file__).resolve().parent
PROJECT_ROOT = HERE.parent.parent
PYTHON = sys.executable


def sleep_command(seconds: float) -> list[str]:
    """A command that does nothing for ``seconds``."""
    return [PYTHON, "-c", f"import time; time.sleep({seconds})"]


@pytest.fixture
def fake_nvml(monkeypatch):
    """``fake_nvml(**FakeNvml options)`` installs a fake NVML in this process and returns it."""
    def install(**options) -> FakeNvml:
        fake = FakeNvml(**options)
        monkeypatch.setattr(nvml_boundary, "pynvml", fake)
        return fake
    return install


class Collector:
    """``joulehouse ARGS...`` in a subprocess with a fake NVML; its limit calls logged."""

    def __init__(self, tmp: Path, args: list[str], **options) -> None:
        self.log = tmp / "nvml-calls.jsonl"
        env = os.environ | {"FAKE_NVML": json.dumps(options | {"log": str(self.log)}),
                            "PYTHONPATH": str(PROJECT_ROOT)}
        # its own session: SIGKILL can take the collector and its command together
        self.process = subprocess.Popen([PYTHON, str(HERE / "run_collector.py"), *args],
                                        cwd=PROJECT_ROOT, env=env, stderr=subprocess.PIPE,
                                        text=True, start_new_session=True)

    def wait_for_rows(self, path: Path, rows: int, timeout_s: float = 60.0) -> None:
        """Wait until ``path`` has ``rows`` data rows (the collector is measuring)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if path.is_file() and path.read_text().count("\n") > rows:
                return
            if self.process.poll() is not None:
                raise AssertionError(f"collector ended early: {self.process.stderr.read()}")
            time.sleep(0.05)
        raise AssertionError(f"{path}: fewer than {rows} rows after {timeout_s} s")

    def calls(self) -> list[list]:
        """The fake's limit-setting calls, in order."""
        if not self.log.is_file():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def collector(tmp_path):
    """``collector(args, **FakeNvml options)``: a collector subprocess (killed at the end)."""
    started: list[Collector] = []

    def start(args: list[str], **options) -> Collector:
        started.append(Collector(tmp_path, args, **options))
        return started[-1]
    yield start
    for one in started:
        if one.process.poll() is None:
            os.killpg(one.process.pid, 9)
            one.process.wait()
