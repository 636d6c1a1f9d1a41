"""The accounting assets over a warehouse of facts: tables, carbon, the coverage check."""

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from assets.accounting import (
    ACCOUNTING_AUTOMATION,
    DERIVED_AUTOMATION,
    carbon_intensity,
    fact_quality,
    tariffs,
    trust_checks,
    waste_step,
)
from assets.accounting import accounting as accounting_asset
from assets.gpu import TABLE_AUTOMATION
from assets.pools import ACCOUNTING_POOL, DERIVED_POOL
from joulehouse import entry_sync, entry_table
from joulehouse.accounting import compaction, generator
from joulehouse.accounting.carbon import CarbonSettings
from joulehouse.accounting.cost import CostSettings
from joulehouse.accounting.repetition import FIGURES, figures_rows
from joulehouse.facts import ENERGY_FACTS_COLUMNS
from joulehouse.gpu.energy import FACTS_OWNERSHIP as GPU_OWNERSHIP
from resources import AccountingSettings, Warehouse
from tests.dagster_sqlite import DAGSTER_SQLITE, empty_instance


@pytest.fixture
def facts() -> pd.DataFrame:
    """100 generated ClusterCockpit-like facts in March 2022, and one in 2019 (uncovered)."""
    facts = generator.facts(100, "2022-03-01", "5D", seed=7, sources=("clustercockpit",))
    old = facts.iloc[[0]].assign(entity="g0/old",
                                 window_start=pd.Timestamp("2019-01-01", tz="UTC"),
                                 window_end=pd.Timestamp("2019-01-01 01:00", tz="UTC"),
                                 duration_s=3600.0)
    return pd.concat([facts, old], ignore_index=True)[ENERGY_FACTS_COLUMNS]


