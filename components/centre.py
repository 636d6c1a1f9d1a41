"""A centre's resources from its declared instances: checked, then assembled.

Refused before anything runs, each as an ``InputError`` naming the file, the line and the
key: a missing or unreadable folder, a value its resource refuses, two instances of a kind
with the same partition-key prefix (a GPU data root's name, a landing folder's name, a
ClusterCockpit cluster), a kind's setting declared twice with different values, a second
grid intensity, a carbon zone without intensity data. (An unknown key or a wrong type is
refused when the YAML is loaded, and by ``dg check yaml``.)

Environment variables override what the YAML declares: a kind's folder variable
(``$JOULEHOUSE_GPU_DATA_ROOTS``, ``$JOULEHOUSE_TAU_LANDING``...) replaces its instances'
folders (which are then not checked), each setting's variable its value
(``docs/configuration.md``). A value refused where a variable replaced the YAML is refused
naming the variable and its value (``$JOULEHOUSE_PUE: '0.5': ...``), never the YAML key.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import dagster as dg
import pydantic

from components.sources import (
    ACCOUNTING_ENV,
    INTENSITY_FOLDERS,
    SOURCE_TYPES,
    GridIntensity,
    Source,
)
from joulehouse.accounting.intensity import zones_in_folder
from joulehouse.errors import InputError
from resources import AccountingSettings, StepWorkers, TaudbResource, Warehouse
from resources import accounting as accounting_env
from resources.taudb import embedded_url
from sensors.gpu_repetitions import gpu_repetition_sensors

if TYPE_CHECKING:
    from components.site import Site

T = TypeVar("T")
#: The warehouse of a site that declares none, under the project root.
DEFAULT_WAREHOUSE = "warehouse"


def centre_definitions(resources: dict[str, Any]) -> dg.Definitions:
    """The definitions that follow the configuration: the resources, and one sensor per GPU
    data root."""
    return dg.Definitions(resources=resources,
                          sensors=gpu_repetition_sensors(resources["gpu_source"]))


def resources(site: Site, sources: Sequence[Source], intensities: Sequence[GridIntensity]
              ) -> dict[str, Any]:
    """Every resource the assets use, from the site and the instances (InputError on a bad
    configuration, see the module)."""
    built = {kind.RESOURCE_KEY: kind_resource(kind, [s for s in sources if type(s) is kind])
             for kind in SOURCE_TYPES}
    if len(intensities) > 1:
        raise intensities[1].refusal(
            f"a second grid intensity: one is declared at {intensities[0].where()}")
    built["accounting"] = accounting(site, intensities[0] if intensities else None)
    warehouse = Warehouse.from_env(site.location(site.warehouse or DEFAULT_WAREHOUSE))
    built["warehouse"] = warehouse
    built["taudb"] = (TaudbResource.from_env(site.taudb_url, site.taudb_schema)
                      or TaudbResource(url=embedded_url(warehouse.root)))
    built["workers"] = StepWorkers.from_env()
    return built


def kind_resource(kind: type[Source], instances: Sequence[Any]) -> dg.ConfigurableResource:
    """The resource of one source kind from its instances (checked unless the kind's folder
    variable replaces them), the environment's settings over the declared ones."""
    variables = {kind.FOLDERS_FIELD: kind.FOLDERS_ENV, **kind.variables()}
    if overriding(kind.FOLDERS_ENV):
        return validated(lambda: kind.RESOURCE.from_env([], **agreed_settings(kind, instances)),
                         variables, *instances)
    owners: dict[str, Any] = {}
    for instance in instances:
        readable_folder(instance, "path")
        validated(lambda i=instance: kind.RESOURCE(
            **{kind.FOLDERS_FIELD: [i.entry()]}, **i.declared_settings()), {}, instance)
        key = kind.PREFIX_KEY if kind.PREFIX_KEY in instance.model_fields_set else "path"
        for prefix in sorted(instance.prefixes()):
            if prefix in owners:
                first = owners[prefix]
                raise instance.refusal(
                    f"partition-key prefix {prefix!r} is also that of {first.where(key)}: "
                    "each instance of a kind needs its own name", key)
            owners[prefix] = instance
    return validated(lambda: kind.RESOURCE.from_env(
        [instance.entry() for instance in instances], **agreed_settings(kind, instances)),
        variables, *instances)


