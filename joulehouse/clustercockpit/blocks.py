"""A job-id block of an archive, read again only where its jobs changed: the unit of work
of the Dagster layer.

A block is the archive's own folder ``<cluster>/<jobId // 1000>``: at most
1000 job ids, each with any number of start times (a reused job id is
another job), so its size is bounded whatever the archive's. Its key is
``<cluster>/<jobId // 1000>`` (:attr:`~.layout.JobRef.block`). The tree is
the index: a block's jobs are listed from its folder alone
(:func:`~.layout.find_jobs` with ``block``, symlinks leading outside the
root refused), so no side index is kept and jobs landing out of start-time
order need nothing special.

:func:`read_block` reads each job of a block it has to once (meta.json and the
streamed data file): its ``cc_jobs`` rows, energy per host and per job and
metric, per-metric statistics and schema warnings; the tables of the jobs read
are schema-checked at once (:func:`~.measure.check_measurements`). Which jobs it
reads: given the fingerprints stored with the block (``known``: the frame
:data:`FILES`, :func:`stored_fingerprints`), only those whose
:func:`_fingerprints` differs (new, changed, or not stored); every listed job
when none are given (a block stored before fingerprints were kept, a whole
re-read), when a folder of the block could not be listed, or when its
cluster.json is missing or bad. A job's fingerprint is taken before its files are
read (a file rewritten during the read differs next time: read again) and digests
its folder's file names, sizes and mtimes, its cluster.json's, the archive
version, the resolved archive root and what else changes what is stored for it
(:func:`reader_version`: the reading code's own digest, ``max_missing``,
``check_schema``). A chmod or chown changes only a file's ctime, which is not in
the fingerprint: such a job is not read again (its content is the same). The same
folder scan gives the job's trial fingerprint (:attr:`BlockRead.trial_fingerprints`).
A job that cannot be read, or whose tables fail their schemas, is left out with
its InputError. :func:`keep_stored` then makes the frames to store: the jobs read,
plus the stored rows of the unchanged jobs and of those that failed this time (a
failed re-read loses nothing); a job no longer listed is dropped. They equal what
a read of every job gives, and so do the left-out records :func:`left_out_of`
derives from them (the stored rows of a job give the records its read gave).

Per run, a block still costs one stat pass (``scandir`` and one ``stat`` per file)
over each of its job folders, and reading its stored frames; on Lustre or NFS these
metadata operations per job dominate.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

import pandas as pd

from joulehouse.clustercockpit.conformance import SchemaWarning
from joulehouse.clustercockpit.energy import left_out
from joulehouse.clustercockpit.jobs import job_row, jobs_frame
from joulehouse.clustercockpit.layout import JobRef, cluster_fingerprint, find_jobs, fingerprint
from joulehouse.clustercockpit.measure import JobMeasurement, check_measurements, measure_job
from joulehouse.clustercockpit.readers import ClusterConfig, cluster_config, read_version
from joulehouse.clustercockpit.schemas import (
    HOST_ENERGY_SCHEMA,
    JOB_ENERGY_SCHEMA,
    METRIC_STATS_SCHEMA,
    empty_table,
)
from joulehouse.digest import contents_digest, digest_pairs
from joulehouse.errors import InputError
from joulehouse.leftout import LeftOut

#: The frames of a block, by name, with their schemas' names (``jobs``: cc_jobs rows).
FRAMES = ("jobs", "host_energy", "job_energy", "metric_stats")
#: The block's frame of what its stored jobs were read from, one row per job of ``jobs``
#: whose fingerprint is known: ``job``, ``fingerprint`` (:func:`_fingerprints`, taken
#: before the read) and ``violations`` (its schema violations when read), stored with
#: the other frames.
FILES = "files"
FILES_COLUMNS = ("job", "fingerprint", "violations")
#: A manual override of :func:`reader_version`: bump it when what reading a job stores
#: changes without a change of :data:`READER_SOURCES` (a new pandas or numpy, a fix in a
#: module not listed), so that every job of every block is read again by its block's next
#: run.
READER_VERSION = 1
#: The code that decides what is stored for a job (:func:`measure_job`, :func:`job_row`,
#: :func:`jobs_frame` and what they import that shapes the rows, :func:`keep_stored`),
#: files of the ``joulehouse`` package: any change of them (a docstring too) reads every
#: job again, once.
READER_SOURCES = (
    "clustercockpit/aggregate.py", "clustercockpit/blocks.py", "clustercockpit/conformance.py",
    "clustercockpit/energy.py", "clustercockpit/jobs.py", "clustercockpit/layout.py",
    "clustercockpit/measure.py", "clustercockpit/readers.py", "clustercockpit/schemas.py",
    "clustercockpit/units.py", "integrate.py", "timeutil.py", "validation.py")
#: The bundled JSON schemas the violations (:data:`FILES`) are checked against: the files
#: the package data of pyproject.toml installs (``<version>/<name>.json``), no other.
READER_DATA = "clustercockpit/jsonschemas"
READER_DATA_PATTERN = "*/*.json"


def _reader_bytes(path: Path) -> bytes:
    """The content of a reader file, line ends as LF (a checkout with CRLF digests the
    same); an InputError naming it when it is missing."""
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        raise InputError(path, "a source of the ClusterCockpit reader is missing: the "
                         "reader version (in every job's fingerprint) digests it; install "
                         "joulehouse with its .py sources (not bytecode alone)") from None
    return content.replace(b"\r\n", b"\n")


def reader_files(package: str | os.PathLike[str]) -> list[tuple[str, bytes]]:
    """``(name, content)`` of what :func:`reader_version` digests under the ``package``
    folder: :data:`READER_SOURCES` and the :data:`READER_DATA` files matching
    :data:`READER_DATA_PATTERN` (stray files there are not installed, so not digested)."""
    root = Path(package)
    data = root / READER_DATA
    return [*((name, _reader_bytes(root / name)) for name in READER_SOURCES),
            *((path.relative_to(data.parent).as_posix(), _reader_bytes(path))
              for path in sorted(data.glob(READER_DATA_PATTERN)) if path.is_file())]


@cache
def reader_version() -> str:
    """The version of what reading a job stores, computed once per process: a digest of
    :func:`reader_files` (:data:`READER_SOURCES`, the bundled JSON schemas) and
    :data:`READER_VERSION`. In every job's fingerprint, so that a change of the reading
    code reads every job of a block again at its next run (its stored rows would be the
    old code's), and reloads every job's trial. An install without the .py sources fails
    here, naming the missing file."""
    package = Path(str(resources.files("joulehouse")))
    return f"{READER_VERSION}-{contents_digest(reader_files(package))}"


def parse_block_key(key: str) -> tuple[str, int]:
    """(cluster, block) of a block key (:attr:`~.layout.JobRef.block` formats it); InputError naming the key when it is none (so only
    that partition fails)."""
    cluster, _, block = key.rpartition("/")
    if not cluster or "/" in cluster or not block.isdigit():
        raise InputError(key, "not a job-id block key <cluster>/<jobId // 1000>")
    return cluster, int(block)


@dataclass
class BlockRead:
    """What one read of a block gave: its frames (:data:`FRAMES`; the jobs read only),
    the measured jobs, their schema warnings, and what could not be read, with its
    error: jobs by job key, a folder that could not be listed or a bad cluster.json by
    its path. ``fingerprints``: job key -> :func:`_fingerprints` of every listed job
    (taken before its read) and ``trial_fingerprints``: its trial's (:func:`trial_fingerprint`,
    from the same folder scan); ``unchanged``: the listed jobs not read, their stored rows
    current; ``whole``: every listed job was read."""

    frames: dict[str, pd.DataFrame]
    measured: list[JobMeasurement]
    warnings: list[SchemaWarning]
    failed: dict[str, InputError] = field(default_factory=dict)
    listed: int = 0  # job folders found in the block
    unlisted: bool = False  # a folder of the block could not be listed (leads outside)
    fingerprints: dict[str, str] = field(default_factory=dict)
    unchanged: list[JobRef] = field(default_factory=list)
    whole: bool = True
    order: list[str] = field(default_factory=list)  # the listed jobs' keys, in path order
    config: ClusterConfig = field(default_factory=lambda: ClusterConfig("", {}))
    version: int = 0  # the archive's
    trial_fingerprints: dict[str, str] = field(default_factory=dict)

    @property
    def stored(self) -> int:
        """The listed jobs whose rows are current once stored: read, or unchanged."""
        return len(self.frames["jobs"]) + len(self.unchanged)

    def measure(self, ref: JobRef, max_missing: int) -> JobMeasurement:
        """Read ``ref``, a job of the block not read (:attr:`unchanged`), as it was read with
        the block's cluster.json (schemas not checked; its tables checked alone)."""
        return measure_job(ref, self.config, self.version, check_schema=False,
                           max_missing=max_missing)


