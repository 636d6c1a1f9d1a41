"""The ClusterCockpit job archive sensor and its job (the sensor follows)."""

import dagster as dg

from assets.clustercockpit import cc_pipeline

SENSOR_NAME = "cc_job_archive"
JOB_NAME = "cc_job"

cc_job = dg.define_asset_job(
    JOB_NAME, selection=dg.AssetSelection.assets(cc_pipeline),
    description=("The whole ClusterCockpit pipeline, from each job-id block's tables to the "
                 "tables over all blocks, energy_facts/clustercockpit and the jobs' TAUdb "
                 "trials."),
    tags={"joulehouse/pipeline": "clustercockpit"},
)
