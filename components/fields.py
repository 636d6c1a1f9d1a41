"""The component types' fields, taken from the resources' own pydantic fields.

A component type is a ``dg.Model``; its fields are copies of the fields a resource already
declares (annotation, default, constraints and description), so that the YAML schema
``dg check yaml`` checks, the docs and the resource cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, create_model
from pydantic.fields import FieldInfo

from components.declaration import Declaration

#: The project's folder, below which a default folder is written relative.
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def fields_of(model: type[BaseModel], names: Iterable[str] | None = None, *,
              exclude: Iterable[str] = (), rename: dict[str, str] | None = None,
              optional: Iterable[str] = ()) -> dict[str, tuple[Any, FieldInfo]]:
    """``create_model`` arguments for the fields of ``model`` named in ``names`` (default:
    all) but not in ``exclude``: the resource's annotation and field, without its alias;
    ``rename`` maps a field's name to its name in the YAML; a field in ``optional`` becomes
    ``None`` by default (the resource's default then applies). Each field's schema keeps
    the resource's type and default as written in the docs (:data:`TYPE`, :data:`DEFAULT`;
    ``components/reference.py``)."""
    chosen = set(model.model_fields if names is None else names) - set(exclude)
    rename, optional = rename or {}, set(optional)
    fields = {}
    for name, info in model.model_fields.items():
        if name not in chosen:
            continue
        annotation = info.annotation
        overrides: dict[str, Any] = {"alias": None, "validation_alias": None,
                                     "serialization_alias": None,
                                     "json_schema_extra": documented(info, name in optional)}
        if name in optional:
            annotation = annotation | None
            overrides |= {"default": None, "default_factory": None}
        fields[rename.get(name, name)] = (
            annotation, FieldInfo.merge_field_infos(info, **overrides))
    return fields


def folder(description: str) -> dict[str, tuple[Any, FieldInfo]]:
    """The ``path`` field of an instance whose resource holds a list of folders: one of them
    (relative to the project root, or absolute)."""
    return {"path": (str, Field(description=description,
                                json_schema_extra={TYPE: "str", DEFAULT: REQUIRED}))}


#: The schema keys of a field's type and default as the docs write them, and the default
#: of a field that has none.
TYPE, DEFAULT, REQUIRED = "x-joulehouse-type", "x-joulehouse-default", "required"


def documented(info: FieldInfo, optional: bool = False) -> dict[str, str]:
    """The type and default of a resource's field as the docs write them (folders under the
    project as relative paths; ``null`` for a field the resource requires that the YAML may
    leave out)."""
    kind = info.annotation
    kind = kind.__name__ if isinstance(kind, type) else str(kind).replace("typing.", "")
    if info.is_required():
        return {TYPE: kind, DEFAULT: "null" if optional else REQUIRED}
    default = info.get_default(call_default_factory=True)
    if isinstance(default, str) and Path(default).is_relative_to(PROJECT_ROOT):
        default = str(Path(default).relative_to(PROJECT_ROOT))
    return {TYPE: kind, DEFAULT: json.dumps(default)}


def model_of(name: str, doc: str, *parts: dict[str, tuple[Any, FieldInfo]]
             ) -> type[Declaration]:
    """A :class:`Declaration` (a ``dg.Model``: unknown keys refused) named ``name`` with the
    fields of ``parts``."""
    model = create_model(name, __base__=Declaration, __doc__=doc,
                         **{k: v for part in parts for k, v in part.items()})
    model.__module__ = __name__
    return model
