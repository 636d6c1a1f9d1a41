"""energy_facts written per entry by the GPU pipeline (assets/facts.py): a run handed k
repetitions writes their k entities in one commit, a repetition removed from its data root
loses its rows at the next rebuild, and the table equals a rebuild from scratch throughout,
from a warehouse written before (plain energy_facts/<source>.parquet) on; so do the
per-setting and per-benchmark tables, kept per setting (joulehouse/gpu/tables.py), and
fact_quality's figures of each repetition (gpu_repetition_figures, kept per repetition)."""

import shutil

import dagster as dg
import pandas as pd
import pytest

from assets.gpu import (
    ENERGY_TABLE,
    GpuHandOut,
    energy_facts,
    gpu_benchmark_energy,
    gpu_repetition_days,
    gpu_setting_energy,
)
from definitions import build_definitions
from joulehouse import entry_table
from joulehouse.accounting.repetition import FIGURES, figures_rows
from joulehouse.facts_entries import TABLE
from joulehouse.gpu import aggregate
from joulehouse.gpu.energy import FACTS_SOURCE, energy_facts_rows
from joulehouse.gpu.tables import BENCHMARK_TABLE, SETTING_TABLE
from resources import DataRoot, GpuBenchmarkSource
from sensors.gpu_repetitions import JOB_NAME
from sensors.local import launch_in_process
from sensors.partition_runs import RANGE_END, RANGE_START
from tests.dagster.conftest import DAY, repetition_keys
from tests.test_entry_table import facts as other_facts

OTHER = {"source": "clustercockpit"}
#: Plots drawn as deployed (tests/dagster/conftest.py): no test here looks at a plot.
pytestmark = pytest.mark.usefixtures("plots_as_deployed")


def ordered(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["source", "entity", "component", "method"], ignore_index=True)


def rebuilt(tables, keys: list[str]) -> pd.DataFrame:
    """What the code before issue 28 wrote for ``keys``: facts of their stored energy, at
    Delta's microseconds."""
    rows = energy_facts_rows(tables.read_partitions(ENERGY_TABLE, keys))
    return ordered(entry_table.to_microseconds(rows))


def stored(tables, source: str = FACTS_SOURCE) -> pd.DataFrame:
    facts = tables.read_table(TABLE)
    return ordered(facts[facts["source"] == source])


def assert_tables_rebuilt(tables, keys: list[str]) -> None:
    """The per-setting and per-benchmark tables equal those computed from scratch from the
    stored energy of ``keys``."""
    settings = aggregate.setting_table(tables.read_partitions(ENERGY_TABLE, keys))
    for table, rebuilt_rows in ((SETTING_TABLE, settings),
                                (BENCHMARK_TABLE, aggregate.benchmark_table(settings))):
        pd.testing.assert_frame_equal(
            tables.read_table(table).sort_values(aggregate.SETTING_KEY, ignore_index=True),
            rebuilt_rows)


def assert_figures(tables, keys: list[str]) -> None:
    """gpu_repetition_figures holds the figures of the stored energy of ``keys``, no other."""
    pd.testing.assert_frame_equal(
        FIGURES.stored(tables).sort_values("entity", ignore_index=True),
        FIGURES.ready(figures_rows(tables.read_partitions(ENERGY_TABLE, sorted(keys)), tables)))


def handing_out(keys: list[str]) -> dg.RunRequest:
    """A run over the generated repetitions' day handed ``keys`` alone, as the sensor asks."""
    return dg.RunRequest(tags={RANGE_START: DAY, RANGE_END: DAY},
                         run_config=GpuHandOut.run_config_of({DAY: keys}))


def facts_metadata(instance, run_id: str) -> dict:
    """The metadata of energy_facts/gpu's materialization in run ``run_id``."""
    [record] = [r for r in instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
        if r.event_log_entry.dagster_event.asset_key == energy_facts.key]
    return record.event_log_entry.dagster_event.materialization.metadata


def written(instance, run_id: str) -> dict:
    metadata = facts_metadata(instance, run_id)
    return {name: metadata[name].value for name in
            ("entities_written", "entities_removed", "rows_written", "dagster/row_count")}


