"""How often the sensors tick, and how long a tick may work.

``$JOULEHOUSE_SENSOR_INTERVAL_S`` (seconds, default 30): the minimum interval
between two ticks of a sensor. ``$JOULEHOUSE_AUTOMATION_INTERVAL_S`` (seconds, default
the sensors'): the same for the automation sensors, whose evaluation costs grow with the
assets' partitions (the asset daemon looks every 5 s, so less acts as 5).
``$JOULEHOUSE_SENSOR_TICK_BUDGET_S`` (seconds,
default 20): the time a tick that has more to hand out than it can fills
(``sensors/tick_budget.py``), well under the daemon's 60 s sensor evaluation
timeout. Read when the definitions load (Dagster fixes a sensor's minimum
interval in its definition); the sources' other settings are resource fields
(``resources/``), also set from the environment.
"""

import os

INTERVAL_ENV = "JOULEHOUSE_SENSOR_INTERVAL_S"
DEFAULT_INTERVAL_S = 30
AUTOMATION_INTERVAL_ENV = "JOULEHOUSE_AUTOMATION_INTERVAL_S"
BUDGET_ENV = "JOULEHOUSE_SENSOR_TICK_BUDGET_S"
DEFAULT_BUDGET_S = 20
#: The sources' quiet period (their resources' ``quiet_period_s``), which the intensity and
#: tariff sensor, with no resource of its own for it, reads here.
QUIET_ENV = "JOULEHOUSE_QUIET_PERIOD_S"
DEFAULT_QUIET_S = 60


def _seconds(variable: str, default: int) -> int:
    """The whole number of seconds >= 1 in ``$variable``, else ``default``; raises
    ValueError naming the variable when it holds something else."""
    value = os.environ.get(variable, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{variable} must be a whole number of seconds >= 1, not {value!r}")
    return int(value)


def sensor_interval_s() -> int:
    """The minimum seconds between two ticks of a sensor."""
    return _seconds(INTERVAL_ENV, DEFAULT_INTERVAL_S)


def automation_interval_s() -> int:
    """The minimum seconds between two evaluations of the automation; default the sensors'
    interval (:func:`sensor_interval_s`)."""
    return _seconds(AUTOMATION_INTERVAL_ENV, sensor_interval_s())


def sensor_tick_budget_s() -> int:
    """The seconds a tick with more to hand out than it can works for."""
    return _seconds(BUDGET_ENV, DEFAULT_BUDGET_S)


def quiet_period_s() -> int:
    """The seconds a landing folder's newest change must be old before it is read."""
    return _seconds(QUIET_ENV, DEFAULT_QUIET_S)
