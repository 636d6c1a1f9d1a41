"""How often the landing sensors tick: ``$JOULEHOUSE_SENSOR_INTERVAL_S`` (seconds, default 30).

Read when the definitions load (Dagster fixes a sensor's minimum interval in
its definition); the sources' other settings are resource fields
(``resources/``), also set from the environment.
"""

import os

INTERVAL_ENV = "JOULEHOUSE_SENSOR_INTERVAL_S"
DEFAULT_INTERVAL_S = 30


def sensor_interval_s() -> int:
    """The minimum seconds between two ticks of a landing sensor; raises ValueError naming
    the variable when it is not a positive whole number."""
    value = os.environ.get(INTERVAL_ENV, "").strip()
    if not value:
        return DEFAULT_INTERVAL_S
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{INTERVAL_ENV} must be a whole number of seconds >= 1, not {value!r}")
    return int(value)
