"""ClusterCockpit jobs as TAUdb trials: the mapping against the core's and the files' own
figures, and a load whose TAU TOTAL is the job's energy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from joulehouse.errors import InputError
from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import load_trial
from joulehouse.taudb.mapping.clustercockpit import read_job
from joulehouse.taudb.model import DATA_SOURCE_OTHER
from joulehouse.taudb.read import read_trial_source

ARCHIVE = Path(__file__).resolve().parents[2] / "examples" / "clustercockpit" / "archive"
EMMY = ARCHIVE / "emmy" / "1403" / "244" / "1608923076"
FRITZ = ARCHIVE / "fritz" / "398" / "955" / "1675956725"
TAURUS = ARCHIVE / "taurus" / "20639" / "587" / "1635856524"
#: each emmy host's integrated rapl_power (J), isolated nulls bridged (the core's figures)
EMMY_HOSTS = {"e0102": 4817792.7, "e0103": 4817350.2, "e0105": 4499451.3, "e0106": 4858465.8}


def _by_host(trial, frame, column="inclusive", **where):
    hosts = trial.metadata[trial.metadata["name"] == "host"].set_index("node_rank")["value"]
    chosen = frame
    for name, value in where.items():
        chosen = chosen[chosen[name] == value]
    return dict(zip(chosen["node_rank"].map(hosts), chosen[column], strict=True))


def test_a_job_is_a_trial_whose_threads_are_its_hosts():
    trial = read_job(EMMY)
    assert trial.name == "emmy/1403244/1608923076"
    assert trial.data_source == DATA_SOURCE_OTHER
    assert trial.source_key == str(EMMY)
    assert trial.threads.values.tolist() == [[i, 0, 0] for i in range(4)]
    assert trial.metrics == ["TIME", "ENERGY rapl_power (J)"]  # mem_bw is no energy metric
    assert trial.timers[["name", "group_names", "calls", "subroutines"]].drop_duplicates(
        ).values.tolist() == [["job", "CLUSTERCOCKPIT_JOB", 1.0, 0.0]]
    values = trial.timer_values
    assert _by_host(trial, values, metric="TIME") == dict.fromkeys(EMMY_HOSTS, 21600 * 1e6)
    energy = _by_host(trial, values, metric="ENERGY rapl_power (J)")
    assert energy == pytest.approx(EMMY_HOSTS, abs=1e-6)
    assert (values["exclusive"] == values["inclusive"]).all()


def test_energy_per_power_metric_and_statistics_from_the_samples():
    trial = read_job(FRITZ)
    assert trial.metrics == ["TIME", "ENERGY cpu_power (J)", "ENERGY mem_power (J)"]
    values = trial.timer_values.set_index("metric")["inclusive"]
    assert values["ENERGY cpu_power (J)"] == pytest.approx(102769.8, abs=1e-6)
    assert values["ENERGY mem_power (J)"] == pytest.approx(6317.1, abs=1e-6)
    assert values["TIME"] == 260e6
    data = json.loads((FRITZ / "data.json").read_text())
    samples = np.array(data["cpu_power"]["node"]["series"][0]["data"])
    power = trial.counters.set_index("name").loc["cpu_power (W)"]
    assert power["sample_count"] == len(samples) == 5
    assert (power["minimum"], power["maximum"]) == (samples.min(), samples.max())
    assert power["mean"] == pytest.approx(samples.mean(), rel=1e-12)
    assert power["sum_squares"] == pytest.approx((samples**2).sum(), rel=1e-12)
    clock = trial.counters.set_index("name").loc["clock (Hz)"]  # SI: MHz in the file
    assert clock["maximum"] == pytest.approx(
        max(data["clock"]["node"]["series"][0]["data"]) * 1e6, rel=1e-12)
    assert "cpu_load" in set(trial.counters["name"])  # no unit, no parentheses


def test_metadata_is_the_host_its_coverage_and_meta_json():
    meta = read_job(FRITZ).metadata.set_index("name")["value"]
    assert meta["host"] == "f0720"
    assert meta["energy.cpu_power.covered_fraction"] == "1.0"
    assert meta["energy.cpu_power.gap_s"] == "0.0"
    assert meta["meta.jobId"] == "398955" and meta["meta.user"] == "k106eb10"
    assert meta["meta.metaData.jobName"] == "ams_pipeline"
    assert meta["meta.statistics.cpu_power.avg"] == "407.767"
    assert meta["meta.resources"] == '{"hostname": "f0720"}'


@pytest.mark.parametrize("lack", ["no series", "all null"])
def test_an_energy_metric_that_a_host_lacks_is_left_out(tmp_path, lack):
    archive = Path(shutil.copytree(ARCHIVE, tmp_path / "archive"))
    job = archive / TAURUS.relative_to(ARCHIVE)
    data = json.loads((job / "data.json").read_text())
    series = data["cpu_power"]["socket"]["series"]
    first = series[0]["hostname"]
    if lack == "no series":
        data["cpu_power"]["socket"]["series"] = [s for s in series if s["hostname"] == first]
    else:
        for item in series:
            if item["hostname"] != first:
                item["data"] = [None] * len(item["data"])
    (job / "data.json").write_text(json.dumps(data))
    trial = read_job(job)
    assert trial.metrics == ["TIME"]  # a 0 for taurusi6490 would bias TAU's MEAN
    events = trial.counters[trial.counters["name"] == "cpu_power (W)"]
    assert events["node_rank"].tolist() == [0]  # the host with samples keeps its user event
    assert len(trial.threads) == 2


def test_load_gives_the_job_energy_as_taus_total_and_meta_json_as_primary(tmp_path):
    with TaudbDatabase(f"sqlite:///{tmp_path}/taudb.sqlite") as db:
        trial_id = load_trial(db, read_trial_source(EMMY))  # the CLI's path
        total = db.query(
            "SELECT v.inclusive_value FROM timer_value v "
            "JOIN timer_call_data d ON v.timer_call_data = d.id JOIN thread h ON d.thread = h.id "
            "JOIN timer_callpath c ON d.timer_callpath = c.id JOIN metric m ON v.metric = m.id "
            "WHERE h.trial = ? AND h.thread_index = ? AND m.name = ?",
            (trial_id, -2, "ENERGY rapl_power (J)"))
        assert total[0][0] == pytest.approx(sum(EMMY_HOSTS.values()), abs=1e-6)
        primary = dict(db.query("SELECT name, value FROM primary_metadata WHERE trial = ?",
                                (trial_id,)))
        assert primary["meta.jobId"] == "1403244" and primary["meta.numNodes"] == "4"
        assert primary["joulehouse.source"] == "clustercockpit job"
        hosts = db.query("SELECT value FROM secondary_metadata WHERE trial = ? AND name = "
                         "'host' ORDER BY value", (trial_id,))
        assert [host for (host,) in hosts] == list(EMMY_HOSTS)
        assert load_trial(db, read_job(EMMY)) != trial_id  # a reload replaces the trial
        assert db.query("SELECT count(*) FROM trial")[0][0] == 1


def test_other_folders_of_an_archive_say_which_to_give(tmp_path):
    with pytest.raises(InputError, match=r"a ClusterCockpit job archive: a trial is one job, "
                       r"give its job folders \(emmy/1403/244/1608923076, "
                       r"fritz/398/764/1675954353, fritz/398/955/1675956725, \.\.\.\)"):
        read_trial_source(ARCHIVE)
    with pytest.raises(InputError, match=r"a cluster folder of a ClusterCockpit job archive: a "
                       r"trial is one job, give its job folders \(398/764/1675954353, "
                       r"398/955/1675956725\)"):
        read_trial_source(ARCHIVE / "fritz")
    with pytest.raises(InputError, match=r"a jobId%1000 folder .* \(1608923076\)"):
        read_trial_source(EMMY.parent)
    (tmp_path / "version.txt").write_text("3\n")
    (tmp_path / "notes" / "draft").mkdir(parents=True)  # names that are no job tree
    with pytest.raises(InputError, match="not a trial source"):
        read_trial_source(tmp_path / "notes" / "draft")
