"""TAU's own Java reader (PerfDMF's ``DBDataSource.load()``, the path ParaProf takes) run on
a PostgreSQL TAUdb, through the harness ``java/TauReadTrial.java``; and what Joulehouse wrote
there, in the same shape, to compare with.
"""

from __future__ import annotations

import json
import select
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from joulehouse.taudb.connect import TaudbDatabase
from joulehouse.taudb.stored import callpath_names

HARNESS = Path(__file__).with_name("java") / "TauReadTrial.java"
#: A bound, not a timing: the largest trials take TAU's reader about 12 s.
READ_TIMEOUT_S = 300
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "joulehouse" / "taudb" / "sql" / "taudb.sql"


class TauReader:
    """The harness compiled once into ``build`` and started once, serving each :meth:`read`
    and :meth:`read_file` in the same JVM (a JVM per trial would load TAU's classes again
    each time); :meth:`close` ends it. A request that fails, or gets no answer in
    ``READ_TIMEOUT_S``, ends the JVM too: the later requests fail at once, naming it."""

    def __init__(self, java_tools: dict[str, str], classpath: str, build: Path) -> None:
        subprocess.run([java_tools["javac"], "-d", str(build), "-cp", classpath, str(HARNESS)],
                       check=True, capture_output=True, text=True)
        self.classpath, self.log = classpath, build / "tau-reader.log"
        self.broken = ""
        with self.log.open("wb") as log:
            self.jvm = subprocess.Popen(
                [java_tools["java"], "-cp", f"{classpath}:{build}", "TauReadTrial"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                encoding="utf-8")

    def read(self, url: str, trial_id: int, out: Path) -> tuple[dict, Path]:
        """What TAU's reader made of trial ``trial_id`` of the PostgreSQL TAUdb at ``url``
        (public schema), and the path of its packed export (``writePacked``)."""
        config, ppk = out / "perfdmf.cfg", out / "trial.ppk"
        config.write_text(perfdmf_config(url, self.classpath))
        return self._run([str(config), str(trial_id)], out, ppk), ppk

    def read_file(self, ppk: Path, out: Path) -> dict:
        """What TAU's reader (``PackedProfileDataSource``, as ParaProf opens a file) made of
        the packed profile ``ppk``."""
        return self._run([str(ppk), "-"], out)

    def close(self) -> None:
        """End the JVM (the end of its requests; killed if it does not end in time)."""
        try:
            self.jvm.stdin.close()
            self.jvm.wait(timeout=READ_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            self.jvm.kill()
            self.jvm.wait()
        finally:
            self.jvm.stdout.close()

    def _run(self, source: list[str], out: Path, export: Path | None = None) -> dict:
        assert not self.broken, f"TAU's reader ended after an earlier request: {self.broken}"
        result = out / "trial.json"
        request = [*source, str(result), *([str(export)] if export else [])]
        try:
            self.jvm.stdin.write("\t".join(request) + "\n")
            self.jvm.stdin.flush()
            ready, _, _ = select.select([self.jvm.stdout], [], [], READ_TIMEOUT_S)
            answer = (self.jvm.stdout.readline().rstrip("\n") or "its JVM ended" if ready
                      else f"no answer in {READ_TIMEOUT_S} s")
        except BrokenPipeError:
            answer = "its JVM ended"
        if answer != "ok":
            self.broken = f"{source}: {answer}"
            self.close()
            raise AssertionError(f"TAU's reader failed on {self.broken}\n"
                                 f"{self.log.read_text(errors='replace')[-4000:]}")
        return json.loads(result.read_text())


def perfdmf_config(url: str, classpath: str) -> str:
    """PerfDMF's ``key:value`` configuration for a trust-authenticated PostgreSQL URL."""
    parts = urlsplit(url)
    jar = next(p for p in classpath.split(":") if p.endswith("postgresql.jar"))
    return "".join(f"{key}:{value}\n" for key, value in {
        "jdbc_db_jarfile": jar, "jdbc_db_driver": "org.postgresql.Driver",
        "jdbc_db_type": "postgresql", "db_hostname": parts.hostname, "db_portnum": parts.port,
        "db_dbname": parts.path.lstrip("/"), "db_schemaprefix": "",
        "db_username": parts.username, "db_password": "", "db_schemafile": SCHEMA_FILE,
        "xml_sax_parser": "",
    }.items())


def written_values(db: TaudbDatabase, trial_id: int, metrics: list[str]) -> dict[str, dict]:
    """Joulehouse's timer values in the harness's shape: thread key ("n,c,t", or the derived
    thread's code) -> callpath name -> {calls, subroutines, inclusive[], exclusive[]}."""
    names = callpath_names(db, trial_id)
    rows = db.query(
        "SELECT d.timer_callpath, h.node_rank, h.context_rank, h.thread_rank, m.name, "
        "v.inclusive_value, v.exclusive_value, d.calls, d.subroutines FROM timer_value v "
        "JOIN timer_call_data d ON v.timer_call_data = d.id JOIN thread h ON d.thread = h.id "
        "JOIN metric m ON v.metric = m.id WHERE h.trial = ?", (trial_id,))
    column = {metric: i for i, metric in enumerate(metrics)}
    out: dict[str, dict] = {}
    for callpath, node, context, thread, metric, inclusive, exclusive, calls, subroutines in rows:
        key = f"{node},{context},{thread}" if node >= 0 else str(node)
        entry = out.setdefault(key, {}).setdefault(names[callpath], {
            "calls": float(calls), "subroutines": float(subroutines),
            "inclusive": [None] * len(metrics), "exclusive": [None] * len(metrics)})
        entry["inclusive"][column[metric]] = inclusive
        entry["exclusive"][column[metric]] = exclusive
    return out


def written_user_events(db: TaudbDatabase, trial_id: int) -> dict[str, dict]:
    """thread key -> user event -> [count, max, min, mean, SumSqr], as Joulehouse wrote them."""
    out: dict[str, dict] = {}
    for node, context, thread, name, *values in db.query(
            "SELECT h.node_rank, h.context_rank, h.thread_rank, c.name, v.sample_count, "
            "v.maximum_value, v.minimum_value, v.mean_value, v.standard_deviation "
            "FROM counter_value v JOIN counter c ON v.counter = c.id "
            "JOIN thread h ON v.thread = h.id WHERE c.trial = ?", (trial_id,)):
        out.setdefault(f"{node},{context},{thread}", {})[name] = [float(v) for v in values]
    return out
