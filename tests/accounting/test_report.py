"""``joulehouse report``: a self-contained HTML report whose tables hold the known figures."""

from html.parser import HTMLParser

import pandas as pd
import pytest

from joulehouse.accounting import accounts, carbon, cost, intensity, tariff, trust, waste
from joulehouse.cli import main
from joulehouse.facts import ENERGY_FACTS_COLUMNS
from joulehouse.warehouse import Warehouse

T0 = pd.Timestamp("2024-01-15 10:00", tz="UTC")


class Sections(HTMLParser):
    """Per <h2> title: its tables (rows of cell texts) and <img> sources."""

    def __init__(self, text: str):
        super().__init__()
        self.sections: dict[str, dict] = {}
        self._title = self._cell = None
        self._heading = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        section = self.sections.get(self._title)
        if tag == "h2":
            self._heading, self._title = True, ""
        elif tag == "table" and section is not None:
            section["tables"].append([])
        elif tag == "tr" and section is not None:
            section["tables"][-1].append([])
        elif tag in ("td", "th"):
            self._cell = ""
        elif tag == "img" and section is not None:
            section["images"].append(dict(attrs)["src"])

    def handle_endtag(self, tag):
        if tag == "h2":
            self._heading = False
            self.sections[self._title] = {"tables": [], "images": []}
        elif tag in ("td", "th"):
            self.sections[self._title]["tables"][-1][-1].append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._heading:
            self._title += data
        elif self._cell is not None:
            self._cell += data

    def table(self, title: str, index: int = 0) -> pd.DataFrame:
        header, *rows = self.sections[title]["tables"][index]
        return pd.DataFrame(rows, columns=header)


def cc_facts(*rows: tuple) -> pd.DataFrame:
    """ClusterCockpit cpu facts of one hour each: (job, start, kWh, method) per row."""
    return pd.DataFrame([
        {"source": "clustercockpit", "entity": job, "component": "cpu", "window_start": start,
         "window_end": start + pd.Timedelta("1h"), "duration_s": 3600.0, "energy_j": kwh * 3.6e6,
         "method": method}
        for job, start, kwh, method in rows], columns=ENERGY_FACTS_COLUMNS)


def cc_jobs(users: dict[str, str], projects: dict[str, str]) -> pd.DataFrame:
    """cc_jobs rows: job -> user, job -> project."""
    return pd.DataFrame({"job": list(users), "hpc_user": list(users.values()),
                         "project": [projects[job] for job in users],
                         "cluster_partition": "main", "num_nodes": 1, "num_hwthreads": 72,
                         "num_acc": 0, "resources": '[{"hostname": "n1"}]'})


@pytest.fixture
def warehouse(tmp_path):
    """Two jobs of ann in January 2024 (1 and 2 kWh) and one of bob, at 100 gCO2e/kWh and
    0.25 EUR/kWh flat, with trust and waste tables."""
    facts = cc_facts(("c/1/1", T0, 1.0, "power"), ("c/1/1", T0, 1.1, "cc-backend"),
                     ("c/2/1", T0 + pd.Timedelta("1D"), 2.0, "power"),
                     ("c/3/1", T0, 5.0, "power"))
    jobs = cc_jobs({"c/1/1": "ann", "c/2/1": "ann", "c/3/1": "bob"},
                   {"c/1/1": "p1", "c/2/1": "p2", "c/3/1": "p1"})
    (tmp_path / "i").mkdir()
    pd.DataFrame({"Datetime (UTC)": pd.date_range("2024-01-01", "2024-02-01", freq="1h",
                                                  inclusive="left").strftime("%Y-%m-%d %H:%M"),
                  "Zone Id": "DE", intensity.EM_BASES["lca"][0]: 100.0}).to_csv(
        tmp_path / "i" / "de.csv", index=False)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "flat.csv").write_text(
        "site,timezone,valid_from,valid_to,weekdays,start,end,price_per_kwh,currency\n"
        "lab,UTC,2024-01-01,2024-02-01,*,00:00,24:00,0.25,EUR\n")
    result = accounts.account(facts, intensity.read_folder(tmp_path / "i"),
                              carbon.CarbonSettings(zones={"*": "DE"}), "UTC", jobs,
                              tariffs=tariff.read_folder(tmp_path / "t"),
                              cost_settings=cost.CostSettings(sites={"*": "lab"}))
    store = Warehouse(tmp_path / "warehouse")
    store.write_partition("energy_facts", "clustercockpit", facts)
    store.write_table("cc_jobs", jobs)
    for name, table in (("accounting_daily", result.daily), ("carbon_per_fact", result.carbon),
                        ("cost_per_fact", result.cost),
                        ("trust_checks", trust.trust_checks(facts, jobs)),
                        ("waste", waste.waste(facts, None, None, None))):
        store.write_table(name, table)
    return tmp_path / "warehouse"


