"""The ClusterCockpit source: job archive root(s), and how to scan and read them.

A partition key is a job-id block ``<cluster>/<jobId // 1000>``
(``joulehouse.clustercockpit.blocks``): a cluster name must therefore be
unique across the configured archives, and :meth:`ClusterCockpitArchive.resolve`
refuses a key whose cluster two archives hold.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from joulehouse.clustercockpit.blocks import parse_block_key
from joulehouse.clustercockpit.scan import INCOMPLETE_AFTER_S
from joulehouse.errors import InputError
from resources.gpu import SETTINGS_ENV, settings_from_env
from resources.landing import Folders, folders_from_env

ARCHIVE_ENV = "JOULEHOUSE_CC_ARCHIVE"
#: Environment variables of the settings: field -> variable (the quiet period and the
#: rescan period are shared with the other sources).
CC_SETTINGS_ENV = {
    "quiet_period_s": SETTINGS_ENV["quiet_period_s"],
    "full_rescan_s": SETTINGS_ENV["full_rescan_s"],
    "max_jobs_per_tick": "JOULEHOUSE_CC_MAX_JOBS_PER_TICK",
    "incomplete_after_s": "JOULEHOUSE_CC_INCOMPLETE_AFTER_S",
    "max_missing": "JOULEHOUSE_CC_MAX_MISSING",
    "check_schema": "JOULEHOUSE_CC_CHECK_SCHEMA",
    "ready_when_complete": "JOULEHOUSE_CC_READY_WHEN_COMPLETE",
}


class ClusterCockpitArchive(dg.ConfigurableResource):
    """ClusterCockpit job archives (cc-backend's ``var/job-archive``), scanned for jobs."""

    archive_roots: list[str] = Field(description="Archive roots (folders holding version.txt).")
    quiet_period_s: float = Field(
        default=60.0, description="A job folder is ready once no file in it changed for this "
                                  "long and its files parse to the end (with "
                                  "ready_when_complete: once they parse to the end).")
    full_rescan_s: float | None = Field(
        default=3600.0,
        description="Seconds in which the rolling rescan re-lists every block folder once, to "
                    "find meta.json rewritten in place (tags) (None: never; 0: every tick).")
    max_jobs_per_tick: int = Field(
        default=20_000, ge=1,
        description="Most ready jobs one sensor tick hands out; below it, a tick hands out as "
                    "many as fill its time budget (sensors/tick_budget.py); the rest wait for "
                    "the next ticks.")
    incomplete_after_s: float = Field(
        default=INCOMPLETE_AFTER_S, gt=0,
        description="A job whose files stay unchanged this long is handed out even if one "
                    "does not parse to the end (a truncated data.json.gz), so that its block's "
                    "read fails naming the file instead of the job waiting unseen.")
    max_missing: int = Field(
        default=1, ge=0,
        description="Null samples in a row still bridged linearly when integrating power; "
                    "longer gaps are reported (gap_count, gap_s), not bridged.")
    ready_when_complete: bool = Field(
        default=False,
        description="Hand out a job at the first tick that finds its files parse to the end "
                    "(data.json.gz's trailer checked), without waiting for the quiet period. "
                    "Safe with any writer: every file of a job folder is parsed to its end, so "
                    "a job written in place by cc-backend or copied in by any tool is complete "
                    "only once whole.")
    check_schema: bool = Field(
        default=True, description="Validate meta.json and data.json against the archive "
                                  "version's JSON schemas (warnings, never failures).")

    @classmethod
    def from_env(cls, default_root: Folders, **settings) -> ClusterCockpitArchive:
        """Archive roots from ``$JOULEHOUSE_CC_ARCHIVE`` (separated by ``os.pathsep``), else
        ``default_root``; the settings from the variables of :data:`CC_SETTINGS_ENV` where
        set (``JOULEHOUSE_FULL_RESCAN_S`` may be ``none``), else ``settings``."""
        return cls(archive_roots=folders_from_env(ARCHIVE_ENV, default_root),
                   **{**settings, **settings_from_env(CC_SETTINGS_ENV)})

    def roots(self) -> list[Path]:
        """The archive roots, resolved."""
        return [Path(root).resolve() for root in self.archive_roots]

    def resolve(self, partition_key: str) -> Path:
        """The archive root holding block ``partition_key`` (``<cluster>/<block>``): the one
        root with that cluster folder. InputError naming the key when it is malformed or when
        none or two roots have the cluster (e.g. its folder was removed), so only that
        partition fails."""
        cluster, _ = parse_block_key(partition_key)
        roots = [root for root in self.roots() if (root / cluster).is_dir()]
        if len(roots) != 1:
            found = ", ".join(map(str, roots)) or "none of " + ", ".join(self.archive_roots)
            raise InputError(partition_key, f"cluster {cluster!r} must be in exactly one "
                                            f"archive root, found in {found}")
        return roots[0]
