"""The TAU profile readers against the rows TAU's own loader wrote (real threads only).

The golden rows (``peer-data/tau/taudb-golden``) hold what TAU's Java loader
stored for each profile set under ``peer-data/tau/profiles``; the readers must
produce the same per-thread values, before the loader's derived threads.
"""

from __future__ import annotations

import gzip
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from joulehouse.errors import InputError
from joulehouse.taudb.model import THREAD_COLUMNS
from joulehouse.taudb.ppk import read_ppk
from joulehouse.taudb.profiles import identify_profile_set, read_profile_dir
from joulehouse.taudb.read import read_trial_source

KEYS = [*THREAD_COLUMNS, "name"]

#: golden folder -> (profile set under peer-data/tau/profiles, reader, trial name of the golden)
GOLDEN = {
    "trial1_hatchet_cpi_callpath": ("hatchet_tau_cpi_mpi_callpath", read_profile_dir),
    "trial2_tau2_xmain_mpi8_userevents": ("tau2_xmain_mpi8_userevents", read_profile_dir),
    "trial4_tau2_taudbc_openmp_2threads": ("tau2_taudbc_openmp_2threads", read_profile_dir),
    "trial6_LoadImbalance_2.ppk": ("tau2_ppk_examples/LoadImbalance_2.ppk", read_ppk),
    "trial7_DrawGraph_2.ppk": ("tau2_ppk_examples/DrawGraph_2.ppk", read_ppk),
    "trial9_wrf-callpath.ppk": ("tau2_ppk_examples/wrf-callpath.ppk", read_ppk),
    "trial10_wrf16_text": ("tau2_wrf16_callpath_text_exported", read_profile_dir),
    "trial11_tau2_reader2_mpi4": ("tau2_reader2_mpi4", read_profile_dir),
    "trial12_tau2_wrap_mpi2": ("tau2_wrap_mpi2", read_profile_dir),
}

#: Primary metadata that the profiles do not state: TAU's loader sets the file
#: type (DataSource.FILE_TYPE_INDEX / FILE_TYPE_NAME) on every trial, over what
#: a file says (LoadImbalance_2.ppk states "1" / "Tau profiles"), and trial1 was
#: loaded with ``-a hatchet -x cpi`` (application and experiment names).
TEXT_TYPE = {"File Type Index": "1", "File Type Name": "TAU profiles"}
PPK_TYPE = {"File Type Index": "0", "File Type Name": "ParaProf Packed Profile"}
LOADER_ADDED = {
    "trial1_hatchet_cpi_callpath": {**TEXT_TYPE, "Application": "hatchet", "Experiment": "cpi"},
    "trial2_tau2_xmain_mpi8_userevents": TEXT_TYPE,
    "trial4_tau2_taudbc_openmp_2threads": TEXT_TYPE,
    "trial6_LoadImbalance_2.ppk": PPK_TYPE,
    "trial7_DrawGraph_2.ppk": PPK_TYPE,
    "trial9_wrf-callpath.ppk": PPK_TYPE,
    "trial10_wrf16_text": {},  # exported by TAU's Java tools: the files state the same type
    "trial11_tau2_reader2_mpi4": TEXT_TYPE,
    "trial12_tau2_wrap_mpi2": TEXT_TYPE,
}


def _golden(peer_data: Path, folder: str, table: str) -> pd.DataFrame:
    frame = pd.read_csv(peer_data / "tau" / "taudb-golden" / folder / f"{table}.csv",
                        keep_default_na=False, dtype={"name": str, "value": str,
                                                      "timer_callpath_name": str})
    if "thread_index" in frame:
        frame = frame[frame["thread_index"] >= 0]
    return frame


def _assert_close(merged: pd.DataFrame, columns: list[str], what: str) -> None:
    for column in columns:
        golden = merged[f"{column}_golden"].astype(float).to_numpy()
        read = merged[f"{column}_read"].astype(float).to_numpy()
        bad = ~np.isclose(golden, read, rtol=1e-9, atol=0.0)
        assert not bad.any(), f"{what} {column}:\n{merged[bad].head().to_string()}"