@dataclass(frozen=True)
class ReadInputs:
    """What else than its files reading a job of a block depends on, digested once per
    block: ``job`` (:func:`read_inputs`) and ``trial`` (:func:`trial_inputs`)."""

    job: str
    trial: str


def trial_fingerprint(folder: str, inputs: str) -> str:
    """The fingerprint of a job's trial: its folder's (:func:`~.layout.fingerprint`) with
    ``inputs`` (:func:`trial_inputs`), so that a change of either reloads it."""
    return digest_pairs({"job": folder, "inputs": inputs})


def _fingerprints(ref: JobRef, inputs: ReadInputs) -> tuple[str, str] | None:
    """(the job's read fingerprint, :func:`trial_fingerprint`) of ``ref`` from one scan of
    its folder; None when it cannot be listed or leads outside the root."""
    try:
        ref.check_inside()
        folder = fingerprint(ref.path)
    except (InputError, OSError):
        return None
    return (digest_pairs({"files": folder, "inputs": inputs.job}),
            trial_fingerprint(folder, inputs.trial))


def read_inputs(root: str | os.PathLike[str], cluster: str, version: int, *,
                check_schema: bool, max_missing: int, config: str) -> str:
    """The digest of what else reading a job of ``cluster`` depends on: its cluster.json
    (``config``: its name, size and mtime, :func:`~.layout.cluster_fingerprint`, taken
    before it is read), the archive version, the resolved
    archive root, :func:`reader_version` and the settings that change what is stored
    (``max_missing``: the energies; ``check_schema``: the violations kept in :data:`FILES`)."""
    return digest_pairs({
        "cluster.json": config,
        "archive_version": str(version), "root": str(Path(root).resolve()),
        "reader": reader_version(), "max_missing": str(max_missing),
        "check_schema": str(check_schema)})


