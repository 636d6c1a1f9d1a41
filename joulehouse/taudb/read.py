"""One entry point for every trial source: what a path is decides how it is read."""

from __future__ import annotations

from pathlib import Path

from joulehouse.errors import InputError
from joulehouse.geopm.layout import identify_report
from joulehouse.gpu.layout import folder_level
from joulehouse.taudb.mapping import geopm, gpu
from joulehouse.taudb.model import TrialData
from joulehouse.taudb.ppk import read_ppk
from joulehouse.taudb.profiles import identify_profile_set, read_profile_dir

EXPECTED = ("expected a .ppk file, a folder of TAU profiles (profile.<node>.<context>.<thread>, "
            "or MULTI__<metric> folders of them), or a GPU benchmark run folder "
            "(experiment/benchmark/run, whose sub-folders are repetitions with timestamps.csv), "
            "or a GEOPM report file")


def read_trial_source(path: str | Path) -> TrialData:
    """Read the trial at ``path``: a ``.ppk`` file, a folder of TAU profiles
    (``profile.N.C.T`` files or ``MULTI__<metric>`` folders of them), a GPU
    benchmark run folder (mapped by :mod:`joulehouse.taudb.mapping.gpu`, with
    the default time zone UTC and external power in mW), or a file whose first
    bytes are a GEOPM report (:mod:`joulehouse.taudb.mapping.geopm`, a Start
    Time without zone read as UTC).

    Raises InputError naming the path when it is none of these, and saying
    which folder to give instead for a GPU repetition or benchmark folder.
    """
    source = Path(path).resolve()
    profile_set = identify_profile_set(source)
    if profile_set is not None:
        kind, _ = profile_set
        return read_ppk(source) if kind == "ppk" else read_profile_dir(source)
    if identify_report(source) is not None:
        return geopm.read_report_trial(source)
    level = folder_level(source)
    if level == "run":
        return gpu.read_run(source)
    if level == "repetition":
        raise InputError(source, "a GPU benchmark repetition folder: a trial is a whole run, "
                         f"give its run folder {source.parent}")
    if level == "benchmark":
        runs = ", ".join(p.name for p in sorted(source.iterdir()) if p.is_dir())
        raise InputError(source, "a GPU benchmark folder: a trial is one run, give one of "
                         f"its run folders ({runs})")
    what = "no such file or folder" if not source.exists() else "not a trial source"
    raise InputError(source, f"{what}: {EXPECTED}")
