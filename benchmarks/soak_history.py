"""The soak's seeded history, brought in once and kept (issue 27).

Bringing 100,000 jobs, 10,000 reports and 10,000 repetitions through the stack takes long,
so a history (``soak_landers.History``) is brought in once, by the stack itself (its
sensors and runs, as any landing), and kept under :data:`KEPT` ``/<name>/``:

- ``data.img``: an ext4 file system holding the data folders and the warehouse as the
  stack left them. A landing sensor's cursor names its folders by path and device and
  tells what it handed out by ctime, which any copy of the files renews (every entry would
  be handed out again); a copy of the file system's image keeps them, mounted at the same
  path (:data:`MOUNT`) through the same loop device (:data:`LOOP_MINOR`).
- ``dagster.dump``, ``taudb.dump``: the instance's and TAUdb's databases (``pg_dump -Fc``),
  taken with the daemon stopped, no run in flight and every sensor off.
- ``history.json``: the history's counts and days, when and by which commit it was made,
  where its intensity and tariff files end, how long it took to bring in and in how many
  runs.

A history takes hours to bring in on a small machine, so a run brings it in for a time
limit only: then it quiesces and dumps as above, and keeps ``data.img.part`` and
:data:`PROGRESS` beside the dumps. The next run mounts that image, restores the dumps and
goes on (its intensity and tariff files from where the last ones end), until the history
is complete. An image left without a progress record (a run killed) is made anew.

The mount and unmount helpers (:func:`run_command`, :func:`unmount`) serve the soak's
file-system faults too. A run mounts a copy of the image, restores the databases into its own throwaway PostgreSQL
before the stack starts, and lands on top. Kept histories are not migrated: after a change
to what the stack stores, delete ``benchmarks/.data/soak-history``. Needs root (``losetup``,
``mount``) and PostgreSQL's ``pg_dump`` and ``pg_restore``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import pandas as pd
from postgres_server import PG_BIN, PostgresServer
from soak_landers import History, utc_now

from tests.e2e.stack import DataFolders, Stack, wait_for

PROJECT = Path(__file__).resolve().parent.parent
KEPT = PROJECT / "benchmarks" / ".data" / "soak-history"
#: Where the data folders and the warehouse are, at the history's making and at every run.
MOUNT = Path("/tmp/joulehouse-soak-history")
#: The loop device's minor number: the file system's ``st_dev`` the cursors name.
LOOP_MINOR = 117
LOOP = Path(f"/dev/loop{LOOP_MINOR}")
DATABASES = ("dagster", "taudb")
#: A partial bring-in's record beside its image (``data.img.part``) and dumps: how long it
#: has taken, in how many runs, where its intensity and tariff files end.
PROGRESS = "progress.json"
#: The image's size (sparse: only what is written takes room) and inode count (a job is
#: a folder and two files).
IMAGE_GB, IMAGE_INODES = 64, 4_000_000
#: A bound: how long the runs in flight may take to end before the databases are dumped
#: (a bring-in stopped at its time limit may have a run of thousands of entries in flight:
#: one GPU run of a few thousand repetitions took over 20 minutes on 2 CPUs).
QUIESCE_TIMEOUT_S = 3600.0
IN_FLIGHT = "('QUEUED', 'NOT_STARTED', 'STARTING', 'STARTED', 'CANCELING')"
RUNNING = "('STARTING', 'STARTED', 'CANCELING')"


def folders() -> DataFolders:
    """The stack's data folders in the mounted history."""
    return DataFolders(**{**vars(DataFolders.under(MOUNT / "data")),
                          "intensity": MOUNT / "data" / "intensity",
                          "tariffs": MOUNT / "data" / "tariffs"})


def warehouse() -> Path:
    return MOUNT / "warehouse"


def kept(history: History) -> Path:
    """Where ``history`` is kept."""
    return KEPT / (f"cc{history.jobs}-geopm{history.reports}-gpu{history.repetitions}"
                   f"-days{history.days}")


def run_command(*command: str | os.PathLike[str]) -> None:
    """``command`` run; raises with its error output when it fails."""
    done = subprocess.run([str(part) for part in command], check=False, capture_output=True,
                          text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(map(str, command))}: exit {done.returncode}: "
                           f"{done.stderr.strip()}")


def unmount(path: Path) -> None:
    """Unmount ``path``; lazily if it is busy (a process reading it), so it is never left."""
    if subprocess.run(["umount", str(path)], check=False, capture_output=True).returncode:
        run_command("umount", "-l", path)


@contextmanager
def mounted(image: Path) -> Iterator[None]:
    """``image`` mounted at :data:`MOUNT` through :data:`LOOP`; unmounted on the way out
    (lazily if it is busy, so it is never left). Refuses when the mount point or the loop
    device is in use (another run, or one killed before it could clean up: ``umount`` and
    ``losetup -d`` them)."""
    if not LOOP.exists():
        run_command("mknod", LOOP, "b", "7", str(LOOP_MINOR))
    MOUNT.mkdir(exist_ok=True)
    if os.path.ismount(MOUNT):
        raise RuntimeError(f"{MOUNT} is mounted already: another soak, or a leftover")
    run_command("losetup", LOOP, image)
    try:
        run_command("mount", LOOP, MOUNT)
        try:
            yield
        finally:
            unmount(MOUNT)
    finally:
        run_command("losetup", "-d", LOOP)


