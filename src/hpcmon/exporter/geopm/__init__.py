"""GEOPM / powercap power and energy on compute nodes: backends, naming, sampler, collector."""