@pytest.fixture(scope="module", params=sorted(GOLDEN))
def golden_case(request, peer_data):
    folder = request.param
    source, reader = GOLDEN[folder]
    return folder, reader(peer_data / "tau" / "profiles" / source)


def test_threads_match_golden(golden_case, peer_data):
    folder, trial = golden_case
    golden = _golden(peer_data, folder, "threads").sort_values("thread_index")
    assert trial.threads[THREAD_COLUMNS].values.tolist() == \
        golden[THREAD_COLUMNS].values.tolist()  # TAU's thread_index is the row position
    assert trial.data_source == int(_golden(peer_data, folder, "trial")["data_source"].iloc[0])


def test_timer_values_match_golden(golden_case, peer_data):
    folder, trial = golden_case
    golden = _golden(peer_data, folder, "timer_values").rename(columns={
        "timer_callpath_name": "name", "inclusive_value": "inclusive",
        "exclusive_value": "exclusive"})
    read = trial.timer_values.merge(trial.timers, on=KEYS, how="left", validate="many_to_one")
    merged = golden.merge(read, on=[*KEYS, "metric"], how="outer", indicator=True,
                          suffixes=("_golden", "_read"))
    unmatched = merged[merged["_merge"] != "both"]
    assert unmatched.empty, unmatched[[*KEYS, "metric", "_merge"]].head(10).to_string()
    assert len(merged) == len(golden) == len(trial.timer_values)
    _assert_close(merged, ["calls", "subroutines", "inclusive", "exclusive"], "timer")
    assert sorted(trial.metrics) == sorted(golden["metric"].unique())


def test_counters_match_golden(golden_case, peer_data):
    folder, trial = golden_case
    golden = _golden(peer_data, folder, "counter_values").rename(columns={
        "maximum_value": "maximum", "minimum_value": "minimum", "mean_value": "mean",
        "standard_deviation_column_holds_sumsqr": "sum_squares"})
    merged = golden.merge(trial.counters, on=KEYS, how="outer", indicator=True,
                          suffixes=("_golden", "_read"))
    unmatched = merged[merged["_merge"] != "both"]
    assert unmatched.empty, unmatched[[*KEYS, "_merge"]].head(10).to_string()
    _assert_close(merged, ["sample_count", "maximum", "minimum", "mean", "sum_squares"],
                  "counter")


def test_metadata_matches_golden(golden_case, peer_data):
    """Each thread's metadata is the golden secondary rows of that thread plus the
    golden primary attributes it states; the primary ones are all stated by the
    first thread (TAU's rule), except those the loader adds itself."""
    folder, trial = golden_case
    primary = dict(_golden(peer_data, folder, "primary_metadata")[["name", "value"]].values)
    secondary = _golden(peer_data, folder, "secondary_metadata")
    secondary_rows = {(int(n), int(c), int(t), name, value) for n, c, t, name, value in
                      secondary[[*KEYS, "value"]].itertuples(index=False)}
    stated = {(int(n), int(c), int(t), name, value) for n, c, t, name, value in
              _stated_metadata(trial).itertuples(index=False)}
    not_golden = {row for row in stated if row not in secondary_rows
                  and primary.get(row[3]) != row[4] and row[3] not in LOADER_ADDED[folder]}
    assert not not_golden
    assert secondary_rows <= stated
    first = tuple(trial.threads.iloc[0])
    first_thread = {row[3]: row[4] for row in stated if row[:3] == first}
    unstated = {name: value for name, value in primary.items()
                if first_thread.get(name) != value}
    assert unstated == LOADER_ADDED[folder]


def _stated_metadata(trial) -> pd.DataFrame:
    """Per-thread metadata, with a .ppk's trial-level attributes on every thread."""
    frame = trial.metadata[[*KEYS, "value"]]
    if trial.trial_metadata:
        shared = trial.threads.merge(pd.DataFrame(list(trial.trial_metadata.items()),
                                                  columns=["name", "value"]), how="cross")
        frame = pd.concat([frame, shared[[*KEYS, "value"]]], ignore_index=True)
    return frame


