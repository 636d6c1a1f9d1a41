"""Nothing dropped without a word (issue 30), for the sources beside PowerAPI and GEOPM
(``tests/powerapi/test_powerapi_left_out.py``): what gives no row is said on the command line
(stderr, exit code: docs/cli.md "Left out") and in the UI (the check a WARN, read through
GraphQL; the ``left_out`` table), case by case:

- ClusterCockpit: a host of meta.json missing from data.json (energy NaN, ``covered`` < 1):
  the job's metric gives no ``power`` fact;
- GPU benchmarks: a repetition without power-external.csv (no ``external`` fact), one with a
  9.4 s hole in gpu-power.csv (no ``power`` fact: unbridged gap);
- TAU profiles: timer lines with 0 calls, a user event with 0 samples (skipped by rule, one
  record each with the count);
- intensity: Electricity Maps rows and an OWID year with an empty intensity cell.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
from test_cli_conventions import joulehouse

from assets.accounting import ROWS_READ_CHECK, carbon_intensity
from assets.clustercockpit import READ_CHECK
from assets.gpu import COMPUTED_CHECK
from assets.taudb import LOADS_CHECK
from definitions import (
    EXAMPLE_CC_ARCHIVE,
    EXAMPLE_GPU_DATA,
    EXAMPLE_INTENSITY,
    EXAMPLE_TAU_PROFILES,
    build_definitions,
)
from joulehouse.accounting.query import query
from joulehouse.taudb.profiles import read_profile_dir
from resources import (
    AccountingSettings,
    ClusterCockpitArchive,
    DataRoot,
    GpuBenchmarkSource,
    TauProfileSource,
    Warehouse,
)
from sensors import clustercockpit, gpu_repetitions, tau_profiles
from tests.conftest import skip_or_fail
from tests.dagster.conftest import QUIET_S, settle
from tests.dagster.source_runs import SourceRuns
from tests.dagster.webserver import (
    WEBSERVER,
    check_execution,
    dagster_home,
    warning,
    webserver,
)

EMMY_JOB = "emmy/1403/244/1608923076"
MISSING_HOST_PART = "its power fact of rapl_power (5 host(s))"
MISSING_HOST = (f"{MISSING_HOST_PART}: no sample of it bridged on host(s) e0199 (energy NaN): "
                "covered 0.8 of the window, and a fact covers its whole window")
CLOCK_RUN = "clock-limit/bert/877MHz,1065MHz"  # its repetition 1 has no external meter
GAP_REPETITION = "power-limit/bert/150W/0"
#: The day partition of the bundled repetitions copied under root ``lab``: their start's.
GPU_DAY = "lab/2020-11-16"
NO_EXTERNAL_PART = "its external energy_facts row"
NO_EXTERNAL = f"{NO_EXTERNAL_PART}: no readings: power-external.csv missing or empty"
GAP_PART = "its power energy_facts row"
GAP = f"{GAP_PART}: 1 unbridged gap(s), 9.38192 s of 72.65 s: a fact covers its whole window"
BY_RULE = "skipped by rule, as TAU's loader skips them (docs/tau-profiles.md)"
ZERO_CALLS_PART = "2 timer line(s) with 0 calls ('MPI_Finalize()')"
ZERO_SAMPLES_PART = "1 user event line(s) with 0 samples ('Message size sent')"
ZERO_CALLS, ZERO_SAMPLES = f"{ZERO_CALLS_PART}: {BY_RULE}", f"{ZERO_SAMPLES_PART}: {BY_RULE}"
TAU_DAY = "tau/2010-06-03"  # the day partition of the set: its Starting Timestamp's
HOLE = "no value, so no interval: a hole in the series (a fact in it gets co2_g NaN, 'missing')"
DIRECT_HOLE_PART = ("1 row(s) of zone DE (direct) with an empty intensity cell, "
                    "2019-05-27 03:00 UTC")
LCA_HOLES_PART = ("3 row(s) of zone DE (lca) with an empty intensity cell, 2019-05-27 02:00 UTC "
                  "to 2019-05-27 04:00 UTC")
OWID_HOLE_PART = "1 row(s) of zone DEU (lca) with an empty intensity cell, 2020"
DIRECT_HOLE, LCA_HOLES, OWID_HOLE = (f"{part}: {HOLE}" for part in (
    DIRECT_HOLE_PART, LCA_HOLES_PART, OWID_HOLE_PART))


def archive_with_a_missing_host(archive: Path) -> Path:
    """The bundled archive with a fifth host, e0199, in the emmy job's meta.json resources
    and no series of it in data.json; returns the job folder."""
    shutil.copytree(EXAMPLE_CC_ARCHIVE, archive)
    job = archive / EMMY_JOB
    meta = json.loads((job / "meta.json").read_text())
    meta["resources"].append({"hostname": "e0199"})
    (job / "meta.json").write_text(json.dumps(meta))
    return job


def gpu_root(root: Path) -> Path:
    """A data root of the bundled clock-limit run (repetition 1 without power-external.csv)
    and the bundled 150W repetition 0 with gpu-power.csv's readings 100-159 (9.4 s) taken
    out."""
    shutil.copytree(EXAMPLE_GPU_DATA / CLOCK_RUN, root / CLOCK_RUN)
    shutil.copytree(EXAMPLE_GPU_DATA / GAP_REPETITION, root / GAP_REPETITION)
    power = root / GAP_REPETITION / "gpu-power.csv"
    lines = power.read_text().splitlines(keepends=True)
    power.write_text("".join(lines[:101] + lines[161:]))
    return root


def profiles_with_skipped_lines(folder: Path) -> Path:
    """The bundled tau2_wrap_mpi2 profiles with MPI_Finalize's calls 0 on both ranks, and
    two user events on rank 0, one of them with 0 samples."""
    shutil.copytree(EXAMPLE_TAU_PROFILES / "tau2_wrap_mpi2", folder)
    for rank in (0, 1):
        profile = folder / f"profile.{rank}.0.0"
        text = profile.read_text()
        assert '"MPI_Finalize()  " 1 0 ' in text
        text = text.replace('"MPI_Finalize()  " 1 0 ', '"MPI_Finalize()  " 0 0 ')
        if rank == 0:
            text += ('2 userevents\n# eventname numevents max min mean sumsqr\n'
                     '"Message size sent" 0 0 0 0 0\n"Heap Memory Used (KB)" 3 10 2 5 85\n')
        profile.write_text(text)
    return folder


def intensity_with_holes(folder: Path) -> Path:
    """A folder of two intensity files: the first 24 hours of the bundled German export
    with the LCA cell of 02:00-04:00 and the direct cell of 03:00 emptied, and the bundled
    OWID figures with Germany's 2020 emptied."""
    folder.mkdir()
    lines = (EXAMPLE_INTENSITY / "DE_demo-weeks_hourly.csv").read_text(
        encoding="utf-8").splitlines(keepends=True)[:25]
    for hour in (2, 3, 4):
        cells = lines[hour + 1].split(",")
        cells[5] = ""  # LCA
        if hour == 3:
            cells[4] = ""  # direct
        lines[hour + 1] = ",".join(cells)
    (folder / "DE.csv").write_text("".join(lines), encoding="utf-8")
    owid = (EXAMPLE_INTENSITY / "owid-carbon-intensity-electricity.csv").read_text(
    ).splitlines(keepends=True)
    assert owid[2].startswith("Germany,DEU,2020,")
    owid[2] = "Germany,DEU,2020,\n"
    (folder / "owid.csv").write_text("".join(owid))
    return folder


