"""A component instance as declared: its ``defs.yaml``, and where each key is in it.

Every refusal of a configuration names the file, the line and the key
(``defs/gpu/lab/defs.yaml:5: attributes.path: ...``), as ``InputError`` does for data.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Self

import dagster as dg
from dagster_shared.yaml_utils import parse_yamls_with_source_position
from pydantic import BaseModel, PrivateAttr

from joulehouse.errors import InputError

#: The file of a component instance in its folder under ``defs/``.
DEFS_FILE = "defs.yaml"


class Declaration(dg.Model):
    """A component instance's fields, and the file and project it was loaded from (none
    when built in Python)."""

    _file: Path | None = PrivateAttr(default=None)
    _project_root: Path | None = PrivateAttr(default=None)

    @classmethod
    def load(cls, attributes: BaseModel | None, context: dg.ComponentLoadContext) -> Self:
        """The instance, remembering its ``defs.yaml`` and the project root (which relative
        folders are taken from)."""
        component = super().load(attributes, context)  # ty: ignore[unresolved-attribute]
        component._file = context.path / DEFS_FILE
        component._project_root = context.project_root
        return component

    @property
    def file(self) -> str:
        """The instance's ``defs.yaml`` (relative to the working folder where below it), or
        the class name when built in Python."""
        if self._file is None:
            return type(self).__name__
        return os.path.relpath(self._file) if self._file.is_relative_to(Path.cwd()) else str(
            self._file)

    def line(self, *keys: str) -> int | None:
        """The 1-based line of ``attributes.<keys>`` in the instance's file, or of its nearest
        declared parent (a key left to its default); None when built in Python."""
        if self._file is None:
            return None
        document = parse_yamls_with_source_position(self._file.read_text(), str(self._file))[0]
        position, _ = document.source_position_tree.lookup_closest_and_path(
            ["attributes", *keys], None)
        return position.start.line

    def refusal(self, message: str, *keys: str) -> InputError:
        """An InputError naming this file, the line of ``attributes.<keys>`` and the key."""
        return InputError(self.file, message, line=self.line(*keys),
                          field=".".join(["attributes", *keys]))

    def where(self, *keys: str) -> str:
        """``file:line`` of ``attributes.<keys>``, for a message naming a second place."""
        line = self.line(*keys)
        return self.file if line is None else f"{self.file}:{line}"

    def folder(self, value: str) -> Path:
        """A folder of the declaration: as written when absolute, else under the project
        root (the working folder when built in Python)."""
        path = Path(value)
        return path if path.is_absolute() else (self._project_root or Path.cwd()) / path
