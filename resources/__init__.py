"""Dagster resources: where the data is and where the tables go.

Secrets never appear here as literals: a resource that needs one (e.g. the
TAUdb URL in ``resources/taudb.py``) takes it as ``dagster.EnvVar``.
"""

from resources.accounting import AccountingSettings
from resources.clustercockpit import ClusterCockpitArchive
from resources.geopm import GeopmReportSource
from resources.gpu import DataRoot, GpuBenchmarkSource
from resources.powerapi import PowerapiSource
from resources.taudb import TaudbResource, TauProfileSource
from resources.taudb import embedded_url as embedded_taudb_url
from resources.warehouse import Warehouse
from resources.workers import StepWorkers

__all__ = ["AccountingSettings", "ClusterCockpitArchive", "DataRoot", "GeopmReportSource", "GpuBenchmarkSource", "PowerapiSource",
           "StepWorkers", "TauProfileSource", "TaudbResource", "Warehouse", "embedded_taudb_url"]
