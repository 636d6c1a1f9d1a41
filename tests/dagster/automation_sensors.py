"""The automation sensors the definitions hold (``sensors/automation.py``): their names and
what each evaluates, for the tests that list or turn off sensors."""

#: Each automation sensor and the assets it evaluates: those whose step holds its pool.
AUTOMATED = {
    "joulehouse_automation_gpu": {"gpu_repetition_energy", "gpu_setting_energy",
                                  "gpu_benchmark_energy", "energy_facts/gpu", "taudb_trials"},
    "joulehouse_automation_powerapi": {"powerapi_report_energy", "powerapi_window_energy",
                                       "energy_facts/powerapi"},
    "joulehouse_automation_geopm": {"geopm_host_energy", "geopm_trials", "geopm_region_energy",
                                    "geopm_report_energy", "energy_facts/geopm"},
    "joulehouse_automation_clustercockpit": {"cc_job_trials", "cc_jobs", "cc_job_energy",
                                             "cc_rollup", "energy_facts/clustercockpit"},
    # the grid intensity and tariffs hold no pool: automated with the accounting
    "joulehouse_automation_accounting": {"carbon_intensity", "tariffs", "accounting_daily",
                                         "accounting_monthly", "carbon_per_fact",
                                         "cost_per_fact"},
    "joulehouse_automation_derived": {"trust_checks", "waste", "waste_weekly", "fact_quality"},
    "joulehouse_automation_trials": {"powerapi_trials"},
}
#: The automation sensors' names.
AUTOMATION = tuple(AUTOMATED)
#: The pool of each automation sensor's runs.
POOLS = {"joulehouse_automation_gpu": "joulehouse_tables_gpu",
         "joulehouse_automation_powerapi": "joulehouse_tables_powerapi",
         "joulehouse_automation_geopm": "joulehouse_tables_geopm",
         "joulehouse_automation_clustercockpit": "joulehouse_tables_clustercockpit",
         "joulehouse_automation_accounting": "joulehouse_accounting",
         "joulehouse_automation_derived": "joulehouse_derived",
         "joulehouse_automation_trials": "joulehouse_trials"}
