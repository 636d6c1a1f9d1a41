"""The site's component type: its time zone, carbon zones, PUE, warehouse and TAUdb.

One per centre. Its ``build_defs`` is where the project's configuration comes together:
it reads every source instance of the component tree, refuses a bad configuration naming
the file, line and key, and returns the resources the assets use and the GPU data roots'
sensors (``components/centre.py``).
"""

from __future__ import annotations

import dagster as dg

from components.centre import centre_definitions, resources
from components.fields import fields_of, model_of
from components.sources import ACCOUNTING_ENV, SOURCE_TYPES, GridIntensity
from joulehouse import warehouse
from resources import AccountingSettings, TaudbResource, Warehouse, taudb


class Site(model_of(
        "SiteFields", "The site's fields.",
        fields_of(AccountingSettings, ["time_zone", "zones", "pue"],
                  optional=["time_zone", "zones", "pue"]),
        fields_of(Warehouse, ["root"], rename={"root": "warehouse"}, optional=["root"]),
        fields_of(TaudbResource, ["url", "schema_name"],
                  rename={"url": "taudb_url", "schema_name": "taudb_schema"},
                  optional=["url", "schema_name"])),
        dg.Component, dg.Resolvable):
    """The site: local days, carbon zones per source, PUE, warehouse (default ``warehouse/``
    in the project) and TAUdb (default: the SQLite file beside the warehouse tables; a
    secret in the URL belongs in ``$JOULEHOUSE_TAUDB_URL``, never in the YAML)."""

    @classmethod
    def variables(cls) -> dict[str, str]:
        """The variable overriding each YAML key."""
        return {**{key: ACCOUNTING_ENV[key] for key in ("time_zone", "zones", "pue")},
                "warehouse": warehouse.WAREHOUSE_ENV, "taudb_url": taudb.URL_ENV,
                "taudb_schema": taudb.SCHEMA_ENV}

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """The resources and the GPU sensors from every instance the project declares."""
        tree = context.component_tree
        sites = sorted(tree.get_all_components(Site), key=lambda site: site.file)
        if len(sites) > 1:
            raise sites[1].refusal(f"a second site: one is declared at {sites[0].where()}")
        return centre_definitions(resources(
            self, [source for kind in SOURCE_TYPES for source in tree.get_all_components(kind)],
            tree.get_all_components(GridIntensity)))


