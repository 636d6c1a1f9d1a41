"""GEOPM reports as TAUdb trials (joulehouse/taudb/mapping/geopm.py): the rows against the
report's own figures, a load into TAUdb, and `joulehouse taudb load` on reports.

TAU's own reader opening these trials is tests/taudb/test_tau_reader.py (TRIAL_SOURCES)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from joulehouse.errors import InputError
from joulehouse.geopm.layout import file_shape
from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.loader import list_trials, load_trial
from joulehouse.taudb.mapping.geopm import (
    REGION_GROUP,
    SESSION_GROUP,
    SESSION_TIMER,
    TIME_METRIC,
    TOTALS_GROUP,
)
from joulehouse.taudb.model import DATA_SOURCE_OTHER
from joulehouse.taudb.read import read_trial_source
from tests.geopm.test_geopm_traps import REPORT_3X
from tests.test_cli_conventions import joulehouse, one_error_line

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "geopm"
LEGACY = EXAMPLES / "geopmbench_1host.legacy.report"
YAML = EXAMPLES / "fm_stream_dgemm_2host.yaml.report"
LEGACY_REGIONS = ["all2all", "sleep", "stream", "model-init", "dgemm", "MPI_Barrier"]
TOTALS = ["Unmarked Totals", "Epoch Totals", "Application Totals"]
#: A geopmsession --report-out report of two hosts: CPU_ENERGY on both, DRAM_ENERGY on one,
#: a signal of one sample (no std) on the second.
SESSION_REPORT = """\
host: "node-a"
sample-time-first: "2024-08-14T18:23:58.5-07:00"
sample-time-total: 10
sample-count: 2001
sample-period-mean: 0.005
sample-period-std: 5e-05
metrics:
  CPU_ENERGY:
    count: 2001
    first: 1000
    last: 1500
    min: 1000
    max: 1500
    mean: 1250
    std: 144
  DRAM_ENERGY:
    count: 2001
    first: 10
    last: 60
    min: 10
    max: 60
    mean: 35
    std: 14
  CPU_POWER:
    count: 2000
    first: 50
    last: 50
    min: 40
    max: 60
    mean: 50
    std: 5
---
host: "node-b"
sample-time-first: "2024-08-14T18:23:58.6-07:00"
sample-time-total: 12
sample-count: 2401
sample-period-mean: 0.005
sample-period-std: 5e-05
metrics:
  CPU_ENERGY:
    count: 2401
    first: 2000
    last: 2600
    min: 2000
    max: 2600
    mean: 2300
    std: 173
  CPU_POWER:
    count: 1
    first: 60
    last: 60
    min: 60
    max: 60
    mean: 60