def test_runs_write_their_repetitions_facts_and_a_rebuild_removes_deleted_ones(
        defs, instance, data_root, warehouse):
    keys = repetition_keys(data_root)
    assert len(keys) == 6
    tables = warehouse.tables()
    # a warehouse written by the code before: plain files, another source's too
    tables.write_partition(TABLE, OTHER["source"], other_facts(OTHER, [1, 2]))
    instance.add_dynamic_partitions(gpu_repetition_days.name, [DAY])
    job = defs.resolve_job_def(JOB_NAME)

    first = launch_in_process(job, instance, handing_out(keys[:3]))
    assert first.success
    assert written(instance, first.run_id) == {
        "entities_written": 3, "entities_removed": 0, "rows_written": len(rebuilt(tables, keys[:3])),
        "dagster/row_count": len(rebuilt(tables, keys[:3]))}
    pd.testing.assert_frame_equal(stored(tables), rebuilt(tables, keys[:3]))
    pd.testing.assert_frame_equal(stored(tables, OTHER["source"]),
                                  ordered(other_facts(OTHER, [1, 2])))  # migrated, untouched
    assert_tables_rebuilt(tables, keys[:3])
    assert_figures(tables, keys[:3])
    version = entry_table._open(tables, TABLE).version()
    figures_version = entry_table._open(tables, FIGURES.table).version()

    second = launch_in_process(job, instance, handing_out(keys[3:]))
    assert second.success
    assert written(instance, second.run_id)["entities_written"] == 3
    # the source's rows after the write, not the run's
    assert written(instance, second.run_id)["dagster/row_count"] == len(rebuilt(tables, keys))
    assert entry_table._open(tables, TABLE).version() == version + 1  # one commit
    facts = stored(tables)
    pd.testing.assert_frame_equal(facts, rebuilt(tables, keys))
    assert set(facts["entity"]) == set(keys)
    assert facts["energy_j"].gt(0).all() and facts.groupby("entity").size().ge(2).all()
    assert_tables_rebuilt(tables, keys)
    assert_figures(tables, keys)
    assert entry_table._open(tables, FIGURES.table).version() == figures_version + 1

    again = launch_in_process(job, instance, handing_out(keys[3:5]))  # the same again
    assert again.success and written(instance, again.run_id)["entities_written"] == 2
    pd.testing.assert_frame_equal(stored(tables), rebuilt(tables, keys))

    shutil.rmtree(data_root / keys[1].removeprefix("lab/"))  # removed from the tree
    rebuild = dg.materialize(  # the tables alone, no partition: every fact compared
        [defs.resolve_assets_def(energy_facts.key)],
        selection=[energy_facts.key, gpu_setting_energy.key, gpu_benchmark_energy.key],
        instance=instance)
    assert rebuild.success
    left = [key for key in keys if key != keys[1]]
    assert written(instance, rebuild.run_id) == {
        "entities_written": 0, "entities_removed": 1, "rows_written": 0,
        "dagster/row_count": len(rebuilt(tables, left))}
    pd.testing.assert_frame_equal(stored(tables), rebuilt(tables, left))
    assert_tables_rebuilt(tables, left)
    assert_figures(tables, left)
    pd.testing.assert_frame_equal(stored(tables, OTHER["source"]),
                                  ordered(other_facts(OTHER, [1, 2])))


@pytest.mark.parametrize("outdated", [0, 1])
def test_the_first_run_after_the_upgrade_writes_every_stored_repetitions_figures(
        defs, instance, data_root, warehouse, outdated):
    """Repetitions stored by the code before gpu_repetition_figures: a run over one
    repetition writes the figures of every stored one (the migration), but those of
    another setting's repetitions stored before the data_root column, which it names
    instead of failing."""
    keys = repetition_keys(data_root)
    tables = warehouse.tables()
    instance.add_dynamic_partitions(gpu_repetition_days.name, [DAY])
    job = defs.resolve_job_def(JOB_NAME)
    assert launch_in_process(job, instance, handing_out(keys)).success
    facts = stored(tables)
    shutil.rmtree(tables.table_path(FIGURES.table))  # as the code before left the store
    old = keys[:outdated]  # another setting than keys[-1]'s
    for key in old:  # as code version 1 stored it: no data_root column
        tables.write_partition(ENERGY_TABLE, key, tables.read_partitions(
            ENERGY_TABLE, [key]).drop(columns="data_root"))

    run = launch_in_process(job, instance, handing_out(keys[-1:]))
    assert run.success
    assert facts_metadata(instance, run.run_id)["figures_skipped"].value == old
    assert written(instance, run.run_id)["entities_written"] == 1
    pd.testing.assert_frame_equal(stored(tables), facts)
    assert_figures(tables, keys[outdated:])


def test_a_run_without_partitions_that_fails_leaves_the_figures_unchanged(
        defs, instance, data_root, warehouse, tmp_path):
    """The only data root removed from the configuration: a run without partitions
    fails (no energy stored of any configured root) before writing the figures."""
    keys = repetition_keys(data_root)
    tables = warehouse.tables()
    instance.add_dynamic_partitions(gpu_repetition_days.name, [DAY])
    assert launch_in_process(defs.resolve_job_def(JOB_NAME), instance,
                             handing_out(keys)).success
    version = entry_table._open(tables, FIGURES.table).version()
    (tmp_path / "b").mkdir()
    moved = build_definitions(GpuBenchmarkSource(
        data_roots=[DataRoot(path=str(tmp_path / "b"), name="b")]), warehouse)
    rebuild = dg.materialize([moved.resolve_assets_def(energy_facts.key)],
                             selection=[energy_facts.key], instance=instance,
                             raise_on_error=False)
    assert not rebuild.success
    assert entry_table._open(tables, FIGURES.table).version() == version
    assert_figures(tables, keys)
    pd.testing.assert_frame_equal(stored(tables), rebuilt(tables, keys))
