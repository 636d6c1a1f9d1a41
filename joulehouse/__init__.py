"""Joulehouse core: readers, schemas and energy arithmetic, free of Dagster."""

from importlib.metadata import version

__version__ = version("joulehouse")
