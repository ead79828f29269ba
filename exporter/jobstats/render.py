"""Fast text exposition (format 0.0.4) of the per-job series: the bulk of every scrape.

prometheus-client's generic writer costs about 7 us per sample, more than the whole scrape
budget at 100k+ samples. Here every line is one f-string over label text that was escaped
once per job by prometheus-client itself (``escape_label_sets``) and is reused while the job
lives. The tests parse this output and prometheus-client's with ``prometheus_client.parser``
and compare them.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily

from exporter.exposition import render_families
from exporter.jobstats.parser import JobEntry
from hpcmon.jobid import JobIdPattern

JOB_LABELS = ("component", "target", "jobid")
USECS_PER_SECOND = 1_000_000

# (name, type, help) of the read/write families: samples, sum, min, max of the operation.
READ_WRITE_FAMILIES = {
    "read_bytes": (
        ("lustre_job_read_samples_total", "counter", "Read operations of the job."),
        ("lustre_job_read_bytes_total", "counter", "Bytes read by the job."),
        ("lustre_job_read_minimum_size_bytes", "gauge", "Smallest read of the job."),
        ("lustre_job_read_maximum_size_bytes", "gauge", "Largest read of the job."),
    ),
    "write_bytes": (
        ("lustre_job_write_samples_total", "counter", "Write operations of the job."),
        ("lustre_job_write_bytes_total", "counter", "Bytes written by the job."),
        ("lustre_job_write_minimum_size_bytes", "gauge", "Smallest write of the job."),
        ("lustre_job_write_maximum_size_bytes", "gauge", "Largest write of the job."),
    ),
}
STATS = ("lustre_job_stats_total", "counter",
         "Operations of the job (samples of every operation except read_bytes/write_bytes).")
LATENCY = ("lustre_job_latency_seconds_total", "counter",
           "Total time the target spent on the job's operations (Lustre 2.14+, unit usecs).")
READ_RATE = ("lustre_job_read_bytes_per_second", "gauge",
             "Bytes read per second between the last two samples.")
WRITE_RATE = ("lustre_job_write_bytes_per_second", "gauge",
              "Bytes written per second between the last two samples.")
OPS_RATE = ("lustre_job_operations_per_second", "gauge",
            "Operations per second between the last two samples.")

RateTable = dict[str, tuple[tuple[str, ...], tuple[float, ...]]]


def escape_label_sets(names: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """``a="x",b="y"`` for each row, escaped by prometheus-client's own text writer.

    Labels come out in prometheus-client's order (sorted by name); order has no meaning.
    """
    family = GaugeMetricFamily("x", "", labels=list(names))
    count = 0
    for row in rows:
        family.add_metric(list(row), 0)
        count += 1
    if count == 0:
        return []
    lines = render_families([family]).decode("utf-8").split("\n")
    return [line[2:line.rindex("}")] for line in lines if line.startswith("x{")]


class LabelCache:
    """Escaped label text per (component, target, jobid), kept while the job is present."""

    def __init__(self, pattern: JobIdPattern | None = None) -> None:
        self.pattern = pattern or JobIdPattern(None)
        clash = set(self.pattern.names) & {*JOB_LABELS, "operation"}
        if clash:
            raise ValueError(f"--jobstats.jobid-pattern: group name(s) {sorted(clash)} clash "
                             "with the exporter's own labels")
        self._jobs: dict[tuple[str, str, str], str] = {}
        self._operations: dict[str, str] = {}

    def refresh(self, keys: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str], str]:
        """Label text for exactly these jobs: cached ones reused, new ones escaped in a batch."""
        fresh: dict[tuple[str, str, str], str] = {}
        missing: list[tuple[str, str, str]] = []
        old = self._jobs
        for key in keys:
            text = old.get(key)
            if text is None:
                missing.append(key)
            else:
                fresh[key] = text
        if missing:
            names = (*JOB_LABELS, *self.pattern.names)
            rows = ((*key, *self.pattern.labels(key[2])) for key in missing)
            for key, text in zip(missing, escape_label_sets(names, rows), strict=True):
                fresh[key] = text
        self._jobs = fresh
        return fresh

    def operation(self, name: str) -> str:
        """``,operation="open"`` (escaped once by prometheus-client)."""
        text = self._operations.get(name)
        if text is None:
            text = "," + escape_label_sets(["operation"], [[name]])[0]
            self._operations[name] = text
        return text


@dataclass(slots=True)
class TargetSeries:
    """What one target contributes: its jobs with their label text, and their rates."""

    jobs: list[tuple[str, JobEntry]]  # (label text, entry)
    rates: RateTable


class _Writer:
    """Families written one after another into one growing buffer.

    Lines are encoded and appended in chunks as they are made, so the only full-size object is
    the buffer itself (a whole family as a list of strings would double the memory).
    """

    def __init__(self, buffer: io.BytesIO) -> None:
        self.buffer = buffer
        self.lines: list[str] = []
        self._header = b""

    def begin(self, spec: tuple[str, str, str]) -> list[str]:
        name, kind, help_text = spec
        self._header = f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n".encode()
        self.lines = []
        return self.lines

    def flush(self) -> None:
        """Write what has accumulated; the header only once the family has a sample."""
        if self.lines:
            if self._header:
                self.buffer.write(self._header)
                self._header = b""
            self.buffer.write("".join(self.lines).encode("utf-8"))
            self.lines.clear()


def render_jobs(targets: Sequence[TargetSeries], labels: LabelCache, buffer: io.BytesIO,
                operations: frozenset[str] | None = None) -> None:
    """Write every per-job family to ``buffer``; ``operations`` is an optional allowlist."""
    out = _Writer(buffer)
    allowed = (lambda name: True) if operations is None else operations.__contains__
    for op_name, families in READ_WRITE_FAMILIES.items():
        if not allowed(op_name):
            continue
        for spec, field in zip(families, ("samples", "sum", "min", "max"), strict=True):
            head = spec[0] + "{"
            lines = out.begin(spec)
            for target in targets:
                for text, entry in target.jobs:
                    op = entry.ops.get(op_name)
                    if op is not None:
                        lines.append(f"{head}{text}}} {getattr(op, field)}\n")
                out.flush()

    # Label text after the job's labels, per operation name; None = not exported here.
    op_label: dict[str, str | None] = {}

    def label_for(op_name: str) -> str | None:
        if op_name not in op_label:
            wanted = op_name not in READ_WRITE_FAMILIES and allowed(op_name)
            op_label[op_name] = labels.operation(op_name) + "}" if wanted else None
        return op_label[op_name]

    lines = out.begin(STATS)
    for target in targets:
        for text, entry in target.jobs:
            head = "lustre_job_stats_total{" + text
            for op_name, op in entry.ops.items():
                tail = op_label.get(op_name) or label_for(op_name)
                if tail is not None:
                    lines.append(f"{head}{tail} {op.samples}\n")
        out.flush()

    lines = out.begin(LATENCY)
    for target in targets:
        for text, entry in target.jobs:
            head = "lustre_job_latency_seconds_total{" + text
            for op_name, op in entry.ops.items():
                tail = op_label.get(op_name) or label_for(op_name)
                if tail is not None and op.unit == "usecs":
                    seconds = repr(op.sum / USECS_PER_SECOND) if op.sum else "0.0"
                    lines.append(f"{head}{tail} {seconds}\n")
        out.flush()

    for spec, op_name in ((READ_RATE, "read_bytes"), (WRITE_RATE, "write_bytes")):
        if not allowed(op_name):
            continue
        head = spec[0] + "{"
        lines = out.begin(spec)
        for target in targets:
            for text, entry in target.jobs:
                found = target.rates.get(entry.jobid)
                if found is not None and op_name in found[0]:
                    value = found[1][found[0].index(op_name)]
                    lines.append(f"{head}{text}}} {repr(value) if value else '0.0'}\n")
            out.flush()

    lines = out.begin(OPS_RATE)
    for target in targets:
        for text, entry in target.jobs:
            found = target.rates.get(entry.jobid)
            if found is None:
                continue
            head = "lustre_job_operations_per_second{" + text
            for op_name, value in zip(*found, strict=True):
                tail = op_label.get(op_name) or label_for(op_name)
                if tail is not None:
                    lines.append(f"{head}{tail} {repr(value) if value else '0.0'}\n")
        out.flush()
