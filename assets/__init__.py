"""Dagster assets: thin wrappers that call the core and write the warehouse."""

from assets.accounting import ACCOUNTING_ASSETS
from assets.clustercockpit import CC_ASSETS, cc_job_blocks, cc_pipeline
from assets.geopm import GEOPM_ASSETS, geopm_days, geopm_pipeline
from assets.gpu import gpu_repetition_days, gpu_repetition_files
from assets.pipeline import gpu_pipeline
from assets.powerapi import POWERAPI_ASSETS, powerapi_days, powerapi_pipeline
from assets.taudb import TAUDB_ASSETS, tau_profile_days, tau_profile_trials

GPU_ASSETS = [gpu_repetition_files, gpu_pipeline]

__all__ = ["ACCOUNTING_ASSETS", "CC_ASSETS", "GEOPM_ASSETS", "GPU_ASSETS", "POWERAPI_ASSETS", "TAUDB_ASSETS",
           "cc_job_blocks", "cc_pipeline", "geopm_days", "geopm_pipeline", "gpu_pipeline",
           "gpu_repetition_days", "powerapi_days", "powerapi_pipeline", "tau_profile_days",
           "tau_profile_trials"]
