"""A centre declared as Dagster components under defs/: a tree with several instances of every
source kind loads whole and distinct; each bad configuration is refused before anything runs,
naming the file, the line and the key."""

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from definitions import defs as bundled
from joulehouse.errors import InputError
from resources import DataRoot
from tests.components.centre import instance, load, write_centre
from tests.dagster.automation_sensors import AUTOMATION

PROJECT_ROOT = Path(__file__).resolve().parents[2]
INTENSITY = PROJECT_ROOT / "examples" / "intensity"
TARIFFS = PROJECT_ROOT / "examples" / "tariffs"
DG = Path(sys.executable).parent / "dg"


def folders(root: Path, *names: str) -> dict[str, Path]:
    """Folders ``names`` made under ``root``, by name."""
    made = {name: root / name for name in names}
    for folder in made.values():
        folder.mkdir(parents=True)
    return made


def site(**attributes: object) -> str:
    return instance("Site", **attributes)


def intensity() -> str:
    return instance("GridIntensity", intensity_landing=INTENSITY, tariff_landing=TARIFFS)


def test_a_tree_with_several_instances_of_every_source_kind_loads_them_all(tmp_path):
    data = folders(tmp_path, "gpu-a/data", "gpu-b/data", "cloud", "tau-1", "tau-2", "geopm-a",
                   "geopm-b", "powerapi-1", "powerapi-2", "arch-a/emmy", "arch-b/fritz")
    write_centre(tmp_path / "project", {
        "gpu/lab": instance("GpuDataRoot", path=data["gpu-a/data"], name="lab",
                            timezone="Europe/Berlin", ready_when_complete=True),
        "gpu/hall": instance("GpuDataRoot", path=data["gpu-b/data"], name="hall",
                             quiet_period_s=30, ready_when_complete=False),
        "gpu/cloud": instance("GpuDataRoot", path=data["cloud"], quiet_period_s=30),
        "tau/one": instance("TauLanding", path=data["tau-1"]),
        "tau/two": instance("TauLanding", path=data["tau-2"]),
        "geopm/a": instance("GeopmLanding", path=data["geopm-a"], timezone="Europe/Berlin"),
        "geopm/b": instance("GeopmLanding", path=data["geopm-b"]),
        "powerapi/one": instance("PowerapiLanding", path=data["powerapi-1"], window="5min"),
        "powerapi/two": instance("PowerapiLanding", path=data["powerapi-2"]),
        "clustercockpit/a": instance("ClusterCockpitArchiveRoot", path=tmp_path / "arch-a"),
        "clustercockpit/b": instance("ClusterCockpitArchiveRoot", path=tmp_path / "arch-b"),
        "intensity": intensity(),
        "site": site(zones={"*": "DE", "clustercockpit/fritz": "FR"}, pue=1.2,
                     warehouse=tmp_path / "warehouse"),
    })
    built = load(tmp_path / "project")

    graph, graph_bundled = built.resolve_asset_graph(), bundled.resolve_asset_graph()
    assert graph.get_all_asset_keys() == graph_bundled.get_all_asset_keys()
    assert {job.name for job in built.jobs} == {
        "gpu_energy_job", "tau_profiles_job", "powerapi_job", "geopm_job", "cc_job"}
    sensors = {sensor.name: sensor for sensor in built.sensors}
    assert set(sensors) == {"gpu_repetitions_lab", "gpu_repetitions_hall",
                            "gpu_repetitions_cloud", "tau_profile_landing", "powerapi_landing",
                            "geopm_report_landing", "cc_job_archive",
                            "intensity_and_tariff_landing", *AUTOMATION}
    assert {sensors[f"gpu_repetitions_{name}"].job_name for name in ("lab", "hall", "cloud")} == {
        "gpu_energy_job"}
    partitions = {name: graph.get(dg.AssetKey(name)).partitions_def.name for name in (
        "gpu_repetition_files", "tau_profile_files", "powerapi_report_files",
        "geopm_report_files", "cc_job_files")}
    assert sorted(partitions.values()) == ["cc_job_blocks", "geopm_days", "gpu_repetition_days",
                                           "powerapi_days", "tau_profile_days"]

    resources = built.resources
    gpu = resources["gpu_source"]
    assert dict(gpu.roots_by_name()) == {
        "lab": DataRoot(path=str(data["gpu-a/data"]), name="lab", timezone="Europe/Berlin",
                        ready_when_complete=True),
        "hall": DataRoot(path=str(data["gpu-b/data"]), name="hall", ready_when_complete=False),
        "cloud": DataRoot(path=str(data["cloud"]))}
    assert gpu.quiet_period_s == 30.0  # declared by two instances, the default's 60 elsewhere
    assert not gpu.ready_when_complete  # a root's own: two roots differ, no conflict
    for name, root in (("lab", "gpu-a/data"), ("hall", "gpu-b/data"), ("cloud", "cloud")):
        found, ref = gpu.resolve(f"{name}/e/b/150W/0")
        assert (Path(found.path), ref.key) == (data[root], "e/b/150W/0")
    for key, kind, names in (("tau_profiles", "tau", ("1", "2")),
                             ("powerapi_source", "powerapi", ("1", "2")),
                             ("geopm_source", "geopm", ("a", "b"))):
        landings = {f"{kind}-{n}": data[f"{kind}-{n}"] for n in names}
        assert resources[key].landings() == landings
        assert {resources[key].resolve(f"{name}/entry") for name in landings} == {
            folder / "entry" for folder in landings.values()}
    assert resources["geopm_source"].timezone == "Europe/Berlin"
    assert resources["powerapi_source"].window == "5min"
    cc = resources["cc_archive"]
    assert cc.roots() == [tmp_path / "arch-a", tmp_path / "arch-b"]
    assert (cc.resolve("emmy/1"), cc.resolve("fritz/1")) == (tmp_path / "arch-a",
                                                            tmp_path / "arch-b")
    accounting = resources["accounting"]
    assert (accounting.intensity_landing, accounting.tariff_landing) == (str(INTENSITY),
                                                                         str(TARIFFS))
    assert (accounting.zones, accounting.pue) == ({"*": "DE", "clustercockpit/fritz": "FR"}, 1.2)
    assert resources["warehouse"].root == str(tmp_path / "warehouse")
    assert resources["taudb"].url == f"sqlite:///{tmp_path / 'warehouse' / 'taudb.sqlite'}"


