"""ClusterCockpit job archives (seed 002): layout, readers, schemas, jobs, energy.

An archive holds ``<cluster>/<jobId/1000>/<jobId%1000>/<startTime>/`` job
folders of meta.json and data.json(.gz); see :mod:`.layout` and :mod:`.readers`.
"""