def csv_rows(text: str) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(text))


# --- the command line ---------------------------------------------------------------------


def test_a_cc_host_without_samples_says_its_job_gives_no_power_fact(tmp_path):
    job = archive_with_a_missing_host(tmp_path / "archive")
    result = joulehouse("energy", "cc", tmp_path / "archive")
    assert result.returncode == 0  # rows came out: the record is a warning
    assert result.stderr == f"joulehouse: {job}: left out {MISSING_HOST}\n"
    emmy = csv_rows(result.stdout).set_index("job").loc["emmy/1403244/1608923076"]
    # four hosts' energy, the fifth's NaN: a fifth of the window x hosts uncovered
    assert (emmy["hosts"], emmy["series"], emmy["covered_fraction"]) == (4, 5, 0.8)
    assert emmy["energy_j"] == pytest.approx(4817792.7 + 4817350.2 + 4499451.3 + 4858465.8,
                                             abs=1e-6)


def test_gpu_methods_without_a_file_or_with_a_gap_say_they_give_no_fact(tmp_path):
    root = gpu_root(tmp_path / "lab")
    result = joulehouse("energy", "gpu", root)
    assert result.returncode == 0
    assert result.stderr == (f"joulehouse: {root / CLOCK_RUN / '1'}: left out {NO_EXTERNAL}\n"
                             f"joulehouse: {root / GAP_REPETITION}: left out {GAP}\n")
    table = csv_rows(result.stdout).set_index("repetition")
    assert len(table) == 3
    gap = table.loc[GAP_REPETITION]
    assert (gap["power_gap_count"], gap["power_gap_s"]) == (1, pytest.approx(9.38192, abs=1e-5))
    assert gap["counter_gap_count"] == 0  # the counter's delta spans the hole: its fact stays


