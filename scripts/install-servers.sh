#!/usr/bin/env bash
# Install the real servers the tests and the demo talk to (Debian packages), only when missing.
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v influxd >/dev/null 2>&1 || need+=(influxdb)
command -v victoria-metrics >/dev/null 2>&1 && command -v vmagent >/dev/null 2>&1 \
    && command -v vmalert >/dev/null 2>&1 || need+=(victoria-metrics)
command -v chromium >/dev/null 2>&1 || need+=(chromium)  # the report's HTML test
# a private Slurm cluster on loopback (devtools/slurm.py): controller, node daemons, clients, munge
command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 \
    && command -v sbatch >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 \
    || need+=(slurmctld slurmd slurm-client munge)

# The packages enable their services at boot, listening on all interfaces; the tests and the
# demo start private instances on loopback instead: keep the system ones disabled.
disable_services() {
    [ "$(id -u)" -eq 0 ] || return 0
    for unit in prometheus influxdb victoria-metrics munge slurmctld slurmd; do
        if [ -e "/lib/systemd/system/$unit.service" ] && command -v deb-systemd-helper >/dev/null; then
            deb-systemd-helper disable "$unit.service" >/dev/null 2>&1 || true
        fi
        if [ -e "/etc/init.d/$unit" ] && command -v update-rc.d >/dev/null; then
            update-rc.d "$unit" disable >/dev/null 2>&1 || true
        fi
    done
}

if [ ${#need[@]} -eq 0 ]; then
    disable_services
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install-servers: missing ${need[*]} and not root; install them with apt-get" >&2
    exit 1
fi
echo "install-servers: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -q  # wait for a dpkg lock held elsewhere
# policy-rc.d keeps the packages from starting their own services; tests start private instances.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d.hpcmon
chmod +x /usr/sbin/policy-rc.d.hpcmon
if [ ! -e /usr/sbin/policy-rc.d ]; then
    cp /usr/sbin/policy-rc.d.hpcmon /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${need[@]}"
rm -f /usr/sbin/policy-rc.d.hpcmon
disable_services
