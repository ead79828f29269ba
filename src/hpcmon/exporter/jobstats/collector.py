"""The ``jobstats`` collector: Lustre job_stats of the MDTs/OSTs on this server, per job.

A background process (worker.py) samples every ``--jobstats.interval`` seconds (read -> parse
-> limits -> rates -> pack, one target at a time, then the exposition, compressed once) and
sends each to the exporter, which serves the last complete one: a scrape never waits for, nor
competes with, the sample in progress. With
``--jobstats.interval=0`` a scrape samples, within the scrape's own timeout (lctl is killed in
time and its targets reported down), and scrapes that arrive meanwhile share that sample.
Nothing that goes wrong while sampling fails the scrape: it shows in the health metrics
(``lustre_jobstats_*``) and in the log.
"""

from __future__ import annotations

import argparse
import ctypes
import heapq
import io
import logging
import re
import threading
import time
from collections import defaultdict
from collections.abc import Collection, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from hpcmon.common.jobid import JobIdPattern
from hpcmon.exporter.collector import (
    Collector,
    ProblemLog,
    add_flag,
    bytes_flag,
    count_flag,
    register,
    seconds_flag,
)
from hpcmon.exporter.exposition import KEEP_RAW_BYTES, Compressed, render_families
from hpcmon.exporter.jobstats.limits import TopJobs, job_series
from hpcmon.exporter.jobstats.parser import (
    BYTE_OPERATIONS,
    U64_MAX,
    JobEntry,
    OpStats,
    Target,
    iter_text,
)
from hpcmon.exporter.jobstats.rates import RateTracker
from hpcmon.exporter.jobstats.render import (
    LabelCache,
    Layouts,
    TargetBlock,
    pack_target,
    render_blocks,
)
from hpcmon.exporter.jobstats.sources import (
    DEFAULT_MAX_BYTES,
    FileSource,
    LctlSource,
    ProcfsSource,
    Source,
)
from hpcmon.exporter.jobstats.worker import SamplerProcess, stale_after

log = logging.getLogger("hpcmon.exporter.jobstats")

TargetKey = tuple[str, str]  # (component, target)
K = TypeVar("K", bound=Hashable)  # what ServerSums sums over: a component, or a target
RATE_KINDS = ("read_bytes", "write_bytes", "operations")
DEFAULT_SCRAPE_TIMEOUT = 10.0  # Prometheus' default, when a scrape does not say its own
SCRAPE_MARGIN = 0.2  # part of a scrape's timeout kept for parsing and rendering
M_MMAP_THRESHOLD = -3  # glibc mallopt parameter


def _big_blocks_straight_from_the_os() -> None:
    """Make glibc map every block of 256 KiB or more on its own, and unmap it when freed.

    A sample allocates and frees hundreds of MB in blocks of a few MB (file texts, packed
    arrays, exposition chunks). glibc's default threshold rises to 32 MB after the first
    such free, after which those blocks come from the heap, which rarely shrinks: the
    exporter then keeps ~60 MB it no longer uses. Nothing happens off glibc."""
    try:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 256 * 1024)
    except (OSError, AttributeError):
        pass


_seconds = seconds_flag(0, 1e6, high_included=False)


def rate_kinds(text: str) -> frozenset[str]:
    """``--jobstats.rates``: ``all``, ``none`` or a comma-separated subset of RATE_KINDS."""
    words = {part.strip() for part in text.split(",") if part.strip()}
    if words == {"all"}:
        return frozenset(RATE_KINDS)
    if words == {"none"}:
        return frozenset()
    unknown = sorted(words - set(RATE_KINDS))
    if unknown or not words:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected all, none or a comma-separated list of {', '.join(RATE_KINDS)}"
        )
    return frozenset(words)


def _operations(text: str) -> frozenset[str] | None:
    names = frozenset(part.strip() for part in text.split(",") if part.strip())
    return names or None


def _regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {exc}") from None
    return text


def _latest(a: float | None, b: float | None, pick) -> float | None:
    if a is None or b is None:
        return a if b is None else b
    return pick(a, b)


