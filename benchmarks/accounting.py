"""Benchmark: rollups, carbon and cost over N generated facts (default 10,000,000) in at most
30 s, and a user's 90-day query through ``joulehouse sql`` in at most 1 s.

``--part rollups``: generates N energy_facts rows (``joulehouse.accounting.generator.facts``:
two sources, four groups, windows of 1 s to 6 h over 90 days), an hourly intensity series
and the bundled time-of-use tariff's form covering them, then times
``joulehouse.accounting.accounts.account`` (attribution, day pieces in the UTC and
Europe/Berlin calendars, carbon and cost per piece and per fact, daily and monthly
rollups), split into its stages one after the other (wall and CPU time of each), then
``account`` itself, whose calendars and per-fact tables run side by side on its threads:
the figure the target is about.

``--part query``: the same facts, the ClusterCockpit half of them jobs of USERS users
(``cc_jobs``), their accounting tables written to a warehouse in a temporary folder, then
one user's 90 days queried through ``joulehouse sql`` (the installed command, a process per
query as a user runs it: start-up included) and through ``query.query`` in-process: per
day from ``accounting_daily``, and per job from ``energy_facts`` joined with ``cc_jobs``.
Each query is run REPEAT times; the best and the worst are printed.

``--part landing``: the accounting step after a landing, kept incrementally
(``incremental.update``) against today's whole rebuild. N facts (GPU repetitions' and
ClusterCockpit jobs', over the 90 days; the repetitions of 5 experiments) are stored in ``energy_facts`` (Delta, one commit per
source) with their ``cc_jobs``, and accounted once; then, REPEAT times, the facts of 10 new
GPU repetitions (counter and power, on the last day) land and ``update`` is timed; last,
the step as it was before (``energy_facts`` read whole, ``account``, the four tables
written whole) over the same store. Run it with two N (e.g. 100,000 and 1,000,000) to see
what the history costs.

``--part cc-landing``: one ClusterCockpit landing on N stored jobs (a fact each, over the
90 days; ``cc_jobs`` kept per entry, every column of its schema (a generated job's row,
copied with each job's key, user and project), written in files of BLOCK jobs of
consecutive ids as landings write them, then, with ``--compacted``, merged by ``optimize.compact`` as
ClusterCockpit's step merges them: files spanning every job): CC_LANDED new jobs (their
facts on the last day, their ``cc_jobs`` rows in a commit of their own) and
``incremental.update`` timed, REPEAT times; and the time it spent on cc_jobs (finding the
jobs changed, ``_jobs_changed``; the rows of the recomputed facts' jobs, ``_jobs_of``)
against what the step before this change spent on it over the same store (``cc_jobs``
read whole, every job's attribution digest, the digests stored read, compared and written
back).

``--part derived``: the same landing for ``trust_checks``, ``waste``/``waste_weekly`` and
``fact_quality`` (``kept.update_trust``, ``update_waste``, ``update_quality``): N facts
stored as above, ``cc_jobs`` kept per job, each table computed once (whole); then, REPEAT
times, 10 new GPU repetitions land (facts: counter, power and an external meter; their
``gpu_repetition_energy`` partitions with the readings' figures, and their
``gpu_repetition_figures`` rows as the GPU step writes them) and each update is timed;
last, each step as it was before (``energy_facts`` and the inputs read whole, the core's
whole computation, the table written whole).

Prints the figures (wall time, and the CPU time of the process: on a shared machine the
CPU time shows what the code costs, the wall time what the load made of it), the machine,
the load average before and after, and the peak memory.

Run: ``.venv/bin/python benchmarks/accounting.py [--facts N]
[--part rollups|query|landing|cc-landing|derived|all] [--compacted]``.
"""

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from machine import describe, load_average

from joulehouse import entry_sync, entry_table
from joulehouse.accounting import (
    accounts,
    carbon,
    cost,
    entities,
    generator,
    incremental,
    intensity,
    kept,
    quality,
    rollups,
    tariff,
    trust,
    waste,
)
from joulehouse.accounting.query import query
from joulehouse.accounting.repetition import FIGURES, figures_rows, stored_figures
from joulehouse.clustercockpit.blocks import read_block
from joulehouse.clustercockpit.generator import JobSpec, write_archive_files, write_job
from joulehouse.gpu.energy import FACTS_OWNERSHIP
from joulehouse.warehouse import Warehouse

