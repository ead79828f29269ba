"""Fast text exposition (format 0.0.4) of the per-job series: the bulk of every scrape.

prometheus-client's generic writer costs about 7 us per sample, more than the whole scrape
budget at millions of samples. Here a target's parsed jobs are first packed into a
``TargetBlock`` (numbers in flat arrays, label text escaped once per job by prometheus-client
itself and reused while the job lives), so the parsed records can be freed target by target.
The families are then written one after the other from the blocks: each job is one
``str.format`` call per family, over a template made once per distinct set of operations. The
tests parse this output and prometheus-client's with ``prometheus_client.parser`` and compare.
"""

from __future__ import annotations

import io
from array import array
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress

from hpcmon.common.jobid import JobIdPattern
from hpcmon.exporter.exposition import escape_label_sets
from hpcmon.exporter.jobstats.parser import BYTE_OPERATIONS, JobEntry, make_room

JOB_LABELS = ("component", "target", "jobid")
USECS_PER_SECOND = 1_000_000

# (name, type, help) of the read/write families: samples, sum, min, max of the operation.
SIZE_FAMILIES = (
    ("lustre_job_read_samples_total", "counter", "Read operations of the job."),
    ("lustre_job_read_bytes_total", "counter", "Bytes read by the job."),
    ("lustre_job_read_minimum_size_bytes", "gauge", "Smallest read of the job."),
    ("lustre_job_read_maximum_size_bytes", "gauge", "Largest read of the job."),
    ("lustre_job_write_samples_total", "counter", "Write operations of the job."),
    ("lustre_job_write_bytes_total", "counter", "Bytes written by the job."),
    ("lustre_job_write_minimum_size_bytes", "gauge", "Smallest write of the job."),
    ("lustre_job_write_maximum_size_bytes", "gauge", "Largest write of the job."),
)
SIZES_PER_JOB = len(SIZE_FAMILIES)  # samples, sum, min, max of read_bytes then write_bytes
STATS = (
    "lustre_job_stats_total",
    "counter",
    "Operations of the job (samples of every operation except read_bytes/write_bytes).",
)
LATENCY = (
    "lustre_job_latency_seconds_total",
    "counter",
    "Total time the target spent on the job's operations (Lustre 2.14+, unit usecs).",
)
READ_RATE = (
    "lustre_job_read_bytes_per_second",
    "gauge",
    "Bytes read per second between the last two samples.",
)
WRITE_RATE = (
    "lustre_job_write_bytes_per_second",
    "gauge",
    "Bytes written per second between the last two samples.",
)
OPS_RATE = (
    "lustre_job_operations_per_second",
    "gauge",
    "Operations per second between the last two samples.",
)


class LabelCache:
    """Escaped label text per job of each target, kept while the job is present."""

    def __init__(self, pattern: JobIdPattern | None = None) -> None:
        self.pattern = pattern or JobIdPattern(None)
        clash = set(self.pattern.names) & {*JOB_LABELS, "operation"}
        if clash:
            raise ValueError(
                f"--jobstats.jobid-pattern: group name(s) {sorted(clash)} clash "
                "with the exporter's own labels"
            )
        self._targets: dict[tuple[str, str], dict[str, str]] = {}
        self._operations: dict[str, str] = {}

    def for_target(self, key: tuple[str, str], jobids: Sequence[str]) -> list[str]:
        """Label text of these jobs of one target; jobs no longer listed are forgotten."""
        old = self._targets.get(key, {})
        fresh: dict[str, str] = {}
        missing = []
        for jobid in jobids:
            text = old.get(jobid)
            if text is None:
                missing.append(jobid)
            else:
                fresh[jobid] = text
        if missing:  # the target's labels once, then only what differs per job
            # --jobstats.aggregate=server: no target, so no target label
            names = ("component", "target") if key[1] else ("component",)
            prefix = escape_label_sets(names, [key[: len(names)]])[0] + ","
            names = ("jobid", *self.pattern.names)
            rows = ((jobid, *self.pattern.labels(jobid)) for jobid in missing)
            fresh.update(
                zip(
                    missing, [prefix + text for text in escape_label_sets(names, rows)], strict=True
                )
            )
        self._targets[key] = fresh
        return [fresh[jobid] for jobid in jobids]

    def forget_except(self, keep: Iterable[tuple[str, str]]) -> None:
        wanted = set(keep)
        for key in [key for key in self._targets if key not in wanted]:
            del self._targets[key]

    def operation(self, name: str) -> str:
        """``,operation="open"`` (escaped once by prometheus-client)."""
        text = self._operations.get(name)
        if text is None:
            text = "," + escape_label_sets(["operation"], [[name]])[0]
            make_room(self._operations)
            self._operations[name] = text
        return text