Ops = dict[str, OpStats]  # operation -> its numbers, as parsed (samples and sum are counters)


def _continues(before: _Part, start_time: float | None, now: Ops) -> bool:
    """Whether an entry is the same Lustre entry as ``before``, later: not reset, by the rule
    of the per-target rates (rates.py): a changed ``start_time`` or a counter that went down
    (an operation no longer listed counts as 0) is a new entry, counted from 0."""
    if before.start_time is not None and start_time is not None and before.start_time != start_time:
        return False
    for name, old in before.ops.items():
        op = now.get(name)
        if op is None:
            if old.samples or old.sum:
                return False
        elif op.samples < old.samples or op.sum < old.sum:
            return False
    return True


def _growth(before: _Part, now: Ops) -> int:
    return sum(op.samples + op.sum for op in now.values()) - sum(
        op.samples + op.sum for op in before.ops.values()
    )


@dataclass(slots=True)
class _Part:
    """One job entry of one target as last read (an id listed both quoted and unquoted has
    two entries there)."""

    start_time: float | None
    ops: Ops


@dataclass(slots=True)
class _ServerJob:
    """One job's sum over a component's targets, with what makes it never go down."""

    start_time: float | None  # as first seen: a changed one would read as a restart
    units: dict[str, str]  # every operation the job listed, in first-seen order, its unit
    retired: dict[str, list[int]]  # operation -> [samples, sum] of parts expired or reset
    parts: dict[str, list[_Part]]  # target -> its entries as last read

    def retire(self, parts: list[_Part]) -> None:
        for part in parts:
            for name, op in part.ops.items():
                counted = self.retired.setdefault(name, [0, 0])
                counted[0] += op.samples
                counted[1] += op.sum


class ServerSums(Generic[K]):
    """Per job, counters summed over entries that never go down while the job lives:
    ``--jobstats.aggregate=server`` sums a component's targets (key: the component); without
    it, the quoted/unquoted twins of one target (key: the target, see ``_merge_twins``).

    Lustre drops an idle job's entry from one target (``job_cleanup_interval``) while the job
    still has entries on others, and starts a new entry from 0 if the job comes back there. A
    plain sum then falls, and Prometheus counts the whole remaining value again as after a
    restart. So each part (one entry of one target) keeps its last counters: when it is gone
    or was reset, they stay in the job's sum as ``retired``, and what is listed now is added
    on top. A target that could not be read keeps its parts as they were (not listed, not
    gone). A job is forgotten, and its series go away, once no part of it is left.
    """

    def __init__(self) -> None:
        self._jobs: dict[K, dict[str, _ServerJob]] = {}  # key -> jobid -> sum

    def components(self) -> list[K]:
        """Keys with jobs still held (e.g. a component whose targets are all unreadable)."""
        return list(self._jobs)

    def held(self, key: K) -> Collection[str]:
        """The job ids held under ``key``."""
        return self._jobs.get(key, {}).keys()

    def forget_except(self, keep: Iterable[K]) -> None:
        """Drop the keys not in ``keep`` (targets that no longer exist)."""
        wanted = set(keep)
        for key in [key for key in self._jobs if key not in wanted]:
            del self._jobs[key]

    def update(
        self, key: K, targets: list[tuple[str, list[JobEntry]]], unread: set[str]
    ) -> list[JobEntry]:
        """One entry per job listed by ``targets`` (target name, its entries) this sample;
        ``unread`` are the key's targets that could not be read."""
        listed: dict[str, dict[str, list[JobEntry]]] = {}  # jobid -> target -> entries
        for target, entries in targets:
            for entry in entries:
                listed.setdefault(entry.jobid, {}).setdefault(target, []).append(entry)
        before = self._jobs.get(key, {})
        jobs: dict[str, _ServerJob] = {}
        summed: list[JobEntry] = []
        for jobid in [*listed, *(jobid for jobid in before if jobid not in listed)]:
            by_target = listed.get(jobid, {})
            job = before.get(jobid)
            if job is None:
                job = _new_server_job(by_target)
            _update_parts(job, by_target, unread)
            if job.parts:
                jobs[jobid] = job
            if by_target:
                summed.append(_server_entry(job, by_target))
        if jobs:
            self._jobs[key] = jobs
        else:
            self._jobs.pop(key, None)
        return summed


