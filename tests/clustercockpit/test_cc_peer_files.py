"""The other real files of the peer data: importer inputs and goldens, cluster.json, bundled copies."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from joulehouse.clustercockpit.conformance import meta_warnings
from joulehouse.clustercockpit.jobs import read_jobs
from joulehouse.clustercockpit.layout import JobRef
from joulehouse.clustercockpit.readers import read_cluster

#: importer test name -> (peer folder, archive folder of the same job)
IMPORTER_JOBS = {
    "fritzMinimal": ("cc-backend-importer-testdata", "fritz/398/764/1675954353"),
    "fritzError": ("cc-backend-importer-testdata", "fritz/398/955/1675956725"),
    "taurus": ("cc-backend-importer-testdata-2023-taurus", "taurus/20639/587/1635856524"),
}
#: taurus-golden.json of that cc-backend commit names another job (fritz 398764 with a
#: duration of 3400 s): a leftover of cc-backend's tests, not the taurus job's golden.
FOREIGN_GOLDENS = {"taurus"}


@pytest.mark.parametrize("name", sorted(IMPORTER_JOBS))
def test_importer_jobs_match_their_goldens(cc_data, assembled_archive, name):
    folder, job = IMPORTER_JOBS[name]
    source = cc_data / folder
    archived = assembled_archive / job
    # the archive holds byte-identical copies of the importer's inputs
    assert (source / f"meta-{name}.input").read_bytes() == (archived / "meta.json").read_bytes()
    assert (source / f"data-{name}.json").read_bytes() == (archived / "data.json").read_bytes()
    golden = json.loads((source / f"{name}-golden.json").read_text())
    ref = JobRef.from_path(assembled_archive, archived)
    row = read_jobs(assembled_archive, [ref]).jobs.iloc[0]
    found = (row["job_id"], row["cluster"], row["start_time"], row["duration"])
    expected = (golden["jobId"], golden["cluster"], golden["startTime"], golden["duration"])
    if name in FOREIGN_GOLDENS:
        assert found == (20639587, "taurus", 1635856524, 310)
        assert expected == (398764, "fritz", 1675954353, 3400)
    else:
        assert found == expected


def test_every_cluster_json(cc_data):
    paths = sorted(p for p in cc_data.rglob("cluster*.json") if "schemas" not in p.parts)
    assert len(paths) == 6
    power = {}
    for path in paths:
        root, cluster = path.parent.parent, path.parent.name
        if path.name != "cluster.json":  # the importer's cluster-fritz.json
            assert path.read_bytes() == (cc_data / "assembled-archive/fritz/cluster.json"
                                         ).read_bytes()
            continue
        config = read_cluster(root, cluster)
        power[f"{root.name}/{cluster}"] = sorted(
            m for m in config.metrics if config.energy_kind(m) == "power")
    assert power == {
        "assembled-archive/fritz": ["cpu_power", "mem_power"],
        "assembled-archive/taurus": ["cpu_power"],
        "cc-backend-testdata-archive/alex": ["acc_power", "core_power", "cpu_power"],
        "cc-backend-testdata-archive/emmy": [],  # no rapl_power in it: known by name
        "cc-backend-testdata-archive/fritz": ["cpu_power", "mem_power"],
    }
    alex = read_cluster(cc_data / "cc-backend-testdata-archive", "alex")
    assert alex.metrics["acc_power"].energy == "power"  # marked in cluster.json (v2+)
    assert alex.metrics["acc_power"].scope == "accelerator"


def test_v2_meta_validates_against_v2_schema_only_as_warnings(cc_data):
    path = cc_data / "cc-backend-v1.4.4-archive-v2/emmy/1403/244/1608923076/meta.json"
    meta = json.loads(path.read_text())
    v2 = {(w.path, w.message) for w in meta_warnings("emmy/1403244/1608923076", path, meta, 2)}
    v3 = {(w.path, w.message) for w in meta_warnings("emmy/1403244/1608923076", path, meta, 3)}
    assert ("/", "'shared' is a required property") in v3 - v2  # exclusive is v2's field


@pytest.mark.parametrize(("bundled", "peer"), [
    ("sql", "sqlite-migrations"),
    ("jsonschemas/v1", "schemas/cc-backend-v1.3.0"),
    ("jsonschemas/v2", "schemas/cc-backend-v1.4.4"),
    ("jsonschemas/v3", "schemas/cc-lib-v2.12.0"),
])
def test_bundled_files_are_the_peer_files(cc_data, bundled, peer):
    package = resources.files("joulehouse.clustercockpit") / bundled
    names = sorted(entry.name for entry in package.iterdir())
    assert names == sorted(path.name for path in (cc_data / peer).iterdir())
    for name in names:
        assert (package / name).read_bytes() == (cc_data / peer / name).read_bytes()


def test_pre_v3_meta_fits_the_v1_schema_better(assembled_archive):
    path = assembled_archive / "taurus/20639/587/1635856524/meta.json"
    meta = json.loads(path.read_text())
    found = {version: {(w.path, w.message) for w in meta_warnings("t", path, meta, version)}
             for version in (1, 2, 3)}
    assert ("/", "'shared' is a required property") in found[3]
    assert not any("shared" in message or "exclusive" in message
                   for _, message in found[1] | found[2])  # v1/v2 want exclusive: present
