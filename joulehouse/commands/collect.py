"""``joulehouse collect``: run a command N times, each run measured with NVML as a
repetition of a data root (docs/collect.md).

Exit status, as wrapper tools (``time``, ``timeout``, ``nice``) give it: the
measured command's own when it fails (128 + N when signal N ended it; 127 when
it is not found, 126 when it cannot be run), 130 / 143 when the collector was
interrupted (SIGINT / SIGTERM: the repetition is completed and marked
``interrupted``, limits restored),
2 for usage and environment errors (no NVML or GPU, no rights to set a limit:
nothing run), 0 when every repetition succeeded.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from joulehouse.collect.interrupt import Interrupted
from joulehouse.collect.limits import LimitOutOfRange, Limits
from joulehouse.collect.measurement import Measurement
from joulehouse.collect.nvml import LimitPermissionError, NvmlUnavailable
from joulehouse.collect.runner import Outcome, Target, collect
from joulehouse.collect.sampler import SamplingFailed
from joulehouse.commands.conventions import PROG, CommandError, add_command

NOT_FOUND, NOT_EXECUTABLE = 127, 126  # what env, nice, timeout exit with


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``collect`` to the ``joulehouse`` command."""
    parser = add_command(
        subparsers, "collect", help="measure a command with NVML into a data root",
        description=__doc__.split("\n\n")[0].replace("``", "") + "\n\n"
        "Writes ROOT/EXPERIMENT/BENCHMARK/RUN/<n>/ (system_info.json, timestamps.csv,\n"
        "gpu-power.csv, *_samples.csv) as it measures; a repetition is complete, and\n"
        "picked up by the sensor, once experiment_end is written, last. Progress and\n"
        "messages go to stderr; the command's own output is left alone.\n\n"
        "exit status: the command's when it fails (no further repetitions; its\n"
        "repetition left incomplete), 127/126 when it is not found / not runnable,\n"
        "130/143 on SIGINT/SIGTERM (repetition completed with what was measured and\n"
        "an 'interrupted' event, limits restored), 2 without NVML, a GPU or the\n"
        "rights to set a limit (nothing run), 0 otherwise.",
        examples=[("joulehouse collect --data-root /data/gpu --experiment power-limit "
                   "--benchmark bert --power-limit 250 --repetitions 5 -- python train.py"),
                  ("joulehouse collect --data-root /data/gpu --experiment clock-limit "
                   "--benchmark bert --clocks 877,1065 -- ./run.sh")],
        handler=run_collect)
    parser.add_argument("--data-root", type=Path, required=True, metavar="ROOT")
    parser.add_argument("--experiment", required=True, metavar="E", type=_name)
    parser.add_argument("--benchmark", required=True, metavar="B", type=_name)
    parser.add_argument("--run", metavar="NAME", type=_name,
                        help="run folder name (default: the settings, e.g. 250W or "
                        "877MHz,1065MHz; without a limit, GPU 0's power limit now)")
    parser.add_argument("--repetitions", type=_positive(int), default=1, metavar="N",
                        help="how many times to run the command (default 1)")
    limits = parser.add_mutually_exclusive_group()
    limits.add_argument("--power-limit", type=_positive(float), metavar="W",
                        help="power limit (W) set on every GPU for the run, then restored")
    limits.add_argument("--clocks", type=_clocks, metavar="MEM,SM",
                        help="application clocks (MHz) set on every GPU, then restored")
    parser.add_argument("--interval", type=_positive(float), default=0.1, metavar="S",
                        help="gpu-power.csv polling interval in seconds (default 0.1)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND...")


def _name(text: str) -> str:
    if not text or "/" in text or text.startswith("."):
        raise argparse.ArgumentTypeError(f"{text!r}: a folder name (no '/', not hidden)")
    return text


def _positive(kind: type):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
        return value
    return parse


def _clocks(text: str) -> tuple[int, int]:
    parts = [part.strip().removesuffix("MHz") for part in text.split(",")]
    if len(parts) != 2 or not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: MEM,SM in MHz, e.g. 877,1065")
    return int(parts[0]), int(parts[1])


class _Display:
    """Progress on stderr: a live line on a terminal; one line per repetition unless quiet."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.live = not quiet and sys.stderr.isatty()
        self.interrupted: Outcome | None = None  # the repetition a signal cut short

    def progress(self, number: int, total: int, measurement: Measurement) -> None:
        if self.live:
            sampler = measurement.sampler
            power = "?" if sampler.power_w is None else f"{sampler.power_w:.0f} W"
            energy = "?" if sampler.energy_j is None else f"{sampler.energy_j:.0f} J"
            print(f"\r{PROG}: repetition {number} of {total}: {measurement.elapsed_s:.0f} s, "
                  f"{power}, {energy}\033[K", end="", file=sys.stderr, flush=True)

    def done(self, outcome: Outcome) -> None:
        if outcome.interrupted:
            self.interrupted = outcome
        if self.live:
            print("\r\033[K", end="", file=sys.stderr)
        if self.quiet:
            return
        energy = "?" if outcome.energy_j is None else f"{outcome.energy_j:.1f} J"
        state = ("complete, interrupted: only part of the command measured"
                 if outcome.complete and outcome.interrupted
                 else "complete" if outcome.complete
                 else f"left incomplete: the command exited with {outcome.status}")
        print(f"{PROG}: repetition {outcome.number} of {outcome.total}: "
              f"{outcome.duration_s:.2f} s, {energy} (counter): {outcome.folder} ({state})",
              file=sys.stderr, flush=True)


def run_collect(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        args.command_parser.error("give the command to measure after --")
    limits = Limits(args.power_limit, args.clocks)
    display = _Display(args.quiet)
    started = time.monotonic()
    try:
        return collect(command, Target(args.data_root, args.experiment, args.benchmark,
                                       args.run),
                       repetitions=args.repetitions, limits=limits, interval_s=args.interval,
                       progress=display.progress, done=display.done)
    except (NvmlUnavailable, LimitPermissionError, LimitOutOfRange) as err:
        raise CommandError(f"{err}; nothing run") from None
    except SamplingFailed as err:
        raise CommandError(f"{err}; the repetition was left incomplete, limits restored"
                           ) from None
    except FileNotFoundError:
        print(f"{PROG}: {command[0]}: command not found", file=sys.stderr)
        return NOT_FOUND
    except PermissionError:
        print(f"{PROG}: {command[0]}: cannot run it (permission denied)", file=sys.stderr)
        return NOT_EXECUTABLE
    except Interrupted as stop:
        cut = display.interrupted
        kept = ("" if cut is None else f" {cut.folder} was completed with what was measured "
                "and marked interrupted (only part of the command);")
        print(f"{PROG}: interrupted ({stop}) after {time.monotonic() - started:.1f} s;{kept} "
              "limits restored", file=sys.stderr)
        return stop.exit_code
