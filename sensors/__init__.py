"""Dagster sensors: notice landed data and ask for runs."""

from sensors.gpu_repetitions import gpu_repetition_sensor, gpu_repetition_sensors

__all__ = ["gpu_repetition_sensor", "gpu_repetition_sensors"]
