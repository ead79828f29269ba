"""``--collector.slurm``: the running and completing jobs of a Slurm cluster, as
``hpc_slurm_job_info{jobid, user, account, partition, job_name, state} 1``, so that
dashboards and alerts can name the job, user and account behind a job id.

Run it on one host per cluster that has the Slurm client configuration (the controller or a
login node). A thread asks squeue every ``--slurm.interval`` seconds (one squeue call: what
it costs slurmctld) and renders the answer once; a scrape serves the last one at once and
never waits for squeue. When squeue cannot run, fails, hangs past ``--slurm.timeout`` or
prints something else, ``hpc_slurm_up`` is 0 and no job series is exported (never the list
of an earlier answer), with one log line when that starts and one when it ends.

The job name is the user's text: any bytes, kept as one label value (escaped by the
exposition, bytes that are not UTF-8 replaced by U+FFFD), cut to 64 characters.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from hpcmon.common import metric_names as names
from hpcmon.exporter.collector import (
    FamilyCollector,
    Periodic,
    ProblemLog,
    add_flag,
    register,
    seconds_flag,
)
from hpcmon.exporter.exposition import Compressed, escape_label_sets, render_families
from hpcmon.exporter.squeue import (
    MAX_JOB_NAME,
    STATES,
    SlurmJobState,
    SqueueError,
    read_squeue,
)

log = logging.getLogger("hpcmon.exporter.slurm")

INFO_LABELS = list(SlurmJobState._fields)  # jobid, user, account, partition, job_name, state


@dataclass(frozen=True, slots=True)
class SlurmSample:
    """The last answer of squeue (or its failure), as the scrape shows it."""

    up: bool
    jobs: tuple[SlurmJobState, ...] = ()
    bad_records: int = 0
    seconds: float = 0.0  # how long squeue and the parsing took
    records: tuple[bytes, ...] = field(default=(), compare=False)  # each job's squeue record


INFO_HELP = (
    f"A running or completing Slurm job (1 per job); job_name is cut to {MAX_JOB_NAME} characters."
)


def sample_families(sample: SlurmSample, *, with_info: bool = True) -> list[Metric]:
    """The families of a sample; ``with_info=False``: all but the job series (InfoLines)."""
    up = GaugeMetricFamily(
        names.SLURM_UP,
        "Whether squeue answered at the last sample (0: no job series until it does).",
        value=1.0 if sample.up else 0.0,
    )
    duration = GaugeMetricFamily(
        names.SLURM_SAMPLE_DURATION,
        "Time the last squeue call and the parsing of its answer took.",
        value=sample.seconds,
    )
    bad = GaugeMetricFamily(
        names.SLURM_BAD_RECORDS,
        "Pieces of squeue's last answer that are not a job record (not exported).",
        value=float(sample.bad_records),
    )
    if not sample.up:
        return [up, duration, bad]
    counts = Counter(map(attrgetter("state"), sample.jobs))
    jobs = GaugeMetricFamily(
        names.SLURM_JOBS, "Jobs in squeue's last answer, per state.", labels=["state"]
    )
    for state in sorted(set(STATES) | set(counts)):
        jobs.add_metric([state], float(counts[state]))
    if not with_info:
        return [up, duration, bad, jobs]
    info = GaugeMetricFamily(names.SLURM_JOB_INFO, INFO_HELP, labels=INFO_LABELS)
    for job in sample.jobs:
        info.add_metric(list(job), 1.0)
    return [up, duration, bad, jobs, info]


class InfoLines:
    """The ``hpc_slurm_job_info`` lines, each escaped once while its job lives (by
    prometheus-client's own writer), found again by the job's squeue record: 10,000 jobs
    through the generic writer at every sample would hold the interpreter for a second and
    delay the scrapes meanwhile."""

    def __init__(self) -> None:
        self._lines: dict[bytes, bytes] = {}

    def render(self, jobs: Sequence[SlurmJobState], records: Sequence[bytes]) -> bytes:
        """The family's text, as prometheus-client writes it (the tests compare); ``records``:
        each job's record (parse_squeue hashed them already, so the lookups cost little)."""
        # Whole-list operations: 10,000 jobs. No line is empty, so b"" marks a new job.
        lines = list(map(self._lines.get, records, repeat(b"")))
        missing = [index for index, line in enumerate(lines) if not line]
        escaped = escape_label_sets(INFO_LABELS, [jobs[index] for index in missing])
        for index, labels in zip(missing, escaped, strict=True):
            lines[index] = f"{names.SLURM_JOB_INFO}{{{labels}}} 1.0\n".encode()
        self._lines = dict(zip(records, lines, strict=True))
        header = f"# HELP {names.SLURM_JOB_INFO} {INFO_HELP}\n# TYPE {names.SLURM_JOB_INFO} gauge\n"
        return header.encode() + b"".join(lines)


@register
class SlurmCollector(FamilyCollector):
    name = "slurm"
    description = (
        "Slurm's running and completing jobs (one squeue call per interval; on one host per "
        f"cluster with the Slurm client configuration; job names cut to {MAX_JOB_NAME} characters)"
    )
    enabled_by_default = False

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        add_flag(
            parser,
            "--slurm.interval",
            type=seconds_flag(0.1, 86400),
            default=30.0,
            help="seconds between two squeue calls",
        )
        add_flag(
            parser,
            "--slurm.timeout",
            type=seconds_flag(0.1, 3600),
            default=10.0,
            help="seconds squeue may take before it is killed and hpc_slurm_up is 0",
        )
        add_flag(
            parser,
            "--slurm.squeue",
            default="squeue",
            help="squeue executable (it reads SLURM_CONF or /etc/slurm/slurm.conf and needs munge)",
        )

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__(options)
        self.squeue = options.slurm_squeue
        self.timeout = options.slurm_timeout
        self._stopping = threading.Event()
        self._periodic = Periodic("slurm", self.sample, options.slurm_interval)
        self._problems = ProblemLog(log, repeat_seconds=3600)
        self._sample = SlurmSample(up=False)
        self._info = InfoLines()
        self._known: dict[bytes, SlurmJobState | None] = {}  # the last answer's records
        self._rendered = Compressed.of(self._render(self._sample))
        self._up: bool | None = None  # squeue answered at the last sample; None: not asked yet

    def start(self) -> None:
        self._stopping.clear()
        self._periodic.start()

    def stop(self) -> None:
        self._stopping.set()
        self._periodic.stop(timeout=self.timeout + 5)

    def sample(self) -> SlurmSample:
        """Ask squeue once and publish the answer (or its failure) for the scrapes."""
        started = time.perf_counter()
        try:
            answer = read_squeue(self.squeue, self.timeout, os.environ, self._stopping, self._known)
        except SqueueError as exc:
            if self._stopping.is_set():
                return self._sample  # the exporter stops: not a failure of squeue
            sample = SlurmSample(up=False, seconds=time.perf_counter() - started)
            self._went_down(str(exc))
        else:
            self._known = answer.by_record
            sample = SlurmSample(
                True,
                answer.jobs,
                answer.bad_records,
                time.perf_counter() - started,
                answer.records,
            )
            self._came_up(len(answer.jobs))
            if answer.bad_records:
                self._problems.warn(
                    "squeue's answer has pieces that are not job records; they are left out "
                    f"({names.SLURM_BAD_RECORDS})"
                )
        rendered = Compressed.of(self._render(sample))
        self._sample, self._rendered = sample, rendered  # one after the other: both are whole
        return sample

    def _went_down(self, reason: str) -> None:
        """One line when squeue starts failing, not one per sample."""
        if self._up is not False:
            log.warning("squeue: %s; %s 0, no job series until it answers", reason, names.SLURM_UP)
        else:
            log.debug("squeue still failing: %s", reason)
        self._up = False

    def _came_up(self, jobs: int) -> None:
        if self._up is False:
            log.info("squeue answers again (%d jobs)", jobs)
        self._up = True

    def _render(self, sample: SlurmSample) -> bytes:
        """The exposition of a sample: the job series through InfoLines."""
        small = render_families(sample_families(sample, with_info=False))
        return small + self._info.render(sample.jobs, sample.records) if sample.up else small

    def collect(self) -> Iterable[Metric]:
        return sample_families(self._sample)

    def exposition(self) -> bytes:
        return b"".join(self._rendered.chunks())

    def exposition_before(self, scrape_timeout: float | None) -> Compressed:
        return self._rendered
