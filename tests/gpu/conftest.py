"""Fixtures for the GPU benchmark tests: generated repetitions with ground truth."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulehouse.gpu.generator import RepetitionSpec, write_repetition
from joulehouse.gpu.layout import RepetitionRef

KEY = "power-limit/bert/250W/0"


def _write(root: Path, key: str = KEY, seed: int = 0, **spec):
    """Write one repetition under ``root``; return (ref, ground truth)."""
    ref = RepetitionRef.from_key(root, key)
    truth = write_repetition(ref.path, RepetitionSpec(**spec), seed=seed)
    return ref, truth


@pytest.fixture
def make_repetition():
    """``make_repetition(root, key=KEY, seed=0, **RepetitionSpec fields) -> (ref, truth)``."""
    return _write


@pytest.fixture
def repetition(tmp_path):
    """A 60 s V100 repetition with every file: (ref, ground truth)."""
    return _write(tmp_path)