def _new_server_job(by_target: dict[str, list[JobEntry]]) -> _ServerJob:
    start: float | None = None
    for entries in by_target.values():
        for entry in entries:
            start = _latest(start, entry.start_time, min)
    return _ServerJob(start, {}, {}, {})


def _update_parts(job: _ServerJob, by_target: dict[str, list[JobEntry]], unread: set[str]) -> None:
    """Retire the parts that are gone or were reset; the listed entries become the parts."""
    for target in [target for target in job.parts if target not in by_target]:
        if target not in unread:
            job.retire(job.parts.pop(target))
    for target, entries in by_target.items():
        left = job.parts.get(target, [])
        parts = []
        for entry in entries:
            same = [part for part in left if _continues(part, entry.start_time, entry.ops)]
            if len(same) > 1:  # twins without start_time: the closest one
                same.sort(key=lambda part: _growth(part, entry.ops))
            if same:
                left.remove(same[0])
            parts.append(_Part(entry.start_time, entry.ops))
            if not entry.ops.keys() <= job.units.keys():
                for name, op in entry.ops.items():
                    job.units.setdefault(name, op.unit)
        job.retire(left)
        job.parts[target] = parts


def _server_entry(job: _ServerJob, by_target: dict[str, list[JobEntry]]) -> JobEntry:
    """The job's entry: retired counters plus every part's; min/max of the listed entries."""
    entries = [entry for listed in by_target.values() for entry in listed]
    snapshot: float | None = None
    elapsed: float | None = None
    for entry in entries:
        snapshot = _latest(snapshot, entry.snapshot_time, max)
        elapsed = _latest(elapsed, entry.elapsed_time, max)
    first = entries[0]
    if len(entries) == 1 and len(job.parts) == 1 and not job.retired:
        if len(first.ops) == len(job.units):  # the job's only entry: its numbers are the sum
            return JobEntry(first.jobid, snapshot, job.start_time, elapsed, first.ops)
    totals = {name: [0, 0] for name in job.units}
    for name, (samples, total) in job.retired.items():
        totals[name] = [samples, total]
    for parts in job.parts.values():
        for part in parts:
            for name, op in part.ops.items():
                counted = totals[name]
                counted[0] += op.samples
                counted[1] += op.sum
    lows: dict[str, int] = {}  # over the entries that have samples
    highs: dict[str, int] = {}
    for entry in entries:
        for name, op in entry.ops.items():
            if op.samples:
                lows[name] = min(lows.get(name, op.min), op.min)
            highs[name] = max(highs.get(name, 0), op.max)
    ops = {}
    for name, unit in job.units.items():
        samples, total = totals[name]
        ops[name] = OpStats(
            min(samples, U64_MAX),
            unit,
            lows.get(name, 0),
            highs.get(name, 0),
            min(total, U64_MAX),
            None,
        )
    return JobEntry(first.jobid, snapshot, job.start_time, elapsed, ops)


def _activity(entry: JobEntry) -> int:
    return sum(op.samples for op in entry.ops.values())


def series_per_job(
    entry: JobEntry,
    rates: frozenset[str],
    operations: frozenset[str] | None,
    deny: frozenset[str] = frozenset(),
) -> int:
    """How many per-job series this entry gives (to count what a limit drops)."""
    count = 0
    for name, op in entry.ops.items():
        if (operations is not None and name not in operations) or name in deny:
            continue
        if name in BYTE_OPERATIONS:
            count += 4 + (name in rates)
        else:
            count += (2 if op.unit == "usecs" else 1) + ("operations" in rates)
    return count


