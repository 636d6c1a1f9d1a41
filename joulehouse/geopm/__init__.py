"""GEOPM reports (legacy 1.x text, 2.x/3.x YAML, 3.x geopmsession): layout, readers,
schemas, energy roll-ups and ``energy_facts`` rows; see docs/geopm.md."""
