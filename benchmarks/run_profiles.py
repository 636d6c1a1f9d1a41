"""Profiles of a running stack's run workers, and where each spent its time.

``record``: while a stack runs (the soak's, ``benchmarks/soak.py``), profile the next
``--runs`` run workers the code server starts (processes spawned by ``dagster api grpc``,
one per run), each for its whole life, with py-spy (``record --nonblocking``: the worker
is never paused, so what it does is unchanged; samples of a process waiting for a CPU are
counted too). Each profile is py-spy's collapsed stacks, ``DIR/<pid>.txt``.

``summary``: per profile, the run's step (its ``@asset``/``@multi_asset`` function, found
in the stacks) and the seconds of the frames of the project's code (``assets/``,
``joulehouse/``, ``resources/``, ``definitions.py``, ``components/``) and of imports,
inclusive, the largest first.

py-spy is not a dependency of the project: install it in a venv of its own
(``python -m venv /tmp/spy && /tmp/spy/bin/pip install py-spy``) and pass ``--py-spy``.
Needs the right to trace the workers (root, or the same user with ptrace allowed).

    .venv/bin/python benchmarks/run_profiles.py record DIR --py-spy /tmp/spy/bin/py-spy \
        [--runs 14] [--after-s 0]
    .venv/bin/python benchmarks/run_profiles.py summary DIR/*.txt [--top 25]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

#: Samples a second (py-spy's ``-r``).
RATE = 50
#: A frame of the project's code, or an import, in py-spy's ``function (file:line)``.
OURS = re.compile(r"\((assets|joulehouse|resources|components|sensors|definitions\.py)")
IMPORTS = "_find_and_load ("
#: The steps: the functions under ``assets/`` that Dagster calls as a step's compute.
STEPS = re.compile(r"^(\w+) \(assets/\w+\.py\)$")
STEP_CALLER = "_yield_compute_results"


def run_workers(seen: set[int]) -> list[int]:
    """The processes spawned by a code server (``dagster api grpc``) not in ``seen``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in seen:
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            parent_command = Path(f"/proc/{parent}/cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if b"spawn_main" in command and b"api\0grpc" in parent_command:
            found.append(int(entry.name))
    return found


def record(out: Path, py_spy: str, runs: int, after_s: float) -> None:
    """Profile the next ``runs`` run workers into ``out``, waiting for every profile."""
    out.mkdir(parents=True, exist_ok=True)
    time.sleep(after_s)
    seen: set[int] = set()
    profilers = []
    while len(seen) < runs:
        for pid in run_workers(seen)[:runs - len(seen)]:
            seen.add(pid)
            profilers.append(subprocess.Popen(
                [py_spy, "record", "--nonblocking", "-r", str(RATE), "-p", str(pid),
                 "-f", "raw", "-o", str(out / f"{pid}.txt")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.5)
    for profiler in profilers:
        profiler.wait()


def _frames(stack: str) -> list[str]:
    """The frames of one collapsed stack, each as function and file (the line dropped)."""
    return [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]


def inclusive(path: Path) -> tuple[Counter, int]:
    """Samples per frame, each frame counted once per stack, and all samples."""
    frames: Counter = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        frames.update(dict.fromkeys(set(_frames(stack)), int(count)))
    return frames, total


def steps_of(path: Path) -> list[str]:
    """The steps a profile's run computed: the project's functions that Dagster's compute
    (``_yield_compute_results``) called, directly or through its wrappers."""
    found = set()
    for line in path.read_text().splitlines():
        frames = _frames(line.rpartition(" ")[0])
        callers = [index for index, frame in enumerate(frames)
                   if frame.startswith(STEP_CALLER)]
        if callers:
            step = next((STEPS.match(frame) for frame in frames[callers[0] + 1:]
                         if STEPS.match(frame)), None)
            if step:
                found.add(step.group(1))
    return sorted(found)


def summary(paths: list[Path], top: int) -> None:
    for path in paths:
        frames, total = inclusive(path)
        print(f"== {path.name}: {total / RATE:.1f} s sampled; steps: "
              f"{', '.join(steps_of(path)) or '-'}")
        shown = [(frame, samples) for frame, samples in frames.most_common()
                 if OURS.search(frame) or frame.startswith(IMPORTS)][:top]
        for frame, samples in shown:
            print(f"{samples / RATE:7.1f} s {100 * samples / total:5.1f} %  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    recording = commands.add_parser("record")
    recording.add_argument("out", type=Path)
    recording.add_argument("--py-spy", required=True, help="py-spy's executable")
    recording.add_argument("--runs", type=int, default=14)
    recording.add_argument("--after-s", type=float, default=0.0,
                           help="seconds to wait before looking for run workers")
    summarizing = commands.add_parser("summary")
    summarizing.add_argument("profiles", type=Path, nargs="+")
    summarizing.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if args.command == "record":
        record(args.out, args.py_spy, args.runs, args.after_s)
    else:
        summary(args.profiles, args.top)


if __name__ == "__main__":
    main()
