"""A self-contained HTML accounting report of a user, a project or a job (``joulehouse report``).

Read from the warehouse's tables with DuckDB (``query.py``), never recomputed, so the
report says what the tables say:

- a **user** or **project** (``entities.py``: ClusterCockpit's users and projects, a GPU
  benchmark's experiment, a GEOPM report), optionally in one UTC **month**: the totals per
  source in its primary method (``rollups.PRIMARY_METHOD``) from ``accounting_daily``
  (energy, entity-hours, mean power = energy / time, CO2e, cost), energy, CO2e and cost per
  UTC day (tables and plots), every table with cost split by currency (two currencies are
  never added), each fact with its carbon and cost (``carbon_per_fact``,
  ``cost_per_fact``), its waste rows (``waste``) and trust checks (``trust_checks``);
- a **job** (an ``energy_facts`` entity, e.g. ``fritz/398764/1675954353``): every fact of
  it in every method, its carbon and cost with their lineage (intensity and tariff files
  and digests), its trust checks and waste rows, and a plot of its energy per component
  and method.

Plots are matplotlib PNGs (``joulehouse/plots.py``) embedded as ``data:`` URIs and tables
are HTML, escaped: one file, nothing fetched when it is opened. A table the warehouse
lacks leaves its section out and says so.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import pandas as pd

from joulehouse.accounting.entities import attribute
from joulehouse.accounting.query import connect
from joulehouse.accounting.rollups import PRIMARY_METHOD, UTC, primary
from joulehouse.accounting.stepseries import J_PER_KWH
from joulehouse.plots import Series, bars_png, data_uri

#: The cc_jobs columns a job's report shows.
JOB_COLUMNS = ["job", "hpc_user", "project", "cluster", "cluster_partition", "num_nodes",
               "num_acc", "duration", "job_state"]
#: Rows of a fact table shown (all are counted).
ROWS_SHOWN = 200
_STYLE = """body{font-family:sans-serif;margin:2em;max-width:75em}
table{border-collapse:collapse;font-size:0.85em;margin-bottom:1.5em}
td,th{border:1px solid #ccc;padding:0.2em 0.5em;text-align:right}
th{background:#eee}td:first-child,th:first-child{text-align:left}
.note{color:#555}"""


class ReportError(ValueError):
    """The report cannot be made as asked: nothing matches, or the warehouse lacks a table."""


@dataclass(frozen=True)
class Scope:
    """What a report is about: exactly one of ``user``, ``project``, ``job``; ``month``
    (``YYYY-MM``, UTC) limits a user's or project's report."""

    user: str | None = None
    project: str | None = None
    job: str | None = None
    month: str | None = None

    def __post_init__(self) -> None:
        if sum(v is not None for v in (self.user, self.project, self.job)) != 1:
            raise ValueError("give exactly one of user, project, job")
        if self.month is not None and not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", self.month):
            raise ValueError(f"not a month YYYY-MM: {self.month!r}")

    @property
    def title(self) -> str:
        kind, name = next((k, v) for k, v in (("user", self.user), ("project", self.project),
                                             ("job", self.job)) if v is not None)
        return f"Energy report: {kind} {name}" + (f", {self.month} (UTC)" if self.month else "")

    def bounds(self) -> tuple[pd.Timestamp, pd.Timestamp] | None:
        """The month's first instant and the next month's (UTC), or None for all time."""
        if self.month is None:
            return None
        period = pd.Period(self.month, "M")
        return (period.start_time.tz_localize(UTC),
                (period + 1).start_time.tz_localize(UTC))


def _has(connection: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(connection.sql(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
        params=[table]).fetchall()[0][0])


def _read(connection: duckdb.DuckDBPyConnection, sql: str, params: Sequence = ()) -> pd.DataFrame:
    return connection.sql(sql, params=list(params)).to_arrow_table().to_pandas()


def _section(title: str, *parts: str) -> str:
    return f"<h2>{html.escape(title)}</h2>\n" + "\n".join(parts)


def _table(frame: pd.DataFrame, note: str = "") -> str:
    shown = frame.head(ROWS_SHOWN)
    more = (f'<p class="note">{len(shown)} of {len(frame)} rows shown.</p>'
            if len(frame) > len(shown) else "")
    text = f'<p class="note">{html.escape(note)}</p>' if note else ""
    return text + shown.to_html(index=False, escape=True, na_rep="–", float_format="{:.4g}".format,
                                border=0) + more


def _image(png: bytes, alt: str) -> str:
    return f'<p><img alt="{html.escape(alt)}" src="{data_uri(png)}"></p>'


def _per_day_plots(daily: pd.DataFrame) -> list[str]:
    """Energy (kWh), CO2e (kg) and cost per UTC day, stacked by source."""
    out = []
    plotted = [("energy_kwh", "energy (kWh)", 1.0, daily), ("co2_g", "CO2e (kg)", 1e-3, daily)]
    plotted += [("cost", f"cost ({c})", 1.0, rows) for c, rows in daily.groupby("currency") if c]
    for column, label, factor, rows in plotted:
        per_day = rows.groupby(["day", "source"])[column].sum(min_count=1).unstack("source")
        days = [d.strftime("%Y-%m-%d") for d in per_day.index]
        values = per_day.fillna(0.0) * factor
        png = bars_png(days, [Series(str(s), days, values[s].tolist()) for s in values],
                       title=f"{label} per UTC day", y_label=label)
        out.append(_image(png, f"{label} per day"))
    return out


def _whole_sum(values: pd.Series) -> float:
    """The sum, NaN if any value is (a partial sum is never shown as the total)."""
    return values.sum(min_count=len(values)) if values.notna().all() else float("nan")


def _totals(daily: pd.DataFrame) -> pd.DataFrame:
    """Per source (its primary method) and currency: the sums, mean power = energy / time
    (no count of facts: a fact across midnight is a row of each of its days)."""
    grouped = daily.groupby(["source", "method", "currency"], as_index=False).agg(
        energy_kwh=("energy_kwh", "sum"), duration_h=("duration_h", "sum"),
        co2_g=("co2_g", _whole_sum), cost=("cost", _whole_sum),
        energy_without_intensity_j=("energy_without_intensity_j", "sum"),
        energy_without_tariff_j=("energy_without_tariff_j", "sum"))
    grouped["mean_power_w"] = grouped["energy_kwh"] * J_PER_KWH / (grouped["duration_h"] * 3600)
    grouped["co2_kg"] = grouped.pop("co2_g") / 1e3
    return grouped


def _facts_of(connection: duckdb.DuckDBPyConnection, scope: Scope) -> pd.DataFrame:
    """The facts of a user or project (carbon_per_fact, attributed like the rollups) in the
    scope's month, with their cost where cost_per_fact has it."""
    if not _has(connection, "carbon_per_fact"):
        return pd.DataFrame()
    bounds = scope.bounds()
    where, params = "", []
    if bounds:
        where, params = " WHERE c.window_end > ? AND c.window_start < ?", list(bounds)
    cost = _has(connection, "cost_per_fact")
    sql = ("SELECT c.source, c.entity, c.component, c.method, c.window_start, c.window_end, "
           "c.energy_j, c.co2_g, c.zone, c.intensity_files"
           + (", k.cost, k.currency, k.tariff_files FROM carbon_per_fact c LEFT JOIN "
              "cost_per_fact k USING (source, entity, component, method, window_start, "
              "window_end)" if cost else " FROM carbon_per_fact c") + where)
    facts = _read(connection, sql, params)
    jobs = _read(connection, "SELECT * FROM cc_jobs") if _has(connection, "cc_jobs") else None
    attributed = attribute(facts, jobs)
    key, name = ("user", scope.user) if scope.user is not None else ("project", scope.project)
    chosen = attributed[attributed[key].astype(str) == name]
    chosen = chosen[chosen["source"].astype(str).map(PRIMARY_METHOD).isna()
                    | (chosen["method"].astype(str)
                       == chosen["source"].astype(str).map(PRIMARY_METHOD))]
    columns = [c for c in ("source", "entity", "component", "method", "window_start",
                           "window_end", "energy_j", "co2_g", "cost", "currency", "project",
                           "user", "zone", "intensity_files", "tariff_files")
               if c in chosen.columns]
    return chosen[columns].sort_values(["window_start", "entity"]).astype(
        {c: str for c in ("source", "component", "method", "project", "user")})


def _group_report(connection: duckdb.DuckDBPyConnection, scope: Scope) -> list[str]:
    if not _has(connection, "accounting_daily"):
        raise ReportError("the warehouse has no accounting_daily table: materialize the "
                          "accounting assets first")
    key, name = ("user", scope.user) if scope.user is not None else ("project", scope.project)
    sql = f'SELECT * FROM accounting_daily WHERE calendar = ? AND "{key}" = ?'
    params: list = [UTC, name]
    bounds = scope.bounds()
    if bounds:
        sql += " AND day >= ? AND day < ?"
        params += [b.tz_localize(None) for b in bounds]
    daily = primary(_read(connection, sql + " ORDER BY day, source", params))
    if "cost" not in daily.columns:  # a warehouse from before cost
        daily = daily.assign(cost=float("nan"), currency="", energy_without_tariff_j=0.0)
    if daily.empty:
        raise ReportError(f"no accounting rows for {key} {name!r}"
                          + (f" in {scope.month}" if scope.month else ""))
    # per currency: costs in two currencies are never added (a site has one)
    days = daily.groupby(["day", "currency"], as_index=False).agg(
        energy_kwh=("energy_kwh", "sum"), duration_h=("duration_h", "sum"),
        co2_g=("co2_g", _whole_sum), cost=("cost", _whole_sum))
    days["day"] = days["day"].dt.strftime("%Y-%m-%d")
    other = "project" if key == "user" else "user"
    breakdown = daily.groupby(["source", other, "currency"], as_index=False).agg(
        energy_kwh=("energy_kwh", "sum"), duration_h=("duration_h", "sum"),
        co2_g=("co2_g", _whole_sum), cost=("cost", _whole_sum))
    facts = _facts_of(connection, scope)
    sections = [
        _section("Totals", _table(_totals(daily), "Each source in its primary method "
                 f"({', '.join(f'{s}: {m}' for s, m in PRIMARY_METHOD.items())}); mean power "
                 "is total energy over total time; CO2e and cost include the site PUE.")),
        _section("Per UTC day", *_per_day_plots(daily), _table(days)),
        _section(f"Per source and {other}", _table(breakdown)),
        _section("Facts", _table(facts, "Every fact in the period with its carbon and cost "
                                        "and the files they were computed from.")),
    ]
    sections += _related(connection, facts["entity"].unique().tolist() if len(facts) else [])
    return sections


def _related(connection: duckdb.DuckDBPyConnection, entities: list[str]) -> list[str]:
    """The waste rows and trust checks of ``entities``."""
    out = []
    for table, title, note in (
            ("waste", "Waste", ("Energy spent idle, by versioned rule "
                                "(joulehouse/accounting/waste.py).")),
            ("trust_checks", "Trust checks", ("Figures of one measurement compared across "
                                              "methods and sources (rule, version, ratio)."))):
        if not _has(connection, table):
            out.append(_section(title, f'<p class="note">No {table} table in the warehouse.</p>'))
            continue
        rows = _read(connection, f"SELECT * FROM {table} WHERE entity IN "
                                 "(SELECT unnest(?::VARCHAR[]))", [entities])
        out.append(_section(title, _table(rows, note) if len(rows) else
                            '<p class="note">None.</p>'))
    return out


def _job_report(connection: duckdb.DuckDBPyConnection, scope: Scope) -> list[str]:
    if not _has(connection, "energy_facts"):
        raise ReportError("the warehouse has no energy_facts table")
    facts = _read(connection, "SELECT * FROM energy_facts WHERE entity = ? "
                              "ORDER BY component, method, window_start", [scope.job])
    if facts.empty:
        raise ReportError(f"no energy facts of job {scope.job!r}")
    facts["mean_power_w"] = facts["energy_j"] / facts["duration_s"]
    per = facts.groupby(["component", "method"], as_index=False)["energy_j"].sum()
    labels = [f"{c} {m}" for c, m in zip(per["component"], per["method"], strict=True)]
    png = bars_png(labels, [Series("energy", labels, (per["energy_j"] / 1e3).tolist())],
                   title="energy per component and method", y_label="kJ")
    sections = [_section("Energy facts", _image(png, "energy per component and method"),
                         _table(facts, "Every method is a row of its own: never sum them."))]
    for table, title in (("fact_quality", "How it was measured"), ("carbon_per_fact", "Carbon"),
                         ("cost_per_fact", "Cost")):
        if _has(connection, table):
            rows = _read(connection, f"SELECT * FROM {table} WHERE entity = ? "
                                     "ORDER BY component, method, window_start", [scope.job])
            sections.append(_section(title, _table(rows.drop(columns=["entity"]))))
    if _has(connection, "cc_jobs"):
        job = _read(connection, "SELECT * FROM cc_jobs WHERE job = ?", [scope.job])
        job = job[[c for c in JOB_COLUMNS if c in job.columns]]
        if len(job):
            sections.insert(0, _section("Job", _table(job)))
    return sections + _related(connection, [scope.job])


def render(root: str | os.PathLike[str], scope: Scope) -> str:
    """The HTML report of ``scope`` over the warehouse at ``root``; raises ReportError when
    nothing matches or a table it needs is missing."""
    with connect(root) as connection:
        sections = (_job_report if scope.job is not None else _group_report)(connection, scope)
    generated = pd.Timestamp.now(tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(scope.title)}</title><style>{_STYLE}</style></head><body>\n"
            f"<h1>{html.escape(scope.title)}</h1>\n"
            f'<p class="note">From the Joulehouse warehouse {html.escape(str(root))}, '
            f"{generated}. Energy in kWh or J, CO2e in g or kg, cost in the tariff's "
            "currency; days are UTC.</p>\n" + "\n".join(sections) + "\n</body></html>\n")
