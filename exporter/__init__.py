"""hpcmon exporter: Lustre jobstats on servers, GEOPM/RAPL power and running jobs on compute nodes."""