@dataclass(slots=True, eq=False)
class Layout:
    """The operations of a job, in order, and how each family writes them: shared by every job
    with the same operations. Templates are ``str.format`` text: ``{0}`` is the job's label
    text, ``{k+1}`` the value of its k-th operation; None when the family has no series."""

    names: tuple[str, ...]
    read: int  # index of read_bytes, or -1
    write: int
    stats: str | None
    latency: str | None
    rates: str | None
    stats_count: int  # series of the per-operation families (stats, operation rates)
    latency_count: int


def _template(metric: str, tails: Sequence[tuple[int, str]]) -> str | None:
    if not tails:
        return None
    head = metric + "{{{0}"
    return "".join(
        head + tail.replace("{", "{{").replace("}", "}}") + " {" + str(k + 1) + "}\n"
        for k, tail in tails
    )


class Layouts:
    """One ``Layout`` per distinct (operation names, units), for the operations allow and
    deny lists (an operation is exported when the allowlist is empty or has it, and the
    denylist has not)."""

    def __init__(
        self,
        labels: LabelCache,
        operations: frozenset[str] | None = None,
        deny: frozenset[str] = frozenset(),
    ) -> None:
        self.labels = labels
        self.operations = operations
        self.deny = deny
        self._known: dict[tuple[tuple[str, ...], tuple[str, ...]], Layout] = {}

    def allowed(self, name: str) -> bool:
        return (self.operations is None or name in self.operations) and name not in self.deny

    def of(self, entry: JobEntry) -> Layout:
        names = tuple(entry.ops)
        units = tuple([op.unit for op in entry.ops.values()])
        found = self._known.get((names, units))
        if found is None:
            make_room(self._known)
            found = self._known[(names, units)] = self._make(names, units)
        return found

    def _make(self, names: tuple[str, ...], units: tuple[str, ...]) -> Layout:
        tails = [
            (k, self.labels.operation(name) + "}")
            for k, name in enumerate(names)
            if name not in BYTE_OPERATIONS and self.allowed(name)
        ]
        latency = [(k, tail) for k, tail in tails if units[k] == "usecs"]

        def index(name: str) -> int:
            return names.index(name) if name in names and self.allowed(name) else -1

        return Layout(
            names,
            index("read_bytes"),
            index("write_bytes"),
            _template(STATS[0], tails),
            _template(LATENCY[0], latency),
            _template(OPS_RATE[0], tails),
            len(tails),
            len(latency),
        )


@dataclass(slots=True, eq=False)
class TargetBlock:
    """One target's jobs, packed: what the exposition needs and nothing else.

    Per job: its label text and layout, ``SIZES_PER_JOB`` numbers in ``sizes`` and the read
    and write rates in ``byte_rates``; per operation of each job (jobs one after the other):
    ``samples``, ``seconds`` (latency) and ``rates``. Rates are NaN for a job without a rate
    (``rated`` is 0), and the rate arrays are None when rates are off. Arrays hold 8 bytes per
    number, no Python objects; ``render_blocks`` frees each one once written.
    """

    labels: list[str]
    layouts: list[Layout]
    sizes: array | None
    samples: array | None
    seconds: array | None
    byte_rates: array | None
    rates: array | None
    rated: bytearray


def pack_target(
    entries: Sequence[JobEntry],
    labels: list[str],
    layouts: Layouts,
    rates: Mapping[str, tuple[tuple[str, ...], tuple[float, ...]]] | None,
) -> TargetBlock:
    """``entries`` with their label text and rates (None: rates are off) -> a TargetBlock.

    A job's rates are in the order of its operations, as ``RateTracker.update`` gives them."""
    rating = rates is not None
    # Filled through locals, typed as never None; the block holds no rate arrays without rates.
    sizes, samples, seconds = array("Q"), array("Q"), array("d")
    byte_rates, op_rates = array("d"), array("d")
    block = TargetBlock(
        labels,
        [],
        sizes,
        samples,
        seconds,
        byte_rates if rating else None,
        op_rates if rating else None,
        bytearray(len(entries)),
    )
    nan = float("nan")
    for number, entry in enumerate(entries):
        layout = layouts.of(entry)
        block.layouts.append(layout)
        ops = entry.ops.values()
        for name in BYTE_OPERATIONS:
            op = entry.ops.get(name)
            sizes.extend((0, 0, 0, 0) if op is None else (op.samples, op.sum, op.min, op.max))
        samples.extend([op.samples for op in ops])
        seconds.extend([op.sum / USECS_PER_SECOND if op.unit == "usecs" else 0.0 for op in ops])
        if rating:
            found = rates.get(entry.jobid)
            if found is None:
                op_rates.extend([nan] * len(layout.names))
                byte_rates.extend((nan, nan))
            else:
                values = found[1]
                op_rates.extend(values)
                byte_rates.extend(
                    [nan if index < 0 else values[index] for index in (layout.read, layout.write)]
                )
                block.rated[number] = 1
    return block


