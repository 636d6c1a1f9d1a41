"""Benchmark: the NVML collector's overhead on the command it measures.

A CPU-bound command (a pure-Python loop of about ``--seconds`` s that
reports its own compute time) is run alone and under the collector
(``joulehouse.collect.runner.collect``, gpu-power.csv every ``--interval``
s, sample buffers every second), interleaved round by round so that a
burst of load from other processes hits both sides. Figures:

- the command's compute time under the collector against alone: median
  and best of the per-round ratios minus 1 (noisy on a shared machine);
- the sampling thread's CPU time per second of measurement: the share of
  one core the collector takes while the command runs, a steadier figure of
  the same cost (on a machine with a core to spare it is not even taken
  from the command).

Against the fake NVML of ``tests/collect`` by default (no GPU here); with
``--real-nvml`` against the machine's NVML (an NVIDIA GPU and driver).
Repetitions go to ``benchmarks/.data/collect`` (git-ignored), removed first.

Run: ``.venv/bin/python benchmarks/collect_overhead.py [--rounds N] [--real-nvml]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import numpy
from machine import describe, load_average

from joulehouse.collect import nvml as nvml_boundary
from joulehouse.collect.runner import Outcome, Target, collect

DATA = HERE / ".data" / "collect"
LOOP = """import sys, time
t = time.perf_counter(); x = 0
for i in range({n}): x += i * i
open(sys.argv[1], "w").write(repr(time.perf_counter() - t))
"""


def _command(iterations: int, out: Path) -> list[str]:
    return [sys.executable, "-c", LOOP.format(n=iterations), str(out)]


def _alone(command: list[str], out: Path) -> float:
    subprocess.run(command, check=True)
    return float(out.read_text())


def _collected(command: list[str], out: Path, interval_s: float) -> tuple[float, float]:
    """(the command's compute time, sampling CPU s per s measured)."""
    outcomes: list[Outcome] = []
    status = collect(command, Target(DATA, "overhead", "loop", "default"),
                     interval_s=interval_s, done=outcomes.append)
    if status:
        raise SystemExit(f"the measured command failed with {status}")
    return float(out.read_text()), outcomes[0].sampling_cpu_s / outcomes[0].duration_s


def _calibrate(seconds: float, out: Path) -> int:
    iterations = 2_000_000
    while (took := _alone(_command(iterations, out), out)) < 0.5:
        iterations *= 2
    return int(iterations * seconds / took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=3.0, help="the command's length")
    parser.add_argument("--interval", type=float, default=0.1, help="gpu-power.csv polling (s)")
    parser.add_argument("--real-nvml", action="store_true",
                        help="measure against the machine's NVML, not the fake")
    args = parser.parse_args()
    if not args.real_nvml:
        sys.path.insert(0, str(HERE.parent / "tests" / "collect"))
        from fake_nvml import FakeNvml
        nvml_boundary.pynvml = FakeNvml()
    shutil.rmtree(DATA, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "took"
        command = _command(_calibrate(args.seconds, out), out)
        load_before = load_average()
        ratios, alone, under, cpu_share = [], [], [], []
        for _ in range(args.rounds):
            first = _alone(command, out)
            took, share = _collected(command, out, args.interval)
            ratios.append(took / first - 1)
            alone.append(first)
            under.append(took)
            cpu_share.append(share)
    nvml = "real NVML" if args.real_nvml else "the fake NVML (tests/collect/fake_nvml.py)"
    print(describe(numpy, extra=f"load average {load_before} before, {load_average()} after"))
    print(f"{args.rounds} rounds, command ~{args.seconds:g} s, gpu-power.csv every "
          f"{args.interval:g} s, against {nvml}")
    print(f"command alone:         median {statistics.median(alone):.3f} s, "
          f"best {min(alone):.3f} s")
    print(f"command under collect: median {statistics.median(under):.3f} s, "
          f"best {min(under):.3f} s")
    print(f"runtime overhead: median {statistics.median(ratios) * 100:+.2f} %, "
          f"best-to-best {(min(under) / min(alone) - 1) * 100:+.2f} %")
    print(f"sampling thread's CPU per second measured: median {statistics.median(cpu_share) * 100:.2f} "
          f"% of one core")


if __name__ == "__main__":
    main()
