"""python -m hpcmon.dashboards: the same as hpcmon-dashboards, one line when an extra is missing."""

from hpcmon.entry import run

raise SystemExit(run("hpcmon-dashboards"))