class _Writer:
    """Families written one after another into one growing buffer, in chunks of jobs, so no
    full-size list of strings ever exists; a header only once its family has a sample."""

    CHUNK = 1024

    def __init__(self, buffer: io.BytesIO) -> None:
        self.buffer = buffer
        self.parts: list[str] = []
        self._header = b""

    def begin(self, spec: tuple[str, str, str]) -> list[str]:
        name, kind, help_text = spec
        self._header = f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n".encode()
        self.parts = []
        return self.parts

    def flush(self) -> None:
        if self.parts:
            if self._header:
                self.buffer.write(self._header)
                self._header = b""
            self.buffer.write("".join(self.parts).encode("utf-8"))
            self.parts.clear()


def render_blocks(
    blocks: Sequence[TargetBlock],
    buffer: io.BytesIO,
    rates: Container[str] = ("read_bytes", "write_bytes", "operations"),
) -> None:
    """Write every per-job family of these targets to ``buffer``, with the rate families
    named in ``rates``; the blocks' arrays are released as soon as no family needs them."""
    out = _Writer(buffer)
    for number, spec in enumerate(SIZE_FAMILIES):
        _render_per_job(blocks, out, spec, "sizes", number, SIZES_PER_JOB)
    _release(blocks, "sizes")
    _render_per_operation(blocks, out, STATS, "stats", "samples")
    _release(blocks, "samples")
    _render_per_operation(blocks, out, LATENCY, "latency", "seconds")
    _release(blocks, "seconds")
    if "read_bytes" in rates:
        _render_per_job(blocks, out, READ_RATE, "byte_rates", 0, 2)
    if "write_bytes" in rates:
        _render_per_job(blocks, out, WRITE_RATE, "byte_rates", 1, 2)
    _release(blocks, "byte_rates")
    if "operations" in rates:
        _render_per_operation(blocks, out, OPS_RATE, "rates", "rates")
    _release(blocks, "rates")


def _release(blocks: Sequence[TargetBlock], name: str) -> None:
    for block in blocks:
        setattr(block, name, None)


def _render_per_job(
    blocks: Sequence[TargetBlock],
    out: _Writer,
    spec: tuple[str, str, str],
    values_of: str,
    first: int,
    stride: int,
) -> None:
    """A family with one series per job; the value is every ``stride``-th number of
    ``values_of`` from ``first``. NaN (no rate) and jobs without the operation are left out."""
    line = (spec[0] + "{{{}}} {}\n").format
    parts = out.begin(spec)
    for block in blocks:
        values = getattr(block, values_of)
        if values is None:
            continue
        values = values[first::stride]
        if values_of == "sizes":
            reading = first < SIZES_PER_JOB // 2
            present = [(layout.read if reading else layout.write) >= 0 for layout in block.layouts]
        else:
            present = [value == value for value in values]  # NaN != NaN
        parts.extend(map(line, compress(block.labels, present), compress(values, present)))
        out.flush()


def _render_per_operation(
    blocks: Sequence[TargetBlock],
    out: _Writer,
    spec: tuple[str, str, str],
    template_of: str,
    values_of: str,
) -> None:
    """A family with one series per operation: one ``str.format`` per job."""
    parts = out.begin(spec)
    for block in blocks:
        values = getattr(block, values_of)
        if values is None:
            continue
        rated_only = values_of == "rates"
        at = 0
        for job, (text, layout) in enumerate(zip(block.labels, block.layouts, strict=True)):
            width = len(layout.names)
            template = getattr(layout, template_of)
            if template is not None and (block.rated[job] or not rated_only):
                parts.append(template.format(text, *values[at : at + width]))
                if len(parts) >= _Writer.CHUNK:
                    out.flush()
            at += width
        out.flush()