def test_accounting_tables_and_the_coverage_check(tmp_path, facts, monkeypatch):
    landing = tmp_path / "intensity"
    generator.write_csv(generator.electricity_maps_frame("DE", "Germany", "2022-02-28",
                                                         "2022-03-08"), landing / "de.csv")
    store = Warehouse(root=str(tmp_path / "warehouse"))
    store.tables().write_partition("energy_facts", "clustercockpit", facts)
    prices = tmp_path / "tariffs"
    prices.mkdir()
    (prices / "flat.csv").write_text(
        "site,timezone,valid_from,valid_to,weekdays,start,end,price_per_kwh,currency\n"
        "lab,UTC,2022-02-01,2022-04-01,*,00:00,24:00,0.25,EUR\n")
    settings = AccountingSettings(intensity_landing=str(landing), time_zone="Europe/Berlin",
                                  zones={"clustercockpit": "DE"}, pue=1.2,
                                  tariff_landing=str(prices), tariff_sites={"*": "lab"})
    with empty_instance() as instance:
        result = dg.materialize([carbon_intensity, tariffs, accounting_asset],
                                instance=instance,
                                resources={"accounting": settings, "warehouse": store})
        assert result.success
        tables = store.tables()
        daily = tables.read_table("accounting_daily")
        for calendar in ("UTC", "Europe/Berlin"):
            rows = daily[daily["calendar"] == calendar]
            assert rows["energy_j"].sum() == pytest.approx(facts["energy_j"].sum(), rel=1e-12)
        carbon = tables.read_table("carbon_per_fact")
        assert len(carbon) == len(facts)
        assert carbon["co2_g"].isna().sum() == 1 and carbon["pue"].eq(1.2).all()
        assert carbon.loc[carbon["co2_g"].isna(), "entity"].tolist() == ["g0/old"]
        # Day pieces carry the same carbon as the whole facts.
        utc = daily[daily["calendar"] == "UTC"]
        assert utc["co2_g"].sum() == pytest.approx(carbon["co2_g"].sum(), rel=1e-9)
        assert utc.loc[utc["day"] == "2019-01-01", "co2_g"].isna().all()
        monthly = tables.read_table("accounting_monthly")
        assert sorted(monthly["month"].dt.strftime("%Y-%m").unique()) == ["2019-01", "2022-03"]
        # A flat 0.25 EUR/kWh: cost = energy x PUE x 0.25 for all but the 2019 fact.
        cost = tables.read_table("cost_per_fact")
        priced = facts["entity"] != "g0/old"
        assert cost["cost"].sum() == pytest.approx(
            facts.loc[priced, "energy_j"].sum() / 3.6e6 * 1.2 * 0.25, rel=1e-9)
        assert cost.loc[cost["cost"].isna(), "entity"].tolist() == ["g0/old"]
        assert cost.loc[cost["entity"] != "g0/old", "tariff_files"].eq("flat.csv").all()
        assert utc["cost"].sum() == pytest.approx(cost["cost"].sum(), rel=1e-9)
        assert set(utc["currency"]) == {"EUR"}
        checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
        check = checks["carbon_covered"]
        assert not check.passed
        assert check.severity == dg.AssetCheckSeverity.WARN
        assert check.metadata["facts_without_carbon"].value == 1
        assert not checks["cost_covered"].passed
        assert checks["cost_covered"].metadata["facts_without_cost"].value == 1
        by_key = {m.asset_key.to_user_string(): m.metadata
                  for m in result.get_asset_materialization_events()
                  for m in [m.event_specific_data.materialization]}
        assert by_key["carbon_per_fact"]["dagster/row_count"].value == len(facts)
        assert by_key["accounting_daily"]["dagster/row_count"].value == len(daily)
        assert "data:image/png;base64," in by_key["accounting_daily"][
            "energy_co2_and_cost_per_day"].value
        assert by_key["cost_per_fact"]["total_cost"].value == {
            "EUR": round(float(cost["cost"].sum()), 2)}
        assert by_key["tariffs"]["dagster/row_count"].value == 59
        assert by_key["carbon_intensity"]["dagster/row_count"].value == 2 * 8 * 24
        assert by_key["carbon_per_fact"]["compacted"].value is None  # one file a table
        # a fact landed per entry (the plain files migrated to Delta by that write): the
        # next run accounts it alone, comparing the others with carbon_per_fact, and merges
        # its file into the one before (over one small file of the source: due here)
        monkeypatch.setattr(compaction, "COMPACT_ABOVE", 1)
        landed = facts.iloc[[1]].assign(entity="g1/landed")
        tables.write_entries("energy_facts", entry_table.to_microseconds(landed),
                             {"source": "clustercockpit"})
        again = dg.materialize([accounting_asset], instance=instance,
                               resources={"accounting": settings, "warehouse": store})
        [carbon_event] = [m.event_specific_data.materialization.metadata
                          for m in again.get_asset_materialization_events()
                          if m.asset_key == dg.AssetKey("carbon_per_fact")]
        assert carbon_event["recomputed"].value == {
            "whole": None, "entities_changed": 1, "entities_removed": 0, "days": 2,
            "months": 2, "facts_read": 23,  # the facts of its days, not of its months
            "jobs_changed": 0, "jobs_read": 0}  # no cc_jobs stored
        assert carbon_event["dagster/row_count"].value == len(facts) + 1
        assert carbon_event["compacted"].value == {"carbon_per_fact": {
            "added": 1, "merged": 2, "source": "clustercockpit"}}
        assert len(entry_table.files(tables, "carbon_per_fact")) == 1


def test_the_settings_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("JOULEHOUSE_INTENSITY_LANDING", str(tmp_path))
    monkeypatch.setenv("JOULEHOUSE_SITE_TIMEZONE", "Europe/Paris")
    monkeypatch.setenv("JOULEHOUSE_CARBON_ZONES", "*=DE, clustercockpit/fritz=FR")
    monkeypatch.setenv("JOULEHOUSE_PUE", "1.4")
    monkeypatch.setenv("JOULEHOUSE_INTENSITY_FALLBACK", "DE=DEU")
    monkeypatch.setenv("JOULEHOUSE_TARIFF_LANDING", str(tmp_path / "tariffs"))
    monkeypatch.setenv("JOULEHOUSE_TARIFF_SITES", "*=main, geopm=lab")
    settings = AccountingSettings.from_env("examples/intensity")
    assert settings.cost_settings() == CostSettings(sites={"*": "main", "geopm": "lab"},
                                                    pue=1.4)
    assert settings.tariff_landing == str(tmp_path / "tariffs")
    assert settings.carbon_settings() == CarbonSettings(
        zones={"*": "DE", "clustercockpit/fritz": "FR"}, pue=1.4, basis="lca",
        yearly_fallback={"DE": "DEU"})
    assert (settings.intensity_landing, settings.time_zone) == (str(tmp_path), "Europe/Paris")
    monkeypatch.setenv("JOULEHOUSE_CARBON_ZONES", "DE")
    with pytest.raises(ValueError, match="JOULEHOUSE_CARBON_ZONES: 'DE' is not key=value"):
        AccountingSettings.from_env("examples/intensity")


