"""hpcmon-report: one finished job's I/O, file-system impact, energy and what to change.

Shape: read (InfluxDB post-job points, Prometheus over the job's window, optionally the Darshan
logs themselves) -> typed records (``model``) -> insights (``insights``) -> renderers (text,
JSON, self-contained HTML).
"""
