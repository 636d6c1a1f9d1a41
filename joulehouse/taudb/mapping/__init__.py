"""Sources other than TAU profiles, mapped onto TAUdb trials (``TrialData``).

One small module per source, each documented in ``docs/taudb-mapping.md``:
``gpu`` (GPU benchmark runs). GEOPM reports, ClusterCockpit jobs and
PowerAPI targets will each add theirs here.
"""
