"""Dagster component types: a centre declares its sources and its site in YAML under ``defs/``.

One ``defs.yaml`` per instance (``docs/configuration.md``). The types are a thin layer over
the resources in ``resources/``: their fields are the resources' own pydantic fields
(``components/fields.py``), and :class:`components.site.Site` assembles the resources
the assets use from every loaded instance (``components/centre.py``).
"""

from components.site import Site
from components.sources import (
    ClusterCockpitArchiveRoot,
    GeopmLanding,
    GpuDataRoot,
    GridIntensity,
    PowerapiLanding,
    TauLanding,
)

__all__ = ["ClusterCockpitArchiveRoot", "GeopmLanding", "GpuDataRoot", "GridIntensity",
           "PowerapiLanding", "Site", "TauLanding"]
