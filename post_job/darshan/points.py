"""InfluxDB points from Darshan signals: job, module, top-K records, heatmap and its bins.

Field names are the spec's signal names in lower case; NA signals are left out of the point
and listed in the string field ``na_reasons`` (``signal:reason,...``). Every point is stamped
from the log (job start, or job start + k x bin width), so re-running writes the same points.
"""

from __future__ import annotations

import numpy as np

from hpcmon.common.timeutil import seconds_to_ns
from hpcmon.post_job.darshan.model import JobInfo
from hpcmon.post_job.darshan.signals import NA, LogSignals, RecordSignals, Value
from hpcmon.post_job.points import Point


def _fields(values: dict[str, Value]) -> dict[str, int | float | str]:
    fields: dict[str, int | float | str] = {}
    reasons = []
    for name, value in values.items():
        if isinstance(value, NA):
            reasons.append(f"{name}:{value.reason}")
        else:
            fields[name] = value
    if reasons:
        fields["na_reasons"] = ",".join(reasons)
    return fields


def top_record_rows(records: RecordSignals, top: int) -> np.ndarray:
    """Rows kept as points: the top-K by bytes moved, the top-K by I/O time, all shared files."""
    if len(records) == 0:
        return np.zeros(0, dtype=np.int64)
    moved = records.bytes_read + records.bytes_written
    keep = np.flatnonzero(records.ranks == -1)
    if top > 0:
        by_bytes = np.argsort(-moved, kind="stable")[:top]
        by_time = np.argsort(-records.io_time, kind="stable")[:top]
        keep = np.concatenate([keep, by_bytes, by_time])
    return np.unique(keep)


def log_points(
    job: JobInfo,
    signals: LogSignals,
    base_tags: dict[str, str],
    names: dict[int, str],
    top_records: int,
    *,
    flagged: set[str] = frozenset(),  # type: ignore[assignment]
    partial_modules: list[str] | None = None,
) -> list[Point]:
    """``flagged``: header fields found implausible (left out, listed in ``na_reasons``);
    ``partial_modules``: every module Darshan flagged partial, DXT_* included."""
    start_ns = seconds_to_ns(job.start_time)
    job_fields = _job_fields(job, signals, flagged, partial_modules)
    points = [Point("darshan_job", dict(base_tags), job_fields, start_ns)]
    for module in signals.modules:
        fields = _fields(module.values)
        fields["records"] = module.records
        fields["partial"] = module.partial
        if module.inconsistent:
            fields["inconsistent"] = module.inconsistent
        points.append(
            Point("darshan_module", {**base_tags, "module": module.module}, fields, start_ns)
        )
    for records in signals.records:
        for row in top_record_rows(records, top_records):
            record_id = int(records.record_ids[row])
            tags = {
                **base_tags,
                "module": records.module,
                "rank": str(int(records.ranks[row])),
                "record_id": str(record_id),
            }
            fields = _fields(records.row(int(row)))
            fields["file"] = names.get(record_id, "")
            fields["bytes_read"] = int(records.bytes_read[row])
            fields["bytes_written"] = int(records.bytes_written[row])
            fields["io_time"] = float(records.io_time[row])
            points.append(Point("darshan_record", tags, fields, start_ns))
    for heatmap in signals.heatmap_totals:
        tags = {**base_tags, "module": heatmap.submodule}
        fields = _fields(heatmap.values)
        fields["bin_width"] = float(heatmap.bin_width)
        fields["nbins"] = int(len(heatmap.read_bins))
        points.append(Point("darshan_heatmap", tags, fields, start_ns))
        width = heatmap.bin_width
        reads, writes = heatmap.read_bins.tolist(), heatmap.write_bins.tolist()
        for k, (read, written) in enumerate(zip(reads, writes, strict=True)):
            bin_fields = {"read_bytes": int(read), "write_bytes": int(written), "bin": k}
            points.append(
                Point(
                    "darshan_heatmap_bin",
                    dict(tags),
                    bin_fields,
                    start_ns + seconds_to_ns(k * width),
                )
            )
    return points


def _job_fields(
    job: JobInfo, signals: LogSignals, flagged: set[str], partial_modules: list[str] | None
) -> dict[str, int | float | str]:
    fields = _fields(signals.job)
    fields.update(
        {
            "nprocs": int(job.nprocs),
            "runtime": float(job.run_time),
            "exe": job.exe_name,
            "exe_cmdline": job.exe,
            "log_jobid": job.log_jobid,
            "log_version": job.log_version,
            "start_time": int(job.start_time),
            "end_time": int(job.end_time),
            "modules": ",".join(m.module for m in signals.modules),
            "counted_modules": ",".join(signals.counted_modules),
            "inconsistent_modules": ",".join(m.module for m in signals.modules if m.inconsistent),
            "partial_modules": ",".join(
                partial_modules
                if partial_modules is not None
                else [m.module for m in signals.modules if m.partial]
            ),
        }
    )
    if job.uid is not None:
        fields["uid"] = int(job.uid)
    for name in sorted(flagged):
        fields.pop(name, None)
        reasons = fields.get("na_reasons")
        entry = f"{name}:implausible_header"
        fields["na_reasons"] = f"{reasons},{entry}" if reasons else entry
    if "lib_ver" in job.metadata:
        fields["lib_ver"] = job.metadata["lib_ver"]
    return fields