def refusal(tmp_path: Path, instances: dict[str, str]) -> tuple[Path, str]:
    """The defs folder of a centre of ``instances`` (and a site and intensity unless given),
    and the message its load is refused with."""
    defs = write_centre(tmp_path / "project", {"site": site(pue=1.1), "intensity": intensity(),
                                               **instances})
    with pytest.raises(InputError) as refused:
        load(tmp_path / "project")
    return defs, str(refused.value)


def test_a_missing_folder_is_refused(tmp_path):
    defs, message = refusal(tmp_path, {"gpu/lab": instance(
        "GpuDataRoot", name="lab", path=tmp_path / "nowhere")})
    assert message == (f"{defs}/gpu/lab/defs.yaml:4: attributes.path: folder "
                       f"{tmp_path / 'nowhere'} does not exist")


def test_a_file_in_place_of_a_folder_is_refused(tmp_path):
    (tmp_path / "report.txt").write_text("")
    defs, message = refusal(tmp_path, {"geopm/main": instance(
        "GeopmLanding", path=tmp_path / "report.txt")})
    assert message == (f"{defs}/geopm/main/defs.yaml:3: attributes.path: "
                       f"{tmp_path / 'report.txt'} is not a folder")


def test_an_unreadable_folder_is_refused(tmp_path, monkeypatch):
    locked = folders(tmp_path, "locked")["locked"]
    locked.chmod(0)
    if os.geteuid() == 0:  # root passes every permission check: answer as any other user
        monkeypatch.setattr("components.centre.os.access",
                            lambda path, mode: Path(path) != locked)
    try:
        defs, message = refusal(tmp_path, {"intensity": instance(
            "GridIntensity", intensity_landing=locked, tariff_landing=TARIFFS)})
    finally:
        locked.chmod(0o755)
    assert message == (f"{defs}/intensity/defs.yaml:3: attributes.intensity_landing: folder "
                       f"{locked} is not readable")


