"""The soak's landers: each source's entries written the way its real tool writes them, at a
rate, a few of them bad on purpose (``benchmarks/soak.py``).

Every lander writes into the stack's data folders (``tests/e2e/stack.py``,
``DataFolders.empty``) and returns, per entry, a :class:`Landed`: where it is, the
``energy_facts`` entity it must become (or ``""`` where it becomes none), whether it is
expected to load (``ok``) or fail alone (``bad``), when its last byte landed, and its exact
energy (J) where the generator knows it. Which entries are bad is fixed by their index:
entry ``i`` of a source is bad when ``i % period == 1`` (``period`` = round(1 / the bad
fraction)), so even a short run has one of each source's bad kinds.

- ClusterCockpit (``clustercockpit``): a job folder of the cluster ``soak``, meta.json then
  data.json.gz (``joulehouse.clustercockpit.generator.write_job``), started a job's length
  before now; bad: a job whose power is negative.
- GEOPM (``geopm``): the bundled one-host legacy report, its start time now and its host
  renamed per report, written at once as geopm does when the job ends; bad: a package
  energy ``1802,26``.
- GPU (``gpu-benchmark``): one repetition by ``joulehouse collect`` with the tests' fake
  NVML measuring ``sleep``, each run by the lander's one collector process
  (``tests/collect/serve_collector.py``); bad: the collected ``gpu-power.csv`` with a
  power that is no number.
- PowerAPI (``powerapi``): streams that keep growing, one report a second each, flushed
  every ``flush_s``: even streams PowerReport JSON lines (``power-<i>.jsonl``, a constant
  power), odd ones hwpc-sensor CSV (``hwpc-<i>/rapl.csv``, a constant RAPL energy per
  tick); one landed row per flush. Bad: a separate small JSON-lines file with a negative
  power on line 3.
- TAU (``tau``): a copy of the bundled profile set (no energy: its entity is ``""``);
  bad: a profile file cut in its header.
- Intensity and tariffs (``intensity``, ``tariffs``): a new Electricity Maps file of zone
  DE covering the run's days, and a new tariff file of the site ``hpc-centre`` covering
  them; never bad.

:class:`History` writes a seeded history (jobs, reports, repetitions spread over days
before today) before the stack starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, ClassVar

import pandas as pd
import psutil

from definitions import EXAMPLE_GEOPM_REPORTS, EXAMPLE_TAU_PROFILES
from joulehouse.accounting.generator import electricity_maps_frame, write_csv, write_tariff
from joulehouse.clustercockpit.generator import (
    JobSpec,
    JobTruth,
    write_archive_files,
    write_job,
)
from joulehouse.clustercockpit.layout import job_folder
from joulehouse.gpu.generator import RepetitionSpec, write_repetition

PROJECT = Path(__file__).resolve().parent.parent
SERVE_COLLECTOR = PROJECT / "tests" / "collect" / "serve_collector.py"
CLUSTER = "soak"
#: The first job id: far from the examples' and the seeded history's.
FIRST_JOB_ID = 7_000_000
GEOPM_EXAMPLE = EXAMPLE_GEOPM_REPORTS / "geopmbench_1host.legacy.report"
GEOPM_HOST = "mcfly13"
GEOPM_START = "Start Time: Wed Apr 01 09:00:15 2020"
GEOPM_BAD = ("package-energy (joules): 1802.26", "package-energy (joules): 1802,26")
#: The PowerAPI streams' constant power (W) and RAPL energy per one-second tick (J).
STREAM_POWER_W = 100.0
STREAM_RAPL_J = 50.0
RAPL_UNIT = 2.0 ** -32  # J per count of RAPL_ENERGY_PKG in hwpc-sensor's reports


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Landed:
    """One landed entry and what became of it (a row of ``landed.csv``)."""

    source: str
    entry: str
    entity: str
    expected: str  # "ok" or "bad"
    landed_at: datetime
    truth_j: float | None = None
    #: PowerAPI: the flush's last report (UTC) the entity's facts must reach.
    reaches: datetime | None = None
    in_facts_at: datetime | None = None
    in_accounting_at: datetime | None = None


def is_bad(index: int, bad_fraction: float) -> bool:
    """Whether entry ``index`` of a source is a bad one (see the module)."""
    return bad_fraction > 0 and index % max(2, round(1 / bad_fraction)) == 1


class Lander:
    """A source's lander: ``land()`` writes its next entry (or flush) at ``rate_per_s``."""

    source = ""

    def __init__(self, folder: Path, rate_per_s: float, bad_fraction: float) -> None:
        self.folder, self.rate_per_s, self.bad_fraction = folder, rate_per_s, bad_fraction
        #: Where the files are written: ``folder``, or another view of the same folder
        #: while the stack's view of it is covered (the soak's ``landing-unmounted``).
        self.writes_to = folder
        self.count = 0

    def land(self) -> list[Landed]:
        bad = is_bad(self.count, self.bad_fraction)
        landed = self.write(self.count, bad)
        self.count += 1
        return landed

    def write(self, index: int, bad: bool) -> list[Landed]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what it holds once the landing ends (the GPU lander's process)."""


class ClusterCockpitLander(Lander):
    source = "clustercockpit"
    SAMPLES, STEP_S = 11, 60  # ten-minute jobs, one sample a minute

    def __init__(self, folder: Path, rate_per_s: float, bad_fraction: float) -> None:
        super().__init__(folder, rate_per_s, bad_fraction)
        write_archive_files(folder, [CLUSTER])

    def write(self, index: int, bad: bool) -> list[Landed]:
        start = int(time.time()) - (self.SAMPLES - 1) * self.STEP_S
        spec, truth = self.write_job(FIRST_JOB_ID + index, start, index, bad)
        folder = job_folder(self.folder, CLUSTER, spec.job_id, start)
        return [Landed(self.source, str(folder), truth.key,
                       "bad" if bad else "ok", utc_now(), None if bad else truth.energy_j)]

    def write_job(self, job_id: int, start: int, index: int, bad: bool
                  ) -> tuple[JobSpec, JobTruth]:
        """Job ``job_id`` started at ``start`` (seconds since the epoch), of one of 7 users
        and 3 projects by ``index``."""
        spec = JobSpec(cluster=CLUSTER, job_id=job_id, start_time=start,
                       samples=self.SAMPLES, timestep_s=self.STEP_S, gzip=True,
                       base_power_w=-500.0 if bad else 200.0 + index % 50,
                       user=f"user{index % 7}", project=f"project{index % 3}")
        return spec, write_job(self.folder, spec)


class GeopmLander(Lander):
    source = "geopm"

    def __init__(self, folder: Path, rate_per_s: float, bad_fraction: float) -> None:
        super().__init__(folder, rate_per_s, bad_fraction)
        self.example = GEOPM_EXAMPLE.read_text()
        assert GEOPM_START in self.example and GEOPM_BAD[0] in self.example

    def write(self, index: int, bad: bool) -> list[Landed]:
        name, host, text = self.report(f"soak{index:06d}",
                                       utc_now() - timedelta(minutes=1), bad)
        path, folder = self.folder / name, self.writes_to  # one view for both writes
        partial = folder / f".{name}.part"  # geopm writes the report once, at the end
        partial.write_text(text)
        partial.rename(folder / name)
        return [Landed(self.source, str(path), f"{self.folder.name}/{name}/{host}",
                       "bad" if bad else "ok", utc_now())]

    def report(self, stem: str, start: datetime, bad: bool) -> tuple[str, str, str]:
        """The file name, host and text of report ``stem`` of a job started at ``start``."""
        name, host = f"{stem}.report", f"{stem}-{GEOPM_HOST}"
        text = self.example.replace(GEOPM_HOST, host).replace(
            GEOPM_START, f"Start Time: {start:%a %b %d %H:%M:%S %Y}")
        return name, host, text.replace(*GEOPM_BAD) if bad else text


#: The power (mW) in a row of the collector's gpu-power.csv (index, timestamp, energy, power).
POWER_COLUMN = 3


class Collector:
    """``joulehouse collect`` with the tests' fake NVML for each :meth:`run`, all in one
    long-lived process (``tests/collect/serve_collector.py``), not an interpreter started
    per repetition: started at the first run, and again at the run after it ended (died);
    ended by :meth:`close`. Runs are made one at a time. Its CPU seconds (:meth:`cpu_s`)
    count every process it started."""

    #: Every collector started (:func:`collector_cpu_s` adds up their CPU seconds).
    started: ClassVar[list[Collector]] = []
    _started_lock = threading.Lock()

    def __init__(self) -> None:
        self._run_lock = threading.Lock()  # one run at a time
        self._cpu_lock = threading.Lock()  # the process and the CPU of those that ended
        self._process: subprocess.Popen | None = None
        self._ps: psutil.Process | None = None
        self._ended_cpu_s = 0.0
        self._output: IO[bytes] | None = None  # what its runs print, every run's in turn

    def run(self, argv: list[str]) -> None:
        """``joulehouse argv``; raises ``CalledProcessError`` with what it printed where
        it fails or its process ends before it answers."""
        with self._run_lock:
            process = self._live()
            mark = os.fstat(self._output.fileno()).st_size
            answer = self._ask(process, argv)
            code = json.loads(answer)["status"] if answer else self._reap(0)
            if code or not answer:
                size = os.fstat(self._output.fileno()).st_size
                raise subprocess.CalledProcessError(
                    code, argv, os.pread(self._output.fileno(), size - mark, mark))

    def _live(self) -> subprocess.Popen:
        """Its process, started if none runs (none yet, or it ended)."""
        if self._process is None or self._reap(os.WNOHANG) is not None:
            if self._output is None:  # the first start
                self._output = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
                with Collector._started_lock:
                    Collector.started.append(self)
            process = subprocess.Popen(
                [sys.executable, str(SERVE_COLLECTOR)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=self._output, text=True,
                cwd=SERVE_COLLECTOR.parent,
                env={**os.environ, "FAKE_NVML": "{}", "PYTHONPATH": str(PROJECT)})
            with self._cpu_lock:
                self._process, self._ps = process, psutil.Process(process.pid)
        return self._process

    @staticmethod
    def _ask(process: subprocess.Popen, argv: list[str]) -> str:
        """The process's answer to the request ``argv``; empty if it ended first."""
        try:
            process.stdin.write(json.dumps(argv) + "\n")
            process.stdin.flush()
        except BrokenPipeError:
            return ""
        return process.stdout.readline()

    def _reap(self, options: int) -> int | None:
        """Its process's exit status once it ended (``os.wait4`` with ``options``: 0 waits
        for it), its CPU seconds from the kernel's account kept, its pipes closed; None
        while it runs."""
        process = self._process
        with self._cpu_lock:
            pid, status, usage = os.wait4(process.pid, options)
            if pid == 0:
                return None
            self._ended_cpu_s += usage.ru_utime + usage.ru_stime
            self._process = self._ps = None
        process.returncode = os.waitstatus_to_exitcode(status)
        for pipe in (process.stdin, process.stdout):
            with contextlib.suppress(OSError):  # a broken pipe: what it held is lost
                pipe.close()
        return process.returncode

    def cpu_s(self) -> float:
        """The CPU seconds (user + system) of its processes so far, each one's children
        included: those that ended from the kernel's account, the live one's from psutil."""
        with self._cpu_lock:
            if self._ps is None:
                return self._ended_cpu_s
            try:
                times = self._ps.cpu_times()
            except psutil.Error:  # not to be: it is reaped (and counted) under the lock
                return self._ended_cpu_s
            return (self._ended_cpu_s + times.user + times.system + times.children_user
                    + times.children_system)

    def close(self) -> None:
        """End its process (at the end of its input) and wait for it."""
        with self._run_lock:
            if self._process is not None:
                self._process.stdin.close()
                self._reap(0)
            if self._output is not None:
                self._output.close()


class GpuLander(Lander):
    """Each repetition a run ``r<i>`` of benchmark ``bench`` of experiment ``soak`` of the
    data root, written by ``joulehouse collect`` with the fake NVML, in the lander's one
    collector process (:class:`Collector`, on the machine measured: :func:`collector_cpu_s`
    counts it), which :meth:`close` ends."""

    source = "gpu-benchmark"
    COMMAND_S = 2.0

    def __init__(self, folder: Path, rate_per_s: float, bad_fraction: float) -> None:
        super().__init__(folder, rate_per_s, bad_fraction)
        self.collector = Collector()

    def write(self, index: int, bad: bool) -> list[Landed]:
        run = f"r{index:06d}"
        folder = self.folder / "soak" / "bench" / run / "0"
        staging = self.folder.parent / ".gpu-staging"  # bad ones are broken before landing
        root = staging if bad else self.folder
        self.collector.run(["collect", "--data-root", str(root), "--experiment", "soak",
                            "--benchmark", "bench", "--run", run, "--interval", "0.1", "--",
                            "sleep", str(self.COMMAND_S)])
        if bad:
            staged = staging / "soak" / "bench" / run / "0"
            power = staged / "gpu-power.csv"
            lines = power.read_text().splitlines(keepends=True)
            cells = lines[2].split(",")
            cells[POWER_COLUMN] = "not-a-number"
            lines[2] = ",".join(cells)
            power.write_text("".join(lines))
            # the run's folder moved to where it lands (an existing destination would take
            # it inside, one level too deep for the scan)
            folder.parent.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(staged.parent, folder.parent)
        return [Landed(self.source, str(folder), f"{self.folder.name}/soak/bench/{run}/0",
                       "bad" if bad else "ok", utc_now())]

    def close(self) -> None:
        self.collector.close()


def collector_cpu_s() -> float:
    """The CPU seconds of every GPU collector process so far (:class:`Collector`)."""
    with Collector._started_lock:
        started = list(Collector.started)
    return sum(collector.cpu_s() for collector in started)


class PowerapiLander(Lander):
    """``streams`` growing files; each ``land()`` appends ``flush_s`` one-second reports
    to every stream (its rate is one flush per ``flush_s``), and a bad file at the bad
    fraction of flushes."""

    source = "powerapi"

    def __init__(self, folder: Path, streams: int, flush_s: float, bad_fraction: float
                 ) -> None:
        super().__init__(folder, 1.0 / flush_s, bad_fraction)
        self.streams, self.flush_s = streams, flush_s
        self.next_tick = [int(time.time()) for _ in range(streams)]
        self.first_tick = list(self.next_tick)
        self.bad_count = 0

    #: The power reports' target: a job's cgroup. Estimates of a machine-level target
    #: (``all``) are no facts (the machine's are measured), so a stream of power reports
    #: under ``all`` never reached energy_facts.
    JOB_TARGET = "soakjob"

    def target(self, stream: int) -> str:
        """The stream's target: a job's for power reports, the machine's for RAPL counters."""
        return self.JOB_TARGET if stream % 2 == 0 else "all"

    def path(self, stream: int) -> Path:
        return (self.folder / f"power-{stream}.jsonl" if stream % 2 == 0
                else self.folder / f"hwpc-{stream}" / "rapl.csv")

    def _lines(self, stream: int, ticks: list[int]) -> str:
        sensor = f"soak{stream}"
        if stream % 2 == 0:
            return "".join(json.dumps({
                "timestamp": datetime.fromtimestamp(t, UTC).isoformat(), "sensor": sensor,
                "target": self.JOB_TARGET, "metadata": {"scope": "cpu", "socket": 0},
                "power": STREAM_POWER_W}) + "\n" for t in ticks)
        counts = round(STREAM_RAPL_J / RAPL_UNIT)
        return "".join(f"{t * 1000},{sensor},all,0,0,{counts},{(t - self.first_tick[stream] + 1) * 10**9},"
                       f"{(t - self.first_tick[stream] + 1) * 10**9}\n" for t in ticks)

    def write(self, index: int, bad: bool) -> list[Landed]:
        landed = []
        now = int(time.time())
        for stream in range(self.streams):
            ticks = list(range(self.next_tick[stream], now + 1))
            if not ticks:
                continue
            path = self.path(stream)
            path.parent.mkdir(exist_ok=True)
            new = not path.exists()
            with path.open("a") as file:
                if new and stream % 2:
                    file.write("timestamp,sensor,target,socket,cpu,RAPL_ENERGY_PKG,"
                               "time_enabled,time_running\n")
                file.write(self._lines(stream, ticks))
            self.next_tick[stream] = now + 1
            landed.append(Landed(self.source, f"{path}@{path.stat().st_size}",
                                 f"soak{stream}/{self.target(stream)}", "ok", utc_now(),
                                 reaches=datetime.fromtimestamp(now, UTC)))
        if bad:
            landed.append(self._bad())
        return landed

    def _bad(self) -> Landed:
        path = self.folder / f"bad-{self.bad_count}.jsonl"
        self.bad_count += 1
        start = int(time.time()) - 10
        lines = [json.dumps({"timestamp": datetime.fromtimestamp(start + i, UTC).isoformat(),
                             "sensor": f"soakbad{self.bad_count}", "target": self.JOB_TARGET,
                             "metadata": {"scope": "cpu", "socket": 0},
                             "power": -1.0 if i == 2 else STREAM_POWER_W}) for i in range(5)]
        path.write_text("\n".join(lines) + "\n")
        return Landed(self.source, str(path), f"soakbad{self.bad_count}/{self.JOB_TARGET}",
                      "bad", utc_now())


class TauLander(Lander):
    source = "tau"

    def write(self, index: int, bad: bool) -> list[Landed]:
        folder = self.folder / f"soak{index:06d}"
        staging = self.folder.parent / f".tau-{index:06d}"
        shutil.copytree(EXAMPLE_TAU_PROFILES / "tau2_wrap_mpi2", staging)
        if bad:
            profile = staging / "profile.0.0.0"
            profile.write_text(profile.read_text()[:40])
        staging.rename(folder)
        return [Landed(self.source, str(folder), "", "bad" if bad else "ok", utc_now())]


class AccountingLander(Lander):
    """Updates of grid intensity and tariffs, as their feeds deliver them: the first
    ``land()`` writes an intensity file (zone DE, hourly) and a tariff file
    (``hpc-centre``, its dates in UTC) from ``covers_from`` (default: two days before
    today; a seeded history's first day, or where the kept history's files end) to
    tomorrow, none when
    that is empty; each later one the next two hours of intensity and the next day of
    tariff in new files (a zone's or site's files must not overlap:
    ``joulehouse.accounting.intensity``, ``tariff``), named ``<zone or site>_<tag>-<index>`` (a kept history's have a tag of
    their own)."""

    source = "intensity"

    def __init__(self, intensity: Path, tariffs: Path, rate_per_s: float,
                 covers_from: pd.Timestamp | None = None, tag: str = "soak") -> None:
        super().__init__(intensity, rate_per_s, 0.0)
        self.tariffs, self.tag = tariffs, tag
        self.tomorrow = pd.Timestamp.now(tz="UTC").normalize() + pd.Timedelta(days=1)
        self.covers_from = (self.tomorrow - pd.Timedelta(days=3) if covers_from is None
                            else covers_from)

    def write(self, index: int, bad: bool) -> list[Landed]:
        hour, day = pd.Timedelta(hours=1), pd.Timedelta(days=1)
        if index == 0:
            if self.covers_from >= self.tomorrow:
                return []
            (start, end), (valid_from, valid_to) = [(self.covers_from, self.tomorrow)] * 2
        else:  # two hours: one row gives the reader no resolution, and it refuses the file
            start = self.tomorrow + 2 * (index - 1) * hour
            end, valid_from = start + 2 * hour, self.tomorrow + (index - 1) * day
            valid_to = valid_from + day
        frame = electricity_maps_frame("DE", "Germany", str(start), str(end))
        intensity = write_csv(frame, self.folder / f"DE_{self.tag}-{index:04d}.csv")
        # the tariff's dates in UTC, as the intensity's: in Europe/Berlin's, today's last UTC
        # hour is already tomorrow there, which no file priced before 23:00 UTC
        tariff = write_tariff(
            self.tariffs / f"hpc-centre-{self.tag}-{index:04d}.csv", "hpc-centre",
            (f"{valid_from:%Y-%m-%d}", f"{valid_to:%Y-%m-%d}"),
            [('"Mon,Tue,Wed,Thu,Fri,Sat,Sun"', "00:00", "24:00", round(0.15 + index / 1000, 3))],
            zone="UTC")
        return [Landed("intensity", str(intensity), "", "ok", utc_now()),
                Landed("tariffs", str(tariff), "", "ok", utc_now())]


def history_starts(count: int, days: int) -> list[datetime]:
    """``count`` start times (UTC) spread evenly over the ``days`` days before today, oldest
    first: a seeded history's."""
    span = timedelta(days=days)
    today = utc_now().replace(hour=0, minute=0, second=0, microsecond=0)
    return [today - span + span * (index + 0.5) / count for index in range(count)]


#: A seeded GPU run's repetitions (``r<i // 5>/<i % 5>``) and a repetition's length (s).
SEED_REPETITIONS_PER_RUN, SEED_REPETITION_S = 5, 10.0


@dataclass(frozen=True)
class History:
    """A history written before the stack starts (``benchmarks/soak.py --seed-*``): its
    entries spread over ``days`` days before today, none bad; ids, names and runs apart from
    the soak's landings (ClusterCockpit jobs below :data:`FIRST_JOB_ID`, GEOPM reports
    ``seed*``, GPU experiment ``seed``)."""

    jobs: int = 0
    reports: int = 0
    repetitions: int = 0
    days: int = 365

    def expected(self) -> dict[str, int]:
        """The ``energy_facts`` entities the history must become, per source."""
        return {source: count for source, count in (
            ("clustercockpit", self.jobs), ("geopm", self.reports),
            ("gpu-benchmark", self.repetitions)) if count}

    def write(self, data_folders) -> None:
        """Every entry of the history into the stack's data folders (``DataFolders``)."""
        jobs = ClusterCockpitLander(data_folders.archive, 0.0, 0.0)
        for index, start in enumerate(history_starts(self.jobs, self.days)):
            jobs.write_job(FIRST_JOB_ID - self.jobs + index, int(start.timestamp()), index,
                           False)
        reports = GeopmLander(data_folders.geopm, 0.0, 0.0)
        for index, start in enumerate(history_starts(self.reports, self.days)):
            name, _, text = reports.report(f"seed{index:06d}", start, False)
            (data_folders.geopm / name).write_text(text)
        for index, start in enumerate(history_starts(self.repetitions, self.days)):
            run, repetition = divmod(index, SEED_REPETITIONS_PER_RUN)
            write_repetition(data_folders.gpu / "seed" / "bench" / f"r{run:06d}" / str(repetition),
                             RepetitionSpec(duration_s=SEED_REPETITION_S,
                                            start_utc=f"{start:%Y-%m-%d %H:%M:%S}"), index)
