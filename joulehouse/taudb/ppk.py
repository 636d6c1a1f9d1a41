"""ParaProf packed profiles (``.ppk``, data_source 0) as trials.

A ``.ppk`` is the gzip of a big-endian Java ``DataOutputStream`` (TAU's
``PackedProfileDataSource`` reads it, ``DataSourceExport.writePacked`` writes it):

- ``'P' 'P' 'K'`` (Java chars, 2 bytes each), int version, int lowest
  compatible version (TAU reads up to 2);
- version >= 2: int size of a metadata header, then inside it: int n + n
  bytes to skip, int k + k (name, value) trial attributes, int threads + per
  thread (node, context, thread ints, int k + k (name, value) pairs);
  version 1: int n + n bytes to skip;
- int + metric names; int + group names; int + functions (name, int + group
  indices); int + user event names (strings are Java ``readUTF``);
- int threads, each: node, context, thread ints; int + function profiles
  (int function, double calls, double subroutines, then per metric double
  exclusive, double inclusive); int + user event profiles (int event, int
  count, double MIN, double MAX, double mean, double SumSqr: min before max,
  unlike the text format).

Unlike the text reader TAU keeps entries with 0 calls or 0 samples here.
Values keep TAU's units (TIME: microseconds).
"""

from __future__ import annotations

import gzip
import hashlib
import struct
import zlib
from pathlib import Path

import numpy as np

from joulehouse.errors import InputError
from joulehouse.taudb.model import DATA_SOURCE_PPK, TrialData
from joulehouse.taudb.profiles import counter_frame, make_trial, metadata_frame, timer_frames

MAGIC = "PPK".encode("utf-16-be")
SUPPORTED_VERSION = 2  # the highest "lowest compatible version" TAU's reader accepts

_USER_EVENT = np.dtype([("event", ">i4"), ("count", ">i4"), ("minimum", ">f8"),
                        ("maximum", ">f8"), ("mean", ">f8"), ("sum_squares", ">f8")])


def _function_profile(metrics: int) -> np.dtype:
    """One function profile record; ``values`` is (metric, [exclusive, inclusive])."""
    return np.dtype([("function", ">i4"), ("calls", ">f8"), ("subroutines", ">f8"),
                     ("values", ">f8", (metrics, 2))])