def test_trust_checks_table_and_one_check_per_rule(tmp_path):
    begin = pd.Timestamp("2024-01-15 10:00", tz="UTC")
    facts = pd.DataFrame([
        {"source": "gpu-benchmark", "entity": "r/e/b/run/0", "component": component,
         "window_start": begin, "window_end": begin + pd.Timedelta("1h"), "duration_s": 3600.0,
         "energy_j": energy, "method": method}
        for component, method, energy in (("gpu", "counter", 1000.0), ("gpu", "power", 1200.0),
                                          ("external", "external", 1500.0))],
        columns=ENERGY_FACTS_COLUMNS)
    store = Warehouse(root=str(tmp_path / "warehouse"))
    store.tables().write_partition("energy_facts", "gpu", facts)
    with empty_instance() as instance:
        result = dg.materialize([trust_checks], instance=instance,
                                resources={"warehouse": store})
        assert result.success
        table = store.tables().read_table("trust_checks")
        assert table.sort_values("rule")[["rule", "passed"]].values.tolist() == [
            ["external_at_least_gpu", True], ["gpu_counter_vs_power", False]]
        checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
        assert set(checks) == {"gpu_counter_vs_power", "external_at_least_gpu",
                               "smartwatts_vs_rapl", "geopm_vs_clustercockpit"}
        assert not checks["gpu_counter_vs_power"].passed
        assert checks["gpu_counter_vs_power"].metadata["failed"].value == 1
        assert checks["external_at_least_gpu"].passed
        assert checks["smartwatts_vs_rapl"].passed
        assert checks["smartwatts_vs_rapl"].description == "no overlapping figures to compare"


GPU_BEGIN = pd.Timestamp("2024-01-15 10:00", tz="UTC")
GPU_KEY = "gpu-data/e/b/run/0"


def warehouse_with_one_gpu_fact(tmp_path, gpu_power: pd.DataFrame) -> Warehouse:
    """A warehouse holding one GPU repetition's counter fact (30 s from GPU_BEGIN, 6.9 kJ)
    and its stored ``gpu_power`` frame."""
    facts = pd.DataFrame([{"source": "gpu-benchmark", "entity": GPU_KEY, "component": "gpu",
                           "window_start": GPU_BEGIN,
                           "window_end": GPU_BEGIN + pd.Timedelta("30s"), "duration_s": 30.0,
                           "energy_j": 6900.0, "method": "counter"}],
                         columns=ENERGY_FACTS_COLUMNS)
    store = Warehouse(root=str(tmp_path / "warehouse"))
    store.tables().write_partition("energy_facts", "gpu", facts)
    store.tables().write_partition("gpu_validated_frames/gpu_power", GPU_KEY, gpu_power)
    return store


def test_waste_tables_with_rule_versions_ranking_and_plot(tmp_path):
    begin, key = GPU_BEGIN, GPU_KEY
    seconds = np.arange(31)
    store = warehouse_with_one_gpu_fact(tmp_path, pd.DataFrame(
        {"time": begin + pd.to_timedelta(seconds, unit="s"),
         "power_w": np.where(seconds <= 10, 100.0, 300.0),
         "util_gpu_pct": np.where(seconds <= 10, 0.0, 80.0)}))
    with empty_instance() as instance:
        result = dg.materialize([waste_step], instance=instance, resources={"warehouse": store})
        assert result.success
        table = store.tables().read_table("waste")
        assert table[["rule", "version", "entity", "flagged"]].values.tolist() == [
            ["gpu_idle", 1, key, True]]
        assert table["idle_energy_j"].iloc[0] == pytest.approx(1000.0)
        weekly = store.tables().read_table("waste_weekly")
        assert weekly[["user", "rank"]].values.tolist() == [["", 1]]
        assert weekly["gpu_hours"].iloc[0] == pytest.approx(30 / 3600)
        by_key = {m.asset_key.to_user_string(): m.metadata
                  for m in result.get_asset_materialization_events()
                  for m in [m.event_specific_data.materialization]}
        assert by_key["waste"]["flagged"].value == 1
        assert "data:image/png;base64," in by_key["waste_weekly"]["idle_energy_per_week"].value


