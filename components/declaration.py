"""A component instance as declared: its ``defs.yaml``, and where each key is in it.

Every refusal of a configuration names the file, the line and the key
(``defs/gpu/lab/defs.yaml:5: attributes.path: ...``), as ``InputError`` does for data.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Self

import dagster as dg
import pydantic
from dagster_shared.yaml_utils import parse_yamls_with_source_position
from pydantic import BaseModel, PrivateAttr

from joulehouse.errors import InputError
from joulehouse.warehouse import is_url

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
        folders are taken from); a value of the wrong type (a string ``dg check yaml`` lets
        through, as a template could make it) is refused naming the file, line and key."""
        file = context.path / DEFS_FILE
        try:
            component = super().load(attributes, context)  # ty: ignore[unresolved-attribute]
        except pydantic.ValidationError as err:
            first = err.errors()[0]
            keys = [str(part) for part in first["loc"]]
            raise InputError(shown(file), first["msg"], line=line_of(file, keys),
                             field=".".join(["attributes", *keys])) from err
        component._file = file
        component._project_root = context.project_root
        return component

    @property
    def file(self) -> str:
        """The instance's ``defs.yaml`` (see :func:`shown`), or the class name when built in
        Python."""
        return type(self).__name__ if self._file is None else shown(self._file)

    def line(self, *keys: str) -> int | None:
        """The line of ``attributes.<keys>`` in the instance's file (:func:`line_of`); None
        when built in Python."""
        return None if self._file is None else line_of(self._file, keys)

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

    def location(self, value: str) -> str:
        """A place that may be on an object store: a URL (``s3://bucket/prefix``, as
        ``joulehouse.warehouse.is_url`` tells) unchanged, else :meth:`folder`."""
        return value if is_url(value) else str(self.folder(value))


def shown(file: Path) -> str:
    """``file`` as a message names it: relative to the working folder where below it."""
    return os.path.relpath(file) if file.is_relative_to(Path.cwd()) else str(file)


def line_of(file: Path, keys: Sequence[str]) -> int:
    """The 1-based line of ``attributes.<keys>`` in the component file ``file``, or of its
    nearest declared parent (a key left to its default)."""
    document = parse_yamls_with_source_position(file.read_text(), str(file))[0]
    position, _ = document.source_position_tree.lookup_closest_and_path(
        ["attributes", *keys], None)
    return position.start.line
