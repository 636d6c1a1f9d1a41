"""The thin boundary over NVML (``pynvml`` from ``nvidia-ml-py``): devices, readings, limits.

Everything the collector asks the driver goes through :class:`Nvml` and
:class:`Device`, in NVML's own units: power and power limits in mW, energy
in mJ (since the driver was loaded), clocks in MHz, utilisation in %,
temperature in °C, PCIe throughput in KB/s, sample timestamps in µs since
the epoch. Readers convert units later, once. Tests replace the module
attribute ``pynvml`` with a fake.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Self

import pynvml

#: gpu-power.csv columns (the seed's names) -> how to read each, in the order they are read
#: and written: the energy counter first, nearest the row's timestamp.
_READINGS: dict[str, Callable[[Any, Any], float]] = {
    "total-energy": lambda nv, h: nv.nvmlDeviceGetTotalEnergyConsumption(h),
    "power": lambda nv, h: nv.nvmlDeviceGetPowerUsage(h),
    "clock-mem": lambda nv, h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
    "clock-gpu": lambda nv, h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
    "app-clock-mem": lambda nv, h: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_MEM),
    "app-clock-gpu": lambda nv, h: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM),
    "enforced-power-limit": lambda nv, h: nv.nvmlDeviceGetEnforcedPowerLimit(h),
    "power-state": lambda nv, h: nv.nvmlDeviceGetPowerState(h),
    "tmp": lambda nv, h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
    "pci-tx": lambda nv, h: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES),
    "pci-rx": lambda nv, h: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES),
    "util-gpu": lambda nv, h: nv.nvmlDeviceGetUtilizationRates(h).gpu,
    "util-mem": lambda nv, h: nv.nvmlDeviceGetUtilizationRates(h).memory,
}

#: ``*_samples.csv`` file stem -> the NVML sampling type's constant name.
SAMPLE_TYPES = {
    "total_power": "NVML_TOTAL_POWER_SAMPLES",
    "gpu_utilization": "NVML_GPU_UTILIZATION_SAMPLES",
    "memory_utilization": "NVML_MEMORY_UTILIZATION_SAMPLES",
}

#: NVML value type -> the field of the sample value union that holds it.
_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                 6: "usVal"}


class NvmlUnavailable(Exception):
    """NVML cannot be used here (no driver, no GPU): one line saying why."""


class LimitPermissionError(Exception):
    """A limit cannot be set without more rights: one line saying which and how."""


def explain(err: Exception) -> str:
    """One line for an NVML error, naming its class (``NVMLError_LibraryNotFound``)."""
    name = type(err).__name__
    if name == "NVMLError_LibraryNotFound":
        return ("NVML not found (NVMLError_LibraryNotFound): no NVIDIA driver on this machine "
                "(libnvidia-ml.so is not installed); the collector needs an NVIDIA GPU and its "
                "driver")
    if name == "NVMLError_DriverNotLoaded":
        return "NVIDIA driver not loaded (NVMLError_DriverNotLoaded): is there a GPU?"
    return f"NVML error ({name}): {err}"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Device:
    """One GPU: its NVML index and handle. Readings in NVML's units (module docstring)."""

    nvml: Any
    index: int
    handle: Any

    def energy_mj(self) -> int:
        """The energy counter (mJ since the driver was loaded; updates about every 100 ms)."""
        return self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)

    def supported_readings(self) -> list[str]:
        """The gpu-power.csv columns this GPU answers, the counter first.

        A column the GPU does not support (NVMLError_NotSupported) is left
        out for the whole run, as the real writer did.
        """
        supported = []
        for column, read in _READINGS.items():
            try:
                read(self.nvml, self.handle)
            except self.nvml.NVMLError_NotSupported:
                continue
            supported.append(column)
        return supported

    def read(self, columns: list[str]) -> list[float]:
        """The current value of each of ``columns``."""
        return [_READINGS[column](self.nvml, self.handle) for column in columns]

    def samples(self, kind: str, last_seen_us: int) -> list[tuple[int, float]]:
        """Buffered samples of ``kind`` (a SAMPLE_TYPES key) newer than ``last_seen_us``:
        (timestamp µs since the epoch, value) in time order; [] when there are none."""
        nv = self.nvml
        try:
            value_type, samples = nv.nvmlDeviceGetSamples(
                self.handle, getattr(nv, SAMPLE_TYPES[kind]), last_seen_us)
        except nv.NVMLError_NotFound:  # no sample newer than last_seen_us
            return []
        field = _VALUE_FIELDS[value_type]
        return sorted((s.timeStamp, getattr(s.sampleValue, field)) for s in samples
                      if s.timeStamp > last_seen_us)

    def supported_samples(self) -> list[str]:
        """The SAMPLE_TYPES this GPU's buffer keeps."""
        kinds = []
        for kind in SAMPLE_TYPES:
            try:
                self.samples(kind, 0)
            except self.nvml.NVMLError_NotSupported:
                continue
            kinds.append(kind)
        return kinds

    def power_limit_mw(self) -> int:
        """The power management limit now set (mW)."""
        return self.nvml.nvmlDeviceGetPowerManagementLimit(self.handle)

    def power_limit_range_mw(self) -> tuple[int, int]:
        """The lowest and highest power limit the GPU accepts (mW)."""
        low, high = self.nvml.nvmlDeviceGetPowerManagementLimitConstraints(self.handle)
        return int(low), int(high)

    def set_power_limit_mw(self, limit_mw: int) -> None:
        self._privileged("set the power limit", self.nvml.nvmlDeviceSetPowerManagementLimit,
                         int(limit_mw))

    def application_clocks_mhz(self) -> tuple[int, int]:
        """The application clocks now set: (memory, SM) in MHz."""
        nv = self.nvml
        return (nv.nvmlDeviceGetApplicationsClock(self.handle, nv.NVML_CLOCK_MEM),
                nv.nvmlDeviceGetApplicationsClock(self.handle, nv.NVML_CLOCK_SM))

    def set_application_clocks_mhz(self, memory_mhz: int, sm_mhz: int) -> None:
        self._privileged("set the application clocks",
                         self.nvml.nvmlDeviceSetApplicationsClocks, memory_mhz, sm_mhz)

    def _privileged(self, what: str, call: Callable, *args: int) -> None:
        try:
            call(self.handle, *args)
        except self.nvml.NVMLError_NoPermission:
            raise LimitPermissionError(
                f"GPU {self.index}: no permission to {what} (NVMLError_NoPermission): run as "
                "root, or have an administrator allow it (nvidia-smi -acp UNRESTRICTED for "
                "application clocks)") from None

    def info(self) -> dict[str, Any]:
        """This GPU's part of system_info.json (the power limit in mW, as the seed)."""
        nv = self.nvml
        return {
            "gpu_index": self.index,
            "device_name": _text(nv.nvmlDeviceGetName(self.handle)),
            "uuid": _text(nv.nvmlDeviceGetUUID(self.handle)),
            "compute_capability": list(nv.nvmlDeviceGetCudaComputeCapability(self.handle)),
            "enforced_power_limit": nv.nvmlDeviceGetEnforcedPowerLimit(self.handle),
        }


