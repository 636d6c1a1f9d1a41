"""trust_checks, waste/waste_weekly and fact_quality kept incrementally (``kept.py``) equal
their whole computation from scratch, row for row, after seeded random sequences of
landings, fixes, re-landings and removals across the sources and their own tables; a run
stopped between two commits is completed by the next; a rule change recomputes whole."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from joulehouse import changed, entry_sync, entry_table
from joulehouse.accounting import kept, quality, trust, waste
from joulehouse.accounting.incremental import canonical
from joulehouse.accounting.repetition import (
    FIGURE_COLUMNS,
    FIGURES,
    figures_rows,
    stored_figures,
)
from joulehouse.facts import ENERGY_FACTS_COLUMNS
from joulehouse.gpu.energy import FACTS_OWNERSHIP as GPU_OWNERSHIP
from joulehouse.warehouse import Warehouse

T0 = pd.Timestamp("2024-01-29 00:00", tz="UTC")  # a Monday: windows cross week boundaries
HOSTS = ["n1", "n2", "n3", "n4"]
GPU_ENERGY_COLUMNS = ["data_root", "repetition", "phase", "window_start", "window_end",
                      "duration_s", *(f"{m}_gap_s" for m in quality.GPU_FRAMES),
                      *(f"{m}_step_s" for m in quality.GPU_FRAMES), "gpu_idle_version",
                      "gpu_idle_threshold", "gpu_idle_judged_j", "gpu_idle_energy_j",
                      "gpu_idle_s"]


def _fact(source, entity, component, method, start, seconds, energy):
    start = pd.Timestamp(start).round("s")
    return {"source": source, "entity": entity, "component": component,
            "window_start": start, "window_end": start + pd.Timedelta(seconds=seconds),
            "duration_s": float(seconds), "energy_j": float(energy), "method": method}


class World:
    """The stored inputs of the three tables, written as the sources write them: facts per
    entry (Delta), cc_jobs and cc_job_energy per job, powerapi_window_energy per sensor,
    gpu_repetition_figures per repetition, GPU energy and frames and ClusterCockpit block
    statistics as plain partitions. Changes are kept in memory and landed by :meth:`land`
    (a commit per table)."""

    def __init__(self, store: Warehouse, seed: int) -> None:
        self.store, self.rng = store, np.random.default_rng(seed)
        self.facts: dict[tuple[str, str], list[dict]] = {}
        self.jobs: dict[str, dict] = {}
        self.hosts: dict[str, list[str]] = {}
        self.pending: set[tuple[str, str]] = set()  # (table, key)

    def start(self) -> pd.Timestamp:
        return T0 + pd.Timedelta(hours=float(self.rng.uniform(0, 24 * 20)))

    def put(self, source: str, entity: str, rows: list[dict]) -> None:
        self.facts[(source, entity)] = rows
        self.pending.add(("energy_facts", f"{source}\0{entity}"))

    def remove(self, source: str, entity: str) -> None:
        self.facts.pop((source, entity), None)
        self.pending.add(("energy_facts", f"{source}\0{entity}"))
        if source == "gpu-benchmark":  # removed from its tree: its figures go with its facts
            self.pending.add((FIGURES.table, entity))

    # GPU repetitions: facts, energy with the readings' figures (without: as older code
    # stored it, the steps then taken from its frame), gpu_repetition_figures
    def gpu(self, i: int, figures: bool = True) -> None:
        rng, entity = self.rng, f"lab/e/b/run/{i}"
        start, seconds = self.start(), float(rng.integers(60, 400))
        counter = rng.uniform(1e4, 1e5)
        self.put("gpu-benchmark", entity, [
            _fact("gpu-benchmark", entity, "gpu", "counter", start, seconds, counter),
            _fact("gpu-benchmark", entity, "gpu", "power", start, seconds,
                  counter * rng.uniform(0.9, 1.1)),
            _fact("gpu-benchmark", entity, "external", "external", start, seconds,
                  counter * rng.uniform(0.95, 1.5))])
        frame = pd.DataFrame({"time": start + pd.to_timedelta(np.arange(0, seconds + 1, 1.0),
                                                              unit="s"),
                              "power_w": rng.uniform(50, 300, int(seconds) + 1),
                              "util_gpu_pct": rng.choice([0.0, 50.0, 90.0], int(seconds) + 1)})
        self.store.write_partition("gpu_validated_frames/gpu_power", entity, frame)
        self.figures(i, stored_with=figures)

    def figures(self, i: int, stored_with: bool = True) -> None:
        """(Re)write repetition i's energy: new readings' figures (``stored_with`` False: none,
        as older code stored it), its facts unchanged."""
        rng, entity = self.rng, f"lab/e/b/run/{i}"
        rows = self.facts.get(("gpu-benchmark", entity))  # none: the energy of one removed
        start, seconds = ((rows[0]["window_start"], rows[0]["duration_s"]) if rows
                          else (T0, 100.0))
        judged = rng.uniform(1e4, 1e5)
        energy = pd.DataFrame([{
            "data_root": "lab", "repetition": f"e/b/run/{i}", "phase": "experiment",
            "window_start": start, "window_end": start + pd.Timedelta(seconds=seconds),
            "duration_s": seconds, **{f"{m}_gap_s": rng.uniform(0, 5) for m in quality.GPU_FRAMES},
            **{f"{m}_step_s": rng.uniform(0.01, 1) for m in quality.GPU_FRAMES},
            "gpu_idle_version": 1, "gpu_idle_threshold": 0.1, "gpu_idle_judged_j": judged,
            "gpu_idle_energy_j": judged * rng.uniform(0, 0.5), "gpu_idle_s": rng.uniform(0, 60)}],
            columns=GPU_ENERGY_COLUMNS)
        self.store.write_partition("gpu_repetition_energy", entity, energy if stored_with
                                   else energy.drop(columns=FIGURE_COLUMNS))
        self.pending.add((FIGURES.table, entity))

    # ClusterCockpit jobs: facts, cc_jobs, cc_job_energy, block statistics
    def job(self, job_id: int, start=None, seconds=None) -> str:
        rng = self.rng
        start = self.start() if start is None else start
        seconds = float(rng.integers(3600, 3 * 86400)) if seconds is None else seconds
        key = f"clus/{job_id}/{int(start.timestamp())}"
        cpu = rng.uniform(1e5, 1e7)
        self.put("clustercockpit", key, [
            _fact("clustercockpit", key, "cpu", "power", start, seconds, cpu),
            _fact("clustercockpit", key, "mem", "power", start, seconds, cpu / 4)])
        self.job_hosts(key, sorted(rng.choice(HOSTS, int(rng.integers(1, 3)), replace=False)))
        self.pending |= {("cc_job_energy", key), ("metric_stats", kept._owner(key))}
        return key

    def job_hosts(self, key: str, hosts: list[str]) -> None:
        self.hosts[key] = hosts
        self.jobs[key] = {
            "job": key, "hpc_user": str(self.rng.choice(["alice", "bob", "carol"])),
            "project": "p1", "cluster_partition": "main", "num_acc": int(self.rng.integers(0, 4)),
            "num_hwthreads": 64, "num_nodes": len(hosts),
            "resources": json.dumps([{"hostname": h} for h in hosts])}
        self.pending.add(("cc_jobs", key))

    def stats(self, key: str) -> None:
        self.pending.add(("metric_stats", kept._owner(key)))

    def geopm(self, report: str, job: str | None = None) -> None:
        """A GEOPM report on some hosts; inside ``job``'s window on its hosts if given."""
        rng = self.rng
        if job is not None:
            cpu = self.facts[("clustercockpit", job)][0]
            hosts = self.hosts[job]
            start = cpu["window_start"] + pd.Timedelta(seconds=float(rng.integers(0, 600)))
            seconds = float(rng.integers(60, max(61, int(cpu["duration_s"]) - 600)))
        else:
            hosts, start, seconds = ["n1", "n2"], self.start(), float(rng.integers(60, 9000))
        for host in HOSTS:
            self.remove("geopm", f"{report}/{host}")
        for host in hosts:
            self.put("geopm", f"{report}/{host}", [_fact(
                "geopm", f"{report}/{host}", "cpu", "rapl", start, seconds, rng.uniform(1e4, 1e6))])

    # PowerAPI sensors: facts (RAPL and estimates), windows
    def sensor(self, name: str, windows: int = 2) -> None:
        rng = self.rng
        for source, entity in [k for k in self.facts if k[0] == "powerapi"
                               and k[1].startswith(name + "/")]:
            self.remove(source, entity)
        targets = ["all", *(f"t{i}" for i in range(int(rng.integers(1, 4))))]
        starts = [self.start() for _ in range(windows)]
        for target in targets:
            method = "measured" if target == "all" else "estimated"
            self.put("powerapi", f"{name}/{target}", [_fact(
                "powerapi", f"{name}/{target}", "cpu", method, start, 600,
                rng.uniform(1e3, 1e5)) for start in starts])
        self.pending.add(("powerapi_window_energy", name))

    def land(self) -> None:
        """Write what changed: a commit per table (facts: per source)."""
        pending, self.pending = self.pending, set()
        keys = lambda table: sorted(k for t, k in pending if t == table)
        by_source: dict[str, list[str]] = {}
        for key in keys("energy_facts"):
            source, entity = key.split("\0")
            by_source.setdefault(source, []).append(entity)
        for source, entities in sorted(by_source.items()):
            rows = [row for e in entities for row in self.facts.get((source, e), [])]
            frame = pd.DataFrame(rows, columns=ENERGY_FACTS_COLUMNS)
            self.store.write_entries("energy_facts", entry_table.to_microseconds(frame),
                                     {"source": source},
                                     removed=sorted(set(entities) - set(frame["entity"])))
        if jobs := keys("cc_jobs"):
            entry_table.write_keyed(self.store, "cc_jobs", pd.DataFrame(
                [self.jobs[j] for j in jobs if ("clustercockpit", j) in self.facts],
                columns=list(next(iter(self.jobs.values())))), "job",
                removed=[j for j in jobs if ("clustercockpit", j) not in self.facts])
        if jobs := keys("cc_job_energy"):
            live = [j for j in jobs if ("clustercockpit", j) in self.facts]
            entry_table.write_keyed(self.store, "cc_job_energy", pd.DataFrame({
                "job": np.repeat(live, 2), "metric": ["cpu_power", "mem_power"] * len(live),
                "kind": "power", "duration_s": 3600.0,
                "covered_fraction": self.rng.uniform(0.8, 1, 2 * len(live))}), "job",
                removed=sorted(set(jobs) - set(live)))
        for block in keys("metric_stats"):
            jobs = sorted(e for s, e in self.facts if s == "clustercockpit"
                          and kept._owner(e) == block)
            self.store.write_partition("cc_block_tables/metric_stats", block, pd.DataFrame({
                "job": np.repeat(np.asarray(jobs, dtype=object), 2), "host": "n1",
                "metric": ["cpu_user", "cpu_power"] * len(jobs),
                "time_weighted_mean": self.rng.choice([3.0, 40.0], 2 * len(jobs)),
                "series": 100.0, "samples": 90, "missing": 10}).astype(
                {"job": object, "host": object, "metric": object}))
        if entities := keys(FIGURES.table):  # as the GPU step writes them with the facts
            live = [e for e in entities if ("gpu-benchmark", e) in self.facts]
            energy = self.store.read_partitions("gpu_repetition_energy", live) if live else None
            entry_sync.replace_owned(self.store, FIGURES, FIGURES.ready(
                figures_rows(pd.DataFrame() if energy is None else energy, self.store)),
                entities, GPU_OWNERSHIP)
        for sensor in keys("powerapi_window_energy"):
            rows = [{"sensor": sensor, "target": e.split("/", 1)[1], "component": "cpu",
                     "window_start": f["window_start"], "window_end": f["window_end"],
                     "method": f["method"], "covered_s": self.rng.uniform(500, 600),
                     "duration_s": 600.0}
                    for (s, e), facts in sorted(self.facts.items())
                    if s == "powerapi" and e.startswith(sensor + "/") for f in facts]
            entry_table.replace_keys(self.store, "powerapi_window_energy",
                                     pd.DataFrame(rows), pd.DataFrame({"sensor": [sensor]}))


