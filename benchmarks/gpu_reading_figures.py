"""Benchmark: ``waste_step`` and ``fact_quality`` over N stored GPU repetitions, reading
the readings' figures stored with each repetition's energy against reading every
repetition's frames (energy stored by code version 2, before the figures).

Generates N repetitions (``joulehouse.gpu.generator``: 60 s each by default, gpu-power
every 0.15 s, 50 Hz samples, the external meter), stores their validated frames and their
energy with the figures in a warehouse in a temporary folder (the GPU step's own
functions, no Dagster run), the GPU rows of ``energy_facts``, then materializes the two
accounting assets in-process, REPEAT times each way: "figures" as stored, "frames" with
the figures' columns dropped from every energy partition, as older code stored them. The
tables are compared (they must be equal) and the figures printed: wall and CPU time of
the process (CPU: what the code costs on a shared machine), the machine and the load. The
cost moved into the GPU step is printed too: the CPU time of ``with_reading_figures`` beside
that of ``repetition_energy`` over the N repetitions, as the step pays it once per landing.

Run: ``.venv/bin/python benchmarks/gpu_reading_figures.py [--repetitions N] [--duration S]``.
"""

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from machine import describe, load_average

from assets.accounting import fact_quality, waste_step
from joulehouse.accounting.repetition import FIGURE_COLUMNS, with_reading_figures
from joulehouse.gpu.energy import energy_facts_rows, repetition_energy
from joulehouse.gpu.generator import RepetitionSpec, write_data_root
from joulehouse.gpu.layout import RepetitionRef
from joulehouse.gpu.readers import read_repetition
from joulehouse.gpu.store import save_repetition
from resources import Warehouse

ENERGY_TABLE = "gpu_repetition_energy"
REPEAT = 3


def store(root: Path, repetitions: int, duration_s: float, tables) -> dict[str, pd.DataFrame]:
    """Generate and store ``repetitions`` repetitions under data root ``root``; their
    energy with the figures by partition key."""
    runs = {"power-limit": {"bert": [f"{150 + i}W" for i in range(repetitions // 2 + 1)]}}
    truths = write_data_root(root, runs, repetitions=2,
                             base=replace(RepetitionSpec(), duration_s=duration_s))
    energies = {}
    cpu = {"repetition_energy": 0.0, "with_reading_figures": 0.0}
    for key in list(truths)[:repetitions]:
        rep = read_repetition(RepetitionRef.from_key(root, key))
        frames = save_repetition(tables, f"lab/{key}", rep)
        began = time.process_time()
        energy = repetition_energy(rep, data_root="lab")
        computed = time.process_time()
        energy = with_reading_figures(energy, frames)
        cpu["repetition_energy"] += computed - began
        cpu["with_reading_figures"] += time.process_time() - computed
        tables.write_partition(ENERGY_TABLE, f"lab/{key}", energy)
        energies[f"lab/{key}"] = energy
    print("in the GPU step, CPU over all repetitions: " + ", ".join(
        f"{name} {seconds:.2f} s" for name, seconds in cpu.items()))
    tables.write_partition("energy_facts", "gpu",
                           energy_facts_rows(pd.concat(energies.values(), ignore_index=True)))
    return energies


def materialize(warehouse: Warehouse) -> tuple[float, float, pd.DataFrame, pd.DataFrame]:
    """Both assets once: wall s, CPU s, and the two tables."""
    wall, cpu = time.perf_counter(), time.process_time()
    with dg.instance_for_test() as instance:
        result = dg.materialize([waste_step, fact_quality], instance=instance,
                                resources={"warehouse": warehouse})
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert result.success
    tables = warehouse.tables()
    return wall, cpu, tables.read_table("waste"), tables.read_table("fact_quality")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=60.0, help="s per repetition")
    args = parser.parse_args()
    print(describe(pd, dg, extra=f"load {load_average()} before"))
    with tempfile.TemporaryDirectory() as folder:
        warehouse = Warehouse(root=str(Path(folder, "warehouse")))
        tables = warehouse.tables()
        began = time.perf_counter()
        energies = store(Path(folder, "lab"), args.repetitions, args.duration, tables)
        print(f"{len(energies)} repetitions of {args.duration:.0f} s generated and stored in "
              f"{time.perf_counter() - began:.1f} s")
        results = {}
        for way in ("figures", "frames"):
            for key, energy in energies.items():
                kept = energy if way == "figures" else energy.drop(columns=FIGURE_COLUMNS)
                tables.write_partition(ENERGY_TABLE, key, kept)
            runs = [materialize(warehouse) for _ in range(REPEAT)]
            results[way] = runs
            print(f"{way}: wall " + ", ".join(f"{r[0]:.2f}" for r in runs)
                  + " s; CPU " + ", ".join(f"{r[1]:.2f}" for r in runs) + " s")
        for index, name in ((2, "waste"), (3, "fact_quality")):
            pd.testing.assert_frame_equal(results["figures"][0][index],
                                          results["frames"][0][index])
            print(f"{name}: {len(results['figures'][0][index])} rows, equal both ways")
        best = {way: min(r[0] for r in runs) for way, runs in results.items()}
        print(f"best wall: figures {best['figures']:.2f} s, frames {best['frames']:.2f} s "
              f"({best['frames'] / best['figures']:.1f} x)")
    print(f"load {load_average()} after")


if __name__ == "__main__":
    main()
