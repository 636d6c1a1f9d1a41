"""Incremental, bounded scan of a ClusterCockpit job archive: which jobs are new or changed
and ready.

The ClusterCockpit adapter of the shared tree scanner (:mod:`joulehouse.treescan`,
whose docstring tells how a tick stays bounded). The tree is
``<cluster>/<jobId // 1000>/<jobId % 1000, 3 digits>/<startTime>/``
(:mod:`joulehouse.clustercockpit.layout`); the listed folders are the
*blocks* ``<cluster>/<jobId // 1000>`` (up to 1,000 job ids each), whose
leaves are ``<jobId % 1000>/<startTime>``. Every tick stats the root, the
cluster folders and the blocks (one stat per 1,000 job ids); a block is
listed when its ctime changed (a new job id in it), by the rolling rescan,
or on its first walk.

What the cursor keeps per block is one time and a handful of fingerprints
(:class:`joulehouse.treescan.Watermark`): no name per job, so 1,000,000 jobs
in 1,000 blocks keep it at tens of KB. A listing stats each job folder and
its files (no content) and takes as candidates the jobs changed since the
block was last listed (less the clock margin) and not reported as they are.

A job is *ready* when ``meta.json`` and its data file both parse to the end
(:func:`joulehouse.clustercockpit.layout.is_complete`; a truncated JSON or
``.gz`` is not) and no file in it changed for ``quiet_s``; until then it is
pending and checked every tick. Completeness parses the files, so it is
asked of no more quiet candidates than ``max_jobs`` needs, and of a job found
incomplete only again once one of its files changed. A job quiet for
``incomplete_after_s`` (default :data:`INCOMPLETE_AFTER_S`, one hour) is ready
complete or not: a file left truncated (a copy that died) is then read, and
its block's read fails naming the file, instead of the job waiting unseen.
With ``ready_when_complete`` a job is ready at the first tick that finds it
complete, quiet or not: every file is parsed to its end, so a job written in
place by cc-backend or copied in by any tool is complete only once whole.

What changes a job after its report, and when a tick finds it:

* a new job folder (a new job id, in a new or an existing block): at the
  next tick (its block's ctime changed), whatever its start time;
* a job id reused with another start time (a new ``<startTime>`` folder in an
  existing ``<jobId % 1000>`` folder, which changes no block's ctime): at the
  next tick when its block is listed anyway (a new job id in it), else by
  the rolling rescan, within ``full_rescan_s``;
* ``data.json`` replaced by ``data.json.gz``, or ``meta.json`` rewritten (tags):
  these change only the job's folder (or files). A job reported within the
  last ``watch_s`` seconds is *watched*: stat'ed every tick and reported
  again at the next tick after its quiet period (with ``ready_when_complete``:
  at the first tick that finds it complete). At most ``max_watched`` are
  watched (the most recently reported); older jobs are found by the rolling
  rescan within ``full_rescan_s`` (never, with ``full_rescan_s=None``).

An archive root without ``version.txt`` (an unmounted file system's mount
point) skips the tick and keeps the state, with an InputError naming the
root in ``errors``; a cluster, block or job folder that vanished keeps its
records for :data:`joulehouse.treescan.FORGET_AFTER_S`, so one that comes
back is not handed out again (:mod:`joulehouse.treescan`).

A folder that is not a job folder's (names not digits, a second level not
three digits) is ignored, as are ``version.txt`` and ``cluster.json``. A
symlink leading outside the archive root is not followed: each listing that
meets it returns an InputError naming it in ``errors``, and the scan goes on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from joulehouse import treescan
from joulehouse.clustercockpit.layout import VERSION_FILE, JobRef, is_complete, subfolders
from joulehouse.errors import InputError

BLOCK_LEVEL = 2  # root "" = 0, cluster = 1, jobId // 1000 = 2; jobs are 2 levels below
WATCH_S = 3600.0  # how long a reported job is watched for a rewrite
MAX_WATCHED = 1000  # at most this many watched jobs (the most recently reported)
INCOMPLETE_AFTER_S = 3600.0  # a job quiet this long is handed out even if incomplete


class ScanState(treescan.TreeState):
    """The ClusterCockpit scan's cursor (:class:`joulehouse.treescan.TreeState`);
    ``blocks`` are its listed folders' records."""

    version = 1
    records = treescan.Watermark()

    @property
    def blocks(self) -> dict[str, treescan.Mark]:
        return self.folders


