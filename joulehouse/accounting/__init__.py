"""Energy accounting over ``energy_facts`` (docs/accounting.md): rollups per day and month,
grid carbon intensity as a source, and carbon per fact. Dagster-free."""
