#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/epilog.d/hpcmon-epilog.sh) for hpcmon's post-job
# hook. It runs as root on each compute node after a job; Slurm gives it SLURM_JOB_ID,
# SLURM_JOB_USER and SLURM_JOB_UID. The hook reads everything else from its YAML config.
#
# A monitoring failure must never fail or drain a node: this script always exits 0. The hook
# has its own time limit (time_limit_seconds in the config); `timeout` is only a last resort:
# its SIGTERM stops the hook within a second (one line in syslog), its SIGKILL at once, and
# with spool_dir set neither loses a point (every line is spooled before the first send; the
# next run or `hpcmon-post-job flush` sends what the server had not acknowledged).
# Messages go to syslog (tag hpcmon-post-job) because Slurm discards epilog output.

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

HPCMON_POST_JOB=${HPCMON_POST_JOB:-/opt/hpcmon/bin/hpcmon-post-job}  # README "Install"
HPCMON_CONFIG=${HPCMON_CONFIG:-/etc/hpcmon/post-job.yaml}
HPCMON_HARD_LIMIT=${HPCMON_HARD_LIMIT:-120}   # seconds; keep above time_limit_seconds

# The epilog runs on every node of the job, but the logs are on the shared file system: only
# the job's first node ingests (re-ingesting would be harmless, just wasted work). Set
# HPCMON_ALL_NODES=1 when node-local files (e.g. GEOPM reports in /var/log) must be read.
if [ -z "${HPCMON_ALL_NODES:-}" ] && [ -n "${SLURM_JOB_NODELIST:-}" ] && \
   [ -n "${SLURMD_NODENAME:-}" ] && command -v scontrol >/dev/null 2>&1; then
    first_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | head -n 1)
    if [ -n "$first_node" ] && [ "$first_node" != "$SLURMD_NODENAME" ]; then
        exit 0
    fi
fi

# Lines to syslog, or to stderr when HPCMON_LOG_STDERR is set or logger is missing.
to_log() {
    if [ -z "${HPCMON_LOG_STDERR:-}" ] && command -v logger >/dev/null 2>&1; then
        logger -t hpcmon-post-job -p user.info
    else
        cat >&2
    fi
}

if [ ! -x "$HPCMON_POST_JOB" ] || [ ! -r "$HPCMON_CONFIG" ]; then
    echo "$HPCMON_POST_JOB not installed or $HPCMON_CONFIG missing; skipped" | to_log
    exit 0
fi

timeout -k 5 "$HPCMON_HARD_LIMIT" "$HPCMON_POST_JOB" --slurm-epilog --config "$HPCMON_CONFIG" \
    2>&1 | to_log
exit 0