@dataclass(frozen=True)
class ReadyJob:
    """A complete job, quiet (or ``ready_when_complete``), new or changed since it was last
    reported."""

    ref: JobRef
    fingerprint: str  # layout.fingerprint(ref.path)


@dataclass(frozen=True)
class ScanResult:
    ready: list[ReadyJob]  # at most max_jobs, oldest change first
    pending: int  # seen, not ready yet (incomplete or within the quiet period), or deferred
    deferred: int  # of those, quiet ones left for later ticks by the cap
    unlisted: int  # block folders still to list (first walk of a big archive)
    errors: list[InputError]  # e.g. a symlink leading outside the root; the scan goes on
    state: ScanState
    rescanned: int = 0  # block folders re-listed by the rolling rescan this tick
    incomplete: int = 0  # of the pending, quiet ones found incomplete (unchanged since)
    unasked: int = 0  # of the pending, ones inside their quiet period left by the cap (not asked)


def _tree(root: Path) -> treescan.Tree:
    """The archive under ``root`` as the scanner sees it."""

    def children(path: Path, level: int, errors: list[InputError]) -> list[str]:
        names = subfolders(root, path, errors)
        return names if level == 0 else [name for name in names if name.isdigit()]

    def leaves(block: Path, errors: list[InputError]) -> list[str]:
        return [f"{level2}/{start}"
                for level2 in subfolders(root, block, errors)
                if level2.isdigit() and len(level2) == 3
                for start in subfolders(root, block / level2, errors) if start.isdigit()]

    return treescan.Tree(listed_level=BLOCK_LEVEL, children=children, leaves=leaves,
                         is_complete=is_complete, records=ScanState.records,
                         marker=VERSION_FILE)


def job_ref(root: Path, path_key: str) -> JobRef:
    """The job of the scanner's key ``cluster/level1/level2/startTime`` (a path under root)."""
    cluster, level1, level2, start = path_key.split("/")
    return JobRef(root, cluster, int(level1) * 1000 + int(level2), int(start))


def path_key(job_key: str) -> str:
    """The scanner's key of the job ``cluster/jobId/startTime`` (``JobRef.key``)."""
    cluster, job_id, start = job_key.split("/")
    return f"{cluster}/{int(job_id) // 1000}/{int(job_id) % 1000:03d}/{start}"


def scan(root: str | os.PathLike[str], state: ScanState, *, quiet_s: float, max_jobs: int,
         full_rescan_s: float | None = None, recheck: Mapping[str, str] = {},
         now: float | None = None, watch_s: float = WATCH_S,
         max_watched: int = MAX_WATCHED,
         incomplete_after_s: float | None = INCOMPLETE_AFTER_S,
         ready_when_complete: bool = False) -> ScanResult:
    """Scan the archive ``root`` from ``state``; returns ready jobs and the new state.

    ``state`` is not modified. ``full_rescan_s``: every block is re-listed
    once per this many seconds (None: never; 0: every tick, within the
    listing bound). ``recheck``: ``JobRef.key`` of jobs that failed downstream
    -> the fingerprint they were reported with; each is fingerprinted again
    every tick and reported again once changed and quiet. ``watch_s``,
    ``max_watched``: how long, and how many, reported jobs are watched for
    a rewrite (module docstring). ``incomplete_after_s``: a job quiet this long
    is ready even if incomplete (None: never). ``ready_when_complete``: a job
    inside its quiet period is ready once complete. ``now``: the clock (s), for tests.
    """
    root = Path(root)
    result = treescan.scan(_tree(root), root, state, quiet_s=quiet_s, cap=max_jobs,
                           full_rescan_s=full_rescan_s,
                           recheck={path_key(key): fp for key, fp in recheck.items()},
                           now=now, watch_s=watch_s, max_watched=max_watched,
                           incomplete_after_s=incomplete_after_s,
                           ready_when_complete=ready_when_complete)
    ready = [ReadyJob(job_ref(root, found.key), found.fingerprint) for found in result.ready]
    return ScanResult(ready, result.pending, result.deferred, result.unlisted, result.errors,
                      result.state, result.rescanned, result.incomplete, result.unasked)
