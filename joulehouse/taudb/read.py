"""One entry point for every trial source: what a path is decides how it is read."""

from __future__ import annotations

from pathlib import Path

from joulehouse.clustercockpit.layout import archive_level
from joulehouse.errors import InputError
from joulehouse.geopm.layout import identify_report
from joulehouse.gpu.layout import folder_level
from joulehouse.powerapi.energy import MACHINE_TARGETS
from joulehouse.powerapi.layout import holds_reports
from joulehouse.taudb.mapping import clustercockpit, geopm, gpu, powerapi
from joulehouse.taudb.model import TrialData
from joulehouse.taudb.ppk import read_ppk
from joulehouse.taudb.profiles import identify_profile_set, read_profile_dir

EXPECTED = ("expected a .ppk file, a folder of TAU profiles (profile.<node>.<context>.<thread>, "
            "or MULTI__<metric> folders of them), a GPU benchmark run folder "
            "(experiment/benchmark/run, whose sub-folders are repetitions with timestamps.csv), "
            "a GEOPM report file, a ClusterCockpit job folder "
            "(<cluster>/<jobId/1000>/<jobId%1000>/<startTime> of an archive with version.txt), "
            "or PowerAPI report files or folders of them")


def read_trial_source(path: str | Path) -> TrialData:
    """Read the one trial at ``path`` (:func:`read_trials`).

    Raises InputError naming the path when it holds none, or several (PowerAPI
    reports of more than one sensor or day).
    """
    trials = read_trials(path)
    if len(trials) != 1:
        names = ", ".join(trial.name for trial in trials)
        raise InputError(Path(path).resolve(), f"{len(trials)} trials, not one: {names}")
    return trials[0]


def read_trials(path: str | Path, *, powerapi_targets: tuple[str, ...] = MACHINE_TARGETS
                ) -> list[TrialData]:
    """Read the trials at ``path``: a ``.ppk`` file, a folder of TAU profiles
    (``profile.N.C.T`` files or ``MULTI__<metric>`` folders of them), or a GPU
    benchmark run folder (mapped by :mod:`joulehouse.taudb.mapping.gpu`, with
    the default time zone UTC and external power in mW), a GEOPM report file
    (:mod:`joulehouse.taudb.mapping.geopm`, a Start Time without zone read as UTC)
    and a ClusterCockpit job
    folder (:mod:`joulehouse.taudb.mapping.clustercockpit`: any folder of an
    archive, the nearest one up holding version.txt, is its business) give one trial each;
    PowerAPI report files or a folder of them one trial per sensor and day
    (:mod:`joulehouse.taudb.mapping.powerapi`, 1 min windows, timestamps
    without a zone read as UTC, ``powerapi_targets`` the machine-level target names).

    Raises InputError naming the path when it is none of these, and saying
    which folder to give instead for a GPU repetition or benchmark folder and
    for an archive, cluster or job-id folder of a ClusterCockpit archive.
    """
    source = Path(path).resolve()
    profile_set = identify_profile_set(source)
    if profile_set is not None:
        kind, _ = profile_set
        return [read_ppk(source) if kind == "ppk" else read_profile_dir(source)]
    if identify_report(source) is not None:
        return [geopm.read_report_trial(source)]
    level = folder_level(source)
    if level == "run":
        return [gpu.read_run(source)]
    if level == "repetition":
        raise InputError(source, "a GPU benchmark repetition folder: a trial is a whole run, "
                         f"give its run folder {source.parent}")
    if level == "benchmark":
        runs = ", ".join(p.name for p in sorted(source.iterdir()) if p.is_dir())
        raise InputError(source, "a GPU benchmark folder: a trial is one run, give one of "
                         f"its run folders ({runs})")
    if archive_level(source) is not None:
        return [clustercockpit.read_job(source)]
    if holds_reports(source):
        return powerapi.read_trials(source, targets=powerapi_targets)
    what = "no such file or folder" if not source.exists() else "not a trial source"
    raise InputError(source, f"{what}: {EXPECTED}")
