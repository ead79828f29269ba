"""Read a binary .darshan log through PyDarshan into the common typed records.

Only the modules that carry I/O counters and the HEATMAP module are read; DXT, LUSTRE, APMPI
and APXC are skipped (they are the bulk of big logs and give no signal).

darshan-util can crash (segfault, assert) on damaged logs, so ``read_darshan_logs_isolated``
reads them in a forked child. One child serves all the logs of a call in turn and hands each
back as a few whole arrays (one matrix per module, one per heatmap), which cost little to
send; it reads the next logs while the caller works on the ones it handed back, and is
replaced after any log that crashed it, made darshan-util complain or failed in darshan-util
(a file refused before darshan-util sees it, e.g. empty, leaves it in use).
"""

from __future__ import annotations

import atexit
import faulthandler
import functools
import gc
import math
import os
import select
import signal
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any

import numpy as np

from hpcmon.post_job.darshan.model import (
    HEATMAP,
    HEATMAP_IDS,
    IO_MODULES,
    SKIPPED_MODULES,
    DarshanLog,
    HeatmapRecord,
    JobInfo,
    ModuleTable,
    is_record_id_counter,
    partial_warning,
)
from hpcmon.post_job.files import open_regular_file
from hpcmon.post_job.problems import SourceError

# A Darshan log starts with its format version string, e.g. b"3.41\0\0\0\0".
_MAGIC_PREFIXES = (b"3.", b"2.")
_CLOSE_TIMEOUT = 10.0  # seconds darshan_log_close may take
# Logs sent to the child beyond the one the caller waits for: it reads them while the caller
# works on the logs handed back (a job of 48 small logs: 1 gains less than half of what 8
# gains; more gain nothing).
_READ_AHEAD = 8
_SPARSE_FROM = 4096  # heatmap bins in a matrix from which only the non-zero ones may be sent
# A wait polls the pipe for up to this long before it sleeps: a small log's whole exchange
# takes under a millisecond, and waking a sleeping process costs about 0.1 ms each time (more
# on a virtual machine), a third of such a log's read. Only with two CPUs or more to run on:
# with one, the spinning side would hold up the other.
_SPIN_SECONDS = 0.002


@dataclass
class _PackedTable:
    """One module as whole matrices (one row per record): cheap to send between processes."""

    module: str
    record_ids: np.ndarray
    ranks: np.ndarray
    int_names: tuple[str, ...]
    ints: np.ndarray  # records x counters, int64
    float_names: tuple[str, ...]
    floats: np.ndarray  # records x fcounters, float64
    partial: bool = False

    def unpack(self) -> ModuleTable:
        return ModuleTable(
            module=self.module,
            record_ids=self.record_ids,
            ranks=self.ranks,
            counters={name: self.ints[:, i] for i, name in enumerate(self.int_names)},
            fcounters={name: self.floats[:, i] for i, name in enumerate(self.float_names)},
            partial=self.partial,
        )


@dataclass
class _Bins:
    """A matrix of heatmap bins in few bytes to send: heatmaps are mostly zeros, so only the
    non-zero bins and their flat positions when they are at most half of them (in a matrix of
    ``_SPARSE_FROM`` bins or more: a smaller one costs less whole than as two arrays)."""

    shape: tuple[int, ...]
    values: np.ndarray  # every bin, or the non-zero ones (uint32 when they fit)
    positions: np.ndarray | None = None  # of the non-zero ones, in the flat matrix

    def matrix(self) -> np.ndarray:
        """The bins as an int64 matrix."""
        if self.positions is None:
            return self.values.astype(np.int64)
        bins = np.zeros(self.shape, dtype=np.int64)
        bins.flat[self.positions] = self.values
        return bins


