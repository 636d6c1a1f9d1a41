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

``--part landing``: the ``fact_quality`` update after LANDED new repetitions land on N
stored ones (issue 28), without Dagster: N repetitions stored as the GPU step stores them
(TEMPLATES generated repetitions, each stored under many keys: ``save_repetition``'s
frames, the energy with the figures, the facts kept per entry, and, where the code has it,
``gpu_repetition_figures`` by the step's own ``write_figures``), ``kept.update_quality``
once (whole), then REPEAT times LANDED new repetitions stored the same way and the update
timed: wall and CPU, the files its run listed (``Warehouse.parquet_files``) and the rows
of its state. ``--code DIR`` runs the code of another checkout (read before the imports;
e.g. a detached worktree of main, the code before): the store is built and timed with it.

Run: ``.venv/bin/python benchmarks/gpu_reading_figures.py --part landing --repetitions N
[--duration S] [--code DIR]`` (N = 1,000 and 10,000, each with and without ``--code``).
"""

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pandas as pd
from machine import code_root, describe, load_average

#: The checkout whose code runs (``--code DIR``; this one by default).
CODE = code_root(Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(CODE))

from assets.accounting import fact_quality, waste_step
from joulehouse import facts_entries
from joulehouse.accounting import kept
from joulehouse.accounting.repetition import FIGURE_COLUMNS, with_reading_figures
from joulehouse.gpu.energy import FACTS_OWNERSHIP, energy_facts_rows, repetition_energy
from joulehouse.gpu.generator import RepetitionSpec, write_data_root
from joulehouse.gpu.layout import RepetitionRef
from joulehouse.gpu.readers import read_repetition
from joulehouse.gpu.store import MANIFEST, repetition_frames, save_repetition
from joulehouse.gpu.store import TABLE as FRAMES_TABLE
from joulehouse.warehouse import Warehouse as Tables
from resources import Warehouse

try:  # the GPU step's write of gpu_repetition_figures (none in the code before it)
    from assets.gpu import write_figures
except ImportError:
    write_figures = None

ENERGY_TABLE = "gpu_repetition_energy"
REPEAT = 3
#: Repetitions landing at each timed update, and the generated ones stored under N keys.
LANDED = 10
TEMPLATES = 4


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


def generated(root: Path, duration_s: float) -> list[tuple]:
    """TEMPLATES generated repetitions: each read (as the GPU step reads it) with its energy
    and the readings' figures."""
    truths = write_data_root(root, {"power-limit": {"bert": ["150W", "200W"]}}, repetitions=2,
                             base=replace(RepetitionSpec(), duration_s=duration_s))
    found = []
    for key in list(truths)[:TEMPLATES]:
        rep = read_repetition(RepetitionRef.from_key(root, key))
        found.append((rep, with_reading_figures(repetition_energy(rep, data_root="lab"),
                                                repetition_frames(rep))))
    return found


def key_of(index: int) -> str:
    return f"lab/power-limit/bert/run{index // 10}/{index % 10}"


def land(tables: Tables, templates: list[tuple], indices: range, first: bool) -> None:
    """Store repetitions ``indices`` (:func:`key_of`) as the GPU step does: frames, energy (a partition each),
    their facts in one commit, their ``gpu_repetition_figures`` where the code has them
    (``first``: written over an empty store, as compared whole). A template's frames are
    saved once (under the first keys, ``save_repetition``) and their files copied under
    the other keys: fast, and neither code's update reads them (the code before lists
    them)."""
    energies, keys = [], [key_of(index) for index in indices]
    for index, key in zip(indices, keys, strict=True):
        template = index % len(templates)
        rep, energy = templates[template]
        if index == template:
            save_repetition(tables, key, rep)
        else:
            for name in [*repetition_frames(rep), MANIFEST]:
                table = f"{FRAMES_TABLE}/{name}"
                shutil.copyfile(tables.partition_path(table, key_of(template)),
                                tables.partition_path(table, key))
        energy = energy.assign(repetition=key.split("/", 1)[1])
        tables.write_partition(ENERGY_TABLE, key, energy)
        energies.append(energy)
    rows = energy_facts_rows(pd.concat(energies, ignore_index=True))
    if first:
        facts_entries.sync(tables, "gpu-benchmark", rows)
    else:
        facts_entries.replace_owned(tables, "gpu-benchmark", rows, keys, FACTS_OWNERSHIP)
    if write_figures is not None:
        write_figures(tables, None if first else keys, lambda: tuple(keys),
                      lambda owners: tables.read_partitions(ENERGY_TABLE, list(owners)))


def counted_update(tables: Tables) -> tuple[float, float, int, str]:
    """``kept.update_quality`` once: wall s, CPU s, files listed, why whole ('' if not)."""
    listed, listing = [0], Tables.parquet_files

    def counting(self, table):
        found = listing(self, table)
        listed[0] += len(found)
        return found

    Tables.parquet_files = counting
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        updated = kept.update_quality(tables)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        Tables.parquet_files = listing
    return wall, cpu, listed[0], updated.whole


def time_landing(repetitions: int, duration_s: float) -> None:
    """The fact_quality update after LANDED repetitions land on ``repetitions`` (see the
    module)."""
    print(f"code: {CODE} ({'with' if write_figures else 'without'} "
          "gpu_repetition_figures)")
    with tempfile.TemporaryDirectory() as folder:
        tables = Tables(Path(folder, "warehouse"))
        templates = generated(Path(folder, "lab"), duration_s)
        began = time.perf_counter()
        land(tables, templates, range(repetitions), first=True)
        print(f"{repetitions} repetitions stored in {time.perf_counter() - began:.0f} s")
        wall, cpu, listed, whole = counted_update(tables)
        print(f"first update (whole: {whole}): wall {wall:.2f} s, CPU {cpu:.2f} s, "
              f"{listed} files listed")
        for batch in range(REPEAT):
            first = repetitions + batch * LANDED
            land(tables, templates, range(first, first + LANDED), first=False)
            wall, cpu, listed, whole = counted_update(tables)
            assert not whole, whole
            state = len(tables.read_partitions(kept.QUALITY_STATE, ["inputs"]))
            print(f"update after {LANDED} landed on {first}: wall {wall:.2f} s, CPU "
                  f"{cpu:.2f} s, {listed} files listed, {state} state rows; load "
                  f"{load_average()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("figures", "landing"), default="figures")
    parser.add_argument("--repetitions", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=60.0, help="s per repetition")
    parser.add_argument("--code", help="the checkout whose code runs (default: this one)")
    args = parser.parse_args()
    print(describe(pd, dg, extra=f"load {load_average()} before"))
    if args.part == "landing":
        time_landing(args.repetitions, args.duration)
        return
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