def test_two_landing_folders_with_the_same_name_are_refused(tmp_path):
    data = folders(tmp_path, "site-a/reports", "site-b/reports")
    defs, message = refusal(tmp_path, {
        "powerapi/a": instance("PowerapiLanding", path=data["site-a/reports"]),
        "powerapi/b": instance("PowerapiLanding", path=data["site-b/reports"])})
    assert message == (f"{defs}/powerapi/b/defs.yaml:3: attributes.path: partition-key prefix "
                       f"'reports' is also that of {defs}/powerapi/a/defs.yaml:3: each "
                       "instance of a kind needs its own name")


def test_two_gpu_data_roots_with_the_same_name_are_refused(tmp_path):
    data = folders(tmp_path, "a", "b")
    defs, message = refusal(tmp_path, {
        "gpu/first": instance("GpuDataRoot", path=data["a"], name="lab"),
        "gpu/second": instance("GpuDataRoot", path=data["b"], name="lab")})
    assert message == (f"{defs}/gpu/second/defs.yaml:4: attributes.name: partition-key prefix "
                       f"'lab' is also that of {defs}/gpu/first/defs.yaml:4: each instance of "
                       "a kind needs its own name")


def test_two_archives_holding_the_same_cluster_are_refused(tmp_path):
    folders(tmp_path, "a/emmy", "b/emmy", "b/fritz")
    defs, message = refusal(tmp_path, {
        "cc/a": instance("ClusterCockpitArchiveRoot", path=tmp_path / "a"),
        "cc/b": instance("ClusterCockpitArchiveRoot", path=tmp_path / "b")})
    assert message == (f"{defs}/cc/b/defs.yaml:3: attributes.path: partition-key prefix "
                       f"'emmy' is also that of {defs}/cc/a/defs.yaml:3: each instance of a "
                       "kind needs its own name")


def test_instances_of_a_kind_declaring_different_settings_are_refused(tmp_path):
    data = folders(tmp_path, "a", "b")
    defs, message = refusal(tmp_path, {
        "geopm/a": instance("GeopmLanding", path=data["a"], timezone="UTC"),
        "geopm/b": instance("GeopmLanding", path=data["b"], timezone="Europe/Berlin")})
    assert message == (f"{defs}/geopm/b/defs.yaml:4: attributes.timezone: 'Europe/Berlin' "
                       f"differs from 'UTC' declared at {defs}/geopm/a/defs.yaml:4: the "
                       "GeopmLanding instances share their settings")


def test_a_value_the_resource_refuses_is_refused_at_its_key(tmp_path):
    data = folders(tmp_path, "a")
    defs, message = refusal(tmp_path, {"geopm/a": instance(
        "GeopmLanding", path=data["a"], timezone="Mars/Olympus")})
    assert message == (f"{defs}/geopm/a/defs.yaml:4: attributes.timezone: Value error, unknown "
                       "time zone 'Mars/Olympus'")


def test_a_carbon_zone_without_intensity_data_is_refused(tmp_path):
    defs, message = refusal(tmp_path, {"site": site(
        pue=1.1, zones={"*": "DE", "clustercockpit/emmy": "PL"})})
    assert message == (f"{defs}/site/defs.yaml:6: attributes.zones.clustercockpit/emmy: zone "
                       f"'PL' has no intensity data in {INTENSITY} (zones there: DE, DEU, FR, "
                       "FRA)")


def test_a_bad_intensity_file_is_the_assets_to_refuse_not_the_configurations(tmp_path):
    # its zones cannot be read (no zone column): the folder checks nothing
    landing = folders(tmp_path, "intensity")["intensity"]
    (landing / "DE.csv").write_text("Datetime (UTC),Region\nyesterday,DE\n")
    write_centre(tmp_path / "project", {
        "site": site(zones={"*": "PL"}),
        "intensity": instance("GridIntensity", intensity_landing=landing)})
    assert load(tmp_path / "project").resources["accounting"].zones == {"*": "PL"}