def _java_utf(raw: bytes) -> str:
    """Decode Java's modified UTF-8 (NUL as C0 80, supplementary chars as surrogate pairs)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", errors="surrogatepass")
        return text.encode("utf-16", errors="surrogatepass").decode("utf-16", errors="replace")


class _Stream:
    """Big-endian reads over the decompressed bytes; InputError names the byte offset."""

    def __init__(self, path: Path, data: bytes) -> None:
        self.path, self.data, self.pos = path, data, 0

    def _take(self, size: int, what: str) -> int:
        start = self.pos
        if size < 0 or start + size > len(self.data):
            raise InputError(self.path, f"truncated at byte {start} of {len(self.data)} "
                             f"(uncompressed), reading {what}")
        self.pos += size
        return start

    def i32(self, what: str) -> int:
        return struct.unpack_from(">i", self.data, self._take(4, what))[0]

    def count(self, what: str) -> int:
        value = self.i32(what)
        if value < 0:
            raise InputError(self.path, f"negative count {value} at byte {self.pos - 4}",
                             field=what)
        return value

    def utf(self, what: str) -> str:
        size = struct.unpack_from(">H", self.data, self._take(2, what))[0]
        start = self._take(size, what)
        return _java_utf(self.data[start:start + size])

    def skip(self, size: int, what: str) -> None:
        self._take(size, what)

    def records(self, dtype: np.dtype, count: int, what: str) -> np.ndarray:
        start = self._take(dtype.itemsize * count, what)
        return np.frombuffer(self.data, dtype=dtype, count=count, offset=start)

    def pairs(self, what: str) -> list[tuple[str, str]]:
        return [(self.utf(what), self.utf(what)) for _ in range(self.count(what))]


def _decompress(path: Path, raw: bytes) -> bytes:
    try:
        return gzip.decompress(raw)
    except gzip.BadGzipFile as err:
        raise InputError(path, f"not a .ppk: not gzip-compressed ({err})") from None
    except (EOFError, zlib.error) as err:
        raise InputError(path, f"truncated or corrupt gzip stream ({err})") from None


def read_ppk(path: str | Path) -> TrialData:
    """Read a ParaProf packed profile (``.ppk``) as a trial.

    The trial is named after the file (e.g. ``LoadImbalance_2.ppk``);
    ``source_key`` is the resolved path, ``fingerprint`` the SHA-256 of the
    file. The file's trial-level attributes become ``trial_metadata``; each
    thread's own attributes the ``metadata`` frame.
    """
    path = Path(path)
    raw = path.read_bytes()
    s = _Stream(path, _decompress(path, raw))
    if s.data[:6] != MAGIC:
        raise InputError(path, "not a ParaProf packed profile (no 'PPK' magic)")
    s.skip(6, "magic")
    version = s.i32("version")
    compatible = s.i32("compatible version")
    if compatible > SUPPORTED_VERSION:
        raise InputError(path, f"packed profile format {compatible} is newer than this reader "
                         f"({SUPPORTED_VERSION}); version {version}")

    trial_metadata: dict[str, str] = {}
    thread_metadata: dict[tuple[int, int, int], list[tuple[str, str]]] = {}
    if version >= 2:
        header_size = s.count("metadata header size")
        header_end = s.pos + header_size
        s.skip(s.count("reserved header"), "reserved header")
        trial_metadata = dict(s.pairs("trial metadata"))
        for _ in range(s.count("metadata threads")):
            key = (s.i32("node"), s.i32("context"), s.i32("thread"))
            thread_metadata.setdefault(key, []).extend(s.pairs("thread metadata"))
        if s.pos > header_end:
            raise InputError(path, f"metadata header overruns its size {header_size}")
        s.pos = header_end
    else:
        s.skip(s.count("header"), "header")

    metrics = [s.utf("metric name") for _ in range(s.count("metrics"))]
    groups = [s.utf("group name") for _ in range(s.count("groups"))]
    function_names, function_groups = [], []
    for _ in range(s.count("functions")):
        function_names.append(s.utf("function name"))
        members = [s.i32("function group") for _ in range(s.count("function groups"))]
        if any(not 0 <= g < len(groups) for g in members):
            raise InputError(path, f"function group index out of range at byte {s.pos}")
        function_groups.append("|".join(groups[g] for g in members))
    event_names = [s.utf("user event name") for _ in range(s.count("user events"))]

    profile_dtype = _function_profile(len(metrics))
    keys, profiles, events = [], [], []
    for _ in range(s.count("threads")):
        keys.append((s.i32("node"), s.i32("context"), s.i32("thread")))
        profiles.append(s.records(profile_dtype, s.count("function profiles"),
                                  "function profiles"))
        events.append(s.records(_USER_EVENT, s.count("user event profiles"),
                                "user event profiles"))

    threads_sorted = sorted(set(keys) | set(thread_metadata))
    position = {key: i for i, key in enumerate(threads_sorted)}
    threads = np.array(threads_sorted, dtype=np.int64).reshape(-1, 3)
    function_of = np.concatenate([p["function"] for p in profiles] or [np.empty(0, ">i4")])
    event_of = np.concatenate([e["event"] for e in events] or [np.empty(0, ">i4")])
    if function_of.size and not (0 <= function_of.min() and function_of.max() < len(function_names)):
        raise InputError(path, "function profile names an unknown function")
    if event_of.size and not (0 <= event_of.min() and event_of.max() < len(event_names)):
        raise InputError(path, "user event profile names an unknown user event")

    profile = np.concatenate(profiles) if profiles else np.empty(0, profile_dtype)
    timers, timer_values = timer_frames(
        threads, _thread_rows(position, keys, [len(p) for p in profiles]),
        np.array(function_names, dtype=object)[function_of],
        np.array(function_groups, dtype=object)[function_of],
        profile["calls"].astype(np.float64), profile["subroutines"].astype(np.float64),
        profile["values"][:, :, ::-1].astype(np.float64), metrics)
    event = np.concatenate(events) if events else np.empty(0, _USER_EVENT)
    stats = np.column_stack([event[c].astype(np.float64) for c in
                             ("count", "maximum", "minimum", "mean", "sum_squares")])
    counters = counter_frame(threads, _thread_rows(position, keys, [len(e) for e in events]),
                             np.array(event_names, dtype=object)[event_of], stats)
    return make_trial(
        name=path.name, data_source=DATA_SOURCE_PPK, metrics=metrics, threads=threads,
        timers=timers, timer_values=timer_values, counters=counters,
        metadata=metadata_frame(threads, [thread_metadata.get(k, []) for k in threads_sorted]),
        source_key=str(path.resolve()), fingerprint=hashlib.sha256(raw).hexdigest(),
        trial_metadata=trial_metadata)


def _thread_rows(position: dict, keys: list, counts: list[int]) -> np.ndarray:
    """The sorted-thread index of each record, the records being grouped by thread."""
    return np.repeat(np.array([position[k] for k in keys], dtype=np.intp), counts)
