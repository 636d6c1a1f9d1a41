"""A wrapped command's repetition is registered and materialized by the running GPU
sensor with no manual step; a killed collector's repetition is not."""

from __future__ import annotations

import os
import signal
import time

import pytest
from conftest import sleep_command
from fake_nvml import true_energy_j

from assets.gpu import ENERGY_TABLE, GpuHandOut
from definitions import build_definitions
from joulehouse.cli import main
from joulehouse.gpu.days import repetition_day
from resources import DataRoot, GpuBenchmarkSource, Warehouse
from sensors.gpu_repetitions import JOB_NAME, sensor_name
from sensors.local import launch_in_process, tick
from tests.dagster_sqlite import empty_instance

QUIET_S = 1.0


def _args(root, run: str, command: list[str]) -> list[str]:
    return ["collect", "--data-root", str(root), "--experiment", "power-limit",
            "--benchmark", "bert", "--run", run, "--interval", "0.05", "--", *command]


def test_the_sensor_materializes_a_collected_repetition_not_a_killed_one(
        tmp_path, fake_nvml, collector):
    root = tmp_path / "lab"
    killed = collector(_args(root, "killed", sleep_command(60)))
    killed.wait_for_rows(root / "power-limit/bert/killed/0/gpu-power.csv", 10)
    os.killpg(killed.process.pid, signal.SIGKILL)
    killed.process.wait()
    fake_nvml()
    assert main(_args(root, "250W", sleep_command(1.5))) == 0
    time.sleep(QUIET_S + 0.1)  # the sensor's quiet period

    source = GpuBenchmarkSource(data_roots=[DataRoot(path=str(root))], quiet_period_s=QUIET_S,
                                full_rescan_s=None)
    warehouse = Warehouse(root=str(tmp_path / "warehouse"))
    defs = build_definitions(source, warehouse)
    with empty_instance() as instance:
        data = tick(defs.resolve_sensor_def(sensor_name("lab")), instance,
                    {"gpu_source": source})
        key = "lab/power-limit/bert/250W/0"
        day = f"lab/{repetition_day(root / key.removeprefix('lab/'), 'UTC')}"
        assert list(instance.get_dynamic_partitions("gpu_repetition_days")) == [day]
        [request] = data.run_requests
        assert GpuHandOut.named_in(request.run_config) == {
            day: [key]}
        assert launch_in_process(defs.resolve_job_def(JOB_NAME), instance, request).success
    [experiment] = [row for _, row in warehouse.tables().read_partitions(
        ENERGY_TABLE, [key]).iterrows() if row.phase == "experiment"]
    truth = true_energy_j(experiment.window_start.timestamp(), experiment.window_end.timestamp())
    assert experiment.gpu_energy_j == pytest.approx(truth, rel=0.005)
    assert experiment.power_limit_w == 250.0
