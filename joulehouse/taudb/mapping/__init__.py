"""Sources other than TAU profiles, mapped onto TAUdb trials (``TrialData``).

One small module per source, each documented in ``docs/taudb-mapping.md``:
``gpu`` (GPU benchmark runs), ``geopm`` (GEOPM reports), ``clustercockpit``
(ClusterCockpit jobs), ``powerapi`` (PowerAPI sensors' days). The loader holds every trial to
what TAU's tools need (:mod:`joulehouse.taudb.rules`); each mapping's example
data joins ``TRIAL_SOURCES`` in ``tests/taudb/test_tau_reader.py``.
"""
