"""Component types of the sources: one instance per data root, landing folder or archive.

Each instance declares one folder and, optionally, its kind's settings (the quiet period,
the time zone of a landing folder's reports...). Several instances of one kind make one
resource, as several folders in one resource do today: its partition keys start with each
folder's name (a GPU data root's ``name``), so the kind's assets, sensor and job serve
them all; the GPU data roots keep one sensor each. A kind's settings are the resource's,
shared by its instances: declared on any of them, they must agree
(``components/centre.py``). The instances build no definitions of their own: the site
(``components/site.py``) assembles the resources from all of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import dagster as dg

from components.declaration import Declaration
from components.fields import fields_of, folder, model_of
from resources import (
    AccountingSettings,
    ClusterCockpitArchive,
    DataRoot,
    GeopmReportSource,
    GpuBenchmarkSource,
    PowerapiSource,
    TauProfileSource,
    accounting,
    clustercockpit,
    geopm,
    gpu,
    powerapi,
    taudb,
)
from resources.landing import LandingFolders


class Source(dg.Component, dg.Resolvable):
    """An instance of a source kind: a folder of the kind's resource, and its settings."""

    #: The key of the resource the kind's instances make, and its type.
    RESOURCE_KEY: ClassVar[str]
    RESOURCE: ClassVar[type[dg.ConfigurableResource]]
    #: The resource's field listing its folders, and the variable that replaces them all.
    FOLDERS_FIELD: ClassVar[str]
    FOLDERS_ENV: ClassVar[str]
    #: The YAML key an instance's partition-key prefix comes from.
    PREFIX_KEY: ClassVar[str] = "path"
    #: The kind's settings' variables (setting -> variable), which override the YAML.
    SETTINGS_ENV: ClassVar[Mapping[str, str]]

    @classmethod
    def variables(cls) -> dict[str, str]:
        """The variable overriding each YAML key that has one (``path``: all the kind's
        folders)."""
        return {"path": cls.FOLDERS_ENV, **cls.SETTINGS_ENV}

    @classmethod
    def settings_fields(cls) -> list[str]:
        """The kind's settings: the resource's fields other than its folders."""
        return [name for name in cls.RESOURCE.model_fields if name != cls.FOLDERS_FIELD]

    def declared_settings(self: Any) -> dict[str, Any]:
        """The kind's settings this instance declares (not those left to their default)."""
        return {name: getattr(self, name) for name in self.settings_fields()
                if name in self.model_fields_set}

    def entry(self: Any) -> Any:
        """This instance's item of the resource's folder list (a folder, resolved)."""
        return str(self.folder(self.path))

    def prefixes(self: Any) -> set[str]:
        """The partition-key prefixes this instance's folder gives (its folder's name)."""
        return {Path(self.entry()).resolve().name}

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """None of its own: the site builds the kind's resource and sensors from every
        instance (``components/centre.py``)."""
        return dg.Definitions()



def _settings_of(resource: type[dg.ConfigurableResource], folders_field: str,
                 exclude: Iterable[str] = ()) -> dict[str, Any]:
    """The resource's settings but ``exclude`` as optional fields (undeclared: the
    resource's default)."""
    names = [name for name in resource.model_fields if name != folders_field]
    return fields_of(resource, names, optional=names, exclude=exclude)


class GpuDataRoot(model_of(
        "GpuDataRootFields", "A GPU data root's fields.", fields_of(DataRoot),
        _settings_of(GpuBenchmarkSource, "data_roots", exclude=DataRoot.model_fields)), Source):
    """A GPU benchmark data root (``experiment/benchmark/run/repetition``), watched by a
    sensor of its own; partition keys ``<name>/<experiment>/<benchmark>/<run>/<rep>``."""

    RESOURCE_KEY: ClassVar[str] = "gpu_source"
    RESOURCE: ClassVar[type[dg.ConfigurableResource]] = GpuBenchmarkSource
    FOLDERS_FIELD: ClassVar[str] = "data_roots"
    FOLDERS_ENV: ClassVar[str] = gpu.ENV
    PREFIX_KEY: ClassVar[str] = "name"
    SETTINGS_ENV: ClassVar[Mapping[str, str]] = gpu.SETTINGS_ENV

    @classmethod
    def variables(cls) -> dict[str, str]:
        """The data root's keys are replaced with the roots of ``$JOULEHOUSE_GPU_DATA_ROOTS``
        (a JSON list of them, or folders); the variable of a source setting that a data
        root sets for itself (``ready_when_complete``) is the default of the roots that
        leave it unset, not an override."""
        return {**cls.SETTINGS_ENV, **dict.fromkeys(DataRoot.model_fields, cls.FOLDERS_ENV)}

    @classmethod
    def settings_fields(cls) -> list[str]:
        """The source's settings but those each data root sets for itself."""
        return [name for name in super().settings_fields() if name not in DataRoot.model_fields]

    def entry(self) -> DataRoot:
        return DataRoot(**{**{name: getattr(self, name) for name in DataRoot.model_fields},
                           "path": str(self.folder(self.path))})

    def prefixes(self) -> set[str]:
        return {self.entry().key_prefix}


#: The landing folders' one setting read from the environment (shared by every source).
QUIET_ENV = {"quiet_period_s": gpu.SETTINGS_ENV["quiet_period_s"]}