def dump(stack: Stack, into: Path) -> None:
    """The stack's two databases into ``into/<name>.dump``, each written beside it first
    and both moved into place once both are whole (a run killed meanwhile leaves the last
    pair as it was)."""
    for name in DATABASES:
        run_command(PG_BIN / "pg_dump", "-Fc", "-f", into / f"{name}.dump.part",
             stack.postgres.url(name))
    for name in DATABASES:
        os.replace(into / f"{name}.dump.part", into / f"{name}.dump")


def restorer(folder: Path) -> Callable[[PostgresServer], None]:
    """What fills a new server's empty databases with those kept in ``folder``."""

    def restore(postgres: PostgresServer) -> None:
        for name in DATABASES:
            run_command(PG_BIN / "pg_restore", "--no-owner", "-d", postgres.url(name),
                 folder / f"{name}.dump")

    return restore


def quiesce(stack: Stack, stop_sensors: Callable[[Stack], None]) -> None:
    """Every sensor off, no run in flight, then the daemon stopped, then none running
    again (a retry the daemon launched between the two, which its code server still
    runs): nothing changes the stores while they are kept, and no run is kept STARTED
    without a process (it would hold its pool and its sensor for good once restored). A
    run kept queued is launched by the next daemon."""
    stop_sensors(stack)
    wait_for("the runs in flight to end",
             lambda: not stack.sql(f"SELECT 1 FROM runs WHERE status IN {IN_FLIGHT} LIMIT 1"),
             QUIESCE_TIMEOUT_S)
    stack.kill("daemon")
    wait_for("the runs launched meanwhile to end",
             lambda: not stack.sql(f"SELECT 1 FROM runs WHERE status IN {RUNNING} LIMIT 1"),
             QUIESCE_TIMEOUT_S)


class HistoryIncomplete(RuntimeError):
    """A bring-in stopped at its time limit: its progress kept, to be continued."""


def make(history: History, bring_in: Callable[[Path, dict | None], dict]) -> Path:
    """Keep ``history`` (once), over as many runs as it takes: a new image mounted and the
    history written into it, or a partial one (:data:`PROGRESS`) mounted; then
    ``bring_in(folder, progress)`` run (the stack started over :func:`folders` and
    :func:`warehouse`, the databases of ``progress`` restored when given, the history
    brought in until done or the run's time limit, :func:`quiesce`, :func:`dump` into
    ``folder``; returns what the record keeps of it: ``complete``, ``covers_to`` (where the
    intensity and tariff files end) among it). Complete: the image and the record moved
    into place; the folder returned. Not: the progress kept beside the image, and
    :class:`HistoryIncomplete` raised (the same command continues it). An image left
    without a progress record (a run killed) is made anew."""
    folder, record = kept(history), kept(history) / "history.json"
    if (folder / "data.img").exists() and record.with_suffix(".json.part").exists():
        record.with_suffix(".json.part").rename(record)  # a run killed as it finished
    if record.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    image, progress_file = folder / "data.img.part", folder / PROGRESS
    progress = (json.loads(progress_file.read_text())
                if image.exists() and progress_file.exists() else None)
    # from here the image moves on from its record: a run killed before it keeps a new one
    # leaves none, and the next run makes the image anew
    progress_file.unlink(missing_ok=True)
    if progress is None:
        image.unlink(missing_ok=True)
        with image.open("wb") as file:
            file.truncate(IMAGE_GB * 2**30)
        run_command("mkfs.ext4", "-q", "-F", "-N", str(IMAGE_INODES), image)
    started = time.monotonic()
    with mounted(image):
        if progress is None:
            data = folders()
            for path in vars(data).values():
                path.mkdir(parents=True)
            history.write(data)
            progress = {"written_s": round(time.monotonic() - started, 1),
                        "brought_in_s": 0.0, "runs": []}
        begun = time.monotonic()
        brought_in = bring_in(folder, progress if progress["runs"] else None)
    progress = {**progress, "covers_to": brought_in["covers_to"],
                "runs": [*progress["runs"], {**brought_in, "commit": _commit(),
                                             "ended": utc_now().isoformat()}],
                "brought_in_s": round(progress["brought_in_s"] + time.monotonic() - begun, 1)}
    if not brought_in["complete"]:
        _write_json(progress_file, progress)
        raise HistoryIncomplete(
            f"the seeded history was not all accounted in this run ({brought_in}); its "
            f"progress is kept in {folder}: the same command continues it")
    _write_json(record.with_suffix(".json.part"),
                {**asdict(history), "made": utc_now().isoformat(), **progress})
    image.rename(folder / "data.img")
    record.with_suffix(".json.part").rename(record)
    return folder


def _write_json(path: Path, record: dict) -> None:
    """``record`` into ``path`` whole (written beside it, then moved into place)."""
    part = path.with_name(path.name + ".tmp")
    part.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(part, path)


@contextmanager
def copy_mounted(folder: Path, out: Path, copy_warehouse: bool = True) -> Iterator[dict]:
    """A copy of the history kept in ``folder`` (``out/history.img``, sparse) mounted at
    :data:`MOUNT`; yields its record. The warehouse is copied to ``out/warehouse`` on the
    way out (where ``joulehouse sql`` reads it afterwards) if ``copy_warehouse`` (not when
    the run leaves its own there: the soak's ``warehouse-full``), and the copy deleted."""
    image = out / "history.img"
    run_command("cp", "--sparse=always", folder / "data.img", image)
    try:
        with mounted(image):
            yield json.loads((folder / "history.json").read_text())
            if copy_warehouse:
                shutil.copytree(warehouse(), out / "warehouse")
    finally:
        image.unlink()


def covers_to(record: dict) -> pd.Timestamp:
    """Where the kept history's intensity and tariff files end."""
    return pd.Timestamp(record["covers_to"])


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(PROJECT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip()
