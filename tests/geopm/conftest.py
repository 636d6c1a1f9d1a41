"""Fixtures for the GEOPM tests: the peer reports, written reports, and geopmpy's own io.py."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail

GEOPMPY = "geopmpy==3.2.2"
GEOPMPY_SDIST = "geopmpy-3.2.2.tar.gz"
#: Where geopmpy's source distribution is kept between runs (JOULEHOUSE_CACHE overrides).
CACHE = Path(os.environ.get("JOULEHOUSE_CACHE", Path.home() / ".cache" / "joulehouse"))


@pytest.fixture(scope="session")
def geopm_peer(peer_data: Path) -> Path:
    """The folder of real GEOPM reports in the peer data."""
    folder = peer_data / "geopm"
    if not folder.is_dir():
        skip_or_fail(f"GEOPM peer data not found at {folder}")
    return folder


@pytest.fixture
def write_report(tmp_path):
    """``write_report(text, name="r.report") -> Path``: a report file from dedented text."""
    def write(text: str, name: str = "r.report") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return path
    return write


def geopmpy_sdist() -> Path | None:
    """geopmpy's sdist from the cache, downloaded with pip into it when absent."""
    sdist = CACHE / GEOPMPY_SDIST
    if not sdist.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", GEOPMPY, "--no-deps",
                        "--no-binary", ":all:", "--quiet", "-d", str(CACHE)],
                       check=False, capture_output=True, timeout=300)
    return sdist if sdist.is_file() else None


@pytest.fixture(scope="session")
def geopmpy_io(tmp_path_factory):
    """geopmpy's own ``geopmpy.io`` module, imported from its source distribution (3.2.2)."""
    sdist = geopmpy_sdist()
    if sdist is None:
        skip_or_fail(f"could not get {GEOPMPY} (pip download into {CACHE})")
    folder = tmp_path_factory.mktemp("geopmpy")
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers()
                   if m.name.startswith("geopmpy-3.2.2/geopmpy/") and m.isfile()]
        archive.extractall(folder, members=members, filter="data")
    sys.path.insert(0, str(folder / "geopmpy-3.2.2"))
    try:
        return importlib.import_module("geopmpy.io")
    finally:
        sys.path.pop(0)
