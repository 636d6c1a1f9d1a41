"""The instance configurations in deploy/ load, and keep their storage where they say."""

import shutil
from pathlib import Path
from urllib.parse import urlparse

import dagster as dg

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
