"""Stable dashboard uids: links in dashboards and alert annotations point at these."""

OVERVIEW_UID = "hpcmon-overview"
JOB_UID = "hpcmon-job"
LONGTERM_UID = "hpcmon-longterm"
JOBS_UID = "hpcmon-jobs"
