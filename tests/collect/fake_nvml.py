"""A fake NVML: stands in for the ``pynvml`` module in the collector's boundary.

It behaves as NVML does on an A100/H100, with a ground truth known exactly:

- the GPU's true power is :func:`true_power_w`, a known function of (wall
  clock) time, whose integral :func:`true_energy_j` is exact;
- ``nvmlDeviceGetTotalEnergyConsumption``: that integral since "driver load"
  in mJ (an int), updated only every ``counter_period_s`` (100 ms);
- ``nvmlDeviceGetPowerUsage``: mW, the mean over only the first 25 ms of the
  last complete 100 ms window (the part-time measurement of Yang et al.,
  SC'24), so the readings and the counter disagree slightly;
- ``nvmlDeviceGetSamples``: a finite ring buffer per type (power every 20 ms,
  utilisation every 1/6 s; timestamps µs since the epoch), newer than the
  timestamp asked, NVMLError_NotFound when there is none; samples that fell
  out of the buffer before being read are counted in ``lost``;
- limits: constraints, set calls that fail with NVMLError_NoPermission when
  ``permission`` is False; every set call is recorded in ``calls`` (and, with
  ``log``, appended to that file as a JSON line, for a collector in a
  subprocess);
- ``absent``: nvmlInit raises NVMLError_LibraryNotFound, as with no driver;
  ``lost_after_s``: power readings raise NVMLError_GpuIsLost that long after the first
  one (the collector's probe of what the GPU reads: however long the start took);
- :meth:`FakeNvml.interrupt`: a signal sent to this process from inside an
  NVML call (SIGTERM arriving while the driver sets a limit ...).

Constants, error classes and the sample structure are pynvml's own.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from types import SimpleNamespace

import pynvml

T_LOAD = 1.7e9  # "driver load" (s since the epoch): the counter counts from here
BASE_W, SLOW_W, SLOW_PERIOD_S, FAST_W, FAST_HZ = 150.0, 50.0, 1.7, 20.0, 7.0
WINDOW_S, AVERAGED_S = 0.1, 0.025
POWER_SAMPLE_US, UTIL_SAMPLE_US = 20_000, 166_667


def true_power_w(t: float) -> float:
    """The GPU's true power (W) at ``t`` (s since the epoch)."""
    x = t - T_LOAD
    return (BASE_W + SLOW_W * math.sin(2 * math.pi * x / SLOW_PERIOD_S)
            + FAST_W * math.sin(2 * math.pi * FAST_HZ * x))


def _integral(t: float) -> float:
    x = t - T_LOAD
    return (BASE_W * x - SLOW_W * SLOW_PERIOD_S / (2 * math.pi)
            * math.cos(2 * math.pi * x / SLOW_PERIOD_S)
            - FAST_W / (2 * math.pi * FAST_HZ) * math.cos(2 * math.pi * FAST_HZ * x))


def true_energy_j(t0: float, t1: float) -> float:
    """The exact energy (J) from ``t0`` to ``t1`` (s since the epoch)."""
    return _integral(t1) - _integral(t0)


