"""``python run_collector.py ARGS...``: ``joulehouse ARGS...`` with the fake NVML in
place of pynvml, its options from the JSON in ``$FAKE_NVML`` (the tests' subprocess)."""

import json
import os
import sys

from fake_nvml import FakeNvml

import joulehouse.collect.nvml as nvml_boundary
from joulehouse.cli import main

nvml_boundary.pynvml = FakeNvml(**json.loads(os.environ["FAKE_NVML"]))
sys.exit(main(sys.argv[1:]))
