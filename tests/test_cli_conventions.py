"""The ``joulehouse`` command line as a user meets it: exit codes, the one line on stderr,
and nothing created by a command that only reads (docs/cli.md). Command lines run in this
process (:func:`joulehouse`); the installed command's entry point, pipes and terminals in
processes of their own."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import io
import logging
import os
import pty
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import termios
import warnings
from importlib.metadata import version
from pathlib import Path

import psycopg2
from postgres_server import free_port
from taudb_postgres import as_admin, taus_ddl_schema

from joulehouse.cli import COMMAND_MODULES, build_parser, main
from joulehouse.commands.conventions import INTERNAL_ERROR, run
from joulehouse.taudb.connect import masked_url, unavailable
from joulehouse.taudb.schema import INDEXES

PROJECT = Path(__file__).resolve().parent.parent
EXAMPLE = PROJECT / "examples" / "gpu-data"
CC_ARCHIVE = PROJECT / "examples" / "clustercockpit" / "archive"
TAU_PROFILES = PROJECT / "examples" / "tau-profiles" / "tau2_wrap_mpi2"
JOULEHOUSE = Path(sys.executable).with_name("joulehouse")
ROOT_EXPECTED = ("expected a GPU benchmark data root: experiment/benchmark/run/repetition "
                 "folders, each with timestamps.csv")


def installed(*args) -> subprocess.CompletedProcess:
    """The installed command's result in a process of its own, its output as text: for what
    only a process shows (the script's entry point; pipes and terminals use ``JOULEHOUSE``
    directly)."""
    assert JOULEHOUSE.is_file(), f"{JOULEHOUSE} is not installed: run make .venv/installed"
    return subprocess.run([str(JOULEHOUSE), *map(str, args)], check=False, capture_output=True,
                          text=True, timeout=120)


def joulehouse(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """What the installed command's script does (``sys.exit(main(argv))``), run in this
    process (in ``cwd``), its output as text; the warnings and the log records of level
    WARNING and above that a process of its own would print on its stderr (Python's
    default filters, logging's last resort) go there too. A process per call would only
    add its start-up (pandas' and pandera's imports) to each of the
    suite's hundred command lines; the entry point, pipes and terminals are tested on the
    installed command. Warnings raised while a module is first imported are not seen here
    (the module is imported once per test process)."""
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
                for _ in range(2))
    here, root = Path.cwd(), logging.getLogger()
    last_resort = logging.StreamHandler(err)
    last_resort.setLevel(logging.WARNING)
    with (contextlib.redirect_stdout(out), contextlib.redirect_stderr(err),
          warnings.catch_warnings()):
        warnings.simplefilter("default")  # Python's default filters, as in a new process
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning,
                         ResourceWarning):
            warnings.simplefilter("ignore", category)
        warnings.showwarning = _print_warning
        root.addHandler(last_resort)
        try:
            os.chdir(cwd or here)
            code = main(list(map(str, args)))
        except SystemExit as exit_:
            code = _exit_code(exit_)
        finally:
            root.removeHandler(last_resort)
            os.chdir(here)
    return subprocess.CompletedProcess(["joulehouse", *args], code, _text(out), _text(err))


def _exit_code(exit_: SystemExit) -> int:
    """The status a process ending with ``exit_`` has: a message is printed and is 1."""
    if exit_.code is None or isinstance(exit_.code, int):
        return exit_.code or 0
    print(exit_.code, file=sys.stderr)
    return 1


def _print_warning(message, category, filename, lineno, file=None, line=None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _text(stream: io.TextIOWrapper) -> str:
    return stream.buffer.getvalue().decode("utf-8", errors="replace")


def one_error_line(result: subprocess.CompletedProcess, code: int = 2) -> str:
    """The one stderr line of a failed command (no traceback), without ``joulehouse: ``."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("joulehouse: "), result.stderr
    return lines[0].removeprefix("joulehouse: ")


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` with its bytes (None for a folder)."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
            for p in sorted(folder.rglob("*"))}


def copies_of_example(root: Path, copies: int) -> Path:
    """A data root holding the example's experiments ``copies`` times (as symlinks)."""
    root.mkdir()
    for i in range(copies):
        for experiment in ("clock-limit", "power-limit"):
            (root / f"{experiment}-{i}").symlink_to(EXAMPLE / experiment)
    return root


def commands(parser: argparse.ArgumentParser, path=()) -> list[tuple[str, ...]]:
    """Every command and group below ``parser``, as word tuples."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(*path, name), *commands(sub, (*path, name))]
    return found


# --- the command itself -------------------------------------------------------------------------

def test_version():
    result = installed("--version")
    assert result.returncode == 0 and result.stdout == f"joulehouse {version('joulehouse')}\n"


def test_every_help_shows_an_example():
    every = commands(build_parser())
    assert ("energy", "gpu") in every and ("taudb", "list") in every and len(every) == 18
    assert ("read", "intensity") in every
    for words in [(), *every]:
        result = joulehouse(*words, "--help")
        assert result.returncode == 0, words
        example = re.search(r"^examples:\n  \$ (.*)$", result.stdout, re.MULTILINE)
        assert example and example.group(1).startswith(" ".join(("joulehouse", *words))), words


def test_a_command_line_builds_the_same_command_from_its_own_modules_alone():
    every = commands(build_parser())
    assert {words[0] for words in every if len(words) == 1} == set(COMMAND_MODULES)
    for command in COMMAND_MODULES:
        alone = [words for words in commands(build_parser(command)) if words[0] == command]
        assert alone == [words for words in every if words[0] == command], command


# --- paths that must exist and hold something ---------------------------------------------------

def test_missing_data_root_is_an_error_saying_what_was_expected(tmp_path):
    result = joulehouse("energy", "gpu", tmp_path / "typo", cwd=tmp_path)
    assert one_error_line(result) == f"{tmp_path / 'typo'}: no such file or folder; {ROOT_EXPECTED}"
    assert result.stdout == "" and tree(tmp_path) == {}


def test_empty_folder_file_and_inner_folder_are_not_data_roots(tmp_path):
    (tmp_path / "empty").mkdir()
    result = joulehouse("energy", "gpu", tmp_path / "empty")
    assert one_error_line(result) == f"{tmp_path / 'empty'}: empty folder; {ROOT_EXPECTED}"
    (tmp_path / "file.csv").write_text("a,b\n")
    result = joulehouse("energy", "gpu", tmp_path / "file.csv")
    assert one_error_line(result) == f"{tmp_path / 'file.csv'}: not a folder; {ROOT_EXPECTED}"
    run = EXAMPLE / "power-limit" / "bert" / "250W"
    result = joulehouse("energy", "gpu", run)
    assert one_error_line(result) == (f"{run}: no repetition folders; {ROOT_EXPECTED} (this is a "
                                      f"run folder: give the data root, {EXAMPLE})")
    assert result.stdout == ""


def test_folders_of_a_data_root_too_near_the_filesystem_root_name_no_data_root():
    # directly under /tmp: a run folder has no data root three levels up (only /tmp and /)
    with tempfile.TemporaryDirectory(dir="/tmp") as shallow:
        run = Path(shallow)
        for rep in ("0", "1"):
            shutil.copytree(EXAMPLE / "power-limit/bert/250W" / rep, run / rep)
        for folder, level in ((run, "run"), (run / "0", "repetition")):
            result = joulehouse("energy", "gpu", folder)
            assert one_error_line(result) == (f"{folder}: no repetition folders; {ROOT_EXPECTED} "
                                              f"(this looks like a {level} folder, but no data "
                                              "root is above it)")
        url = f"sqlite:///{run}/taudb.sqlite"
        result = joulehouse("taudb", "load", url, run)
        assert one_error_line(result, 1) == (f"{run}: a run folder is DATA_ROOT/experiment/"
                                             f"benchmark/run; {run} has too few folders above it")


def test_bad_repetition_reported_while_the_good_ones_go_out(tmp_path):
    root = tmp_path / "data"
    shutil.copytree(EXAMPLE / "power-limit", root / "power-limit")
    bad = root / "power-limit/bert/250W/1/gpu-power.csv"
    bad.write_bytes(bad.read_bytes()[:-5])
    result = joulehouse("energy", "gpu", root)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"joulehouse: power-limit/bert/250W/1: {bad}:")
    assert len(result.stderr.splitlines()) == 1
    rows = result.stdout.splitlines()[1:]
    assert [row.split(",")[1] for row in rows] == [
        "power-limit/bert/150W/0", "power-limit/bert/150W/1", "power-limit/bert/200W/0",
        "power-limit/bert/200W/1", "power-limit/bert/250W/0"]


def test_when_every_item_is_bad_nothing_is_written_and_the_output_file_is_untouched(tmp_path):
    root = tmp_path / "data"
    shutil.copytree(EXAMPLE / "power-limit" / "bert" / "250W", root / "power-limit/bert/250W")
    for bad in root.glob("power-limit/bert/250W/*/gpu-power.csv"):
        bad.write_bytes(bad.read_bytes()[:-5])
    archive = tmp_path / "archive"
    shutil.copytree(CC_ARCHIVE, archive)
    for meta in archive.rglob("meta.json"):
        meta.write_text("{")
    for data in archive.rglob("data.json"):
        data.write_text("{")
    out = tmp_path / "old-output"
    out.write_text("kept\n")
    for command, unit, count in ((["energy", "gpu", root], "repetition", 2),
                                 (["energy", "cc", archive], "job", 4),
                                 (["cc", "export-db", archive], "job", 4)):
        args = [*command, out] if command[0] == "cc" else [*command, "--out", out]
        result = joulehouse(*args)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == count + 1, result.stderr
        assert lines[-1] == (f"joulehouse: no {unit} could be read ({count} reported above); "
                             "nothing written")
        assert result.stdout == "" and out.read_text() == "kept\n"


def test_an_archive_of_an_unknown_version_is_a_usage_error_and_nothing_is_written(tmp_path):
    archive = tmp_path / "archive"
    shutil.copytree(CC_ARCHIVE, archive)
    (archive / "version.txt").write_text("abc\n")
    out = tmp_path / "old-output"
    out.write_text("kept\n")
    for args in (["energy", "cc", archive, "--out", out], ["cc", "export-db", archive, out]):
        result = joulehouse(*args)
        assert one_error_line(result) == (f"{archive / 'version.txt'}:1: unsupported archive "
                                          "version 'abc' (expected one of 1, 2, 3); not a "
                                          "ClusterCockpit archive of a known version")
        assert result.stdout == "" and out.read_text() == "kept\n"


# --- output -------------------------------------------------------------------------------------

def test_pipe_closed_after_the_first_line_ends_quietly(tmp_path):
    root = copies_of_example(tmp_path / "data", copies=2)  # 16 rows: more than the pipe holds
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    process = subprocess.Popen([str(JOULEHOUSE), "energy", "gpu", str(root)], stdout=write_end,
                               stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    first = b""
    while not first.endswith(b"\n"):
        first += os.read(read_end, 1)
    os.close(read_end)  # as `head -1` does
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 141
    assert stderr == ""
    assert first.decode().startswith("data_root,repetition,experiment,")


def test_parquet_is_not_written_to_a_terminal(tmp_path):
    controller, terminal = pty.openpty()
    result = subprocess.run([str(JOULEHOUSE), "energy", "gpu", str(EXAMPLE), "--format",
                             "parquet"], check=False, stdout=terminal, stderr=subprocess.PIPE,
                            text=True, timeout=120)
    os.close(terminal)
    os.close(controller)
    assert one_error_line(result) == ("Parquet is binary, not for a terminal: give --out FILE "
                                      "or redirect the output")


def test_unwritable_output_file_is_an_error_naming_it(tmp_path):
    out = tmp_path / "no-such-folder" / "energy.csv"
    result = joulehouse("energy", "gpu", EXAMPLE, "--out", out)
    assert one_error_line(result) == f"{out}: cannot write: No such file or directory"


# --- progress -----------------------------------------------------------------------------------

def stderr_on_a_terminal(*args) -> tuple[int, str, str]:
    """Exit code, what a terminal on stderr showed, and stdout, of ``joulehouse *args``."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    env = {**os.environ, "TQDM_MININTERVAL": "0"}  # every item redrawn: no timing in the test
    process = subprocess.Popen([str(JOULEHOUSE), *map(str, args)], stdout=subprocess.PIPE,
                               stderr=terminal, env=env, text=True)
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the command closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    stdout = process.stdout.read()
    return process.wait(timeout=120), shown.decode(), stdout


def test_progress_on_a_terminal_only_and_quiet_silences_it():
    code, shown, stdout = stderr_on_a_terminal("energy", "gpu", EXAMPLE)
    assert code == 0 and len(stdout.splitlines()) == 9
    assert "0/8 [00:00<?, ?repetition/s]" in shown
    assert re.search(r"[1-8]/8 \[\d\d:\d\d<\d\d:\d\d, +\d+(\.\d+)?repetition/s\]", shown), shown
    # --quiet and a pipe silence the progress, never what is left out (a warning)
    left_out = (f"joulehouse: {EXAMPLE / 'clock-limit/bert/877MHz,1065MHz/1'}: left out its "
                "external energy_facts row: no readings: power-external.csv missing or empty")
    code, shown, stdout = stderr_on_a_terminal("energy", "gpu", EXAMPLE, "--quiet")
    assert code == 0 and shown.splitlines() == [left_out] and len(stdout.splitlines()) == 9
    result = joulehouse("energy", "gpu", EXAMPLE)  # stderr a pipe: no progress
    assert result.returncode == 0 and result.stderr == left_out + "\n"


# --- TAUdb: read-only list, creating init and load ----------------------------------------------

def test_list_of_a_missing_sqlite_file_or_folder_creates_nothing(tmp_path):
    result = joulehouse("taudb", "list", f"sqlite:///{tmp_path}/new.db")
    assert one_error_line(result) == f"sqlite:///{tmp_path}/new.db: no such database file"
    result = joulehouse("taudb", "list", f"sqlite:///{tmp_path}/nodir/new.db")
    assert one_error_line(result) == (f"sqlite:///{tmp_path}/nodir/new.db: no such database "
                                      f"file (no folder {tmp_path}/nodir)")
    assert result.stdout == "" and tree(tmp_path) == {}


def test_list_of_a_database_without_taudb_schema_changes_nothing(tmp_path):
    (tmp_path / "empty.db").touch()
    with sqlite3.connect(tmp_path / "other.db") as other:
        other.execute("CREATE TABLE readings (value REAL)")
    other.close()
    (tmp_path / "text.db").write_text("not a database\n" * 100)
    before = tree(tmp_path)
    for name in ("empty.db", "other.db"):
        result = joulehouse("taudb", "list", f"sqlite:///{tmp_path}/{name}")
        assert one_error_line(result) == (f"sqlite:///{tmp_path}/{name}: no TAUdb schema (no "
                                          "schema_version table); `joulehouse taudb init` "
                                          "creates one")
    result = joulehouse("taudb", "list", f"sqlite:///{tmp_path}/text.db")
    assert one_error_line(result) == f"sqlite:///{tmp_path}/text.db: SQLite: file is not a database"
    assert tree(tmp_path) == before


def test_load_then_list_read_only(tmp_path):
    url = f"sqlite:///{tmp_path}/db/taudb.sqlite"
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("no profiles here\n")
    result = joulehouse("taudb", "load", url, TAU_PROFILES, tmp_path / "missing")
    assert one_error_line(result) == (f"{tmp_path / 'missing'}: no such file or folder; "
                                      "expected a .ppk file, a folder of TAU profiles "
                                      "(profile.<node>.<context>.<thread>, or MULTI__<metric> "
                                      "folders of them), a GPU benchmark run folder "
                                      "(experiment/benchmark/run, whose sub-folders are "
                                      "repetitions with timestamps.csv), a GEOPM report file, "
                                      "a ClusterCockpit "
                                      "job folder (<cluster>/<jobId/1000>/<jobId%1000>/"
                                      "<startTime> of an archive with version.txt), or PowerAPI "
                                      "report files or folders of them")
    assert not (tmp_path / "db").exists()  # nothing loaded, nothing created
    result = joulehouse("taudb", "load", url, junk, TAU_PROFILES)
    assert result.returncode == 1
    assert one_error_line(result, 1).startswith(f"{junk}: not a trial source: expected ")
    assert result.stdout == f"trial 1: tau2_wrap_mpi2 (2 threads) from {TAU_PROFILES}\n"
    result = joulehouse("taudb", "load", url, junk, TAU_PROFILES, "--name", "x")
    assert result.returncode == 2 and result.stderr.startswith("usage: joulehouse taudb load")
    assert result.stderr.splitlines()[-1] == ("joulehouse taudb load: error: --name needs "
                                              "exactly one PATH")
    database = tmp_path / "db" / "taudb.sqlite"
    before = (database.read_bytes(), database.stat().st_mtime_ns)
    result = joulehouse("taudb", "list", url)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.splitlines() == ["id\tname\tdata_source\tthreads\tsource",
                                          f"1\ttau2_wrap_mpi2\t1\t2\t{TAU_PROFILES}"]
    assert (database.read_bytes(), database.stat().st_mtime_ns) == before


# --- database errors: one line, the URL's password masked ---------------------------------------

def test_closed_port_is_one_line_with_the_password_masked():
    port = free_port()  # free a moment ago: nothing listens there
    url = f"postgresql://nobody:s3cret@127.0.0.1:{port}/x"
    result = joulehouse("taudb", "list", url)
    assert one_error_line(result) == (f"postgresql://nobody:***@127.0.0.1:{port}/x: Connection "
                                      "refused (is the server running on that host and "
                                      "accepting TCP/IP connections?)")
    assert "s3cret" not in result.stderr and result.stdout == ""
    debug = joulehouse("taudb", "list", url, "--debug")
    assert debug.returncode == 2 and "Traceback" in debug.stderr
    assert debug.stderr.splitlines()[-1] == result.stderr.strip() and "s3cret" not in debug.stderr


def test_unknown_host_is_one_line():
    result = joulehouse("taudb", "init", "postgresql://me:pw@no-such-host.invalid/taudb")
    line = one_error_line(result)
    assert line.startswith("postgresql://me:***@no-such-host.invalid/taudb: could not translate "
                           'host name "no-such-host.invalid" to address')


def test_missing_database_schema_and_permission_on_postgresql(postgres_url):
    server = postgres_url.rsplit("/", 1)[0]
    result = joulehouse("taudb", "list", f"{server}/no_such_db")
    assert one_error_line(result) == (f"{server}/no_such_db: database \"no_such_db\" does not "
                                      "exist")
    result = joulehouse("taudb", "list", postgres_url, "--schema", "cli_nothere")
    assert one_error_line(result) == (f"{postgres_url}: no TAUdb schema in schema 'cli_nothere' "
                                      "(no schema_version table); `joulehouse taudb init` "
                                      "creates one")
    assert joulehouse("taudb", "init", postgres_url, "--schema", "cli_denied").returncode == 0
    result = joulehouse("taudb", "list", postgres_url, "--schema", "cli_denied")  # read-only
    assert result.returncode == 0 and result.stdout == "id\tname\tdata_source\tthreads\tsource\n"
    with psycopg2.connect(postgres_url) as admin, admin.cursor() as cursor:
        cursor.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'cli_%'")
        assert cursor.fetchall() == [("cli_denied",)]  # list created no cli_nothere
        cursor.execute("DROP ROLE IF EXISTS cli_reader; CREATE ROLE cli_reader LOGIN; "
                       "GRANT USAGE ON SCHEMA cli_denied TO cli_reader")
    admin.close()
    reader_url = postgres_url.replace("postgresql://postgres@", "postgresql://cli_reader:pw@")
    result = joulehouse("taudb", "list", reader_url, "--schema", "cli_denied")
    assert one_error_line(result) == (f"{reader_url.replace(':pw@', ':***@')}: permission "
                                      "denied for table trial")


def test_libpq_options_in_the_url_are_merged_and_conflicting_keys_refused(postgres_url):
    assert joulehouse("taudb", "init", postgres_url, "--schema", "cli_opts").returncode == 0
    # the URL's options come first, the command's read-only and search_path settings after them
    with_options = f"{postgres_url}?options=-c%20default_transaction_read_only%3Doff"
    result = joulehouse("taudb", "list", with_options, "--schema", "cli_opts")
    assert result.returncode == 0 and result.stdout == "id\tname\tdata_source\tthreads\tsource\n"
    result = joulehouse("taudb", "load", with_options, TAU_PROFILES, "--schema", "cli_opts")
    assert result.returncode == 0, result.stderr
    for query, key in (("host=elsewhere", "'host' repeats what the URL already says"),
                       ("sslmode=disable&sslmode=require", "'sslmode' given 2 times")):
        result = joulehouse("taudb", "list", f"{postgres_url}?{query}")
        assert one_error_line(result) == (f"{postgres_url}?{query}: not a usable PostgreSQL URL: "
                                          f"query key {key}")


def test_init_exits_2_naming_each_index_it_could_not_build_and_what_to_do(postgres_url):
    """`taudb init` on a TAUdb whose timer_value a load holds: exit 2, one line naming the
    index and its table, the lock timeout and to run it when loads are quiet; run
    again then, it builds it (whatever loads of the process met before) and exits 0."""
    taus_ddl_schema(postgres_url, "cli_busy")
    writer = psycopg2.connect(postgres_url)
    try:
        with writer.cursor() as cursor:
            cursor.execute("LOCK TABLE cli_busy.timer_value IN ROW EXCLUSIVE MODE")
        result = joulehouse("taudb", "init", postgres_url, "--schema", "cli_busy")
        assert result.stdout == "the TAUdb schema is already there\n"
        assert one_error_line(result) == (
            f"{postgres_url}: Joulehouse's indexes not built: joulehouse_timer_value_metric "
            "on timer_value (metric): canceling statement due to lock timeout; other sessions "
            "were writing these tables (loads, TAU's tools): run `joulehouse taudb init` "
            "when loads are quiet (without them replacing a trial scans tables of every "
            "stored trial)")
        writer.rollback()
        result = joulehouse("taudb", "init", postgres_url, "--schema", "cli_busy")
        assert (result.returncode, result.stderr) == (0, "")
    finally:
        writer.close()


def test_init_as_a_role_not_owning_the_tables_says_to_grant_the_owners_role(postgres_url):
    """A role given every right on TAU's tables but not their ownership may not index them:
    exit 2, one line naming all of Joulehouse's indexes with their tables, the error and
    the two ways out; granted the owner's role, the same command builds them."""
    as_admin(postgres_url, "CREATE ROLE cli_tables_owner", "CREATE ROLE cli_tenant LOGIN")
    taus_ddl_schema(postgres_url, "cli_owned", owner="cli_tables_owner")
    as_admin(postgres_url, "GRANT USAGE ON SCHEMA cli_owned TO cli_tenant",
              "GRANT ALL ON ALL TABLES IN SCHEMA cli_owned TO cli_tenant")
    tenant_url = postgres_url.replace("postgresql://postgres@", "postgresql://cli_tenant@")
    result = joulehouse("taudb", "init", tenant_url, "--schema", "cli_owned")
    line = one_error_line(result)
    assert line.startswith(f"{tenant_url}: Joulehouse's indexes not built: "
                           "joulehouse_primary_metadata_name_value on primary_metadata "
                           "(name, value), joulehouse_timer_callpath_timer on timer_callpath "
                           "(timer), ")
    assert [name for name in INDEXES if f" {name} on " not in line] == []
    assert line.endswith(
        ": must be owner of table primary_metadata; only a table's owner may index it: run "
        "`joulehouse taudb init` as the role owning TAU's tables, or grant that role to this "
        'one: GRANT "cli_tables_owner" TO "cli_tenant" (without them trials are looked up by '
        "their source key with a scan and replacing a trial scans tables of every stored "
        "trial)")
    as_admin(postgres_url, "GRANT cli_tables_owner TO cli_tenant")
    result = joulehouse("taudb", "init", tenant_url, "--schema", "cli_owned")
    assert (result.returncode, result.stderr) == (0, "")
    assert as_admin(postgres_url, "SELECT count(*) FROM pg_indexes WHERE schemaname = "
                     "'cli_owned' AND indexname LIKE 'joulehouse_%'") == [(len(INDEXES),)]


def test_authentication_failure_and_a_password_in_a_message_are_masked():
    # libpq's own text for a wrong password (the throwaway server trusts every local user)
    error = psycopg2.OperationalError(
        'connection to server at "db.example.org" (192.0.2.7), port 5432 failed: FATAL:  '
        'password authentication failed for user "me"\n')
    assert str(unavailable("postgresql://me:hunter2@db.example.org:5432/perf", error)) == (
        'postgresql://me:***@db.example.org:5432/perf: password authentication failed for '
        'user "me"')
    echoed = psycopg2.OperationalError("invalid connection option near hunter2\n")
    assert "hunter2" not in str(unavailable("postgresql://me:hunter2@h/db", echoed))
    assert masked_url("postgresql://me:hunter2@h:port-not-a-number/db") == (
        "postgresql://me:***@h:port-not-a-number/db")
    # a password holding / or @ is masked up to the last @ (an @ in the query is not taken)
    assert masked_url("postgresql://me:p%40s@h/db?x=a@b") == "postgresql://me:***@h/db?x=a@b"
    cases = {"postgresql://me:pa/s3cret@h:xx/db": "postgresql://me:***@h:xx/db: not a database "
             "URL (sqlite:///FILE or postgresql://USER@HOST:PORT/DB): invalid literal for int() "
             "with base 10: 'xx'",
             "postgresql://me:p@s3cret@h:5432/db": "postgresql://me:***@h:5432/db: not a usable "
             "PostgreSQL URL: more than one @ before the host (write an @ in the password as %40)"}
    for url, message in cases.items():
        result = joulehouse("taudb", "list", url)
        assert one_error_line(result) == message
        assert "s3cret" not in result.stderr


def test_unusable_urls_and_options_are_one_line(tmp_path):
    cases = {
        ("postgresql://me:pw@h:xx/db",): "postgresql://me:***@h:xx/db: not a database URL "
        "(sqlite:///FILE or postgresql://USER@HOST:PORT/DB): invalid literal for int() with "
        "base 10: 'xx'",
        ("mysql://me:pw@h/db",): "mysql://me:***@h/db: unsupported TAUdb URL (sqlite:/// or "
        "postgresql://): mysql://me:***@h/db",
        (f"sqlite:///{tmp_path}/x.db", "--schema", "s"): f"sqlite:///{tmp_path}/x.db: SQLite "
        "has no schemas: drop the schema option",
    }
    for args, message in cases.items():
        assert one_error_line(joulehouse("taudb", "init", *args)) == message
    assert tree(tmp_path) == {}


def test_a_sqlite_url_without_a_file_name_is_refused_by_every_command(tmp_path):
    for url in ("sqlite://", "sqlite:///"):
        for args in (["init"], ["load", TAU_PROFILES], ["list"]):
            result = joulehouse("taudb", args[0], url, *args[1:], cwd=tmp_path)
            assert one_error_line(result) == (f"{url}: no database file in URL (an in-memory "
                                              "SQLite database is gone at the end): give "
                                              "sqlite:///FILE"), args
            assert result.stdout == ""
    assert tree(tmp_path) == {}


def profiles_with_calls(folder: Path, calls: tuple[int, int]) -> Path:
    """A copy of the TAU example whose ``MPI_Init()`` calls are ``calls`` on threads 0 and 1."""
    shutil.copytree(TAU_PROFILES, folder)
    for thread, count in enumerate(calls):
        profile = folder / f"profile.{thread}.0.0"
        text = profile.read_text()
        changed = re.sub(r'^("MPI_Init\(\)  " )1 ', rf"\g<1>{count} ", text, count=1,
                         flags=re.MULTILINE)
        assert (changed != text) == (count != 1)
        profile.write_text(changed)
    return folder


def test_a_trial_the_loader_refuses_is_reported_and_the_next_path_still_loaded(tmp_path):
    url = f"sqlite:///{tmp_path}/taudb.sqlite"
    refused = profiles_with_calls(tmp_path / "refused", (3_000_000_000, 1))
    result = joulehouse("taudb", "load", url, refused, TAU_PROFILES)
    assert one_error_line(result, 1).startswith(f"{refused}: ")
    assert result.stdout == f"trial 1: tau2_wrap_mpi2 (2 threads) from {TAU_PROFILES}\n"
    assert joulehouse("taudb", "list", url).stdout.splitlines()[1:] == [
        f"1\ttau2_wrap_mpi2\t1\t2\t{TAU_PROFILES}"]


def test_an_unexpected_exception_is_one_line_and_exit_70_with_the_traceback_under_debug(capsys):
    def broken(args: argparse.Namespace) -> int:
        return {}["missing"]

    for debug in (False, True):
        assert run(argparse.Namespace(handler=broken, debug=debug)) == INTERNAL_ERROR == 70
        lines = capsys.readouterr().err.splitlines()
        assert lines[-1] == ("joulehouse: internal error: KeyError: 'missing' (a bug: --debug "
                             "shows the traceback)")
        assert (lines[0] == "Traceback (most recent call last):") == debug
        assert len(lines) == 1 or debug
