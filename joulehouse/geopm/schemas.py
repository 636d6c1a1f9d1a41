"""pandera schemas of the GEOPM report frames and their roll-ups.

Units are SI and written in the column names (``_s``, ``_j``, ``_w``,
``_hz``, ``_pct``, ``_b``, ``_b_per_s``); times are tz-aware UTC. Every
column carries a description with its unit. The field columns are the
fields geopm_report(7) documents, one column each whatever the report's
version wrote (``(sec)`` / ``(s)``, ``(joules)`` / ``(J)``); a field a report
does not have is NaN. Other fields (``SIGNAL@domain-N`` extensions, agent
additions) are kept in long form in the signals frame.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa

from joulehouse.validation import all_str

UTC_TIME = pd.DatetimeTZDtype("ns", "UTC")

#: The documented report fields: column -> description (with its unit).
FIELD_COLUMNS: dict[str, str] = {
    "runtime_s": "runtime (s): time in the region, mean over the host's processes (exact "
                 "entry/exit times; not comparable with the sampled fields)",
    "count": "count: region entries, mean over the host's processes (may be fractional)",
    "sync_runtime_s": "sync-runtime (s): sampled time all the host's CPUs were in the region",
    "package_energy_j": "package-energy (J): energy of all processor packages over sync-runtime",
    "dram_energy_j": "dram-energy (J): energy of all DRAM over sync-runtime",
    "power_w": "power (W): package-energy / sync-runtime as GEOPM wrote it",
    "frequency_pct": "frequency (%): achieved core frequency, % of the sticker frequency",
    "frequency_hz": "frequency (Hz): achieved core frequency in Hz",
    "gpu_energy_j": "gpu-energy (J): energy of all GPUs over sync-runtime",
    "gpu_power_w": "gpu-power (W): mean GPU power as GEOPM wrote it",
    "gpu_frequency_hz": "gpu-frequency (Hz): achieved GPU frequency in Hz",
    "uncore_frequency_hz": "uncore-frequency (Hz): achieved uncore frequency in Hz",
    "network_time_s": "legacy network-time (s) (mpi-runtime (sec) in 1.0): time in MPI",
    "ignore_time_s": "legacy ignore-time (s): time in regions hinted 'ignore'",
    **{f"time_hint_{hint}_s": f"time-hint-{hint} (s): part of sync-runtime with hint {hint}"
       for hint in ("network", "ignore", "compute", "memory", "io", "serial", "parallel",
                    "unknown", "unset", "spin")},
    "geopmctl_memory_hwm_b": "geopmctl memory HWM in bytes (the report's kB x 1024)",
    "geopmctl_network_bw_b_per_s": "geopmctl network BW (B/s)",
}

_NON_NEGATIVE = {"runtime_s", "count", "sync_runtime_s", "package_energy_j", "dram_energy_j",
                 "gpu_energy_j", "network_time_s", "ignore_time_s", "geopmctl_memory_hwm_b"}


def _text(description: str, nullable: bool = False, *checks: pa.Check) -> pa.Column:
    """Text: an object column of str (checked in one pass, see validation.all_str)."""
    return pa.Column(object, [pa.Check(all_str, name="str"), *checks], nullable=nullable,
                     description=description)


def _float(description: str, non_negative: bool = False) -> pa.Column:
    checks = [pa.Check.ge(0)] if non_negative else None
    return pa.Column(float, checks, nullable=True, description=description)


def _fields() -> dict[str, pa.Column]:
    return {name: _float(text, name in _NON_NEGATIVE) for name, text in FIELD_COLUMNS.items()}


_REPORT = _text("the report's key (its landing key, or its file name)")
_HOST = _text("host name as written in the report (always text: '0012' stays '0012')")

HEADER_SCHEMA = pa.DataFrameSchema(
    {
        "report": _REPORT,
        "shape": _text("shape decided from the content: legacy, yaml, session", False,
                       pa.Check.isin(["legacy", "yaml", "session"])),
        "geopm_version": _text("GEOPM Version (legacy: the ##### line); null in a session "
                               "report", nullable=True),
        "start_time": pa.Column(UTC_TIME, nullable=True,
                                description="Start Time in UTC (a time without zone is read "
                                            "in the reader's timezone)"),
        "profile": _text("Profile", nullable=True),
        "agent": _text("Agent", nullable=True),
        "policy_json": _text("Policy as JSON text (a mapping), or its text ('DYNAMIC')",
                             nullable=True),
        "figure_of_merit": _float("Figure of Merit (added by GEOPM's integration scripts; "
                                  "unit of the application)"),
        "total_runtime_s": _float("Total Runtime (s) (added by GEOPM's integration scripts)"),
        "extra_json": _text("other header keys (agent report_header() additions) as JSON"),
        "host_count": pa.Column("int64", pa.Check.ge(0), description="hosts in the report"),
        "region_count": pa.Column("int64", pa.Check.ge(0),
                                  description="distinct region names over all hosts"),
    },
    unique=["report"], strict=True, ordered=True, name="geopm_header",
)

TOTALS_SCHEMA = pa.DataFrameSchema(
    {
        "report": _REPORT,
        "host": _HOST,
        "section": _text("Application Totals (start to end of the application), Epoch "
                         "Totals (first epoch to end), Unmarked Totals (legacy: region "
                         "unmarked-region)", False,
                         pa.Check.isin(["application", "epoch", "unmarked"])),
        **_fields(),
    },
    unique=["report", "host", "section"], strict=True, ordered=True, name="geopm_totals",
)

REGIONS_SCHEMA = pa.DataFrameSchema(
    {
        "report": _REPORT,
        "host": _HOST,
        "region": _text("region name as written (quotes and backslashes kept)"),
        "hash": _text("region hash, 0x%08x (legacy 0x%016x shortened)", False,
                      pa.Check.str_matches(r"^0x[0-9a-f]{8,}$")),
        **_fields(),
    },
    unique=["report", "host", "region", "hash"], strict=True, ordered=True, name="geopm_regions",
)

SIGNALS_SCHEMA = pa.DataFrameSchema(
    {
        "report": _REPORT,
        "host": _HOST,
        "section": _text("where the field is: a region, a totals section, or the host "
                         "itself (agent report_host() additions)", False,
                         pa.Check.isin(["region", "application", "epoch", "unmarked", "host"])),
        "region": _text("region name (section 'region'), else null", nullable=True),
        "field": _text("field label as written, e.g. CPU_ENERGY@package-0, or "
                       "'<map>/<key>' for an agent's map"),
        "signal": _text("signal name: the label before '@'"),
        "domain": _text("domain of a SIGNAL@domain-N field, else null", nullable=True),
        "domain_index": pa.Column("Int64", nullable=True,
                                  description="N of a SIGNAL@domain-N field, else null"),
        "value": _float("value in the unit of the label (SI: GEOPM signals are SI); "
                        "nan/inf kept"),
    },
    strict=True, ordered=True, name="geopm_signals",
)

SESSION_SCHEMA = pa.DataFrameSchema(
    {
        "report": _REPORT,
        "host": _HOST,
        "sample_time_first": pa.Column(UTC_TIME, nullable=True,
                                       description="sample-time-first in UTC"),
        "sample_time_total_s": _float("sample-time-total (s)", non_negative=True),
        "sample_count": _float("sample-count: samples taken", non_negative=True),
        "sample_period_mean_s": _float("sample-period-mean (s)", non_negative=True),
        "sample_period_std_s": _float("sample-period-std (s)", non_negative=True),
        "signal": _text("signal name, e.g. CPU_POWER or SIGNAL@domain-N"),
        "count": _float("samples of the signal", non_negative=True),
        **{f"{stat}_si": _float(f"{stat} of the signal in its SI unit (W, J, s, Hz ...)")
           for stat in ("first", "last", "min", "max", "mean", "std")},
    },
    unique=["report", "host", "signal"], strict=True, ordered=True, name="geopm_session",
)


def _derived() -> dict[str, pa.Column]:
    return {
        "power_w": _float("package power (W): package_energy_j / sync_runtime_s", True),
        "gpu_power_w": _float("GPU power (W): gpu_energy_j / sync_runtime_s", True),
    }


HOST_ENERGY_SCHEMA = pa.DataFrameSchema(
    {
        "report": _REPORT,
        "host": _HOST,
        "section": _text("region, or the totals section of the row", False,
                         pa.Check.isin(["region", "application", "epoch", "unmarked"])),
        "region": _text("region name, or the section's name ('Application Totals' ...)"),
        "hash": _text("region hash 0x%08x; null for totals", nullable=True),
        **{name: _fields()[name] for name in ("runtime_s", "sync_runtime_s", "package_energy_j",
                                              "dram_energy_j", "gpu_energy_j")},
        **_derived(),
        "frequency_hz": _fields()["frequency_hz"],
    },
    strict=True, ordered=True, name="geopm_host_energy",
)


def _rollup(keys: dict[str, pa.Column], name: str) -> pa.DataFrameSchema:
    summed = "summed over hosts; "
    return pa.DataFrameSchema(
        {
            **keys,
            "host_count": pa.Column("int64", pa.Check.ge(0), description="hosts summed"),
            "runtime_s": _float(summed + "runtime (host-seconds; process means, apart from "
                                "the sampled fields)", True),
            "sync_runtime_s": _float(summed + "sampled time (host-seconds)", True),
            "package_energy_j": _float(summed + "package energy (J)", True),
            "dram_energy_j": _float(summed + "DRAM energy (J)", True),
            "gpu_energy_j": _float(summed + "GPU energy (J)", True),
            **_derived(),
            "frequency_hz": _float("core frequency (Hz) weighted by sync-runtime: "
                                   "sum(f x t) / sum(t)", True),
        },
        strict=True, ordered=True, name=name,
    )


REGION_ROLLUP_SCHEMA = _rollup({"report": _REPORT, "region": _text("region name"),
                                "hash": _text("region hash 0x%08x")}, "geopm_region_rollup")
REPORT_ROLLUP_SCHEMA = _rollup({"report": _REPORT,
                                "section": _text("application, epoch or unmarked")},
                               "geopm_report_rollup")


def empty_frame(schema: pa.DataFrameSchema) -> pd.DataFrame:
    """A frame with no rows and ``schema``'s columns and dtypes."""
    return pd.DataFrame({
        name: pd.Series(dtype=spec.dtype.type)
        for name, spec in schema.columns.items()
    })