def test_callpath_entries_keep_no_groups(peer_data):
    trial = read_profile_dir(peer_data / "tau" / "profiles" / "hatchet_tau_cpi_mpi_callpath")
    callpath = trial.timers["name"].str.contains(" => ", regex=False)
    assert callpath.any() and (trial.timers.loc[callpath, "group_names"] == "").all()
    flat = trial.timers[~callpath].set_index("name")["group_names"]
    assert flat["MPI_Bcast()"].iloc[0] == "MPI"


def test_trial_identity(peer_data, tmp_path):
    source = peer_data / "tau" / "profiles" / "tau2_wrap_mpi2"
    trial = read_profile_dir(source)
    assert trial.name == "tau2_wrap_mpi2" and trial.metrics == ["TIME"]
    assert trial.source_key == str(source.resolve())
    assert read_profile_dir(source, name="other").fingerprint == trial.fingerprint
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    assert read_profile_dir(copy).fingerprint == trial.fingerprint
    _edit(copy / "profile.1.0.0", lambda text: text.replace(" 2530 2530 ", " 2531 2531 "))
    assert read_profile_dir(copy).fingerprint != trial.fingerprint

    ppk = peer_data / "tau" / "profiles" / "tau2_ppk_examples" / "DrawGraph_2.ppk"
    packed = read_ppk(ppk)
    assert packed.name == "DrawGraph_2.ppk" and packed.source_key == str(ppk.resolve())
    assert len(packed.fingerprint) == 64
    assert read_trial_source(ppk).fingerprint == packed.fingerprint
    assert read_trial_source(source).source_key == trial.source_key


# --- TAU's reader rules on small hand-made profiles --------------------------------------------

HEADER = ('# Name Calls Subrs Excl Incl ProfileCalls # <metadata><attribute><name>Metric Name'
          '</name><value>{metric}</value></attribute><attribute><name>Note</name>'
          '<value> a &amp; b &lt;c&gt; </value></attribute></metadata>')


def _profile(timers: list[str], events: list[str] = (), metric: str = "TIME") -> str:
    lines = [f"{len(timers)} templated_functions_MULTI_{metric}", HEADER.format(metric=metric),
             *timers, "0 aggregates"]
    if events:
        lines += [f"{len(events)} userevents", "# eventname numevents max min mean sumsqr",
                  *events]
    return "\n".join(lines) + "\n"


def _write(folder: Path, text: str, name: str = "profile.0.0.0") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def _edit(path: Path, change) -> None:
    path.write_text(change(path.read_text()))


def test_names_normalised_duplicates_summed_and_zero_calls_skipped(tmp_path):
    _write(tmp_path / "set", _profile(
        ['"main  "  1 1 10 100 0 GROUP="TAU_USER"',
         '"  main" 1 2 5 50 0 GROUP="TAU_DEFAULT | TAU_USER"',
         '"a   =>  b" 3 0 4.5E1 4.5E1 0 GROUP="TAU_CALLPATH|MPI"',
         '"never" 0 0 9 9 0 GROUP="TAU_USER"',
         '"negative" 1 0 -3 -2 0'],
        ['"ev  : main" 2 8 2 5 68', '"ev  : main " 2 4 1 2.5 17', '"empty" 0 0 0 0 0']))
    trial = read_profile_dir(tmp_path / "set")
    timers = trial.timers.set_index("name")
    assert list(timers.index) == ["main", "a => b", "negative"]
    assert timers.loc["main", ["calls", "subroutines"]].tolist() == [2, 3]
    assert timers.loc["main", "group_names"] == "TAU_USER|TAU_DEFAULT"
    assert timers.loc["a => b", "group_names"] == ""
    values = trial.timer_values.set_index("name")
    assert values.loc["main", ["inclusive", "exclusive"]].tolist() == [150, 15]
    assert values.loc["a => b", "inclusive"] == 45
    assert values.loc["negative", ["inclusive", "exclusive"]].tolist() == [0, 0]
    counters = trial.counters.set_index("name")
    assert list(counters.index) == ["ev : main"]
    assert counters.loc["ev : main"].tolist()[3:] == [4, 8, 1, 3.75, 85]
    metadata = dict(trial.metadata[["name", "value"]].values)
    assert metadata == {"Note": "a & b <c>"}  # trimmed, entities resolved, Metric Name gone