def trial_inputs(config: str, max_missing: int) -> str:
    """The digest of what else a job's trial depends on: its cluster.json (``config``: name,
    size, mtime; the metric units and kinds), ``max_missing`` (its energies) and
    :func:`reader_version`."""
    return digest_pairs({"cluster.json": config, "max_missing": str(max_missing),
                         "reader": reader_version()})


def stored_fingerprints(stored: dict[str, pd.DataFrame] | None) -> dict[str, str] | None:
    """Job key -> fingerprint of the stored jobs of a block (its frame :data:`FILES`, for
    the jobs its ``jobs`` frame holds); None when nothing is stored, or stored before the
    fingerprints were kept (no :data:`FILES`): then the block is read whole."""
    if not stored or stored.get(FILES) is None:
        return None
    files = stored[FILES]
    files = files[files["job"].isin(set(stored["jobs"]["job"]))]
    return dict(zip(files["job"], files["fingerprint"], strict=True))


def read_block(root: str | os.PathLike[str], key: str, *, check_schema: bool = True,
               max_missing: int = 1, known: dict[str, str] | None = None,
               validate_schemas: bool | None = None) -> BlockRead:
    """Read the jobs of block ``key`` of the archive at ``root`` whose
    :func:`_fingerprints` is not ``known`` (job key -> the fingerprint stored with the
    block: :func:`stored_fingerprints`), each once; every job when ``known`` is None, a
    folder of the block could not be listed, or its cluster.json is missing or bad.
    ``validate_schemas`` (default ``check_schema``): whether the jobs read are validated
    against the JSON schemas; the fingerprints are taken with ``check_schema`` whatever it
    is, so that a read for the trials alone (not stored: no violations needed) tells the
    same jobs unchanged. The fingerprints of a read with ``validate_schemas`` not
    ``check_schema`` must not be stored.

    Raises InputError when the archive itself cannot be read (version.txt) or
    the block folder does not exist. A missing or bad cluster.json is one
    failure (key: the file) and the jobs are still read with the known power
    metric names, as :func:`~.readers.each_job` does.
    """
    root = Path(root)
    cluster, block = parse_block_key(key)
    version = read_version(root)
    folder = root / cluster / str(block)
    if not folder.is_dir():
        raise InputError(folder, "no such job-id block folder in the archive")
    listing: list[InputError] = []
    refs = list(find_jobs(root, cluster, block=block, errors=listing))
    failed = {err.path: err for err in listing}
    config_fingerprint = cluster_fingerprint(root, cluster)  # before the read, as the jobs'
    config, config_error = cluster_config(root, cluster)
    inputs = ReadInputs(read_inputs(root, cluster, version, check_schema=check_schema,
                                    max_missing=max_missing, config=config_fingerprint),
                        trial_inputs(config_fingerprint, max_missing))
    both = {ref.key: found for ref in refs if (found := _fingerprints(ref, inputs)) is not None}
    fingerprints = {job: pair[0] for job, pair in both.items()}
    whole = known is None or bool(listing) or config_error is not None
    unchanged = [] if whole else [
        ref for ref in refs if ref.key in fingerprints and known.get(ref.key) == fingerprints[
            ref.key]]
    skipped = {ref.key for ref in unchanged}
    read = []
    for ref in refs:
        if ref.key in skipped:
            continue
        try:
            read.append(measure_job(
                ref, config, version, max_missing=max_missing, check=False,
                check_schema=check_schema if validate_schemas is None else validate_schemas))
        except InputError as err:
            failed[ref.key] = err
    measured, bad = check_measurements(read)  # the tables of the jobs read checked at once
    failed |= {m.ref.key: err for m, err in bad}
    if config_error is not None:
        failed[config_error.path] = config_error
    warnings = [warning for m in measured for warning in m.warnings]
    rows = [job_row(m.ref, m.meta, config, version) for m in measured]
    frames = {"jobs": jobs_frame(rows, version),
              "host_energy": _concat([m.host_energy for m in measured], HOST_ENERGY_SCHEMA),
              "job_energy": _concat([m.job_energy for m in measured], JOB_ENERGY_SCHEMA),
              "metric_stats": _concat([m.stats for m in measured], METRIC_STATS_SCHEMA)}
    return BlockRead(frames, measured, warnings, failed, len(refs), bool(listing),
                     fingerprints, unchanged, whole, [ref.key for ref in refs], config,
                     version, {job: pair[1] for job, pair in both.items()})


