"""python -m hpcmon.post_job: the same as hpcmon-post-job, one line when an extra is missing."""

from hpcmon.entry import run

raise SystemExit(run("hpcmon-post-job"))
