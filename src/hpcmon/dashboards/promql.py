"""PromQL shared by the dashboards and the rules, built from the exporter's metric names.

Throughput comes either from rate() on the `_total` counters or from the exporter's own
per-second gauges averaged over the window (`rates_from`); both give the same numbers on steady
data, so sites that turn the exporter's rates off lose nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcmon.common import metric_names as m

from .config import SLURM_JOB_LABELS, Config

OST = 'component="ost"'
METADATA = 'component="mdt", operation!~"{}"'.format("|".join(m.DATA_OPERATIONS))


def selector(*matchers: str) -> str:
    """`{a, b}` from the non-empty matchers ("" when there are none)."""
    present = [x for x in matchers if x]
    return "{" + ", ".join(present) + "}" if present else ""


@dataclass(frozen=True)
class Rates:
    """Per-second expressions over a window, from counters or from the exporter's gauges."""

    config: Config

    def bytes(self, direction: str, matchers: str, window: str) -> str:
        """Bytes/s per series; direction is read or write."""
        if self.config.rates_from == "gauges":
            gauge = m.JOB_READ_RATE if direction == "read" else m.JOB_WRITE_RATE
            return f"avg_over_time({gauge}{selector(matchers)}[{window}])"
        counter = m.JOB_READ_BYTES if direction == "read" else m.JOB_WRITE_BYTES
        return f"rate({counter}{selector(matchers)}[{window}])"

    def write_ops(self, matchers: str, window: str) -> str:
        if self.config.rates_from == "gauges":
            ops = selector(matchers, 'operation="write"')
            return f"avg_over_time({m.JOB_OPERATIONS_RATE}{ops}[{window}])"
        return f"rate({m.JOB_WRITE_SAMPLES}{selector(matchers)}[{window}])"

    def metadata_ops(self, matchers: str, window: str) -> str:
        if self.config.rates_from == "gauges":
            return f"avg_over_time({m.JOB_OPERATIONS_RATE}{selector(matchers, METADATA)}[{window}])"
        return f"rate({m.JOB_OPERATIONS}{selector(matchers, METADATA)}[{window}])"


def node_energy(function: str, window: str, matchers: str = "", site_label: str = "") -> str:
    """`function` (rate or increase) of a node's CPU, DRAM and GPU energy counters, summed per
    node. The board domain is left out (it already includes the others). Each counter keeps a
    `counter` label until the sum: without __name__ their label sets would collide."""
    parts = [
        f'label_replace({function}({name}{selector(matchers)}[{window}]), "counter", "{name}", '
        '"", "")'
        for name in m.NODE_ENERGY_COUNTERS
    ]
    return f"sum by ({_node_labels(site_label)}) (\n  " + "\n  or ".join(parts) + "\n)"


def _node_labels(site_label: str) -> str:
    return ", ".join(x for x in (site_label, "instance") if x)


def node_power(window: str, matchers: str = "", site_label: str = "") -> str:
    """Watts per node, from the energy counters (what the hardware integrates)."""
    return node_energy("rate", window, matchers, site_label)


def job_energy_kwh(window: str, job_matchers: str = "", node_matchers: str = "") -> str:
    """kWh per job over the dashboard's range: job power (shared nodes split equally)
    integrated at the panel's interval."""
    power = job_power(window, job_matchers, node_matchers)
    return f"sum_over_time(({power})[$__range:$__interval]) * $__interval_ms / 3.6e9"


def job_power(
    window: str, job_matchers: str = "", node_matchers: str = "", site_label: str = ""
) -> str:
    """Watts per job. Attribution rule for shared nodes: a node's power is split equally
    between the jobs that have processes on it at that moment (hpc_node_job_info)."""
    on = _node_labels(site_label)
    jobs = f"{m.NODE_JOB_INFO}{selector(job_matchers)}"
    all_jobs = f"{m.NODE_JOB_INFO}{selector(node_matchers)}"
    power = node_power(window, node_matchers, site_label)
    share = f"{power} / on ({on}) count by ({on}) ({all_jobs})"
    by = ", ".join(x for x in (site_label, "jobid") if x)
    return f"sum by ({by}) (({share}) * on ({on}) group_right () {jobs})"


SLURM_LABELS = ", ".join(SLURM_JOB_LABELS)
SLURM_LOOKBACK = "5m"  # a job stays named this long after squeue last listed it


def slurm_jobs(on: str = "jobid", matchers: str = "", site_label: str = "") -> str:
    """One series per Slurm job, value 1, with the labels `on` (holding Slurm's job id), user,
    account and job_name: what a per-job series joins with to be named.

    - A controller pair exports a job twice (other instance, maybe another state): `max by`
      drops instance and state. Should the pair disagree on a name for a moment (scontrol
      update between their reads), `topk by (id) (1, ...)` keeps one of the two, where two
      would make every join of the rule fail (many-to-many).
    - The last value of the last 5 minutes: a job keeps its names through a short squeue
      failure (hpc_slurm_up 0, no job series), and while its 5-minute rates run out.
    - `on` other than jobid (a --jobstats.jobid-pattern group such as slurm_job): Slurm's id
      is copied to that label."""
    info = f"last_over_time({m.SLURM_JOB_INFO}{selector(matchers)}[{SLURM_LOOKBACK}])"
    if on != "jobid":
        info = f'label_replace({info}, "{on}", "$1", "jobid", "(.+)")'
    keys = ", ".join(x for x in (site_label, on) if x)
    return f"topk by ({keys}) (1, max by ({keys}, {SLURM_LABELS}) ({info}))"


def with_slurm_job(expr: str, on: str = "jobid", matchers: str = "", site_label: str = "") -> str:
    """The series of `expr` whose job Slurm lists, with its user, account and job_name (the
    value is unchanged: the job's series is 1)."""
    keys = ", ".join(x for x in (site_label, on) if x)
    jobs = slurm_jobs(on, matchers, site_label)
    return f"({expr})\n* on ({keys}) group_left ({SLURM_LABELS})\n{jobs}"


def named_by_slurm(
    expr: str, on: str = "jobid", site_label: str = "", matchers: str = "", unknown: str = ""
) -> str:
    """Every series of `expr`, with user, account and job_name where Slurm lists the job, as
    they are where it does not (no Slurm collector at all, a job Slurm no longer lists).
    `matchers` select Slurm's jobs; `unknown` replaces `expr` for the jobs Slurm does not list
    (e.g. the same series under the same filter)."""
    keys = ", ".join(x for x in (site_label, on) if x)
    known = with_slurm_job(expr, on, matchers, site_label)
    return f"{known}\nor on ({keys})\n({unknown or expr})"