def build(store: Warehouse, seed: int) -> tuple[World, list[str]]:
    world = World(store, seed)
    jobs = [world.job(job_id) for job_id in (5, 17, 1003, 2500)]
    for i in range(5):
        world.gpu(i, figures=i != 0)
    for name in ("s0", "s1"):
        world.sensor(name)
    for i, job in enumerate(jobs[:3]):
        world.geopm(f"rep{i}", job)
    world.geopm("loose")
    world.land()
    return world, jobs


def step(world: World, jobs: list[str], n: int) -> None:
    """A random mix of landings, fixes, re-landings and removals, then landed."""
    rng = world.rng
    pick = lambda items: items[int(rng.integers(0, len(items)))]
    world.gpu(10 + n)                                    # a new repetition
    world.figures(int(rng.integers(1, 5)))               # its readings' figures changed
    world.gpu(int(rng.integers(1, 5)))                   # a repetition re-landed
    world.gpu(0, figures=False)                          # one judged from its frame
    jobs.append(world.job(3000 + n))                     # a new job
    world.geopm(f"new{n}", pick(jobs))                   # a report inside a job's window
    world.geopm(f"rep{int(rng.integers(0, 3))}", pick(jobs))  # one moved to another job
    world.job_hosts(pick(jobs), ["n3", "n4"])            # a job's hosts changed
    world.stats(pick(jobs))                              # a block's statistics
    world.sensor(f"s{int(rng.integers(0, 3))}")          # a sensor (re)landed
    if n % 2:
        gone = jobs.pop(int(rng.integers(0, len(jobs))))
        world.remove("clustercockpit", gone)
        world.pending |= {("cc_jobs", gone), ("cc_job_energy", gone),
                          ("metric_stats", kept._owner(gone))}
        world.remove("gpu-benchmark", f"lab/e/b/run/{int(rng.integers(1, 5))}")
    world.land()


