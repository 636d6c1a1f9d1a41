"""Where jobs live in a ClusterCockpit job archive, and which files are theirs.

``<root>/version.txt`` holds the archive version (1, 2 or 3);
``<root>/<cluster>/cluster.json`` describes a cluster; a job is the folder
``<cluster>/<jobId // 1000>/<jobId % 1000, three digits>/<startTime>/`` with
``meta.json`` and ``data.json.gz`` or ``data.json`` (the ``.gz`` is read
when both exist, as cc-backend does). A job is identified by (cluster,
jobId, startTime): the same jobId recurs with other start times.
Everything here lists folders and stats files; only :func:`is_complete`
reads content (it parses the files, for the few folders a sensor checks).
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import ijson

from joulehouse.digest import file_stats_digest
from joulehouse.errors import InputError

VERSION_FILE = "version.txt"
CLUSTER_FILE = "cluster.json"
META_FILE = "meta.json"
DATA_FILES = ("data.json.gz", "data.json")  # in the order cc-backend tries them


@dataclass(frozen=True)
class JobRef:
    """One job folder of an archive; ``key`` is ``cluster/jobId/startTime``."""

    root: Path
    cluster: str
    job_id: int
    start_time: int  # s since the epoch (UTC), the folder's name

    @cached_property
    def path(self) -> Path:
        """The job folder."""
        return job_folder(self.root, self.cluster, self.job_id, self.start_time)

    def check_inside(self, name: str | None = None) -> None:
        """Raise InputError if the job folder (or its file ``name``) leads outside the root.

        Costs one ``lstat`` per folder level below the root (and the file);
        the full resolution runs only where one of them is a symlink.
        """
        level1, level2 = str(self.job_id // 1000), f"{self.job_id % 1000:03d}"
        current = str(self.root)
        for part in (self.cluster, level1, level2, str(self.start_time), name):
            if part is None:
                break
            current = os.path.join(current, part)
            try:
                is_link = stat.S_ISLNK(os.lstat(current).st_mode)
            except FileNotFoundError:
                return
            if is_link:
                inside(self.root, Path(current))

    @property
    def key(self) -> str:
        """``cluster/jobId/startTime``: unique within an archive."""
        return f"{self.cluster}/{self.job_id}/{self.start_time}"

    @property
    def block(self) -> str:
        """``cluster/<jobId // 1000>``: the job-id block folder holding the job (at most
        1000 job ids, any start times)."""
        return block_of(self.cluster, self.job_id)

    @classmethod
    def from_key(cls, root: str | os.PathLike[str], key: str) -> JobRef:
        """The job of :attr:`key` ``cluster/jobId/startTime`` in the archive at ``root``."""
        cluster, job_id, start_time = split_job_key(key)
        return cls(Path(root), cluster, job_id, start_time)

    @property
    def meta_path(self) -> Path:
        return self.path / META_FILE

    def data_path(self) -> Path | None:
        """``data.json.gz`` if present, else ``data.json``, else None."""
        for name in DATA_FILES:
            candidate = self.path / name
            if candidate.is_file():
                return candidate
        return None

    @classmethod
    def from_path(cls, root: str | os.PathLike[str], folder: str | os.PathLike[str]) -> JobRef:
        """The job whose folder is ``folder`` (``cluster/level1/level2/startTime`` under root).

        The folder must lie inside ``root`` once symlinks are resolved, and its
        name must be a job folder's: InputError naming the folder otherwise.
        """
        root, folder = Path(root), Path(folder)
        parts = inside(root, folder).relative_to(root.resolve()).parts
        if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]) or len(parts[2]) != 3:
            raise InputError(folder, "not a job folder <cluster>/<jobId/1000>/<jobId%1000 "
                             "(3 digits)>/<startTime>")
        return cls(root, parts[0], int(parts[1]) * 1000 + int(parts[2]), int(parts[3]))


def split_job_key(key: str) -> tuple[str, int, int]:
    """A job key ``cluster/jobId/startTime`` (:attr:`JobRef.key`) as its cluster, job id and
    start time."""
    cluster, job_id, start_time = key.rsplit("/", 2)
    return cluster, int(job_id), int(start_time)


def block_of(cluster: str, job_id: int) -> str:
    """The job-id block ``cluster/<jobId // 1000>`` holding job ``job_id`` of ``cluster``."""
    return f"{cluster}/{job_id // 1000}"