class FakeGpu:
    """One fake GPU's settable state."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.power_limit_mw = 700_000
        self.app_clocks = (2619, 1980)  # memory, SM (MHz)


class FakeNvml:
    """The fake ``pynvml`` module (see the module docstring)."""

    def __init__(self, gpus: int = 1, *, absent: bool = False, permission: bool = True,
                 counter_period_s: float = 0.1, power_buffer: int = 100,
                 util_buffer: int = 20, log: str | None = None,
                 lost_after_s: float | None = None) -> None:
        self.gpus = [FakeGpu(i) for i in range(gpus)]
        self.absent, self.permission = absent, permission
        self.counter_period_s = counter_period_s
        self.buffers = {pynvml.NVML_TOTAL_POWER_SAMPLES: (POWER_SAMPLE_US, power_buffer),
                        pynvml.NVML_GPU_UTILIZATION_SAMPLES: (UTIL_SAMPLE_US, util_buffer),
                        pynvml.NVML_MEMORY_UTILIZATION_SAMPLES: (UTIL_SAMPLE_US, util_buffer)}
        self.log = log
        self.calls: list[tuple] = []
        self.lost = 0
        self.initialised = 0
        self.lost_after_s = lost_after_s
        self.lost_at: float | None = None  # set by the first power reading
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        if name.startswith("NVML"):  # constants, NVMLError and its subclasses
            return getattr(pynvml, name)
        raise AttributeError(name)

    def interrupt(self, signum: int, call: str) -> None:
        """Send ``signum`` to this process from inside the next call of ``call`` (an NVML
        function's name) made by the main thread, once, after the call took effect."""
        method = getattr(type(self), call).__get__(self)

        def interrupted(*args):
            result = method(*args)
            if threading.current_thread() is threading.main_thread():
                self.__dict__.pop(call, None)
                os.kill(os.getpid(), signum)
            return result
        setattr(self, call, interrupted)

    def _record(self, *call) -> None:
        with self._lock:
            self.calls.append(call)
            if self.log:
                with open(self.log, "a") as file:
                    file.write(json.dumps(call) + "\n")

    @staticmethod
    def _error(code: int) -> pynvml.NVMLError:
        return pynvml.NVMLError(code)

    # -- library and system
    def nvmlInit(self) -> None:
        if self.absent:
            raise self._error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetNVMLVersion(self) -> str:
        return "12.550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return f"GPU-fake-{gpu.index:04d}"

    def nvmlDeviceGetCudaComputeCapability(self, gpu: FakeGpu) -> tuple[int, int]:
        return (9, 0)

    # -- readings
    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:
        updated = math.floor(time.time() / self.counter_period_s) * self.counter_period_s
        return int(true_energy_j(T_LOAD, updated) * 1e3)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        if self.lost_after_s is not None:
            if self.lost_at is None:
                self.lost_at = time.time() + self.lost_after_s
            elif time.time() > self.lost_at:
                raise self._error(pynvml.NVML_ERROR_GPU_IS_LOST)
        window = math.floor(time.time() / WINDOW_S) * WINDOW_S - WINDOW_S
        return int(true_energy_j(window, window + AVERAGED_S) / AVERAGED_S * 1e3)

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> SimpleNamespace:
        busy = true_power_w(time.time()) > BASE_W
        return SimpleNamespace(gpu=97 if busy else 40, memory=35 if busy else 10)

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, kind: int) -> int:
        return gpu.app_clocks[0 if kind == pynvml.NVML_CLOCK_MEM else 1]

    def nvmlDeviceGetApplicationsClock(self, gpu: FakeGpu, kind: int) -> int:
        return gpu.app_clocks[0 if kind == pynvml.NVML_CLOCK_MEM else 1]

    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: FakeGpu) -> int:
        return gpu.power_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, gpu: FakeGpu) -> int:
        return gpu.power_limit_mw

    def nvmlDeviceGetPowerManagementLimitConstraints(self, gpu: FakeGpu) -> list[int]:
        return [200_000, 700_000]

    def nvmlDeviceGetPowerState(self, gpu: FakeGpu) -> int:
        return 0

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        return int(35 + true_power_w(time.time()) / 10)

    def nvmlDeviceGetPcieThroughput(self, gpu: FakeGpu, counter: int) -> int:
        raise self._error(pynvml.NVML_ERROR_NOT_SUPPORTED)  # dropped from gpu-power.csv

    def nvmlDeviceGetSamples(self, gpu: FakeGpu, kind: int, last_seen_us: int):
        period, size = self.buffers[kind]
        newest = int(time.time() * 1e6) // period * period
        buffered = [newest - i * period for i in range(size - 1, -1, -1)]
        if last_seen_us and buffered[0] - period > last_seen_us:
            self.lost += (buffered[0] - last_seen_us) // period - 1
        stamps = [stamp for stamp in buffered if stamp > last_seen_us]
        if not stamps:
            raise self._error(pynvml.NVML_ERROR_NOT_FOUND)
        samples = (pynvml.c_nvmlSample_t * len(stamps))()
        for sample, stamp in zip(samples, stamps, strict=True):
            sample.timeStamp = stamp
            power = true_power_w(stamp / 1e6)
            sample.sampleValue.uiVal = (int(power * 1e3) if kind == pynvml.NVML_TOTAL_POWER_SAMPLES
                                        else (97 if power > BASE_W else 40))
        return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, samples[:]

    # -- limits
    def _privileged(self, *call) -> None:
        if not self.permission:
            raise self._error(pynvml.NVML_ERROR_NO_PERMISSION)
        self._record(*call)

    def nvmlDeviceSetPowerManagementLimit(self, gpu: FakeGpu, limit_mw: int) -> None:
        self._privileged("power_limit", gpu.index, limit_mw)
        gpu.power_limit_mw = limit_mw

    def nvmlDeviceSetApplicationsClocks(self, gpu: FakeGpu, memory_mhz: int, sm_mhz: int
                                        ) -> None:
        self._privileged("clocks", gpu.index, memory_mhz, sm_mhz)
        gpu.app_clocks = (memory_mhz, sm_mhz)
