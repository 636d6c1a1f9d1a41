"""The plot of energy per region: what it draws (kJ per region and component, the tail summed)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from joulehouse.geopm.plots import MAX_REGIONS, region_energy_kj, region_energy_png


def _rollup(energies_j: list[float]) -> pd.DataFrame:
    names = [f"r{i}" for i in range(len(energies_j))]
    return pd.DataFrame({"region": names, "package_energy_j": energies_j,
                         "dram_energy_j": [e / 10 for e in energies_j],
                         "gpu_energy_j": np.nan})


def test_regions_most_energy_first_and_the_tail_summed():
    energies = [1000.0 * (i + 1) for i in range(MAX_REGIONS + 5)]  # r19 has the most
    drawn = region_energy_kj(_rollup(energies))
    assert len(drawn) == MAX_REGIONS
    assert list(drawn.index[:3]) == ["r19", "r18", "r17"]
    assert drawn.index[-1] == "other (6 regions)"
    assert drawn["package_energy_kj"].iloc[-1] == pytest.approx(1 + 2 + 3 + 4 + 5 + 6)  # kJ
    assert drawn["dram_energy_kj"].sum() == pytest.approx(sum(energies) / 10 / 1e3)
    assert drawn["gpu_energy_kj"].isna().all()  # no GPU in the report: no bar, not 0


def test_a_region_under_two_hashes_is_one_bar():
    rollup = pd.concat([_rollup([500.0, 200.0]), _rollup([300.0])], ignore_index=True)
    drawn = region_energy_kj(rollup)
    assert drawn["package_energy_kj"].to_dict() == {"r0": pytest.approx(0.8),
                                                   "r1": pytest.approx(0.2)}
    assert region_energy_png(rollup, "two hashes").startswith(b"\x89PNG\r\n\x1a\n")
