"""Code shared by the exporter, the post-job hook and the dashboards: job ids, time, points."""

__version__ = "0.1.0"
