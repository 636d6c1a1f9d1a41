"""SIGINT and SIGTERM as an exception, so that ``finally`` blocks run on both.

Python turns SIGINT into KeyboardInterrupt but lets SIGTERM end the process
at once, skipping cleanup (limits left set, a repetition left incomplete).
Inside :func:`signals_raise` both raise :class:`Interrupted`, a
KeyboardInterrupt carrying the signal's number; inside :func:`signals_held`
they wait (cleanup that must finish: limits restored, a repetition closed).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The process got ``signum`` (SIGINT or SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal ended."""
        return 128 + self.signum


def _raise(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def _restore(previous: dict[int, object]) -> None:
    """Put back the handlers ``signal.signal`` returned: None (one installed from C,
    which Python cannot reinstall) becomes ``SIG_DFL``, so that ours never stays."""
    for signum, handler in previous.items():
        signal.signal(signum, signal.SIG_DFL if handler is None else handler)


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back inside, in the main thread: one that arrives is
    noted, and at the end each noted signal is raised again (in order of arrival) for
    the handler in force before; elsewhere nothing changes (signals are handled in the
    main thread only).

    The handlers are swapped rather than the signals blocked: a blocked
    process-wide signal (``kill PID``) is delivered to another thread that does
    not block it (the sampler's, a training loop's), and Python then runs its
    handler in the main thread all the same.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def note(signum: int, frame: object) -> None:
        if signum not in arrived:
            arrived.append(signum)

    previous = {signum: signal.signal(signum, note) for signum in SIGNALS}
    try:
        yield
    finally:
        _restore(previous)
        for signum in arrived:
            signal.raise_signal(signum)


@contextmanager
def signals_raise() -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted in the main thread while inside; the previous
    handlers come back at the end. Outside the main thread (where Python allows no
    handler) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise) for signum in SIGNALS}
    try:
        yield
    finally:
        _restore(previous)
