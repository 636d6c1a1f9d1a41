"""The warehouse resource: where the Parquet tables are, a folder or an object store."""

from __future__ import annotations

import os

import dagster as dg
from pydantic import Field

from joulehouse import warehouse

ENV = warehouse.WAREHOUSE_ENV
ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID"
SECRET_KEY_ENV = "AWS_SECRET_ACCESS_KEY"


class Warehouse(dg.ConfigurableResource):
    """Parquet tables under ``root``: a local folder or a mounted shared path, or an
    S3-compatible object store ``s3://bucket/prefix`` that every run worker reaches."""

    root: str = Field(default="warehouse",
                      description="A folder, or s3://BUCKET/PREFIX on an object store.")
    s3_endpoint: str | None = Field(
        default=None, description="The object store's endpoint (http://HOST:PORT) when it "
        "is not AWS.")
    s3_region: str | None = Field(default=None, description="The bucket's region.")
    access_key_id: str | None = Field(
        default=None, description="The object store's access key: dg.EnvVar only.")
    secret_access_key: str | None = Field(
        default=None, description="The object store's secret key: dg.EnvVar only.")

    @classmethod
    def from_env(cls, default: str | os.PathLike[str]) -> Warehouse:
        """``$JOULEHOUSE_WAREHOUSE`` if set, else ``default``. For an object store, the
        endpoint ``$JOULEHOUSE_S3_ENDPOINT`` and region ``$AWS_DEFAULT_REGION`` where set,
        and the credentials as ``dg.EnvVar("AWS_ACCESS_KEY_ID")`` and
        ``dg.EnvVar("AWS_SECRET_ACCESS_KEY")`` where set (read at run time; the UI shows
        the variables' names, never their values)."""
        root = os.environ.get(ENV) or str(default)
        if not warehouse.is_url(root):
            return cls(root=root)
        store = warehouse.ObjectStore.from_env()
        return cls(root=root, s3_endpoint=store.endpoint, s3_region=store.region,
                   **{field: dg.EnvVar(variable) for field, variable in (
                       ("access_key_id", ACCESS_KEY_ENV),
                       ("secret_access_key", SECRET_KEY_ENV)) if os.environ.get(variable)})

    def tables(self) -> warehouse.Warehouse:
        """The core warehouse over ``root``."""
        store = warehouse.ObjectStore(endpoint=self.s3_endpoint, region=self.s3_region,
                                      access_key=self.access_key_id,
                                      secret_key=self.secret_access_key)
        return warehouse.Warehouse(self.root, store)