@dataclass
class Settings:
    interval: float
    rates: frozenset[str]  # a subset of RATE_KINDS
    operations: frozenset[str] | None
    max_jobs: int
    deny: frozenset[str] = frozenset()
    top_jobs: int = 0
    aggregate: str = "target"  # or "server"
    max_series: int = 0

    @property
    def filters_operations(self) -> bool:
        return self.operations is not None or bool(self.deny)


@register
class JobstatsCollector(Collector):
    name = "jobstats"
    description = "Lustre jobstats per job on MDT/OST servers"
    enabled_by_default = True

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        add_flag(
            parser,
            "--jobstats.source",
            choices=["lctl", "procfs", "file"],
            default="lctl",
            help="where job_stats come from",
        )
        add_flag(parser, "--jobstats.lctl-path", default="lctl", help="lctl binary")
        add_flag(
            parser,
            "--jobstats.timeout",
            type=_seconds,
            default=10.0,
            help="seconds before a hung lctl is killed and its targets marked down",
        )
        add_flag(
            parser,
            "--jobstats.path",
            default=None,
            help="file or glob with lctl get_param output, for --jobstats.source=file",
        )
        add_flag(
            parser,
            "--jobstats.interval",
            type=_seconds,
            default=10.0,
            help="seconds between background samples; 0 samples on each scrape",
        )
        add_flag(
            parser,
            "--jobstats.rates",
            type=rate_kinds,
            default=frozenset(RATE_KINDS),
            help="live per-job rates to export: all, none, or a comma-separated list of "
            "read_bytes, write_bytes (one series per job each), operations (one series per "
            "operation per job: the costly one) (default all)",
        )
        parser.add_argument(
            "--no-jobstats.rates",
            dest="jobstats_rates",
            action="store_const",
            const=frozenset(),
            default=argparse.SUPPRESS,
            help="same as --jobstats.rates=none",
        )
        add_flag(
            parser,
            "--jobstats.max-output-bytes",
            type=bytes_flag,
            default=DEFAULT_MAX_BYTES,
            help="most bytes read from lctl (and from each job_stats file) per sample; past "
            "it the read is stopped and the source marked down; suffixes K, M, G (powers of "
            "1024) (default 512M)",
        )
        add_flag(
            parser,
            "--jobstats.operations",
            type=_operations,
            default=None,
            help="comma-separated allowlist of operations, e.g. read_bytes,write_bytes,open "
            "(default all)",
        )
        add_flag(
            parser,
            "--jobstats.operations-deny",
            type=_operations,
            default=None,
            help="comma-separated denylist of operations, applied after the allowlist, e.g. "
            "statfs,get_info,set_info,quotactl (default none)",
        )
        add_flag(
            parser,
            "--jobstats.top-jobs",
            type=count_flag,
            default=0,
            help="per target, keep the series of the N jobs that moved the most bytes plus "
            'operations since the previous sample and sum all others into jobid="other"; '
            "0 = every job",
        )
        add_flag(
            parser,
            "--jobstats.aggregate",
            choices=["target", "server"],
            default="target",
            help="target: per-job series per MDT/OST; server: per job summed over this "
            "server's targets of each component, without the target label",
        )
        add_flag(
            parser,
            "--jobstats.max-series",
            type=count_flag,
            default=0,
            help="at most this many per-job series per sample (whole jobs, most active first); "
            "what is cut shows in lustre_jobstats_series_cut; 0 = no cap",
        )
        add_flag(
            parser,
            "--jobstats.max-jobs",
            type=count_flag,
            default=0,
            help="export at most this many jobs per target, most active first; 0 = no cap",
        )
        add_flag(
            parser,
            "--jobstats.jobid-pattern",
            type=_regex,
            default=None,
            help=r"regex with named groups added as labels, e.g. "
            r"'(?P<slurm_job>\d+):(?P<uid>\d+):(?P<host>.+)'",
        )

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__(options)
        _big_blocks_straight_from_the_os()
        self.source = self._make_source(options)
        self.settings = Settings(
            options.jobstats_interval,
            options.jobstats_rates,
            options.jobstats_operations,
            options.jobstats_max_jobs,
            options.jobstats_operations_deny or frozenset(),
            options.jobstats_top_jobs,
            options.jobstats_aggregate,
            options.jobstats_max_series,
        )
        self.labels = LabelCache(JobIdPattern(options.jobstats_jobid_pattern))
        self.layouts = Layouts(self.labels, self.settings.operations, self.settings.deny)
        self.tracker = RateTracker()
        self.server_sums: ServerSums[str] = ServerSums()  # per component
        # per target: ids listed both quoted and unquoted
        self.twin_sums: ServerSums[TargetKey] = ServerSums()
        self.top_jobs = TopJobs(self.settings.top_jobs) if self.settings.top_jobs else None
        self._series_left = 0  # --jobstats.max-series: what the sample in progress may add
        self._series_cut = 0
        self._failures: dict[tuple[str, str], int] = defaultdict(int)  # (source, reason)
        if isinstance(self.source, LctlSource):  # from 0, so the first failure is an increase
            for reason in ("start", "exit", "timeout", "output_limit"):
                self._failures[("lctl", reason)] = 0
        self._parse_errors: dict[TargetKey, int] = defaultdict(int)
        self._dropped: dict[tuple[str, str, str], int] = defaultdict(int)
        self._known: dict[str, list[TargetKey]] = {}  # origin -> targets last read from it
        self._problems = ProblemLog(log)
        self._snapshot: Compressed | None = None  # the last complete exposition
        self._generation = 0
        self._sample_lock = threading.Lock()
        self._sampling_since: float | None = None  # monotonic start of the sample in progress
        # with --jobstats.interval=0: a sample running longer is stuck (a hung procfs read)
        self._stuck_after = stale_after(0, options.jobstats_timeout)
        self._worker: SamplerProcess | None = None

    @staticmethod
    def _make_source(options: argparse.Namespace) -> Source:
        limit = options.jobstats_max_output_bytes
        if options.jobstats_source == "procfs":
            return ProcfsSource(options.path_procfs, limit)
        if options.jobstats_source == "file":
            if not options.jobstats_path:
                raise ValueError("--jobstats.source=file needs --jobstats.path")
            return FileSource(options.jobstats_path, limit)
        return LctlSource(options.jobstats_lctl_path, options.jobstats_timeout, limit)

    # ------------------------------------------------------------------ scheduling
    def start(self) -> None:
        if self.settings.interval > 0 and self._worker is None:
            self._worker = SamplerProcess(self.options)
            self._worker.start()

    def stop(self) -> None:
        self.source.close()  # kills a running lctl at once (exporter SIGTERM)
        if self._worker is not None:
            self._worker.stop()  # the child kills its own lctl on SIGTERM
            self._worker = None

    def exposition(self) -> bytes:
        return b"".join(self.exposition_before(None).chunks())

    def exposition_before(self, scrape_timeout: float | None) -> Compressed:
        """The last complete sample; with ``--jobstats.interval=0`` a new one, taken within
        ``scrape_timeout`` seconds (the scraper's own, default 10 s) less a margin kept for
        parsing and rendering: a hung lctl is killed in time and its targets shown down."""
        budget = DEFAULT_SCRAPE_TIMEOUT if scrape_timeout is None else scrape_timeout
        deadline = time.monotonic() + budget * (1 - SCRAPE_MARGIN)
        if self._worker is not None:
            return self._worker.latest(deadline)
        arrived = self._generation
        self._raise_if_stuck()  # at once: no wait for what is not coming
        if not self._sample_lock.acquire(timeout=max(deadline - time.monotonic(), 0)):
            self._raise_if_stuck()
            if self._snapshot is None:  # a big sample in progress outlived this scrape
                raise TimeoutError("jobstats: the sample in progress outlived the scrape")
            return self._snapshot  # a big sample in progress: the last one is still current
        try:
            if self._generation != arrived and self._snapshot is not None:
                return self._snapshot  # another scrape sampled while we waited
            self._sample_locked(deadline)
            snapshot = self._snapshot
            assert snapshot is not None  # a sample that returns has set it
            return snapshot
        finally:
            self._sample_lock.release()

    def _raise_if_stuck(self) -> None:
        """A sample that runs far longer than a read may (lctl is killed at its timeout; a
        procfs or file read has none) is stuck: the last sample is no longer current. The
        thread stuck in the read cannot be stopped; scrapes fail until it returns."""
        since = self._sampling_since
        if since is not None and time.monotonic() - since > self._stuck_after:
            raise TimeoutError(
                f"jobstats: the sample in progress has run for over {self._stuck_after:g} s:"
                " a read is stuck"
            )

    def sample(self, deadline: float | None = None) -> bytes:
        """Take one sample now, make it the snapshot every scrape returns, return its text."""
        with self._sample_lock:
            return self._sample_locked(deadline)

    def _sample_locked(self, deadline: float | None = None) -> bytes:
        self._sampling_since = time.monotonic()
        try:
            return self._sample_now(deadline)
        finally:
            self._sampling_since = None

    def _sample_now(self, deadline: float | None) -> bytes:
        started = time.perf_counter()
        if self._snapshot is not None and self._snapshot.length > KEEP_RAW_BYTES:
            # Never two big expositions in memory at once: a scrape that sampled has the
            # previous one already, and concurrent ones wait for the new one.
            self._snapshot = None
        buffer = io.BytesIO()
        try:
            self._collect(time.time(), buffer, deadline)
        except Exception:  # noqa: BLE001 - a bug here must not take the scrape down
            log.exception("jobstats sample failed")
            buffer = io.BytesIO()
            self._parse_errors[("", "")] += 1
        duration = GaugeMetricFamily(
            "lustre_jobstats_scrape_duration_seconds",
            "Time to read, parse and render the last jobstats sample.",
            value=time.perf_counter() - started,
        )
        buffer.write(render_families([duration]))
        text = buffer.getvalue()  # shares the buffer's memory, no copy
        del buffer
        # Scrapes switch to the new sample whole, in one step. Sampling on scrape keeps the
        # text and compresses it for the first gzip scrape only; a background sample goes to
        # the exporter compressed (and without its text when big).
        if self.settings.interval == 0:
            self._snapshot = Compressed.lazy(text)
        else:
            self._snapshot = Compressed.of(text)
        self._generation += 1
        return text

    @property
    def snapshot(self) -> Compressed | None:
        """The last complete sample, compressed (None before the first)."""
        return self._snapshot

    # ------------------------------------------------------------------ one sample
    def _collect(self, wall_clock: float, buffer: io.BytesIO, deadline: float | None) -> None:
        """Read, parse and pack one target at a time (its text and records are freed before
        the next), then write the families from the packed targets."""
        up = GaugeMetricFamily(
            "lustre_jobstats_up",
            "Whether the target's job_stats could be read (per source when nothing was read).",
            labels=["component", "target", "source"],
        )
        jobs_gauge = GaugeMetricFamily(
            "lustre_jobstats_jobs",
            "Job entries the target listed in the last sample.",
            labels=["component", "target"],
        )
        blocks: list[TargetBlock] = []
        by_component: dict[str, list[tuple[str, list[JobEntry]]]] = {}  # aggregate=server
        self._series_left = self.settings.max_series
        self._series_cut = 0
        present: list[TargetKey] = []
        read_from: dict[str, list[TargetKey]] = {}  # origin -> its targets in this sample
        failed: list[str] = []  # sources not read: their targets keep their history
        for raw in self.source.read(deadline):
            origin, text = raw.origin, raw.text
            raw.text = None  # ``text`` is the only reference left: freed once parsed
            if text is None:
                self._warn(raw.error or f"{origin}: unreadable")
                self._failures[(origin, raw.reason or "read")] += 1
                failed.append(origin)
                continue
            errors: list[str] = []
            read_here = read_from.setdefault(origin, [])
            targets = iter_text(text, origin, errors, raw.component, raw.target, bare=raw.bare)
            for target in targets:
                key = (target.component, target.target)
                self._count_errors(key, target)
                if target.sections > 1:
                    self._warn(
                        f"{origin}: {key[0]} {key[1]} listed {target.sections} times; "
                        "the jobs of every listing are kept"
                    )
                if key in present:
                    self._warn(
                        f"{origin}: {key[0]} {key[1]} already read from another source; ignored"
                    )
                    self._parse_errors[key] += 1
                    continue
                present.append(key)
                read_here.append(key)
                up.add_metric([*key, origin], 1)
                jobs_gauge.add_metric(list(key), len(target.jobs))
                if self.settings.aggregate == "server":
                    by_component.setdefault(key[0], []).append((key[1], target.jobs))
                    target.jobs = []
                else:
                    blocks.append(self._pack(key, target.jobs, wall_clock))
                    target.jobs = []
            del text
            for message in errors:
                self._warn(message)
                self._parse_errors[("", "")] += 1
        unread: list[TargetKey] = []
        for origin in failed:
            unread += self._known.get(origin, [])
            for key in self._known.get(origin) or [("", "")]:
                up.add_metric([*key, origin], 0)
        for origin, keys in read_from.items():
            self._known[origin] = keys
            if not keys:
                up.add_metric(["", "", origin], 0)
        if self.settings.aggregate == "server":
            self._sum_servers(by_component, unread, blocks, wall_clock)
        summed = {*by_component, *self.server_sums.components()}
        kept = present + unread + [(component, "") for component in summed]
        self.tracker.forget_except(kept)
        self.labels.forget_except(kept)
        self.twin_sums.forget_except(kept)
        if self.top_jobs is not None:
            self.top_jobs.forget_except(kept)
        render_blocks(blocks, buffer, self.settings.rates)
        del blocks
        families = [up, jobs_gauge, *self._health_families()]
        if self.settings.max_series:
            families.append(
                GaugeMetricFamily(
                    "lustre_jobstats_series_cut",
                    "Per-job series left out of the last sample by --jobstats.max-series.",
                    value=self._series_cut,
                )
            )
        buffer.write(render_families(families))

    def _sum_servers(
        self,
        by_component: dict[str, list[tuple[str, list[JobEntry]]]],
        unread: list[TargetKey],
        blocks: list[TargetBlock],
        wall_clock: float,
    ) -> None:
        """``--jobstats.aggregate=server``: one block per component read, of its jobs' sums;
        a component whose targets could not be read keeps its sums for when they can."""
        unread_by: dict[str, set[str]] = defaultdict(set)
        for component, target in unread:
            unread_by[component].add(target)
        for component in sorted(set(by_component) | set(self.server_sums.components())):
            jobs = self.server_sums.update(
                component, by_component.get(component, []), unread_by[component]
            )
            if component in by_component:
                blocks.append(self._pack((component, ""), jobs, wall_clock))

    def _warn(self, message: str) -> None:
        """Log a problem once at WARNING (the same record is seen at every sample)."""
        self._problems.warn(f"jobstats: {message}")

    def _count_errors(self, key: TargetKey, target: Target) -> None:
        self._parse_errors[key] += target.malformed  # every target has the counter, from 0
        for message in target.errors:
            self._warn(message)

    def _pack(self, key: TargetKey, jobs: list[JobEntry], wall_clock: float) -> TargetBlock:
        """Merge, rates, limits, then the packed form the exposition is written from."""
        jobs = self._merge_twins(key, jobs)
        rates = self.tracker.update(key, jobs, wall_clock) if self.settings.rates else None
        operations, deny = self.settings.operations, self.settings.deny
        for reason, active in (
            ("operations", self.settings.filters_operations),
            ("max_jobs", self.settings.max_jobs),
            ("max_series", self.settings.max_series),
        ):
            if active:  # a limit in force is counted from 0, so its first cut is an increase
                self._dropped[(*key, reason)] += 0
        if self.settings.filters_operations:
            filtered = sum(
                series_per_job(entry, self.settings.rates, None)
                - series_per_job(entry, self.settings.rates, operations, deny)
                for entry in jobs
            )
            if filtered:
                self._dropped[(*key, "operations")] += filtered
        limit = self.settings.max_jobs
        if limit and len(jobs) > limit:
            kept = heapq.nlargest(limit, jobs, key=_activity)
            kept_ids = {entry.jobid for entry in kept}
            self._dropped[(*key, "max_jobs")] += sum(
                series_per_job(entry, self.settings.rates, operations, deny)
                for entry in jobs
                if entry.jobid not in kept_ids
            )
            jobs = [entry for entry in jobs if entry.jobid in kept_ids]
        if self.top_jobs is not None:
            jobs, rates = self.top_jobs.fold(key, jobs, rates)
        if self.settings.max_series:
            jobs = self._cap_series(key, jobs, rates)
        labels = self.labels.for_target(key, [entry.jobid for entry in jobs])
        return pack_target(jobs, labels, self.layouts, rates)

    def _merge_twins(self, key: TargetKey, jobs: list[JobEntry]) -> list[JobEntry]:
        """One entry per decoded job id: Lustre can list an id both quoted and unquoted. A
        plain sum of the twins falls when one expires, so they are summed by ServerSums,
        which holds such a job while it is listed here; every other job passes as it is."""
        held = self.twin_sums.held(key)
        seen: set[str] = set()
        twins: set[str] = set()
        for entry in jobs:
            if entry.jobid in seen or entry.jobid in held:
                twins.add(entry.jobid)
            seen.add(entry.jobid)
        if not twins and not held:
            return jobs
        listed = [entry for entry in jobs if entry.jobid in twins]
        summed = {
            entry.jobid: entry for entry in self.twin_sums.update(key, [(key[1], listed)], set())
        }
        merged = []
        for entry in jobs:
            if entry.jobid not in twins:
                merged.append(entry)
            elif entry.jobid in summed:  # the first of the twins stands for both
                merged.append(summed.pop(entry.jobid))
        return merged

    def _cap_series(
        self, key: TargetKey, jobs: list[JobEntry], rates: dict | None
    ) -> list[JobEntry]:
        """``--jobstats.max-series``: whole jobs, most active first, while the sample's
        per-job series stay within the cap; the rest counted (reason ``max_series``)."""
        kept, cut = [], 0
        for entry in sorted(jobs, key=lambda entry: (-_activity(entry), entry.jobid)):
            series = job_series(
                self.layouts.of(entry), rates is not None and entry.jobid in rates,
                self.settings.rates,
            )  # fmt: skip
            if series <= self._series_left:
                self._series_left -= series
                kept.append(entry)
            else:
                self._series_left = 0  # jobs are cut by activity, never a smaller one after
                cut += series
        if cut:
            self._dropped[(*key, "max_series")] += cut
            self._series_cut += cut
        return kept

    def _health_families(self) -> list:
        errors = CounterMetricFamily(
            "lustre_jobstats_parse_errors",
            "Job records (or texts) that could not be parsed and were skipped.",
            labels=["component", "target"],
        )
        for (component, target), count in sorted(self._parse_errors.items()):
            errors.add_metric([component, target], count)
        failures = CounterMetricFamily(
            "lustre_jobstats_source_failures",
            "Reads of a source that failed, so its targets were reported down: reason is "
            "start (lctl could not run), exit (lctl exited non-zero, whatever it printed), "
            "timeout, output_limit (--jobstats.max-output-bytes) or read (file/procfs).",
            labels=["source", "reason"],
        )
        for (source, reason), count in sorted(self._failures.items()):
            failures.add_metric([source, reason], count)
        dropped = CounterMetricFamily(
            "lustre_jobstats_dropped_series",
            "Per-job series left out by --jobstats.max-jobs (reason=max_jobs), "
            "--jobstats.operations or --jobstats.operations-deny (reason=operations), "
            "or --jobstats.max-series (reason=max_series).",
            labels=["component", "target", "reason"],
        )
        for (component, target, reason), count in sorted(self._dropped.items()):
            dropped.add_metric([component, target, reason], count)
        return [errors, failures, dropped]