@dataclass
class _PackedHeatmap:
    """The ranks of one HEATMAP submodule that have the same number of bins, as matrices."""

    submodule: str
    record_id: int
    bin_width: float
    ranks: np.ndarray
    reads: _Bins  # ranks x bins
    writes: _Bins

    def unpack(self) -> list[HeatmapRecord]:
        reads, writes = self.reads.matrix(), self.writes.matrix()
        submodule, record_id, width = self.submodule, self.record_id, self.bin_width
        return [
            HeatmapRecord(submodule, rank, record_id, width, read, written)
            for rank, read, written in zip(self.ranks.tolist(), reads, writes, strict=True)
        ]


@dataclass
class _PackedLog:
    """A log as read in the child: ``log`` holds all but the modules and heatmaps."""

    log: DarshanLog
    tables: list[_PackedTable]
    heatmaps: list[_PackedHeatmap]

    def unpack(self) -> DarshanLog:
        self.log.modules = {table.module: table.unpack() for table in self.tables}
        self.log.heatmaps = [record for packed in self.heatmaps for record in packed.unpack()]
        return self.log


def read_darshan_log(path: str | Path, header: bool = False) -> DarshanLog:
    """Read one binary log in this process; raise SourceError when nothing can be read.
    ``header``: also darshan-parser's header block (``JobInfo.header_lines``), which needs the
    log's mount table."""
    path = Path(path)
    with _open_report(path) as report:
        return _read_report(path, report, header).unpack()


class _NotALog(SourceError):
    """A file refused before darshan-util saw it (empty, not a regular file, no Darshan
    version string): the reader child stays fit for the next log."""


def _open_report(path: Path):
    """PyDarshan's report of ``path``, once the file opened looks like a log."""
    # darshan-util opens the name it is given with a plain open(): a FIFO put there since the
    # check would block it, so it is given the file we opened and checked (through /proc)
    try:
        fd = open_regular_file(path)
    except SourceError as exc:
        raise _NotALog(str(exc)) from None
    try:
        _check_looks_like_log(path, fd)
        name = f"/proc/self/fd/{fd}" if _has_proc_fds() else str(path)
        return _report_class()(name, read_all=False)
    except SourceError:
        raise
    except Exception as exc:  # the C library reports failures as RuntimeError and others
        raise SourceError(f"{path}: not a readable Darshan log ({exc})") from exc
    finally:
        os.close(fd)  # darshan-util holds its own descriptor of the file


@functools.cache
def _report_class() -> type:
    """PyDarshan's DarshanReport without the mount table: reading it is most of the time of
    opening a small log (40 of 60 us), and only the header block needs it (``_mounts``)."""
    import darshan  # deferred: importing PyDarshan loads its C library (slow)
    from darshan.backend import cffi_backend as backend

    class LogReport(darshan.DarshanReport):
        data: dict[str, Any]  # PyDarshan's is typed by its first entry (an int) alone

        def read_metadata(self) -> None:
            # DarshanReport.read_metadata less the mount table (a test holds the two equal)
            self.metadata["job"] = backend.log_get_job(self.log)
            self.metadata["exe"] = backend.log_get_exe(self.log)
            self.data["modules"] = backend.log_get_modules(self.log)
            self._modules = self.data["modules"]

    return LogReport


def _mounts(report) -> list[tuple[str, str]]:
    """The log's mount table: (mount point, file system type) per entry."""
    from darshan.backend import cffi_backend as backend

    return backend.log_get_mounts(report.log)


@functools.cache
def _has_proc_fds() -> bool:
    """Whether this system names open files /proc/self/fd/N (Linux): looked at once."""
    return os.path.isdir("/proc/self/fd")


def read_darshan_log_isolated(
    path: str | Path, timeout: float = 600.0, header: bool = False
) -> DarshanLog:
    """One log read in a child process (see ``read_darshan_logs_isolated``)."""
    ((_, outcome),) = read_darshan_logs_isolated([Path(path)], timeout, header)
    if isinstance(outcome, SourceError):
        raise outcome
    return outcome