def test_user_month_report_holds_the_known_totals_and_embeds_its_plots(warehouse, tmp_path):
    out = tmp_path / "ann.html"
    assert main(["report", "--user", "ann", "--month", "2024-01", "--out", str(out),
                 "--warehouse", str(warehouse)]) == 0
    text = out.read_text()
    page = Sections(text)
    totals = page.table("Totals")
    assert totals[["source", "method", "currency", "energy_kwh", "duration_h", "cost", "co2_kg"]
                  ].values.tolist() == [["clustercockpit", "power", "EUR", "3", "2", "0.75",
                                         "0.3"]]
    days = page.table("Per UTC day")
    assert days[["day", "energy_kwh", "co2_g", "cost"]].values.tolist() == [
        ["2024-01-15", "1", "100", "0.25"], ["2024-01-16", "2", "200", "0.5"]]
    assert page.table("Per source and project")["project"].tolist() == ["p1", "p2"]
    facts = page.table("Facts")
    assert facts["entity"].tolist() == ["c/1/1", "c/2/1"]  # primary method only, ann only
    assert facts["tariff_files"].tolist() == ["flat.csv", "flat.csv"]
    images = page.sections["Per UTC day"]["images"]
    assert len(images) == 3 and all(src.startswith("data:image/png;base64,") for src in images)
    assert "http" not in text.replace("http-equiv", "")  # nothing fetched when opened
    assert page.sections["Waste"]["tables"] == []  # none for ann: says so


def test_job_report_lists_every_method_and_its_carbon_and_cost(warehouse, tmp_path):
    out = tmp_path / "job.html"
    assert main(["report", "--job", "c/1/1", "--out", str(out), "--warehouse",
                 str(warehouse)]) == 0
    page = Sections(out.read_text())
    assert page.table("Job")["hpc_user"].tolist() == ["ann"]
    assert page.table("Energy facts")["method"].tolist() == ["cc-backend", "power"]
    assert page.table("Cost")["cost"].tolist() == ["0.275", "0.25"]
    assert page.table("Carbon")["co2_g"].tolist() == ["110", "100"]


def test_nothing_to_report_or_a_bad_month_is_a_usage_error_and_writes_nothing(warehouse,
                                                                             tmp_path, capsys):
    out = tmp_path / "none.html"
    assert main(["report", "--user", "zoe", "--out", str(out), "--warehouse",
                 str(warehouse)]) == 2
    assert capsys.readouterr().err.strip() == (f"joulehouse: {warehouse}: no accounting rows "
                                               "for user 'zoe'")
    with pytest.raises(SystemExit) as exited:
        main(["report", "--user", "ann", "--month", "January", "--out", str(out),
              "--warehouse", str(warehouse)])
    assert exited.value.code == 2
    assert "not a month YYYY-MM: 'January'" in capsys.readouterr().err
    assert not out.exists()



def test_costs_in_two_currencies_are_never_added(tmp_path):
    """ann's jobs on a cluster priced in EUR and one priced in USD, the same day and
    project: each table that shows cost shows it per currency."""
    facts = cc_facts(("c/1/1", T0, 1.0, "power"), ("d/2/1", T0, 2.0, "power"))
    jobs = cc_jobs({"c/1/1": "ann", "d/2/1": "ann"}, {"c/1/1": "p1", "d/2/1": "p1"})
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "two.csv").write_text(
        "site,timezone,valid_from,valid_to,weekdays,start,end,price_per_kwh,currency\n"
        "eu,UTC,2024-01-01,2024-02-01,*,00:00,24:00,0.25,EUR\n"
        "us,UTC,2024-01-01,2024-02-01,*,00:00,24:00,0.10,USD\n")
    result = accounts.account(
        facts, intensity.empty_intensity(), carbon.CarbonSettings(), "UTC", jobs,
        tariffs=tariff.read_folder(tmp_path / "t"),
        cost_settings=cost.CostSettings(sites={"clustercockpit/c": "eu",
                                               "clustercockpit/d": "us"}))
    store = Warehouse(tmp_path / "warehouse")
    store.write_table("cc_jobs", jobs)
    store.write_table("accounting_daily", result.daily)
    out = tmp_path / "ann.html"
    assert main(["report", "--user", "ann", "--out", str(out), "--warehouse",
                 str(tmp_path / "warehouse")]) == 0
    page = Sections(out.read_text())
    assert page.table("Totals")[["currency", "energy_kwh", "cost"]].values.tolist() == [
        ["EUR", "1", "0.25"], ["USD", "2", "0.2"]]
    for title in ("Per UTC day", "Per source and project"):
        table = page.table(title)
        assert table[["currency", "energy_kwh", "cost"]].values.tolist() == [
            ["EUR", "1", "0.25"], ["USD", "2", "0.2"]], title