class Nvml:
    """``with Nvml() as nvml:`` NVML initialised, shut down at the end.

    Raises :class:`NvmlUnavailable` (one line, :func:`explain`) when the
    library or driver is missing.
    """

    def __init__(self) -> None:
        self.module = pynvml

    def __enter__(self) -> Self:
        try:
            self.module.nvmlInit()
        except self.module.NVMLError as err:
            raise NvmlUnavailable(explain(err)) from None
        return self

    def __exit__(self, *exc: object) -> None:
        self.module.nvmlShutdown()

    def devices(self) -> list[Device]:
        """Every GPU NVML sees, by NVML index (an error when there is none)."""
        nv = self.module
        count = nv.nvmlDeviceGetCount()
        if not count:
            raise NvmlUnavailable("NVML sees no GPU on this machine")
        return [Device(nv, i, nv.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]

    def system_info(self) -> dict[str, Any]:
        """Driver, CUDA and NVML versions, OS, Python packages (system_info.json's common part)."""
        nv = self.module
        cuda = nv.nvmlSystemGetCudaDriverVersion()  # e.g. 12040 -> "12.4"
        packages = {dist.metadata["Name"]: dist.version for dist in metadata.distributions()}
        return {
            "driver_version": _text(nv.nvmlSystemGetDriverVersion()),
            "cuda_version": f"{cuda // 1000}.{cuda % 1000 // 10}",
            "nvml_version": _text(nv.nvmlSystemGetNVMLVersion()),
            "os": platform.platform(),
            "python_version": platform.python_version(),
            "python_packages": dict(sorted(packages.items(), key=lambda item: item[0].lower())),
        }