def test_a_repetition_without_utilisation_is_named_not_judged_in_the_waste_metadata(tmp_path):
    store = warehouse_with_one_gpu_fact(tmp_path, pd.DataFrame(  # no util_gpu_pct (MIG)
        {"time": GPU_BEGIN + pd.to_timedelta(np.arange(31), unit="s"), "power_w": 100.0}))
    with dg.instance_for_test() as instance:
        result = dg.materialize([waste_step], instance=instance, resources={"warehouse": store})
    assert result.success
    assert store.tables().read_table("waste").empty
    [metadata] = [m.event_specific_data.materialization.metadata
                  for m in result.get_asset_materialization_events()
                  if m.asset_key == dg.AssetKey("waste")]
    assert metadata["gpu_repetitions_not_judged_in_this_run"].value == 1
    assert metadata["not_judged_in_this_run"].value["repetitions"] == [GPU_KEY]


def test_fact_quality_table_from_the_sources_tables(tmp_path):
    """A repetition's energy stored without the readings' figures (older code): its
    ``gpu_repetition_figures`` row, as the GPU step writes it, has its step from its frame;
    fact_quality reads that row alone."""
    store = warehouse_with_one_gpu_fact(tmp_path, pd.DataFrame(
        {"time": GPU_BEGIN + pd.to_timedelta(np.arange(0, 30.5, 0.25), unit="s")}))
    tables = store.tables()
    energy = pd.DataFrame({
        "data_root": ["gpu-data"], "repetition": ["e/b/run/0"], "phase": ["experiment"],
        "duration_s": [30.0], **{f"{m}_gap_s": [3.0] for m in ("counter", "power", "samples",
                                                               "external")}})
    entry_sync.replace_owned(tables, FIGURES, FIGURES.ready(figures_rows(energy, tables)),
                             [GPU_KEY], GPU_OWNERSHIP)
    with empty_instance() as instance:
        result = dg.materialize([fact_quality], instance=instance,
                                resources={"warehouse": store})
        assert result.success
        table = store.tables().read_table("fact_quality")
        assert table["sampling_interval_s"].tolist() == [0.25]
        assert table["covered_fraction"].tolist() == [pytest.approx(0.9)]


def test_waste_and_quality_take_stored_figures_and_read_frames_only_without(tmp_path):
    """Repetition ``lab/...`` has its readings' figures stored with its energy, and a frame
    that would give other figures (not read); GPU_KEY has no energy stored, only its
    gpu-power frame: waste judges both (GPU_KEY from its frame); fact_quality reads
    neither frame, only ``gpu_repetition_figures`` (GPU_KEY has no row there)."""
    seconds = np.arange(31)
    store = warehouse_with_one_gpu_fact(tmp_path, pd.DataFrame(
        {"time": GPU_BEGIN + pd.to_timedelta(seconds, unit="s"),
         "power_w": np.where(seconds <= 10, 100.0, 300.0),
         "util_gpu_pct": np.where(seconds <= 10, 0.0, 80.0)}))
    tables = store.tables()
    facts = tables.read_table("energy_facts")
    figured = facts.assign(entity="lab/e/b/run/1")
    tables.write_partition("energy_facts", "gpu", pd.concat([facts, figured]))
    end = GPU_BEGIN + pd.Timedelta("30s")
    tables.write_partition("gpu_validated_frames/gpu_power", "lab/e/b/run/1",
                           tables.read_partitions("gpu_validated_frames/gpu_power", [GPU_KEY]))
    tables.write_partition("gpu_repetition_energy", "lab/e/b/run/1", pd.DataFrame({
        "data_root": ["lab"], "repetition": ["e/b/run/1"], "phase": ["experiment"],
        "window_start": [GPU_BEGIN], "window_end": [end], "duration_s": [30.0],
        **{f"{m}_gap_s": [0.0] for m in ("counter", "power", "samples", "external")},
        "counter_step_s": [0.5], "power_step_s": [0.5], "samples_step_s": [0.02],
        "external_step_s": [float("nan")], "gpu_idle_version": [1],
        "gpu_idle_threshold": [0.1], "gpu_idle_judged_j": [6000.0],
        "gpu_idle_energy_j": [500.0], "gpu_idle_s": [5.0]}))
    entry_sync.replace_owned(tables, FIGURES, FIGURES.ready(figures_rows(
        tables.read_partitions("gpu_repetition_energy", ["lab/e/b/run/1"]), tables)),
        ["lab/e/b/run/1"], GPU_OWNERSHIP)
    with dg.instance_for_test() as instance:
        result = dg.materialize([waste_step, fact_quality], instance=instance,
                                resources={"warehouse": store})
    assert result.success
    judged = tables.read_table("waste").set_index("entity")
    assert judged[["energy_j", "idle_energy_j", "idle_s"]].to_dict("index") == {
        GPU_KEY: pytest.approx({"energy_j": 6900.0, "idle_energy_j": 1000.0, "idle_s": 10.0}),
        "lab/e/b/run/1": {"energy_j": 6000.0, "idle_energy_j": 500.0, "idle_s": 5.0}}
    steps = tables.read_table("fact_quality").set_index("entity")
    assert steps["sampling_interval_s"].to_dict() == pytest.approx(
        {GPU_KEY: float("nan"), "lab/e/b/run/1": 0.5}, nan_ok=True)
    assert steps["covered_fraction"].to_dict() == pytest.approx(
        {GPU_KEY: float("nan"), "lab/e/b/run/1": 1.0}, nan_ok=True)


