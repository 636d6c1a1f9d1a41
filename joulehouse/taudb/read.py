"""One entry point for every trial source: what a path is decides how it is read."""

from __future__ import annotations

from pathlib import Path

from joulehouse.errors import InputError
from joulehouse.taudb.model import TrialData
from joulehouse.taudb.ppk import read_ppk
from joulehouse.taudb.profiles import find_profile_layout, read_profile_dir


def read_trial_source(path: str | Path) -> TrialData:
    """Read the trial at ``path``: a ``.ppk`` file, or a folder of TAU profiles
    (``profile.N.C.T`` files or ``MULTI__<metric>`` folders of them).

    Raises InputError naming the path when it is none of these.
    """
    source = Path(path).resolve()
    if source.is_file() and source.suffix.lower() == ".ppk":
        return read_ppk(source)
    if find_profile_layout(source) is not None:
        return read_profile_dir(source)
    what = "no such file or folder" if not source.exists() else "not a trial source"
    raise InputError(source, f"{what}: expected a .ppk file or a folder of TAU profiles "
                     "(profile.<node>.<context>.<thread>, or MULTI__<metric> folders of them)")
