"""Joulehouse core: readers, schemas and energy arithmetic, free of Dagster."""
