"""Who and what an ``energy_facts`` row belongs to: group, partition, user, project.

What each source's ``entity`` string (and tables) carry:

============== ============================================ =========================== ============
source         entity                                       group                       project
============== ============================================ =========================== ============
gpu-benchmark  ``<data root>/<experiment>/<bench>/<run>/<rep>`` the data root's name       the experiment
geopm          ``<landing folder>/<report>/<host>``           the landing folder          the report
powerapi       ``<sensor>/<target>``                        the sensor (one machine)    --
clustercockpit ``<cluster>/<jobId>/<startTime>``            the cluster                 from cc_jobs
============== ============================================ =========================== ============

``user`` and ``partition`` (the batch partition) are known for ClusterCockpit
jobs only, from the ``cc_jobs`` table (``hpc_user``, ``project``,
``cluster_partition``) joined on the job key. GPU benchmarks, GEOPM reports and
PowerAPI reports name no user and no project (a PowerAPI target is a cgroup,
not a person): they get ``""``, as does every attribute of a source not listed
here. A field that is unknown is ``""``, never a guess.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from joulehouse.clustercockpit.energy import FACTS_SOURCE as CC_SOURCE
from joulehouse.geopm.energy import FACTS_SOURCE as GEOPM_SOURCE
from joulehouse.gpu.energy import FACTS_SOURCE as GPU_SOURCE
from joulehouse.powerapi.energy import FACTS_SOURCE as POWERAPI_SOURCE

#: The attributes added to facts, in this order.
ATTRIBUTES = ["group", "partition", "user", "project"]

#: The cc_jobs columns that name a job's user, project and batch partition.
CC_JOB_COLUMNS = {"hpc_user": "user", "project": "project", "cluster_partition": "partition"}


def _parts(entities: pd.Series, group: int | None, project: int | None) -> pd.DataFrame:
    """Attributes from '/'-separated positions of the entity (negative: from the end)."""
    parts = entities.str.split("/")

    def at(i: int | None) -> pd.Series:
        if i is None:
            return pd.Series("", index=entities.index)
        return parts.map(lambda p: p[i] if len(p) > max(i, -i - 1) else "")

    return pd.DataFrame({"group": at(group), "partition": "", "user": "", "project": at(project)},
                        index=entities.index)


#: Per source: its unique entities -> their attributes (index: the entities).
_PARSERS: dict[str, Callable[[pd.Series], pd.DataFrame]] = {
    GPU_SOURCE: lambda e: _parts(e, 0, 1),
    GEOPM_SOURCE: lambda e: _parts(e, 0, 1),
    POWERAPI_SOURCE: lambda e: _parts(e, 0, None),
    CC_SOURCE: lambda e: _parts(e, 0, None),
}


def attribute(facts: pd.DataFrame, cc_jobs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The facts with the columns ATTRIBUTES added (strings, ``""`` when unknown).

    ``cc_jobs``: the ClusterCockpit jobs table (``job`` and CC_JOB_COLUMNS) for the
    users, projects and partitions of its jobs. Entities are parsed once each, not per fact.
    """
    keys = facts[["source", "entity"]].drop_duplicates()
    found = []
    for source, rows in keys.groupby("source", sort=False):
        parse = _PARSERS.get(source, lambda e: _parts(e, None, None))
        entities = rows["entity"].reset_index(drop=True)
        found.append(parse(entities).assign(source=source, entity=entities))
    known = (pd.concat(found, ignore_index=True) if found
             else pd.DataFrame(columns=["source", "entity", *ATTRIBUTES]))
    if cc_jobs is not None and len(cc_jobs):
        jobs = (cc_jobs[["job", *CC_JOB_COLUMNS]].rename(columns={"job": "entity", **CC_JOB_COLUMNS})
                .drop_duplicates("entity").set_index("entity"))
        is_cc = known["source"] == CC_SOURCE
        for column in CC_JOB_COLUMNS.values():
            value = known.loc[is_cc, "entity"].map(jobs[column]).fillna("").astype(str)
            known.loc[is_cc, column] = value
    return facts.merge(known[["source", "entity", *ATTRIBUTES]], on=["source", "entity"],
                       how="left", validate="many_to_one")
