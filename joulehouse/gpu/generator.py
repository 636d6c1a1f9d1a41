"""Realistic generated repetitions with an exact ground truth for energy.

The files follow the real writer's habits (see the shared notes): pandas'
unnamed index column, a column set that depends on the GPU model with
``util-gpu``/``util-mem`` last, naive local timestamps whose fraction is left
out when the microseconds are zero, gpu-power polled about every 0.15 s with
jitter, ~50 Hz ``total_power`` samples stamped in UTC µs since the epoch,
four external channels in mW, epochs and optional batch events, an optional
``total-energy`` reset (driver reload) and optional missing files.

Ground truth: GPU and external power are piecewise linear in time, so their
integral over any window is known exactly; the ``total-energy`` counter is
that integral at each reading (mJ). Integrating the written readings
approximates it (trapezoid error only at the breakpoints).

Run ``python -m joulehouse.gpu.generator OUT_DIR --help`` for the options.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from joulehouse.gpu.layout import parse_settings
from joulehouse.gpu.readers import EXTERNAL_POWER_UNITS

#: Columns of gpu-power.csv in the real writer's order, per GPU model.
GPU_COLUMNS = {
    "V100": ["clock-mem", "clock-gpu", "app-clock-mem", "app-clock-gpu", "enforced-power-limit",
             "total-energy", "power-state", "power", "tmp", "pci-tx", "pci-rx",
             "util-gpu", "util-mem"],
    "A100": ["clock-mem", "clock-gpu", "app-clock-mem", "app-clock-gpu", "enforced-power-limit",
             "total-energy", "power-state", "power", "tmp", "util-gpu", "util-mem"],
    "P100": ["clock-mem", "clock-gpu", "enforced-power-limit", "power-state", "power", "tmp",
             "pci-tx", "pci-rx", "util-gpu", "util-mem"],
}
_CHANNEL_SHARES = {"d0c0": 0.27, "d0c1": 0.23, "d1c0": 0.26, "d1c1": 0.24}


@dataclass(frozen=True)
class RepetitionSpec:
    """What to generate for one repetition (times in s, power in W)."""

    duration_s: float = 60.0
    epochs: int = 3
    batches_per_epoch: int = 0
    gpu_model: str = "V100"
    power_limit_w: float = 250.0
    idle_power_w: float = 45.0
    system_power_w: float = 180.0
    gpu_power_interval_s: float = 0.15
    samples_hz: float = 50.0
    utilization_samples_hz: float = 6.0
    external_interval_s: float = 0.15
    jitter: float = 0.2
    breakpoint_interval_s: float = 1.0
    lead_s: float = 0.5
    start_utc: str = "2020-11-16 12:49:17"
    timezone: str = "UTC"
    counter_reset_at_s: float | None = None
    with_external: bool = True
    with_samples: bool = True
    external_unit: str = "mW"


@dataclass(frozen=True)
class GroundTruth:
    """Exact energies per window: ``windows`` has phase, epoch, window_start,
    window_end (UTC), duration_s, gpu_energy_j, external_energy_j; plus the
    counter resets written and the largest gpu-power reading interval (s)."""

    windows: pd.DataFrame
    counter_resets: int
    max_gpu_power_interval_s: float
    max_gpu_power_w: float


class _Profile:
    """A piecewise-linear power (W) over time (s); exact integrals."""

    def __init__(self, times: np.ndarray, power: np.ndarray) -> None:
        self.times, self.power = times, power
        self._cumulative = np.concatenate(
            ([0.0], np.cumsum(np.diff(times) * (power[:-1] + power[1:]) / 2))
        )

    def at(self, t: np.ndarray) -> np.ndarray:
        return np.interp(t, self.times, self.power)

    def integral_to(self, t: np.ndarray) -> np.ndarray:
        """Energy (J) from the first breakpoint to each ``t``."""
        k = np.clip(np.searchsorted(self.times, t, "right") - 1, 0, len(self.times) - 2)
        return self._cumulative[k] + (t - self.times[k]) * (self.power[k] + self.at(t)) / 2

    def energy(self, t0: float, t1: float) -> float:
        return float(np.diff(self.integral_to(np.array([t0, t1])))[0])


def _reading_times(rng: np.random.Generator, start: float, end: float, interval: float,
                   jitter: float) -> np.ndarray:
    """Polling times (s, rounded to µs) from ``start`` to ``end``, each step jittered."""
    count = int((end - start) / interval * 1.3) + 2
    steps = interval * (1 + rng.uniform(-jitter, jitter, count))
    times = start + np.concatenate(([0.0], np.cumsum(steps)))
    times = np.round(times[times <= end], 6)
    # Every 40th reading lands on a whole second: the writer then leaves out the fraction.
    whole = np.floor(times[40::40])
    ok = whole > times[39:-1:40][: len(whole)]
    times[40::40][ok] = whole[ok]
    return times


def local_strings(utc: pd.DatetimeIndex, timezone: str) -> list[str]:
    """Naive local ISO strings, fraction left out when the microseconds are zero (the real
    writer's form, which the readers parse back; the NVML collector writes with it too)."""
    local = utc.tz_convert(timezone).tz_localize(None).to_numpy().astype("datetime64[us]")
    text = np.datetime_as_string(local, unit="us")
    return [s[:10] + " " + (s[11:19] if s.endswith(".000000") else s[11:]) for s in text]


def _events(spec: RepetitionSpec) -> pd.DataFrame:
    """Events (relative seconds, µs-rounded): experiment, train, epochs, batches."""
    train_begin, train_end = 1.0, spec.duration_s - 1.0
    rows = [(0.0, "experiment_begin", 0), (train_begin, "train_begin", 0)]
    epoch_s = (train_end - train_begin) / spec.epochs
    for epoch in range(spec.epochs):
        begin = train_begin + epoch * epoch_s + 0.0005
        end = begin + epoch_s - 0.001
        rows.append((begin, "epoch_begin", epoch))
        batch_s = (end - begin) / (spec.batches_per_epoch + 1)
        for batch in range(spec.batches_per_epoch):
            rows.append((begin + (batch + 0.5) * batch_s, "batch_begin", batch))
            rows.append((begin + (batch + 1.0) * batch_s, "batch_end", batch))
        rows.append((end, "epoch_end", epoch))
    rows += [(train_end, "train_end", 0), (spec.duration_s, "experiment_end", 0)]
    events = pd.DataFrame(rows, columns=["t", "event", "data"])
    events["t"] = events["t"].round(6)
    return events


def _profiles(spec: RepetitionSpec, rng: np.random.Generator) -> tuple[_Profile, _Profile]:
    """GPU and whole-system power: idle outside training, busy and noisy inside."""
    times = np.arange(-spec.lead_s - 2, spec.duration_s + spec.lead_s + 2,
                      spec.breakpoint_interval_s)
    training = (times >= 1.0) & (times <= spec.duration_s - 1.0)
    busy = spec.power_limit_w * rng.uniform(0.7, 1.0, len(times))
    gpu = np.where(training, busy, spec.idle_power_w + rng.uniform(-3, 3, len(times)))
    system = spec.system_power_w + rng.uniform(-15, 15, len(times))
    return _Profile(times, gpu), _Profile(times, gpu + system)


def _with_index(frame: pd.DataFrame, path: Path) -> None:
    frame.to_csv(path)  # pandas' unnamed index column, as the real writer does


def write_repetition(folder: str | Path, spec: RepetitionSpec = RepetitionSpec(),
                     seed: int = 0) -> GroundTruth:
    """Write one repetition's files into ``folder``; return the exact energies."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    start = pd.Timestamp(spec.start_utc, tz="UTC")
    gpu, system = _profiles(spec, rng)
    first, last = -spec.lead_s, spec.duration_s + spec.lead_s

    def utc(times: np.ndarray) -> pd.DatetimeIndex:
        return start + pd.to_timedelta(np.round(times * 1e6).astype("int64"), unit="us")

    events = _events(spec)
    _with_index(pd.DataFrame({"timestamp": local_strings(utc(events["t"].to_numpy()),
                                                          spec.timezone),
                              "event": events["event"], "data": events["data"]}),
                folder / "timestamps.csv")

    t = _reading_times(rng, first, last, spec.gpu_power_interval_s, spec.jitter)
    power = gpu.at(t)
    energy_mj = 7.3e8 + gpu.integral_to(t) * 1e3
    resets = 0
    if spec.counter_reset_at_s is not None:
        after = t > spec.counter_reset_at_s
        reset_j = gpu.integral_to(np.array([spec.counter_reset_at_s]))[0]
        energy_mj[after] = (gpu.integral_to(t[after]) - reset_j) * 1e3
        resets = int(after.any())
    n = len(t)
    busy = power > spec.idle_power_w + 10
    values = {
        "clock-mem": np.full(n, 877), "clock-gpu": np.where(busy, 1380, 135),
        "app-clock-mem": np.full(n, 877), "app-clock-gpu": np.full(n, 1380),
        "enforced-power-limit": np.full(n, int(spec.power_limit_w * 1e3)),
        "total-energy": np.round(energy_mj).astype("int64"),
        "power-state": np.where(busy, 0, 8), "power": np.round(power * 1e3).astype("int64"),
        "tmp": np.round(35 + power / 10).astype("int64"),
        "pci-tx": rng.integers(0, 50_000, n), "pci-rx": rng.integers(0, 200_000, n),
        "util-gpu": np.where(busy, rng.integers(80, 101, n), 0),
        "util-mem": np.where(busy, rng.integers(20, 60, n), 0),
    }
    frame = pd.DataFrame({"timestamp": local_strings(utc(t), spec.timezone)})
    for column in GPU_COLUMNS[spec.gpu_model]:
        frame[column] = values[column]
    _with_index(frame, folder / "gpu-power.csv")

    if spec.with_samples:
        for name, hz, value in (
            ("total_power", spec.samples_hz, lambda s: np.round(gpu.at(s) * 1e3).astype("int64")),
            ("gpu_utilization", spec.utilization_samples_hz,
             lambda s: np.where(gpu.at(s) > spec.idle_power_w + 10, 97, 0)),
            ("memory_utilization", spec.utilization_samples_hz,
             lambda s: np.where(gpu.at(s) > spec.idle_power_w + 10, 41, 0)),
        ):
            s = _reading_times(rng, first, last, 1.0 / hz, spec.jitter / 4)
            micros = utc(s).as_unit("us").asi8
            _with_index(pd.DataFrame({"timestamp": micros, "value": value(s)}),
                        folder / f"{name}_samples.csv")

    if spec.with_external:
        s = _reading_times(rng, first, last, spec.external_interval_s, spec.jitter)
        total = system.at(s) / EXTERNAL_POWER_UNITS[spec.external_unit]  # W -> unit
        external = pd.DataFrame({"timestamp": local_strings(utc(s), spec.timezone)})
        for channel, share in _CHANNEL_SHARES.items():
            external[channel] = np.round(total * share, 1)
        _with_index(external, folder / "power-external.csv")

    (folder / "system_info.json").write_text(json.dumps({
        "device_name": f"Tesla {spec.gpu_model}-SXM2-32GB", "compute_capability": [7, 0],
        "driver_version": "450.80.02", "cuda_version": "11.0", "nvml_version": "11.450.80",
        "os": "Linux-5.4.0-x86_64", "python_packages": {"torch": "1.7.0", "pynvml": "8.0.4"},
        "enforced_power_limit": int(spec.power_limit_w * 1e3),
    }, indent=2) + "\n")

    windows = _truth_windows(events, gpu, system, utc)
    return GroundTruth(windows, resets, float(np.diff(t).max()), float(power.max()))


def _truth_windows(events: pd.DataFrame, gpu: _Profile, system: _Profile, utc) -> pd.DataFrame:
    at = dict(zip(events["event"] + ":" + events["data"].astype(str), events["t"], strict=False))
    spans = [("experiment", None, at["experiment_begin:0"], at["experiment_end:0"]),
             ("train", None, at["train_begin:0"], at["train_end:0"])]
    epochs = events.loc[events["event"] == "epoch_begin", "data"]
    spans += [("epoch", int(e), at[f"epoch_begin:{e}"], at[f"epoch_end:{e}"]) for e in epochs]
    return pd.DataFrame({
        "phase": [s[0] for s in spans],
        "epoch": pd.array([s[1] for s in spans], dtype="Int64"),
        "window_start": utc(np.array([s[2] for s in spans])),
        "window_end": utc(np.array([s[3] for s in spans])),
        "duration_s": [s[3] - s[2] for s in spans],
        "gpu_energy_j": [gpu.energy(s[2], s[3]) for s in spans],
        "external_energy_j": [system.energy(s[2], s[3]) for s in spans],
    })


def spec_for_run(run: str, experiment: str, base: RepetitionSpec) -> RepetitionSpec:
    """Adapt ``base`` to a run's settings: a lower power or SM clock limit runs
    slower at lower power (the cap applies to the busy GPU power)."""
    settings = parse_settings(run, experiment)
    limit = settings.power_limit_w
    if settings.sm_clock_mhz is not None:
        limit = base.power_limit_w * (0.4 + 0.6 * settings.sm_clock_mhz / 1530)
    if limit is None:
        return base
    slowdown = (base.power_limit_w / limit) ** 0.35
    return replace(base, power_limit_w=limit, duration_s=round(base.duration_s * slowdown, 3))


def write_data_root(
    root: str | Path,
    runs: dict[str, dict[str, list[str]]],
    *,
    repetitions: int = 2,
    base: RepetitionSpec = RepetitionSpec(),
    overrides: dict[str, dict] | None = None,
    seed: int = 0,
) -> dict[str, GroundTruth]:
    """Write ``root/experiment/benchmark/run/repetition`` for every run.

    Repetitions of a run differ in their random draws and by ~1% in duration.

    ``runs`` maps experiment -> benchmark -> run names; ``overrides`` maps a
    repetition key to RepetitionSpec fields to change (e.g.
    ``{"counter_reset_at_s": 20.0}``). Returns the ground truth per key.
    """
    truths = {}
    number = 0
    for experiment, benchmarks in runs.items():
        for benchmark, names in benchmarks.items():
            for run in names:
                spec = spec_for_run(run, experiment, base)
                for repetition in range(repetitions):
                    key = f"{experiment}/{benchmark}/{run}/{repetition}"
                    spread = np.random.default_rng(seed + number).normal(1.0, 0.01)
                    changed = replace(spec, duration_s=round(spec.duration_s * spread, 3),
                                      **(overrides or {}).get(key, {}))
                    truths[key] = write_repetition(Path(root, key), changed, seed + number)
                    number += 1
    return truths


#: The bundled example (examples/gpu-data): runs, and the repetitions that differ.
EXAMPLE_RUNS = {
    "power-limit": {"bert": ["150W", "200W", "250W"]},
    "clock-limit": {"bert": ["877MHz,1065MHz"]},
}
EXAMPLE_OVERRIDES = {
    "power-limit/bert/200W/1": {"counter_reset_at_s": 25.0},
    "power-limit/bert/250W/1": {"batches_per_epoch": 4},
    "clock-limit/bert/877MHz,1065MHz/1": {"with_external": False},
}


def write_example(root: str | Path, seed: int = 2020) -> dict[str, GroundTruth]:
    """Write the bundled example data root: 4 settings x 2 repetitions of ~60 s."""
    return write_data_root(root, EXAMPLE_RUNS, repetitions=2, overrides=EXAMPLE_OVERRIDES,
                           seed=seed)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m joulehouse.gpu.generator", description=__doc__.splitlines()[0]
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--experiment", default="power-limit")
    parser.add_argument("--benchmarks", nargs="+", default=["bert"])
    parser.add_argument("--runs", nargs="+", default=["150W", "200W", "250W"])
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per repetition")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--gpu-power-hz", type=float, default=1 / 0.15)
    parser.add_argument("--samples-hz", type=float, default=50.0)
    parser.add_argument("--timezone", default="UTC", help="zone of the naive timestamps")
    parser.add_argument("--gpu-model", choices=sorted(GPU_COLUMNS), default="V100")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--example", action="store_true",
                        help="write the bundled example data root (other options ignored)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    if args.example:
        _report(write_example(args.out_dir))
        return
    base = RepetitionSpec(duration_s=args.duration, epochs=args.epochs, timezone=args.timezone,
                          gpu_power_interval_s=1 / args.gpu_power_hz, samples_hz=args.samples_hz,
                          external_interval_s=1 / args.gpu_power_hz, gpu_model=args.gpu_model)
    truths = write_data_root(args.out_dir, {args.experiment: dict.fromkeys(args.benchmarks,
                                                                          args.runs)},
                             repetitions=args.repetitions, base=base, seed=args.seed)
    _report(truths)


def _report(truths: dict[str, GroundTruth]) -> None:
    """Print each repetition's true experiment-window duration and energies."""
    for key, truth in truths.items():
        row = truth.windows.iloc[0]
        print(f"{key}\t{row.duration_s:.3f} s\t{row.gpu_energy_j:.1f} J gpu"
              f"\t{row.external_energy_j:.1f} J external")


if __name__ == "__main__":
    main()
