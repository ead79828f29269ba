"""GEOPM's ``geopmsession`` CLI as a child process -> samples.

The child gets the requests on stdin (``SIGNAL DOMAIN INDEX`` lines, ended by a blank line),
``-p PERIOD``, a long ``-t`` so it runs until stopped, and ``--print-header``; it prints a
CSV trace: one header of double-quoted ``"NAME-domain-idx"`` names (``"NAME"`` alone for the
board domain), then one row per period. A trace without header is read with the columns
the requests give, when none uses ``*``. geopmsession is a Python program:
``PYTHONUNBUFFERED=1`` makes it write each row when sampled, not when a pipe buffer fills.
A ``TIME board 0`` request is added to time the rows. If the child dies, read() fails and
the sampler restarts it with backoff; counters are re-based across the restart.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import logging
import math
import os
import queue
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from hpcmon.common.process import stop_process
from hpcmon.exporter.geopm.model import BackendError, Request, Sample, SampleBatch, SignalKey
from hpcmon.exporter.geopm.naming import monotone_from_name, unit_from_name
from hpcmon.exporter.geopm.requests import DOMAINS

log = logging.getLogger("hpcmon.exporter.geopm")
SOURCE = "geopmsession"
RUN_SECONDS = 10 * 365 * 86400  # "-t": longer than any node stays up
MAX_LINE = 1 << 20
TIME_KEY = SignalKey("TIME", "board", 0)
# the child's stdout, line by line: (text, arrival), then None at its end
_Lines = queue.Queue[tuple[str, float] | None]


class TraceFormatError(ValueError):
    pass


def parse_header(line: str, delimiter: str = ",") -> list[SignalKey]:
    """Column keys from a trace header: ``"CPU_ENERGY-package-0"`` or ``"TIME"`` (board 0)."""
    text = line.strip("\r\n")
    if not text.strip():
        raise TraceFormatError("empty header line")
    fields = next(csv.reader([text], delimiter=delimiter))
    keys: list[SignalKey] = []
    for raw in fields:
        name = raw.strip()
        if not name:
            raise TraceFormatError(f"empty column name in header {text[:200]!r}")
        parts = name.rsplit("-", 2)
        if len(parts) == 3 and parts[1] in DOMAINS and parts[2].isascii() and parts[2].isdigit():
            keys.append(SignalKey(parts[0], parts[1], int(parts[2])))
        else:
            keys.append(SignalKey(name, "board", 0))
    if len(set(keys)) != len(keys):
        raise TraceFormatError(f"duplicate column in header {text[:200]!r}")
    return keys


def parse_value(text: str) -> float:
    """One formatted signal: GEOPM prints doubles (%.16g), integers, hex (0x...) or nan.

    Raises ValueError for anything else, including a hex number too big for a double.
    """
    token = text.strip().strip('"')
    try:
        if token[:2].lower() == "0x":
            return float(int(token, 16))
        return float(token)
    except OverflowError:
        raise ValueError(f"too large: {token[:40]!r}") from None


def is_data_line(line: str, delimiter: str = ",") -> bool:
    """True when every field is a number: a row, not a header (``-n``, or an older
    geopmsession, whose header was off by default, run without ``--print-header``)."""
    try:
        for field_text in line.strip("\r\n").split(delimiter):
            parse_value(field_text)
    except ValueError:
        return False
    return True


def parse_row(line: str, columns: int, delimiter: str = ",") -> tuple[list[float], list[str]]:
    """Values of one trace row and the problems found; a wrong field count drops the row."""
    fields = line.strip("\r\n").split(delimiter)
    if len(fields) != columns:
        return [], [f"row has {len(fields)} fields, header has {columns}: {line[:120]!r}"]
    values: list[float] = []
    problems: list[str] = []
    for number, field_text in enumerate(fields, 1):
        try:
            values.append(parse_value(field_text))
        except ValueError:  # includes a hex number too large for a double
            values.append(math.nan)
            problems.append(f"field {number} is not a number: {field_text[:40]!r}")
    return values, problems


@dataclass
class TraceParser:
    """Header then rows, line by line, as geopmsession writes them.

    ``expected``: the columns the requests give when none uses ``*``; a trace without a
    header (its first line is all numbers) is then read with these columns.
    """

    delimiter: str = ","
    keys: list[SignalKey] = field(default_factory=list)
    expected: list[SignalKey] | None = None

    def feed(self, line: str) -> tuple[list[float] | None, list[str]]:
        """(values or None, problems); the first non-blank, non-comment line is the header."""
        if not line.strip() or line.startswith("#"):
            return None, []
        if not self.keys:
            if is_data_line(line, self.delimiter):
                if not self.expected:
                    return None, [f"no header line, first line is data: {line[:120]!r}"]
                self.keys = list(self.expected)
                return self.feed(line)
            try:
                self.keys = parse_header(line, self.delimiter)
            except (TraceFormatError, csv.Error) as exc:
                return None, [f"bad header: {exc}"]
            return None, []
        values, problems = parse_row(line, len(self.keys), self.delimiter)
        return (values or None), problems


def samples_from_row(keys: Sequence[SignalKey], values: Sequence[float]) -> list[Sample]:
    """Samples with unit and monotonicity guessed from the names (the CLI does not say)."""
    return [
        Sample(key, value, monotone_from_name(key.signal), unit_from_name(key.signal))
        for key, value in zip(keys, values, strict=True)
        if key != TIME_KEY
    ]


class GeopmsessionBackend:
    source = SOURCE
    paced = True

    def __init__(
        self,
        path: str,
        requests: Sequence[Request],
        period: float,
        env: dict[str, str] | None = None,
    ) -> None:
        self.path = path
        self.requests = list(requests)
        if not any(r.signal == "TIME" and r.domain == "board" for r in self.requests):
            self.requests.insert(0, Request("TIME", "board", 0))
        self.period = period
        self.env = env
        self.timeout = max(5.0, 5 * period)
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines: _Lines = queue.Queue()
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._parser = self._new_parser()
        self._pending: tuple[list[float], float] | None = None
        self._threads: list[threading.Thread] = []

    def _new_parser(self) -> TraceParser:
        expected = None
        if all(r.index is not None for r in self.requests):
            expected = [SignalKey(r.signal, r.domain, r.index or 0) for r in self.requests]
        return TraceParser(expected=expected)

    # ------------------------------------------------------------ child process
    def command(self) -> list[str]:
        """``--print-header``: needed by older geopmsession versions (header off by default);
        newer ones print it by default and accept the flag as a deprecated no-op. Either way
        the header names the columns."""
        return [self.path, "-p", f"{self.period:g}", "-t", str(RUN_SECONDS), "--print-header"]

    def open(self) -> None:
        """Start the child. geopmsession refuses the whole request list for one signal this
        node lacks (e.g. DRAM_ENERGY on some AMD parts): a signal its error message names is
        dropped with a warning and the child started again."""
        while True:
            try:
                self._start()
                return
            except BackendError as exc:
                refused = {r.signal for r in self.requests if f'"{r.signal}"' in str(exc)}
                kept = [r for r in self.requests if r.signal not in refused - {"TIME"}]
                if len(kept) == len(self.requests) or all(r.signal == "TIME" for r in kept):
                    raise
                log.warning("%s: %s: dropped from the requests", self.path, exc)
                self.requests = kept

    def _start(self) -> None:
        self.close()
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONUNBUFFERED"] = "1"
        try:
            proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise BackendError(f"cannot run {self.path}: {exc.strerror or exc}") from exc
        self._proc = proc
        self._lines = queue.Queue()
        self._stderr.clear()
        self._parser = self._new_parser()
        self._pending = None
        self._threads = [
            threading.Thread(
                target=self._pump_stdout,
                args=(proc, self._lines),
                daemon=True,
                name="geopmsession-stdout",
            ),
            threading.Thread(
                target=self._pump_stderr, args=(proc,), daemon=True, name="geopmsession-stderr"
            ),
        ]
        for thread in self._threads:
            thread.start()
        assert proc.stdin is not None
        try:
            proc.stdin.write(("\n".join(r.line() for r in self.requests) + "\n\n").encode())
            proc.stdin.close()
        except OSError:
            pass  # the child already exited; the header wait below reports why
        deadline = time.monotonic() + self.timeout
        while not self._parser.keys:
            line, arrival = self._next_line(deadline)
            values, problems = self._parser.feed(line)
            if problems:
                self.close()
                raise BackendError(f"{self.path}: {problems[0]}")
            if values is not None:  # no header: the first line was already a row
                self._pending = (values, arrival)

    def _pump_stdout(self, proc: subprocess.Popen[bytes], lines: _Lines) -> None:
        assert proc.stdout is not None
        with contextlib.suppress(OSError, ValueError):
            while True:
                raw = proc.stdout.readline(MAX_LINE)
                if not raw:
                    break
                lines.put((raw.decode("utf-8", "replace"), time.monotonic()))
        lines.put(None)

    def _pump_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        with contextlib.suppress(OSError, ValueError):
            for raw in proc.stderr:
                text = raw.decode("utf-8", "replace").strip()
                if text:
                    self._stderr.append(text[:500])

    def _exit_message(self) -> str:
        proc = self._proc
        code = None
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = proc.wait(timeout=2)
        for thread in self._threads[1:]:
            thread.join(timeout=1)
        detail = " | ".join(self._stderr) or "no message"
        return f"{self.path} exited with status {code}: {detail}"

    def _next_line(self, deadline: float) -> tuple[str, float]:
        remaining = deadline - time.monotonic()
        try:
            item = self._lines.get(timeout=max(0.0, remaining))
        except queue.Empty:
            raise BackendError(f"{self.path}: no output for {self.timeout:g} s") from None
        if item is None:
            raise BackendError(self._exit_message())
        return item

    # ------------------------------------------------------------ backend API
    def read(self) -> SampleBatch:
        """Wait for the next row (the child's -p sets the pace); use the newest if several."""
        if self._proc is None:
            raise BackendError(f"{self.path} is not running")
        deadline = time.monotonic() + self.timeout
        errors: list[str] = []
        latest, self._pending = self._pending, None
        work_started = time.perf_counter()
        while latest is None or not self._lines.empty():
            line, arrival = self._next_line(deadline)
            if latest is None:  # the wait for the child's next row is not work
                work_started = time.perf_counter()
            values, problems = self._parser.feed(line)
            errors.extend(f"{self.path}: {p}" for p in problems)
            if values is not None:
                latest = (values, arrival)
        values, arrival = latest
        keys = self._parser.keys
        when = arrival
        if TIME_KEY in keys:
            session_time = values[keys.index(TIME_KEY)]
            if math.isfinite(session_time):
                when = session_time
        samples = samples_from_row(keys, values)
        return SampleBatch(
            self.source, when, 0, samples, errors, work_seconds=time.perf_counter() - work_started
        )

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        stop_process(proc, timeout=3)
        for thread in self._threads:
            thread.join(timeout=2)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
