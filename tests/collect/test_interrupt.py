"""Signals held back while cleanup must finish, whichever thread the kernel gives them to."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from joulehouse.collect.interrupt import Interrupted, signals_held, signals_raise


def test_a_signal_held_back_waits_even_when_another_thread_receives_it():
    # a thread started before the hold (as the sampler's is) does not block SIGTERM, so
    # the kernel hands it a process-wide signal when the main thread holds it back
    go = threading.Event()
    sender = threading.Thread(target=lambda: (go.wait(), os.kill(os.getpid(), signal.SIGTERM)))
    sender.start()
    steps = []
    with signals_raise(), pytest.raises(Interrupted) as stop:
        with signals_held():
            go.set()
            sender.join()  # the signal has arrived
            steps.append("held block finished")
        steps.append("not reached")
    assert steps == ["held block finished"]
    assert stop.value.signum == signal.SIGTERM and stop.value.exit_code == 143


def test_signals_held_back_are_raised_again_in_order_once_each():
    arrived = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: arrived.append(signum))
    try:
        with signals_raise():
            with pytest.raises(Interrupted) as stop, signals_held():
                for signum in (signal.SIGTERM, signal.SIGTERM, signal.SIGINT):
                    signal.raise_signal(signum)
            assert stop.value.signum == signal.SIGTERM  # the first; SIGINT not raised after it
        with signals_held():
            signal.raise_signal(signal.SIGINT)
            assert arrived == []
        assert arrived == [signal.SIGINT]  # the handler in force before the hold
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_handler_installed_from_c_is_restored_as_the_default(monkeypatch):
    # signal.signal returns None for a handler Python did not install (set from C);
    # passing None back raises TypeError, which left our handler in place
    real = signal.signal
    first = set()

    def from_c(signum, handler):
        previous = real(signum, handler)
        if signum not in first:  # the handler before ours: "installed from C"
            first.add(signum)
            return None
        return previous

    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(signal, "signal", from_c)
    try:
        for hold in (signals_held, signals_raise):
            first.clear()
            with hold():
                pass
            assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        for signum, handler in previous.items():
            real(signum, handler)
