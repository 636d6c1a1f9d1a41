"""Dagster assets: thin wrappers that call the core and write the warehouse."""

from assets.gpu import GPU_ASSETS, GPU_PIPELINE, gpu_repetitions

__all__ = ["GPU_ASSETS", "GPU_PIPELINE", "gpu_repetitions"]
