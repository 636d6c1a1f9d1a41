"""The benchmarks' modules import each other by name, as their scripts run them."""

import sys

from tests.conftest import PROJECT_ROOT

sys.path.insert(0, str(PROJECT_ROOT / "benchmarks"))
