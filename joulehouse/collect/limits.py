"""Power and clock limits: set before a run, restored after it however it ends.

A limit is set on every GPU measured and the value each had before is put
back at the end: after success, an exception, SIGINT or SIGTERM
(:func:`~joulehouse.collect.interrupt.signals_raise` is in force inside).
Each set and the registration of its undo happen with the signals held
back, so a signal arriving during the NVML call is raised only once the
undo is registered. A GPU that refuses (no rights) raises
LimitPermissionError before anything runs, the GPUs already changed
restored first. Only SIGKILL (or a power loss) leaves a limit set;
``nvidia-smi -rgc``/``-pl`` resets it by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from joulehouse.collect.interrupt import signals_held, signals_raise
from joulehouse.collect.nvml import Device


@dataclass(frozen=True)
class Limits:
    """What to set: a power limit (W) or application clocks (memory, SM in MHz), or neither."""

    power_limit_w: float | None = None
    clocks_mhz: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.power_limit_w is not None and self.clocks_mhz is not None:
            raise ValueError("a power limit or clocks, not both")

    @property
    def run_name(self) -> str | None:
        """The run folder name the readers parse back (``250W``, ``877MHz,1065MHz``)."""
        if self.power_limit_w is not None:
            return f"{self.power_limit_w:g}W"
        if self.clocks_mhz is not None:
            return "{}MHz,{}MHz".format(*self.clocks_mhz)
        return None


NO_LIMITS = Limits()


class LimitOutOfRange(ValueError):
    """A power limit outside what the GPU accepts (nothing set)."""


def run_name(limits: Limits, device: Device) -> str:
    """The default run folder name: the limits asked for, else ``device``'s power limit
    now (``700W``), in the form the readers parse back."""
    return limits.run_name or Limits(power_limit_w=device.power_limit_mw() / 1e3).run_name


def _check_power(device: Device, limit_mw: int) -> None:
    low, high = device.power_limit_range_mw()
    if not low <= limit_mw <= high:
        raise LimitOutOfRange(f"GPU {device.index}: power limit {limit_mw / 1e3:g} W is "
                              f"outside what it accepts, {low / 1e3:g}-{high / 1e3:g} W")


@contextmanager
def applied(devices: list[Device], limits: Limits) -> Iterator[list[Device]]:
    """Set ``limits`` on every device inside the block, previous values back at its end.

    A failed restore does not stop the others; the first such error is
    raised after all were tried.
    """
    undo: list[Callable[[], None]] = []
    with signals_raise():
        try:
            for device in devices:
                if limits.power_limit_w is not None:
                    limit_mw = round(limits.power_limit_w * 1000)
                    _check_power(device, limit_mw)
                    before = device.power_limit_mw()
                    with signals_held():  # a signal cannot come between the set and its undo
                        device.set_power_limit_mw(limit_mw)
                        undo.append(lambda d=device, v=before: d.set_power_limit_mw(v))
                if limits.clocks_mhz is not None:
                    before_clocks = device.application_clocks_mhz()
                    with signals_held():
                        device.set_application_clocks_mhz(*limits.clocks_mhz)
                        undo.append(lambda d=device, v=before_clocks:
                                    d.set_application_clocks_mhz(*v))
            yield devices
        finally:
            _restore(undo)


def _restore(undo: list[Callable[[], None]]) -> None:
    """Run every step, SIGINT and SIGTERM held back meanwhile (delivered after)."""
    errors = []
    with signals_held():
        for step in reversed(undo):
            try:
                step()
            except Exception as err:  # noqa: BLE001 -- every GPU is tried; the first raised
                errors.append(err)
    if errors:
        raise errors[0]
