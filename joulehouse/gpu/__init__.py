"""GPU benchmark repetitions (GPyJoules layout): layout, readers, schemas, energy.

A data root holds ``experiment/benchmark/run/repetition`` folders of CSV and
JSON files; see :mod:`joulehouse.gpu.layout` and :mod:`joulehouse.gpu.readers`.
"""
