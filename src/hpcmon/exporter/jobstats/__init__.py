"""Lustre jobstats: sources -> parser -> rates -> exposition, run by ``JobstatsCollector``."""