class Landing(Source):
    """An instance of a landing-folder kind (``resources/landing.py``)."""

    FOLDERS_FIELD: ClassVar[str] = "landing_folders"
    SETTINGS_ENV: ClassVar[Mapping[str, str]] = QUIET_ENV


def _landing_fields(resource: type[LandingFolders], what: str, keys: str
                    ) -> type[Declaration]:
    """The fields of one landing folder of ``resource``: the folder (its partition ``keys``),
    the kind's settings."""
    return model_of(f"{resource.__name__}LandingFields", f"A {what} landing folder's fields.",
                    folder(f"Folder where {what} land; partition keys {keys}."),
                    _settings_of(resource, "landing_folders"))


class TauLanding(_landing_fields(TauProfileSource, "TAU profile sets",
                                "<folder name>/<YYYY-MM-DD>, the UTC day of each set's "
                                "start"), Landing):
    """A folder where TAU profile sets land (a sub-folder or .ppk file each)."""

    RESOURCE_KEY: ClassVar[str] = "tau_profiles"
    RESOURCE: ClassVar[type[dg.ConfigurableResource]] = TauProfileSource
    FOLDERS_ENV: ClassVar[str] = taudb.LANDING_ENV


class GeopmLanding(_landing_fields(GeopmReportSource, "GEOPM reports",
                                   "<folder name>/<YYYY-MM-DD>, the UTC day of each "
                                   "report's start"), Landing):
    """A folder where GEOPM reports land (one file per job)."""

    RESOURCE_KEY: ClassVar[str] = "geopm_source"
    RESOURCE: ClassVar[type[dg.ConfigurableResource]] = GeopmReportSource
    FOLDERS_ENV: ClassVar[str] = geopm.LANDING_ENV
    SETTINGS_ENV: ClassVar[Mapping[str, str]] = {**QUIET_ENV, "timezone": geopm.TIMEZONE_ENV}


class PowerapiLanding(_landing_fields(PowerapiSource, "PowerAPI report files",
                                      "<folder name>/<YYYY-MM-DD>, the UTC day of each "
                                      "entry's first report"), Landing):
    """A folder where PowerAPI report files (or folders of them) land."""

    RESOURCE_KEY: ClassVar[str] = "powerapi_source"
    RESOURCE: ClassVar[type[dg.ConfigurableResource]] = PowerapiSource
    FOLDERS_ENV: ClassVar[str] = powerapi.LANDING_ENV
    SETTINGS_ENV: ClassVar[Mapping[str, str]] = {**QUIET_ENV, **powerapi.READER_ENV}


class ClusterCockpitArchiveRoot(model_of(
        "ClusterCockpitArchiveRootFields", "A ClusterCockpit job archive's fields.",
        folder("cc-backend job archive root (the folder holding version.txt)."),
        _settings_of(ClusterCockpitArchive, "archive_roots")), Source):
    """A ClusterCockpit job archive; partition keys ``<cluster>/<job-id block>``, so its
    clusters' names are its prefixes."""

    RESOURCE_KEY: ClassVar[str] = "cc_archive"
    RESOURCE: ClassVar[type[dg.ConfigurableResource]] = ClusterCockpitArchive
    FOLDERS_FIELD: ClassVar[str] = "archive_roots"
    FOLDERS_ENV: ClassVar[str] = clustercockpit.ARCHIVE_ENV
    SETTINGS_ENV: ClassVar[Mapping[str, str]] = clustercockpit.CC_SETTINGS_ENV

    def prefixes(self) -> set[str]:
        """The archive's clusters (its sub-folders)."""
        return {child.name for child in Path(self.entry()).iterdir() if child.is_dir()}


#: The variable overriding each field of AccountingSettings (``resources/accounting.py``).
ACCOUNTING_ENV = {"intensity_landing": accounting.LANDING_ENV, **accounting.ENV,
                  **accounting.MAPPING_ENV}
#: The fields of AccountingSettings a grid-intensity instance declares (the site the rest).
INTENSITY_FIELDS = ["intensity_landing", "basis", "yearly_fallback", "tariff_landing",
                    "tariff_sites"]
#: Those of them that are folders.
INTENSITY_FOLDERS = ["intensity_landing", "tariff_landing"]


class GridIntensity(model_of(
        "GridIntensityFields", "The grid intensity and tariff fields.",
        fields_of(AccountingSettings, INTENSITY_FIELDS,
                  optional=[f for f in INTENSITY_FIELDS if f != "intensity_landing"])),
        dg.Component, dg.Resolvable):
    """Where grid carbon intensity and time-of-use tariffs land (one per centre)."""

    @classmethod
    def variables(cls) -> dict[str, str]:
        """The variable overriding each YAML key."""
        return {key: variable for key, variable in ACCOUNTING_ENV.items()
                if key in INTENSITY_FIELDS}

    def settings(self) -> Mapping[str, Any]:
        """The declared AccountingSettings fields, folders resolved."""
        return {name: str(self.folder(value)) if name in INTENSITY_FOLDERS else value
                for name, value in ((n, getattr(self, n)) for n in self.model_fields_set)}

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """None of its own: the site's accounting resource takes these settings."""
        return dg.Definitions()


SOURCE_TYPES: list[type[Source]] = [GpuDataRoot, TauLanding, GeopmLanding, PowerapiLanding,
                                    ClusterCockpitArchiveRoot]
