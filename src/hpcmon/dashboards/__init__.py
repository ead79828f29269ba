"""hpcmon dashboards package."""