"""


def _values(trial, node: int, metric: str) -> pd.Series:
    frame = trial.timer_values
    chosen = frame[(frame["node_rank"] == node) & (frame["metric"] == metric)]
    assert (chosen["inclusive"] == chosen["exclusive"]).all()  # flat timers
    return chosen.set_index("name")["inclusive"]


def _events(trial, node: int) -> pd.DataFrame:
    return trial.counters[trial.counters["node_rank"] == node].set_index("name")


def _metadata(trial, node: int) -> dict[str, str]:
    meta = trial.metadata
    return dict(meta.loc[meta["node_rank"] == node, ["name", "value"]].to_numpy().tolist())


def test_legacy_report_is_one_trial_of_one_host():
    trial = read_trial_source(LEGACY)
    assert (trial.name, trial.data_source, trial.source_key) == (
        LEGACY.name, DATA_SOURCE_OTHER, str(LEGACY))
    assert trial.threads.values.tolist() == [[0, 0, 0]]
    # a legacy report's Application Totals have no sync-runtime: no SYNC_RUNTIME metric
    assert trial.metrics == [TIME_METRIC, "PACKAGE_ENERGY (J)", "DRAM_ENERGY (J)",
                             "NETWORK_TIME (s)"]
    timers = trial.timers.set_index("name")
    assert list(timers.index) == LEGACY_REGIONS + TOTALS
    assert timers["group_names"].tolist() == [REGION_GROUP] * 6 + [TOTALS_GROUP] * 3
    # calls = count; the unmarked totals' count 0 and the application's missing count: 1
    assert timers["calls"].tolist() == [10, 10, 20, 1, 10, 10, 1, 10, 1]
    assert (timers["subroutines"] == 0).all()
    time = _values(trial, 0, TIME_METRIC)
    assert time["all2all"] == 10.0041 * 1e6 and time["Application Totals"] == 23.3166 * 1e6
    package = _values(trial, 0, "PACKAGE_ENERGY (J)")
    assert package[LEGACY_REGIONS].tolist() == [1802.26, 1708.52, 645.647, 158.375, 70.188, 0]
    assert package[TOTALS].tolist() == [16.3325, 4242.95, 4406.26]
    assert _values(trial, 0, "NETWORK_TIME (s)")["all2all"] == 9.96454
    events = _events(trial, 0)
    assert events.loc["POWER (W) : all2all", ["sample_count", "maximum", "minimum", "mean"]
                      ].tolist() == [1, 180.516, 180.516, 180.516]
    assert events.loc["POWER (W) : all2all", "sum_squares"] == 180.516**2
    assert events.loc["FREQUENCY (Hz) : stream", "mean"] == 2.79335e9
    assert events.loc["FREQUENCY (%) : Epoch Totals", "mean"] == 132.922
    assert events.loc["PAPI_DP_OPS : dgemm", "mean"] == 5.44676e10  # an extension signal
    assert events.loc["epoch-runtime-ignore (sec) : Epoch Totals", "mean"] == 0
    assert events.loc["GEOPMCTL_MEMORY_HWM (B) : Application Totals", "mean"] == 54416 * 1024
    assert len(events) == 9 + 8 + 8 + 2 + 17  # power, frequency % and Hz, geopmctl, signals
    assert _metadata(trial, 0) == {
        "GEOPM Version": "1.1.0", "Start Time (UTC)": "2020-04-01T09:00:15+00:00",
        "Profile": "/home/daniel/build/geopm/bin/geopmbench", "Agent": "monitor",
        "Policy": "{}", "report shape": "legacy", "host": "mcfly13"}


def test_yaml_report_hosts_are_threads_in_the_reports_order():
    trial = read_trial_source(YAML)
    assert trial.threads.values.tolist() == [[0, 0, 0], [1, 0, 0]]
    assert trial.metrics == [TIME_METRIC, "SYNC_RUNTIME (s)", "PACKAGE_ENERGY (J)",
                             "DRAM_ENERGY (J)", *(f"TIME_HINT_{hint} (s)" for hint in (
                                 "NETWORK", "IGNORE", "COMPUTE", "MEMORY", "IO", "SERIAL",
                                 "PARALLEL", "UNKNOWN", "UNSET"))]
    assert [_metadata(trial, node)["host"] for node in (0, 1)] == ["mcfly11", "mcfly12"]
    assert len(trial.timers) == 2 * (13 + 3)
    package = _values(trial, 1, "PACKAGE_ENERGY (J)")
    assert package["sleep"] == 34545.2 and package["Application Totals"] == 85946.8
    assert _values(trial, 0, "SYNC_RUNTIME (s)")["with some spaces"] == 17.8327
    assert _values(trial, 0, "TIME_HINT_NETWORK (s)")["Application Totals"] == 15
    events = _events(trial, 1)
    assert events.loc["requested-online-frequency : sleep", "mean"] == 1e9
    # an agent's host map is a signal of the host: an atomic event, not a context event
    assert events.loc["Final online freq map/0x725e8066", "mean"] == 2.2e9
    assert _events(trial, 0).loc["Final online freq map/0x725e8066", "mean"] == 2.1e9


def test_3x_traps_reach_the_trial(tmp_path):
    report = tmp_path / "r.report"
    report.write_text(REPORT_3X.lstrip("\n"))
    trial = read_trial_source(report)
    assert _metadata(trial, 0)["host"] == "0012"
    assert _metadata(trial, 0)["Policy"] == "DYNAMIC"
    assert trial.timers[["name", "calls"]].values.tolist() == [['say "hi" \\now', 1.5],
                                                               ["Application Totals", 1.0]]
    events = _events(trial, 0)
    assert "GPU_POWER@gpu-0 : say \"hi\" \\now" not in events.index  # inf: left out
    assert not events.index.str.startswith("CPU_ENERGY@").any()  # nan: left out
    assert events.loc["POWER (W) : Application Totals", "mean"] == 50
    assert events.loc["GEOPMCTL_MEMORY_HWM (B) : Application Totals", "mean"] == 1000 * 1024
    # gpu-energy in the Application Totals only: no metric (TAUdb has no missing values)
    assert trial.metrics == [TIME_METRIC, "SYNC_RUNTIME (s)", "PACKAGE_ENERGY (J)",
                             "DRAM_ENERGY (J)"]


def test_a_session_report_is_a_trial_of_its_hosts(tmp_path):
    report = tmp_path / "session.report"
    report.write_text(SESSION_REPORT)
    trial = read_trial_source(report)
    assert trial.threads.values.tolist() == [[0, 0, 0], [1, 0, 0]]
    assert trial.timers[["node_rank", "name", "group_names", "calls", "subroutines"]
                        ].values.tolist() == [[0, SESSION_TIMER, SESSION_GROUP, 2001, 0],
                                              [1, SESSION_TIMER, SESSION_GROUP, 2401, 0]]
    # DRAM_ENERGY on one host only: no metric (TAUdb has no missing values), an event there
    assert trial.metrics == [TIME_METRIC, "CPU_ENERGY (J)"]
    assert _values(trial, 0, TIME_METRIC)[SESSION_TIMER] == 10e6
    assert _values(trial, 1, TIME_METRIC)[SESSION_TIMER] == 12e6
    assert _values(trial, 0, "CPU_ENERGY (J)")[SESSION_TIMER] == 500  # last - first
    assert _values(trial, 1, "CPU_ENERGY (J)")[SESSION_TIMER] == 600
    events = _events(trial, 0)
    assert list(events.index) == ["CPU_ENERGY", "DRAM_ENERGY", "CPU_POWER"]
    power = events.loc["CPU_POWER"]
    assert power[["sample_count", "maximum", "minimum", "mean"]].tolist() == [2000, 60, 40, 50]
    # GEOPM's std is the sample deviation: SumSqr = (n - 1) std^2 + n mean^2
    assert power["sum_squares"] == pytest.approx(1999 * 5**2 + 2000 * 50**2, rel=1e-12)
    one = _events(trial, 1).loc["CPU_POWER"]  # one sample, no std
    assert (one["sample_count"], one["sum_squares"]) == (1, 3600)
    assert _metadata(trial, 1) == {
        "Start Time (UTC)": "2024-08-15T01:23:58.500000+00:00", "report shape": "session",
        "host": "node-b", "Sample Time First (UTC)": "2024-08-15T01:23:58.600000+00:00",
        "Sample Count": "2401.0", "Sample Time Total (s)": "12.0",
        "Sample Period Mean (s)": "0.005", "Sample Period Std (s)": "5e-05"}
    assert trial.trial_metadata == {"joulehouse.source": "geopm session report"}


def test_the_peer_session_report_loads(tmp_path, geopm_peer):
    trial = read_trial_source(geopm_peer / "geopmsession-doc-example_3.x.session-report.yaml")
    assert trial.metrics == [TIME_METRIC]  # no energy signal in it
    assert len(trial.threads) == 1 and len(trial.counters) == 3
    with TaudbDatabase(f"sqlite:///{tmp_path}/taudb.sqlite") as db:
        load_trial(db, trial)
        [stored] = list_trials(db)
    assert stored["total_threads"] == 1


def test_names_alike_once_trimmed_are_refused(tmp_path):
    text = REPORT_3X.replace('region: "say "hi" \\now"', 'region: "Application  Totals"')
    report = tmp_path / "twice.report"
    report.write_text(text.lstrip("\n"))
    with pytest.raises(InputError, match="host '0012' has two timers named 'Application "
                                         "Totals'"):
        read_trial_source(report)


def test_every_peer_report_loads_and_a_reload_replaces_it(tmp_path, geopm_peer):
    reports = [p for p in sorted(geopm_peer.iterdir()) if p.is_file()
               and file_shape(p) in ("legacy", "yaml")]
    assert len(reports) == 14
    with TaudbDatabase(f"sqlite:///{tmp_path}/taudb.sqlite") as db:
        for report in reports:
            load_trial(db, read_trial_source(report))
        trial_id = load_trial(db, read_trial_source(geopm_peer / (
            "testio_geopm-1.0.0dev30_fm_stream_dgemm_2host.yaml.report")))
        trials = list_trials(db)
        assert len(trials) == 14 and trials[-1]["id"] == trial_id
        assert trials[-1]["total_threads"] == 2
        # TAU's MEAN thread over the hosts (-6): the mean of the two hosts' figures
        mean = db.query(
            "SELECT v.inclusive_value FROM timer_value v "
            "JOIN timer_call_data d ON v.timer_call_data = d.id JOIN thread h ON d.thread = h.id "
            "JOIN timer_callpath c ON d.timer_callpath = c.id JOIN timer t ON c.timer = t.id "
            "JOIN metric m ON v.metric = m.id WHERE h.trial = ? AND h.thread_index = -6 "
            "AND t.name = 'sleep' AND m.name = 'PACKAGE_ENERGY (J)'", (trial_id,))
        assert mean[0][0] == pytest.approx((33573.9 + 34545.2) / 2, rel=1e-12)
        primary = dict(db.query("SELECT name, value FROM primary_metadata WHERE trial = ?",
                                (trial_id,)))
        assert primary["Agent"] == "frequency_map" and "host" not in primary
        hosts = db.query("SELECT value FROM secondary_metadata WHERE trial = ? AND "
                         "name = 'host' ORDER BY value", (trial_id,))
        assert hosts == [("mcfly11",), ("mcfly12",)]


def test_taudb_load_command_takes_reports(tmp_path):
    url = f"sqlite:///{tmp_path}/taudb.sqlite"
    junk = tmp_path / "notes.txt"
    junk.write_text("no report here\n")
    result = joulehouse("taudb", "load", url, LEGACY, junk, YAML)
    assert one_error_line(result, 1).startswith(f"{junk}: not a trial source: expected ")
    assert "a GEOPM report file" in one_error_line(result, 1)
    assert result.stdout.splitlines() == [
        f"trial 1: {LEGACY.name} (1 threads) from {LEGACY}",
        f"trial 2: {YAML.name} (2 threads) from {YAML}"]
    listed = joulehouse("taudb", "list", url)
    assert listed.stdout.splitlines()[1:] == [f"1\t{LEGACY.name}\t999\t1\t{LEGACY}",
                                              f"2\t{YAML.name}\t999\t2\t{YAML}"]
