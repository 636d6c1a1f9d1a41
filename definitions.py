"""The Dagster definitions of Joulehouse; ``workspace.yaml`` loads ``defs``.

Configuration (defaults are for a fresh clone):

- ``JOULEHOUSE_GPU_DATA_ROOTS``: GPU data roots (see ``resources/gpu.py``),
  default ``examples/gpu-data``;
- ``JOULEHOUSE_WAREHOUSE``: the warehouse folder, default ``warehouse/``.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from assets import GPU_ASSETS, GPU_PIPELINE
from resources import GpuBenchmarkSource, Warehouse
from sensors import gpu_repetition_sensors
from sensors.gpu_repetitions import JOB_NAME as GPU_JOB

PROJECT_ROOT = Path(__file__).resolve().parent
EXAMPLE_GPU_DATA = PROJECT_ROOT / "examples" / "gpu-data"
DEFAULT_WAREHOUSE = PROJECT_ROOT / "warehouse"

gpu_energy_job = dg.define_asset_job(
    GPU_JOB,
    selection=dg.AssetSelection.assets(*GPU_PIPELINE),
    description="The whole GPU-benchmark pipeline, from validated frames to energy_facts.",
    tags={"joulehouse/pipeline": "gpu"},
)

automation = dg.AutomationConditionSensorDefinition(
    "joulehouse_automation",
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=("Evaluates the assets' automation conditions: per-repetition energy follows "
                 "its validated frames, the tables over all repetitions follow any change."),
)


def build_definitions(gpu_source: GpuBenchmarkSource, warehouse: Warehouse) -> dg.Definitions:
    """The definitions over the given data roots and warehouse."""
    return dg.Definitions(
        assets=GPU_ASSETS,
        jobs=[gpu_energy_job],
        sensors=[*gpu_repetition_sensors(gpu_source), automation],
        resources={"gpu_source": gpu_source, "warehouse": warehouse},
    )


defs = build_definitions(
    GpuBenchmarkSource.from_env(EXAMPLE_GPU_DATA),
    Warehouse.from_env(DEFAULT_WAREHOUSE),
)
