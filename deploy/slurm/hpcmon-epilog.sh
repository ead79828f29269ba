#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/epilog.d/hpcmon-epilog.sh) for hpcmon's post-job
# hook. It runs as root on each compute node after a job; Slurm gives it SLURM_JOB_ID,
# SLURM_JOB_USER, SLURM_JOB_UID and the job's nodes. The hook asks slurmctld once per job for
# the rest (job name, times, exit code) and reads its settings from its YAML config.
#
# A monitoring failure must never fail or drain a node: this script always exits 0. The hook
# has its own time limit (time_limit_seconds in the config); `timeout` is only a last resort:
# its SIGTERM stops the hook within a second (one line in syslog), its SIGKILL at once, and
# with spool_dir set neither loses a point (every line is spooled before the first send; the
# next run or `hpcmon-post-job flush` sends what the server had not acknowledged).
# Messages go to syslog (tag hpcmon-post-job) because Slurm discards epilog output.

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

HPCMON_POST_JOB=${HPCMON_POST_JOB:-/opt/hpcmon/bin/hpcmon-post-job}  # docs/install.md
HPCMON_CONFIG=${HPCMON_CONFIG:-/etc/hpcmon/post-job.yaml}
HPCMON_HARD_LIMIT=${HPCMON_HARD_LIMIT:-120}   # seconds; keep above time_limit_seconds

# The epilog runs on every node of the job. The hook itself decides what each node reads, from
# what Slurm gives it (SLURMD_NODENAME and the job's node list): inputs on the shared file
# system (Darshan, Recorder, VizTracer) only on the job's first node, node-local ones (GEOPM
# reports under /var/log) on every node; each source's `scope:` in the config says which.

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
