"""A GPU repetition's readings' figures, stored with its energy, give fact_quality and
waste exactly what its frames give; so do the figures kept for fact_quality
(``gpu_repetition_figures``), of energy stored with the figures or without them (older
code: the steps then from the stored frames) (joulehouse/accounting/repetition.py)."""

from dataclasses import replace

import pandas as pd
import pytest

from joulehouse.accounting import quality, waste
from joulehouse.accounting.repetition import (
    FIGURE_COLUMNS,
    figures_rows,
    stored_figures,
    with_reading_figures,
)
from joulehouse.gpu.energy import energy_facts_rows, repetition_energy
from joulehouse.gpu.generator import RepetitionSpec, write_repetition
from joulehouse.gpu.layout import RepetitionRef
from joulehouse.gpu.readers import read_repetition
from joulehouse.gpu.store import repetition_frames
from joulehouse.warehouse import Warehouse

KEY = "power-limit/bert/250W/0"


@pytest.fixture(scope="module")
def repetition(tmp_path_factory):
    """A generated 60 s repetition with every file, its frames and energy with the
    figures, read back from a warehouse as the accounting assets read it."""
    root = tmp_path_factory.mktemp("gpu")
    ref = RepetitionRef.from_key(root / "lab", KEY)
    write_repetition(ref.path, RepetitionSpec(), seed=3)
    rep = read_repetition(ref)
    frames = repetition_frames(rep)
    energy = with_reading_figures(repetition_energy(rep, data_root="lab"), frames)
    store = Warehouse(root / "warehouse")
    store.write_partition("gpu_repetition_energy", f"lab/{KEY}", energy)
    return frames, energy, store.read_table("gpu_repetition_energy")


def frames_stored(tmp_path, frames) -> Warehouse:
    """A warehouse holding the repetition's frames, as the GPU step stores them."""
    store = Warehouse(tmp_path / "warehouse")
    for name, frame in frames.items():
        store.write_partition(f"gpu_validated_frames/{name}", f"lab/{KEY}", frame)
    return store


def test_the_figures_give_the_frames_fact_quality(repetition, tmp_path):
    frames, energy, stored = repetition
    facts = energy_facts_rows(energy)
    assert set(facts["method"]) == {"counter", "power", "samples", "external"}
    steps_of_frames = {(f"lab/{KEY}", name): quality.median_step_s(frames[name])
                       for name in set(quality.GPU_FRAMES.values())}
    steps, _ = stored_figures(stored)
    assert steps == pytest.approx(steps_of_frames)
    assert steps[(f"lab/{KEY}", "gpu_power")] == pytest.approx(0.15, abs=0.02)  # the poll
    assert steps[(f"lab/{KEY}", "samples_total_power")] == pytest.approx(0.02, abs=0.002)
    # what fact_quality keeps of the repetition: the figures stored with its energy, or,
    # from energy stored without them (older code), its stored frames: the same rows
    figured = figures_rows(stored, frames_stored(tmp_path, {}))  # no frame read
    of_frames = figures_rows(stored.drop(columns=FIGURE_COLUMNS), frames_stored(tmp_path, frames))
    pd.testing.assert_frame_equal(figured, of_frames, check_exact=False, rtol=1e-12)
    experiment = energy[energy["phase"] == "experiment"]
    assert figured.to_dict("records") == [{
        "entity": f"lab/{KEY}", "duration_s": experiment["duration_s"].iloc[0],
        **{f"{m}_gap_s": experiment[f"{m}_gap_s"].iloc[0] for m in quality.GPU_FRAMES},
        **{f"{m}_step_s": steps_of_frames[(f"lab/{KEY}", frame)]
           for m, frame in quality.GPU_FRAMES.items()}}]
    table = quality.fact_quality(facts, gpu_figures=figured)
    assert table.set_index("method")["sampling_interval_s"].to_dict() == {
        m: steps_of_frames[(f"lab/{KEY}", frame)] for m, frame in quality.GPU_FRAMES.items()}
    assert table["covered_fraction"].notna().all()


def test_the_figures_give_the_frames_waste_and_only_for_their_rule(repetition):
    frames, energy, stored = repetition
    facts = energy_facts_rows(energy)
    _, judged = stored_figures(stored)
    assert list(judged) == [(f"lab/{KEY}", facts["window_start"].iloc[0],
                             facts["window_end"].iloc[0])]  # the experiment window only
    of_frames = waste.gpu_waste(facts, {f"lab/{KEY}": frames["gpu_power"]}.get)
    assert len(of_frames) == 1 and of_frames["energy_j"].iloc[0] > 0
    pd.testing.assert_frame_equal(waste.gpu_waste(facts, {}.get, judged), of_frames)
    # figures judged by another version or threshold of the rule are not taken
    for rule in (replace(waste.GPU_IDLE, version=2), replace(waste.GPU_IDLE, threshold=0.5)):
        assert stored_figures(stored, rule)[1] == {}
        assert waste.gpu_waste(facts, {}.get, stored_figures(stored, rule)[1], rule).empty


def test_a_repetition_without_utilisation_or_external_meter_keeps_its_energy(repetition):
    frames, energy, _ = repetition
    without = {name: frame for name, frame in frames.items() if name != "external_power"}
    without["gpu_power"] = frames["gpu_power"].drop(columns="util_gpu_pct")
    figured = with_reading_figures(energy[[c for c in energy if c not in FIGURE_COLUMNS]],
                                   without)
    steps, judged = stored_figures(figured)
    assert pd.isna(steps[(f"lab/{KEY}", "external_power")])
    assert steps[(f"lab/{KEY}", "gpu_power")] == pytest.approx(0.15, abs=0.02)
    assert list(judged.values()) == [None]  # not judged: no row of waste
    facts = energy_facts_rows(energy)
    assert waste.gpu_waste(facts, without.get, judged).empty


def test_energy_stored_without_the_figures_gives_none(repetition):
    _, energy, _ = repetition
    without = energy.drop(columns=FIGURE_COLUMNS)
    assert stored_figures(without) == ({}, {})
    assert stored_figures(pd.DataFrame()) == ({}, {})
