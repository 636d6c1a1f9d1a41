"""The GPU benchmark source resource: partition keys to data roots and repetitions."""

import json

import dagster as dg
import pytest

from resources import DataRoot, GpuBenchmarkSource


def test_resolving_many_keys_builds_the_map_of_roots_once(tmp_path, monkeypatch):
    prefixes = []
    key_prefix = DataRoot.key_prefix.fget
    monkeypatch.setattr(DataRoot, "key_prefix",
                        property(lambda root: prefixes.append(root) or key_prefix(root)))
    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(tmp_path / "a")),
                                            DataRoot(path=str(tmp_path), name="b")])
    root, ref = source.resolve("b/e/x/150W/0")
    assert root.name == "b" and ref.path == tmp_path / "e/x/150W/0"
    built = len(prefixes)
    for i in range(1000):
        assert source.resolve(f"a/e/x/150W/{i}")[1].repetition == str(i)
    assert len(prefixes) == built
    with pytest.raises(KeyError, match="no data root named 'c'"):
        source.resolve("c/e/x/150W/0")


def test_a_root_is_named_by_its_name_else_its_resolved_folder(tmp_path):
    (tmp_path / "lab").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "lab")
    assert DataRoot(path=str(tmp_path / "link")).key_prefix == "lab"
    assert DataRoot(path=str(tmp_path / "link"), name="b").key_prefix == "b"
    empty = GpuBenchmarkSource(data_roots=[DataRoot(path=str(tmp_path / "lab"), name="")])
    with pytest.raises(ValueError, match="must be unique, non-empty"):
        empty.roots_by_name()


def test_duplicate_root_names_are_refused_every_time(tmp_path):
    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(tmp_path), name="a"),
                                            DataRoot(path=str(tmp_path / "x"), name="a")])
    for _ in range(2):
        with pytest.raises(ValueError, match="must be unique"):
            source.resolve("a/e/x/150W/0")


def test_a_resource_with_its_map_built_still_copies_and_runs(tmp_path):
    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(tmp_path), name="a")])
    assert list(source.roots_by_name()) == ["a"]

    @dg.asset
    def resolved(gpu_source: GpuBenchmarkSource) -> str:
        return gpu_source.resolve("a/e/x/150W/0")[1].key

    result = dg.materialize([resolved], resources={"gpu_source": source})
    assert result.output_for_node("resolved") == "e/x/150W/0"


def test_a_copy_with_other_roots_maps_its_own_roots(tmp_path):
    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(tmp_path / "a"), name="a")])
    assert list(source.roots_by_name()) == ["a"]
    other = source.model_copy(update={"data_roots": [DataRoot(path=str(tmp_path), name="b")]})
    assert list(other.roots_by_name()) == ["b"]
    assert other.resolve("b/e/x/150W/0")[1].path == tmp_path / "e/x/150W/0"
    with pytest.raises(KeyError, match="no data root named 'a'"):
        other.resolve("a/e/x/150W/0")
    # the same name and path with another setting: the copy resolves to its own root
    zoned = source.model_copy(update={"data_roots": [
        DataRoot(path=str(tmp_path / "a"), name="a", timezone="Europe/Berlin")]})
    assert zoned.resolve("a/e/x/150W/0")[0].timezone == "Europe/Berlin"
    assert source.resolve("a/e/x/150W/0")[0].timezone == "UTC"


def test_ready_when_complete_is_a_roots_own_else_the_sources(tmp_path, monkeypatch):
    roots = [{"path": str(tmp_path / "collected"), "ready_when_complete": True},
             {"path": str(tmp_path / "copied"), "ready_when_complete": False},
             {"path": str(tmp_path / "unset")}]
    monkeypatch.setenv("JOULEHOUSE_GPU_DATA_ROOTS", json.dumps(roots))
    for default in (False, True):
        monkeypatch.setenv("JOULEHOUSE_GPU_READY_WHEN_COMPLETE", str(default))
        source = GpuBenchmarkSource.from_env(tmp_path)
        assert {name: source.ready_when_complete_of(root)
                for name, root in source.roots_by_name().items()} == {
            "collected": True, "copied": False, "unset": default}


def test_sensor_settings_come_from_the_environment(tmp_path, monkeypatch):
    from resources import TauProfileSource
    from sensors.settings import sensor_interval_s, sensor_tick_budget_s

    default = GpuBenchmarkSource.from_env(tmp_path)
    assert (default.quiet_period_s, default.full_rescan_s, default.max_repetitions_per_tick,
            default.ready_when_complete, sensor_interval_s(), sensor_tick_budget_s()) == (
        60.0, 3600.0, 10_000, False, 30, 20)
    monkeypatch.setenv("JOULEHOUSE_QUIET_PERIOD_S", "120")
    monkeypatch.setenv("JOULEHOUSE_FULL_RESCAN_S", "none")
    monkeypatch.setenv("JOULEHOUSE_MAX_REPETITIONS_PER_TICK", "50")
    monkeypatch.setenv("JOULEHOUSE_SENSOR_INTERVAL_S", "10")
    monkeypatch.setenv("JOULEHOUSE_SENSOR_TICK_BUDGET_S", "5")
    monkeypatch.setenv("JOULEHOUSE_GPU_READY_WHEN_COMPLETE", "true")
    source = GpuBenchmarkSource.from_env(tmp_path)
    assert (source.quiet_period_s, source.full_rescan_s, source.max_repetitions_per_tick,
            source.ready_when_complete, sensor_interval_s(), sensor_tick_budget_s()) == (
        120.0, None, 50, True, 10, 5)
    monkeypatch.setenv("JOULEHOUSE_GPU_READY_WHEN_COMPLETE", "0")
    assert not GpuBenchmarkSource.from_env(tmp_path).ready_when_complete
    monkeypatch.setenv("JOULEHOUSE_GPU_READY_WHEN_COMPLETE", "maybe")
    with pytest.raises(ValueError, match="ready_when_complete"):
        GpuBenchmarkSource.from_env(tmp_path)
    monkeypatch.delenv("JOULEHOUSE_GPU_READY_WHEN_COMPLETE")
    assert TauProfileSource.from_env(tmp_path).quiet_period_s == 120.0
    monkeypatch.setenv("JOULEHOUSE_MAX_REPETITIONS_PER_TICK", "0")
    with pytest.raises(ValueError, match="max_repetitions_per_tick"):
        GpuBenchmarkSource.from_env(tmp_path)
    monkeypatch.setenv("JOULEHOUSE_SENSOR_INTERVAL_S", "ten")
    with pytest.raises(ValueError, match="JOULEHOUSE_SENSOR_INTERVAL_S"):
        sensor_interval_s()
    monkeypatch.setenv("JOULEHOUSE_SENSOR_TICK_BUDGET_S", "0")
    with pytest.raises(ValueError, match="JOULEHOUSE_SENSOR_TICK_BUDGET_S"):
        sensor_tick_budget_s()