def test_tau_lines_skipped_by_rule_are_said_once_per_profile_set_with_the_count(tmp_path):
    profiles = profiles_with_skipped_lines(tmp_path / "wrap")
    database = tmp_path / "taudb.sqlite"
    result = joulehouse("taudb", "load", f"sqlite:///{database}", profiles)
    assert result.returncode == 0  # the trial loaded: warnings
    assert result.stdout == f"trial 1: wrap (2 threads) from {profiles}\n"
    assert result.stderr == (f"joulehouse: {profiles}: left out {ZERO_CALLS}\n"
                             f"joulehouse: {profiles}: left out {ZERO_SAMPLES}\n")
    trial = read_profile_dir(profiles)
    assert "MPI_Finalize()" not in set(trial.timers["name"])
    assert trial.counters["name"].tolist() == ["Heap Memory Used (KB)"]
    assert [str(record) for record in trial.left_out] == [
        f"{profiles}: left out {ZERO_CALLS}", f"{profiles}: left out {ZERO_SAMPLES}"]
    # the bundled profiles, which skip nothing, say nothing
    assert read_profile_dir(EXAMPLE_TAU_PROFILES / "tau2_wrap_mpi2").left_out == []


def test_empty_intensity_cells_are_said_per_file_zone_and_basis(tmp_path):
    folder = intensity_with_holes(tmp_path / "intensity")
    result = joulehouse("read", "intensity", folder)
    assert result.returncode == 0
    assert result.stderr == (f"joulehouse: {folder / 'DE.csv'}: left out {DIRECT_HOLE}\n"
                             f"joulehouse: {folder / 'DE.csv'}: left out {LCA_HOLES}\n"
                             f"joulehouse: {folder / 'owid.csv'}: left out {OWID_HOLE}\n")
    table = csv_rows(result.stdout)
    # 24 hours x 2 bases less the 4 empty cells, and OWID's 10 rows less Germany's 2020
    assert len(table) == 44 + 9
    german = table[(table["zone"] == "DE") & (table["basis"] == "lca")]
    assert german["interval_start"].tolist()[1:3] == ["2019-05-27 01:00:00+00:00",
                                                     "2019-05-27 05:00:00+00:00"]
    assert german["interval_end"].tolist()[1] == "2019-05-27 02:00:00+00:00"  # a hole after


def test_an_intensity_file_of_empty_cells_only_is_nothing_usable_exit_1(tmp_path):
    empty = tmp_path / "owid.csv"
    empty.write_text("Entity,Code,Year,Carbon intensity of electricity - gCO2/kWh\n"
                     "Germany,DEU,2019,\nGermany,DEU,2020,\n")
    result = joulehouse("read", "intensity", empty)
    assert result.returncode == 1
    assert result.stdout == ("zone,interval_start,interval_end,intensity_g_per_kwh,basis,kind,"
                             "file,digest\n")
    assert result.stderr == (f"joulehouse: {empty}: left out 2 row(s) of zone DEU (lca) with an "
                             f"empty intensity cell, 2019 to 2020: {HOLE}\n")


# --- the UI ---------------------------------------------------------------------------------


