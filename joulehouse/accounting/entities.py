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

from joulehouse.accounting.stepseries import constant
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


def _in_order(codes: np.ndarray, names: np.ndarray) -> pd.Categorical:
    """``names[codes]`` (names may repeat) as a categorical of the names used, in the order
    of their first appearance (as Arrow's ``dictionary_encode`` orders them, and so the
    rollups' rows)."""
    of_name, distinct = pd.factorize(np.asarray(names, dtype=object))
    order, used = pd.factorize(of_name[codes])
    return pd.Categorical.from_codes(order, pd.Index(np.asarray(distinct, dtype=object)[used],
                                                     dtype=object))


def _labels(column: pd.Series) -> pd.Categorical:
    """A column of few distinct strings (object or categorical) as a categorical of them in
    the order of their first appearance; hashed once per value, not per row."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return _in_order(column.cat.codes.to_numpy(), column.cat.categories.to_numpy())
    codes, names = pd.factorize(column.to_numpy())
    return pd.Categorical.from_codes(codes, pd.Index(np.asarray(names, dtype=object)))


def _encoded(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Strings (nulls as '') as codes into their distinct values."""
    encoded = pc.dictionary_encode(pc.fill_null(values, ""))
    return (encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64),
            np.asarray(encoded.dictionary.to_pylist(), dtype=object))


def _take(strings: pa.Array, rows: np.ndarray) -> pa.Array:
    """``strings[rows]`` (``rows`` ascending): the array itself when they are all of it."""
    return strings if len(rows) == len(strings) else strings.take(pa.array(rows))


def _first_fields(entity: pa.Array, rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The text before the first '/' (all of it without one) of ``entity[rows]``, as codes
    into the returned list of its distinct values. The strings are cut by byte positions,
    once per distinct length of the field (a cluster's or data root's name), not with a
    regular expression per row."""
    strings = _take(entity, rows)
    slash = pc.find_substring(strings, "/").to_numpy(zero_copy_only=False)
    end = np.where(slash < 0, pc.binary_length(strings).to_numpy(zero_copy_only=False), slash)
    lengths = np.flatnonzero(np.bincount(end))
    if len(lengths) == 1:
        groups = [np.arange(len(rows))]
    else:
        order = np.argsort(end, kind="stable")
        groups = np.split(order, np.cumsum(np.bincount(end)[lengths])[:-1])
    codes, names = np.empty(len(rows), np.int64), {}
    for length, at in zip(lengths, groups, strict=True):
        part = strings if len(lengths) == 1 else strings.take(pa.array(at))
        first = pc.binary_slice(part.cast(pa.binary()), 0, int(length)).cast(pa.string())
        local, values = _encoded(first)
        codes[at] = np.array([names.setdefault(v, len(names)) for v in values],
                             dtype=np.int64)[local]
    return codes, list(names)


def _field(source: pd.Categorical, sources: list[str], rows_field, n: int) -> pd.Categorical:
    """One attribute over every fact: ``rows_field(rows)`` (codes, names) for the rows of
    ``sources``, '' for the others."""
    rows = np.flatnonzero(np.isin(source.codes, np.flatnonzero(source.categories.isin(sources))))
    if not len(rows):
        return constant("", n)
    codes = np.zeros(n, np.int64)  # '' is name 0
    local, names = rows_field(rows)
    codes[rows] = np.asarray(local) + 1
    return _in_order(codes, np.array(["", *names], dtype=object))


def first_rows(cc_jobs: pd.DataFrame) -> pd.DataFrame:
    """One row per job of ``cc_jobs``: ``job`` (str) and CC_JOB_COLUMNS (str, ``""`` for
    None/NaN), a job of several rows taking the least in the order of ``job`` then
    CC_JOB_COLUMNS, not the first in the table's row order: that follows its data files'
    (random) names, which a compaction or a rewrite of the same rows changes, so that a
    rebuild and the incremental accounting (which compares a job's rows as a set:
    ``changed.delta_changes``) agree whatever the order."""
    rows = pd.DataFrame({"job": cc_jobs["job"].astype(str).to_numpy(object)}
                        | {column: cc_jobs[column].fillna("").astype(str).to_numpy(object)
                           for column in CC_JOB_COLUMNS})
    several = rows["job"].duplicated(keep=False).to_numpy()
    if not several.any():
        return rows
    ordered = rows[several].sort_values(["job", *CC_JOB_COLUMNS]).drop_duplicates("job")
    return pd.concat([rows[~several], ordered], ignore_index=True)


def attribute(facts: pd.DataFrame, cc_jobs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The facts with the columns ATTRIBUTES and ENTITY_ID added (``""`` when unknown), and
    the columns CATEGORICAL as pandas categoricals (their values unchanged).

    ``cc_jobs``: the ClusterCockpit jobs table (``job`` and CC_JOB_COLUMNS) for the users,
    projects and partitions of its jobs. Vectorised over every fact; a group is cut from
    the rows of its sources only, a project (``_FIELDS``) from the rows of PROJECT_SECOND.
    A job of several rows in cc_jobs takes one, whatever their order (:func:`first_rows`).
    """
    n = len(facts)
    entity = _strings(facts["entity"])
    source = _labels(facts["source"])

    def second(rows):
        return _encoded(pc.extract_regex(_take(entity, rows), _FIELDS).field("second"))

    found = {"group": _field(source, GROUP_FIRST, lambda rows: _first_fields(entity, rows), n),
             "partition": constant("", n), "user": constant("", n),
             "project": _field(source, PROJECT_SECOND, second, n)}
    if cc_jobs is not None and len(cc_jobs):
        jobs = first_rows(cc_jobs)
        at = pc.index_in(entity, pa.array(jobs["job"].to_numpy(), pa.string()))
        at = pc.fill_null(at, -1).to_numpy()  # -1: not a job
        job = np.flatnonzero((at >= 0) & (source.to_numpy() == CC_SOURCE))
        for column, name in CC_JOB_COLUMNS.items():
            local, names = pd.factorize(jobs[column].to_numpy())
            codes, before = found[name].codes.astype(np.int64), list(found[name].categories)
            codes[job] = local[at[job]] + len(before)
            found[name] = _in_order(codes, np.array([*before, *names], dtype=object))
    index = facts.index
    columns = {name: pd.Series(values, index=index) for name, values in found.items()}
    columns |= {name: pd.Series(values, index=index) for name, values in
                (("source", source), ("component", _labels(facts["component"])),
                 ("method", _labels(facts["method"])))}
    columns[ENTITY_ID] = pd.Series(pc.dictionary_encode(entity).indices.to_numpy(
        zero_copy_only=False).astype(np.int64), index=index)
    # the facts' columns, these in place of theirs, then the new ones (no column copied, as
    # assign would)
    merged = {name: columns.get(name, facts[name]) for name in facts.columns}
    return pd.DataFrame(merged | columns, copy=False)
