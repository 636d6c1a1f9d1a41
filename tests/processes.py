"""Stopping a server a test started: politely first, by force if it lingers."""

from __future__ import annotations

import subprocess

#: How long a terminated server may take to exit before it is killed (a bound).
STOP_TIMEOUT_S = 10.0


def stop(process: subprocess.Popen) -> None:
    """Terminate ``process`` (by its pid) and wait for it; kill it if it has not exited
    within ``STOP_TIMEOUT_S``. Nothing to do if it has already exited."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
