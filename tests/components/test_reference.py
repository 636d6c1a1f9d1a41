"""The settings tables of docs/configuration.md are those the component types' schemas give."""

from components.reference import BEGIN, END, PAGE, TYPES, rewritten, table
from components.site import Site


def test_the_page_holds_the_tables_the_schemas_give():
    page = PAGE.read_text()
    assert rewritten(page) == page, "run `python -m components.reference` and commit the page"


def test_a_table_has_a_row_per_yaml_key_with_the_resources_type_default_and_variable():
    rows = table(Site).splitlines()
    assert rows[:2] == ["### `components.Site`", ""]
    assert rows[4:] == [
        "| key | type | default | overridden by | meaning |",
        "|---|---|---|---|---|",
        ("| `time_zone` | `str` | `\"Europe/Berlin\"` | `JOULEHOUSE_SITE_TIMEZONE` | IANA zone of "
        "the site's local days. |"),
        ("| `zones` | `dict[str, str]` | `{\"*\": \"DE\"}` | `JOULEHOUSE_CARBON_ZONES` | "
        "&lt;source&gt;/&lt;group&gt;, &lt;source&gt; or * -&gt; grid zone. |"),
        "| `pue` | `float` | `1.0` | `JOULEHOUSE_PUE` | Site power usage effectiveness. |",
        ("| `warehouse` | `str` | `\"warehouse\"` | `JOULEHOUSE_WAREHOUSE` | A folder, or "
        "s3://BUCKET/PREFIX on an object store. |"),
        ("| `taudb_url` | `str` | `null` | `JOULEHOUSE_TAUDB_URL` | sqlite:///FILE or "
        "postgresql://USER@HOST:PORT/DB. |"),
        ("| `taudb_schema` | `str \\| None` | `null` | `JOULEHOUSE_TAUDB_SCHEMA` | PostgreSQL "
        "schema holding the TAUdb tables (default: public). |")]


def test_the_page_has_a_section_per_type_between_the_markers():
    page = PAGE.read_text()
    generated = page[page.index(BEGIN):page.index(END)]
    assert [line for line in generated.splitlines() if line.startswith("### ")] == [
        f"### `components.{kind.__name__}`" for kind in TYPES]