def read_darshan_logs_isolated(
    paths: Iterable[Path], timeout: float = 600.0, header: bool = False
) -> Iterator[tuple[Path, DarshanLog | SourceError]]:
    """(path, log or error) for each path, read in a forked child so that a crash inside
    darshan-util costs only the log being read, never the caller.

    The child is forked once per process and kept for the next logs and calls (the fork of a
    process holding numpy, pandas and darshan-util costs more than reading a small log); it
    is replaced after any log that crashed or hung it, made darshan-util complain or failed
    in darshan-util (a file refused before, e.g. empty, leaves it in use). It is sent the next
    logs ahead (``_READ_AHEAD``) and reads them while the caller works on the ones handed
    back; the logs after one that needs a fresh child are sent again to the new one (one call
    at a time: a call finds the child idle, or replaces it). ``timeout`` counts from the
    moment the child could start the log. darshan-util reports truncated module data only on
    stderr: the child's stderr is captured and each message becomes a problem naming the
    file. ``header``: see ``read_darshan_log``.
    """
    paths = [Path(path) for path in paths]
    return _handed_back(paths, _start_reading(paths, header), timeout, header)


def _start_reading(paths: list[Path], header: bool) -> _ReaderChild | None:
    """The reader child, sent the first logs at once: it reads them while the caller gets
    ready for them. None when it cannot be forked (``_handed_back`` tries again and says)."""
    if not paths:
        return None
    try:
        reading = _reader_child()
        _send_ahead(reading, paths, 0, header)
    except Exception:
        return None
    return reading


def _send_ahead(reading: _ReaderChild, paths: list[Path], done: int, header: bool) -> None:
    """Send ``reading`` the logs after the ``done`` handed back, up to ``_READ_AHEAD`` ahead
    of the one the caller waits for."""
    while reading.pending <= _READ_AHEAD and done + reading.pending < len(paths):
        reading.send(paths[done + reading.pending], header)


def _handed_back(
    paths: list[Path], reading: _ReaderChild | None, timeout: float, header: bool
) -> Iterator[tuple[Path, DarshanLog | SourceError]]:
    for done, path in enumerate(paths):  # ``done``: how many were handed back
        try:
            if reading is None or reading is not _CHILD:
                reading = _reader_child()
            _send_ahead(reading, paths, done, header)
            outcome, healthy = reading.read(path, timeout)
        except Exception as exc:  # fork failed, garbage on the pipe, ...: never raise
            outcome = SourceError(
                f"{path}: cannot read the log in a child process ({type(exc).__name__}: {exc})"
            )
            healthy = False
        if not healthy:  # crashed, hung, damaged log: the logs after it go to a fresh child
            close_reader_child()
        yield path, outcome


_CHILD: _ReaderChild | None = None


def _reader_child() -> _ReaderChild:
    """This process's reader child, idle (a child inherited through a fork is not ours; one
    that died or still has logs of a call that stopped early is replaced)."""
    global _CHILD
    if _CHILD is not None and _CHILD.owner == os.getpid():
        if _CHILD.pending or not _CHILD.alive():  # killed from outside, or busy: fork anew
            close_reader_child()
    if _CHILD is None or _CHILD.owner != os.getpid():
        import darshan  # noqa: F401  (loaded once here, inherited by the child)

        _CHILD = _ReaderChild()
    return _CHILD


def close_reader_child() -> None:
    """End this process's reader child (the next read forks a new one)."""
    global _CHILD
    if _CHILD is not None and _CHILD.owner == os.getpid():
        _CHILD.close()
    _CHILD = None


atexit.register(close_reader_child)


def _forget_inherited_child() -> None:
    """After a fork the parent's reader child is not this process's: drop it at once (its
    pipe and stderr file close with it, here only) rather than keep descriptor numbers that
    the new process may close and reuse (the bounded reading child closes inherited ones)."""
    global _CHILD
    _CHILD = None


os.register_at_fork(after_in_child=_forget_inherited_child)


