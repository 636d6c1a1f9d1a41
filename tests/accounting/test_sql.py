"""``joulehouse sql`` and the query entry point: views over the warehouse's Parquet files."""

import io

import pandas as pd
import pytest

from joulehouse.accounting import generator
from joulehouse.accounting.query import connect, query, tables
from joulehouse.cli import main
from joulehouse.warehouse import Warehouse


@pytest.fixture
def warehouse(tmp_path):
    store = Warehouse(tmp_path / "warehouse")
    facts = generator.facts(40, "2022-03-01", "3D", seed=1)
    for source, rows in facts.groupby("source"):
        store.write_partition("energy_facts", source, rows)
    store.write_partition("frames/power", "a", pd.DataFrame({"power_w": [1.0, 2.0]}))
    store.write_partition("frames/power", "b", pd.DataFrame({"power_w": [3.0], "x": ["y"]}))
    (store.table_dir("energy_facts") / ".tmp-half-written.parquet").write_bytes(b"not parquet")
    return tmp_path / "warehouse", facts


def test_every_table_is_a_view_read_in_place(warehouse):
    root, facts = warehouse
    assert set(tables(root)) == {"energy_facts", "frames/power"}
    result = query(root, "SELECT source, count(*) AS n, sum(energy_j) AS e FROM energy_facts "
                         "GROUP BY source ORDER BY source")
    expected = facts.groupby("source")["energy_j"].agg(["size", "sum"])
    assert result["n"].tolist() == expected["size"].tolist()
    assert result["e"].tolist() == pytest.approx(expected["sum"].tolist())
    nested = query(root, "SELECT sum(power_w) AS p, count(x) AS x FROM frames.power")
    assert (nested["p"].iloc[0], nested["x"].iloc[0]) == (6.0, 1)
    first = query(root, "SELECT min(window_start) AS t FROM energy_facts")["t"].iloc[0]
    assert first == facts["window_start"].min()  # tz-aware UTC kept


def test_views_of_named_tables_only_list_those_tables(warehouse):
    root, facts = warehouse
    store = Warehouse(root)
    assert ([f.path for f in store.files("energy_facts")]
            == [f.path for f in store.table_files()["energy_facts"]])
    assert store.files("not_stored") == []
    with connect(root, tables=["energy_facts", "not_stored"]) as connection:
        views = {name for (name,) in connection.execute(
            "SELECT table_name FROM information_schema.tables").fetchall()}
        [(rows,)] = connection.execute("SELECT count(*) FROM energy_facts").fetchall()
    assert views == {"energy_facts"} and rows == len(facts)


def test_cli_writes_csv_and_reports_a_bad_query_in_one_line(warehouse, capsys):
    root, facts = warehouse
    code = main(["sql", "--warehouse", str(root),
                 "SELECT entity, energy_j FROM energy_facts ORDER BY entity LIMIT 3"])
    out = capsys.readouterr().out
    assert code == 0
    table = pd.read_csv(io.StringIO(out))
    assert table["entity"].tolist() == sorted(facts["entity"])[:3]
    assert main(["sql", "--warehouse", str(root), "SELECT * FROM nope"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("joulehouse: query failed: Catalog Error")
    assert main(["sql", "--warehouse", str(root / "missing"), "SELECT 1"]) == 2
    assert main(["sql", "--warehouse", str(root), "--tables"]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == ["energy_facts", "frames.power"]


def test_cli_queries_a_warehouse_on_an_object_store(warehouse, object_store, s3_warehouse,
                                                    monkeypatch, capsys):
    root, _ = warehouse
    local = Warehouse(root)
    remote = Warehouse(s3_warehouse, object_store.store)
    for table in ("energy_facts", "frames/power"):
        for key in local.partition_keys(table):
            remote.write_partition(table, key, local.read_partitions(table, [key]))
    sql = ("SELECT source, count(*) AS n, sum(energy_j) AS e, min(window_start) AS t "
           "FROM energy_facts GROUP BY source ORDER BY source")
    pd.testing.assert_frame_equal(query(remote, sql), query(root, sql))
    for variable, value in object_store.environment.items():
        monkeypatch.setenv(variable, value)
    assert set(tables(s3_warehouse)) == {"energy_facts", "frames/power"}
    assert main(["sql", "--warehouse", s3_warehouse,
                 "SELECT sum(power_w) AS p, count(x) AS x FROM frames.power"]) == 0
    assert capsys.readouterr().out.splitlines() == ["p,x", "6.0,1"]
    assert main(["sql", "--warehouse", s3_warehouse, "--tables"]) == 0
    assert capsys.readouterr().out.splitlines() == ["energy_facts", "frames.power"]
