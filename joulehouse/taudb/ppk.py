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

:func:`write_ppk` writes a trial in the same format (version 2, lowest
compatible 1, as ``writePacked``), so that ParaProf opens it as a file: the
way to open a trial of the embedded SQLite TAUdb in ParaProf
(``docs/taudb.md``).
"""

from __future__ import annotations

import gzip
import hashlib
import struct
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from joulehouse.errors import InputError
from joulehouse.taudb.model import CALLPATH_SEPARATOR, DATA_SOURCE_PPK, THREAD_COLUMNS, TrialData
from joulehouse.taudb.profiles import counter_frame, make_trial, metadata_frame, timer_frames
from joulehouse.taudb.rules import timer_groups, with_flat_entries

MAGIC = "PPK".encode("utf-16-be")
SUPPORTED_VERSION = 2  # the highest "lowest compatible version" TAU's reader accepts
WRITTEN_VERSION = (2, 1)  # version and lowest compatible version, as TAU's writePacked

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
        """A Java ``writeUTF`` string; InputError (the string's byte offset) when it is no
        modified UTF-8 (bytes Java's ``readUTF`` refuses too; it accepts overlong forms
        other than ``C0 80``, which are refused here)."""
        size = struct.unpack_from(">H", self.data, self._take(2, what))[0]
        start = self._take(size, what)
        try:
            return _java_utf(self.data[start:start + size])
        except UnicodeDecodeError:
            raise InputError(self.path, f"the string at byte {start} (uncompressed) is not "
                             "modified UTF-8", field=what) from None

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
    version = _version(s)
    trial_metadata: dict[str, str] = {}
    thread_metadata: dict[tuple[int, int, int], list[tuple[str, str]]] = {}
    if version >= 2:
        header_size = s.count("metadata header size")
        header_end = s.pos + header_size
        trial_metadata, thread_metadata = _metadata(s)
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


def _version(s: _Stream) -> int:
    """The format version after the magic, checked readable (InputError else)."""
    if s.data[:6] != MAGIC:
        raise InputError(s.path, "not a ParaProf packed profile (no 'PPK' magic)")
    s.skip(6, "magic")
    version = s.i32("version")
    compatible = s.i32("compatible version")
    if compatible > SUPPORTED_VERSION:
        raise InputError(s.path, f"packed profile format {compatible} is newer than this "
                         f"reader ({SUPPORTED_VERSION}); version {version}")
    return version


def _metadata(s: _Stream, threads: int | None = None
              ) -> tuple[dict[str, str], dict[tuple[int, int, int], list[tuple[str, str]]]]:
    """The trial attributes and each thread's (name, value) pairs of a metadata header
    (format 2, after its size), of its first ``threads`` threads (None: all)."""
    s.skip(s.count("reserved header"), "reserved header")
    trial = dict(s.pairs("trial metadata"))
    count = s.count("metadata threads")
    per_thread: dict[tuple[int, int, int], list[tuple[str, str]]] = {}
    for _ in range(count if threads is None else min(count, threads)):
        key = (s.i32("node"), s.i32("context"), s.i32("thread"))
        per_thread.setdefault(key, []).extend(s.pairs("thread metadata"))
    return trial, per_thread


def read_ppk_attributes(path: str | Path, head_bytes: int) -> dict[str, str]:
    """The attributes of a ``.ppk``'s trial and of its first thread (the trial's win), read
    from its first ``head_bytes`` decompressed to at most ``head_bytes``, never the whole
    file; none in format 1. InputError when the file is no readable ``.ppk`` or they lie
    beyond that head."""
    path = Path(path)
    with open(path, "rb") as handle:
        raw = handle.read(head_bytes)
    try:
        head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, head_bytes)
    except zlib.error as err:
        raise InputError(path, f"not a .ppk: not gzip-compressed ({err})") from None
    s = _Stream(path, head)
    if _version(s) < 2:
        return {}
    s.skip(4, "metadata header size")
    trial, first = _metadata(s, threads=1)
    return {name: value for pairs in first.values() for name, value in pairs} | trial


def _thread_rows(position: dict, keys: list, counts: list[int]) -> np.ndarray:
    """The sorted-thread index of each record, the records being grouped by thread."""
    return np.repeat(np.array([position[k] for k in keys], dtype=np.intp), counts)


# --- writing -----------------------------------------------------------------------------------

def write_ppk(trial: TrialData, path: str | Path) -> None:
    """Write ``trial`` (real threads; TAU derives the rest) as a ParaProf packed profile.

    Functions are the trial's timer entries (callpath names as ``A => B``)
    with the flat entries TAU's tools need (:func:`rules.with_flat_entries`),
    with the groups of their flat entries; trial attributes are
    ``trial_metadata`` and each thread's are its ``metadata`` rows. Values
    keep their units. :func:`read_ppk` reads back the same frames.
    """
    trial = with_flat_entries(trial)
    threads = trial.threads[THREAD_COLUMNS].astype("int64").sort_values(THREAD_COLUMNS)
    names = pd.Index(trial.timers["name"].unique()).sort_values()
    # a flat function's groups: the union over its entries, as the loader takes them
    stated = timer_groups(trial.timers, pd.Index([])).groupby("name")["group_name"].agg(list)
    groups_of = [[] if CALLPATH_SEPARATOR in name else stated.get(name, []) for name in names]
    groups = pd.Index(sorted({g for gs in groups_of for g in gs}))
    events = pd.Index(trial.counters["name"].unique()).sort_values()
    out = _Writer()

    header = _Writer()
    header.i32(0)  # no reserved bytes
    header.pairs(trial.trial_metadata.items())
    header.i32(len(threads))
    for key, rows in zip(threads.itertuples(index=False, name=None),
                         _by_thread(trial.metadata, threads)):
        header.ints(key)
        header.pairs(zip(rows["name"], rows["value"]))
    out.raw(MAGIC)
    out.ints(WRITTEN_VERSION)
    out.i32(len(header.data))
    out.raw(header.data)
    out.strings(trial.metrics)
    out.strings(groups)
    out.i32(len(names))
    for name, members in zip(names, groups_of):
        out.utf(name)
        out.ints([len(members), *groups.get_indexer(members)])
    out.strings(events)

    values = trial.timer_values.pivot_table(
        index=THREAD_COLUMNS + ["name"], columns="metric", values=["exclusive", "inclusive"],
        aggfunc="first")
    out.i32(len(threads))
    for key, entries, counters in zip(threads.itertuples(index=False, name=None),
                                      _by_thread(trial.timers, threads),
                                      _by_thread(trial.counters, threads)):
        out.ints(key)
        entries = entries.sort_values("name")
        record = np.zeros(len(entries), _function_profile(len(trial.metrics)))
        record["function"] = names.get_indexer(entries["name"])
        record["calls"] = entries["calls"].to_numpy(dtype="float64")
        record["subroutines"] = entries["subroutines"].to_numpy(dtype="float64")
        index = pd.MultiIndex.from_frame(entries[THREAD_COLUMNS + ["name"]])
        for m, metric in enumerate(trial.metrics):
            record["values"][:, m, 0] = values[("exclusive", metric)].reindex(index).to_numpy()
            record["values"][:, m, 1] = values[("inclusive", metric)].reindex(index).to_numpy()
        out.i32(len(record))
        out.raw(record.tobytes())
        counters = counters.sort_values("name")
        event = np.zeros(len(counters), _USER_EVENT)
        event["event"] = events.get_indexer(counters["name"])
        for column, field in (("sample_count", "count"), ("minimum", "minimum"),
                              ("maximum", "maximum"), ("mean", "mean"),
                              ("sum_squares", "sum_squares")):
            event[field] = counters[column].to_numpy()
        out.i32(len(event))
        out.raw(event.tobytes())
    Path(path).write_bytes(gzip.compress(bytes(out.data)))


def _by_thread(frame: pd.DataFrame, threads: pd.DataFrame) -> list[pd.DataFrame]:
    """The rows of ``frame`` of each thread, in ``threads`` order."""
    grouped = dict(tuple(frame.groupby(THREAD_COLUMNS)))
    return [grouped.get(key, frame.iloc[:0]) for key in threads.itertuples(index=False, name=None)]


def _java_utf_bytes(text: str) -> bytes:
    """Java's modified UTF-8: NUL as C0 80, a supplementary character as its surrogate pair."""
    if any(ord(c) > 0xFFFF for c in text):
        units = text.encode("utf-16-be", errors="surrogatepass")
        text = "".join(chr(int.from_bytes(units[i:i + 2], "big")) for i in range(0, len(units), 2))
    return text.encode("utf-8", errors="surrogatepass").replace(b"\x00", b"\xc0\x80")


class _Writer:
    """Big-endian writes, as Java's ``DataOutputStream``."""

    def __init__(self) -> None:
        self.data = bytearray()

    def raw(self, data: bytes) -> None:
        self.data += data

    def i32(self, value: int) -> None:
        self.data += struct.pack(">i", value)

    def ints(self, values) -> None:
        for value in values:
            self.i32(int(value))

    def utf(self, text: str) -> None:
        encoded = _java_utf_bytes(str(text))
        if len(encoded) > 0xFFFF:
            raise ValueError(f"a name or value longer than Java's writeUTF takes: {text[:60]!r}...")
        self.data += struct.pack(">H", len(encoded)) + encoded

    def strings(self, texts) -> None:
        texts = list(texts)
        self.i32(len(texts))
        for text in texts:
            self.utf(text)

    def pairs(self, items) -> None:
        items = list(items)
        self.i32(len(items))
        for name, value in items:
            self.utf(name)
            self.utf(value)