class _ReaderChild:
    """A forked process that reads the logs it is sent, one at a time, in the order sent."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.pending = 0  # logs sent whose exchange has not ended
        self._started = 0.0  # when the child could start the first pending log
        self._stderr = tempfile.TemporaryFile()
        self._stderr_read = 0
        self._spin = _cpus() > 1
        self._conn, child_conn = Pipe(duplex=True)
        self.pid = os.fork()
        if self.pid == 0:  # the child: serve until the parent hangs up, never return
            try:
                self._conn.close()
                _serve(child_conn, self._stderr.fileno(), self._spin)
            finally:
                os._exit(0)  # skip atexit handlers and destructors inherited from the parent
        child_conn.close()
        self._poller = _poller(self._conn)

    def alive(self) -> bool:
        try:
            finished, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        if finished:
            self.pid = 0
        return not finished

    def send(self, path: Path, header: bool) -> None:
        """Queue a log: the child reads it once done with the ones sent before."""
        try:
            self._conn.send((str(path), header))
        except OSError:  # the child died: ``read`` tells how
            pass
        if not self.pending:
            self._started = time.monotonic()
        self.pending += 1

    def read(self, path: Path, timeout: float) -> tuple[DarshanLog | SourceError, bool]:
        """The first pending log, ``path``: (log or error, whether this child can be trusted
        with the next log). An exception leaves the child pending: it is not used again."""
        outcome, healthy = self._receive(path, timeout)
        self.pending -= 1
        self._started = time.monotonic()  # the child goes on with the next log sent, if any
        return outcome, healthy

    def _receive(self, path: Path, timeout: float) -> tuple[DarshanLog | SourceError, bool]:
        reply = closed = None
        hung = False
        try:
            hung = not _wait(self._poller, self._started + timeout, self._spin)
            if not hung:
                reply = self._conn.recv()
        except (EOFError, OSError):  # the child died: it closed its end of the pipe
            pass
        if reply is None:
            problems = self._problems(path)
            detail = f" ({problems[-1].split(': ', 2)[2]})" if problems else ""
            how = self._fate(hung, timeout)
            return SourceError(f"{path}: PyDarshan {how} reading the log{detail}"), False
        if isinstance(reply, SourceError) and not isinstance(reply, _NotALog):
            return reply, False  # failed in darshan-util: not trusted with the next log
        outcome = reply if isinstance(reply, _NotALog) else reply.unpack()  # while it closes
        try:
            hung = not _wait(self._poller, time.monotonic() + _CLOSE_TIMEOUT, self._spin)
            if not hung:
                closed = self._conn.recv()  # the size of its stderr file once it closed the log
        except (EOFError, OSError):
            pass
        problems = self._problems(path, closed if isinstance(closed, int) else None)
        if not isinstance(closed, int):
            how = self._fate(hung, _CLOSE_TIMEOUT)
            problems.append(f"{path}: darshan-util {how} closing the log")
        healthy = isinstance(closed, int) and not problems
        if isinstance(outcome, _NotALog):
            return SourceError(str(outcome)), healthy
        outcome.problems = problems + outcome.problems
        return outcome, healthy

    def _problems(self, path: Path, end: int | None = None) -> list[str]:
        """What the child wrote to stderr since the last call, up to ``end`` (the rest is about
        the next log) or all of it, as problems of ``path``. pread: the child's file offset is
        shared with ours and must not move."""
        fd = self._stderr.fileno()
        if end is None:
            end = os.fstat(fd).st_size
        if end == self._stderr_read:  # the usual case: nothing new
            return []
        data = os.pread(fd, end - self._stderr_read, self._stderr_read)
        self._stderr_read = end
        lines = data.decode("utf-8", "replace").splitlines()
        return [f"{path}: darshan-util: {line.strip()}" for line in lines if line.strip()]

    def _fate(self, hung: bool, timeout: float) -> str:
        """How the child ended, for the error message (a hung child is killed first)."""
        if hung:
            os.kill(self.pid, signal.SIGKILL)
        _, status = os.waitpid(self.pid, 0)  # it is dead or dying: its end of the pipe closed
        self.pid = 0
        if hung:
            return f"did not finish within {timeout:.0f} s"
        code = os.waitstatus_to_exitcode(status)
        return f"crashed with signal {signal.Signals(-code).name}" if code < 0 else f"exited {code}"

    def close(self) -> None:
        """Hang up and kill the child without waiting: its exit (unmapping a copy of this
        process) costs milliseconds; it is reaped at the next close."""
        self._conn.close()
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _EXITING.append(self.pid)
            self.pid = 0
        self._stderr.close()
        _reap_exited()


_EXITING: list[int] = []  # children told to exit and not yet reaped


def _reap_exited() -> None:
    for pid in list(_EXITING):
        try:
            finished, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            finished = pid
        if finished:
            _EXITING.remove(pid)


def _cpus() -> int:
    """The CPUs this process may run on (all of the machine's where the system cannot say)."""
    if hasattr(os, "sched_getaffinity"):  # Linux
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _poller(conn: Connection) -> select.poll:
    """A poll object watching ``conn`` (``Connection.poll`` builds a selector on every call,
    10 us: as much as a small log's reply takes to arrive)."""
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return poller


def _wait(poller: select.poll, deadline: float | None, spin: bool) -> bool:
    """Whether the connection ``poller`` watches has something to read (or its other end
    closed) by ``deadline`` (``time.monotonic``; None: no limit); ``spin``: poll for
    ``_SPIN_SECONDS`` first."""
    if spin:
        spin_end = time.monotonic() + _SPIN_SECONDS
        if deadline is not None:
            spin_end = min(spin_end, deadline)
        while True:
            if poller.poll(0):
                return True
            if time.monotonic() >= spin_end:
                break
            os.sched_yield()  # whatever else wants this CPU goes first
    if deadline is None:
        return bool(poller.poll())
    return bool(poller.poll(math.ceil(max(0.0, deadline - time.monotonic()) * 1000)))


def _serve(conn: Connection, stderr_fd: int, spin: bool) -> None:
    """The child's loop: read each log it is sent, send it back, close the log handle, then
    send the size of its stderr file (what it holds so far is about this log and earlier)."""
    faulthandler.disable()  # a crash here is reported by the parent, not dumped on stderr
    os.dup2(stderr_fd, 2)
    gc.freeze()  # the parent's objects: never scanned by the child's collector
    poller = _poller(conn)
    while True:
        try:
            _wait(poller, None, spin)
            name, header = conn.recv()
        except EOFError:
            return
        path = Path(name)
        report = None
        try:
            report = _open_report(path)
            result: _PackedLog | SourceError = _read_report(path, report, header)
        except SourceError as exc:
            result = exc
        except Exception as exc:
            result = SourceError(f"{path}: cannot read the log ({type(exc).__name__})")
        conn.send(result)
        del result
        if report is not None:
            report.__exit__(None, None, None)  # darshan_log_close: may abort on a damaged log
        conn.send(os.fstat(2).st_size)


def _check_looks_like_log(path: Path, fd: int) -> None:
    """Refuse (``_NotALog``) the file open as ``fd`` unless it starts as a Darshan log."""
    try:
        head = os.pread(fd, 8, 0)
    except OSError as exc:
        raise _NotALog(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not head:
        raise _NotALog(f"{path}: empty file, not a Darshan log")
    if not head.startswith(_MAGIC_PREFIXES):
        raise _NotALog(f"{path}: not a Darshan log: bad magic (no version header)")


def _read_report(path: Path, report, header: bool) -> _PackedLog:
    job = _job_info(report)
    log = DarshanLog(source=str(path), job=job)
    packed = _PackedLog(log, [], [])
    module_info = dict(report.modules)
    if module_info:
        try:
            report.read_name_records()
            log.names = {int(k): str(v) for k, v in report.name_records.items()}
        except Exception as exc:
            log.problems.append(f"{path}: cannot read the record name table ({type(exc).__name__})")
    for module, info in module_info.items():
        if info.get("partial_flag"):
            log.partial_modules.append(module)
            log.warnings.append(partial_warning(path, module))
        if module in IO_MODULES:
            table = _read_module(path, report, module, log.problems)
            if table is not None:
                table.partial = bool(info.get("partial_flag"))
                packed.tables.append(table)
        elif module == HEATMAP:
            packed.heatmaps = _read_heatmaps(path, report, log.names, log.problems)
        elif module in SKIPPED_MODULES:
            log.skipped_modules.append(module)
        else:
            log.problems.append(f"{path}: a module unknown to this reader skipped")
    if header:
        try:
            mounts = _mounts(report)
        except Exception as exc:
            log.problems.append(f"{path}: cannot read the mount table ({type(exc).__name__})")
            mounts = []
        job.header_lines = _header_lines(job, module_info, mounts)
    return packed


def _job_info(report) -> JobInfo:
    meta = report.metadata["job"]
    return JobInfo(
        log_jobid=str(meta.get("jobid", "")),
        uid=int(meta["uid"]) if meta.get("uid") is not None else None,
        nprocs=int(meta.get("nprocs", 0)),
        start_time=int(meta.get("start_time_sec", 0)),
        end_time=int(meta.get("end_time_sec", 0)),
        run_time=float(meta.get("run_time", 0.0)),
        exe=str(report.metadata.get("exe", "")),
        log_version=str(meta.get("log_ver", "")),
        metadata={str(k): str(v) for k, v in (meta.get("metadata") or {}).items()},
    )


@functools.cache
def _counter_layout(module: str) -> tuple[np.ndarray, tuple[str, ...], tuple[str, ...]]:
    """The positions and names of a module's integer counters that we keep (not the record
    ids some modules hold in counters), and its float counter names: once per module."""
    from darshan.backend import cffi_backend as backend

    names, fnames = backend.counter_names(module), backend.fcounter_names(module)
    if names is None or fnames is None:  # a module this darshan-util does not know
        raise TypeError(f"darshan-util has no counter names for module {module}")
    kept = np.array([i for i, name in enumerate(names) if not is_record_id_counter(name)], np.intp)
    kept.flags.writeable = False
    return kept, tuple(names[i] for i in kept), tuple(fnames)


def _read_module(path: Path, report, module: str, problems: list[str]) -> _PackedTable | None:
    try:
        report.mod_read_all_records(module, dtype="numpy", warnings=False)
        # taken out of the report: the collection refers back to the report, a cycle (holding
        # the module's arrays) that only a full garbage collection would free
        collection = report.records.pop(module)
        # its records as PyDarshan keeps them (dicts): iterating the collection wraps each one
        # in a new collection first, which costs more than reading it
        records = list(getattr(collection, "_records", None) or collection)
        kept, counter_names, fcounter_names = _counter_layout(module)
    except Exception as exc:
        problems.append(f"{path}: cannot read module {module} ({type(exc).__name__}); skipped")
        return None
    n = len(records)
    ids = np.fromiter((rec["id"] for rec in records), dtype=np.uint64, count=n)
    ranks = np.fromiter((rec["rank"] for rec in records), dtype=np.int64, count=n)
    order = np.lexsort((ids, ranks))
    if (order[1:] < order[:-1]).any():  # in (rank, record_id) order, as the signals take them:
        ids, ranks = ids[order], ranks[order]  # reordered here once, not column by column there
        records = [records[i] for i in order.tolist()]
    if n:
        ints = np.stack([rec["counters"] for rec in records])[:, kept].astype(np.int64)
        floats = np.stack([rec["fcounters"] for rec in records]).astype(np.float64)
    else:
        ints = np.zeros((0, len(kept)), dtype=np.int64)
        floats = np.zeros((0, len(fcounter_names)), dtype=np.float64)
    return _PackedTable(module, ids, ranks, counter_names, ints, fcounter_names, floats)


def _read_heatmaps(path: Path, report, names: dict[int, str], problems) -> list[_PackedHeatmap]:
    try:
        report.read_all_heatmap_records()
    except Exception as exc:
        problems.append(f"{path}: cannot read the HEATMAP module ({type(exc).__name__}); skipped")
        return []
    ids_by_name = {name: rid for rid, name in names.items() if name.startswith("heatmap:")}
    packed: list[_PackedHeatmap] = []
    for submodule, heatmap in report.heatmaps.items():
        width = float(heatmap._bin_width_seconds or 0.0)
        known_id = next((rid for rid, name in HEATMAP_IDS.items() if name == submodule), 0)
        record_id = int(ids_by_name.get(f"heatmap:{submodule}", known_id))
        block = _heatmap_block(heatmap)
        if block is not None:  # the usual case: every rank has both series, of one length
            ranks, reads, writes = block
            packed.append(
                _PackedHeatmap(
                    str(submodule),
                    record_id,
                    width,
                    ranks,
                    _compact(reads),
                    _compact(writes),
                )
            )
            continue
        by_length: dict[int, list[tuple[int, np.ndarray, np.ndarray]]] = {}
        for rank, reads, writes in _heatmap_bins(heatmap):
            reads = np.asarray(reads, dtype=np.int64)
            writes = np.asarray(writes, dtype=np.int64)
            length = max(len(reads), len(writes))
            if len(reads) != len(writes):  # not seen in real logs; pad the shorter with 0
                reads = np.pad(reads, (0, length - len(reads)))
                writes = np.pad(writes, (0, length - len(writes)))
            by_length.setdefault(length, []).append((int(rank), reads, writes))
        for rows in by_length.values():
            packed.append(
                _PackedHeatmap(
                    submodule=str(submodule),
                    record_id=record_id,
                    bin_width=width,
                    ranks=np.array([rank for rank, _, _ in rows], dtype=np.int64),
                    reads=_compact(np.array([r for _, r, _ in rows], dtype=np.int64)),
                    writes=_compact(np.array([w for _, _, w in rows], dtype=np.int64)),
                )
            )
    return packed


def _heatmap_block(heatmap) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(ranks, read bins, write bins) of a PyDarshan Heatmap as whole matrices, when its
    per-rank arrays (``_data``) all have one length and both directions; else None."""
    data = getattr(heatmap, "_data", None)
    if not (isinstance(data, dict) and isinstance(data.get("read"), dict)):
        return None
    reads, writes = data["read"], data.get("write")
    if not isinstance(writes, dict) or not reads or reads.keys() != writes.keys():
        return None
    ranks = sorted(reads)
    try:
        read = np.stack([reads[rank] for rank in ranks]).astype(np.int64, copy=False)
        write = np.stack([writes[rank] for rank in ranks]).astype(np.int64, copy=False)
    except (ValueError, TypeError):  # ragged or odd arrays: the general path
        return None
    if read.ndim != 2 or read.shape != write.shape:
        return None
    return np.array(ranks, dtype=np.int64), read, write


def _compact(bins: np.ndarray) -> _Bins:
    """Bins (ranks x bins, any of them 0) as few bytes as they take to send to the parent
    (see ``_Bins``)."""
    if bins.size >= _SPARSE_FROM:
        positions = np.flatnonzero(bins != 0)  # on a mask: numpy's fast path, 7x faster
        if 2 * positions.size <= bins.size:
            return _Bins(bins.shape, _narrow(bins.ravel()[positions]), _narrow(positions))
    return _Bins(bins.shape, _narrow(bins))


def _narrow(numbers: np.ndarray) -> np.ndarray:
    """As uint32 when they fit (they usually do): half the bytes of int64."""
    if numbers.size and 0 <= numbers.min() and numbers.max() <= np.iinfo(np.uint32).max:
        return numbers.astype(np.uint32)
    return numbers


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


def _header_lines(job: JobInfo, module_info: dict, mounts: list[tuple[str, str]]) -> list[str]:
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
    for mount_point, fs_type in mounts:
        lines.append(f"# mount entry:\t{mount_point}\t{fs_type}")
    return lines


def _asctime(epoch: int) -> str:
    return time.asctime(time.gmtime(epoch))
