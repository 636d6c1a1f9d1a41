"""Fixtures for the ClusterCockpit tests: the real archives of the peer data, copies to break."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def cc_data(peer_data) -> Path:
    """``peer-data/clustercockpit`` (skips, or fails under CI=true, without it)."""
    return peer_data / "clustercockpit"


@pytest.fixture(scope="session")
def emmy_archive(cc_data) -> Path:
    """cc-backend's test archive (v3): two emmy jobs of 32 nodes, ~24 h at 60 s, gzipped."""
    return cc_data / "cc-backend-testdata-archive"


@pytest.fixture(scope="session")
def assembled_archive(cc_data) -> Path:
    """The fritz and taurus jobs laid out as an archive (v3; taurus' meta.json is pre-v3)."""
    return cc_data / "assembled-archive"


@pytest.fixture
def writable_archive(assembled_archive, tmp_path) -> Path:
    """A writable copy of the assembled archive, to break."""
    target = tmp_path / "archive"
    shutil.copytree(assembled_archive, target)
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    target.chmod(0o755)
    return target
