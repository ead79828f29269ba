"""python -m hpcmon.exporter: the same as hpcmon-exporter, one line when an extra is missing."""

from hpcmon.entry import run

raise SystemExit(run("hpcmon-exporter"))
