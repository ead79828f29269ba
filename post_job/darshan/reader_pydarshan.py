"""Read a binary .darshan log through PyDarshan into the common typed records.

Only the modules that carry I/O counters and the HEATMAP module are read; DXT, LUSTRE, APMPI
and APXC are skipped (they are the bulk of big logs and give no signal).
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import signal
import tempfile
import time
from pathlib import Path

import numpy as np

from post_job.darshan.model import (
    HEATMAP,
    IO_MODULES,
    SKIPPED_MODULES,
    DarshanLog,
    HeatmapRecord,
    JobInfo,
    ModuleTable,
    is_record_id_counter,
    round_like_parser,
)

# A Darshan log starts with its format version string, e.g. b"3.41\0\0\0\0".
_MAGIC_PREFIXES = (b"3.", b"2.")


class DarshanReadError(Exception):
    """The log cannot be read at all; the message names the file and the problem."""


def read_darshan_log(path: str | Path) -> DarshanLog:
    """Read one binary log; raise DarshanReadError when nothing usable can be read."""
    path = Path(path)
    _check_looks_like_log(path)
    import darshan  # deferred: importing PyDarshan loads its C library (slow)

    try:
        report = darshan.DarshanReport(str(path), read_all=False)
    except Exception as exc:  # the C library reports failures as RuntimeError and others
        raise DarshanReadError(f"{path}: not a readable Darshan log ({exc})") from exc
    return _read_report(path, report)


def read_darshan_log_isolated(path: str | Path, timeout: float = 600.0) -> DarshanLog:
    """Read a log in a child process, so a crash inside darshan-util cannot take the job down.

    darshan-util aborts (assert) or reads garbage on some corrupt logs and reports truncated
    module data only on stderr; the child's stderr is captured and each message becomes a
    problem naming the file.
    """
    path = Path(path)
    _check_looks_like_log(path)
    import darshan  # noqa: F401  (loaded once here, inherited by every child)

    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    with tempfile.TemporaryFile() as stderr_file:
        child = context.Process(target=_child_read, args=(path, sender, stderr_file.fileno()))
        child.start()
        sender.close()
        outcome = None
        if receiver.poll(timeout):
            try:
                outcome = receiver.recv()
            except EOFError:
                outcome = None
        child.join(5 if outcome is not None else 0.1)
        if child.is_alive():
            child.kill()
            child.join()
        receiver.close()
        stderr_file.seek(0)
        messages = stderr_file.read().decode("utf-8", "replace").splitlines()
    problems = [f"{path}: darshan-util: {m.strip()}" for m in messages if m.strip()]
    if outcome is None:
        code = child.exitcode
        if code is not None and code < 0:
            how = f"crashed with signal {signal.Signals(-code).name}"
        else:
            how = f"did not finish within {timeout:.0f} s" if code is None else f"exited {code}"
        detail = f" ({problems[-1].split(': ', 1)[1]})" if problems else ""
        raise DarshanReadError(f"{path}: PyDarshan {how} reading the log{detail}")
    if isinstance(outcome, DarshanReadError):
        raise outcome
    outcome.problems = problems + outcome.problems
    return outcome


def _child_read(path: Path, sender, stderr_fd: int) -> None:
    faulthandler.disable()  # a crash here is reported by the parent, not dumped on stderr
    os.dup2(stderr_fd, 2)
    try:
        result: DarshanLog | DarshanReadError = read_darshan_log(path)
    except DarshanReadError as exc:
        result = exc
    except Exception as exc:
        result = DarshanReadError(f"{path}: cannot read the log ({type(exc).__name__}: {exc})")
    sender.send(result)
    sender.close()
    os._exit(0)  # skip PyDarshan's destructors: they may abort on a damaged log handle


def _check_looks_like_log(path: Path) -> None:
    try:
        with path.open("rb") as handle:
            head = handle.read(8)
    except OSError as exc:
        raise DarshanReadError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if not head:
        raise DarshanReadError(f"{path}: empty file, not a Darshan log")
    if not head.startswith(_MAGIC_PREFIXES):
        raise DarshanReadError(f"{path}: not a Darshan log (bad version header {head[:8]!r})")


def _read_report(path: Path, report) -> DarshanLog:
    job = _job_info(report)
    log = DarshanLog(source=str(path), job=job)
    module_info = dict(report.modules)
    if module_info:
        try:
            report.read_name_records()
            log.names = {int(k): str(v) for k, v in report.name_records.items()}
        except Exception as exc:
            log.problems.append(f"{path}: cannot read the record name table ({exc})")
    for module, info in module_info.items():
        if info.get("partial_flag"):
            log.problems.append(
                f"{path}: module {module} is partial (Darshan ran out of memory for records;"
                " its signals cover only the records kept)"
            )
        if module in IO_MODULES:
            table = _read_module(path, report, module, log.problems)
            if table is not None:
                table.partial = bool(info.get("partial_flag"))
                log.modules[module] = table
        elif module == HEATMAP:
            log.heatmaps = _read_heatmaps(path, report, log.names, log.problems)
        elif module in SKIPPED_MODULES:
            log.skipped_modules.append(module)
        else:
            log.problems.append(f"{path}: unknown module {module!r} skipped")
    job.header_lines = _header_lines(job, module_info, report)
    return log


def _job_info(report) -> JobInfo:
    meta = report.metadata["job"]
    return JobInfo(
        log_jobid=str(meta.get("jobid", "")),
        uid=int(meta["uid"]) if meta.get("uid") is not None else None,
        nprocs=int(meta.get("nprocs", 0)),
        start_time=int(meta.get("start_time_sec", 0)),
        end_time=int(meta.get("end_time_sec", 0)),
        run_time=round(float(meta.get("run_time", 0.0)), 4),
        exe=str(report.metadata.get("exe", "")),
        log_version=str(meta.get("log_ver", "")),
        metadata={str(k): str(v) for k, v in (meta.get("metadata") or {}).items()},
    )


def _read_module(path: Path, report, module: str, problems: list[str]) -> ModuleTable | None:
    from darshan.backend import cffi_backend as backend

    try:
        report.mod_read_all_records(module, dtype="numpy", warnings=False)
        records = list(report.records[module])
        counter_names = list(backend.counter_names(module))
        fcounter_names = list(backend.fcounter_names(module))
    except Exception as exc:
        problems.append(f"{path}: cannot read module {module} ({exc}); skipped")
        return None
    n = len(records)
    ids = np.fromiter((rec["id"] for rec in records), dtype=np.uint64, count=n)
    ranks = np.fromiter((rec["rank"] for rec in records), dtype=np.int64, count=n)
    if n:
        ints = np.stack([rec["counters"] for rec in records]).astype(np.int64, copy=False)
        floats = round_like_parser(np.stack([rec["fcounters"] for rec in records]))
    else:
        ints = np.zeros((0, len(counter_names)), dtype=np.int64)
        floats = np.zeros((0, len(fcounter_names)), dtype=np.float64)
    return ModuleTable(
        module=module,
        record_ids=ids,
        ranks=ranks,
        counters={
            name: ints[:, i]
            for i, name in enumerate(counter_names)
            if not is_record_id_counter(name)
        },
        fcounters={name: floats[:, i] for i, name in enumerate(fcounter_names)},
    )


def _read_heatmaps(path: Path, report, names: dict[int, str], problems) -> list[HeatmapRecord]:
    try:
        report.read_all_heatmap_records()
    except Exception as exc:
        problems.append(f"{path}: cannot read the HEATMAP module ({exc}); skipped")
        return []
    ids_by_name = {name: rid for rid, name in names.items() if name.startswith("heatmap:")}
    records: list[HeatmapRecord] = []
    for submodule, heatmap in report.heatmaps.items():
        width = float(round_like_parser(np.array([heatmap._bin_width_seconds or 0.0]))[0])
        record_id = ids_by_name.get(f"heatmap:{submodule}", 0)
        for rank, reads, writes in _heatmap_bins(heatmap):
            records.append(
                HeatmapRecord(
                    submodule=str(submodule),
                    rank=int(rank),
                    record_id=int(record_id),
                    bin_width=width,
                    read_bins=np.asarray(reads, dtype=np.int64),
                    write_bins=np.asarray(writes, dtype=np.int64),
                )
            )
    return records


def _heatmap_bins(heatmap):
    """(rank, read bins, write bins) of a PyDarshan Heatmap.

    Its per-rank arrays (``_data``) are used directly: ``to_df()`` builds pandas frames and
    costs more than reading the whole log; ``to_df()`` remains the fallback.
    """
    data = getattr(heatmap, "_data", None)
    if isinstance(data, dict) and set(data) >= {"read", "write"}:
        for rank in sorted(data["read"]):
            yield rank, data["read"][rank], data["write"].get(rank, [])
        return
    reads = heatmap.to_df(ops=["read"], interval_index=False)
    writes = heatmap.to_df(ops=["write"], interval_index=False)
    for rank, read_row, write_row in zip(
        reads.index, reads.to_numpy(), writes.to_numpy(), strict=True
    ):
        yield rank, read_row, write_row


def _header_lines(job: JobInfo, module_info: dict, report) -> list[str]:
    """The job header block in darshan-parser's layout (what a text archive would hold)."""
    lines = [
        f"# darshan log version: {job.log_version}",
        f"# exe: {job.exe}",
        f"# uid: {job.uid}",
        f"# jobid: {job.log_jobid}",
        f"# start_time: {job.start_time}",
        f"# start_time_asci: {_asctime(job.start_time)}",
        f"# end_time: {job.end_time}",
        f"# end_time_asci: {_asctime(job.end_time)}",
        f"# nprocs: {job.nprocs}",
        f"# run time: {job.run_time:.4f}",
    ]
    lines += [f"# metadata: {key} = {value}" for key, value in job.metadata.items()]
    lines += ["", "# log file regions", "# -------------------------------------------------------"]
    for module, info in module_info.items():
        size, version = info.get("len", 0), info.get("ver")
        lines.append(f"# {module} module: {size} bytes (compressed), ver={version}")
    lines += ["", "# mounted file systems (mount point and fs type)"]
    lines.append("# -------------------------------------------------------")
    for mount_point, fs_type in getattr(report, "mounts", []) or []:
        lines.append(f"# mount entry:\t{mount_point}\t{fs_type}")
    return lines


def _asctime(epoch: int) -> str:
    return time.asctime(time.gmtime(epoch))
