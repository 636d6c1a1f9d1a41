"""Dagster assets: thin wrappers that call the core and write the warehouse."""

from assets.gpu import GPU_ASSETS, GPU_PIPELINE, gpu_repetitions
from assets.taudb import TAUDB_ASSETS, tau_profile_sets, tau_profile_trials, taudb_trials

__all__ = ["GPU_ASSETS", "GPU_PIPELINE", "TAUDB_ASSETS", "gpu_repetitions", "tau_profile_sets",
           "tau_profile_trials", "taudb_trials"]
