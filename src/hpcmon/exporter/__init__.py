"""hpcmon exporter: Lustre jobstats on servers, GEOPM/RAPL power and jobs on compute nodes."""
