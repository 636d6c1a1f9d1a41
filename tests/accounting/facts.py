"""Energy facts for the accounting tests, written as (entity, start, end, energy) rows."""

import pandas as pd

from joulehouse.accounting import entities
from joulehouse.facts import ENERGY_FACTS_COLUMNS


def facts_of(*rows: tuple[str, str, str, float], source: str = "clustercockpit"
             ) -> pd.DataFrame:
    """energy_facts rows of ``source`` (component node, method power), one per
    ``(entity, start, end, energy_j)`` with UTC times, attributed to their groups."""
    frame = pd.DataFrame([
        {"source": source, "entity": entity, "component": "node",
         "window_start": pd.Timestamp(a, tz="UTC"), "window_end": pd.Timestamp(b, tz="UTC"),
         "duration_s": (pd.Timestamp(b) - pd.Timestamp(a)).total_seconds(),
         "energy_j": float(e), "method": "power"} for entity, a, b, e in rows],
        columns=ENERGY_FACTS_COLUMNS)
    return entities.attribute(frame)
