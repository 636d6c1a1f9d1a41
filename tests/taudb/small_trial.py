"""A small hand-made trial for the TAUdb loader tests.

Two ranks, TIME and PAPI_TOT_CYC, a callpath whose intermediate path is in no
profile; every expected value in the tests is worked out by hand from it.
"""

from __future__ import annotations

import pandas as pd

from joulehouse.taudb.model import DATA_SOURCE_TAU_PROFILES, TrialData

MAIN = "main [{src/app.c} {10,1}-{40,2}]"
FOO = "foo [{app.c} {50}]"
BAR = "bar"
PATH = f"{MAIN} => {FOO} => {BAR}"  # its intermediate "MAIN => FOO" is in no profile

def small_trial(source_key: str = "small", **changes) -> TrialData:
    """Two ranks, TIME and PAPI_TOT_CYC, a callpath with a missing intermediate path."""
    ranks = pd.DataFrame({"node_rank": [0, 1], "context_rank": 0, "thread_rank": 0})
    timers = pd.DataFrame(
        [(0, MAIN, "TAU_DEFAULT", 1, 2), (0, FOO, "TAU_USER | MPI", 3, 0), (0, BAR, "", 2, 0),
         (0, PATH, "", 2, 0), (1, MAIN, "TAU_DEFAULT", 1, 1), (1, FOO, "TAU_USER|MPI", 2, 0)],
        columns=["node_rank", "name", "group_names", "calls", "subroutines"])
    values = pd.DataFrame(
        [(0, MAIN, "TIME", 100, 20), (0, FOO, "TIME", 50, 50), (0, BAR, "TIME", 30, 30),
         (0, PATH, "TIME", 30, 30), (1, MAIN, "TIME", 80, 60), (1, FOO, "TIME", 20, 20),
         (0, MAIN, "PAPI_TOT_CYC", 1000, 100), (0, FOO, "PAPI_TOT_CYC", 400, 400),
         (0, BAR, "PAPI_TOT_CYC", 300, 300), (0, PATH, "PAPI_TOT_CYC", 300, 300),
         (1, MAIN, "PAPI_TOT_CYC", 900, 500), (1, FOO, "PAPI_TOT_CYC", 400, 400)],
        columns=["node_rank", "name", "metric", "inclusive", "exclusive"])
    counters = pd.DataFrame(
        [(0, "Message size", 4, 10.0, 1.0, 5.0, 130.0), (1, "Message size", 2, 8.0, 2.0, 5.0, 68.0),
         (0, "Heap : main", 1, 3.5, 3.5, 3.5, 12.25)],
        columns=["node_rank", "name", "sample_count", "maximum", "minimum", "mean",
                 "sum_squares"])
    metadata = pd.DataFrame(
        [(0, "Hostname", "n1"), (1, "Hostname", "n1"), (0, "pid", "10"), (1, "pid", "11"),
         (0, "CPU", "EPYC"), (1, "GPU", "none")], columns=["node_rank", "name", "value"])
    for frame in (timers, values, counters, metadata):
        frame[["context_rank", "thread_rank"]] = 0
    trial = TrialData(
        name="small", data_source=DATA_SOURCE_TAU_PROFILES, metrics=["TIME", "PAPI_TOT_CYC"],
        threads=ranks, timers=timers, timer_values=values, counters=counters, metadata=metadata,
        source_key=source_key, fingerprint="f1", trial_metadata={"Application": "demo"})
    for name, value in changes.items():
        setattr(trial, name, value)
    return trial
