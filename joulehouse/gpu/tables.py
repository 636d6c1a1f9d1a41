"""The per-setting and per-benchmark tables in the warehouse, kept per setting.

Both tables are kept per entry (``joulehouse/entry_table.py``, Delta Lake), keyed by the
setting (data root, experiment, benchmark, run: ``aggregate.SETTING_KEY``). A change of
some repetitions costs what they touch, whatever else is stored (issue 28):

1. :func:`refresh_settings`: the settings the repetitions belong to are recomputed from
   the stored energy of those settings' repetitions only (found from their partition
   keys, which name the setting), and their rows replaced in one commit; a setting whose
   repetitions are all gone loses its row;
2. :func:`refresh_benchmarks`: the benchmarks of those settings are recomputed from
   their rows of the setting table, and their rows replaced in one commit.

A stop between the two commits heals at the next run, whatever it touches: 1. first marks
the benchmarks of its settings pending (:data:`PENDING_TABLE`, one commit, none where
they are already), 2. recomputes the pending ones with its own, then clears their marks.

Without touched repetitions (a rebuild) both are computed from every stored repetition
and replace their tables whole. Either way the tables equal a rebuild from scratch:
:func:`aggregate.setting_table` computes each setting's row from its repetitions alone,
:func:`aggregate.benchmark_table` each benchmark's rows from its settings alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from joulehouse import entry_sync, entry_table
from joulehouse.gpu import aggregate
from joulehouse.warehouse import Warehouse

SETTING_TABLE = "gpu_setting_energy"
BENCHMARK_TABLE = "gpu_benchmark_energy"
#: The benchmarks (``aggregate.BENCHMARK_KEY``) whose setting rows may have changed since
#: their benchmark rows were written: marked before a setting table's commit, cleared
#: after their benchmark rows' (normally empty).
PENDING_TABLE = "gpu_benchmark_energy_pending"


def setting_of(key: str) -> tuple[str, ...]:
    """The setting (``aggregate.SETTING_KEY``'s values) of a repetition's partition key
    ``<data root>/<experiment>/<benchmark>/<run>/<repetition>``."""
    parts = key.split("/")
    if len(parts) != 5 or not all(parts):
        raise ValueError(f"{key!r} is no repetition's key "
                         "(<data root>/<experiment>/<benchmark>/<run>/<repetition>)")
    return tuple(parts[:4])


@dataclass(frozen=True)
class Refreshed:
    """What a refresh wrote: the rows of the settings (or benchmarks) it recomputed, how
    many of them it recomputed (those without rows now lost theirs), and the repetitions
    (or settings) it read."""

    rows: pd.DataFrame
    recomputed: int
    read: int


def refresh_settings(warehouse: Warehouse, keys: Sequence[str],
                     energy_of: Callable[[list[str]], pd.DataFrame],
                     touched: Iterable[str] | None) -> Refreshed:
    """Recompute the settings of the repetitions ``touched`` (partition keys; None: every
    setting, the table replaced whole) and write their rows in one commit. ``keys``: the
    repetitions the settings are made of (repetition keys); ``energy_of(keys)``: the
    stored per-repetition energy of those of ``keys`` that have one (an empty frame if
    none). Repetitions are read in key order, as a rebuild reads them (``keys`` may come
    in another order): a setting's sums, means and firsts follow its rows' order, to the
    last bit."""
    keys = sorted(keys)
    if touched is None:
        settings = None
    else:
        wanted = {setting_of(key) for key in touched}
        keys = [key for key in keys if setting_of(key) in wanted]
        settings = pd.DataFrame(sorted(wanted), columns=aggregate.SETTING_KEY)
    energy = energy_of(keys) if keys else pd.DataFrame()
    rows = aggregate.setting_table(energy) if len(energy) else pd.DataFrame()
    _mark(warehouse, _benchmarks(rows) if settings is None else settings, settings is None)
    entry_table.replace_keys(warehouse, SETTING_TABLE, rows, settings)
    entry_sync.compact_if_due(warehouse, SETTING_TABLE)
    read = len(energy[["data_root", "repetition"]].drop_duplicates()) if len(energy) else 0
    return Refreshed(rows, len(rows) if settings is None else len(settings), read)


def refresh_benchmarks(warehouse: Warehouse, settings: pd.DataFrame | None) -> Refreshed:
    """Recompute the benchmarks of ``settings`` (rows with ``aggregate.BENCHMARK_KEY``'s
    columns; None: every benchmark, the table replaced whole) and those pending (a stop
    came between an earlier run's two commits) from their rows of the setting table, and
    write their rows in one commit; then clear their marks."""
    pending = _pending(warehouse)
    if settings is None:
        benchmarks = None
        rows = warehouse.read_table(SETTING_TABLE)
    else:
        benchmarks = _benchmarks(pd.concat([settings, pending], ignore_index=True))
        if benchmarks.empty:
            return Refreshed(pd.DataFrame(), 0, 0)
        rows = entry_table.read_keys(warehouse, SETTING_TABLE, benchmarks)
    table = aggregate.benchmark_table(rows) if len(rows) else pd.DataFrame()
    entry_table.replace_keys(warehouse, BENCHMARK_TABLE, table, benchmarks)
    entry_sync.compact_if_due(warehouse, BENCHMARK_TABLE)
    if len(pending):
        entry_table.replace_keys(warehouse, PENDING_TABLE, pending.iloc[:0], benchmarks)
    recomputed = table[aggregate.BENCHMARK_KEY].drop_duplicates() if len(table) else table
    return Refreshed(table, len(recomputed) if benchmarks is None else len(benchmarks),
                     len(rows))


def _benchmarks(rows: pd.DataFrame) -> pd.DataFrame:
    """The distinct benchmarks (``aggregate.BENCHMARK_KEY``) of ``rows``, in order."""
    if rows.empty:
        return pd.DataFrame(columns=aggregate.BENCHMARK_KEY, dtype=object)
    return rows[aggregate.BENCHMARK_KEY].drop_duplicates().sort_values(
        aggregate.BENCHMARK_KEY, ignore_index=True)


def _pending(warehouse: Warehouse) -> pd.DataFrame:
    """The benchmarks marked pending (:data:`PENDING_TABLE`)."""
    return _benchmarks(entry_table.read(warehouse, PENDING_TABLE))


def _mark(warehouse: Warehouse, settings: pd.DataFrame, whole: bool) -> None:
    """Mark the benchmarks of ``settings`` pending (those of every stored benchmark row
    too where ``whole``: a rebuild may drop any), one commit; none where all are."""
    wanted = _benchmarks(pd.concat(
        [settings, entry_table.read(warehouse, BENCHMARK_TABLE)] if whole else [settings],
        ignore_index=True))
    new = wanted.merge(_pending(warehouse), how="left", indicator=True)["_merge"] == "left_only"
    if new.any():
        entry_table.replace_keys(warehouse, PENDING_TABLE, wanted, wanted)


def stored_rows(warehouse: Warehouse, table: str) -> int:
    """The rows of ``table`` now, from the Delta log's statistics (``entry_table.count``)."""
    return entry_table.count(warehouse, table, {})
