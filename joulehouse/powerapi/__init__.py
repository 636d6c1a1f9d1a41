"""PowerAPI reports: hwpc-sensor counters and RAPL energy, SmartWatts power estimates."""
