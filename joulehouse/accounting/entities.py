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

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from joulehouse.clustercockpit.energy import FACTS_SOURCE as CC_SOURCE
from joulehouse.geopm.energy import FACTS_SOURCE as GEOPM_SOURCE
from joulehouse.gpu.energy import FACTS_SOURCE as GPU_SOURCE
from joulehouse.powerapi.energy import FACTS_SOURCE as POWERAPI_SOURCE

#: The attributes added to facts, in this order.
ATTRIBUTES = ["group", "partition", "user", "project"]

#: The cc_jobs columns that name a job's user, project and batch partition.
CC_JOB_COLUMNS = {"hpc_user": "user", "project": "project", "cluster_partition": "partition"}

#: Sources whose entity's first '/'-separated field is the group, and those whose second
#: is the project (see the module's table).
GROUP_FIRST = [GPU_SOURCE, GEOPM_SOURCE, POWERAPI_SOURCE, CC_SOURCE]
PROJECT_SECOND = [GPU_SOURCE, GEOPM_SOURCE]
_FIELDS = r"^(?P<first>[^/]*)(?:/(?P<second>[^/]*))?"

#: Columns made categorical by :func:`attribute`: the rollups' keys, so that grouping and
#: copying millions of facts works on integer codes. The entity stays as it is (a categorical
#: of millions of distinct entities costs more than it saves): :data:`ENTITY_ID` numbers it.
CATEGORICAL = ["source", "component", "method", *ATTRIBUTES]

#: Column added by :func:`attribute`: int64, equal for facts of the same entity and only
#: for them (what the rollups' distinct ``entities`` count).
ENTITY_ID = "entity_id"


def _strings(column: pd.Series) -> pa.Array:
    """A column of strings (object or categorical) as an Arrow string array."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return pc.cast(pa.DictionaryArray.from_pandas(column.array), pa.string())
    return pa.array(column.to_numpy(), pa.string())


def _categorical(values: pa.Array | pa.ChunkedArray, index: pd.Index) -> pd.Series:
    return pd.Series(pc.dictionary_encode(values).to_pandas(), index=index)


def attribute(facts: pd.DataFrame, cc_jobs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The facts with the columns ATTRIBUTES and ENTITY_ID added (``""`` when unknown), and
    the columns CATEGORICAL as pandas categoricals (their values unchanged).

    ``cc_jobs``: the ClusterCockpit jobs table (``job`` and CC_JOB_COLUMNS) for the users,
    projects and partitions of its jobs. Vectorised (Arrow) over every fact.
    """
    source, entity = (_strings(facts[name]) for name in ("source", "entity"))
    fields = pc.extract_regex(entity, _FIELDS)
    group = pc.if_else(pc.is_in(source, pa.array(GROUP_FIRST)), fields.field("first"), "")
    project = pc.if_else(pc.is_in(source, pa.array(PROJECT_SECOND)), fields.field("second"), "")
    found = {"group": group, "partition": pa.nulls(len(facts), pa.string()),
             "user": pa.nulls(len(facts), pa.string()), "project": project}
    if cc_jobs is not None and len(cc_jobs):
        jobs = cc_jobs.drop_duplicates("job")
        at = pc.index_in(entity, pa.array(jobs["job"].astype(str).to_numpy(), pa.string()))
        at = pc.if_else(pc.equal(source, CC_SOURCE), at, pa.scalar(None, pa.int32()))
        for column, attribute_name in CC_JOB_COLUMNS.items():
            values = pa.array(jobs[column].fillna("").astype(str).to_numpy(), pa.string())
            taken = pc.take(values, at)
            found[attribute_name] = pc.if_else(pc.is_valid(taken), taken,
                                               found[attribute_name])
    index = facts.index
    columns = {name: _categorical(pc.fill_null(values, ""), index)
               for name, values in found.items()}
    columns |= {name: _categorical(values, index) for name, values in
                (("source", source), ("component", _strings(facts["component"])),
                 ("method", _strings(facts["method"])))}
    entity_id = pc.dictionary_encode(entity).indices.to_numpy(zero_copy_only=False)
    return facts.assign(**columns, **{ENTITY_ID: entity_id.astype(np.int64)})
