"""python -m hpcmon.report: the same as hpcmon-report, one line when an extra is missing."""

from hpcmon.entry import run

raise SystemExit(run("hpcmon-report"))