def test_the_zones_are_read_from_the_zone_columns_alone(tmp_path):
    # bad timestamps and figures are the asset's to refuse; the zones are those named
    landing = folders(tmp_path, "intensity")["intensity"]
    (landing / "em.csv").write_text("Datetime (UTC),Zone Id,Carbon Intensity gCO₂eq/kWh "
                                    "(direct)\nyesterday,DE ,lots\n")
    (landing / "owid.csv").write_text("Entity,Code,Year,Carbon intensity of electricity - "
                                      "gCO2/kWh\nFrance,FRA,soon,much\nKosovo,,2023,1\n")
    defs, message = refusal(tmp_path, {"site": site(zones={"*": "PL"}), "intensity": instance(
        "GridIntensity", intensity_landing=landing)})
    assert message == (f"{defs}/site/defs.yaml:4: attributes.zones.*: zone 'PL' has no "
                       f"intensity data in {landing} (zones there: DE, FRA, Kosovo)")


def test_a_second_site_is_refused(tmp_path):
    defs, message = refusal(tmp_path, {"site-b": site(pue=1.3)})
    assert message == (f"{defs}/site/defs.yaml:2: attributes: a second site: one is declared "
                       f"at {defs}/site-b/defs.yaml:2")


def test_a_string_where_a_number_belongs_is_refused_when_loaded(tmp_path):
    # dg check yaml lets any string through (a template could make the number)
    data = folders(tmp_path, "a")
    defs, message = refusal(tmp_path, {"gpu/a": instance(
        "GpuDataRoot", path=data["a"], name="lab", quiet_period_s="soon")})
    assert message == (f"{defs}/gpu/a/defs.yaml:5: attributes.quiet_period_s: Input should be "
                       "a valid number, unable to parse string as a number")


def test_an_unknown_key_is_refused_when_loaded_by_dagster_itself(tmp_path):
    data = folders(tmp_path, "a")
    defs = write_centre(tmp_path / "project", {"site": site(pue=1.1), "intensity": intensity(),
                                               "tau/a": instance("TauLanding", path=data["a"],
                                                                 quiet_period=5)})
    with pytest.raises(Exception, match=r"Error while loading component tau/a") as refused:
        load(tmp_path / "project")
    [error] = refused.value.__cause__.errors()
    assert (error["loc"], error["msg"]) == (
        (f"attributes.quiet_period at {defs}/tau/a/defs.yaml:4",), "Extra inputs are not permitted")


def test_dg_check_yaml_refuses_an_unknown_key_and_a_wrong_type(tmp_path):
    data = folders(tmp_path, "a", "b")
    defs = write_centre(tmp_path / "project", {
        "gpu/a": instance("GpuDataRoot", path=data["a"], timezon="UTC"),
        "gpu/b": instance("GpuDataRoot", path=data["b"], quiet_period_s=[30, 60])})
    for instance_folder, error in (
            ("gpu/a", ("attributes.timezon Additional properties are not allowed ('timezon' "
                       "was unexpected)")),
            ("gpu/b", ("attributes.quiet_period_s [30, 60] is not valid under any of the "
                       "given schemas"))):
        done = subprocess.run([str(DG), "check", "yaml", str(defs / instance_folder)],
                              cwd=tmp_path / "project", capture_output=True, text=True,
                              check=False, timeout=300)
        assert done.returncode == 1
        assert done.stdout.startswith(
            f"{defs}/{instance_folder}/defs.yaml:4 - components.GpuDataRoot {error}\n"), (
            done.stdout)


