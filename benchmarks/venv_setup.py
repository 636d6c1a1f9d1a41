"""The project's virtual environment made two ways, timed in the same run: pip (what the
Makefile ran before) and uv (what it runs now), each from an empty venv and an empty cache
of its own, installing ``-e '.[dev]'`` (the same packages: their frozen lists are
compared).

Usage: ``.venv/bin/python benchmarks/venv_setup.py [--rounds N]``; each round makes both
venvs under ``benchmarks/.data/venv_setup/`` (about 1.1 GB each) and removes them. The
downloads come from the package index, so the figures include the network.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from machine import describe, load_average

PROJECT = Path(__file__).resolve().parent.parent
DATA = PROJECT / "benchmarks" / ".data" / "venv_setup"
UV = "uv==0.13.9"


def _timed(commands: list[list[str]], env: dict[str, str]) -> tuple[float, float]:
    """Run ``commands`` in turn; their wall and CPU seconds (children's user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    for command in commands:
        subprocess.run(command, check=True, cwd=PROJECT, env=env, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _frozen(venv: Path) -> set[str]:
    """The venv's packages as ``name==version``, names normalised (PEP 503), the project and
    the installers themselves left out."""
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list",
                             "--format=freeze"], check=True, capture_output=True, text=True
                            ).stdout
    versions = dict(line.split("==", 1) for line in listed.splitlines() if "==" in line)
    return {f"{re.sub(r'[-_.]+', '-', name).lower()}=={version}"
            for name, version in versions.items()
            if name.lower() not in {"joulehouse", "pip", "uv", "setuptools"}}


def round_(env: dict[str, str]) -> dict[str, tuple[float, float]]:
    """One round: the venv by pip, then by uv (uv itself installed by pip into the venv,
    as the Makefile does), each with a cache of its own made empty first."""
    shutil.rmtree(DATA, ignore_errors=True)
    DATA.mkdir(parents=True)
    py = sys.executable
    pip_venv, uv_venv = DATA / "pip", DATA / "uv"
    pip_env = {**env, "PIP_CACHE_DIR": str(DATA / "pip-cache")}
    uv_env = {**env, "PIP_CACHE_DIR": str(DATA / "pip-cache-uv"),
              "UV_CACHE_DIR": str(DATA / "uv-cache")}
    times = {
        "pip": _timed([[py, "-m", "venv", str(pip_venv)],
                       [str(pip_venv / "bin" / "pip"), "install", "--quiet", "-e", ".[dev]"]],
                      pip_env),
        "uv": _timed([[py, "-m", "venv", str(uv_venv)],
                      [str(uv_venv / "bin" / "pip"), "install", "--quiet", UV],
                      [str(uv_venv / "bin" / "uv"), "pip", "install", "--quiet", "--python",
                       str(uv_venv / "bin" / "python"), "-e", ".[dev]"]], uv_env),
    }
    by_pip, by_uv = _frozen(pip_venv), _frozen(uv_venv)
    if by_pip != by_uv:
        raise SystemExit(f"the two venvs differ: {sorted(by_pip ^ by_uv)}")
    shutil.rmtree(DATA)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    rounds = parser.parse_args().rounds
    env = {key: value for key, value in os.environ.items() if not key.startswith("VIRTUAL_ENV")}
    print(describe(extra=f"load {load_average()}"))
    for number in range(1, rounds + 1):
        times = round_(env)
        print(f"round {number}: " + "; ".join(
            f"{how} {wall:.0f} s wall, {cpu:.0f} s CPU" for how, (wall, cpu) in times.items())
            + f" (load {load_average()})")


if __name__ == "__main__":
    main()
