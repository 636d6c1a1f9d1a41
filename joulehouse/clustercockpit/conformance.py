"""Validation of a job's files against the official JSON schemas: reported, not enforced.

Real archives violate their schemas (every real sample job does: units
outside the enum, "required" metrics missing, ``numAcc: 0``,
``statisticsSeries: null``), and cc-backend runs with validation off, so a
violation is a :class:`SchemaWarning` naming the job, the file and the
offending path; the job is still read. The schemas of archive versions 1,
2 and 3 are bundled (``jsonschemas/v*``, see PROVENANCE.md) and applied
with the ``jsonschema`` library (Draft 2020-12). data.json is checked one
metric at a time as :func:`~joulehouse.clustercockpit.readers.read_samples`
streams it (pass :meth:`DataConformance.observe` as its ``observe``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

#: Warnings kept per file; the rest are counted in the last one.
MAX_WARNINGS_PER_FILE = 50
_MESSAGE_CHARS = 200


@dataclass(frozen=True)
class SchemaWarning:
    """One schema violation: the job's key, the file and the JSON path in it."""

    job: str
    file: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.job}: {self.file}: {self.path or '/'}: {self.message}"


@cache
def validator(version: int, name: str) -> Draft202012Validator:
    """The validator of schema ``name`` (e.g. ``job-meta``) of archive ``version``."""
    folder = resources.files("joulehouse.clustercockpit") / "jsonschemas" / f"v{version}"
    if not folder.is_dir():
        raise ValueError(f"no bundled schemas for archive version {version}")
    documents = {entry.name: json.loads(entry.read_text()) for entry in folder.iterdir()
                 if entry.name.endswith(".schema.json")}
    # the schemas name their dialect "http://...draft/2020-12/schema", which
    # referencing does not detect (it knows the https address): set it here
    registry = Registry().with_resources(
        (doc["$id"], DRAFT202012.create_resource(doc)) for doc in documents.values())
    return Draft202012Validator(documents[f"{name}.schema.json"], registry=registry)


def _pointer(error) -> str:
    return "/" + "/".join(str(part) for part in error.absolute_path)


def _warnings(job: str, file: str, errors, prefix: str = "") -> list[SchemaWarning]:
    found = []
    for count, error in enumerate(errors):
        if count == MAX_WARNINGS_PER_FILE:
            found.append(SchemaWarning(job, file, prefix or "/", "more violations left out"))
            break
        message = error.message
        if len(message) > _MESSAGE_CHARS:
            message = message[:_MESSAGE_CHARS] + "..."
        found.append(SchemaWarning(job, file, prefix + _pointer(error), message))
    return found


def meta_warnings(job: str, meta_path: str | Path, meta: dict[str, Any],
                  version: int) -> list[SchemaWarning]:
    """Violations of the job-meta schema by ``meta`` (as read, before normalising)."""
    errors = validator(version, "job-meta").iter_errors(meta)
    return _warnings(job, Path(meta_path).name, sorted(errors, key=_pointer))


class DataConformance:
    """Collects data.json violations metric by metric, without holding the file.

    Each metric is checked as ``{metric: scopes}`` against the job-data
    schema (its top-level ``required`` left to :meth:`warnings`, which
    reports the required metrics never seen).
    """

    def __init__(self, job: str, data_path: str | Path, version: int) -> None:
        self.job, self.file = job, Path(data_path).name
        self.schema = validator(version, "job-data")
        self.seen: set[str] = set()
        self.found: list[SchemaWarning] = []

    def observe(self, metric: str, scopes: dict[str, Any]) -> None:
        """Check one metric's object (``read_samples``' ``observe`` hook)."""
        self.seen.add(metric)
        if len(self.found) > MAX_WARNINGS_PER_FILE:
            return
        errors = (e for e in self.schema.iter_errors({metric: scopes})
                  if e.absolute_path or e.validator != "required")
        self.found += _warnings(self.job, self.file, sorted(errors, key=_pointer))

    def warnings(self) -> list[SchemaWarning]:
        """Every violation seen, then one per required metric missing from the file."""
        missing = [name for name in self.schema.schema.get("required", [])
                   if name not in self.seen]
        return self.found[:MAX_WARNINGS_PER_FILE] + [
            SchemaWarning(self.job, self.file, "/", f"required metric {name!r} missing")
            for name in missing]