def sorted_rows(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    table = entry_table.to_microseconds(table)
    table = table.assign(**{name: table[name].astype(object) for name in table.columns
                            if table[name].dtype == object})
    return table.sort_values(keys, ignore_index=True)[sorted(table.columns)]


def assert_equal(stored: pd.DataFrame, expected: pd.DataFrame, keys: list[str], name: str):
    assert len(stored) == len(expected), name
    if expected.empty:
        return
    pd.testing.assert_frame_equal(sorted_rows(stored, keys), sorted_rows(expected, keys),
                                  check_exact=True, check_dtype=False, obj=name)


def _read(store: Warehouse, table: str) -> pd.DataFrame | None:
    return store.read_table(table) if store.files(table) else None


def facts_of(store: Warehouse) -> pd.DataFrame:
    return canonical(store.read_table("energy_facts"))


def expected_trust(store: Warehouse) -> pd.DataFrame:
    return trust.trust_checks(facts_of(store), _read(store, "cc_jobs"))


def expected_waste(store: Warehouse) -> tuple[pd.DataFrame, pd.DataFrame]:
    facts = facts_of(store)
    energy = _read(store, "gpu_repetition_energy")
    _, judged = stored_figures(pd.DataFrame() if energy is None else energy)
    frames = set(store.partition_keys("gpu_validated_frames/gpu_power"))
    gpu = waste.gpu_waste(facts, lambda key: store.read_partitions(
        "gpu_validated_frames/gpu_power", [key]) if key in frames else None, judged)
    table = waste.waste(facts, gpu, _read(store, "cc_block_tables/metric_stats"),
                        _read(store, "cc_jobs"))
    return table, waste.weekly(table)


def expected_quality(store: Warehouse) -> pd.DataFrame:
    return quality.fact_quality(
        facts_of(store), gpu_figures=_read(store, FIGURES.table),
        cc_energy=_read(store, "cc_job_energy"),
        cc_stats=_read(store, "cc_block_tables/metric_stats"),
        powerapi_windows=_read(store, "powerapi_window_energy"))


TRUST_KEYS = ["rule", "source", "entity", "window_start", "window_end"]
WASTE_KEYS = ["rule", "source", "entity", "window_start"]
QUALITY_KEYS = ["source", "entity", "component", "window_start", "window_end", "method"]


KEYS = {"trust_checks": TRUST_KEYS, "waste": WASTE_KEYS, "waste_weekly": ["week", "user"],
        "fact_quality": QUALITY_KEYS}
EXPECTED = {"trust": lambda store: {"trust_checks": expected_trust(store)},
            "waste": lambda store: dict(zip(("waste", "waste_weekly"), expected_waste(store),
                                            strict=True)),
            "quality": lambda store: {"fact_quality": expected_quality(store)}}


def checked(name: str):
    def check(store: Warehouse) -> None:
        for table, rows in EXPECTED[name](store).items():
            assert_equal(store.read_table(table), rows, KEYS[table], table)
    return check


UPDATES = {"trust": (kept.update_trust, checked("trust")),
           "waste": (kept.update_waste, checked("waste")),
           "quality": (kept.update_quality, checked("quality"))}
assert_trust = checked("trust")


def test_kept_tables_equal_their_whole_computation_after_random_changes(tmp_path):
    store = Warehouse(tmp_path / "warehouse")
    world, jobs = build(store, 28)
    for name, (update, check) in UPDATES.items():
        assert update(store).whole == "no state stored (first run)", name
        check(store)
    assert len(store.read_table("trust_checks")["rule"].unique()) == 4  # every rule pairs
    for n in range(2):
        step(world, jobs, n)
        for name, (update, check) in UPDATES.items():
            updated = update(store)
            assert updated.whole == "" and updated.keys > 0, name
            check(store)
    assert entry_table.compact(store, "energy_facts")["merged"] > 1
    tables = ["trust_checks", "waste", "waste_weekly", "fact_quality"]
    files = {table: [f.path for f in entry_table.files(store, table)] for table in tables}
    for name, (update, _) in UPDATES.items():  # rows moved into new files: no change
        assert (update(store).keys, name) == (0, name)
    assert {table: [f.path for f in entry_table.files(store, table)] for table in tables} == files
    # the steps' metadata, from the Delta log and small reads, as from the tables read whole
    table = store.read_table("trust_checks")
    summary, failed = kept.trust_summary(store)
    assert summary.set_index("rule")[["pairs", "failed"]].to_dict("index") == {
        rule.id: {"pairs": int((table["rule"] == rule.id).sum()),
                  "failed": int(((table["rule"] == rule.id) & ~table["passed"]).sum())}
        for rule in trust.RULES}
    assert len(failed) == int((~table["passed"]).sum())
    table = store.read_table("fact_quality")
    known, least = kept.quality_summary(store)
    counted = table.groupby("source")[["sampling_interval_s", "covered_fraction"]].count()
    pd.testing.assert_frame_equal(known.set_index("source").sort_index(), counted,
                                  check_dtype=False)
    assert least == table["covered_fraction"].min()


def test_a_changed_geopm_report_recomputes_the_jobs_whose_window_holds_it(tmp_path):
    store = Warehouse(tmp_path / "warehouse")
    world = World(store, 3)
    job = world.job(42, start=T0, seconds=86400.0)
    world.job(43, start=T0 + pd.Timedelta(days=5), seconds=3600.0)  # elsewhere in time
    world.geopm("r", job)
    world.land()
    kept.update_trust(store)
    world.geopm("r", job)  # its figures, window and hosts change
    world.land()
    updated = kept.update_trust(store)
    assert (updated.whole, updated.keys) == ("", 1)
    assert_trust(store)
    world.geopm("r")  # moved out of the job: its pair goes
    world.land()
    assert kept.update_trust(store).keys == 1
    assert_trust(store)
    assert (store.read_table("trust_checks")["rule"] != "geopm_vs_clustercockpit").all()


def test_a_run_stopped_between_commits_is_completed_by_the_next(tmp_path, monkeypatch):
    """Each table's update stopped after its first commit, and before its state (the last
    write), then run again, over the same changes (a copy of the warehouse). waste commits
    twice (waste_weekly, then waste: its weekly rows are recomputed from its stored rows),
    so both are every stop; trust commits once, fact_quality once per source (their rows
    depend on their inputs only)."""
    store = Warehouse(tmp_path / "warehouse")
    world, jobs = build(store, 11)
    for update, _ in UPDATES.values():
        update(store)
    step(world, jobs, 1)
    real_replace, real_state = entry_table.replace_keys, changed.State.write

    def stopped(name: str, after_first: bool) -> Warehouse:
        """``name``'s update over a copy of the store, stopped after its first commit or
        before its state."""
        copy = tmp_path / f"{name}-{after_first}"
        shutil.copytree(tmp_path / "warehouse", copy)
        commits = []

        def replace(*args, **kwargs):
            if after_first and commits:
                raise OSError("stopped")
            commits.append(1)
            return real_replace(*args, **kwargs)

        def state(*args, **kwargs):
            raise OSError("stopped")

        monkeypatch.setattr(entry_table, "replace_keys", replace)
        monkeypatch.setattr(changed.State, "write", state)
        try:
            with pytest.raises(OSError, match="stopped"):
                UPDATES[name][0](Warehouse(copy))
        finally:
            monkeypatch.setattr(entry_table, "replace_keys", real_replace)
            monkeypatch.setattr(changed.State, "write", real_state)
        assert commits, name
        return Warehouse(copy)

    for name, (update, _) in UPDATES.items():
        expected = EXPECTED[name](store)  # what every run below must end with
        for after_first in ((True, False) if name != "trust" else (False,)):
            copy = stopped(name, after_first)
            assert update(copy).whole == "", name  # the next run
            for table, rows in expected.items():
                assert_equal(copy.read_table(table), rows, KEYS[table], table)


def test_a_rule_change_recomputes_whole(tmp_path, monkeypatch):
    store = Warehouse(tmp_path / "warehouse")
    world = World(store, 5)
    world.geopm("r", world.job(42))
    world.gpu(1)
    world.land()
    for update, _ in UPDATES.values():
        update(store)
    monkeypatch.setattr(trust, "RULES", [*trust.RULES[:-1], trust.Rule(
        "geopm_vs_clustercockpit", 3, "clustercockpit cpu power", "geopm cpu rapl", 0.5, 2)])
    monkeypatch.setattr(waste, "GPU_IDLE", waste.WasteRule("gpu_idle", 1, 0.2))
    monkeypatch.setattr(quality, "GPU_FRAMES", {**quality.GPU_FRAMES, "counter": "samples_total_power"})
    for name, (update, _) in UPDATES.items():
        updated = update(store)
        assert updated.whole == "a rule's version, bounds or threshold changed", name
    assert kept.update_trust(store).whole == ""


def test_quality_summary_reads_only_files_of_several_sources(tmp_path):
    store = Warehouse(tmp_path / "warehouse")
    rows = pd.DataFrame({"source": ["a", "b", "b"], "entity": ["x", "y", "z"],
                         "sampling_interval_s": [1.0, np.nan, 2.0],
                         "covered_fraction": [0.5, 0.25, np.nan]})
    entry_table.replace_keys(store, "fact_quality", rows, None)  # a file of two sources
    entry_table.replace_keys(store, "fact_quality", rows.assign(source="c", entity="w"),
                             pd.DataFrame({"source": ["c"]}))  # a file of one
    known, least = kept.quality_summary(store)
    assert known.set_index("source").to_dict("index") == {
        "a": {"sampling_interval_s": 1, "covered_fraction": 1},
        "b": {"sampling_interval_s": 1, "covered_fraction": 1},
        "c": {"sampling_interval_s": 2, "covered_fraction": 2}}
    assert least == 0.25


def test_a_stopped_run_then_inputs_gone_back_are_completed(tmp_path, monkeypatch):
    """Each update stopped before its state (after its commits), over inputs then put back
    to the rows its state consumed: the next run sees no change in them, and rewrites
    what the stopped one left (its state's ``pending`` keys and weeks). The same for a
    whole recompute (a rule changed, then put back)."""
    store = Warehouse(tmp_path / "warehouse")
    world = World(store, 3)  # small: a job with a GEOPM report, two repetitions
    jobs = [world.job(5), world.job(17)]
    world.geopm("rep", jobs[0])
    world.gpu(1)
    world.gpu(2)
    world.land()
    for update, _ in UPDATES.values():
        update(store)
    real_state = changed.State.write

    real_replace = entry_table.replace_keys

    def stopped() -> None:
        """Each update stopped before its state; waste's after its first commit (weekly:
        the weeks its rows left are then known from ``pending`` only)."""
        monkeypatch.setattr(changed.State, "write",
                            lambda *a, **k: (_ for _ in ()).throw(OSError("stopped")))
        for name, (update, _) in UPDATES.items():
            def replace(*args, commits=[], once=name == "waste", **kwargs):  # noqa: B006
                if once and commits:
                    raise OSError("stopped")
                commits.append(1)
                return real_replace(*args, **kwargs)

            monkeypatch.setattr(entry_table, "replace_keys", replace)
            with pytest.raises(OSError, match="stopped"):
                update(store)
        monkeypatch.setattr(entry_table, "replace_keys", real_replace)
        monkeypatch.setattr(changed.State, "write", real_state)

    gpu, cc = ("gpu-benchmark", "lab/e/b/run/1"), ("clustercockpit", jobs[0])
    old = {key: [dict(row) for row in world.facts[key]] for key in (gpu, cc)}
    world.put(*gpu, [{**row, "window_start": row["window_start"] + pd.Timedelta(days=8),
                      "window_end": row["window_end"] + pd.Timedelta(days=8)}
                     for row in old[gpu]])  # into another week
    world.put(*cc, [{**row, "energy_j": row["energy_j"] * 3} for row in old[cc]])
    world.land()
    stopped()
    for key, rows in old.items():  # back to the rows the states consumed
        world.put(*key, rows)
    world.land()
    for name, (update, check) in UPDATES.items():
        assert update(store).whole == "", name
        check(store)
    for name in ("GPU_COUNTER_VS_POWER", "GEOPM_VS_CLUSTERCOCKPIT"):  # their pairs fail
        rule = getattr(trust, name)
        monkeypatch.setattr(trust, name, trust.Rule(rule.id, rule.version + 1,
                                                    rule.reference, rule.compared, 1e6))
    monkeypatch.setattr(trust, "RULES", [trust.GPU_COUNTER_VS_POWER, *trust.RULES[1:3],
                                         trust.GEOPM_VS_CLUSTERCOCKPIT])
    monkeypatch.setattr(waste, "GPU_IDLE", waste.WasteRule("gpu_idle", 2, 0.99))
    monkeypatch.setattr(quality, "GPU_FRAMES", {**quality.GPU_FRAMES,
                                                "counter": "samples_total_power"})
    stopped()
    monkeypatch.undo()  # the rules back
    for name, (update, check) in UPDATES.items():
        whole = update(store).whole
        check(store)
        assert whole == "a run stopped during a whole recompute", name


def test_many_powerapi_sensors_are_read_by_one_filter(tmp_path, monkeypatch):
    """A trust recompute of 1,000 sensors reads their facts by one filter (a clause per
    sensor took 92 s in pyarrow at 5,000 and crashed it at 10,000)."""
    store = Warehouse(tmp_path / "warehouse")
    world = World(store, 5)
    for name in ("s1", "s10", "s2"):
        world.sensor(name)
    world.land()
    run = kept._Run(store, kept.TRUST_STATE, kept.TRUST_INPUTS, "")
    filters = []
    facts = kept._Run.facts
    monkeypatch.setattr(kept._Run, "facts", lambda self, where=None: (
        filters.append(str(where)), facts(self, where))[1])
    sensors = ["s1", "s2", *(f"t{i}" for i in range(1000))]
    rows = kept._trust_rows(run, kept._keys(("powerapi", s) for s in sensors))
    assert len(filters[0]) < 1000
    expected = expected_trust(store)
    expected = expected[expected["entity"].str.split("/").str[0].isin(sensors)]
    assert len(expected) and set(expected["entity"]) != set(
        expected_trust(store)["entity"])  # s10 left out
    assert_equal(rows, expected, KEYS["trust_checks"], "trust_checks")


def test_facts_caught_mid_migration_are_read_as_their_plain_files(tmp_path):
    """energy_facts with a Delta log folder and no version yet (a migration stopped before
    its commit): its plain files are its rows, as a read of the table gives them."""
    store = Warehouse(tmp_path / "warehouse")
    world = World(store, 5)
    world.sensor("s0")
    world.gpu(1)
    world.land()
    for update, _ in UPDATES.values():
        update(store)
    facts = store.read_table("energy_facts")
    shutil.rmtree(store.table_dir("energy_facts"))
    store.write_table("energy_facts", facts)
    (store.table_dir("energy_facts") / entry_table.LOG).mkdir()
    assert len(facts_of(store)) == len(facts)
    for name, (update, check) in UPDATES.items():
        assert update(store).whole == "energy_facts is not kept per entry", name
        check(store)
    assert len(store.read_table("trust_checks")) and len(store.read_table("fact_quality"))


def listed_tables(monkeypatch) -> list[str]:
    """The tables whose folders are listed from now on (``Warehouse.parquet_files``)."""
    listed, listing = [], Warehouse.parquet_files
    monkeypatch.setattr(Warehouse, "parquet_files",
                        lambda self, table: (listed.append(table), listing(self, table))[1])
    return listed


def test_quality_follows_gpu_repetitions_landed_removed_and_relanded(tmp_path, monkeypatch):
    """A seeded random sequence of GPU repetitions landed, their figures changed, removed
    (facts and figures), re-landed, stored as older code stored them (steps from the
    frame), with the figures' table compacted now and then: fact_quality equals its
    computation from scratch after each, found from the Delta logs without listing a
    GPU table's files."""
    store = Warehouse(tmp_path / "warehouse")
    world = World(store, 17)
    for i in range(6):
        world.gpu(i, figures=i % 3 != 0)
    world.sensor("s0")
    world.land()
    assert kept.update_quality(store).whole == "no state stored (first run)"
    listed = listed_tables(monkeypatch)
    live, gone, rng, merged, relanded = set(range(6)), set(), world.rng, 0, 0
    for n in range(4):  # seed 17: re-landings at steps 1 and 2, compactions at 1 and 3
        new = 100 + n
        world.gpu(new, figures=bool(rng.integers(0, 2)))
        live.add(new)
        world.land()  # a file of its own
        world.figures(int(rng.choice(sorted(live))))
        if gone and rng.integers(0, 2):  # a repetition removed before lands again
            back = int(rng.choice(sorted(gone)))
            world.gpu(back, figures=bool(rng.integers(0, 2)))
            gone.discard(back)
            live.add(back)
            relanded += 1
        out = int(rng.choice(sorted(live)))
        world.remove("gpu-benchmark", f"lab/e/b/run/{out}")
        live.discard(out)
        gone.add(out)
        world.land()
        if n % 2:  # rows moved into new files: read on both sides, nothing changed
            merged += entry_table.compact(store, FIGURES.table)["merged"]
        updated = kept.update_quality(store)
        assert updated.whole == "" and updated.keys >= 2, n
        checked("quality")(store)
        assert not [t for t in listed if t.startswith("gpu_")], listed
    table = store.read_table("fact_quality")
    assert set(table.loc[table["source"] == "gpu-benchmark", "entity"]) == {
        f"lab/e/b/run/{i}" for i in live}
    assert table["sampling_interval_s"].notna().sum() > 0
    assert gone and merged and relanded  # some ended removed, others re-landed (seed 17)


def test_a_state_of_the_code_before_the_figures_recomputes_whole(tmp_path):
    """A state written by the code before ``gpu_repetition_figures`` (its digest and its
    inputs: the GPU energy and frames as plain partitions), with the table that code left:
    a repetition with facts and a frame but no energy had its step from its frame, which
    no change of the figures names. The next run recomputes whole, and gives the rows of
    a computation from scratch."""
    store = Warehouse(tmp_path / "warehouse")
    world = World(store, 7)
    for i in range(3):
        world.gpu(i)
    world.land()
    kept.update_quality(store)
    frameless = "lab/e/b/run/1"  # its energy and figures gone: its frame alone left
    store.remove_partition("gpu_repetition_energy", frameless)
    FIGURES.write(store, FIGURES.ready(pd.DataFrame()), [frameless])
    before = store.read_table("fact_quality")
    step = quality.median_step_s(store.read_partitions("gpu_validated_frames/gpu_power",
                                                       [frameless]))
    before.loc[(before["entity"] == frameless) & before["method"].isin(["counter", "power"]),
               "sampling_interval_s"] = step
    entry_table.replace_keys(store, "fact_quality", before, None)
    old_inputs = ["energy_facts", "gpu_repetition_energy", "gpu_validated_frames/gpu_power",
                  "gpu_validated_frames/external_power",
                  "gpu_validated_frames/samples_total_power", "cc_job_energy",
                  "cc_block_tables/metric_stats", "powerapi_window_energy"]
    changed.State.of(kept._digest("fact_quality", quality.GPU_FRAMES), [
        changed.Snapshot.of(store, table) for table in old_inputs]).write(store,
                                                                         kept.QUALITY_STATE)
    updated = kept.update_quality(store)
    assert updated.whole == "a rule's version, bounds or threshold changed"
    checked("quality")(store)
    rows = store.read_table("fact_quality")
    assert rows.loc[rows["entity"] == frameless, "sampling_interval_s"].isna().all()