def test_multi_metric_folders(tmp_path):
    timers = ['"main" 1 1 10 100 0 GROUP="TAU_USER"', '"work" 4 0 90 90 0 GROUP="TAU_USER"']
    for rank in (0, 1):
        _write(tmp_path / "run" / "MULTI__TIME", _profile(timers), f"profile.{rank}.0.0")
        _write(tmp_path / "run" / "MULTI__PAPI_FP_OPS", _profile(
            ['"main" 7 7 1E3 2.5E3 0 GROUP="OTHER"', '"work" 4 0 1500 1500 0'],
            metric="PAPI_FP_OPS"), f"profile.{rank}.0.0")
    trial = read_profile_dir(tmp_path / "run")
    assert trial.name == "run" and trial.metrics == ["PAPI_FP_OPS", "TIME"]  # folder name order
    assert len(trial.threads) == 2
    main = trial.timers[trial.timers["name"] == "main"].iloc[0]
    # calls, subroutines and groups come from the first metric, as in TAU
    assert (main["calls"], main["subroutines"], main["group_names"]) == (7, 7, "OTHER")
    values = trial.timer_values[(trial.timer_values["name"] == "main")
                                & (trial.timer_values["node_rank"] == 1)].set_index("metric")
    assert values.loc["TIME", ["inclusive", "exclusive"]].tolist() == [100, 10]
    assert values.loc["PAPI_FP_OPS", ["inclusive", "exclusive"]].tolist() == [2500, 1000]
    assert read_trial_source(tmp_path / "run").fingerprint == trial.fingerprint


def test_what_a_path_is_as_a_profile_set(tmp_path):
    flat = _write(tmp_path / "flat", _profile(['"main" 1 0 10 10 0']))
    multi = _write(tmp_path / "multi" / "MULTI__TIME", _profile(['"main" 1 0 10 10 0']))
    (tmp_path / "packed.PPK").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "empty" / "MULTI__TIME").mkdir(parents=True)
    assert identify_profile_set(tmp_path / "flat") == (
        "profiles", [(tmp_path / "flat", {(0, 0, 0): flat})])
    assert identify_profile_set(tmp_path / "multi") == (
        "profiles", [(multi.parent, {(0, 0, 0): multi})])
    assert identify_profile_set(tmp_path / "packed.PPK") == ("ppk", [])
    for other in ("notes.txt", "empty", "missing"):
        assert identify_profile_set(tmp_path / other) is None


# --- bad input: InputError naming the file and the line ------------------------------------------

GOOD = ['"main" 1 1 10 100 0 GROUP="TAU_USER"', '"work" 4 0 90 90 0 GROUP="TAU_USER"']


def _error(tmp_path: Path, text: str) -> InputError:
    path = _write(tmp_path / "bad", text)
    with pytest.raises(InputError) as caught:
        read_profile_dir(tmp_path / "bad")
    assert caught.value.path == str(path)
    return caught.value


def test_fewer_timer_lines_than_announced(tmp_path):
    error = _error(tmp_path, _profile(GOOD).replace("2 templated", "3 templated", 1))
    assert error.line == 5 and "truncated" in error.reason and "2 of the 3" in error.reason


def test_profile_cut_in_a_line(tmp_path):
    text = _profile(GOOD)
    error = _error(tmp_path, text[:text.index("90 90")])
    assert error.line == 4 and "expected a timer line" in error.reason


def test_profile_cut_before_its_end(tmp_path):
    error = _error(tmp_path, "\n".join(_profile(GOOD).splitlines()[:3]) + "\n")
    assert error.line == 4 and "end of the file" in error.reason
    error = _error(tmp_path, "\n".join(_profile(GOOD).splitlines()[:4]) + "\n")
    assert error.line == 5 and "aggregates" in error.reason