def test_a_missing_landing_folder_fails_and_keeps_the_stored_series(tmp_path):
    landing = tmp_path / "intensity"
    generator.write_csv(generator.electricity_maps_frame("DE", "Germany", "2022-02-28",
                                                         "2022-03-08"), landing / "de.csv")
    store = Warehouse(root=str(tmp_path / "warehouse"))
    with empty_instance() as instance:
        stored = dg.materialize([carbon_intensity], instance=instance, resources={
            "accounting": AccountingSettings(intensity_landing=str(landing)), "warehouse": store})
        assert stored.success
        before = store.tables().read_table("carbon_intensity")
        assert len(before) == 2 * 8 * 24  # 8 days hourly, direct and life-cycle bases
        unmounted = dg.materialize([carbon_intensity], instance=instance, raise_on_error=False,
                                   resources={"accounting": AccountingSettings(
                                       intensity_landing=str(tmp_path / "gone")),
                                              "warehouse": store})
        overlapping = landing / "de-again.csv"  # a second file giving the same hours
        overlapping.write_text((landing / "de.csv").read_text())
        bad = dg.materialize([carbon_intensity], instance=instance, raise_on_error=False,
                             resources={"accounting": AccountingSettings(
                                 intensity_landing=str(landing)), "warehouse": store})
    for result, said in ((unmounted, "gone: no such landing folder"),
                         (bad, "de-again.csv")):
        assert not result.success
        [failure] = [event for event in result.all_events if event.is_step_failure]
        assert said in failure.step_failure_data.error.message
        # a verdict, failed at once: a step retry (STEP_RETRY) would only fail the same
        assert not [event for event in result.all_events if event.is_step_up_for_retry]
    pd.testing.assert_frame_equal(store.tables().read_table("carbon_intensity"), before)