def _concat(parts: list[pd.DataFrame], schema) -> pd.DataFrame:
    parts = [part for part in parts if len(part)]
    return pd.concat(parts, ignore_index=True) if parts else empty_table(schema)


def kept_jobs(read: BlockRead, stored: dict[str, pd.DataFrame] | None) -> set[str]:
    """The keys of the stored jobs that :func:`keep_stored` keeps: not read this time, and
    unchanged, or failed this time (or in a folder that could not be listed)."""
    if not stored:
        return set()
    read_jobs = set(read.frames["jobs"]["job"])
    unchanged = {ref.key for ref in read.unchanged}
    return {job for job in set(stored["jobs"]["job"]) - read_jobs
            if read.unlisted or job in read.failed or job in unchanged}


def files_frame(rows: list[tuple[str, str, int]]) -> pd.DataFrame:
    """The frame :data:`FILES` of ``rows`` (job, fingerprint, violations)."""
    frame = pd.DataFrame(rows, columns=list(FILES_COLUMNS))
    return frame.astype({"job": object, "fingerprint": object, "violations": "int64"})


def keep_stored(read: BlockRead, stored: dict[str, pd.DataFrame] | None) -> dict[str, pd.DataFrame]:
    """The frames to store for the block (:data:`FRAMES` and :data:`FILES`): those read,
    plus the stored rows of every unchanged job and of every job that failed this time (a
    failed re-read loses nothing), in the order of the block's listing (path order: by
    the folders' names, ``<jobId % 1000>`` zero-padded then start time, which is not the
    job keys' string order: job 5 sorts before 10 and 100 there, after them here), so that
    they equal what reading every job gives. When a folder of the
    block could not be listed, every stored job not read this time is kept (which jobs it
    holds is unknown), after the listed ones. :data:`FILES` holds each stored job's
    fingerprint: taken before this read for a job read, the stored one for a job kept."""
    kept = kept_jobs(read, stored)
    violations: dict[str, int] = {}
    for warning in read.warnings:
        violations[warning.job] = violations.get(warning.job, 0) + 1
    files = [(job, read.fingerprints[job], violations.get(job, 0))
             for job in read.frames["jobs"]["job"] if job in read.fingerprints]
    if not kept:
        return {**read.frames, FILES: files_frame(files)}
    rank = {job: place for place, job in enumerate(
        [*read.order, *sorted(kept - set(read.order))])}
    merged = {}
    for name in FRAMES:
        old = stored.get(name)
        rows = old[old["job"].isin(kept)] if old is not None and len(old) else None
        merged[name] = read.frames[name] if rows is None or rows.empty else _in_order(
            pd.concat([df for df in (read.frames[name], rows) if len(df)], ignore_index=True),
            rank)
    old_files = stored.get(FILES)
    if old_files is not None:
        files += old_files[old_files["job"].isin(kept)][list(FILES_COLUMNS)].itertuples(
            index=False, name=None)
    merged[FILES] = _in_order(files_frame(files), rank)
    return merged


