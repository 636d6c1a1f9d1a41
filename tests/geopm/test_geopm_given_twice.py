"""A report given twice (one file landed under two names) is told from its stored frames."""

from pathlib import Path

from joulehouse.geopm.readers import read_report
from joulehouse.geopm.store import distinct_reports, report_identities, save_report
from joulehouse.warehouse import Warehouse
from tests.geopm.test_geopm_taudb import SESSION_REPORT

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "geopm"
LEGACY = EXAMPLES / "geopmbench_1host.legacy.report"
YAML = EXAMPLES / "fm_stream_dgemm_2host.yaml.report"


def _store(tables: Warehouse, key: str, path: Path) -> None:
    save_report(tables, key, read_report(path, report=key))


def test_the_same_report_under_two_keys_is_kept_once_under_the_first(tmp_path):
    tables = Warehouse(tmp_path / "warehouse")
    session = tmp_path / "session.report"
    session.write_text(SESSION_REPORT)
    other = tmp_path / "other.report"  # the same job but one host's energy: another report
    other.write_text(LEGACY.read_text().replace("4406.26", "4406.27"))
    for key, path in (("a/yaml", YAML), ("b/legacy", LEGACY), ("c/yaml-copy", YAML),
                      ("d/session", session), ("e/session-copy", session),
                      ("f/other", other)):
        _store(tables, key, path)
    keys = ["a/yaml", "b/legacy", "c/yaml-copy", "d/session", "e/session-copy", "f/other"]
    kept, twice = distinct_reports(tables, keys)
    assert kept == ["a/yaml", "b/legacy", "d/session", "f/other"]
    assert twice == {"c/yaml-copy": "a/yaml", "e/session-copy": "d/session"}
    # the key order decides which one is kept
    assert distinct_reports(tables, ["c/yaml-copy", "a/yaml"]) == (
        ["c/yaml-copy"], {"a/yaml": "c/yaml-copy"})
    identities = report_identities(tables, keys)
    assert len(set(identities.values())) == 4 and all(
        len(identity) == 20 for identity in identities.values())
