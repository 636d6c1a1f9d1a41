"""What a run worker's start costs in imports, with the modules' bytecode and without it
(the soak's stacks ran without it: benchmarks/README.md, "Sixty minutes with bytecode
kept"). Each try is a fresh process importing the code location and Dagster's CLI, as a
run worker does; without bytecode means a cache folder of its own that is empty and
never written (``PYTHONPYCACHEPREFIX``, ``-B``), so every module is compiled from source.
Prints the CPU seconds (user + system) of each try.

    .venv/bin/python benchmarks/import_cost.py [--tries 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
IMPORTS = "import definitions, dagster._cli"


def cpu_s(environment: dict[str, str]) -> float:
    """The CPU seconds of one process importing :data:`IMPORTS`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-B", "-c", IMPORTS], cwd=PROJECT, env=environment,
                   check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=3)
    args = parser.parse_args()
    kept = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", IMPORTS], cwd=PROJECT, env=kept, check=True)
    with tempfile.TemporaryDirectory() as empty:
        for name, environment in (("with bytecode", kept),
                                  ("without", {**kept, "PYTHONPYCACHEPREFIX": empty})):
            tries = [cpu_s(environment) for _ in range(args.tries)]
            print(f"{name:14} CPU s: {', '.join(f'{t:.2f}' for t in tries)}", flush=True)


if __name__ == "__main__":
    main()
