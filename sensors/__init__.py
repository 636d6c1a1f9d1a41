"""Dagster sensors: notice landed data and ask for runs."""

from sensors.accounting_inputs import accounting_inputs_sensor
from sensors.clustercockpit import cc_archive_sensor, cc_job
from sensors.geopm import geopm_job, geopm_report_sensor
from sensors.gpu_repetitions import gpu_repetition_sensor, gpu_repetition_sensors
from sensors.powerapi import powerapi_job, powerapi_sensor
from sensors.tau_profiles import tau_profile_sensor, tau_profiles_job

__all__ = ["accounting_inputs_sensor", "cc_archive_sensor", "cc_job", "geopm_job", "geopm_report_sensor",
           "gpu_repetition_sensor", "gpu_repetition_sensors", "powerapi_job", "powerapi_sensor",
           "tau_profile_sensor", "tau_profiles_job"]