START = "2022-01-01"
DAYS = 90
TIME_ZONE = "Europe/Berlin"
USERS = 1000
PROJECTS = 200
REPEAT = 5
JOULEHOUSE = Path(sys.executable).parent / "joulehouse"
#: The bundled tariff's bands (examples/tariffs), over the benchmark's days.
TARIFF_BANDS = [("Mon-Fri", "00:00", "07:00", 0.21), ("Mon-Fri", "07:00", "20:00", 0.34),
                ("Mon-Fri", "20:00", "24:00", 0.21), ('"Sat,Sun"', "00:00", "24:00", 0.17)]


def inputs(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The intensity and tariff tables covering the benchmark's days, and their settings."""
    end = (pd.Timestamp(START) + pd.Timedelta(days=DAYS + 1)).strftime("%Y-%m-%d")
    generator.write_csv(generator.electricity_maps_frame("DE", "Germany", START, end),
                        folder / "intensity" / "de.csv")
    (folder / "tariffs").mkdir()
    generator.write_tariff(folder / "tariffs" / "site.csv", "site",
                           ("2021-12-01", "2022-05-01"), TARIFF_BANDS)
    return intensity.read_folder(folder / "intensity"), tariff.read_folder(folder / "tariffs")


SETTINGS = carbon.CarbonSettings(zones={"*": "DE"}, pue=1.2)
COST_SETTINGS = cost.CostSettings(sites={"*": "site"}, pue=1.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=10_000_000)
    parser.add_argument("--part", choices=("rollups", "query", "landing", "cc-landing",
                                           "derived", "all"), default="all")
    parser.add_argument("--compacted", action="store_true",
                        help="cc-landing: cc_jobs merged by optimize.compact first")
    parser.add_argument("--workers", type=int, default=accounts.WORKERS,
                        help="threads of account (accounts.WORKERS; 1: one after the other)")
    args = parser.parse_args()
    accounts.WORKERS = args.workers
    print(describe(pd, np), f"load average before: {load_average()}", sep="\n")
    facts = (generator.facts(args.facts, START, f"{DAYS}D", seed=0)
             if args.part not in ("landing", "cc-landing", "derived") else None)
    if args.part in ("rollups", "all"):
        time_rollups(facts)
    if args.part in ("query", "all"):
        time_query(facts)
    if args.part in ("landing", "all"):
        time_landing(args.facts)
    if args.part in ("cc-landing", "all"):
        time_cc_landing(args.facts, args.compacted)
    if args.part in ("derived", "all"):
        time_derived(args.facts)
    print(f"load average after: {load_average()}")
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    print(f"peak memory (max RSS): {peak_gb:.1f} GiB")
    return 0


def time_rollups(facts: pd.DataFrame) -> None:
    """``account``'s stages over ``facts``, timed (see the module)."""
    with tempfile.TemporaryDirectory() as folder:
        table, prices = inputs(Path(folder))
    settings = SETTINGS
    stages = {}  # name -> [wall s, CPU s of this process, all its threads]
    begin, begin_cpu = time.perf_counter(), time.process_time()

    def stage(name, call, *args, **kwargs):
        start, cpu = time.perf_counter(), time.process_time()
        result = call(*args, **kwargs)
        took = stages.setdefault(name, [0.0, 0.0])
        took[0] += time.perf_counter() - start
        took[1] += time.process_time() - cpu
        return result

    attributed = stage("attribute", entities.attribute, facts)
    daily, monthly, pieces_count = [], [], 0
    for zone in sorted({rollups.UTC, TIME_ZONE}):  # as accounts.calendar_rollups
        pieces = stage("day pieces (UTC, Europe/Berlin)", rollups.day_pieces, attributed, zone)
        pieces["co2_g"] = stage("carbon of the pieces", carbon.co2_g, pieces, table, settings)
        pieces["cost"], pieces["currency"] = stage("cost of the pieces", cost.cost, pieces,
                                                   prices, COST_SETTINGS)
        daily.append(stage("daily rollup", rollups.daily, pieces))
        months = stage("monthly rollup", rollups.month_counts, pieces)
        monthly.append(stage("monthly rollup", rollups.monthly, daily[-1], months))
        pieces_count += len(pieces)
        del pieces
    daily, monthly = (stage("daily rollup", pd.concat, daily, ignore_index=True),
                      stage("monthly rollup", pd.concat, monthly, ignore_index=True))
    per_fact = stage("carbon per fact", carbon.carbon_per_fact, attributed, table, settings)
    priced = stage("cost per fact", cost.cost_per_fact, attributed, prices, COST_SETTINGS)
    total, total_cpu = time.perf_counter() - begin, time.process_time() - begin_cpu
    print(f"{'stage':32s} {'wall':>9s} {'CPU':>9s}")
    for name, (seconds, cpu) in stages.items():
        print(f"{name:32s} {seconds:7.2f} s {cpu:7.2f} s")
    print(f"{'total':32s} {total:7.2f} s {total_cpu:7.2f} s for {len(facts):,} facts "
          f"({pieces_count:,} day pieces; "
          f"{len(daily):,} daily, {len(monthly):,} monthly rows; "
          f"{per_fact['co2_g'].isna().sum()} facts without carbon, "
          f"{priced['cost'].isna().sum()} without cost)")
    del daily, monthly, per_fact, priced
    start, cpu = time.perf_counter(), time.process_time()
    result = accounts.account(facts, table, settings, TIME_ZONE, tariffs=prices,
                              cost_settings=COST_SETTINGS)
    print(f"{'accounts.account, whole':32s} {time.perf_counter() - start:7.2f} s "
          f"{time.process_time() - cpu:7.2f} s ({accounts.WORKERS} threads: the calendars and "
          f"the per-fact tables side by side; {len(result.daily):,} daily rows); target 30 s")


def jobs_of(facts: pd.DataFrame) -> pd.DataFrame:
    """``cc_jobs`` rows for the ClusterCockpit facts: user ``u<k>`` of USERS, project
    ``p<k>`` of PROJECTS, drawn with a fixed seed."""
    rng = np.random.default_rng(1)
    jobs = facts.loc[facts["source"] == "clustercockpit", "entity"].to_numpy()
    return pd.DataFrame({"job": jobs,
                         "hpc_user": pd.Series(rng.integers(0, USERS, len(jobs))).map("u{}".format),
                         "project": pd.Series(rng.integers(0, PROJECTS, len(jobs))).map("p{}".format),
                         "cluster_partition": "main"})


QUERIES = {
    "per day (accounting_daily)":
        "SELECT day, sum(energy_kwh) AS kwh, sum(duration_h) AS hours, sum(co2_g) AS co2_g, "
        "sum(cost) AS cost FROM accounting_daily WHERE calendar = 'UTC' AND \"user\" = 'u17' "
        "AND method = 'power' AND day >= DATE '{start}' AND day < DATE '{start}' + "
        "INTERVAL 90 DAY GROUP BY day ORDER BY day",
    "per job (energy_facts x cc_jobs)":
        "SELECT f.entity AS job, sum(f.energy_j) / 3.6e6 AS kwh FROM energy_facts f JOIN "
        "cc_jobs j ON f.entity = j.job WHERE j.hpc_user = 'u17' AND f.method = 'power' AND "
        "f.window_start >= TIMESTAMPTZ '{start}' AND f.window_start < TIMESTAMPTZ '{start}' + "
        "INTERVAL 90 DAY GROUP BY 1 ORDER BY 2 DESC",
}


def time_query(facts: pd.DataFrame) -> None:
    """A user's 90 days through ``joulehouse sql`` and ``query.query`` (see the module)."""
    jobs = jobs_of(facts)
    with tempfile.TemporaryDirectory() as folder:
        table, prices = inputs(Path(folder))
        begin = time.perf_counter()
        result = accounts.account(facts, table, SETTINGS, TIME_ZONE, jobs, tariffs=prices,
                                  cost_settings=COST_SETTINGS)
        root = str(Path(folder) / "warehouse")
        store = Warehouse(root)
        store.write_partition("energy_facts", "clustercockpit", facts)
        store.write_table("cc_jobs", jobs)
        store.write_table("accounting_daily", result.daily)
        print(f"warehouse of {len(facts):,} facts, {len(jobs):,} jobs, {len(result.daily):,} "
              f"daily rows written in {time.perf_counter() - begin:.1f} s")
        for name, sql in QUERIES.items():
            sql = sql.format(start=START)
            inside, command, rows = [], [], 0
            for _ in range(REPEAT):
                start = time.perf_counter()
                rows = len(query(root, sql))
                inside.append(time.perf_counter() - start)
                start = time.perf_counter()
                done = subprocess.run([str(JOULEHOUSE), "sql", "--warehouse", root, sql],
                                      check=True, capture_output=True, text=True)
                command.append(time.perf_counter() - start)
                assert len(done.stdout.splitlines()) == rows + 1
            print(f"{name}: {rows} rows; query.query {min(inside):.3f}-{max(inside):.3f} s, "
                  f"joulehouse sql (process) {min(command):.3f}-{max(command):.3f} s; "
                  f"target 1 s")


#: GPU repetitions landed per timed update, and their facts' methods.
LANDED = 10
LANDED_METHODS = ("counter", "power")


def timed(call, *args):
    """``call(*args)``, its wall and CPU seconds (this process, every thread)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call(*args)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def landed_repetitions(batch: int) -> pd.DataFrame:
    """The facts of LANDED new GPU repetitions (batch ``batch``), on the span's last day."""
    day = pd.Timestamp(START, tz="UTC") + pd.Timedelta(days=DAYS - 1)
    rows = []
    for i in range(LANDED):
        start = day + pd.Timedelta(minutes=7 * (LANDED * batch + i))
        for k, method in enumerate(LANDED_METHODS):
            rows.append({"source": "gpu-benchmark", "entity": f"lab/exp/bench/run/{batch}-{i}",
                         "component": "gpu", "window_start": start,
                         "window_end": start + pd.Timedelta(minutes=5), "duration_s": 300.0,
                         "energy_j": 300.0 * (250.0 + k), "method": method})
    return pd.DataFrame(rows)


def before_step(store: Warehouse, given: incremental.Inputs) -> None:
    """The accounting step before issue 28: every fact read, ``account``, the four tables
    written whole (under other names: the kept tables stay as they are)."""
    result = accounts.account(store.read_table("energy_facts"), given.intensity, given.carbon,
                              given.time_zone, store.read_table("cc_jobs"),
                              tariffs=given.tariffs, cost_settings=given.cost)
    for name, table in (("daily", result.daily), ("monthly", result.monthly),
                        ("carbon", result.carbon), ("cost", result.cost)):
        store.write_table(f"before_{name}", table)


def stored_facts(count: int) -> pd.DataFrame:
    """``count`` facts of GPU repetitions (of 5 experiments per data root) and ClusterCockpit
    jobs over the DAYS, times to the microsecond."""
    facts = entry_table.to_microseconds(generator.facts(
        count, START, f"{DAYS}D", seed=0, sources=("gpu-benchmark", "clustercockpit")))
    gpu = facts["source"] == "gpu-benchmark"
    facts.loc[gpu, "entity"] = [f"{root}/exp{int(i) % 5}/bench/run/{i}" for root, i in
                                facts.loc[gpu, "entity"].str.split("/", n=1)]
    return facts


def time_landing(count: int) -> None:
    """``incremental.update`` after LANDED GPU repetitions land on ``count`` stored facts,
    against the step before (see the module)."""
    facts = stored_facts(count)
    with tempfile.TemporaryDirectory() as folder:
        table, prices = inputs(Path(folder))
        given = incremental.Inputs(intensity=table, tariffs=prices, carbon=SETTINGS,
                                   cost=COST_SETTINGS, time_zone=TIME_ZONE)
        store = Warehouse(str(Path(folder) / "warehouse"))
        for source, rows in facts.groupby("source"):
            entry_table.replace_scope(store, "energy_facts", rows, {"source": source})
        store.write_table("cc_jobs", jobs_of(facts))
        first, wall, cpu = timed(incremental.update, store, given)
        print(f"{count:,} facts stored; first update (whole: {first.whole}): "
              f"{wall:.2f} s wall, {cpu:.2f} s CPU")
        walls, cpus = [], []
        for batch in range(REPEAT):
            store.write_entries("energy_facts", landed_repetitions(batch),
                                {"source": "gpu-benchmark"})
            updated, wall, cpu = timed(incremental.update, store, given)
            assert not updated.whole and updated.changed == LANDED, updated
            walls.append(wall)
            cpus.append(cpu)
        print(f"update after {LANDED} GPU repetitions landed, {REPEAT} times: wall "
              f"{min(walls):.2f}-{max(walls):.2f} s, CPU {min(cpus):.2f}-{max(cpus):.2f} s "
              f"({updated.days} calendar-days and {updated.months} calendar-months "
              f"recomputed from {updated.facts_read:,} facts)")
        _, wall, cpu = timed(before_step, store, given)
        print(f"the step before (whole rebuild): {wall:.2f} s wall, {cpu:.2f} s CPU")


#: Jobs landed per timed ClusterCockpit landing; jobs per cc_jobs file as stored.
CC_LANDED = 100
BLOCK = 10_000


def cc_facts(first: int, count: int, day: int | None = None) -> pd.DataFrame:
    """``count`` ClusterCockpit jobs' facts (one each), ids from ``first`` in the order of
    their start (as a batch system numbers jobs): keys ``cluster/<id>/0`` (ids in key
    order, as a job-id block's), over the DAYS (``day``: on that day)."""
    facts = entry_table.to_microseconds(generator.facts(
        count, START, f"{DAYS}D" if day is None else "1D", seed=first,
        sources=("clustercockpit",))).sort_values("window_start", ignore_index=True)
    if day is not None:
        facts["window_start"] += pd.Timedelta(days=day)
        facts["window_end"] += pd.Timedelta(days=day)
    facts["entity"] = [f"cluster/{first + i:09d}/0" for i in range(count)]
    return facts


def full_jobs(facts: pd.DataFrame, template: pd.DataFrame) -> pd.DataFrame:
    """``cc_jobs`` rows of the facts' jobs with every column of the table: ``template`` (a
    generated job's row) copied, with each job's key, id, user and project (``jobs_of``)."""
    attributed = jobs_of(facts)
    rows = template.iloc[np.zeros(len(attributed), int)].reset_index(drop=True)
    return rows.assign(job=attributed["job"].to_numpy(), job_id=np.arange(len(rows)),
                       hpc_user=attributed["hpc_user"].to_numpy(),
                       project=attributed["project"].to_numpy(),
                       cluster_partition="main")


def job_template(folder: Path) -> pd.DataFrame:
    """The cc_jobs row of one generated ClusterCockpit job."""
    write_archive_files(folder, ["alpha"])
    write_job(folder, JobSpec(cluster="alpha", job_id=1, hosts=2, samples=61))
    return read_block(folder, "alpha/0", check_schema=False).frames["jobs"]


def old_cc_jobs(store: Warehouse) -> None:
    """What the step before this change did with cc_jobs at each ClusterCockpit landing:
    read it whole, every job's attribution digest, the digests stored read, compared and
    written back (to a table of the benchmark's own)."""
    digests = incremental._job_digests(store.read_table("cc_jobs")[incremental.JOB_READ])
    stored = store.read_partitions("bench_job_digests", ["jobs"])
    incremental._changed_jobs(pd.Series(stored["digest"].to_numpy(np.uint64),
                                        index=pd.Index(stored["job"], name="job")), digests)
    store.write_partition("bench_job_digests", "jobs", pd.DataFrame(
        {"job": digests.index.to_numpy(object), "digest": digests.to_numpy(np.uint64)}))


def time_cc_landing(count: int, compacted: bool) -> None:
    """``incremental.update`` after CC_LANDED new ClusterCockpit jobs land on ``count``
    stored jobs, and its time on cc_jobs against the step before's (see the module)."""
    facts = cc_facts(0, count)
    spent = {"_jobs_changed": [0.0, 0.0], "_jobs_of": [0.0, 0.0]}

    def timing(name):
        call = getattr(incremental, name)

        def timed_call(*args):
            result, wall, cpu = timed(call, *args)
            spent[name][0] += wall
            spent[name][1] += cpu
            return result
        return timed_call

    with tempfile.TemporaryDirectory() as folder:
        table, prices = inputs(Path(folder))
        given = incremental.Inputs(intensity=table, tariffs=prices, carbon=SETTINGS,
                                   cost=COST_SETTINGS, time_zone=TIME_ZONE)
        store = Warehouse(str(Path(folder) / "warehouse"))
        template = job_template(Path(folder) / "archive")
        entry_table.replace_scope(store, "energy_facts", facts, {"source": "clustercockpit"})
        jobs = full_jobs(facts, template)
        for start in range(0, count, BLOCK):
            entry_table.write_keyed(store, "cc_jobs", jobs.iloc[start:start + BLOCK], "job")
        if compacted:
            entry_table.compact(store, "cc_jobs")
        files = len(entry_table.files(store, "cc_jobs"))
        first, wall, cpu = timed(incremental.update, store, given)
        print(f"{count:,} jobs stored (cc_jobs: {len(jobs.columns)} columns, {files} files"
              f"{', compacted' if compacted else ''}); first update (whole: {first.whole}): "
              f"{wall:.2f} s wall, {cpu:.2f} s CPU")
        digests = incremental._job_digests(store.read_table("cc_jobs")[incremental.JOB_READ])
        store.write_partition("bench_job_digests", "jobs", pd.DataFrame(
            {"job": digests.index.to_numpy(object), "digest": digests.to_numpy(np.uint64)}))
        patched = {name: getattr(incremental, name) for name in spent}
        rows = {"update": [], "new": [], "old": []}
        try:
            for name in spent:
                setattr(incremental, name, timing(name))
            for batch in range(REPEAT):
                landed = cc_facts(count + CC_LANDED * batch, CC_LANDED, day=DAYS - 1)
                store.write_entries("energy_facts", landed, {"source": "clustercockpit"})
                entry_table.write_keyed(store, "cc_jobs", full_jobs(landed, template), "job")
                for one in spent.values():
                    one[:] = [0.0, 0.0]
                updated, wall, cpu = timed(incremental.update, store, given)
                assert not updated.whole and updated.changed == CC_LANDED, updated
                assert updated.jobs_changed == CC_LANDED, updated
                rows["update"].append((wall, cpu, updated))
                rows["new"].append(tuple(map(sum, zip(*spent.values(), strict=True))))
                _, wall, cpu = timed(old_cc_jobs, store)
                rows["old"].append((wall, cpu))
        finally:
            for name, call in patched.items():
                setattr(incremental, name, call)

        def spread(values, unit="s"):
            return f"{min(values):.3f}-{max(values):.3f} {unit}"

        walls, cpus, last = ([r[0] for r in rows["update"]], [r[1] for r in rows["update"]],
                             rows["update"][-1][2])
        print(f"update after {CC_LANDED} ClusterCockpit jobs landed, {REPEAT} times: wall "
              f"{spread(walls)}, CPU {spread(cpus)} ({last.days} calendar-days recomputed "
              f"from {last.facts_read:,} facts; cc_jobs rows read "
              f"{min(r[2].jobs_read for r in rows['update']):,}-"
              f"{max(r[2].jobs_read for r in rows['update']):,})")
        print(f"  of which on cc_jobs (the jobs changed and the recomputed facts' jobs): wall "
              f"{spread([r[0] for r in rows['new']])}, CPU {spread([r[1] for r in rows['new']])}")
        print(f"  the step before on cc_jobs (read whole, digests, compared, written): wall "
              f"{spread([r[0] for r in rows['old']])}, CPU {spread([r[1] for r in rows['old']])}")


def landed_derived(store: Warehouse, batch: int) -> None:
    """LANDED new GPU repetitions: their facts (counter, power, external) and their energy
    with the readings' figures (``gpu_repetition_energy``, a partition each)."""
    facts = landed_repetitions(batch)
    external = facts[facts["method"] == "counter"].assign(
        component="external", method="external", energy_j=lambda f: f["energy_j"] * 1.2)
    store.write_entries("energy_facts", pd.concat([facts, external], ignore_index=True),
                        {"source": "gpu-benchmark"})
    energies = []
    for row in facts[facts["method"] == "counter"].itertuples():
        data_root, repetition = row.entity.split("/", 1)
        energies.append(pd.DataFrame([{
            "data_root": data_root, "repetition": repetition, "phase": "experiment",
            "window_start": row.window_start, "window_end": row.window_end,
            "duration_s": row.duration_s,
            **{f"{m}_gap_s": 0.0 for m in quality.GPU_FRAMES},
            **{f"{m}_step_s": 0.5 for m in quality.GPU_FRAMES}, "gpu_idle_version": 1,
            "gpu_idle_threshold": 0.1, "gpu_idle_judged_j": row.energy_j,
            "gpu_idle_energy_j": row.energy_j / 10, "gpu_idle_s": 30.0}]))
        store.write_partition("gpu_repetition_energy", row.entity, energies[-1])
    entities = sorted(facts["entity"].unique())  # with their facts, as the GPU step does
    entry_sync.replace_owned(store, FIGURES, FIGURES.ready(figures_rows(
        pd.concat(energies, ignore_index=True), store)), entities, FACTS_OWNERSHIP)


def trust_before(store: Warehouse) -> None:
    """``trust_checks`` as its step computed it before issue 28: every fact and job read,
    the rules over all, the table written whole (under another name)."""
    store.write_table("before_trust", trust.trust_checks(store.read_table("energy_facts"),
                                                         store.read_table("cc_jobs")))


def waste_before(store: Warehouse) -> None:
    """``waste`` and ``waste_weekly`` as before: every fact, repetition energy and job
    read, the rules over all, both tables written whole."""
    facts = store.read_table("energy_facts")
    _, judged = stored_figures(store.read_table("gpu_repetition_energy"))
    table = waste.waste(facts, waste.gpu_waste(facts, lambda key: None, judged), None,
                        store.read_table("cc_jobs"))
    store.write_table("before_waste", table)
    store.write_table("before_waste_weekly", waste.weekly(table))


def quality_before(store: Warehouse) -> None:
    """``fact_quality`` as before: every fact and repetition's figures read, the table
    written whole."""
    store.write_table("before_quality", quality.fact_quality(
        store.read_table("energy_facts"), gpu_figures=store.read_table(FIGURES.table)))


def time_derived(count: int) -> None:
    """``kept.update_trust``, ``update_waste`` and ``update_quality`` after LANDED GPU
    repetitions land on ``count`` stored facts, against the steps before (see the
    module)."""
    updates = {"trust_checks": kept.update_trust, "waste": kept.update_waste,
               "fact_quality": kept.update_quality}
    facts = stored_facts(count)
    with tempfile.TemporaryDirectory() as folder:
        store = Warehouse(str(Path(folder) / "warehouse"))
        for source, rows in facts.groupby("source"):
            entry_table.replace_scope(store, "energy_facts", rows, {"source": source})
        entry_table.replace_keys(store, "cc_jobs", jobs_of(facts), None)
        landed_derived(store, REPEAT)  # the first repetitions with energy
        for name, update in updates.items():
            first, wall, cpu = timed(update, store)
            print(f"{count:,} facts stored; {name}: first update (whole: {first.whole}): "
                  f"{wall:.2f} s wall, {cpu:.2f} s CPU")
        times = {name: ([], []) for name in updates}
        for batch in range(REPEAT):
            landed_derived(store, batch)
            for name, update in updates.items():
                updated, wall, cpu = timed(update, store)
                assert not updated.whole and updated.keys == LANDED, (name, updated)
                times[name][0].append(wall)
                times[name][1].append(cpu)
        for name, (walls, cpus) in times.items():
            print(f"{name}: update after {LANDED} GPU repetitions landed, {REPEAT} times: "
                  f"wall {min(walls):.2f}-{max(walls):.2f} s, CPU "
                  f"{min(cpus):.2f}-{max(cpus):.2f} s")
        for name, before in (("trust_checks", trust_before), ("waste", waste_before),
                             ("fact_quality", quality_before)):
            _, wall, cpu = timed(before, store)
            print(f"{name}: the step before (whole rebuild): {wall:.2f} s wall, "
                  f"{cpu:.2f} s CPU")

if __name__ == "__main__":
    sys.exit(main())
