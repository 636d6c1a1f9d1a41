"""``python run_collector.py ARGS...``: ``joulehouse ARGS...`` with the fake NVML in
place of pynvml, its options from the JSON in ``$FAKE_NVML`` (the tests' subprocess)."""

import json
import os
import sys

from fake_nvml import FakeNvml

import joulehouse.collect.nvml as nvml_boundary
from joulehouse.cli import main


def run(argv: list[str]) -> int:
    """``joulehouse argv`` with a new fake NVML (as a process of its own has): its exit
    status."""
    nvml_boundary.pynvml = FakeNvml(**json.loads(os.environ["FAKE_NVML"]))
    return main(argv)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