def test_user_events_cut(tmp_path):
    text = _profile(GOOD, ['"ev" 2 8 2 5 68', '"ev2" 2 8 2 5 68'])
    error = _error(tmp_path, text[:text.rindex('"ev2"')])
    assert error.line == 9 and "1 of the 2 user event lines" in error.reason


def test_header_not_tau(tmp_path):
    error = _error(tmp_path, "hello world\n" + _profile(GOOD).split("\n", 1)[1])
    assert error.line == 1 and "not a TAU profile" in error.reason
    error = _error(tmp_path, _profile(GOOD).replace("# Name", "Name", 1))
    assert error.line == 2
    error = _error(tmp_path, "")
    assert error.line == 1


def test_counts_not_numbers(tmp_path):
    error = _error(tmp_path, _profile(GOOD).replace('"work" 4 ', '"work" four ', 1))
    assert (error.line, error.field) == (4, "calls") and "'four'" in error.reason
    error = _error(tmp_path, _profile(GOOD).replace(" 90 0 GROUP", " 9O 0 GROUP", 1))
    assert (error.line, error.field) == (4, "inclusive")
    error = _error(tmp_path, _profile(GOOD).replace("0 aggregates", "none aggregates"))
    assert (error.line, error.field) == (5, "aggregates")
    error = _error(tmp_path, _profile(GOOD, ['"ev" 2 8 2 5 x68']))
    assert (error.line, error.field) == (8, "sum_squares")
    error = _error(tmp_path, _profile(GOOD).replace("2 templated", "two templated", 1))
    assert error.line == 1


def test_bad_metadata(tmp_path):
    error = _error(tmp_path, _profile(GOOD).replace("</name><value>TIME", "<value>TIME", 1))
    assert (error.line, error.field) == (2, "metadata")


def test_multi_folders_disagree_on_threads(tmp_path):
    for rank in (0, 1):
        _write(tmp_path / "run" / "MULTI__TIME", _profile(GOOD), f"profile.{rank}.0.0")
    _write(tmp_path / "run" / "MULTI__PAPI", _profile(GOOD, metric="PAPI"), "profile.0.0.0")
    extra = _write(tmp_path / "run" / "MULTI__PAPI", _profile(GOOD, metric="PAPI"),
                   "profile.2.0.0")
    with pytest.raises(InputError) as caught:
        read_profile_dir(tmp_path / "run")
    assert caught.value.path == str(extra) and "MULTI__TIME" in caught.value.reason
    extra.unlink()
    with pytest.raises(InputError) as caught:
        read_profile_dir(tmp_path / "run")
    assert caught.value.path == str(tmp_path / "run" / "MULTI__TIME" / "profile.1.0.0")
    assert "MULTI__PAPI" in caught.value.reason


def test_not_a_profile_set(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    for path in (tmp_path / "empty", tmp_path / "notes.txt", tmp_path / "missing"):
        with pytest.raises(InputError) as caught:
            read_trial_source(path)
        assert caught.value.path == str(path.resolve())


def test_ppk_not_gzip(tmp_path):
    path = tmp_path / "broken.ppk"
    path.write_bytes(b"PPK but not gzip")
    with pytest.raises(InputError) as caught:
        read_trial_source(path)
    assert caught.value.path == str(path) and "gzip" in caught.value.reason


def test_ppk_not_packed_profile(tmp_path):
    path = tmp_path / "other.ppk"
    path.write_bytes(gzip.compress(b"\x00X\x00Y\x00Z" + bytes(20)))
    with pytest.raises(InputError) as caught:
        read_ppk(path)
    assert caught.value.path == str(path) and "packed profile" in caught.value.reason


def test_ppk_truncated(peer_data, tmp_path):
    data = gzip.decompress(
        (peer_data / "tau" / "profiles" / "tau2_ppk_examples" / "DrawGraph_2.ppk").read_bytes())
    path = tmp_path / "cut.ppk"
    path.write_bytes(gzip.compress(data[:len(data) // 2]))
    with pytest.raises(InputError) as caught:
        read_ppk(path)
    assert caught.value.path == str(path)
    assert re.search(r"truncated at byte \d+", caught.value.reason)
