"""The day of a TAU profile set (its block): its first thread's Starting Timestamp, read from
the head of one file, else its newest file's mtime."""

from __future__ import annotations

import gzip
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from joulehouse.errors import InputError
from joulehouse.landing import read_landed_item
from joulehouse.landing_days import item_day_key
from joulehouse.taudb.days import HEAD_BYTES, profile_set_start_day, timestamp_day
from joulehouse.taudb.landing import profile_set_files
from joulehouse.taudb.model import THREAD_COLUMNS
from joulehouse.taudb.ppk import read_ppk_attributes
from joulehouse.taudb.read import read_trial_source

#: Each peer set's day, copied by hand from its first thread's Starting Timestamp (e.g.
#: hatchet's 1614611761048525 us is 2021-03-01 15:16:01 UTC).
PEER_DAYS = {
    "hatchet_tau_cpi_mpi_callpath": "2021-03-01",
    "tau2_ppk_examples/DrawGraph_2.ppk": "2009-04-07",
    "tau2_ppk_examples/LoadImbalance_2.ppk": "2009-09-14",
    "tau2_ppk_examples/wrf-callpath.ppk": "2009-10-05",
    "tau2_reader2_mpi4": "2017-06-10",
    "tau2_taudbc_openmp_2threads": "2012-10-31",
    "tau2_wrap_mpi2": "2010-06-03",
    "tau2_wrf16_callpath_text_exported": "2009-10-05",
    "tau2_xmain_mpi8_userevents": "2017-06-10",
}
#: The small peer sets read whole too, to compare with what the TAUdb reader reads.
READ_WHOLE = ["tau2_ppk_examples/DrawGraph_2.ppk", "tau2_taudbc_openmp_2threads",
              "tau2_wrap_mpi2"]


@pytest.mark.parametrize("name", sorted(PEER_DAYS))
def test_the_day_key_of_a_peer_set_is_its_starting_timestamps_utc_day(peer_data, name):
    path = peer_data / "tau" / "profiles" / name
    item = read_landed_item(path, f"tau/{path.name}", profile_set_files)
    assert item_day_key(item, profile_set_start_day) == f"tau/{PEER_DAYS[name]}"
    if name in READ_WHOLE:  # as the reader reads it, from the first thread's metadata
        metadata = read_trial_source(path).metadata
        first = metadata[(metadata[THREAD_COLUMNS] == 0).all(axis=1)]
        [value] = first.loc[first["name"] == "Starting Timestamp", "value"]
        assert timestamp_day(value) == PEER_DAYS[name]


def test_a_ppk_is_read_from_its_head_alone(peer_data, tmp_path):
    whole = (peer_data / "tau" / "profiles" / "tau2_ppk_examples" / "wrf-callpath.ppk"
             ).read_bytes()
    cut = tmp_path / "cut.ppk"  # a tenth of the file: its metadata header is at its start
    cut.write_bytes(whole[:len(whole) // 10])
    assert profile_set_start_day(cut) == "2009-10-05"
    assert read_ppk_attributes(cut, HEAD_BYTES)["Starting Timestamp"] == "1254771545492962"
    plain = tmp_path / "plain.ppk"
    plain.write_bytes(gzip.decompress(whole)[:4096])  # not gzip: no start, no error
    assert profile_set_start_day(plain) is None


def _set_of(folder: Path, metadata: str, day: tuple[int, int, int]) -> Path:
    """A one-thread set ``folder`` whose profile's metadata is ``metadata``, last written at
    noon UTC of ``day``."""
    folder.mkdir()
    profile = folder / "profile.0.0.0"
    profile.write_text(f'1 templated_functions_MULTI_TIME\n# Name Calls Subrs Excl Incl '
                       f'ProfileCalls # <metadata>{metadata}</metadata>\n"main" 1 0 5 5 0 '
                       'GROUP="TAU_DEFAULT"\n0 aggregates\n')
    os.utime(profile, (0, datetime(*day, 12, tzinfo=UTC).timestamp()))
    return folder


def _attribute(name: str, value: str) -> str:
    return f"<attribute><name>{name}</name><value>{value}</value></attribute>"


def test_a_set_without_a_start_in_its_head_is_in_its_newest_files_mtime_day(tmp_path):
    start = _attribute("Starting Timestamp", "1275601397098061")  # 2010-06-03
    found = _set_of(tmp_path / "found", _attribute("CWD", "/home") + start, (2024, 1, 2))
    assert profile_set_start_day(found) == "2010-06-03"
    beyond = _set_of(tmp_path / "beyond", _attribute("Command Line", "x" * HEAD_BYTES) + start,
                     (2024, 1, 2))
    none = _set_of(tmp_path / "none", _attribute("CWD", "/home"), (2024, 1, 3))
    garbage = _set_of(tmp_path / "garbage", _attribute("Starting Timestamp", "9" * 30),
                      (2024, 1, 4))
    for folder, day in ((beyond, "2024-01-02"), (none, "2024-01-03"), (garbage, "2024-01-04")):
        assert profile_set_start_day(folder) is None
        item = read_landed_item(folder, f"tau/{folder.name}", profile_set_files)
        assert item_day_key(item, profile_set_start_day) == f"tau/{day}"
    shutil.copy(none / "profile.0.0.0", none / "profile.1.0.0")
    os.utime(none / "profile.1.0.0", (0, datetime(2024, 2, 1, 12, tzinfo=UTC).timestamp()))
    item = read_landed_item(none, "tau/none", profile_set_files)
    assert item_day_key(item, profile_set_start_day) == "tau/2024-02-01"  # the newest file


def test_a_ppk_string_that_is_no_utf8_is_an_input_error_and_leaves_the_mtime_day(
        peer_data, tmp_path):
    """A metadata string of a .ppk that is no (modified) UTF-8 fails the set naming file and
    the string's byte; its day falls back to its file's mtime."""
    data = gzip.decompress((peer_data / "tau" / "profiles" / "tau2_ppk_examples"
                            / "DrawGraph_2.ppk").read_bytes())
    at = data.index(b"Starting Timestamp")
    bad = tmp_path / "bad.ppk"
    bad.write_bytes(gzip.compress(data[:at] + b"\xff" + data[at + 1:]))
    os.utime(bad, (0, datetime(2024, 2, 29, 12, tzinfo=UTC).timestamp()))
    with pytest.raises(InputError, match=rf"string at byte {at} \(uncompressed\) is not "
                                         "modified UTF-8") as err:
        read_trial_source(bad)
    assert err.value.path == str(bad) and err.value.field == "thread metadata"
    assert profile_set_start_day(bad) is None
    item = read_landed_item(bad, "tau/bad.ppk", profile_set_files)
    assert item_day_key(item, profile_set_start_day) == "tau/2024-02-29"