def unchanged_violations(read: BlockRead, frames: dict[str, pd.DataFrame]) -> dict[str, int]:
    """Job key -> the schema violations it had when read, for each job of the block not
    read this time (unchanged) that had any (``frames``: :func:`keep_stored`'s)."""
    files = frames[FILES]
    unchanged = files[files["job"].isin({ref.key for ref in read.unchanged})
                      & (files["violations"] > 0)]
    return dict(zip(unchanged["job"], unchanged["violations"].astype(int), strict=True))


def _in_order(frame: pd.DataFrame, rank: dict[str, int]) -> pd.DataFrame:
    """``frame``'s rows by their job's ``rank`` (each job's rows in their own order)."""
    return frame.sort_values("job", key=lambda jobs: jobs.map(rank), kind="stable",
                             ignore_index=True)


def left_out_of(frames: dict[str, pd.DataFrame], root: str | os.PathLike[str]
                ) -> list[LeftOut]:
    """What the jobs of a block's frames (:func:`keep_stored`'s, or as stored) give no
    ``energy_facts`` row of, job by job in the frames' order: :func:`.energy.left_out` of
    each job's ``host_energy`` and ``job_energy`` rows, its input the job folder in the
    archive at ``root``; the records a read of those jobs gives
    (:meth:`~.measure.JobMeasurement.left_out`), whether they were read in this run or
    their rows stored before (written with their fingerprints, so these never miss)."""
    energy = frames["job_energy"]
    if energy.empty:
        return []
    partial = energy[(energy["gap_count"] != 0) | energy["energy_j"].isna()]
    if partial.empty:
        return []
    hosts = frames["host_energy"]
    hosts = hosts[hosts["job"].isin(set(partial["job"]))]
    per_host = dict(iter(hosts.groupby("job", sort=False)))
    return [record for job, rows in partial.groupby("job", sort=False)
            for record in left_out(per_host.get(job, hosts.iloc[:0]), rows,
                                   str(JobRef.from_key(root, job).path))]


def files_digest(frames: dict[str, pd.DataFrame]) -> str:
    """A digest of the frame :data:`FILES` of ``frames`` (its jobs, their fingerprints and
    violations, in order): what a block stored holds, as its fingerprints tell it."""
    files = frames[FILES]
    return contents_digest([("files", "\n".join(
        f"{job}\0{found}\0{count}" for job, found, count in files[list(FILES_COLUMNS)]
        .itertuples(index=False, name=None)).encode())])


def unchanged_block(read: BlockRead, stored: dict[str, pd.DataFrame] | None) -> bool:
    """Whether the read changed nothing of what is stored for the block: no job read, none
    failed, every stored job listed and unchanged (none removed), the fingerprints stored."""
    return (stored is not None and FILES in stored and not read.measured and not read.failed
            and not read.whole and set(stored["jobs"]["job"]) == {
                ref.key for ref in read.unchanged})