def test_the_ui_warns_of_what_each_source_left_out(tmp_path, monkeypatch):
    if not WEBSERVER.is_file():
        skip_or_fail(f"dagster-webserver not found beside {sys.executable}")
    dagster_home(tmp_path, monkeypatch)
    root = gpu_root(tmp_path / "lab")
    job = archive_with_a_missing_host(tmp_path / "archive")
    tau_landing = tmp_path / "tau"
    tau_landing.mkdir()
    profiles = profiles_with_skipped_lines(tau_landing / "wrap")
    intensity = intensity_with_holes(tmp_path / "intensity")
    settle()
    warehouse = Warehouse(root=str(tmp_path / "warehouse"))
    gpu = GpuBenchmarkSource(data_roots=[DataRoot(path=str(root))], quiet_period_s=QUIET_S,
                             full_rescan_s=None)
    archive = ClusterCockpitArchive(archive_roots=[str(tmp_path / "archive")],
                                    quiet_period_s=QUIET_S, full_rescan_s=None)
    tau = TauProfileSource(landing_folders=[str(tau_landing)], quiet_period_s=QUIET_S)
    accounting = AccountingSettings(intensity_landing=str(intensity))
    defs = build_definitions(gpu, warehouse, tau_profiles=tau, cc_archive=archive,
                             accounting=accounting)
    env = {"JOULEHOUSE_GPU_DATA_ROOTS": str(root), "JOULEHOUSE_WAREHOUSE": warehouse.root,
           "JOULEHOUSE_TAU_LANDING": str(tau_landing),
           "JOULEHOUSE_CC_ARCHIVE": str(tmp_path / "archive"),
           "JOULEHOUSE_INTENSITY_LANDING": str(intensity),
           "JOULEHOUSE_QUIET_PERIOD_S": str(QUIET_S), "JOULEHOUSE_FULL_RESCAN_S": "none"}
    with dg.DagsterInstance.get() as instance:
        runs = [SourceRuns(instance, defs, gpu_repetitions.sensor_name("lab"),
                           gpu_repetitions.JOB_NAME, "gpu_source", gpu,
                           defs.resolve_assets_def("gpu_repetition_energy").partitions_def),
                SourceRuns(instance, defs, clustercockpit.SENSOR_NAME, clustercockpit.JOB_NAME,
                           "cc_archive", archive,
                           defs.resolve_assets_def("cc_block_tables").partitions_def),
                SourceRuns(instance, defs, tau_profiles.SENSOR_NAME, tau_profiles.JOB_NAME,
                           "tau_profiles", tau,
                           defs.resolve_assets_def("tau_profile_trials").partitions_def)]
        requests = []
        for source in runs:
            [request] = source.tick().run_requests
            assert source.launch(request).success  # a WARN is no failure
            requests.append(request)
        # the profile set again, unchanged: not read, its check warns from the stored records
        assert runs[2].launch(requests[2]).success
        assert dg.materialize([carbon_intensity], instance=instance, resources={
            "accounting": accounting, "warehouse": warehouse}).success
        assert runs[0].partitions() == [GPU_DAY]  # the three repetitions' day
        assert runs[2].partitions() == [TAU_DAY]  # the set's day; its left_out rows: tau/wrap

        with webserver(env, tmp_path / "webserver.log") as port:
            def warned(asset: str, check: str, key: str) -> str:
                return warning(port, asset, check, key)["description"]

            assert warned("gpu_repetition_energy", COMPUTED_CHECK, GPU_DAY) == (
                f"{GPU_DAY}: 2 input(s) left something out (2 record(s)): "
                f"{root / CLOCK_RUN / '1'}: left out {NO_EXTERNAL}; "
                f"{root / GAP_REPETITION}: left out {GAP}")
            assert warned("cc_block_tables", READ_CHECK, "emmy/1403") == (
                f"emmy/1403: 1 input(s) left something out (1 record(s)): {job}: left out "
                f"{MISSING_HOST}")
            evaluation = warning(port, "tau_profile_trials", LOADS_CHECK, TAU_DAY)
            assert evaluation["description"] == (
                f"{TAU_DAY}: 1 input(s) left something out (2 record(s)): {profiles}: left out "
                f"{ZERO_CALLS}; {profiles}: left out {ZERO_SAMPLES}")
            assert evaluation["entries"]["left_out"] == 2
            evaluation = warning(port, "carbon_intensity", ROWS_READ_CHECK, "")
            de, owid = intensity / "DE.csv", intensity / "owid.csv"
            assert evaluation["description"] == (
                f"2 input(s) left something out (3 record(s)): {de}: left out {DIRECT_HOLE}; "
                f"{de}: left out {LCA_HOLES}; {owid}: left out {OWID_HOLE}")
            assert (evaluation["entries"]["left_out"],
                    evaluation["entries"]["inputs_left_out"]) == (3, 2)
            for asset, check, key in (
                    ("cc_block_tables", READ_CHECK, "fritz/398"),
                    ("cc_block_tables", READ_CHECK, "taurus/20639")):
                assert check_execution(port, asset, check, key)["status"] == "SUCCEEDED", key

    # the table beside energy_facts, as `joulehouse sql` reads it
    rows = query(tmp_path / "warehouse", "SELECT source, stage, partition_key, input, part "
                 "FROM left_out ORDER BY source, partition_key, input, part")
    assert rows.values.tolist() == [
        ["clustercockpit", "read", "emmy/1403", str(job), MISSING_HOST_PART],
        ["gpu-benchmark", "energy", f"lab/{CLOCK_RUN}/1", str(root / CLOCK_RUN / "1"),
         NO_EXTERNAL_PART],
        ["gpu-benchmark", "energy", f"lab/{GAP_REPETITION}", str(root / GAP_REPETITION),
         GAP_PART],
        ["intensity", "read", "", str(intensity / "DE.csv"), DIRECT_HOLE_PART],
        ["intensity", "read", "", str(intensity / "DE.csv"), LCA_HOLES_PART],
        ["intensity", "read", "", str(intensity / "owid.csv"), OWID_HOLE_PART],
        ["tau", "read", "tau/wrap", str(profiles), ZERO_SAMPLES_PART],
        ["tau", "read", "tau/wrap", str(profiles), ZERO_CALLS_PART],
    ]