def agreed_settings(kind: type[Source], instances: Sequence[Any]) -> dict[str, Any]:
    """The kind's settings its instances declare; refused where two declare different
    values (a kind's settings belong to its one resource)."""
    agreed: dict[str, tuple[Any, Any]] = {}
    for instance in instances:
        for name, value in instance.declared_settings().items():
            value_and_owner = agreed.setdefault(name, (value, instance))
            if value_and_owner[0] != value:
                raise instance.refusal(
                    f"{value!r} differs from {value_and_owner[0]!r} declared at "
                    f"{value_and_owner[1].where(name)}: the {kind.__name__} instances share "
                    "their settings", name)
    return {name: value for name, (value, _) in agreed.items()}


def accounting(site: Site, intensity: GridIntensity | None) -> AccountingSettings:
    """The accounting settings: the site's zone, zones and PUE, the grid intensity's folders
    and basis; every carbon zone must have intensity data."""
    declared_site = {name: getattr(site, name) for name in ("time_zone", "zones", "pue")
                     if name in site.model_fields_set}
    declared = intensity.settings() if intensity else {}
    for name in INTENSITY_FOLDERS:
        if name in declared and not overriding(GridIntensity.variables()[name]):
            readable_folder(intensity, name)
    landing = declared.pop("intensity_landing", None)
    if landing is None and not overriding(accounting_env.LANDING_ENV):
        raise site.refusal("no grid intensity is declared (a components.GridIntensity "
                           "instance): the carbon zones have no intensity data", "zones")
    settings = validated(lambda: AccountingSettings.from_env(
        landing or "", **declared_site, **declared), ACCOUNTING_ENV, site, intensity)
    zones_covered(site, settings)
    return settings


def zones_covered(site: Site, settings: AccountingSettings) -> None:
    """Refuses a carbon zone that no intensity file names, neither it nor its yearly
    fallback. Only the files' zone columns are read, at each load (every run worker's
    too): the cost grows with the files' rows, not with their other columns, and the
    figures are not checked (a zone whose cells are all empty counts). A folder holding a
    file whose zones cannot be read (not a CSV, a header of neither format) checks nothing:
    the file is data, which the carbon_intensity asset refuses naming it (the
    configuration, and so every other asset, stays loadable)."""
    try:
        present = zones_in_folder(settings.intensity_landing)
    except InputError:
        return
    for key, zone in settings.zones.items():
        if zone in present or settings.yearly_fallback.get(zone) in present:
            continue
        message = (f"zone {zone!r} has no intensity data in {settings.intensity_landing} "
                   f"(zones there: {', '.join(sorted(present)) or 'none'})")
        variable = accounting_env.MAPPING_ENV["zones"]
        if overriding(variable):
            raise InputError(f"${variable}", message, field=key)
        raise site.refusal(message, "zones", key)


def readable_folder(declaration: Any, key: str) -> None:
    """Refuses a folder field ``key`` that is not a folder this process can list."""
    folder = declaration.folder(getattr(declaration, key))
    if not folder.exists():
        raise declaration.refusal(f"folder {folder} does not exist", key)
    if not folder.is_dir():
        raise declaration.refusal(f"{folder} is not a folder", key)
    if not os.access(folder, os.R_OK | os.X_OK):
        raise declaration.refusal(f"folder {folder} is not readable", key)


def validated(build: Callable[[], T], variables: Mapping[str, str], *declarations: Any) -> T:
    """``build()``; a value its resource refuses is refused naming where it came from: the
    variable that ``variables`` (the resource's field -> its variable) gives the refused
    field, with its value, where that variable is set (it replaced the YAML); else the key
    of the first of ``declarations`` (None: not declared) that has the field."""
    try:
        return build()
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        loc = [str(part) for part in first["loc"]]
        for key in reversed(loc):
            value = overriding(variables.get(key))
            if value:
                raise InputError(f"${variables[key]}", f"{value!r}: {first['msg']}") from err
        for declaration in filter(None, declarations):
            keys = [key for key in loc if key in type(declaration).model_fields]
            if keys:
                raise declaration.refusal(first["msg"], keys[-1]) from err
        raise


def overriding(variable: str | None) -> str:
    """The value of ``variable`` where it overrides the YAML (set and not blank), else
    ``""``."""
    return os.environ.get(variable, "").strip() if variable else ""
