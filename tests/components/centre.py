"""A centre's dg project written under a test's folder, and its definitions loaded.

Each project's defs module has a name of its own (the process keeps every imported module,
and the project's own ``defs`` is imported already), so that several load side by side.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Mapping
from pathlib import Path

import dagster as dg

from definitions import load_centre

PROJECT = """[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "{module}"
defs_module = "{module}"
registry_modules = ["components"]
"""


def write_centre(root: Path, instances: Mapping[str, str]) -> Path:
    """A dg project at ``root`` with a ``defs.yaml`` per item of ``instances`` (its folder
    under the defs folder -> its text); returns the defs folder."""
    module = f"centre_{uuid.uuid4().hex[:12]}"
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(PROJECT.format(module=module))
    for folder, text in instances.items():
        (root / module / folder).mkdir(parents=True)
        (root / module / folder / "defs.yaml").write_text(text)
    return root / module


def load(root: Path) -> dg.Definitions:
    """The definitions of the project at ``root`` (importable from there while loading)."""
    sys.path.insert(0, str(root))
    try:
        return load_centre(root)
    finally:
        sys.path.remove(str(root))


def instance(kind: str, **attributes: object) -> str:
    """The ``defs.yaml`` of a ``components.<kind>``, one attribute a line from line 3 on
    (values written as YAML flow scalars or mappings)."""
    lines = [f"type: components.{kind}", "attributes:"]
    for key, value in attributes.items():
        if isinstance(value, Mapping):
            lines.append(f"  {key}:")
            lines.extend(f'    "{k}": {v}' for k, v in value.items())
        else:
            lines.append(f"  {key}: {value}")
    return "\n".join(lines) + "\n"
