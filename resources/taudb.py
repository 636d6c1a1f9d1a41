"""TAUdb and the folders where TAU profiles land.

``TaudbResource.url`` is SQLAlchemy-style: the embedded default is the
SQLite file ``taudb.sqlite`` beside the warehouse tables; production passes
``dg.EnvVar("JOULEHOUSE_TAUDB_URL")`` (e.g. ``postgresql://joulehouse@db:5432/perf``,
password in the URL held by the environment, or in libpq's ``PGPASSWORD`` /
``~/.pgpass``), so no secret is written in code or configuration files.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
from pydantic import Field

from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.warehouse import is_url
from resources.landing import Folders, LandingFolders

EMBEDDED_FILE = "taudb.sqlite"
URL_ENV = "JOULEHOUSE_TAUDB_URL"
SCHEMA_ENV = "JOULEHOUSE_TAUDB_SCHEMA"
LANDING_ENV = "JOULEHOUSE_TAU_LANDING"


def embedded_url(folder: str | os.PathLike[str]) -> str:
    """The URL of the embedded SQLite TAUdb in ``folder`` (``taudb.sqlite``); a warehouse on
    an object store has no folder for it: ValueError, asking for ``$JOULEHOUSE_TAUDB_URL``."""
    if is_url(folder):
        raise ValueError(f"the warehouse {folder} is on an object store, where the embedded "
                         f"SQLite TAUdb cannot live: set ${URL_ENV} (e.g. postgresql://...)")
    return f"sqlite:///{Path(folder).resolve() / EMBEDDED_FILE}"


class TaudbResource(dg.ConfigurableResource):
    """A TAUdb database (schema created on first load)."""

    url: str = Field(description="sqlite:///FILE or postgresql://USER@HOST:PORT/DB.")
    schema_name: str | None = Field(
        default=None, alias="schema",
        description="PostgreSQL schema holding the TAUdb tables (default: public).")

    @classmethod
    def from_env(cls, url: str | None = None, schema: str | None = None
                 ) -> TaudbResource | None:
        """Each setting from its variable where set, else the declared one, independently:
        the URL from ``$JOULEHOUSE_TAUDB_URL`` (read at run time, as ``dg.EnvVar``: the UI
        shows the variable's name, never its value) else ``url``; the schema from
        ``$JOULEHOUSE_TAUDB_SCHEMA`` else ``schema``. None when there is no URL, for the
        embedded SQLite file beside the warehouse (``embedded_url``; SQLite has no schemas)."""
        url = dg.EnvVar(URL_ENV) if os.environ.get(URL_ENV) else url
        if not url:
            return None
        return cls(url=url, schema=os.environ.get(SCHEMA_ENV) or schema)

    def open(self) -> TaudbDatabase:
        """A new connection; use it as a context manager so that it is closed."""
        return TaudbDatabase(self.url, self.schema_name)


class TauProfileSource(LandingFolders):
    """Folders where TAU profile sets land (one sub-folder or .ppk file per set)."""

    @classmethod
    def from_env(cls, default_folder: Folders, **settings) -> TauProfileSource:
        """Landing folders from ``$JOULEHOUSE_TAU_LANDING`` (separated by ``os.pathsep``),
        else ``default_folder``; the quiet period from ``$JOULEHOUSE_QUIET_PERIOD_S`` where
        set (shared with the GPU data roots), else ``settings``."""
        return cls(**{**settings, **cls.landing_settings_from_env(LANDING_ENV, default_folder)})
