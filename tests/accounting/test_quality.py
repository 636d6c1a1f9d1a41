"""fact_quality: each fact's sampling interval and covered fraction, from its source's tables."""

import numpy as np
import pandas as pd
import pytest

from joulehouse.accounting import quality
from joulehouse.facts import ENERGY_FACTS_COLUMNS

T0 = pd.Timestamp("2024-01-15 10:00", tz="UTC")


def fact(source, entity, component, method, seconds=100.0):
    return {"source": source, "entity": entity, "component": component, "window_start": T0,
            "window_end": T0 + pd.Timedelta(seconds=seconds), "duration_s": seconds,
            "energy_j": 1000.0, "method": method}


def test_gpu_clustercockpit_and_powerapi_facts_get_their_sources_figures():
    facts = pd.DataFrame([
        fact("gpu-benchmark", "root/e/b/run/0", "gpu", "counter"),
        fact("gpu-benchmark", "root/e/b/run/0", "gpu", "samples"),
        fact("clustercockpit", "c/1/1", "cpu", "power", seconds=600.0),
        fact("clustercockpit", "c/1/1", "cpu", "cc-backend", seconds=600.0),
        fact("powerapi", "s/all", "cpu", "measured"),
        fact("geopm", "g/r.report/n1", "cpu", "rapl"),
    ], columns=ENERGY_FACTS_COLUMNS)
    times = pd.DataFrame({"time": T0 + pd.to_timedelta([0.0, 0.1, 0.3, 0.4], unit="s")})
    gpu_figures = pd.DataFrame({"entity": ["root/e/b/run/0"], "duration_s": [100.0],
                                **{f"{m}_gap_s": [g] for m, g in (
                                    ("counter", 0.0), ("power", 0.0), ("samples", 4.0),
                                    ("external", np.nan))},
                                "counter_step_s": [quality.median_step_s(times)],
                                "power_step_s": [0.1], "samples_step_s": [0.02],
                                "external_step_s": [np.nan]})
    cc_energy = pd.DataFrame({"job": ["c/1/1"], "metric": ["cpu_power"], "kind": ["power"],
                              "duration_s": [600.0], "covered_fraction": [0.95]})
    # two hosts, one series each: 10 and 12 samples (with the missing) in 600 s
    cc_stats = pd.DataFrame({"job": ["c/1/1"] * 2, "metric": ["cpu_power"] * 2,
                             "series": [1, 1], "samples": [9, 12], "missing": [1, 0]})
    windows = pd.DataFrame({"sensor": ["s"], "target": ["all"], "component": ["cpu"],
                            "window_start": [T0], "window_end": [T0 + pd.Timedelta("100s")],
                            "method": ["measured"], "duration_s": [100.0],
                            "covered_s": [100.0]})
    table = quality.fact_quality(facts, gpu_figures=gpu_figures, cc_energy=cc_energy,
                                 cc_stats=cc_stats, powerapi_windows=windows)
    got = table.set_index(["entity", "method"])
    assert got.loc[("root/e/b/run/0", "counter"), "sampling_interval_s"] == pytest.approx(0.1)
    assert got.loc[("root/e/b/run/0", "counter"), "covered_fraction"] == 1.0
    assert got.loc[("root/e/b/run/0", "samples"), ["sampling_interval_s", "covered_fraction"]
                   ].tolist() == pytest.approx([0.02, 0.96])
    assert got.loc[("c/1/1", "power"), "sampling_interval_s"] == pytest.approx(
        600 * (1 / 10 + 1 / 12) / 2)
    assert got.loc[("c/1/1", "power"), "covered_fraction"] == 0.95
    assert got.loc[("c/1/1", "cc-backend"), ["sampling_interval_s", "covered_fraction"]
                   ].isna().all()  # cc-backend's figure: neither
    assert got.loc[("s/all", "measured"), "covered_fraction"] == 1.0
    assert np.isnan(got.loc[("s/all", "measured"), "sampling_interval_s"])
    assert got.loc[("g/r.report/n1", "rapl"), ["sampling_interval_s", "covered_fraction"]
                   ].isna().all()
    assert len(table) == len(facts)
