"""Shared fixtures: peer data and a throwaway PostgreSQL server.

Tests that need ``../shared/peer-data`` or the PostgreSQL binaries skip with
a reason on a user's machine without them; under CI (``CI=true``) such a skip
is an error instead, so CI cannot pass by skipping.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from postgres_server import missing_requirement, throwaway_postgres

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PEER_DATA = PROJECT_ROOT.parent / "shared" / "peer-data"


def skip_or_fail(reason: str) -> None:
    """Skip the test, or fail it when running in CI (CI=true)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def peer_data() -> Path:
    """The shared peer-data folder (real files written by the reference tools)."""
    if not PEER_DATA.is_dir():
        skip_or_fail(f"peer data not found at {PEER_DATA}")
    return PEER_DATA


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A SQLAlchemy-style URL of a throwaway PostgreSQL 15 server on loopback."""
    reason = missing_requirement()
    if reason:
        skip_or_fail(reason)
    with throwaway_postgres() as url:
        yield url
