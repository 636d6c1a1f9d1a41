"""Synthetic grid intensity in the real export formats, tariff files, and facts with a known
carbon.

For the bundled example (``examples/intensity``), the tests and the benchmark. The
intensity of a zone follows a daily cycle, ``base + amplitude x sin(2 pi hour / 24)``
(gCO2e/kWh; the direct figure is ``DIRECT_SHARE`` of the life-cycle one), written
in Electricity Maps' CSV layout; yearly figures in OWID's. Nothing here is measured.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from joulehouse.accounting.intensity import EM_BASES, EM_TIME, OWID_VALUE
from joulehouse.accounting.tariff import COLUMNS
from joulehouse.facts import ENERGY_FACTS_COLUMNS

#: Direct (combustion) over life-cycle intensity in the synthetic series.
DIRECT_SHARE = 0.85


def cycle(times: pd.DatetimeIndex, base: float, amplitude: float) -> np.ndarray:
    """The synthetic life-cycle intensity (gCO2e/kWh) at ``times`` (UTC)."""
    hours = times.hour + times.minute / 60.0
    return base + amplitude * np.sin(2 * np.pi * hours / 24.0)


def electricity_maps_frame(zone: str, country: str, start: str, end: str, *,
                           step: str = "1h", base: float = 350.0,
                           amplitude: float = 100.0) -> pd.DataFrame:
    """An Electricity Maps export of ``zone`` from ``start`` (inclusive) to ``end``
    (exclusive) every ``step``: the portal's columns, in its order."""
    times = pd.date_range(start, end, freq=step, inclusive="left", tz="UTC")
    lca = np.round(cycle(times, base, amplitude), 2)
    return pd.DataFrame({
        EM_TIME: times.strftime("%Y-%m-%d %H:%M:%S"),
        "Country": country, "Zone Name": country, "Zone Id": zone,
        EM_BASES["direct"][0]: np.round(lca * DIRECT_SHARE, 2),
        EM_BASES["lca"][0]: lca,
        "Low Carbon Percentage": 50.0, "Renewable Percentage": 40.0,
        "Data Source": "synthetic (joulehouse.accounting.generator)",
        "Data Estimated": False, "Data Estimation Method": "",
    })


def owid_frame(rows: dict[tuple[str, str], dict[int, float]]) -> pd.DataFrame:
    """OWID's yearly table from ``{(entity, code): {year: gCO2/kWh}}``."""
    return pd.DataFrame(
        [{"Entity": entity, "Code": code, "Year": year, OWID_VALUE: value}
         for (entity, code), years in rows.items() for year, value in sorted(years.items())])


def write_csv(frame: pd.DataFrame, path: str | Path) -> Path:
    """``frame`` as a UTF-8 CSV at ``path`` (folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False, encoding="utf-8")
    return path


#: A tariff band: (weekdays as the tariff CSV writes them, start, end, price per kWh).
Band = tuple[str, str, str, float]


def write_tariff(path: str | Path, site: str, valid: tuple[str, str], bands: list[Band], *,
                 zone: str = "Europe/Berlin", currency: str = "EUR") -> Path:
    """A tariff file in Joulehouse's tariff CSV (``tariff.COLUMNS``) at ``path`` (folders
    created): ``site``'s ``bands`` in local time of ``zone``, valid on the local dates
    ``valid`` (first included, last excluded)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"{site},{zone},{valid[0]},{valid[1]},{days},{start},{end},{price},"
                   f"{currency}\n" for days, start, end, price in bands)
    path.write_text(",".join(COLUMNS) + "\n" + rows)
    return path


def facts(n: int, start: str, span: str, *, seed: int = 0,
          sources: tuple[str, ...] = ("clustercockpit", "powerapi")) -> pd.DataFrame:
    """``n`` energy_facts rows starting uniformly in ``[start, start + span)``, lasting 1 s
    to 6 h, at 50-500 W (energy = power x duration), from ``sources``; entities
    ``<group>/<job i>`` with groups ``g0`` .. ``g3``."""
    rng = np.random.default_rng(seed)
    begin = pd.Timestamp(start, tz="UTC").value
    offset = rng.integers(0, pd.Timedelta(span).value, n)
    duration_s = rng.integers(1, 6 * 3600, n).astype(float)
    power = rng.uniform(50.0, 500.0, n)
    window_start = pd.to_datetime(begin + offset, utc=True)
    index = np.arange(n)
    return pd.DataFrame({
        "source": np.asarray(sources, dtype=object)[index % len(sources)],
        "entity": pd.Series(index % 4).map("g{}".format) + "/" + pd.Series(index).astype(str),
        "component": "node",
        "window_start": window_start,
        "window_end": window_start + pd.to_timedelta(duration_s, unit="s"),
        "duration_s": duration_s,
        "energy_j": power * duration_s,
        "method": "power",
    }, columns=ENERGY_FACTS_COLUMNS)
