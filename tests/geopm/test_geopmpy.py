"""The same values per host and region as geopmpy's own reader (geopmpy 3.2.2's io.py).

geopmpy reads 5 of the 15 peer reports: the YAML ones through ``RawReport``
(its per host and region values), and two of them through
``RawReportCollection`` (its DataFrames). It misreads the other ten: each
legacy report loads as YAML and then fails for want of ``GEOPM Version``,
the session report likewise, and a Policy written as a mapping breaks the
collection. Values must be equal (both parse the same decimal text), NaN
equal to NaN; ``geopmctl memory HWM (B)`` is compared in bytes (geopmpy
keeps the file's number: kB in the 2.x reports, bytes in the converted ones;
see test_geopm_peer_reports and the peer data's PROVENANCE.md).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from joulehouse.geopm.readers import SECTIONS, field_column, read_report

READ_BY_GEOPMPY = [
    "geopm-1.1.0dev429_nekbone_frequency_map_4host.yaml-converted.report",
    "pyagent-tutorial_geopm-2.0.0rc2dev112_stress-frequency-limit_1host.yaml.report",
    "pyagent-tutorial_geopm-2.0.0rc2dev112_stress-monitor_1host.yaml.report",
    "pyagent-tutorial_geopm-2.0.0rc2dev112_stress-package-energy_1host.yaml.report",
    "testio_geopm-1.0.0dev30_fm_stream_dgemm_2host.yaml.report",
]
COLLECTED_BY_GEOPMPY = [READ_BY_GEOPMPY[0], READ_BY_GEOPMPY[4]]
HWM = "geopmctl memory HWM (B)"
#: Bytes per unit of the number each report writes under HWM's '(B)' label: the 2.x
#: reports write kB; the 1.x runs converted to YAML (update_report.py, TestIO) bytes.
HWM_BYTES_PER_UNIT = dict(zip(READ_BY_GEOPMPY, [1, 1024, 1024, 1024, 1], strict=True))


def _ours(report, host: str, section: str, region: str | None, label: str) -> float:
    """Our value of ``label`` (the report's own label) for one host and region/section."""
    column, _ = field_column(label)
    if section == "region":
        frame = report.regions[(report.regions["host"] == host)
                               & (report.regions["region"] == region)]
    else:
        frame = report.totals[(report.totals["host"] == host)
                              & (report.totals["section"] == section)]
    if column is not None:
        assert len(frame) == 1, (host, section, region)
        return float(frame[column].iloc[0])
    signals = report.signals
    match = signals[(signals["host"] == host) & (signals["section"] == section)
                    & (signals["field"] == label)]
    if section == "region":
        match = match[match["region"] == region]
    assert len(match) == 1, (host, section, region, label)
    return float(match["value"].iloc[0])


def _compare(report, name: str, host, section, region, raw: dict) -> int:
    """Compare ``raw`` (geopmpy's values of one host and region/section of report ``name``)."""
    compared = 0
    for label, value in raw.items():
        if label in ("region", "hash"):
            continue
        theirs = float(value) * (HWM_BYTES_PER_UNIT[name] if label == HWM else 1)
        ours = _ours(report, host, section, region, label)
        assert ours == theirs or (np.isnan(ours) and np.isnan(theirs)), (
            host, section, region, label, ours, theirs)
        compared += 1
    return compared


@pytest.mark.parametrize("name", READ_BY_GEOPMPY)
def test_same_values_as_geopmpy_raw_report(geopm_peer, geopmpy_io, name):
    theirs = geopmpy_io.RawReport(str(geopm_peer / name))
    ours = read_report(geopm_peer / name, report="r")
    assert list(ours.header[["geopm_version", "profile", "agent"]].iloc[0]) == [
        str(theirs.meta_data()[k]) for k in ("GEOPM Version", "Profile", "Agent")]
    policy = theirs.meta_data()["Policy"]
    assert json.loads(ours.header["policy_json"].iloc[0]) == (
        policy if isinstance(policy, dict) else json.loads(policy))
    hosts = theirs.host_names()
    assert list(dict.fromkeys(ours.totals["host"])) == hosts
    compared = 0
    for host in hosts:
        names = theirs.region_names(host)
        assert ours.regions.loc[ours.regions["host"] == host, "region"].tolist() == names
        for name_ in names:
            raw = theirs.raw_region(host, name_)
            hash_ = ours.regions[(ours.regions["host"] == host)
                                 & (ours.regions["region"] == name_)]["hash"].iloc[0]
            assert int(hash_, 16) == raw["hash"]
            compared += _compare(ours, name, host, "region", name_, raw)
        for key, section in SECTIONS.items():
            raw = theirs.raw_report()["Hosts"][host].get(key)
            if raw:
                compared += _compare(ours, name, host, section, None, raw)
    assert compared >= 11  # the smallest report: one host's Application Totals


@pytest.mark.parametrize("name", COLLECTED_BY_GEOPMPY)
def test_same_values_as_geopmpy_dataframes(geopm_peer, geopmpy_io, tmp_path, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collection = geopmpy_io.RawReportCollection(
            [str(geopm_peer / name)], dir_name=str(tmp_path), do_cache=False, verbose=False)
    raw_hosts = geopmpy_io.RawReport(str(geopm_peer / name)).raw_report()["Hosts"]
    ours = read_report(geopm_peer / name, report="r")
    frames = {"region": collection.get_df(), "application": collection.get_app_df(),
              "epoch": collection.get_epoch_df(), "unmarked": collection.get_unmarked_df()}
    not_fields = {"GEOPM Version", "Start Time", "Profile", "Agent", "host", "region", "hash",
                  *json.loads(ours.header["policy_json"].iloc[0])}
    compared = 0
    for section, frame in frames.items():
        expected_rows = len(ours.regions) if section == "region" else int(
            (ours.totals["section"] == section).sum())
        assert len(frame) == expected_rows
        for _, row in frame.iterrows():
            if section == "region":
                region = row["region"]
                present = next(r for r in raw_hosts[row["host"]]["Regions"]
                               if r["region"] == region)
            else:
                region = None
                present = raw_hosts[row["host"]][
                    next(k for k, v in SECTIONS.items() if v == section)]
            if section == "application" and "FOM" in row.index:  # the Figure of Merit
                assert row["FOM"] == ours.header["figure_of_merit"].iloc[0]
            # the frame pads a label other rows have with NaN: compare the row's own labels
            fields = {k: v for k, v in row.items() if k not in not_fields and k in present}
            assert len(fields) == len(present) - (2 if section == "region" else 0)
            compared += _compare(ours, name, row["host"], section, region, fields)
    assert compared > 100
