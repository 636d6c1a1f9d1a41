"""ClusterCockpit units ``{base, prefix}`` to SI base units.

Archives from v1 on write a unit as ``{"base": "B/s", "prefix": "G"}``; the
value times the prefix's factor is in the base unit. Prefixes are decimal
(cc-lib: K = 1e3 ... E = 1e18). Real archives use bases outside the schema's
enum (``load``, ``%``, ``packets/s``, ``Flops/s``); a base is kept as it is
(aliases spelled out in :data:`BASE_ALIASES` are renamed), but an unknown
prefix, or a unit that is not ``{base, prefix?}``, is refused: a value whose
scale is unknown cannot be converted.
"""

from __future__ import annotations

from typing import Any

PREFIX_FACTORS = {
    "": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9,
}
#: Spellings of a base unit seen in real archives -> the schema's spelling.
BASE_ALIASES = {"Flops/s": "F/s", "Flops": "F", "Bytes": "B", "Bytes/s": "B/s", "C": "°C"}
POWER_UNIT = "W"
ENERGY_UNIT = "J"


class UnitError(ValueError):
    """A unit that cannot be converted to SI."""


def to_si(unit: Any) -> tuple[str, float]:
    """(SI base unit, factor) such that ``value * factor`` is in that unit.

    ``unit`` is the JSON object ``{"base": ..., "prefix": ...}`` (prefix
    optional or empty). Raises UnitError for anything else or an unknown
    prefix.
    """
    if not isinstance(unit, dict) or not isinstance(unit.get("base"), str):
        raise UnitError(f"not a unit {{base, prefix}}: {unit!r}")
    prefix = unit.get("prefix") or ""
    if not isinstance(prefix, str) or prefix not in PREFIX_FACTORS:
        raise UnitError(f"unknown unit prefix {prefix!r}")
    base = unit["base"]
    return BASE_ALIASES.get(base, base), PREFIX_FACTORS[prefix]