def job_folder(root: str | os.PathLike[str], cluster: str, job_id: int,
               start_time: int) -> Path:
    """The folder of job ``job_id`` of ``cluster`` started at ``start_time`` (s)."""
    return Path(root) / cluster / str(job_id // 1000) / f"{job_id % 1000:03d}" / str(start_time)


def inside(root: Path, path: Path) -> Path:
    """``path`` resolved, if it lies inside ``root`` resolved; else InputError naming it.

    A symlink leading out of the archive is refused: the archive root bounds
    what a job may read.
    """
    resolved, base = path.resolve(), root.resolve()
    if resolved != base and base not in resolved.parents:
        raise InputError(path, f"leads outside the archive root {root} (to {resolved})")
    return resolved


#: What the folder ``n`` levels below an archive root is (:func:`archive_level`).
LEVELS = ("archive", "cluster", "jobId/1000", "jobId%1000", "job")


def archive_level(path: str | os.PathLike[str]) -> tuple[int, Path] | None:
    """``(n, root)`` when the folder ``path`` lies ``n`` levels (0-4, :data:`LEVELS`) below
    an archive root ``root``: the nearest folder up holding ``version.txt``, with
    the folder names between them fitting the tree (digits, three digits,
    digits); else None.

    Told by names and version.txt's presence, reading nothing; whether a
    level-4 folder is a complete job is the reader's concern.
    """
    folder = Path(path).resolve()
    if not folder.is_dir():
        return None
    for level, candidate in enumerate([folder, *folder.parents][:len(LEVELS)]):
        if (candidate / VERSION_FILE).is_file():
            names = folder.relative_to(candidate).parts[1:]
            fits = all(name.isdigit() for name in names) and (
                len(names) < 2 or len(names[1]) == 3)
            return (level, candidate) if fits else None
    return None


def clusters(root: str | os.PathLike[str]) -> list[str]:
    """Names of the cluster folders (every folder of the root), sorted.

    A cluster folder should hold ``cluster.json``; whether it does is the
    reader's concern, so that jobs of a cluster without one are still found.
    """
    root = Path(root)
    return subfolders(root, root)


def _folders(folder: Path) -> list[os.DirEntry]:
    """The subfolders of ``folder`` (symlinks to folders included), in name order."""
    try:
        with os.scandir(folder) as entries:
            return sorted((entry for entry in entries if entry.is_dir()), key=lambda e: e.name)
    except FileNotFoundError:
        return []


def subfolders(root: Path, folder: Path, errors: list[InputError] | None = None) -> list[str]:
    """Names of :func:`_folders` of ``folder`` less symlinks leading outside ``root``:
    their InputError is appended to ``errors`` or, without ``errors``, raised."""
    kept = []
    for entry in _folders(folder):
        try:
            if entry.is_symlink():
                inside(root, Path(entry.path))
        except InputError as err:
            if errors is None:
                raise
            errors.append(err)
            continue
        kept.append(entry.name)
    return kept


def _entered(root: Path, folder: Path, errors: list[InputError] | None) -> bool:
    """True when ``folder`` is a folder that does not lead outside ``root`` (else its
    InputError appended to ``errors`` or, without ``errors``, raised)."""
    if not folder.is_dir():
        return False
    try:
        inside(root, folder)
    except InputError as err:
        if errors is None:
            raise
        errors.append(err)
        return False
    return True


def find_jobs(root: str | os.PathLike[str], cluster: str | None = None, *,
              block: int | None = None,
              errors: list[InputError] | None = None) -> Iterator[JobRef]:
    """Every job folder of the archive (or of one cluster, or of one of its job-id blocks
    ``<cluster>/<block>``, block = jobId // 1000), in path order.

    Only folders whose names fit the tree (digits, three-digit second level)
    are jobs; others are ignored. A job folder that is a symlink is listed
    like the others: reading it (``JobRef.check_inside``) refuses one leading
    outside the root, as that job's error. A folder above a job leading
    outside is not entered (its jobs cannot be named without listing outside):
    its InputError is appended to ``errors`` and the listing goes on, or,
    without ``errors``, raised. Whether the files are complete is not checked
    here (see :func:`joulehouse.clustercockpit.readers.read_meta`).
    """
    root = Path(root)
    for name in [cluster] if cluster else subfolders(root, root, errors):
        level1s = subfolders(root, root / name, errors) if block is None else [
            str(block)] if _entered(root, root / name / str(block), errors) else []
        for level1 in level1s:
            if not level1.isdigit():
                continue
            for level2 in subfolders(root, root / name / level1, errors):
                if not (level2.isdigit() and len(level2) == 3):
                    continue
                for start in _folders(root / name / level1 / level2):
                    if start.name.isdigit():
                        yield JobRef(root, name, int(level1) * 1000 + int(level2),
                                     int(start.name))


def is_complete(folder: str | os.PathLike[str]) -> bool:
    """True when the job folder's meta.json and data file both parse to the end.

    cc-backend writes in place and deletes data.json before data.json.gz is
    complete, so a crash leaves partial files; this parses meta.json and
    streams the data file (gunzipping ``.gz``, whose end is checked) without
    keeping it: about 0.1 s for a 13 MB data.json. Run it on the few folders
    that are new or changed and quiet, not on the whole tree.
    """
    folder = Path(folder)
    try:
        json.loads((folder / META_FILE).read_bytes())
        data = next((folder / name for name in DATA_FILES if (folder / name).is_file()), None)
        if data is None:
            return False
        with gzip.open(data, "rb") if data.name.endswith(".gz") else open(data, "rb") as handle:
            for _ in ijson.basic_parse(handle):
                pass
    except (OSError, EOFError, zlib.error, ValueError, ijson.JSONError):
        return False  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
    return True


def fingerprint(folder: str | os.PathLike[str]) -> str:
    """Short hex digest of the job folder's file names, sizes and mtimes (ns).

    Changes when meta.json is rewritten (tags), data.json is replaced by
    data.json.gz, or any file is added or removed; reads no content.
    """
    with os.scandir(folder) as entries:
        files = sorted((e for e in entries if e.is_file()), key=lambda e: e.name)
        return file_stats_digest((entry.name, entry.stat()) for entry in files)


def cluster_fingerprint(root: str | os.PathLike[str], cluster: str) -> str:
    """Short hex digest of ``<root>/<cluster>/cluster.json``'s name, size and mtime (ns), ""
    when there is none: what the metric units and energy kinds a job is read with hang on,
    reading no content."""
    path = Path(root) / cluster / CLUSTER_FILE
    try:
        return file_stats_digest([(path.name, path.stat())]) if path.is_file() else ""
    except OSError:
        return ""
