"""``python serve_collector.py``: :func:`run_collector.run` (``joulehouse ARGS...`` with the
fake NVML) for each request, in one long-lived process (the soak's GPU lander,
``benchmarks/soak_landers.Collector``: no interpreter started per repetition).

A request is one line on stdin, the JSON list ``ARGS``; each is run in turn, in the main
thread (the collector installs signal handlers, which only it may), and answered by one
line on stdout, ``{"status": N}``: the exit status a process of its own would have had.
What the runs print, on stdout or stderr, and what their commands print goes to this
process's stderr (stdout is the answers'). Ends at the end of stdin.
"""

import json
import os
import sys
import traceback

from run_collector import run


def status(argv: list[str]) -> int:
    """``run(argv)``'s exit status, as the interpreter makes it of a ``SystemExit`` (an
    argparse error: 2) or an uncaught exception (its traceback printed: 1)."""
    try:
        return run(argv)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except Exception:  # noqa: BLE001 - a process of its own would print it and exit 1
        traceback.print_exc()
        return 1


def serve() -> None:
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the runs' output: to stderr
    while line := sys.stdin.readline():
        code = status(json.loads(line))
        sys.stdout.flush()
        sys.stderr.flush()
        answers.write(json.dumps({"status": code}) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve()