def test_the_accounting_is_asked_for_beside_a_source_run_and_again_after_its_own():
    """A fact source updated while another source's run is in flight: the accounting's
    condition asks for it at once, where the other tables' condition waits for that run to
    end (with five sources landing all day one nearly always is). A source's facts written
    while the accounting's own run is in flight (after it read them; seen after the
    evaluation that followed the request, or at it) ask for it again once that run has
    ended, then nothing more. The accounting assets carry that condition and
    their own pool."""

    @dg.asset
    def facts_a() -> None:
        pass

    @dg.asset
    def facts_b() -> None:
        pass

    @dg.asset(deps=[facts_a, facts_b], automation_condition=ACCOUNTING_AUTOMATION)
    def accounted() -> None:
        pass

    @dg.asset(deps=[facts_a, facts_b], automation_condition=TABLE_AUTOMATION)
    def other_table() -> None:
        pass

    jobs = [dg.define_asset_job("source_a", selection=[facts_a]),
            dg.define_asset_job("accounting", selection=[accounted])]
    defs = dg.Definitions(assets=[facts_a, facts_b, accounted, other_table], jobs=jobs)

    def in_flight(job: str) -> dg.DagsterRun:
        """A run of ``job`` started (it plans its assets) and not ended."""
        return instance.create_run_for_job(job_def=defs.resolve_job_def(job),
                                           status=dg.DagsterRunStatus.STARTED)

    with empty_instance(DAGSTER_SQLITE) as instance:
        assert dg.materialize([facts_a, facts_b, accounted, other_table],
                              instance=instance).success
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert tick.total_requested == 0
        source_a = in_flight("source_a")
        assert instance.get_latest_planned_materialization_info(
            facts_a.key).run_id == source_a.run_id
        assert dg.materialize([facts_b], instance=instance).success
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance,
                                                 cursor=tick.cursor)
        assert tick.get_num_requested(accounted.key) == 1
        assert tick.get_num_requested(other_table.key) == 0
        instance.report_run_failed(source_a)
        # the accounting's run started and read the facts; then source a's facts land
        accounting = in_flight("accounting")
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance,
                                                 cursor=tick.cursor)
        assert tick.get_num_requested(accounted.key) == 0
        assert dg.materialize([facts_a], instance=instance).success
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance,
                                                 cursor=tick.cursor)
        assert tick.get_num_requested(accounted.key) == 0  # it is running
        assert dg.materialize([accounted], instance=instance).success  # what it wrote
        instance.report_run_failed(accounting)  # its status: ended
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance,
                                                 cursor=tick.cursor)
        assert tick.get_num_requested(accounted.key) == 1
        # asked for again; it runs and ends before the next evaluation, which sees source
        # b's facts written after the step read them: asked for once more, then nothing
        accounting = in_flight("accounting")
        assert dg.materialize([accounted], instance=instance).success
        instance.report_run_failed(accounting)
        assert dg.materialize([facts_b], instance=instance).success
        for asked in (1, 0, 0):
            tick = dg.evaluate_automation_conditions(defs=defs, instance=instance,
                                                     cursor=tick.cursor)
            assert tick.get_num_requested(accounted.key) == asked

    pools = {accounting_asset: ACCOUNTING_POOL, trust_checks: DERIVED_POOL,
             waste_step: DERIVED_POOL, fact_quality: DERIVED_POOL}
    for asset, pool in pools.items():
        for key in asset.keys:
            assert asset.get_op_def_for_asset_key(key).pool == pool, key
            assert asset.automation_conditions_by_key[key] == (
                ACCOUNTING_AUTOMATION if pool == ACCOUNTING_POOL else DERIVED_AUTOMATION), key


def test_a_failed_accounting_run_is_asked_for_again_at_the_full_hour():
    """The accounting asked for by a write fails (after its retries): nothing asks for it
    again until the next full hour, then at each full hour while it fails, and no more once
    it has passed."""
    failing = {"yes": True}

    @dg.asset
    def facts() -> None:
        pass

    @dg.asset(deps=[facts], automation_condition=ACCOUNTING_AUTOMATION)
    def accounted() -> None:
        assert not failing["yes"], "the warehouse is full"

    defs = dg.Definitions(assets=[facts, accounted])
    start = pd.Timestamp("2026-11-29 10:10", tz="UTC")
    with empty_instance(DAGSTER_SQLITE) as instance:

        def asked(minutes: float) -> int:
            nonlocal tick
            tick = dg.evaluate_automation_conditions(
                defs=defs, instance=instance, cursor=tick and tick.cursor,
                evaluation_time=(start + pd.Timedelta(minutes=minutes)).to_pydatetime())
            return tick.get_num_requested(accounted.key)

        def run_accounting() -> bool:
            return dg.materialize([facts, accounted], selection=[accounted],
                                  instance=instance, raise_on_error=False).success

        tick = None
        assert dg.materialize([facts], instance=instance).success
        assert asked(0) == 0
        assert dg.materialize([facts], instance=instance).success
        assert asked(0.5) == 1
        assert not run_accounting()
        assert [asked(m) for m in (1, 30, 49)] == [0, 0, 0]
        assert asked(51) == 1  # 11:01
        assert not run_accounting()
        assert [asked(m) for m in (52, 109)] == [0, 0]
        assert asked(111) == 1  # 12:01
        failing["yes"] = False
        assert run_accounting()
        assert [asked(m) for m in (112, 171, 231)] == [0, 0, 0]
