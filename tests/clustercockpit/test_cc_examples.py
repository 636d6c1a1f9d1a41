"""The bundled example archive (examples/clustercockpit/archive) reads whole and right."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulehouse.clustercockpit.energy import host_energy, job_energy
from joulehouse.clustercockpit.jobs import read_jobs
from joulehouse.clustercockpit.layout import archive_level, find_jobs
from joulehouse.clustercockpit.readers import read_cluster, read_meta, read_samples

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clustercockpit" / "archive"


def test_example_archive():
    table = read_jobs(EXAMPLE)
    assert table.errors == []
    assert table.jobs["job"].tolist() == [
        "emmy/1403244/1608923076", "fritz/398764/1675954353", "fritz/398955/1675956725",
        "taurus/20639587/1635856524"]
    energies = {}
    for ref in find_jobs(EXAMPLE):
        meta = read_meta(ref)
        cluster = read_cluster(EXAMPLE, ref.cluster)
        energy = job_energy(meta, host_energy(meta, read_samples(ref, meta, cluster), cluster))
        energies[ref.key] = energy.set_index("metric")
    emmy = energies["emmy/1403244/1608923076"].loc["rapl_power"]
    assert emmy["hosts"] == 4 and emmy["duration_s"] == 21600
    assert emmy["energy_j"] == pytest.approx(emmy["mean_x_duration_j"], rel=0.01)
    meta = read_meta(next(r for r in find_jobs(EXAMPLE, "emmy")))
    formula = round(meta["statistics"]["rapl_power"]["avg"] * 4 * 21600 / 3.6e6, 2)
    assert emmy["energy_cc_kwh"] == formula > 0
    assert table.jobs.loc[0, "energy"] == formula
    assert sorted(energies["fritz/398955/1675956725"].index) == ["cpu_power", "mem_power"]


def test_archive_level_tells_each_folder_of_the_tree(tmp_path):
    job = EXAMPLE / "fritz" / "398" / "764" / "1675954353"
    assert [archive_level(folder) for folder in (job, *job.parents[:4])] == [
        (4, EXAMPLE), (3, EXAMPLE), (2, EXAMPLE), (1, EXAMPLE), (0, EXAMPLE)]
    assert archive_level(job / "meta.json") is None  # a file
    assert archive_level(EXAMPLE.parent) is None  # no version.txt up to four levels
    (tmp_path / "version.txt").write_text("3\n")
    (tmp_path / "x" / "notes" / "001" / "1").mkdir(parents=True)  # not jobId/1000 digits
    assert archive_level(tmp_path / "x" / "notes" / "001" / "1") is None
    (tmp_path / "x" / "7" / "01").mkdir(parents=True)  # jobId%1000 has three digits
    assert archive_level(tmp_path / "x" / "7" / "01") is None
    assert archive_level(tmp_path / "x") == (1, tmp_path)
