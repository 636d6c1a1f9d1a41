"""Collecting GPU measurements with NVML into the seed's repetition layout (docs/collect.md).

Dagster-free: ``nvml`` (the boundary over pynvml), ``writer`` (files written
as measured; the completion protocol), ``sampler`` (the polling thread and
the sample buffers), ``limits`` (set and restored), ``interrupt`` (SIGTERM
as an exception), ``measurement`` (one repetition), ``runner`` (a wrapped
command, N times), ``api`` (a training loop's context manager and callback).
"""
