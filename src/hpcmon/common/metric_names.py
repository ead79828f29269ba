"""The exporter's metric names, in one place for the dashboards and the rules.

Dashboards and alert rules are generated from these constants; a test scrapes the real exporter
and fails when one of them is no longer exported, so a rename cannot silently empty a panel.
"""

from __future__ import annotations

# Lustre jobstats, per job (labels: component, target, jobid, + jobid-pattern labels).
JOB_READ_BYTES = "lustre_job_read_bytes_total"
JOB_WRITE_BYTES = "lustre_job_write_bytes_total"
JOB_READ_SAMPLES = "lustre_job_read_samples_total"
JOB_WRITE_SAMPLES = "lustre_job_write_samples_total"
JOB_OPERATIONS = "lustre_job_stats_total"  # + operation: every operation but read and write
JOB_LATENCY = "lustre_job_latency_seconds_total"  # + operation: Lustre 2.14+ `usecs` entries
JOB_READ_RATE = "lustre_job_read_bytes_per_second"  # gauge between the last two samples
JOB_WRITE_RATE = "lustre_job_write_bytes_per_second"
JOB_OPERATIONS_RATE = "lustre_job_operations_per_second"  # + operation

# Lustre jobstats, health (labels: component, target).
JOBSTATS_UP = "lustre_jobstats_up"  # + source
JOBSTATS_JOBS = "lustre_jobstats_jobs"
JOBSTATS_PARSE_ERRORS = "lustre_jobstats_parse_errors_total"
JOBSTATS_SOURCE_FAILURES = "lustre_jobstats_source_failures_total"  # source, reason
JOBSTATS_DROPPED_SERIES = "lustre_jobstats_dropped_series_total"  # + reason
JOBSTATS_SCRAPE_DURATION = "lustre_jobstats_scrape_duration_seconds"

# Compute nodes (labels: domain, domain_index, source).
CPU_ENERGY = "geopm_cpu_energy_joules_total"
DRAM_ENERGY = "geopm_dram_energy_joules_total"
GPU_ENERGY = "geopm_gpu_energy_joules_total"
CPU_POWER = "geopm_cpu_power_watts"
GEOPM_UP = "geopm_up"  # source
NODE_JOB_INFO = "hpc_node_job_info"  # jobid, uid; value 1

# Slurm's queue, --collector.slurm on a controller (squeue): one series per running or
# completing job (jobid, user, account, partition, job_name, state; value 1), jobs per state,
# and whether squeue answered (0: no job series). A controller pair exports a job twice.
SLURM_JOB_INFO = "hpc_slurm_job_info"
SLURM_JOBS = "hpc_slurm_jobs"  # state
SLURM_UP = "hpc_slurm_up"

# The node's post-job spool, --collector.postjob (label: kind, the server API: influx-v1/-v2).
POSTJOB_SPOOL_LINES = "hpcmon_postjob_spool_lines"
POSTJOB_SPOOL_FILES = "hpcmon_postjob_spool_files"
POSTJOB_SPOOL_OLDEST_AGE = "hpcmon_postjob_spool_oldest_age_seconds"  # 0 when none waits
POSTJOB_REJECTED_LINES = "hpcmon_postjob_rejected_lines"
POSTJOB_REJECTED_FILES = "hpcmon_postjob_rejected_files"
POSTJOB_SPOOL_UP = "hpcmon_postjob_spool_up"  # 0: the exporter cannot read the spool

# The exporter itself (label: collector).
COLLECTOR_SUCCESS = "hpcmon_exporter_collector_success"
COLLECTOR_DURATION = "hpcmon_exporter_collector_duration_seconds"

# The Slurm collector's own health (no label): its last squeue call.
SLURM_SAMPLE_DURATION = "hpc_slurm_sample_duration_seconds"
SLURM_BAD_RECORDS = "hpc_slurm_squeue_bad_records"  # pieces of the answer left out

# Energy counters that add up to a node's power without counting a domain twice (the board
# domain, psys, already includes the package and DRAM, so it is left out).
NODE_ENERGY_COUNTERS = (CPU_ENERGY, DRAM_ENERGY, GPU_ENERGY)

# Data operations; every other operation on an MDT counts as metadata.
DATA_OPERATIONS = ("read", "write", "read_bytes", "write_bytes")

ALL = tuple(
    value for name, value in sorted(globals().items()) if name.isupper() and isinstance(value, str)
)
