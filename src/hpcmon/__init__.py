"""hpcmon: per-job HPC monitoring. `hpcmon.exporter` (Prometheus exporter), `hpcmon.post_job`
(Slurm epilog hook), `hpcmon.dashboards` (Grafana dashboards and rules), `hpcmon.report` (the
per-job report), `hpcmon.common` (what they share), `hpcmon.entry` (console scripts)."""

__version__ = "0.1.0"