def test_environment_variables_override_the_yaml(tmp_path, monkeypatch):
    data = folders(tmp_path, "declared", "elsewhere/lab")
    write_centre(tmp_path / "project", {
        "site": site(pue=1.1), "intensity": intensity(),
        "gpu/gone": instance("GpuDataRoot", path=tmp_path / "gone", quiet_period_s=30),
        "tau/a": instance("TauLanding", path=data["declared"], quiet_period_s=30)})
    monkeypatch.setenv("JOULEHOUSE_GPU_DATA_ROOTS", str(data["elsewhere/lab"]))
    monkeypatch.setenv("JOULEHOUSE_QUIET_PERIOD_S", "5")
    monkeypatch.setenv("JOULEHOUSE_PUE", "1.3")
    resources = load(tmp_path / "project").resources
    # the variable replaces the declared data roots, whose missing folder is then not refused
    assert resources["gpu_source"].data_roots == [DataRoot(path=str(data["elsewhere/lab"]))]
    assert resources["gpu_source"].quiet_period_s == 5.0
    assert resources["tau_profiles"].landing_folders == [str(data["declared"])]
    assert resources["tau_profiles"].quiet_period_s == 5.0
    assert resources["accounting"].pue == 1.3


def test_a_warehouse_on_an_object_store_is_kept_as_its_url(tmp_path, monkeypatch):
    # the site of docs/configuration.md's example
    for variable in ("JOULEHOUSE_WAREHOUSE", "JOULEHOUSE_TAUDB_URL", "JOULEHOUSE_TAUDB_SCHEMA"):
        monkeypatch.delenv(variable, raising=False)
    write_centre(tmp_path / "project", {"intensity": intensity(), "site": site(
        time_zone="Europe/Berlin", zones={"*": "DE", "clustercockpit/fritz": "DE",
                                          "gpu/cloud": "FR"},
        pue=1.3, warehouse="s3://energy/joulehouse",
        taudb_url="postgresql://joulehouse@taudb:5432/perf")})
    resources = load(tmp_path / "project").resources
    assert resources["warehouse"].root == "s3://energy/joulehouse"
    assert resources["taudb"].url == "postgresql://joulehouse@taudb:5432/perf"


def test_each_taudb_variable_replaces_its_own_key(tmp_path, monkeypatch):
    declared = site(pue=1.1, taudb_url="postgresql://joulehouse@taudb:5432/perf",
                    taudb_schema="declared")
    write_centre(tmp_path / "a", {"site": declared, "intensity": intensity()})
    write_centre(tmp_path / "b", {"site": declared, "intensity": intensity()})
    monkeypatch.delenv("JOULEHOUSE_TAUDB_URL", raising=False)
    monkeypatch.setenv("JOULEHOUSE_TAUDB_SCHEMA", "from_env")
    taudb = load(tmp_path / "a").resources["taudb"]
    assert (taudb.url, taudb.schema_name) == ("postgresql://joulehouse@taudb:5432/perf",
                                              "from_env")
    monkeypatch.delenv("JOULEHOUSE_TAUDB_SCHEMA")
    monkeypatch.setenv("JOULEHOUSE_TAUDB_URL", "postgresql://secret@db:5432/perf")
    taudb = load(tmp_path / "b").resources["taudb"]
    # the URL stays the variable, read at run time (a secret is never in the definitions)
    assert (taudb.url, taudb.schema_name) == (dg.EnvVar("JOULEHOUSE_TAUDB_URL"), "declared")


def test_a_bad_value_of_a_variable_is_refused_naming_the_variable(tmp_path, monkeypatch):
    # issue 29's case: the declared quiet period is fine, the variable replacing it is not
    data = folders(tmp_path, "a")
    monkeypatch.setenv("JOULEHOUSE_QUIET_PERIOD_S", "abc")
    _, message = refusal(tmp_path / "quiet", {"tau/a": instance(
        "TauLanding", path=data["a"], quiet_period_s=30)})
    assert message == ("$JOULEHOUSE_QUIET_PERIOD_S: 'abc': Input should be a valid number, "
                       "unable to parse string as a number")


def test_a_bad_pue_variable_is_blamed_on_the_variable_not_the_yaml(tmp_path, monkeypatch):
    monkeypatch.setenv("JOULEHOUSE_PUE", "0.5")
    _, message = refusal(tmp_path, {})
    assert message == ("$JOULEHOUSE_PUE: '0.5': Input should be greater than or equal to 1")
