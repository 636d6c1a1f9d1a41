"""The instance configurations in deploy/ load, and keep their storage where they say."""

import shutil
from pathlib import Path
from urllib.parse import urlparse

import dagster as dg

from assets import GPU_ASSETS, TAUDB_ASSETS
from assets.gpu import TABLES_POOL

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_local_instance_stores_everything_in_dagster_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(DEPLOY / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("gpu_repetitions", ["lab/e/b/150W/0"])
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert_one_gpu_run_and_one_table_rebuild_at_a_time(instance)
    assert (home / "history" / "runs.db").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]  # nothing in the cwd


def test_production_instance_uses_postgres(tmp_path, monkeypatch, postgres_url):
    url = urlparse(postgres_url)
    for name, value in {"HOST": url.hostname, "PORT": str(url.port), "DB": url.path[1:],
                        "USER": url.username, "PASSWORD": ""}.items():
        monkeypatch.setenv(f"DAGSTER_PG_{name}", value)
    shutil.copy(DEPLOY / "production" / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        instance.add_dynamic_partitions("gpu_repetitions", ["lab/e/b/150W/0"])
        assert instance.get_dynamic_partitions("gpu_repetitions") == ["lab/e/b/150W/0"]
        assert instance.get_runs_count() == 0
        assert_one_gpu_run_and_one_table_rebuild_at_a_time(instance)



def assert_one_gpu_run_and_one_table_rebuild_at_a_time(instance: dg.DagsterInstance) -> None:
    concurrency = instance.get_concurrency_config()
    assert concurrency.pool_config.default_pool_limit == 1
    assert concurrency.run_queue_config.tag_concurrency_limits == [
        {"key": "joulehouse/pipeline", "value": "gpu", "limit": 1}]


def test_the_step_rebuilding_whole_tables_is_in_one_pool():
    pooled = {key.to_user_string()
              for asset in (*GPU_ASSETS, *TAUDB_ASSETS) if isinstance(asset, dg.AssetsDefinition)
              for key in asset.keys if asset.get_op_def_for_asset_key(key).pool == TABLES_POOL}
    assert pooled == {"gpu_validated_frames", "gpu_repetition_energy", "gpu_setting_energy",
                      "gpu_benchmark_energy", "energy_facts/gpu", "taudb_trials"}
